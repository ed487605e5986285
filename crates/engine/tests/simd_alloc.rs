//! `simd::widest` / `at_level` run inside training steps (the induction tables'
//! row jobs), which allocate nothing: the dispatch itself must not allocate.
//! Its own test binary, because it counts every allocation of the process.

use mechlab_engine::simd;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn dispatch_allocates_nothing() {
    let xs: Vec<f64> = (0..64).map(|i| i as f64).collect();
    // the first call detects the level (and may read the environment)
    let _ = simd::widest(|| xs.iter().sum::<f64>());
    let before = ALLOCS.load(Ordering::Relaxed);
    let mut total = 0.0;
    for _ in 0..1000 {
        total += simd::widest(
            #[inline(always)]
            || xs.iter().sum::<f64>(),
        );
        for at in [simd::Level::Baseline, simd::level()] {
            total += simd::at_level(at, || xs[3]);
        }
    }
    let after = ALLOCS.load(Ordering::Relaxed);
    assert_eq!(after - before, 0, "dispatch allocated (total {total})");
}
