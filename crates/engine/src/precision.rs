//! Precision checks: a gradient computed in the working precision against the
//! same gradient computed in the double-double [`crate::F64x2`].
//!
//! Finite differences ([`crate::gradcheck`]) check a backward where the function is
//! smooth at the scale of `h`; they say nothing once a softmax saturates, where the
//! true gradient is tiny but still far from underflow and a backward that cancels
//! (`x_t − Σ_s a_s x_s` with one `a_s` rounded to 1) returns noise. There the
//! reference is the same code run with ~106 bits: every model and layer generic over
//! [`crate::Float`] runs in `F64x2` unchanged, so a test builds both, feeds them the
//! same (exactly converted) inputs and asks for the same direction.
//!
//! ```
//! use mechlab_engine::precision::{cosine, assert_direction};
//! assert!((cosine(&[1.0, 0.0], &[1.0, 1.0]) - 0.5f64.sqrt()).abs() < 1e-15);
//! assert_direction("same", &[2.0, 4.0], &[1.0, 2.0], 0.999);
//! ```

/// The cosine of the angle between `a` and `b` (`NaN` if either is zero). Each
/// vector is scaled by its largest entry first: saturated gradients of 1e-200
/// would square to nothing.
pub fn cosine(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len(), "cosine: lengths differ");
    let (a, b) = (unit_scaled(a), unit_scaled(b));
    let dot: f64 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
    let na = a.iter().map(|x| x * x).sum::<f64>().sqrt();
    let nb = b.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (na * nb)
}

/// `x / max|x|` (unchanged when `x` is all zeros).
fn unit_scaled(x: &[f64]) -> Vec<f64> {
    let big = x.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    if big > 0.0 && big.is_finite() {
        x.iter().map(|v| v / big).collect()
    } else {
        x.to_vec()
    }
}

/// The ℓ2 norm of `x`, without underflow or overflow.
pub fn norm(x: &[f64]) -> f64 {
    let big = x.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    if big > 0.0 && big.is_finite() {
        big * x.iter().map(|v| (v / big).powi(2)).sum::<f64>().sqrt()
    } else {
        big
    }
}

/// The cosine every saturation test asks for: the working-precision gradient
/// points where the double-double one does.
pub const MIN_COSINE: f64 = 0.999;

/// Asserts that `reference` is a nonzero, finite gradient and that `got` points
/// the same way (`cosine > min_cos`).
#[track_caller]
pub fn assert_direction(what: &str, got: &[f64], reference: &[f64], min_cos: f64) {
    let norm = norm(reference);
    assert!(
        norm > 0.0 && norm.is_finite(),
        "{what}: the reference gradient has norm {norm:e} (nothing to compare)"
    );
    let c = cosine(got, reference);
    assert!(
        c > min_cos,
        "{what}: cosine {c} with the double-double reference (want > {min_cos}); ‖ref‖ = {norm:e}"
    );
}
