//! The training prompt of an LSA in Ahn et al.'s `P = 0` form, in `O(L (m d + d²))`
//! instead of the `O(L (m D² + D³))` of [`Lsa`](super::model::Lsa)'s general path.
//!
//! In that form every layer has `P_l = e_D e_Dᵀ` and `Q_l = [[B_l, 0], [0, 0]]`
//! (`B_l` `[d, d]`), so `C_l = (1/m) P_l A_l Q_l` has one nonzero row,
//! `C_l[D, :d] = (1/m) g_lᵀ B_l` with `g_l = Σ_{i<m} y_i x_i` (`A_l`'s last
//! column): the `x` columns never change and each layer is one step on the `y`
//! column, `y_j ← y_j + u_l · x_j` with `u_l = (1/m) B_lᵀ g_l`. The backward is
//! as short: `∂B_l = (1/m) g_l (∂u_l)ᵀ` with `∂u_l = Σ_j ∂y_j x_j` (`∂C_l`'s last
//! row), and `∂y_i` gains `(1/m) x_i · (B_l ∂u_l)` on the context rows.
//!
//! Every sum here is one of the general path's, over the same nonzero terms in
//! the same order; the terms it leaves out are products with the form's exact
//! zeros. So the two give the same bits (`model_tests`, over training steps),
//! and the general path stays the reference. [`Lsa`] takes this path only where
//! it holds: linear attention, gradients kept to the `x` blocks, `P` held (or
//! one layer, whose `P` reaches the prediction through its last row only), and
//! the values checked before every step (`in_steps_form`).
//!
//! Written by hand for the reason the model is: it is the paper's object, a
//! few length-`d` sums per prompt.

use super::model::{Layer, Work};

/// Whether `blocks` are in the `P = 0` form: every `Q` with a zero last row and
/// column, the lower layers' `P = e_D e_Dᵀ`, the last layer's last row `e_Dᵀ`.
pub(super) fn in_steps_form(blocks: &[Layer], dd: usize) -> bool {
    let top = blocks.len() - 1;
    let last = dd - 1;
    blocks.iter().enumerate().all(|(l, b)| {
        let (p, q) = (b.p.value(), b.q.value());
        let q_ok = (0..dd).all(|k| q[last * dd + k] == 0.0 && q[k * dd + last] == 0.0);
        let unit = |i: usize, j: usize| if i == last && j == last { 1.0 } else { 0.0 };
        let p_ok = if l < top {
            (0..dd * dd).all(|k| p[k] == unit(k / dd, k % dd))
        } else {
            (0..dd).all(|j| p[last * dd + j] == unit(last, j))
        };
        q_ok && p_ok
    })
}

/// One training prompt `[m + 1, D]` with target `y`: adds `∂L/∂B_l` into
/// `wk.gq`'s `x` blocks (`scale` is `∂L/∂ŷ`'s factor `1/batch`) and returns
/// `½ (ŷ − y)²`. `wk.e` holds each layer's `y` column, `[L + 1, m + 1]`; `wk.a`
/// each layer's `g_l` in its first `d` entries; `wk.g` the `y` column's gradient.
pub(super) fn train_prompt(
    blocks: &[Layer],
    prompt: &[f64],
    target: f64,
    m: usize,
    scale: f64,
    wk: &mut Work,
) -> f64 {
    let dd = prompt.len() / (m + 1);
    let (d, rows, sq) = (dd - 1, m + 1, dd * dd);
    let top = blocks.len() - 1;
    let inv = 1.0 / m as f64;
    let x = |r: usize| &prompt[r * dd..r * dd + d];
    // ys: [L + 1, m + 1], layer l's y column
    let ys = &mut wk.e[..(top + 2) * rows];
    for (r, v) in ys[..rows].iter_mut().enumerate() {
        *v = prompt[r * dd + d];
    }
    // g_l [d] = Σ_{i<m} y_i x_i, the general path's A_l[:d, D] (rows in order)
    let col = |ys: &[f64], l: usize, g: &mut [f64]| {
        g.iter_mut().for_each(|v| *v = 0.0);
        for i in 0..m {
            let yi = ys[l * rows + i];
            for (gk, xk) in g.iter_mut().zip(x(i)) {
                *gk += xk * yi;
            }
        }
    };
    let u = &mut wk.t[..d];
    for l in 0..top {
        let g = &mut wk.a[l * sq..l * sq + d];
        col(ys, l, g);
        let b = blocks[l].q.value();
        // u [d] = (1/m) B_lᵀ g_l
        for (j, uj) in u.iter_mut().enumerate() {
            let mut acc = 0.0;
            for (k, gk) in g.iter().enumerate() {
                acc += b[k * dd + j] * gk;
            }
            *uj = acc * inv;
        }
        // y_r ← (x_r · u) + y_r, the query too
        for r in 0..rows {
            let mut acc = 0.0;
            for (xk, uk) in x(r).iter().zip(u.iter()) {
                acc += xk * uk;
            }
            ys[(l + 1) * rows + r] = acc + ys[l * rows + r];
        }
    }
    // The last layer: ŷ = −y_q − (1/m) g · (B x_q)
    let g = &mut wk.a[top * sq..top * sq + d];
    col(ys, top, g);
    let b = blocks[top].q.value();
    let qv = &mut wk.t[..d];
    for (i, qi) in qv.iter_mut().enumerate() {
        *qi = b[i * dd..i * dd + d]
            .iter()
            .zip(x(m))
            .map(|(a, z)| a * z)
            .sum();
    }
    let ag: f64 = g.iter().zip(qv.iter()).map(|(a, v)| a * v).sum();
    let yh = -ys[top * rows + m] - inv * ag;
    let r = yh - target;
    let dy = r * scale;
    let s = -dy * inv;
    // ∂B_top += s g x_qᵀ
    let gq = &mut wk.gq[top * sq..(top + 1) * sq];
    for (i, gi) in g.iter().enumerate() {
        for (o, z) in gq[i * dd..i * dd + d].iter_mut().zip(x(m)) {
            *o += s * gi * z;
        }
    }
    if top == 0 {
        return 0.5 * r * r;
    }
    // ∂y of the last layer's input: s (x_i · B x_q) on the context rows, −dy at the query
    let gy = &mut wk.g[..rows];
    for (i, gi) in gy[..m].iter_mut().enumerate() {
        let eq: f64 = x(i).iter().zip(qv.iter()).map(|(a, v)| a * v).sum();
        *gi = s * eq;
    }
    gy[m] = -dy;
    let (du, tk) = wk.dc[..2 * d].split_at_mut(d);
    for l in (0..top).rev() {
        // ∂u [d] = Σ_j ∂y_j x_j over every row (∂C_l's last row)
        du.iter_mut().for_each(|v| *v = 0.0);
        for (r, gr) in gy.iter().enumerate() {
            for (o, xk) in du.iter_mut().zip(x(r)) {
                *o += gr * xk;
            }
        }
        // ∂B_l += (1/m) g_l ∂uᵀ
        let g = &wk.a[l * sq..l * sq + d];
        let gq = &mut wk.gq[l * sq..(l + 1) * sq];
        for (i, gi) in g.iter().enumerate() {
            for (o, dj) in gq[i * dd..i * dd + d].iter_mut().zip(du.iter()) {
                *o += inv * (gi * dj);
            }
        }
        if l == 0 {
            break;
        }
        // ∂y_i += (1/m) x_i · (B_l ∂u) on the context rows
        let b = blocks[l].q.value();
        for (k, t) in tk.iter_mut().enumerate() {
            let mut acc = 0.0;
            for (j, dj) in du.iter().enumerate() {
                acc += dj * b[k * dd + j];
            }
            *t = inv * acc;
        }
        for (i, gi) in gy[..m].iter_mut().enumerate() {
            let mut acc = 0.0;
            for (xk, t) in x(i).iter().zip(tk.iter()) {
                acc += xk * t;
            }
            *gi += acc;
        }
    }
    0.5 * r * r
}
