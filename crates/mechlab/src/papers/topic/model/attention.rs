//! The attention head of [`super::TopicMlm`]: the `W_Q`/`W_K`/`W_V` projections,
//! the masked softmax, and the forward and backward of one document's head. It
//! is separate from the rest of the step because it is the only part whose cost
//! and fast paths depend on the attention config (frozen-uniform attention
//! never builds queries or keys and averages the values once; one-hot inputs
//! turn projections into row gathers), and because the probes need its pieces
//! ([`project`], [`scores`]) without a training step around them.
//!
//! Shapes: `L` tokens in the document, `S` labelled positions (the queries the
//! loss reads; `S = w.qpos.len()`), `rows` the query rows actually computed (1
//! when every query row is the same, see `Plan::shared`, else `S`),
//! `d = d_model`.

use super::kernel::add_rows;
use super::*;
use mechlab_engine::layers::softmax;

/// `out[r] = h[rows[r]] · W + b` (rows: `qpos`, or all when `None`). One-hot `h`
/// turns the product into a gather of `W`'s rows.
pub(super) fn project<T: Float>(
    out: &mut [T],
    h0: &[T],
    ids: &[u32],
    rows: Option<&[usize]>,
    plan: &Plan,
    w: &Param<T>,
    b: &Param<T>,
) {
    let d = plan.d;
    let n = rows.map_or(ids.len(), |r| r.len());
    let row_of = |r: usize| rows.map_or(r, |q| q[r]);
    let (wv, bv) = (w.value(), b.value());
    if plan.onehot {
        // the row of W plus the bias, in one pass
        for r in 0..n {
            let id = ids[row_of(r)] as usize;
            out[r * d..(r + 1) * d]
                .iter_mut()
                .zip(&wv[id * d..(id + 1) * d])
                .zip(bv)
                .for_each(|((o, w), b)| *o = *w + *b);
        }
        return;
    }
    // h0 rows are contiguous when rows is None; callers gather query rows into
    // `hq` first and pass it with rows = None.
    matmul(
        &mut out[..n * d],
        &h0[..n * d],
        Op::N,
        wv,
        Op::N,
        n,
        d,
        d,
        false,
    );
    for r in 0..n {
        out[r * d..(r + 1) * d]
            .iter_mut()
            .zip(bv)
            .for_each(|(o, b)| *o += *b);
    }
}

/// `dW += hᵀ · dout`, `db += Σ dout` (one-hot: scatter rows).
#[allow(clippy::too_many_arguments)]
pub(super) fn project_back<T: Float>(
    g: &mut [Vec<T>; N_SLOTS],
    sw: usize,
    sb: usize,
    h: &[T],
    ids: &[u32],
    rows: Option<&[usize]>,
    plan: &Plan,
    dout: &[T],
    n: usize,
) {
    let d = plan.d;
    if plan.onehot {
        for r in 0..n {
            let id = ids[rows.map_or(r, |q| q[r])] as usize;
            g[sw][id * d..(id + 1) * d]
                .iter_mut()
                .zip(&dout[r * d..(r + 1) * d])
                .for_each(|(a, b)| *a += *b);
        }
    } else {
        matmul(
            &mut g[sw],
            &h[..n * d],
            Op::T,
            &dout[..n * d],
            Op::N,
            d,
            n,
            d,
            true,
        );
    }
    for r in 0..n {
        g[sb]
            .iter_mut()
            .zip(&dout[r * d..(r + 1) * d])
            .for_each(|(a, b)| *a += *b);
    }
}

/// `pattern[s, l] = softmax_l(q_s · k_l / √d)` over visible keys.
pub(super) fn scores<T: Float>(
    pat: &mut [T],
    q: &[T],
    k: &[T],
    hidden: &[bool],
    s: usize,
    l: usize,
    d: usize,
) {
    matmul(
        &mut pat[..s * l],
        &q[..s * d],
        Op::N,
        &k[..l * d],
        Op::T,
        s,
        d,
        l,
        false,
    );
    let c = T::one() / T::of_usize(d).sqrt();
    for row in pat[..s * l].chunks_mut(l) {
        row.iter_mut().for_each(|x| *x *= c);
        softmax::row_in_place(row, |j| !hidden[j]);
    }
}

/// Forward of the head for one document: `w.hook_z: [rows, d]` from
/// `w.hook_embed: [L, d]` (read only when not one-hot) and the query rows
/// `w.qpos`. Fills `hook_q: [S, d]`, `hook_k`, `hook_v: [L, d]` and
/// `hook_pattern: [S, L]` for [`attend_back`], or `hbar: [d]` when uniform.
pub(super) fn attend<T: Float>(
    p: &[Param<T>],
    plan: &Plan,
    w: &mut Work<T>,
    ids: &[u32],
    hidden: &[bool],
    inv_vis: T,
) {
    let (l, d) = (ids.len(), plan.d);
    let s = w.qpos.len();
    let rows = if plan.shared { 1 } else { s };
    let value_frozen_identity = plan.cfg_value == ValueKind::Identity;
    if plan.uniform {
        // a = mean over visible keys of (h0 W_V + b_V) = h̄ W_V + b_V.
        w.hbar.iter_mut().for_each(|x| *x = T::zero());
        for j in (0..l).filter(|&j| !hidden[j]) {
            if plan.onehot {
                w.hbar[ids[j] as usize] += inv_vis;
            } else {
                w.hbar
                    .iter_mut()
                    .zip(&w.hook_embed[j * d..(j + 1) * d])
                    .for_each(|(a, b)| *a += *b * inv_vis);
            }
        }
        if value_frozen_identity {
            w.hook_z[..d].copy_from_slice(&w.hbar);
        } else {
            matmul(
                &mut w.hook_z[..d],
                &w.hbar,
                Op::N,
                p[W_V].value(),
                Op::N,
                1,
                d,
                d,
                false,
            );
            w.hook_z[..d]
                .iter_mut()
                .zip(p[B_V].value())
                .for_each(|(a, b)| *a += *b);
        }
        for r in 1..rows {
            w.hook_z.copy_within(0..d, r * d);
        }
    } else {
        if value_frozen_identity && plan.onehot {
            w.hook_v[..l * d].iter_mut().for_each(|x| *x = T::zero());
            for (j, &id) in ids.iter().enumerate() {
                w.hook_v[j * d + id as usize] = T::one();
            }
        } else if value_frozen_identity {
            w.hook_v[..l * d].copy_from_slice(&w.hook_embed[..l * d]);
        } else {
            project(
                &mut w.hook_v,
                &w.hook_embed,
                ids,
                None,
                plan,
                &p[W_V],
                &p[B_V],
            );
        }
        project(
            &mut w.hook_k,
            &w.hook_embed,
            ids,
            None,
            plan,
            &p[W_K],
            &p[B_K],
        );
        if plan.onehot {
            project(
                &mut w.hook_q,
                &w.hook_embed,
                ids,
                Some(&w.qpos),
                plan,
                &p[W_Q],
                &p[B_Q],
            );
        } else {
            for (r, &j) in w.qpos.iter().enumerate() {
                w.hq[r * d..(r + 1) * d].copy_from_slice(&w.hook_embed[j * d..(j + 1) * d]);
            }
            project(&mut w.hook_q, &w.hq, ids, None, plan, &p[W_Q], &p[B_Q]);
        }
        scores(&mut w.hook_pattern, &w.hook_q, &w.hook_k, hidden, s, l, d);
        matmul(
            &mut w.hook_z[..s * d],
            &w.hook_pattern[..s * l],
            Op::N,
            &w.hook_v[..l * d],
            Op::N,
            s,
            l,
            d,
            false,
        );
    }
}

/// Backward of [`attend`]: from `w.d_resid: [rows, d]` (= d `hook_z`), adds the
/// head's parameter gradients into `w.grads` and, when `plan.need_dh0`, its
/// share of `dh0` into `w.d_h0: [L, d]` (already zeroed, maybe holding the
/// residual's share). Uses `d_v`, `d_k` as scratch when uniform.
pub(super) fn attend_back<T: Float>(
    p: &[Param<T>],
    plan: &Plan,
    w: &mut Work<T>,
    ids: &[u32],
    hidden: &[bool],
    inv_vis: T,
) {
    let (l, d) = (ids.len(), plan.d);
    let s = w.qpos.len();
    let rows = if plan.shared { 1 } else { s };
    let value_frozen_identity = plan.cfg_value == ValueKind::Identity;
    let g = &mut w.grads;
    if plan.uniform {
        // dA = Σ_rows da; dW_V += h̄ᵀ dA; dh̄ = W_V dA; dh0_j = dh̄ / n_vis on visible j.
        let da = &mut w.d_v[..d];
        da.copy_from_slice(&w.d_resid[..d]);
        for r in 1..rows {
            da.iter_mut()
                .zip(&w.d_resid[r * d..(r + 1) * d])
                .for_each(|(a, b)| *a += *b);
        }
        if plan.train[W_V] {
            matmul(&mut g[W_V], &w.hbar, Op::T, da, Op::N, d, 1, d, true);
            g[B_V].iter_mut().zip(da.iter()).for_each(|(a, b)| *a += *b);
        }
        if plan.need_dh0 {
            let dhbar = &mut w.d_k[..d];
            if value_frozen_identity {
                dhbar.copy_from_slice(da);
            } else {
                matmul(dhbar, da, Op::N, p[W_V].value(), Op::T, 1, d, d, false);
            }
            for j in (0..l).filter(|&j| !hidden[j]) {
                w.d_h0[j * d..(j + 1) * d]
                    .iter_mut()
                    .zip(dhbar.iter())
                    .for_each(|(a, b)| *a += *b * inv_vis);
            }
        }
    } else {
        // dP = da vᵀ; dv = Pᵀ da; dz = P ⊙ (dP − rowdot) / √d; dq = dz k; dk = dzᵀ q.
        let c = T::one() / T::of_usize(d).sqrt();
        matmul(
            &mut w.d_pattern[..s * l],
            &w.d_resid[..s * d],
            Op::N,
            &w.hook_v[..l * d],
            Op::T,
            s,
            d,
            l,
            false,
        );
        if plan.reads_dv() {
            matmul(
                &mut w.d_v[..l * d],
                &w.hook_pattern[..s * l],
                Op::T,
                &w.d_resid[..s * d],
                Op::N,
                l,
                s,
                d,
                false,
            );
        }
        softmax::backward_rows_in_place(&mut w.d_pattern, &w.hook_pattern, s, l, l);
        w.d_pattern[..s * l].iter_mut().for_each(|x| *x *= c);
        matmul(
            &mut w.d_q[..s * d],
            &w.d_pattern[..s * l],
            Op::N,
            &w.hook_k[..l * d],
            Op::N,
            s,
            l,
            d,
            false,
        );
        matmul(
            &mut w.d_k[..l * d],
            &w.d_pattern[..s * l],
            Op::T,
            &w.hook_q[..s * d],
            Op::N,
            l,
            s,
            d,
            false,
        );
        project_back(g, W_Q, B_Q, &w.hq, ids, Some(&w.qpos), plan, &w.d_q, s);
        project_back(g, W_K, B_K, &w.hook_embed, ids, None, plan, &w.d_k, l);
        if plan.train[W_V] {
            project_back(g, W_V, B_V, &w.hook_embed, ids, None, plan, &w.d_v, l);
        }
        if plan.need_dh0 {
            matmul(
                &mut w.d_h0[..l * d],
                &w.d_k[..l * d],
                Op::N,
                p[W_K].value(),
                Op::T,
                l,
                d,
                d,
                true,
            );
            if value_frozen_identity {
                w.d_h0[..l * d]
                    .iter_mut()
                    .zip(&w.d_v[..l * d])
                    .for_each(|(a, b)| *a += *b);
            } else {
                matmul(
                    &mut w.d_h0[..l * d],
                    &w.d_v[..l * d],
                    Op::N,
                    p[W_V].value(),
                    Op::T,
                    l,
                    d,
                    d,
                    true,
                );
            }
            matmul(
                &mut w.d_hq[..s * d],
                &w.d_q[..s * d],
                Op::N,
                p[W_Q].value(),
                Op::T,
                s,
                d,
                d,
                false,
            );
            add_rows(&mut w.d_h0, &w.d_hq, &w.qpos, d);
        }
    }
}
