//! GELU, the tanh approximation GPT-2 uses (TransformerLens `gelu_new`):
//! `gelu(x) = x/2 · (1 + tanh(u))`, `u = √(2/π) · (x + 0.044715 x³)`.
//!
//! Its derivative is `gelu'(x) = (1 + tanh u)/2 + x/2 · (1 − tanh² u) · u'(x)`,
//! `u' = √(2/π) · (1 + 3 · 0.044715 x²)`; `1 − tanh²` is computed from `tanh`
//! itself, which is exact enough here (it only vanishes where `gelu'` is `0` or `1`).
//! (The exact erf GELU of the BERT encoder is `bert::encoder::gelu`, forward only.)
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

/// `y = gelu(x)` elementwise, overwriting `y`.
pub fn forward<T: Float>(y: &mut [T], x: &[T]) {
    // x: [N] -> y: [N]
    assert_eq!(y.len(), x.len(), "gelu: y and x differ in length");
    let half = T::of(0.5);
    for (yi, &xi) in y.iter_mut().zip(x) {
        *yi = half * xi * (T::one() + inner(xi).tanh());
    }
}

/// `dx += dy ⊙ gelu'(x)`.
pub fn backward<T: Float>(dx: &mut [T], dy: &[T], x: &[T]) {
    // dy: [N], x: [N] -> dx: [N] (+=)
    assert_eq!(dx.len(), x.len(), "gelu: dx and x differ in length");
    assert_eq!(dy.len(), x.len(), "gelu: dy and x differ in length");
    let (half, s) = (T::of(0.5), T::of((2.0 / std::f64::consts::PI).sqrt()));
    for ((g, &d), &xi) in dx.iter_mut().zip(dy).zip(x) {
        let th = inner(xi).tanh();
        let du = s * (T::one() + T::of(3.0 * C) * xi * xi);
        *g += d * (half * (T::one() + th) + half * xi * (T::one() - th * th) * du);
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
    fn matches_the_tanh_formula_and_limits() {
        let mut y = [0.0f64; 4];
        forward(&mut y, &[-1.0, 0.5, 30.0, -30.0]);
        // gelu_new(-1) and gelu_new(0.5) as PyTorch's tanh-approximate GELU gives them
        assert!((y[0] + 0.158_808).abs() < 1e-6, "{}", y[0]);
        assert!((y[1] - 0.345_714).abs() < 1e-6, "{}", y[1]);
        assert_eq!((y[2], y[3]), (30.0, 0.0));
    }
}
