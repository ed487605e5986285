//! GELU, the tanh approximation GPT-2 uses (TransformerLens `gelu_new`):
//! `gelu(x) = x/2 · (1 + tanh(u))`, `u = √(2/π) · (x + 0.044715 x³)`.
//!
//! Computed as `x · σ(2u)` (the same function: `(1 + tanh u)/2 = σ(2u)`), one
//! `exp` per element instead of a `tanh`, which is what made the MLP step slow
//! (bench/gpt). Its derivative is `gelu'(x) = s + x · s(1 − s) · 2u'(x)` with
//! `s = σ(2u)`, `u' = √(2/π) · (1 + 3 · 0.044715 x²)`; for `u → −∞`, `exp(−2u)`
//! overflows to `∞` and `s` to `0`, the right limit, never a NaN. The `exp`s of a
//! chunk of entries go through [`Float::exp_shifted_in_place`] together (for f32,
//! sixteen lanes of [`crate::expf`], libm's bits), so the layer computes what a
//! scalar loop computes, faster. A training step's forward keeps `gelu'(x)` in
//! place of `x` ([`forward_keeping_slope`]), so its backward
//! ([`backward_by_slope`]) is one multiply per entry with [`backward`]'s bits.
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

/// Entries per pass: the `e^(−2u)` of a chunk stay in L1 between its passes.
const CHUNK: usize = 256;

/// `e ← e^(−2u(x))` for a chunk: the one `exp` of `σ(2u) = 1 / (1 + e^(−2u))`,
/// through [`Float::exp_shifted_in_place`] (for f32 [`crate::expf`]'s lanes,
/// which give `f32::exp`'s bits, so the layer's numbers are the scalar loop's).
fn exp_minus_2u<T: Float>(e: &mut [T], x: &[T]) {
    for (ei, &xi) in e.iter_mut().zip(x) {
        let u = inner(xi);
        *ei = -(u + u);
    }
    T::exp_shifted_in_place(e, T::zero());
}

/// `y = gelu(x)` elementwise, overwriting `y`.
pub fn forward<T: Float>(y: &mut [T], x: &[T]) {
    // x: [N] -> y: [N]
    assert_eq!(y.len(), x.len(), "gelu: y and x differ in length");
    for (yc, xc) in y.chunks_mut(CHUNK).zip(x.chunks(CHUNK)) {
        exp_minus_2u(yc, xc);
        for (yi, &xi) in yc.iter_mut().zip(xc) {
            *yi = xi * (T::one() / (T::one() + *yi));
        }
    }
}

/// `y = gelu(x)`, and `x` overwritten by `gelu'(x)`: the forward of a
/// training step, whose backward then takes the slope through
/// [`backward_by_slope`] instead of computing the `exp` a second time. `y` has
/// [`forward`]'s bits and the slope is the factor [`backward`] multiplies `dy`
/// by. It replaces `x` in place because `x` is read here anyway and a training
/// step needs only the slope from then on: a separate buffer would cost the
/// step a megabyte of memory traffic per chunk and layer at lm-induction's size.
pub fn forward_keeping_slope<T: Float>(y: &mut [T], x_then_slope: &mut [T]) {
    // x: [N] -> y: [N], x: [N] overwritten by gelu'(x)
    assert_eq!(
        y.len(),
        x_then_slope.len(),
        "gelu: y and x differ in length"
    );
    let c = T::of((2.0 / std::f64::consts::PI).sqrt());
    let two = T::of(2.0);
    for (yc, xc) in y.chunks_mut(CHUNK).zip(x_then_slope.chunks_mut(CHUNK)) {
        exp_minus_2u(yc, xc);
        for (yi, xi) in yc.iter_mut().zip(xc.iter_mut()) {
            let x = *xi;
            let s = T::one() / (T::one() + *yi);
            let du = c * (T::one() + T::of(3.0 * C) * x * x);
            *xi = s + x * s * (T::one() - s) * two * du;
            *yi = x * s;
        }
    }
}

/// `dy ← dy ⊙ slope` in place, with `slope` from [`forward_keeping_slope`]:
/// the input gradient with [`backward`]'s bits where `dx` held zeros (the
/// explicit `+0` turns a `−0` product into `+0`, as adding into zeros does),
/// without a second `exp`, a zeroed `dx` or a buffer besides `dy`'s.
pub fn backward_by_slope<T: Float>(dy_then_dx: &mut [T], slope: &[T]) {
    // dy: [N], slope: [N] -> dy: [N] overwritten by dx
    assert_eq!(
        dy_then_dx.len(),
        slope.len(),
        "gelu: dy and slope differ in length"
    );
    for (g, &s) in dy_then_dx.iter_mut().zip(slope) {
        *g = T::zero() + *g * s;
    }
}

/// `dx += dy ⊙ gelu'(x)`.
pub fn backward<T: Float>(dx: &mut [T], dy: &[T], x: &[T]) {
    // dy: [N], x: [N] -> dx: [N] (+=)
    assert_eq!(dx.len(), x.len(), "gelu: dx and x differ in length");
    assert_eq!(dy.len(), x.len(), "gelu: dy and x differ in length");
    let c = T::of((2.0 / std::f64::consts::PI).sqrt());
    let two = T::of(2.0);
    let mut e = [T::zero(); CHUNK];
    let chunks = dx
        .chunks_mut(CHUNK)
        .zip(dy.chunks(CHUNK))
        .zip(x.chunks(CHUNK));
    for ((gc, dc), xc) in chunks {
        let e = &mut e[..xc.len()];
        exp_minus_2u(e, xc);
        for (((g, &d), &xi), &ei) in gc.iter_mut().zip(dc).zip(xc).zip(e.iter()) {
            let s = T::one() / (T::one() + ei);
            let du = c * (T::one() + T::of(3.0 * C) * xi * xi);
            *g += d * (s + xi * s * (T::one() - s) * two * du);
        }
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

    /// The layer as one scalar `exp` per entry: what it computed before its
    /// `exp` went through the lanes.
    fn scalar<T: Float>(x: T, d: T) -> (T, T) {
        let u = inner(x);
        let s = T::one() / (T::one() + (-(u + u)).exp());
        let c = T::of((2.0 / std::f64::consts::PI).sqrt());
        let du = c * (T::one() + T::of(3.0 * C) * x * x);
        (x * s, d * (s + x * s * (T::one() - s) * T::of(2.0) * du))
    }

    /// f32 and f64, across the chunk edges, at saturation both ways (where
    /// `e^(−2u)` overflows to ∞ or underflows to 0) and at ±0: the bits of the
    /// scalar loop.
    #[test]
    fn the_lanes_give_the_scalar_loops_bits() {
        fn check<T: Float>(bits: impl Fn(T) -> u64) {
            let mut r = rng(9);
            let n = 2 * CHUNK + 37;
            let mut x: Vec<T> = uniform(&mut r, n).iter().map(|v| T::of(12.0 * v)).collect();
            x[..6].copy_from_slice(&[-60.0, -12.0, -0.0, 0.0, 12.0, 60.0].map(T::of));
            let d: Vec<T> = uniform(&mut r, n).into_iter().map(T::of).collect();
            let mut y = vec![T::zero(); n];
            forward(&mut y, &x);
            let mut g = vec![T::of(0.25); n];
            backward(&mut g, &d, &x);
            for i in 0..n {
                let (wy, wg) = scalar(x[i], d[i]);
                assert_eq!(bits(y[i]), bits(wy), "y at {i} (x = {})", x[i].as_f64());
                let wg = T::of(0.25) + wg;
                assert_eq!(bits(g[i]), bits(wg), "dx at {i} (x = {})", x[i].as_f64());
            }
        }
        check::<f32>(|v| v.to_bits() as u64);
        check::<f64>(f64::to_bits);
    }

    /// The training step's pair, the forward keeping the slope and the
    /// backward overwriting `dy`, gives the bits of [`forward`] and of
    /// [`backward`] into zeros: f32 and f64, across the chunk edges, at
    /// saturation both ways, at ±0 and where the product is `−0` (which the
    /// `+0` must turn to `+0`).
    #[test]
    fn the_kept_slope_gives_the_recomputed_bits() {
        fn check<T: Float>(bits: impl Fn(T) -> u64) {
            let mut r = rng(10);
            let n = 2 * CHUNK + 37;
            let mut x: Vec<T> = uniform(&mut r, n).iter().map(|v| T::of(12.0 * v)).collect();
            x[..6].copy_from_slice(&[-60.0, -12.0, -0.0, 0.0, 12.0, 60.0].map(T::of));
            let mut d: Vec<T> = uniform(&mut r, n).into_iter().map(T::of).collect();
            d[6..9].copy_from_slice(&[-0.0, 0.0, -0.0].map(T::of));
            d[0] = T::of(-1.0);
            let (mut y, mut want_y) = (vec![T::of(7.0); n], vec![T::zero(); n]);
            let mut slope = x.clone();
            forward_keeping_slope(&mut y, &mut slope);
            forward(&mut want_y, &x);
            let mut g = d.clone();
            backward_by_slope(&mut g, &slope);
            let mut want_g = vec![T::zero(); n];
            backward(&mut want_g, &d, &x);
            for i in 0..n {
                assert_eq!(
                    bits(y[i]),
                    bits(want_y[i]),
                    "y at {i} (x = {})",
                    x[i].as_f64()
                );
                assert_eq!(
                    bits(g[i]),
                    bits(want_g[i]),
                    "dx at {i} (x = {})",
                    x[i].as_f64()
                );
            }
        }
        check::<f32>(|v| v.to_bits() as u64);
        check::<f64>(f64::to_bits);
    }

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
