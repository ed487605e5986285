//! The numbers behind `mechlab_engine::packed`: one thread, 1 024 rows, the BERT
//! encoder's linear shapes (in → out: 384 → 1536, 1536 → 384, 384 → 384), through
//! `gemm` (`layers::linear::forward`, which packs both operands on every call) and
//! through `PackedLinear` (weights packed once), best of 20 each, in GFLOP/s.
//!
//! `cargo run --release --example bench_packed`

use mechlab_engine::layers::linear;
use mechlab_engine::packed::{Kernel, PackedLinear};
use std::time::Instant;

fn best_gflops(flops: f64, reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut best = f64::INFINITY;
    for _ in 0..reps {
        let t0 = Instant::now();
        f();
        best = best.min(t0.elapsed().as_secs_f64());
    }
    flops / best / 1e9
}

fn main() {
    let rows = 1024;
    println!(
        "packed kernel: {:?} (1 thread, {rows} rows)",
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
        let mut y = vec![0.0f32; rows * d_out];
        let flops = 2.0 * (rows * d_in * d_out) as f64;
        let gemm = best_gflops(flops, 20, || {
            linear::forward(&mut y, &x, &w, Some(&b), rows, d_in, d_out)
        });
        let packed = PackedLinear::new(&w, Some(&b), d_out, d_in);
        let ours = best_gflops(flops, 20, || packed.forward(&mut y, &x, rows));
        println!(
            "{d_in:>5} -> {d_out:<5} gemm {gemm:6.1}  packed {ours:6.1} GFLOP/s  ({:.2}x)",
            ours / gemm
        );
    }
}
