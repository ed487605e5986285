//! Each fast layer's plain reference, for reading the maths first.
//!
//! The layers in this crate are written for speed: rows grouped so that several
//! chains of adds run side by side, loops compiled for the widest SIMD level,
//! products without packing. Each function here computes the same thing the
//! plain way, one row (or one head and query) at a time, straight from the
//! definition in the layer's module doc, and a test holds the fast layer to it:
//! bit for bit where the fast layer only reorders independent work (layer norm,
//! cross-entropy), to rounding where it sums in another order (attention).
//! Softmax's plain row is [`softmax::row_in_place`](super::softmax::row_in_place)
//! and its backward [`softmax::backward_row_in_place`](super::softmax::backward_row_in_place),
//! which the grouped rows of `softmax::rows` equal bit for bit.

use super::attention::{Attention, AttnExtras};
use crate::Float;

/// [`attention`](super::attention)'s forward as straightforward loops over its
/// module doc's definition, in f64: for each head and query, the scaled logits
/// `q·k` plus the bias over the allowed keys, their softmax (the pattern) and the
/// pattern-weighted sum of the values (z). Returns `(z [T_q, H, d_v], pattern
/// [H, T_q, T_k])`; the layer agrees to rounding (tested).
pub fn attention(
    a: &Attention,
    q: &[f64],
    k: &[f64],
    v: &[f64],
    ex: &AttnExtras<'_, f64>,
) -> (Vec<f64>, Vec<f64>) {
    let (nh, tq, tk, dqk, dv) = (a.n_heads, a.t_q, a.t_k, a.d_qk, a.d_v);
    let mut pat = vec![0.0; nh * tq * tk];
    let mut z = vec![0.0; tq * nh * dv];
    for h in 0..nh {
        for i in 0..tq {
            let logit = |j: usize| {
                let s: f64 = (0..dqk)
                    .map(|c| q[(i * nh + h) * dqk + c] * k[(j * nh + h) * dqk + c])
                    .sum();
                a.scale * s + ex.bias.map_or(0.0, |b| b[(h * tq + i) * tk + j])
            };
            let ok: Vec<usize> = (0..tk).filter(|&j| a.allowed(ex, h, i, j)).collect();
            let m = ok
                .iter()
                .map(|&j| logit(j))
                .fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = ok.iter().map(|&j| (logit(j) - m).exp()).sum();
            for &j in &ok {
                let p = (logit(j) - m).exp() / s;
                pat[(h * tq + i) * tk + j] = p;
                for c in 0..dv {
                    z[(i * nh + h) * dv + c] += p * v[(j * nh + h) * dv + c];
                }
            }
        }
    }
    (z, pat)
}

/// [`layernorm`](super::layernorm)'s forward and backward one row at a time,
/// each sum one chain in column order (`eps` = 1e-5): what the grouped layer
/// computes, and its bits (tested, f32 and f64). Returns `[y, mean, rstd, dx,
/// dγ, dβ]` for rows `x` `[n, d]` and upstream gradients `dy`.
pub fn layernorm<T: Float>(
    x: &[T],
    dy: &[T],
    gamma: &[T],
    beta: &[T],
    n: usize,
    d: usize,
) -> [Vec<T>; 6] {
    let nd = T::of_usize(d);
    let (mut y, mut mean, mut rstd) = (
        vec![T::zero(); n * d],
        vec![T::zero(); n],
        vec![T::zero(); n],
    );
    let (mut dx, mut dg, mut db) = (
        vec![T::zero(); n * d],
        vec![T::zero(); d],
        vec![T::zero(); d],
    );
    for r in 0..n {
        let xr = &x[r * d..(r + 1) * d];
        let mu = xr.iter().copied().sum::<T>() / nd;
        let var = xr.iter().map(|&v| (v - mu) * (v - mu)).sum::<T>() / nd;
        let s = T::one() / (var + T::of(1e-5)).sqrt();
        for c in 0..d {
            y[r * d + c] = (xr[c] - mu) * s * gamma[c] + beta[c];
        }
        (mean[r], rstd[r]) = (mu, s);
    }
    for r in 0..n {
        let (xr, dyr) = (&x[r * d..(r + 1) * d], &dy[r * d..(r + 1) * d]);
        let (mu, rs) = (mean[r], rstd[r]);
        let (mut mg, mut mgx) = (T::zero(), T::zero());
        for c in 0..d {
            let (g, xh) = (dyr[c] * gamma[c], (xr[c] - mu) * rs);
            mg += g;
            mgx += g * xh;
        }
        (mg, mgx) = (mg / nd, mgx / nd);
        for c in 0..d {
            let xh = (xr[c] - mu) * rs;
            dx[r * d + c] += rs * (dyr[c] * gamma[c] - mg - xh * mgx);
            dg[c] += dyr[c] * xh;
            db[c] += dyr[c];
        }
    }
    [y, mean, rstd, dx, dg, db]
}

/// One row of [`cross_entropy_rows`](super::loss::cross_entropy_rows) as a plain
/// loop: the first largest logit `m`, `d_j = exp(z_j − m)`, the sum of the others
/// as one in-order chain (so the top entry's 1 is added last, and the row keeps
/// its accuracy when it saturates), `d = w · softmax(z)` with `d_y` set to minus
/// the sum of the others (never `p_y − 1`, which cancels). Writes the gradient into
/// `d` and returns the unweighted loss `ln(1 + rest) + m − z_y`; the grouped
/// layer computes the same bits (tested, f32 and f64).
pub fn cross_entropy_row<T: Float>(d: &mut [T], z: &[T], y: usize, w: T) -> f64 {
    let mut top = 0;
    for (j, &zj) in z.iter().enumerate() {
        if zj > z[top] {
            top = j;
        }
    }
    let m = z[top];
    let mut rest = T::zero();
    for (j, (dj, &zj)) in d.iter_mut().zip(z).enumerate() {
        *dj = (zj - m).exp();
        if j != top {
            rest += *dj;
        }
    }
    let sum = T::one() + rest;
    d.iter_mut().for_each(|x| *x = *x / sum * w);
    let others: T = d
        .iter()
        .enumerate()
        .filter(|&(j, _)| j != y)
        .map(|(_, &x)| x)
        .sum();
    d[y] = -others;
    (rest.ln_1p() + (m - z[y])).as_f64()
}
