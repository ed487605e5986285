//! The per-document forward and backward of [`super::TopicMlm`], and its layers
//! (embedding with the optional BERT LayerNorm, row-gather projections for one-hot
//! inputs, masked softmax attention, layer norm), each a forward / backward pair
//! over the chunk's preallocated [`super::Work`] buffers.
//!
//! Shapes: `L` tokens in the document, `S` labelled positions (the only queries
//! the loss reads), `d = d_model`, `V = d_vocab`.

use super::*;

/// `h0: [n, d]` for `ids`, keeping the layer norm's `x̂` and `1/σ`.
pub(super) fn embed<T: Float>(
    p: &[Param<T>],
    plan: &Plan,
    ids: &[u32],
    h0: &mut [T],
    xhat: &mut [T],
    rstd: &mut [T],
) {
    let d = plan.d;
    let e = p[W_E].value();
    for (j, &id) in ids.iter().enumerate() {
        let row = &mut h0[j * d..(j + 1) * d];
        row.copy_from_slice(&e[id as usize * d..(id as usize + 1) * d]);
        if plan.bert_ln {
            row.iter_mut()
                .zip(p[TOKEN_TYPE].value())
                .for_each(|(a, b)| *a += *b);
            rstd[j] = layer_norm_row(
                row,
                &mut xhat[j * d..(j + 1) * d],
                p[EMB_LN_W].value(),
                p[EMB_LN_B].value(),
            );
        }
    }
}

/// Backward of [`embed`] over the whole vocabulary, from `dh0` per token id.
pub(super) fn embed_back<T: Float>(
    p: &mut [Param<T>; N_SLOTS],
    plan: &Plan,
    d_table: &[T],
    xhat: &[T],
    rstd: &[T],
    du: &mut [T],
) {
    let d = plan.d;
    for id in 0..plan.v {
        let dh = &d_table[id * d..(id + 1) * d];
        if plan.bert_ln {
            let (lo, hi) = p.split_at_mut(EMB_LN_W);
            let (pw, pb) = hi.split_at_mut(1);
            let (g, gw) = pw[0].value_and_grad_mut();
            layer_norm_back(
                du,
                dh,
                &xhat[id * d..(id + 1) * d],
                rstd[id],
                g,
                Some((gw, pb[0].grad_mut())),
            );
            lo[TOKEN_TYPE]
                .grad_mut()
                .iter_mut()
                .zip(du.iter())
                .for_each(|(a, b)| *a += *b);
        } else {
            du.copy_from_slice(dh);
        }
        if plan.train[W_E] {
            p[W_E].grad_mut()[id * d..(id + 1) * d]
                .iter_mut()
                .zip(du.iter())
                .for_each(|(a, b)| *a += *b);
        }
    }
}

/// `row ← LN(row) · g + b`, keeping `x̂`; returns `1/σ`.
pub(super) fn layer_norm_row<T: Float>(row: &mut [T], xhat: &mut [T], g: &[T], b: &[T]) -> T {
    let n = T::of_usize(row.len());
    let mean = row.iter().copied().sum::<T>() / n;
    let var = row.iter().map(|x| (*x - mean) * (*x - mean)).sum::<T>() / n;
    let rstd = T::one() / (var + T::of(LN_EPS)).sqrt();
    for i in 0..row.len() {
        xhat[i] = (row[i] - mean) * rstd;
        row[i] = xhat[i] * g[i] + b[i];
    }
    rstd
}

/// Backward of [`layer_norm_row`]: `dx` from `dy`; accumulates `dg`, `db` when given.
pub(super) fn layer_norm_back<T: Float>(
    dx: &mut [T],
    dy: &[T],
    xhat: &[T],
    rstd: T,
    g: &[T],
    dgb: Option<(&mut [T], &mut [T])>,
) {
    let n = T::of_usize(dy.len());
    if let Some((dg, db)) = dgb {
        for i in 0..dy.len() {
            dg[i] += dy[i] * xhat[i];
            db[i] += dy[i];
        }
    }
    let (mut m1, mut m2) = (T::zero(), T::zero());
    for i in 0..dy.len() {
        let dxh = dy[i] * g[i];
        m1 += dxh;
        m2 += dxh * xhat[i];
    }
    m1 /= n;
    m2 /= n;
    for i in 0..dy.len() {
        dx[i] = rstd * (dy[i] * g[i] - m1 - xhat[i] * m2);
    }
}

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
        for r in 0..n {
            let id = ids[row_of(r)] as usize;
            out[r * d..(r + 1) * d].copy_from_slice(&wv[id * d..(id + 1) * d]);
        }
    } else {
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
    }
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
        let mut m = T::neg_infinity();
        for (j, x) in row.iter_mut().enumerate() {
            *x *= c;
            if !hidden[j] && *x > m {
                m = *x;
            }
        }
        let mut z = T::zero();
        for (j, x) in row.iter_mut().enumerate() {
            *x = if hidden[j] { T::zero() } else { (*x - m).exp() };
            z += *x;
        }
        row.iter_mut().for_each(|x| *x /= z);
    }
}

/// Adds `src` into rows `rows` of `dst`.
pub(super) fn add_rows<T: Float>(dst: &mut [T], src: &[T], rows: &[usize], d: usize) {
    for (r, &j) in rows.iter().enumerate() {
        dst[j * d..(j + 1) * d]
            .iter_mut()
            .zip(&src[r * d..(r + 1) * d])
            .for_each(|(a, b)| *a += *b);
    }
}

/// One document: forward, loss (already divided by the batch's label count) and,
/// when `backward`, gradients into `w.grads`.
#[allow(clippy::too_many_arguments)]
pub(super) fn doc_step<T: Float>(
    p: &[Param<T>],
    plan: &Plan,
    table: &[T],
    w: &mut Work<T>,
    ids: &[u32],
    hidden: &[bool],
    labels: &[u32],
    inv_n: T,
    backward: bool,
) -> f64 {
    let (l, d, v) = (ids.len(), plan.d, plan.v);
    w.qpos.clear();
    w.qpos.extend((0..l).filter(|&j| labels[j] != NO_LABEL));
    let s = w.qpos.len();
    if s == 0 {
        return 0.0;
    }
    let n_vis = hidden.iter().filter(|h| !**h).count().max(1);
    let inv_vis = T::of(1.0 / n_vis as f64);
    if !plan.onehot {
        for (j, &id) in ids.iter().enumerate() {
            let id = id as usize;
            w.hook_embed[j * d..(j + 1) * d].copy_from_slice(&table[id * d..(id + 1) * d]);
        }
    }
    let rows = if plan.shared { 1 } else { s };
    let value_frozen_identity = plan.cfg_value == ValueKind::Identity;
    // --- attention: hook_z = a [rows, d] ---
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
    // --- residual, norm ---
    w.resid[..rows * d].copy_from_slice(&w.hook_z[..rows * d]);
    if plan.residual {
        for (r, &j) in w.qpos.iter().enumerate() {
            if plan.onehot {
                w.resid[r * d + ids[j] as usize] += T::one();
            } else {
                w.resid[r * d..(r + 1) * d]
                    .iter_mut()
                    .zip(&w.hook_embed[j * d..(j + 1) * d])
                    .for_each(|(a, b)| *a += *b);
            }
        }
    }
    w.y[..rows * d].copy_from_slice(&w.resid[..rows * d]);
    if plan.layer_norm {
        for r in 0..rows {
            w.ln_rstd[r] = layer_norm_row(
                &mut w.y[r * d..(r + 1) * d],
                &mut w.ln_xhat[r * d..(r + 1) * d],
                p[LN_W].value(),
                p[LN_B].value(),
            );
        }
    }
    // --- decoder ---
    match plan.decoder {
        DecoderKind::Identity => w.logits[..rows * v].copy_from_slice(&w.y[..rows * d]),
        DecoderKind::Tied => matmul(
            &mut w.logits[..rows * v],
            &w.y[..rows * d],
            Op::N,
            p[W_E].value(),
            Op::T,
            rows,
            d,
            v,
            false,
        ),
        DecoderKind::Trained => {
            matmul(
                &mut w.logits[..rows * v],
                &w.y[..rows * d],
                Op::N,
                p[W_U].value(),
                Op::N,
                rows,
                d,
                v,
                false,
            );
            for r in 0..rows {
                w.logits[r * v..(r + 1) * v]
                    .iter_mut()
                    .zip(p[B_U].value())
                    .for_each(|(a, b)| *a += *b);
            }
        }
    }
    // --- loss ---
    let mut loss = 0.0;
    w.d_logits[..rows * v]
        .iter_mut()
        .for_each(|x| *x = T::zero());
    match plan.loss {
        LossKind::CrossEntropy => {
            for r in 0..rows {
                let row = &w.logits[r * v..(r + 1) * v];
                let m = row.iter().copied().fold(T::neg_infinity(), T::max);
                let z: T = row.iter().map(|x| (*x - m).exp()).sum();
                let lse = m + z.ln();
                let cnt = if plan.shared { s } else { 1 };
                let dl = &mut w.d_logits[r * v..(r + 1) * v];
                for (g, x) in dl.iter_mut().zip(row) {
                    *g = (*x - lse).exp() * T::of_usize(cnt) * inv_n;
                }
            }
            for (k, &j) in w.qpos.iter().enumerate() {
                let r = if plan.shared { 0 } else { k };
                let lab = labels[j] as usize;
                let row = &w.logits[r * v..(r + 1) * v];
                let m = row.iter().copied().fold(T::neg_infinity(), T::max);
                let lse = m + row.iter().map(|x| (*x - m).exp()).sum::<T>().ln();
                loss += (lse - row[lab]).as_f64() * inv_n.as_f64();
                w.d_logits[r * v + lab] -= inv_n;
            }
        }
        LossKind::Mse => {
            let c = inv_n / T::of_usize(v);
            for (k, &j) in w.qpos.iter().enumerate() {
                let r = if plan.shared { 0 } else { k };
                let lab = labels[j] as usize;
                for i in 0..v {
                    let t = if i == lab { T::one() } else { T::zero() };
                    let diff = w.logits[r * v + i] - t;
                    loss += (diff * diff * c).as_f64();
                    w.d_logits[r * v + i] += T::of(2.0) * diff * c;
                }
            }
        }
    }
    if !backward {
        return loss;
    }
    let g = &mut w.grads;
    // --- decoder backward: d_y [rows, d] ---
    match plan.decoder {
        DecoderKind::Identity => w.d_y[..rows * d].copy_from_slice(&w.d_logits[..rows * v]),
        DecoderKind::Tied => {
            matmul(
                &mut w.d_y[..rows * d],
                &w.d_logits[..rows * v],
                Op::N,
                p[W_E].value(),
                Op::N,
                rows,
                v,
                d,
                false,
            );
            if plan.train[W_E] {
                matmul(
                    &mut g[W_E],
                    &w.d_logits[..rows * v],
                    Op::T,
                    &w.y[..rows * d],
                    Op::N,
                    v,
                    rows,
                    d,
                    true,
                );
            }
        }
        DecoderKind::Trained => {
            matmul(
                &mut w.d_y[..rows * d],
                &w.d_logits[..rows * v],
                Op::N,
                p[W_U].value(),
                Op::T,
                rows,
                v,
                d,
                false,
            );
            matmul(
                &mut g[W_U],
                &w.y[..rows * d],
                Op::T,
                &w.d_logits[..rows * v],
                Op::N,
                d,
                rows,
                v,
                true,
            );
            for r in 0..rows {
                g[B_U]
                    .iter_mut()
                    .zip(&w.d_logits[r * v..(r + 1) * v])
                    .for_each(|(a, b)| *a += *b);
            }
        }
    }
    if plan.layer_norm {
        for r in 0..rows {
            let (gw, gb) = g.split_at_mut(LN_B);
            layer_norm_back(
                &mut w.d_resid[r * d..(r + 1) * d],
                &w.d_y[r * d..(r + 1) * d],
                &w.ln_xhat[r * d..(r + 1) * d],
                w.ln_rstd[r],
                p[LN_W].value(),
                Some((&mut gw[LN_W], &mut gb[0])),
            );
        }
    } else {
        w.d_resid[..rows * d].copy_from_slice(&w.d_y[..rows * d]);
    }
    if plan.need_dh0 {
        w.d_h0[..l * d].iter_mut().for_each(|x| *x = T::zero());
        if plan.residual {
            add_rows(&mut w.d_h0, &w.d_resid, &w.qpos, d);
        }
    }
    // --- attention backward: d_resid is d(hook_z) ---
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
        for r in 0..s {
            let pr = &w.hook_pattern[r * l..(r + 1) * l];
            let dp = &mut w.d_pattern[r * l..(r + 1) * l];
            let dot: T = pr.iter().zip(dp.iter()).map(|(a, b)| *a * *b).sum();
            dp.iter_mut()
                .zip(pr)
                .for_each(|(x, pp)| *x = *pp * (*x - dot) * c);
        }
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
    // --- embedding: dh0 summed per token id (backward through it once per step) ---
    if plan.need_dh0 {
        for (j, &id) in ids.iter().enumerate() {
            let id = id as usize;
            w.d_table[id * d..(id + 1) * d]
                .iter_mut()
                .zip(&w.d_h0[j * d..(j + 1) * d])
                .for_each(|(a, b)| *a += *b);
        }
    }
    loss
}
