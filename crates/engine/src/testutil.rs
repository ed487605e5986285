//! Helpers shared by the layer tests (compiled for tests only).

use crate::gradcheck::{check, DEFAULT_H};
use crate::Float;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Tolerance every layer gradient check must meet.
pub const TOL: f64 = 1e-6;

/// Says on the terminal that a test did not run its checks here, and why. The
/// harness captures `eprintln!` of passing tests; a write to the stderr handle
/// itself is shown, so a run on a processor without the kernel says so.
pub fn not_run(test: &str, why: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "test {test}: NOT RUN here: {why}");
}

pub fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// `n` values uniform in `[-1, 1)`.
pub fn uniform(rng: &mut ChaCha8Rng, n: usize) -> Vec<f64> {
    (0..n).map(|_| rng.random_range(-1.0..1.0)).collect()
}

pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

pub fn cast<T: Float>(x: &[f64]) -> Vec<T> {
    x.iter().map(|&v| T::of(v)).collect()
}

pub fn to_f64<T: Float>(x: &[T]) -> Vec<f64> {
    x.iter().map(|v| v.as_f64()).collect()
}

/// `after − before`: what a backward accumulated into a buffer that started at `before`.
pub fn accumulated(after: &[f64], before: &[f64]) -> Vec<f64> {
    after.iter().zip(before).map(|(a, b)| a - b).collect()
}

/// Asserts the f64 gradient check of `f` at `x` passes at [`TOL`].
#[track_caller]
pub fn assert_grad<F: FnMut(&[f64]) -> f64>(what: &str, f: &mut F, x: &[f64], analytic: &[f64]) {
    check(f, x, analytic, DEFAULT_H).assert_below(TOL, what);
}

/// Asserts `|a − b| <= tol · max(1, |b|)` elementwise.
#[track_caller]
pub fn assert_close(what: &str, a: &[f64], b: &[f64], tol: f64) {
    assert_eq!(a.len(), b.len(), "{what}: lengths differ");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol * y.abs().max(1.0),
            "{what}[{i}]: {x} vs {y} (tol {tol})"
        );
    }
}
