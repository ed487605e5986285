//! GELU, the tanh approximation GPT-2 uses (TransformerLens `gelu_new`):
//! `gelu(x) = x/2 · (1 + tanh(u))`, `u = √(2/π) · (x + 0.044715 x³)`.
//!
//! Computed as `x · σ(2u)` (the same function: `(1 + tanh u)/2 = σ(2u)`), one
//! `exp` per element instead of a `tanh`, which is what made the MLP step slow
//! (bench/gpt). Its derivative is `gelu'(x) = s + x · s(1 − s) · 2u'(x)` with
//! `s = σ(2u)`, `u' = √(2/π) · (1 + 3 · 0.044715 x²)`; for `u → −∞`, `exp(−2u)`
//! overflows to `∞` and `s` to `0`, the right limit, never a NaN.
//! The exact GELU `x · Φ(x) = x/2 · (1 + erf(x/√2))` (PyTorch's `nn.GELU()`,
//! TransformerLens `"gelu"`, nanoGPT's) is [`exact_forward`] / [`exact_backward`],
//! computed in f64 through `libm::erf` whatever `T` is, so an f32 model rounds
//! it once; its derivative is `Φ(x) + x·φ(x)`. (The BERT encoder's fast f32
//! forward-only erf GELU is `bert::encoder::gelu`.)
//!
//! ```
//! use mechlab_engine::layers::gelu;
//! let mut y = [0.0f64; 3];
//! gelu::forward(&mut y, &[0.0, 1.0, -20.0]);
//! assert_eq!(y[0], 0.0);
//! assert!((y[1] - 0.841192).abs() < 1e-6 && y[2].abs() < 1e-12);
//! ```

use crate::Float;

const C: f64 = 0.044_715;

fn inner<T: Float>(x: T) -> T {
    let s = T::of((2.0 / std::f64::consts::PI).sqrt());
    s * (x + T::of(C) * x * x * x)
}

/// `σ(2u) = 1 / (1 + e^(−2u))`.
fn sigma2<T: Float>(u: T) -> T {
    T::one() / (T::one() + (-(u + u)).exp())
}

/// `y = gelu(x)` elementwise, overwriting `y`.
pub fn forward<T: Float>(y: &mut [T], x: &[T]) {
    // x: [N] -> y: [N]
    assert_eq!(y.len(), x.len(), "gelu: y and x differ in length");
    for (yi, &xi) in y.iter_mut().zip(x) {
        *yi = xi * sigma2(inner(xi));
    }
}

/// `dx += dy ⊙ gelu'(x)`.
pub fn backward<T: Float>(dx: &mut [T], dy: &[T], x: &[T]) {
    // dy: [N], x: [N] -> dx: [N] (+=)
    assert_eq!(dx.len(), x.len(), "gelu: dx and x differ in length");
    assert_eq!(dy.len(), x.len(), "gelu: dy and x differ in length");
    let c = T::of((2.0 / std::f64::consts::PI).sqrt());
    let two = T::of(2.0);
    for ((g, &d), &xi) in dx.iter_mut().zip(dy).zip(x) {
        let s = sigma2(inner(xi));
        let du = c * (T::one() + T::of(3.0 * C) * xi * xi);
        *g += d * (s + xi * s * (T::one() - s) * two * du);
    }
}

const FRAC_1_SQRT_2: f64 = std::f64::consts::FRAC_1_SQRT_2;

/// `y = x·Φ(x)` elementwise (the exact GELU), overwriting `y`.
pub fn exact_forward<T: Float>(y: &mut [T], x: &[T]) {
    // x: [N] -> y: [N]
    assert_eq!(y.len(), x.len(), "gelu: y and x differ in length");
    for (yi, &xi) in y.iter_mut().zip(x) {
        let v = xi.as_f64();
        *yi = T::of(0.5 * v * (1.0 + libm::erf(v * FRAC_1_SQRT_2)));
    }
}

/// `dx += dy ⊙ (Φ(x) + x·φ(x))`.
pub fn exact_backward<T: Float>(dx: &mut [T], dy: &[T], x: &[T]) {
    // dy: [N], x: [N] -> dx: [N] (+=)
    assert_eq!(dx.len(), x.len(), "gelu: dx and x differ in length");
    assert_eq!(dy.len(), x.len(), "gelu: dy and x differ in length");
    let inv_sqrt_2pi = 0.5 * std::f64::consts::FRAC_2_SQRT_PI * FRAC_1_SQRT_2;
    for ((g, &d), &xi) in dx.iter_mut().zip(dy).zip(x) {
        let v = xi.as_f64();
        let cdf = 0.5 * (1.0 + libm::erf(v * FRAC_1_SQRT_2));
        let pdf = inv_sqrt_2pi * (-0.5 * v * v).exp();
        *g += d * T::of(cdf + v * pdf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;

    #[test]
    fn gradcheck_over_a_wide_range() {
        let mut r = rng(4);
        let x: Vec<f64> = uniform(&mut r, 40).iter().map(|v| 6.0 * v).collect();
        let w = uniform(&mut r, 40);
        let mut loss = |x: &[f64]| {
            let mut y = vec![0.0; x.len()];
            forward(&mut y, x);
            dot(&y, &w)
        };
        let before = uniform(&mut r, 40);
        let mut g = before.clone();
        backward(&mut g, &w, &x);
        assert_grad("gelu dx", &mut loss, &x, &accumulated(&g, &before));
    }

    #[test]
    fn exact_gradcheck_and_values() {
        let mut r = rng(6);
        let x: Vec<f64> = uniform(&mut r, 40).iter().map(|v| 6.0 * v).collect();
        let w = uniform(&mut r, 40);
        let mut loss = |x: &[f64]| {
            let mut y = vec![0.0; x.len()];
            exact_forward(&mut y, x);
            dot(&y, &w)
        };
        let before = uniform(&mut r, 40);
        let mut g = before.clone();
        exact_backward(&mut g, &w, &x);
        assert_grad("exact gelu dx", &mut loss, &x, &accumulated(&g, &before));
        // x·Φ(x) at 1: Φ(1) = 0.841344746068543
        let mut y = [0.0f64; 3];
        exact_forward(&mut y, &[1.0, 0.0, -40.0]);
        assert!((y[0] - 0.841344746068543).abs() < 1e-15 && y[1] == 0.0 && y[2] == 0.0);
    }

    #[test]
    fn matches_the_tanh_formula_and_limits() {
        let mut y = [0.0f64; 4];
        forward(&mut y, &[-1.0, 0.5, 30.0, -30.0]);
        // gelu_new(-1) and gelu_new(0.5) as PyTorch's tanh-approximate GELU gives them
        assert!((y[0] + 0.158_808).abs() < 1e-6, "{}", y[0]);
        assert!((y[1] - 0.345_714).abs() < 1e-6, "{}", y[1]);
        assert_eq!((y[2], y[3]), (30.0, 0.0));
    }
}
