//! Layer normalisation over the last dimension, with a learned gain and bias.
//!
//! For each row `x ∈ R^D`: `μ = mean(x)`, `σ² = mean((x − μ)²)` (biased, as in
//! PyTorch), `rstd = 1/√(σ² + eps)`, `x̂ = (x − μ)·rstd`, `y = γ ⊙ x̂ + β`. The
//! forward saves `μ` and `rstd` per row in caller buffers for the backward:
//! with `g = dy ⊙ γ`, `dx = rstd · (g − mean(g) − x̂ · mean(g ⊙ x̂))`,
//! `dγ = Σ_rows dy ⊙ x̂`, `dβ = Σ_rows dy`. (A layer without affine parameters is
//! `γ = 1`, `β = 0` with no `dγ`, `dβ` requested.) Means divide by `D` (rather than
//! multiply by `1/D`, which is inexact for most `D`), as the models always have, so
//! their numbers did not move when they switched to this layer.
//!
//! ```
//! use mechlab_engine::layers::layernorm;
//! let x = [1.0f64, 3.0]; // mean 2, variance 1
//! let (mut y, mut mean, mut rstd) = ([0.0; 2], [0.0], [0.0]);
//! layernorm::forward(&mut y, &mut mean, &mut rstd, &x, &[1.0, 2.0], &[0.0, 0.5], 1, 2, 0.0);
//! assert_eq!((mean[0], rstd[0]), (2.0, 1.0));
//! assert_eq!(y, [-1.0, 2.5]);
//! ```

use crate::Float;

/// Normalises every row of `x` into `y`, and writes each row's `mean` and `rstd`.
#[allow(clippy::too_many_arguments)]
pub fn forward<T: Float>(
    y: &mut [T],
    mean: &mut [T],
    rstd: &mut [T],
    x: &[T],
    gamma: &[T],
    beta: &[T],
    n: usize,
    d: usize,
    eps: f64,
) {
    // x: [N, D], gamma/beta: [D] -> y: [N, D], mean/rstd: [N]
    assert_eq!(x.len(), n * d, "layernorm: x is not [N, D]");
    assert_eq!(y.len(), n * d, "layernorm: y is not [N, D]");
    assert_eq!(
        (mean.len(), rstd.len()),
        (n, n),
        "layernorm: mean/rstd are not [N]"
    );
    assert_eq!(
        (gamma.len(), beta.len()),
        (d, d),
        "layernorm: gamma/beta are not [D]"
    );
    let (nd, eps) = (T::of_usize(d.max(1)), T::of(eps));
    for r in 0..n {
        let (xr, yr) = (&x[r * d..(r + 1) * d], &mut y[r * d..(r + 1) * d]);
        let mu = xr.iter().copied().sum::<T>() / nd;
        let var = xr.iter().map(|&v| (v - mu) * (v - mu)).sum::<T>() / nd;
        let s = T::one() / (var + eps).sqrt();
        for (((yi, &xi), &g), &b) in yr.iter_mut().zip(xr).zip(gamma).zip(beta) {
            *yi = (xi - mu) * s * g + b;
        }
        (mean[r], rstd[r]) = (mu, s);
    }
}

/// Accumulates `dx`, and `dgamma`, `dbeta` where given, from `dy`.
#[allow(clippy::too_many_arguments)]
pub fn backward<T: Float>(
    dx: &mut [T],
    mut dgamma: Option<&mut [T]>,
    mut dbeta: Option<&mut [T]>,
    dy: &[T],
    x: &[T],
    mean: &[T],
    rstd: &[T],
    gamma: &[T],
    n: usize,
    d: usize,
) {
    // dy: [N, D], x: [N, D], mean/rstd: [N], gamma: [D]
    //   -> dx: [N, D] (+=), dgamma: [D] (+=), dbeta: [D] (+=)
    assert_eq!(dx.len(), n * d, "layernorm: dx is not [N, D]");
    assert_eq!(dy.len(), n * d, "layernorm: dy is not [N, D]");
    assert_eq!(x.len(), n * d, "layernorm: x is not [N, D]");
    assert_eq!(
        (mean.len(), rstd.len()),
        (n, n),
        "layernorm: mean/rstd are not [N]"
    );
    assert_eq!(gamma.len(), d, "layernorm: gamma is not [D]");
    if let Some(g) = dgamma.as_deref() {
        assert_eq!(g.len(), d, "layernorm: dgamma is not [D]");
    }
    if let Some(b) = dbeta.as_deref() {
        assert_eq!(b.len(), d, "layernorm: dbeta is not [D]");
    }
    let nd = T::of_usize(d.max(1));
    for r in 0..n {
        let s = r * d..(r + 1) * d;
        let (xr, dyr, dxr) = (&x[s.clone()], &dy[s.clone()], &mut dx[s]);
        let (mu, rs) = (mean[r], rstd[r]);
        // mean(g) and mean(g ⊙ x̂) with g = dy ⊙ γ
        let (mut mg, mut mgx) = (T::zero(), T::zero());
        for ((&xi, &dyi), &gi) in xr.iter().zip(dyr).zip(gamma) {
            let (g, xh) = (dyi * gi, (xi - mu) * rs);
            mg += g;
            mgx += g * xh;
        }
        (mg, mgx) = (mg / nd, mgx / nd);
        for (c, ((&xi, &dyi), &gi)) in xr.iter().zip(dyr).zip(gamma).enumerate() {
            let xh = (xi - mu) * rs;
            dxr[c] += rs * (dyi * gi - mg - xh * mgx);
            if let Some(dg) = dgamma.as_deref_mut() {
                dg[c] += dyi * xh;
            }
            if let Some(db) = dbeta.as_deref_mut() {
                db[c] += dyi;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;

    #[test]
    fn forward_hand_case() {
        // row [0, 0, 3, 1]: mean 1, var (1+1+4+0)/4 = 1.5; with eps 2.5, rstd = 1/2
        let x = [0.0, 0.0, 3.0, 1.0];
        let (mut y, mut m, mut s) = ([0.0; 4], [0.0], [0.0]);
        forward(&mut y, &mut m, &mut s, &x, &[1.0; 4], &[0.0; 4], 1, 4, 2.5);
        assert_eq!((m[0], s[0]), (1.0, 0.5));
        assert_eq!(y, [-0.5, -0.5, 1.0, 0.0]);
    }

    #[test]
    fn gradcheck_x_gamma_beta() {
        let (n, d, eps) = (3, 5, 1e-5);
        let mut r = rng(12);
        let x = uniform(&mut r, n * d);
        let gamma: Vec<f64> = uniform(&mut r, d).iter().map(|v| 1.0 + 0.5 * v).collect();
        let beta = uniform(&mut r, d);
        let seed = uniform(&mut r, n * d);
        let run = |x: &[f64], g: &[f64], b: &[f64]| {
            let (mut y, mut m, mut s) = (vec![0.0; n * d], vec![0.0; n], vec![0.0; n]);
            forward(&mut y, &mut m, &mut s, x, g, b, n, d, eps);
            // nonlinear in y so the check sees more than one direction
            (
                y.iter()
                    .zip(&seed)
                    .map(|(a, b)| a * b + 0.3 * a * a * a)
                    .sum::<f64>(),
                y,
                m,
                s,
            )
        };
        let (_, y, m, s) = run(&x, &gamma, &beta);
        let dy: Vec<f64> = y.iter().zip(&seed).map(|(a, b)| b + 0.9 * a * a).collect();
        let (dx0, dg0, db0) = (
            uniform(&mut r, n * d),
            uniform(&mut r, d),
            uniform(&mut r, d),
        );
        let (mut dx, mut dg, mut db) = (dx0.clone(), dg0.clone(), db0.clone());
        backward(
            &mut dx,
            Some(&mut dg),
            Some(&mut db),
            &dy,
            &x,
            &m,
            &s,
            &gamma,
            n,
            d,
        );
        assert_grad(
            "layernorm dx",
            &mut |v: &[f64]| run(v, &gamma, &beta).0,
            &x,
            &accumulated(&dx, &dx0),
        );
        assert_grad(
            "layernorm dgamma",
            &mut |v: &[f64]| run(&x, v, &beta).0,
            &gamma,
            &accumulated(&dg, &dg0),
        );
        assert_grad(
            "layernorm dbeta",
            &mut |v: &[f64]| run(&x, &gamma, v).0,
            &beta,
            &accumulated(&db, &db0),
        );
    }

    #[test]
    fn f32_smoke() {
        let (n, d) = (2, 64);
        let x: Vec<f32> = (0..n * d).map(|i| 100.0 + (i as f32).sin()).collect();
        let (mut y, mut m, mut s) = (vec![0.0f32; n * d], vec![0.0f32; n], vec![0.0f32; n]);
        forward(
            &mut y,
            &mut m,
            &mut s,
            &x,
            &vec![1.0; d],
            &vec![0.0; d],
            n,
            d,
            1e-5,
        );
        for row in y.chunks(d) {
            let mu: f32 = row.iter().sum::<f32>() / d as f32;
            let var: f32 = row.iter().map(|v| v * v).sum::<f32>() / d as f32;
            assert!(mu.abs() < 1e-4 && (var - 1.0).abs() < 1e-3, "{mu} {var}");
        }
        let mut dx = vec![0.0f32; n * d];
        backward(&mut dx, None, None, &y, &x, &m, &s, &vec![1.0; d], n, d);
        assert!(dx.iter().all(|v| v.is_finite()));
    }
}
