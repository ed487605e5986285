//! This machine's matrix-product peak as `gemm` reaches it: f32 and f64, 1 and 2
//! threads, square products of 512, 1024 and 2048, best of 5 each. The other
//! benchmarks divide their executed FLOP/s by the 2-thread f32 (or f64) figure at
//! 1024, measured in the same sitting, and print that share beside their ratio to
//! PyTorch.
//!
//! It also measures the processor's own f32 rate, independent FMA chains in
//! registers (no memory), on 1 and 2 threads at once: the ceiling any product can
//! reach, so `gemm`'s share of it says how much a better kernel could still win.
//!
//! `cargo run --release --example bench_peak [OUT.json]` (`bench/peak/run.sh`)

mod common;

use common::fma::rate_gflops as fma_rate_gflops;
use mechlab_engine::matmul::{gemm_kernel, measured_peak_gflops};

fn main() -> anyhow::Result<()> {
    let mut rows = Vec::new();
    println!("gemm kernel: {}", gemm_kernel());
    println!(
        "{:<6} {:>8} {:>6} {:>12}",
        "dtype", "threads", "n", "GFLOP/s"
    );
    for threads in [1, 2] {
        for n in [512, 1024, 2048] {
            for dtype in ["f32", "f64"] {
                let g = if dtype == "f32" {
                    measured_peak_gflops::<f32>(n, threads, 5)
                } else {
                    measured_peak_gflops::<f64>(n, threads, 5)
                };
                println!("{dtype:<6} {threads:>8} {n:>6} {g:>12.1}");
                rows.push(
                    serde_json::json!({"dtype": dtype, "threads": threads, "n": n, "gflops": g}),
                );
            }
        }
    }
    let fma: Vec<Option<f64>> = [1, 2].map(fma_rate_gflops).to_vec();
    for (threads, g) in [1, 2].iter().zip(&fma) {
        match g {
            Some(g) => println!("f32 FMA chains in registers, {threads} thread(s): {g:.1} GFLOP/s"),
            None => println!("f32 FMA chains: no FMA on this processor"),
        }
    }
    if let Some(path) = std::env::args().nth(1) {
        let out = serde_json::json!({"kernel": gemm_kernel(), "peaks": rows, "fma_f32_gflops": {"1": fma[0], "2": fma[1]}});
        std::fs::write(&path, serde_json::to_string_pretty(&out)?)
            .map_err(|e| anyhow::anyhow!("writing {path}: {e}"))?;
    }
    Ok(())
}
