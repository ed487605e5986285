//! What a benchmark runs on, as mechlab sees it: the SIMD level its hand-vectorised
//! loops dispatch to (`MECHLAB_SIMD` caps it), `gemm`'s kernel and rayon's threads.
//! `bench/common.sh` prints it before every benchmark, beside the processor and
//! PyTorch's build.
//!
//! `cargo run --release --example bench_machine`

use mechlab_engine::matmul::gemm_kernel;

fn main() {
    println!(
        "simd level {:?}, gemm kernel {}, {} threads",
        mechlab_engine::simd::level(),
        gemm_kernel(),
        rayon::current_num_threads()
    );
}
