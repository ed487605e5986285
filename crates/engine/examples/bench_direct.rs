//! Times the engine's small f32 products (`matmul_strided`) at the attention
//! shapes the training loops use, once through the direct kernel and once
//! through `gemm` (a child process with `MECHLAB_SIMD=avx2`, which sends every
//! product to `gemm`), in alternating rounds on one thread, and prints each
//! shape's best time, the ratio, and the share of the one-thread f32 peak.
//!
//! `cargo run --release -p mechlab-engine --example bench_direct [rounds]`

use mechlab_engine::matmul::{matmul_strided, measured_peak_gflops, Op};
use std::process::Command;
use std::time::Instant;

/// (name, m, k, n, op_a, op_b, accumulate): `c[m, n] (+)= op(a)[m, k] · op(b)[k, n]`.
type Shape = (&'static str, usize, usize, usize, Op, Op, bool);
const SHAPES: [Shape; 12] = [
    (
        "topic q·kᵀ     19×100×120",
        19,
        100,
        120,
        Op::N,
        Op::T,
        false,
    ),
    (
        "topic P·v      19×120×100",
        19,
        120,
        100,
        Op::N,
        Op::N,
        false,
    ),
    (
        "topic dz·vᵀ    19×100×150",
        19,
        100,
        150,
        Op::N,
        Op::T,
        false,
    ),
    (
        "topic Pᵀ·dz   120×19×100",
        120,
        19,
        100,
        Op::T,
        Op::N,
        false,
    ),
    (
        "topic dP·k     19×150×100",
        19,
        150,
        100,
        Op::N,
        Op::N,
        false,
    ),
    (
        "topic dPᵀ·q   150×19×100",
        150,
        19,
        100,
        Op::T,
        Op::N,
        false,
    ),
    ("gpt q·kᵀ       64×32×128", 64, 32, 128, Op::N, Op::T, false),
    ("gpt P·v        64×128×32", 64, 128, 32, Op::N, Op::N, false),
    ("gpt dv +=     128×64×32", 128, 64, 32, Op::T, Op::N, true),
    ("gpt q·kᵀ       64×32×256", 64, 32, 256, Op::N, Op::T, false),
    ("gpt P·v        64×256×32", 64, 256, 32, Op::N, Op::N, false),
    ("gpt dq +=      64×256×32", 64, 256, 32, Op::N, Op::N, true),
];

/// Best time of each shape in µs, on this process's SIMD level.
fn times() -> Vec<f64> {
    let a: Vec<f32> = (0..1 << 16)
        .map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 300.0)
        .collect();
    let b: Vec<f32> = (0..1 << 16)
        .map(|i| ((i * 104_729 % 997) as f32 - 498.0) / 250.0)
        .collect();
    let mut c = vec![0.0f32; 1 << 16];
    SHAPES
        .iter()
        .map(|&(_, m, k, n, op_a, op_b, acc)| {
            let lda = if op_a == Op::N { k } else { m };
            let ldb = if op_b == Op::N { n } else { k };
            let reps = (2e8 / (2 * m * k * n) as f64) as usize + 1;
            let mut best = f64::INFINITY;
            for _ in 0..5 {
                let t = Instant::now();
                for _ in 0..reps {
                    matmul_strided(&mut c, n, &a, lda, op_a, &b, ldb, op_b, m, k, n, acc);
                }
                best = best.min(t.elapsed().as_secs_f64() / reps as f64);
            }
            best * 1e6
        })
        .collect()
}

fn main() {
    if std::env::var_os("BENCH_DIRECT_CHILD").is_some() {
        let t: Vec<String> = times().iter().map(|x| x.to_string()).collect();
        println!("{}", t.join(" "));
        return;
    }
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let exe = std::env::current_exe().expect("the example's own path");
    let gemm_round = || -> Vec<f64> {
        let out = Command::new(&exe)
            .env("BENCH_DIRECT_CHILD", "1")
            .env("MECHLAB_SIMD", "avx2")
            .env("RAYON_NUM_THREADS", "1")
            .output()
            .expect("run the gemm child");
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(|x| x.parse().expect("a time"))
            .collect()
    };
    let peak = measured_peak_gflops::<f32>(1024, 1, 3);
    let (mut direct, mut gemm) = (
        vec![f64::INFINITY; SHAPES.len()],
        vec![f64::INFINITY; SHAPES.len()],
    );
    for _ in 0..rounds {
        for (best, t) in direct.iter_mut().zip(times()) {
            *best = best.min(t);
        }
        for (best, t) in gemm.iter_mut().zip(gemm_round()) {
            *best = best.min(t);
        }
    }
    println!(
        "simd level {:?}, one thread, f32 peak {peak:.0} GFLOP/s, best of {rounds} alternating rounds",
        mechlab_engine::simd::level()
    );
    println!(
        "{:28} {:>10} {:>10} {:>7} {:>8} {:>8}",
        "product", "direct µs", "gemm µs", "ratio", "direct", "gemm"
    );
    for ((&(name, m, k, n, ..), d), g) in SHAPES.iter().zip(&direct).zip(&gemm) {
        let gflop = 2.0 * (m * k * n) as f64 / 1e3;
        println!(
            "{name:28} {d:10.2} {g:10.2} {:6.2}× {:7.1}% {:7.1}%",
            g / d,
            100.0 * gflop / d / peak,
            100.0 * gflop / g / peak
        );
    }
}
