//! What the bench examples share: the share of this machine's measured
//! matrix-product peak that a step's executed FLOPs reach.

pub mod fma;

use mechlab_engine::matmul::measured_peak_gflops;
use mechlab_engine::Float;

/// Measures the `T` matrix-product peak on the current threads (gemm at
/// n = 1024, the denominator every benchmark uses) and gives the line
/// `flops_per_step F peak_gflops P share_pct S` for a step of `flops` FLOPs that
/// took `seconds`; the run scripts read that line.
#[allow(dead_code)]
pub fn share_line<T: Float>(flops: f64, seconds: f64) -> String {
    let peak = measured_peak_gflops::<T>(1024, rayon::current_num_threads(), 8);
    let share = 100.0 * flops / seconds / 1e9 / peak;
    format!("flops_per_step {flops:.4e} peak_gflops {peak:.2} share_pct {share:.2}")
}

/// Model FLOPs of one full-batch epoch of the simplified induction model, `n`
/// sequences of `l` keys, `h` heads, `subsets` the kernel's subsets (bit masks;
/// those without the raw token, bit 0, count): the direct formulation's arithmetic per key
/// (layer 1: each head mixes its `h` distances, `2h`, and normalises, `3h`;
/// layer 2: the inner product over a head's `≤ h` non-zero coordinates, `2h`,
/// the kernel, `2|δ|` per subset, and softmax, mixing and the cross-entropy's
/// share, 6), forward once and backward as twice that. The table path shares
/// this work across sequences and executes less, so for it this is an
/// effective rate; the direct path executes about this.
#[allow(dead_code)]
pub fn induction_epoch_flops(n: usize, l: usize, h: usize, subsets: &[u32]) -> f64 {
    let members: u32 = subsets
        .iter()
        .filter(|s| *s & 1 == 0)
        .map(|s| s.count_ones())
        .sum();
    let per_key = (7 * h * h + 2 * members as usize + 6) as f64;
    3.0 * per_key * (n * l) as f64
}
