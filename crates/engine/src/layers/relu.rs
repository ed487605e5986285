//! ReLU, `relu(x) = max(x, 0)` (TransformerLens `act_fn = "relu"`), with
//! PyTorch's derivative at the kink: `relu'(0) = 0`.
//!
//! ```
//! use mechlab_engine::layers::relu;
//! let mut y = [9.0f64; 3];
//! relu::forward(&mut y, &[-1.0, 0.0, 2.5]);
//! assert_eq!(y, [0.0, 0.0, 2.5]);
//! let mut dx = [1.0f64; 3];
//! relu::backward(&mut dx, &[4.0, 4.0, 4.0], &[-1.0, 0.0, 2.5]);
//! assert_eq!(dx, [1.0, 1.0, 5.0]);
//! ```

use crate::Float;

/// `y = relu(x)` elementwise, overwriting `y`.
pub fn forward<T: Float>(y: &mut [T], x: &[T]) {
    // x: [N] -> y: [N]
    assert_eq!(y.len(), x.len(), "relu: y and x differ in length");
    for (yi, &xi) in y.iter_mut().zip(x) {
        *yi = if xi > T::zero() { xi } else { T::zero() };
    }
}

/// `dx += dy ⊙ 1[x > 0]`.
pub fn backward<T: Float>(dx: &mut [T], dy: &[T], x: &[T]) {
    // dy: [N], x: [N] -> dx: [N] (+=)
    assert_eq!(dx.len(), x.len(), "relu: dx and x differ in length");
    assert_eq!(dy.len(), x.len(), "relu: dy and x differ in length");
    for ((g, &d), &xi) in dx.iter_mut().zip(dy).zip(x) {
        if xi > T::zero() {
            *g += d;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;

    #[test]
    fn gradcheck_away_from_the_kink() {
        let mut r = rng(5);
        // |x| ≥ 0.05: a finite difference of step 1e-6 never crosses zero
        let x: Vec<f64> = uniform(&mut r, 40)
            .iter()
            .map(|v| if v.abs() < 0.05 { 0.5 } else { 3.0 * v })
            .collect();
        let w = uniform(&mut r, 40);
        let mut loss = |x: &[f64]| {
            let mut y = vec![0.0; x.len()];
            forward(&mut y, x);
            dot(&y, &w)
        };
        let before = uniform(&mut r, 40);
        let mut g = before.clone();
        backward(&mut g, &w, &x);
        assert_grad("relu dx", &mut loss, &x, &accumulated(&g, &before));
    }
}
