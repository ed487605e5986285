//! What a benchmark runs on, as mechlab sees it: the SIMD level its hand-vectorised
//! loops dispatch to (`MECHLAB_SIMD` caps it), `gemm`'s kernel and rayon's threads.
//! `bench/common.sh` prints it before every benchmark, beside the processor and
//! PyTorch's build.
//!
//! With `--fma` it prints instead one thread's f32 rate of FMA chains in registers
//! (GFLOP/s, best of 5), which `bench/common.sh` measures pinned to each core in
//! turn: on the shared 2-core machine one core has run 1.2–1.6 times slower than
//! the other within the same minute, and a 2-thread step is held back by the
//! slower one, so a benchmark's reader needs both.
//!
//! `cargo run --release --example bench_machine [-- --fma]`

mod common;

use mechlab_engine::matmul::gemm_kernel;

fn main() {
    if std::env::args().nth(1).as_deref() == Some("--fma") {
        match common::fma::rate_gflops(1) {
            Some(g) => println!("{g:.0}"),
            None => println!("no FMA"),
        }
        return;
    }
    println!(
        "simd level {:?}, gemm kernel {}, {} threads",
        mechlab_engine::simd::level(),
        gemm_kernel(),
        rayon::current_num_threads()
    );
}
