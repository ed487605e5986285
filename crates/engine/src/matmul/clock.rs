//! An opt-in clock of the small f32 products, to see how fast they run inside a
//! real workload rather than alone in a loop (`bench_direct`). Products go
//! through it only in a build with the engine's `product-clock` feature, which a
//! normal build leaves off, so they pay nothing for it (the tests compile it
//! either way).
//!
//! Every product the direct kernel's shapes cover (whether the direct kernel or
//! `gemm` computes it: `MECHLAB_SIMD=avx2` sends them all to `gemm`) is timed
//! and counted by its operands' layout. With `MECHLAB_PRODUCT_CLOCK=again` each
//! such product is first computed once into a copy of its output, so that the
//! timed call finds its operands in cache: the difference between the two runs
//! is what the workload's memory costs these products.
//!
//! `cargo run --release -p mechlab --example bench_gpt --features
//! mechlab-engine/product-clock -- DIR 20 512` prints [`report`] after its steps.

use super::{direct, dispatch, Op, Product};
use crate::Float;
use gemm_common::Parallelism;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;
use std::time::Instant;

/// The four layouts, `(op_a, op_b)` as `2·[a transposed] + [b transposed]`.
const KINDS: [&str; 4] = [
    "b as stored",
    "b transposed",
    "a transposed",
    "both transposed",
];

struct Totals {
    calls: [AtomicU64; 4],
    flops: [AtomicU64; 4],
    nanos: [AtomicU64; 4],
}

static TOTALS: Totals = Totals {
    calls: [const { AtomicU64::new(0) }; 4],
    flops: [const { AtomicU64::new(0) }; 4],
    nanos: [const { AtomicU64::new(0) }; 4],
};

/// Whether `p` is one of the products this clock times.
pub(super) fn takes<T: Float>(p: &Product<'_, T>, par: Parallelism) -> bool {
    std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>()
        && matches!(par, Parallelism::None)
        && direct::shape_taken(p.op_b, p.m, p.k, p.n)
}

/// Computes `p` (as [`super::gemm_with`] would), timed.
pub(super) fn timed<T: Float>(p: Product<'_, T>, par: Parallelism) {
    static AGAIN: OnceLock<bool> = OnceLock::new();
    let again = *AGAIN
        .get_or_init(|| std::env::var("MECHLAB_PRODUCT_CLOCK").is_ok_and(|v| v.trim() == "again"));
    let kind = 2 * usize::from(p.op_a == Op::T) + usize::from(p.op_b == Op::T);
    let flops = 2 * (p.m * p.k * p.n) as u64;
    if again {
        // the same product into a copy of the output, leaving `c` as it was
        let mut copy = p.c[..super::span(p.m, p.n, p.ldc)].to_vec();
        dispatch(
            Product {
                c: &mut copy[..],
                ..p
            },
            par,
        );
    }
    let t0 = Instant::now();
    dispatch(p, par);
    let nanos = t0.elapsed().as_nanos() as u64;
    TOTALS.calls[kind].fetch_add(1, Relaxed);
    TOTALS.flops[kind].fetch_add(flops, Relaxed);
    TOTALS.nanos[kind].fetch_add(nanos, Relaxed);
}

/// One line per layout timed so far: calls, GFLOP, and GFLOP/s over the time
/// spent in them (summed over threads, so the rate is one thread's).
pub fn report() -> String {
    let mut out = String::new();
    for (kind, name) in KINDS.iter().enumerate() {
        let calls = TOTALS.calls[kind].load(Relaxed);
        if calls == 0 {
            continue;
        }
        let flops = TOTALS.flops[kind].load(Relaxed) as f64;
        let secs = TOTALS.nanos[kind].load(Relaxed) as f64 * 1e-9;
        out.push_str(&format!(
            "{name:<16} {calls:>9} calls {:>8.3} GFLOP {:>7.1} GFLOP/s per thread\n",
            flops * 1e-9,
            flops * 1e-9 / secs.max(1e-12)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `c[m, n] += a[m, k] · b[n, k]ᵀ`, every matrix dense.
    fn q_kt<'a>(
        c: &'a mut [f32],
        a: &'a [f32],
        b: &'a [f32],
        [m, k, n]: [usize; 3],
    ) -> Product<'a, f32> {
        Product {
            c,
            ldc: n,
            a,
            lda: k,
            op_a: Op::N,
            b,
            ldb: k,
            op_b: Op::T,
            m,
            k,
            n,
            accumulate: true,
        }
    }

    #[test]
    fn a_timed_product_is_computed_and_counted_by_layout() {
        // q·kᵀ-like: 16 × 32 × 64 with b transposed, a shape the clock takes
        let (m, k, n) = (16, 32, 64);
        let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 - 3.0).collect();
        let b: Vec<f32> = (0..n * k).map(|i| (i % 5) as f32 * 0.5).collect();
        let (mut got, mut want) = (vec![1.0f32; m * n], vec![1.0f32; m * n]);
        let product = |c| q_kt(c, &a, &b, [m, k, n]);
        dispatch(product(&mut want), Parallelism::None);
        let p = product(&mut got);
        assert!(takes(&p, Parallelism::None));
        let before = TOTALS.calls[1].load(Relaxed);
        timed(p, Parallelism::None);
        assert_eq!(got, want);
        assert!(TOTALS.calls[1].load(Relaxed) > before);
        let line = report()
            .lines()
            .find(|l| l.starts_with("b transposed"))
            .map(str::to_owned);
        assert!(line.is_some_and(|l| l.contains("GFLOP/s")), "{}", report());
        // vectors and tiny outputs sum in gemm's other orders: not taken
        let mut c = [0.0f32; 4];
        let tiny = q_kt(&mut c, &a, &b, [2, k, 2]);
        assert!(!takes(&tiny, Parallelism::None));
    }
}
