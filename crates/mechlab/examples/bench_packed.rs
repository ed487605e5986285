//! The numbers behind `mechlab_engine::packed`: the BERT encoder's linear shapes
//! (in → out: 384 → 1536, 1536 → 384, 384 → 384) through `gemm`
//! (`layers::linear::forward`, which packs both operands on every call) and through
//! `PackedLinear` (weights packed once), in GFLOP/s, best of 20 and median.
//!
//! `cargo run --release --example bench_packed [ROWS] [THREADS]`: `ROWS` per product
//! (default 256, a BERT chunk: two sequences of 128 tokens); with `THREADS` > 1 each
//! thread runs its own products on its own data at once, as the encoder's chunks do,
//! and the rate printed is the threads' together. Then the encoder's 36 maps in
//! order (42 MB of weights, more than L2 holds), and one 14 × 32 tile whose operands
//! stay in L1: the kernel's own ceiling, and the FMA rate measured right after it.

mod common;

use mechlab_engine::layers::linear;
use mechlab_engine::packed::{Kernel, PackedLinear};
use std::time::Instant;

/// Best and median rate over `reps` timed calls of `f` on each of `threads` threads,
/// the threads started together for each call (a barrier), in GFLOP/s.
fn rates(flops: f64, reps: usize, threads: usize, f: impl Fn(usize) + Sync) -> (f64, f64) {
    let barrier = std::sync::Barrier::new(threads);
    let mut secs: Vec<f64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (f, barrier) = (&f, &barrier);
                s.spawn(move || {
                    f(t);
                    (0..reps)
                        .map(|_| {
                            barrier.wait();
                            let t0 = Instant::now();
                            f(t);
                            t0.elapsed().as_secs_f64()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let all: Vec<Vec<f64>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        // one call's time is its slowest thread's
        (0..reps)
            .map(|i| all.iter().map(|v| v[i]).fold(0.0, f64::max))
            .collect()
    });
    secs.sort_by(f64::total_cmp);
    let total = flops * threads as f64 / 1e9;
    (total / secs[0], total / secs[reps / 2])
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rows: usize = args.next().map_or(256, |a| a.parse().expect("ROWS"));
    let threads: usize = args.next().map_or(1, |a| a.parse().expect("THREADS"));
    println!(
        "packed kernel: {:?} ({threads} thread(s), {rows} rows each); GFLOP/s best / median of 20",
        Kernel::detect()
    );
    for (d_in, d_out) in [(384usize, 1536usize), (1536, 384), (384, 384)] {
        let x: Vec<f32> = (0..rows * d_in)
            .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
            .collect();
        let w: Vec<f32> = (0..d_out * d_in)
            .map(|i| ((i * 104_729) % 1000) as f32 / 1000.0 - 0.5)
            .collect();
        let b = vec![0.1f32; d_out];
        let xs: Vec<Vec<f32>> = (0..threads).map(|_| x.clone()).collect();
        let ys: Vec<std::sync::Mutex<Vec<f32>>> = (0..threads)
            .map(|_| std::sync::Mutex::new(vec![0.0f32; rows * d_out]))
            .collect();
        let flops = 2.0 * (rows * d_in * d_out) as f64;
        let gemm = rates(flops, 20, threads, |t| {
            let mut y = ys[t].lock().unwrap();
            linear::forward(&mut y, &x, &w, Some(&b), rows, d_in, d_out)
        });
        let packed = PackedLinear::new(&w, Some(&b), d_out, d_in);
        let ours = rates(flops, 20, threads, |t| {
            packed.forward(&mut ys[t].lock().unwrap(), &xs[t], rows)
        });
        println!(
            "{d_in:>5} -> {d_out:<5} gemm {:6.1} / {:6.1}  packed {:6.1} / {:6.1}  ({:.2}x median)",
            gemm.0,
            gemm.1,
            ours.0,
            ours.1,
            ours.1 / gemm.1
        );
    }
    // MiniLM's six layers' maps in order, each thread on its own rows, the 42 MB of
    // weights too large for L2: how the encoder meets them.
    let maps: Vec<(usize, usize)> = (0..6)
        .flat_map(|_| {
            [
                (384, 384),
                (384, 384),
                (384, 384),
                (384, 384),
                (384, 1536),
                (1536, 384),
            ]
        })
        .collect();
    let lins: Vec<PackedLinear> = maps
        .iter()
        .map(|&(d_in, d_out)| {
            let w: Vec<f32> = (0..d_out * d_in)
                .map(|i| ((i * 104_729) % 1000) as f32 / 1000.0 - 0.5)
                .collect();
            PackedLinear::new(&w, Some(&vec![0.1f32; d_out]), d_out, d_in)
        })
        .collect();
    let bufs: Vec<std::sync::Mutex<(Vec<f32>, Vec<f32>)>> = (0..threads)
        .map(|_| {
            let x = (0..rows * 1536).map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5);
            std::sync::Mutex::new((x.collect(), vec![0.0f32; rows * 1536]))
        })
        .collect();
    let flops: f64 = maps.iter().map(|&(i, o)| 2.0 * (rows * i * o) as f64).sum();
    let stack = rates(flops, 20, threads, |t| {
        let mut guard = bufs[t].lock().unwrap();
        let (x, y) = &mut *guard;
        for (lin, &(d_in, d_out)) in lins.iter().zip(&maps) {
            lin.forward(&mut y[..rows * d_out], &x[..rows * d_in], rows);
        }
    });
    println!(
        "encoder's 36 maps  packed {:6.1} / {:6.1}",
        stack.0, stack.1
    );
    // One 14 × 32 tile over 192 inputs, its operands (11 KB and 24 KB) in L1,
    // 1 000 calls per timing: the kernel's own ceiling on this processor.
    let (n, d_in, d_out) = (14, 192, 32);
    let x: Vec<f32> = (0..n * d_in).map(|i| (i % 97) as f32 / 97.0).collect();
    let w: Vec<f32> = (0..d_out * d_in).map(|i| (i % 89) as f32 / 89.0).collect();
    let tile = PackedLinear::new(&w, None, d_out, d_in);
    let flops = 2.0 * (n * d_in * d_out) as f64 * 1000.0;
    let ceiling = rates(flops, 20, threads, |_| {
        let mut y = [0.0f32; 14 * 32];
        for _ in 0..1000 {
            tile.forward(&mut y, &x, n);
            std::hint::black_box(&mut y);
        }
    });
    println!(
        "one tile in L1     packed {:6.1} / {:6.1}",
        ceiling.0, ceiling.1
    );
    if let Some(fma) = common::fma::rate_gflops(threads) {
        println!("FMA chains, the same minute {fma:6.1} (best of 5)");
    }
}
