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
//! Each row's sums (`μ`, `σ²`, and the backward's two means) are chains: a float
//! sum's order fixes its bits, so they cannot be split into lanes. Eight rows'
//! chains run side by side instead, each in its own column order, so the adds of
//! one row wait on the latency of the last while the others proceed; compiled for
//! the widest SIMD level ([`crate::simd::widest`]). The bits are those of one row
//! at a time ([`reference::layernorm`](super::reference::layernorm), the plain
//! loop to read first; tested bit for bit, f32 and f64).
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
    // rows r..r+G through the G-row body: the full groups, then one row at a time
    macro_rules! rows {
        ($g:expr, $r:expr) => {{
            let (r, span) = ($r, $r * d..($r + $g) * d);
            let (m, s) = (&mut mean[r..r + $g], &mut rstd[r..r + $g]);
            forward_rows::<T, { $g }>(&mut y[span.clone()], m, s, &x[span], gamma, beta, nd, eps)
        }};
    }
    let full = n / GROUP * GROUP;
    crate::simd::widest(
        #[inline(always)]
        || {
            // plain loops, not closures: the body must inline at this level
            for r in (0..full).step_by(GROUP) {
                rows!(GROUP, r);
            }
            for r in full..n {
                rows!(1, r);
            }
        },
    )
}

/// Rows normalised side by side ([`forward`], [`backward`]).
const GROUP: usize = 8;

/// [`forward`] of `G` rows: each row's sums in column order, the `G` chains side
/// by side (module doc).
#[inline(always)]
// (column loops index the G rows: that is the side-by-side order)
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
fn forward_rows<T: Float, const G: usize>(
    y: &mut [T],
    mean: &mut [T],
    rstd: &mut [T],
    x: &[T],
    gamma: &[T],
    beta: &[T],
    nd: T,
    eps: T,
) {
    // x, y: [G, D], mean/rstd: [G]
    let d = gamma.len();
    let rows: [&[T]; G] = std::array::from_fn(|k| &x[k * d..(k + 1) * d]);
    // `iter().sum()` starts its chain at −0 for f32 and f64 (so that a sum of
    // −0s stays −0); these chains start where it does.
    let z: T = std::iter::empty().sum();
    let mut mu = [z; G];
    for c in 0..d {
        for k in 0..G {
            mu[k] += rows[k][c];
        }
    }
    mu.iter_mut().for_each(|m| *m /= nd);
    let mut var = [z; G];
    for c in 0..d {
        for k in 0..G {
            let v = rows[k][c] - mu[k];
            var[k] += v * v;
        }
    }
    for k in 0..G {
        let s = T::one() / (var[k] / nd + eps).sqrt();
        let yr = &mut y[k * d..(k + 1) * d];
        for (((yi, &xi), &g), &b) in yr.iter_mut().zip(rows[k]).zip(gamma).zip(beta) {
            *yi = (xi - mu[k]) * s * g + b;
        }
        (mean[k], rstd[k]) = (mu[k], s);
    }
}

/// Inference forward: like [`forward`] without saved statistics, with the mean
/// and variance accumulated in `f64` (pretrained encoders with `eps = 1e-12`
/// normalise rows whose `f32` sums would lose digits).
#[allow(clippy::too_many_arguments)]
pub fn forward_f64_stats<T: Float>(
    y: &mut [T],
    x: &[T],
    gamma: &[T],
    beta: &[T],
    n: usize,
    d: usize,
    eps: f64,
) {
    // x: [N, D], gamma/beta: [D] -> y: [N, D]
    assert_eq!(x.len(), n * d, "layernorm: x is not [N, D]");
    assert_eq!(y.len(), n * d, "layernorm: y is not [N, D]");
    assert_eq!(
        (gamma.len(), beta.len()),
        (d, d),
        "layernorm: gamma/beta are not [D]"
    );
    let inv_d = 1.0 / d.max(1) as f64;
    macro_rules! rows {
        ($g:expr, $r:expr) => {{
            let span = $r * d..($r + $g) * d;
            forward_f64_rows::<T, { $g }>(&mut y[span.clone()], &x[span], gamma, beta, inv_d, eps)
        }};
    }
    let full = n / GROUP * GROUP;
    crate::simd::widest(
        #[inline(always)]
        || {
            // plain loops, not closures: the body must inline at this level
            for r in (0..full).step_by(GROUP) {
                rows!(GROUP, r);
            }
            for r in full..n {
                rows!(1, r);
            }
        },
    )
}

/// [`forward_f64_stats`] of `G` rows, their `f64` sums side by side as in
/// [`forward_rows`].
#[inline(always)]
#[allow(clippy::needless_range_loop)]
fn forward_f64_rows<T: Float, const G: usize>(
    y: &mut [T],
    x: &[T],
    gamma: &[T],
    beta: &[T],
    inv_d: f64,
    eps: f64,
) {
    // x, y: [G, D]
    let d = gamma.len();
    let rows: [&[T]; G] = std::array::from_fn(|k| &x[k * d..(k + 1) * d]);
    let z: f64 = std::iter::empty::<f64>().sum();
    let mut mu = [z; G];
    for c in 0..d {
        for k in 0..G {
            mu[k] += rows[k][c].as_f64();
        }
    }
    mu.iter_mut().for_each(|m| *m *= inv_d);
    let mut var = [z; G];
    for c in 0..d {
        for k in 0..G {
            let v = rows[k][c].as_f64() - mu[k];
            var[k] += v * v;
        }
    }
    for k in 0..G {
        let s = 1.0 / (var[k] * inv_d + eps).sqrt();
        let yr = &mut y[k * d..(k + 1) * d];
        for (((yi, &xi), &g), &b) in yr.iter_mut().zip(rows[k]).zip(gamma).zip(beta) {
            *yi = T::of((xi.as_f64() - mu[k]) * s * g.as_f64() + b.as_f64());
        }
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
    macro_rules! rows {
        ($g:expr, $r:expr) => {{
            let (r, span) = ($r, $r * d..($r + $g) * d);
            let (db, dbb) = (dgamma.as_deref_mut(), dbeta.as_deref_mut());
            let (m, s) = (&mean[r..r + $g], &rstd[r..r + $g]);
            let (xs, dys) = (&x[span.clone()], &dy[span.clone()]);
            backward_rows::<T, { $g }>(&mut dx[span], db, dbb, dys, xs, m, s, gamma, nd)
        }};
    }
    let full = n / GROUP * GROUP;
    crate::simd::widest(
        #[inline(always)]
        || {
            for r in (0..full).step_by(GROUP) {
                rows!(GROUP, r);
            }
            for r in full..n {
                rows!(1, r);
            }
        },
    )
}

/// [`backward`] of `G` rows, their sums side by side as in [`forward_rows`].
#[inline(always)]
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
fn backward_rows<T: Float, const G: usize>(
    dx: &mut [T],
    dgamma: Option<&mut [T]>,
    dbeta: Option<&mut [T]>,
    dy: &[T],
    x: &[T],
    mean: &[T],
    rstd: &[T],
    gamma: &[T],
    nd: T,
) {
    // dy, x, dx: [G, D], mean/rstd: [G]
    let d = gamma.len();
    let xs: [&[T]; G] = std::array::from_fn(|k| &x[k * d..(k + 1) * d]);
    let dys: [&[T]; G] = std::array::from_fn(|k| &dy[k * d..(k + 1) * d]);
    let mu: [T; G] = std::array::from_fn(|k| mean[k]);
    let rs: [T; G] = std::array::from_fn(|k| rstd[k]);
    // mean(g) and mean(g ⊙ x̂) with g = dy ⊙ γ
    let (mut mg, mut mgx) = ([T::zero(); G], [T::zero(); G]);
    for (c, &gc) in gamma.iter().enumerate() {
        for k in 0..G {
            let (g, xh) = (dys[k][c] * gc, (xs[k][c] - mu[k]) * rs[k]);
            mg[k] += g;
            mgx[k] += g * xh;
        }
    }
    for k in 0..G {
        let (mg, mgx) = (mg[k] / nd, mgx[k] / nd);
        let dxr = &mut dx[k * d..(k + 1) * d];
        for (((dxi, &xi), &dyi), &gi) in dxr.iter_mut().zip(xs[k]).zip(dys[k]).zip(gamma) {
            let xh = (xi - mu[k]) * rs[k];
            *dxi += rs[k] * (dyi * gi - mg - xh * mgx);
        }
    }
    // Σ over rows in row order, as one row at a time accumulated them.
    if let Some(dg) = dgamma {
        for k in 0..G {
            for ((dgi, &xi), &dyi) in dg.iter_mut().zip(xs[k]).zip(dys[k]) {
                *dgi += dyi * ((xi - mu[k]) * rs[k]);
            }
        }
    }
    if let Some(db) = dbeta {
        for k in 0..G {
            db.iter_mut().zip(dys[k]).for_each(|(a, &b)| *a += b);
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

    fn grouped_equals_reference<T: Float>(bits: impl Fn(T) -> u64) {
        let mut r = rng(31);
        let d = 37;
        for n in [1, 2, 7, 8, 9, 16, 19] {
            let mut x: Vec<T> = uniform(&mut r, n * d)
                .iter()
                .map(|&v| T::of(3.0 * v + 0.5))
                .collect();
            // an all −0 row: its sums keep the sign of `iter().sum()`
            x[..d].iter_mut().for_each(|v| *v = T::of(-0.0));
            let dy: Vec<T> = uniform(&mut r, n * d).iter().map(|&v| T::of(v)).collect();
            let gamma: Vec<T> = uniform(&mut r, d)
                .iter()
                .map(|&v| T::of(1.0 + 0.5 * v))
                .collect();
            let beta: Vec<T> = uniform(&mut r, d).iter().map(|&v| T::of(v)).collect();
            let want = crate::layers::reference::layernorm(&x, &dy, &gamma, &beta, n, d);
            let (mut y, mut mean, mut rstd) = (
                vec![T::zero(); n * d],
                vec![T::zero(); n],
                vec![T::zero(); n],
            );
            forward(&mut y, &mut mean, &mut rstd, &x, &gamma, &beta, n, d, 1e-5);
            let (mut dx, mut dg, mut db) = (
                vec![T::zero(); n * d],
                vec![T::zero(); d],
                vec![T::zero(); d],
            );
            backward(
                &mut dx,
                Some(&mut dg),
                Some(&mut db),
                &dy,
                &x,
                &mean,
                &rstd,
                &gamma,
                n,
                d,
            );
            let got = [y, mean, rstd, dx, dg, db];
            for (k, (a, b)) in got.iter().zip(&want).enumerate() {
                let (a, b): (Vec<u64>, Vec<u64>) = (
                    a.iter().map(|&v| bits(v)).collect(),
                    b.iter().map(|&v| bits(v)).collect(),
                );
                assert_eq!(a, b, "output {k} at n = {n} ({})", T::DTYPE);
            }
        }
    }

    #[test]
    fn grouped_rows_compute_the_bits_of_one_row_at_a_time() {
        grouped_equals_reference::<f64>(f64::to_bits);
        grouped_equals_reference::<f32>(|v| v.to_bits() as u64);
    }

    #[test]
    fn grouped_f64_stats_compute_the_bits_of_one_row_at_a_time() {
        let mut r = rng(32);
        let d = 41;
        for n in [1, 5, 8, 13, 17] {
            let mut x: Vec<f32> = uniform(&mut r, n * d)
                .iter()
                .map(|&v| (3.0 * v + 0.5) as f32)
                .collect();
            x[..d].iter_mut().for_each(|v| *v = -0.0);
            let gamma: Vec<f32> = uniform(&mut r, d)
                .iter()
                .map(|&v| (1.0 + 0.5 * v) as f32)
                .collect();
            let beta: Vec<f32> = uniform(&mut r, d).iter().map(|&v| v as f32).collect();
            let mut want = vec![0.0f32; n * d];
            for row in 0..n {
                let (xr, yr) = (
                    &x[row * d..(row + 1) * d],
                    &mut want[row * d..(row + 1) * d],
                );
                let mu = xr.iter().map(|v| v.as_f64()).sum::<f64>() * (1.0 / d as f64);
                let var = xr
                    .iter()
                    .map(|v| (v.as_f64() - mu) * (v.as_f64() - mu))
                    .sum::<f64>()
                    * (1.0 / d as f64);
                let s = 1.0 / (var + 1e-12).sqrt();
                for c in 0..d {
                    yr[c] = ((xr[c] as f64 - mu) * s * gamma[c] as f64 + beta[c] as f64) as f32;
                }
            }
            let mut got = vec![0.0f32; n * d];
            forward_f64_stats(&mut got, &x, &gamma, &beta, n, d, 1e-12);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "n = {n}");
        }
    }
}
