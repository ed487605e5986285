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

use mechlab_engine::matmul::{gemm_kernel, measured_peak_gflops};
use std::time::Instant;

/// f32 FLOP/s of 12 independent fused multiply-add chains held in registers, one
/// per thread, `threads` at once, best of 5: AVX-512 where the processor has it,
/// else AVX2 with FMA; `None` without FMA (or off x86-64).
fn fma_rate_gflops(threads: usize) -> Option<f64> {
    #[cfg(target_arch = "x86_64")]
    {
        let wide = std::arch::is_x86_feature_detected!("avx512f");
        let narrow = is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma");
        if !(wide || narrow) {
            return None;
        }
        let iters = 80_000_000u64;
        let best = (0..5)
            .map(|_| {
                let t0 = Instant::now();
                std::thread::scope(|s| {
                    for _ in 0..threads {
                        // SAFETY: the features each loop is compiled for were detected above.
                        s.spawn(move || unsafe {
                            if wide {
                                fma::chains_512(iters)
                            } else {
                                fma::chains_256(iters)
                            }
                        });
                    }
                });
                t0.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min);
        let lanes = if wide { 16.0 } else { 8.0 };
        Some(threads as f64 * iters as f64 * 12.0 * lanes * 2.0 / best / 1e9)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = threads;
        None
    }
}

#[cfg(target_arch = "x86_64")]
mod fma {
    use std::arch::x86_64::*;

    macro_rules! chains {
        ($name:ident, $feat:literal, $ty:ty, $set1:ident, $fma:ident, $store:ident, $lanes:literal) => {
            /// 12 independent chains `a ← a·x + y` (three FMA latencies on two
            /// ports) for `iters` rounds, each chain its own local so that all stay
            /// in registers; returns their sum so the work is not optimised away.
            #[target_feature(enable = $feat)]
            pub unsafe fn $name(iters: u64) -> f32 {
                let (x, y) = ($set1(0.999_9), $set1(1e-5));
                let (mut a0, mut a1, mut a2, mut a3) =
                    ($set1(0.0), $set1(0.1), $set1(0.2), $set1(0.3));
                let (mut a4, mut a5, mut a6, mut a7) =
                    ($set1(0.4), $set1(0.5), $set1(0.6), $set1(0.7));
                let (mut a8, mut a9, mut a10, mut a11) =
                    ($set1(0.8), $set1(0.9), $set1(1.0), $set1(1.1));
                for _ in 0..iters {
                    a0 = $fma(a0, x, y);
                    a1 = $fma(a1, x, y);
                    a2 = $fma(a2, x, y);
                    a3 = $fma(a3, x, y);
                    a4 = $fma(a4, x, y);
                    a5 = $fma(a5, x, y);
                    a6 = $fma(a6, x, y);
                    a7 = $fma(a7, x, y);
                    a8 = $fma(a8, x, y);
                    a9 = $fma(a9, x, y);
                    a10 = $fma(a10, x, y);
                    a11 = $fma(a11, x, y);
                }
                let mut out = [0.0f32; $lanes];
                let mut sum = 0.0;
                for v in [a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11] {
                    $store(out.as_mut_ptr(), v);
                    sum += out.iter().sum::<f32>();
                }
                sum
            }
        };
    }
    chains!(
        chains_512,
        "avx512f",
        __m512,
        _mm512_set1_ps,
        _mm512_fmadd_ps,
        _mm512_storeu_ps,
        16
    );
    chains!(
        chains_256,
        "avx2,fma",
        __m256,
        _mm256_set1_ps,
        _mm256_fmadd_ps,
        _mm256_storeu_ps,
        8
    );
}

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
