//! The processor's own f32 rate: independent fused multiply-add chains held in
//! registers, no memory traffic, the ceiling any product can reach (`bench_peak`,
//! and `bench_packed` beside its tile in L1, in the same minute).
#![allow(dead_code)]

use std::time::Instant;

/// f32 FLOP/s of 12 independent fused multiply-add chains held in registers, one
/// per thread, `threads` at once, best of 5: AVX-512 where the processor has it,
/// else AVX2 with FMA; `None` without FMA (or off x86-64).
pub fn rate_gflops(threads: usize) -> Option<f64> {
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
                                kernels::chains_512(iters)
                            } else {
                                kernels::chains_256(iters)
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
mod kernels {
    use std::arch::x86_64::*;

    macro_rules! chains {
        ($name:ident, $feat:literal, $ty:ty, $set1:ident, $fma:ident, $store:ident, $lanes:literal) => {
            /// 12 independent chains `a ← a·x + y` (three FMA latencies on two
            /// ports) for `iters` rounds, each chain its own local so that all stay
            /// in registers; returns their sum so the work is not optimised away.
            /// `x` and `y` pass through `black_box`: with them known, the compiler
            /// found that `0.1` is the chains' fixed point in f32 (`0.1·0.9999 +
            /// 1e-5` rounds to `0.1`), dropped that chain, and the rate read 12/11
            /// of the FMAs actually run.
            #[target_feature(enable = $feat)]
            pub unsafe fn $name(iters: u64) -> f32 {
                let x = $set1(std::hint::black_box(0.999_9));
                let y = $set1(std::hint::black_box(1e-5));
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
