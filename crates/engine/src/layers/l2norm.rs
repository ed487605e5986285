//! Row-wise ℓ2 normalisation, `y = x / max(‖x‖₂, eps)`, and its variant
//! `y = x / (‖x‖₂ + eps)` ([`forward_plus_eps`], the induction paper's code).
//!
//! The forward saves each row's raw norm `‖x‖₂` in a caller buffer. The backward
//! follows the branch the forward took: where `‖x‖ > eps`,
//! `dx = (dy − y ⟨y, dy⟩) / ‖x‖` (the projection orthogonal to `y`); where
//! `‖x‖ ≤ eps` the map is `x / eps`, so `dx = dy / eps`. A zero row maps to zero.
//!
//! ```
//! use mechlab_engine::layers::l2norm;
//! let (mut y, mut norms) = ([0.0f64; 4], [0.0; 2]);
//! l2norm::forward(&mut y, &mut norms, &[3.0, 4.0, 0.0, 0.0], 2, 2, 1e-12);
//! assert_eq!(y, [0.6, 0.8, 0.0, 0.0]);
//! assert_eq!(norms, [5.0, 0.0]);
//! ```

use crate::Float;

/// Normalises every row of `x` into `y` and writes the rows' norms.
pub fn forward<T: Float>(y: &mut [T], norms: &mut [T], x: &[T], n: usize, d: usize, eps: f64) {
    // x: [N, D] -> y: [N, D], norms: [N]
    assert_eq!(x.len(), n * d, "l2norm: x is not [N, D]");
    assert_eq!(y.len(), n * d, "l2norm: y is not [N, D]");
    assert_eq!(norms.len(), n, "l2norm: norms is not [N]");
    let eps = T::of(eps);
    for r in 0..n {
        let (xr, yr) = (&x[r * d..(r + 1) * d], &mut y[r * d..(r + 1) * d]);
        let norm = xr.iter().map(|&v| v * v).sum::<T>().sqrt();
        let den = norm.max(eps);
        yr.iter_mut().zip(xr).for_each(|(yi, &xi)| *yi = xi / den);
        norms[r] = norm;
    }
}

/// Accumulates `dx` from `dy`, given the forward's `y` and `norms`.
pub fn backward<T: Float>(
    dx: &mut [T],
    dy: &[T],
    y: &[T],
    norms: &[T],
    n: usize,
    d: usize,
    eps: f64,
) {
    // dy: [N, D], y: [N, D], norms: [N] -> dx: [N, D] (+=)
    assert_eq!(dx.len(), n * d, "l2norm: dx is not [N, D]");
    assert_eq!(dy.len(), n * d, "l2norm: dy is not [N, D]");
    assert_eq!(y.len(), n * d, "l2norm: y is not [N, D]");
    assert_eq!(norms.len(), n, "l2norm: norms is not [N]");
    let eps = T::of(eps);
    for (r, &norm) in norms.iter().enumerate() {
        let s = r * d..(r + 1) * d;
        let (dxr, dyr, yr) = (&mut dx[s.clone()], &dy[s.clone()], &y[s]);
        if norm > eps {
            let inv = T::one() / norm;
            let proj: T = yr.iter().zip(dyr).map(|(&a, &b)| a * b).sum();
            for ((g, &dyi), &yi) in dxr.iter_mut().zip(dyr).zip(yr) {
                *g += (dyi - yi * proj) * inv;
            }
        } else {
            let inv = T::one() / eps;
            dxr.iter_mut()
                .zip(dyr)
                .for_each(|(g, &dyi)| *g += dyi * inv);
        }
    }
}

/// `y = x / (‖x‖ + eps)` per row (the induction paper's unit-norm scaling, `eps`
/// added rather than a floor), writing the rows' raw norms.
pub fn forward_plus_eps<T: Float>(
    y: &mut [T],
    norms: &mut [T],
    x: &[T],
    n: usize,
    d: usize,
    eps: f64,
) {
    // x: [N, D] -> y: [N, D], norms: [N]
    assert_eq!(x.len(), n * d, "l2norm: x is not [N, D]");
    assert_eq!(y.len(), n * d, "l2norm: y is not [N, D]");
    assert_eq!(norms.len(), n, "l2norm: norms is not [N]");
    let eps = T::of(eps);
    for r in 0..n {
        let (xr, yr) = (&x[r * d..(r + 1) * d], &mut y[r * d..(r + 1) * d]);
        let norm = xr.iter().map(|&v| v * v).sum::<T>().sqrt();
        yr.iter_mut()
            .zip(xr)
            .for_each(|(yi, &xi)| *yi = xi / (norm + eps));
        norms[r] = norm;
    }
}

/// Accumulates `dx` of [`forward_plus_eps`]:
/// `dx = dy / (‖x‖ + eps) − x ⟨x, dy⟩ / (‖x‖ (‖x‖ + eps)²)`. A zero row (where
/// the norm has no derivative) gets `dy / eps`, the map's slope along any ray.
pub fn backward_plus_eps<T: Float>(
    dx: &mut [T],
    dy: &[T],
    x: &[T],
    norms: &[T],
    n: usize,
    d: usize,
    eps: f64,
) {
    // dy: [N, D], x: [N, D], norms: [N] -> dx: [N, D] (+=)
    assert_eq!(dx.len(), n * d, "l2norm: dx is not [N, D]");
    assert_eq!(dy.len(), n * d, "l2norm: dy is not [N, D]");
    assert_eq!(x.len(), n * d, "l2norm: x is not [N, D]");
    assert_eq!(norms.len(), n, "l2norm: norms is not [N]");
    let eps = T::of(eps);
    for (r, &norm) in norms.iter().enumerate() {
        let s = r * d..(r + 1) * d;
        let (dxr, dyr, xr) = (&mut dx[s.clone()], &dy[s.clone()], &x[s]);
        let den = norm + eps;
        let coef = if norm > T::zero() {
            xr.iter().zip(dyr).map(|(&a, &b)| a * b).sum::<T>() / (norm * den * den)
        } else {
            T::zero()
        };
        for ((g, &dyi), &xi) in dxr.iter_mut().zip(dyr).zip(xr) {
            *g += dyi / den - xi * coef;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;

    #[test]
    fn forward_hand_case_and_eps_floor() {
        let (mut y, mut nm) = ([0.0; 3], [0.0]);
        forward(&mut y, &mut nm, &[0.0, 0.3, 0.4], 1, 3, 1.0);
        assert_eq!(nm[0], 0.5);
        assert_eq!(y, [0.0, 0.3, 0.4]); // norm 0.5 < eps 1: divided by eps
    }

    #[test]
    fn gradcheck_both_branches() {
        let (n, d) = (4, 3);
        let mut r = rng(13);
        let mut x = uniform(&mut r, n * d);
        // row 3 is tiny, below eps: the x/eps branch
        x[9..12].iter_mut().for_each(|v| *v *= 1e-3);
        let eps = 1e-2;
        let seed = uniform(&mut r, n * d);
        let run = |x: &[f64]| {
            let (mut y, mut nm) = (vec![0.0; n * d], vec![0.0; n]);
            forward(&mut y, &mut nm, x, n, d, eps);
            (
                y.iter()
                    .zip(&seed)
                    .map(|(a, b)| a * b + a * a * a)
                    .sum::<f64>(),
                y,
                nm,
            )
        };
        let (_, y, nm) = run(&x);
        assert!(nm[3] < eps && nm[..3].iter().all(|&v| v > 10.0 * eps));
        let dy: Vec<f64> = y.iter().zip(&seed).map(|(a, b)| b + 3.0 * a * a).collect();
        let dx0 = uniform(&mut r, n * d);
        let mut dx = dx0.clone();
        backward(&mut dx, &dy, &y, &nm, n, d, eps);
        assert_grad(
            "l2norm dx",
            &mut |v: &[f64]| run(v).0,
            &x,
            &accumulated(&dx, &dx0),
        );
    }

    #[test]
    fn gradcheck_plus_eps() {
        let (n, d, eps) = (3, 4, 0.3);
        let mut r = rng(14);
        let x = uniform(&mut r, n * d);
        let seed = uniform(&mut r, n * d);
        let run = |x: &[f64]| {
            let (mut y, mut nm) = (vec![0.0; n * d], vec![0.0; n]);
            forward_plus_eps(&mut y, &mut nm, x, n, d, eps);
            let l = y.iter().zip(&seed).map(|(a, b)| a * b + a * a).sum::<f64>();
            (l, y, nm)
        };
        let (_, y, nm) = run(&x);
        let norm0 = x[..d].iter().map(|v| v * v).sum::<f64>().sqrt();
        assert_eq!((nm[0], y[1]), (norm0, x[1] / (norm0 + eps)));
        let dy: Vec<f64> = y.iter().zip(&seed).map(|(a, b)| b + 2.0 * a).collect();
        let dx0 = uniform(&mut r, n * d);
        let mut dx = dx0.clone();
        backward_plus_eps(&mut dx, &dy, &x, &nm, n, d, eps);
        assert_grad(
            "l2norm plus eps dx",
            &mut |v: &[f64]| run(v).0,
            &x,
            &accumulated(&dx, &dx0),
        );
        // a zero row maps to zero and passes dy / eps
        let (mut y, mut nm) = ([9.0; 2], [9.0]);
        forward_plus_eps(&mut y, &mut nm, &[0.0, 0.0], 1, 2, 0.5);
        assert_eq!((y, nm), ([0.0, 0.0], [0.0]));
        let mut dx = [0.0; 2];
        backward_plus_eps(&mut dx, &[1.0, -2.0], &[0.0, 0.0], &nm, 1, 2, 0.5);
        assert_eq!(dx, [2.0, -4.0]);
    }

    #[test]
    fn f32_smoke() {
        let x = [1e-20f32, 0.0, 3e3, 4e3];
        let (mut y, mut nm) = ([0.0f32; 4], [0.0f32; 2]);
        forward(&mut y, &mut nm, &x, 2, 2, 1e-12);
        assert!((y[2] - 0.6).abs() < 1e-6 && (y[3] - 0.8).abs() < 1e-6);
        let mut dx = [0.0f32; 4];
        backward(&mut dx, &[1.0; 4], &y, &nm, 2, 2, 1e-12);
        assert!(dx.iter().all(|v| v.is_finite()));
    }
}
