//! The per-document forward and backward of [`super::TopicMlm`] and the layers
//! around its head (embedding with the optional BERT LayerNorm, layer norm,
//! residual, decoder, loss), each a forward / backward pair over the chunk's
//! preallocated [`super::Work`] buffers. The head itself (projections, masked
//! softmax attention) is in `topic_mlm_attention.rs`.
//!
//! Shapes: `L` tokens in the document, `S` labelled positions (the only queries
//! the loss reads), `d = d_model`, `V = d_vocab`.

use super::attention::{attend, attend_back};
use super::*;
use mechlab_engine::layers::layernorm;

/// `h0: [n, d]` for `ids`; with the BERT layer norm, keeps its input `pre: [n, d]`
/// and its `mean`, `rstd: [n]` for the backward.
pub(super) fn embed<T: Float>(
    p: &[Param<T>],
    plan: &Plan,
    ids: &[u32],
    h0: &mut [T],
    pre: &mut [T],
    mean: &mut [T],
    rstd: &mut [T],
) {
    let d = plan.d;
    let e = p[W_E].value();
    for (j, &id) in ids.iter().enumerate() {
        let row = &e[id as usize * d..(id as usize + 1) * d];
        if plan.bert_ln {
            let x = &mut pre[j * d..(j + 1) * d];
            x.iter_mut()
                .zip(row)
                .zip(p[TOKEN_TYPE].value())
                .for_each(|((a, &w), &b)| *a = w + b);
            layernorm::forward(
                &mut h0[j * d..(j + 1) * d],
                &mut mean[j..j + 1],
                &mut rstd[j..j + 1],
                x,
                p[EMB_LN_W].value(),
                p[EMB_LN_B].value(),
                1,
                d,
                LN_EPS,
            );
        } else {
            h0[j * d..(j + 1) * d].copy_from_slice(row);
        }
    }
}

/// Backward of [`embed`] over the whole vocabulary, from `dh0` per token id.
pub(super) fn embed_back<T: Float>(
    p: &mut [Param<T>; N_SLOTS],
    plan: &Plan,
    d_table: &[T],
    pre: &[T],
    mean: &[T],
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
            du.iter_mut().for_each(|x| *x = T::zero());
            layernorm::backward(
                du,
                Some(gw),
                Some(pb[0].grad_mut()),
                dh,
                &pre[id * d..(id + 1) * d],
                &mean[id..id + 1],
                &rstd[id..id + 1],
                g,
                1,
                d,
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
/// when `backward`, gradients into `w.grads`. The stages below run in this order;
/// each reads the buffers of `w` the one before it wrote.
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
    let (l, d) = (ids.len(), plan.d);
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
    // --- attention: hook_z = a [rows, d] ---
    attend(p, plan, w, ids, hidden, inv_vis);
    residual_norm(p, plan, w, ids, rows);
    decode(p, plan, w, rows);
    let loss = loss_and_grad(plan, w, labels, inv_n, rows);
    if !backward {
        return loss;
    }
    decode_back(p, plan, w, rows);
    norm_back(p, plan, w, l, rows);
    // --- attention backward: d_resid is d(hook_z); adds into d_h0 and the grads ---
    attend_back(p, plan, w, ids, hidden, inv_vis);
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

/// `resid = hook_z (+ the query's embedding)`, then `y = LN(resid)` or `resid`.
fn residual_norm<T: Float>(p: &[Param<T>], plan: &Plan, w: &mut Work<T>, ids: &[u32], rows: usize) {
    let d = plan.d;
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
    if plan.layer_norm {
        layernorm::forward(
            &mut w.y[..rows * d],
            &mut w.ln_mean[..rows],
            &mut w.ln_rstd[..rows],
            &w.resid[..rows * d],
            p[LN_W].value(),
            p[LN_B].value(),
            rows,
            d,
            LN_EPS,
        );
    } else {
        w.y[..rows * d].copy_from_slice(&w.resid[..rows * d]);
    }
}

/// Logits `[rows, v]` from `y`: identity, tied (`y W_Eᵀ`) or trained (`y W_U + b_U`).
fn decode<T: Float>(p: &[Param<T>], plan: &Plan, w: &mut Work<T>, rows: usize) {
    let (d, v) = (plan.d, plan.v);
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
}

/// The loss of the labelled positions and its gradient `d_logits` (cross-entropy
/// formed without cancellation at the top logit, or MSE against one-hot labels).
fn loss_and_grad<T: Float>(
    plan: &Plan,
    w: &mut Work<T>,
    labels: &[u32],
    inv_n: T,
    rows: usize,
) -> f64 {
    let (v, s) = (plan.v, w.qpos.len());
    let mut loss = 0.0;
    w.d_logits[..rows * v]
        .iter_mut()
        .for_each(|x| *x = T::zero());
    match plan.loss {
        LossKind::CrossEntropy => {
            // Each row's gradient is (cnt·p − labels)/n, cnt its labels (all of them
            // for the shared row). At the row's top logit that difference cancels
            // once p rounds to 1, so it is formed as (−c·Σ_(i≠top) p_i +
            // (cnt − c)·p_top)/n, with c the labels on the top token (the engine's
            // cross-entropy does the same, see its docs).
            let cnt = if plan.shared { s } else { 1 };
            for r in 0..rows {
                let row = &w.logits[r * v..(r + 1) * v];
                let dl = &mut w.d_logits[r * v..(r + 1) * v];
                let top = argmax(row);
                let m = row[top];
                T::exp_shifted_into(dl, row, m);
                // Σ_(i≠top) without a branch in the loop (not Σ − 1, which cancels)
                dl[top] = T::zero();
                let rest = dl.iter().copied().sum::<T>();
                dl[top] = T::one();
                let sum = T::one() + rest;
                w.row_top[r] = top;
                w.row_l1p[r] = rest.ln_1p();
                let on_top = |&j: &usize| labels[j] as usize == top;
                let c = if plan.shared {
                    w.qpos.iter().filter(|j| on_top(j)).count()
                } else {
                    usize::from(on_top(&w.qpos[r]))
                };
                let (cnt_t, c_t) = (T::of_usize(cnt), T::of_usize(c));
                let (p_rest, p_top) = (rest / sum, T::one() / sum);
                let scale = cnt_t * inv_n / sum;
                dl.iter_mut().for_each(|g| *g *= scale);
                dl[top] = (-c_t * p_rest + (cnt_t - c_t) * p_top) * inv_n;
            }
            for (k, &j) in w.qpos.iter().enumerate() {
                let r = if plan.shared { 0 } else { k };
                let lab = labels[j] as usize;
                let (top, row) = (w.row_top[r], &w.logits[r * v..(r + 1) * v]);
                // log Σ exp(row) − row[lab] = ln(1 + Σ_(i≠top) e^(row_i − m)) + (m − row[lab])
                loss += (w.row_l1p[r] + (row[top] - row[lab])).as_f64() * inv_n.as_f64();
                if lab != top {
                    w.d_logits[r * v + lab] -= inv_n;
                }
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
    loss
}

/// `d_y` from `d_logits`, and the decoder's gradients.
fn decode_back<T: Float>(p: &[Param<T>], plan: &Plan, w: &mut Work<T>, rows: usize) {
    let (d, v) = (plan.d, plan.v);
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
}

/// `d_resid` through the layer norm (and its gradients), and the residual's
/// share of `d_h0`.
fn norm_back<T: Float>(p: &[Param<T>], plan: &Plan, w: &mut Work<T>, l: usize, rows: usize) {
    let d = plan.d;
    let g = &mut w.grads;
    if plan.layer_norm {
        let (gw, gb) = g.split_at_mut(LN_B);
        w.d_resid[..rows * d]
            .iter_mut()
            .for_each(|x| *x = T::zero());
        layernorm::backward(
            &mut w.d_resid[..rows * d],
            Some(&mut gw[LN_W]),
            Some(&mut gb[0]),
            &w.d_y[..rows * d],
            &w.resid[..rows * d],
            &w.ln_mean[..rows],
            &w.ln_rstd[..rows],
            p[LN_W].value(),
            rows,
            d,
        );
    } else {
        w.d_resid[..rows * d].copy_from_slice(&w.d_y[..rows * d]);
    }
    if plan.need_dh0 {
        w.d_h0[..l * d].iter_mut().for_each(|x| *x = T::zero());
        if plan.residual {
            add_rows(&mut w.d_h0, &w.d_resid, &w.qpos, d);
        }
    }
}

/// The index of the largest entry (the first if tied).
fn argmax<T: Float>(row: &[T]) -> usize {
    let mut top = 0;
    for (j, &x) in row.iter().enumerate() {
        if x > row[top] {
            top = j;
        }
    }
    top
}
