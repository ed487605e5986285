//! Named hook points of the topic MLM ([`TopicMlm`]): a direct forward written
//! for analysis, from the model's public parameters widened to `f64`, with every
//! position a query. It agrees with the fused [`TopicMlm::loss`] (which computes
//! only the labelled query rows, or one shared row under frozen-uniform attention)
//! and with [`TopicMlm::attention_pattern`] to rounding.
//!
//! Input: [`Batch`] token ids `[batch, L]`, the model's input ids (masked
//! positions already hold `[MASK]` or their replacement). `targets` are either
//! empty (nothing hidden: every key visible) or `[batch, L]` labels: the true id
//! at a masked position, `-1` elsewhere; as in training, masked positions are
//! hidden from attention as keys. Documents of different lengths go in separate
//! batches (there is no padding). Output: the MLM logits `[batch, pos, d_vocab]`
//! at every position (the decoder's output; with `model.loss = "mse"` these are
//! the scores compared with the one-hot label). Hook points (`d_head = d_model`,
//! one head):
//!
//! | name | layout | when |
//! |---|---|---|
//! | `hook_embed` | `[batch, pos, d_model]` | always: `h0` (after BERT's embedding LayerNorm when on) |
//! | `blocks.0.attn.hook_q`, `hook_k` | `[batch, pos, head, d_head]` | trained attention |
//! | `blocks.0.attn.hook_v` | `[batch, pos, head, d_head]` | always |
//! | `blocks.0.attn.hook_pattern` | `[batch, head, query_pos, key_pos]` | always, `1 × L × L` |
//! | `blocks.0.attn.hook_z` | `[batch, pos, head, d_head]` | always |
//! | `blocks.0.hook_resid_post` | `[batch, pos, d_model]` | `model.residual`: `z + h0` |
//! | `ln_final.hook_normalized` | `[batch, pos, d_model]` | `model.layer_norm` |
//!
//! There is no `hook_result`: the head has no output projection, so it would
//! repeat `hook_z`.
//!
//! ```
//! use mechlab::papers::topic::model::{TopicMlm, TopicMlmConfig};
//! use mechlab_engine::hooks::{Batch, HookedModel};
//! let mut m = TopicMlm::<f64>::new(&TopicMlmConfig::default(), 6, &[usize::MAX; 6], 4, 0).unwrap();
//! let batch = Batch::new(vec![4, 5, 1, 4], 1, 4).with_targets(vec![-1, -1, 5, -1]);
//! let (logits, cache) = m.run_with_cache(&batch, &["blocks.0.attn.hook_pattern"]).unwrap();
//! assert_eq!(logits.shape, vec![1, 4, 6]);
//! assert_eq!(cache["blocks.0.attn.hook_pattern"].data[2], 0.0); // the masked key is hidden
//! ```

use super::model::{
    AttnKind, DecoderKind, TopicMlm, B_K, B_Q, B_U, B_V, EMB_LN_B, EMB_LN_W, LN_B, LN_W,
    TOKEN_TYPE, W_E, W_K, W_Q, W_U, W_V,
};
use mechlab_engine::hooks::{Axes, Site};
use mechlab_engine::hooks::{Batch, HookError, HookPoint, HookedModel, Tensor};
use mechlab_engine::Float;

/// The model's LayerNorm ε (BERT's), for the embedding and the final norm.
const LN_EPS: f64 = 1e-12;

fn points(cfg: &super::model::TopicMlmConfig) -> Vec<HookPoint> {
    let per_head = "[batch, pos, head, d_head]";
    let mut p = vec![HookPoint::new(
        "hook_embed",
        "[batch, pos, d_model]",
        "h0 = E[x] (after the embedding LayerNorm when bert_embedding_ln is on)",
    )];
    if cfg.attention == AttnKind::Trained {
        p.push(HookPoint::new(
            "blocks.0.attn.hook_q",
            per_head,
            "queries h0 W_Q + b_Q",
        ));
        p.push(HookPoint::new(
            "blocks.0.attn.hook_k",
            per_head,
            "keys h0 W_K + b_K",
        ));
    }
    p.push(HookPoint::new(
        "blocks.0.attn.hook_v",
        per_head,
        "values h0 W_V + b_V",
    ));
    p.push(HookPoint::new(
        "blocks.0.attn.hook_pattern",
        "[batch, head, query_pos, key_pos]",
        "attention of every position over the visible keys (masked keys 0); uniform when the attention is frozen",
    ));
    p.push(HookPoint::new(
        "blocks.0.attn.hook_z",
        per_head,
        "the head's output Σ_j A(i,j) v_j (no output projection)",
    ));
    if cfg.residual {
        p.push(HookPoint::new(
            "blocks.0.hook_resid_post",
            "[batch, pos, d_model]",
            "z + h0",
        ));
    }
    if cfg.layer_norm {
        p.push(HookPoint::new(
            "ln_final.hook_normalized",
            "[batch, pos, d_model]",
            "the final LayerNorm's output, what the decoder reads",
        ));
    }
    p
}

const OUTPUT: &str = "[batch, pos, d_vocab]: the MLM logits (decoder output) at every position";

fn layer_norm(row: &mut [f64], g: &[f64], b: &[f64]) {
    let n = row.len() as f64;
    let mean = row.iter().sum::<f64>() / n;
    let var = row.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
    let rstd = 1.0 / (var + LN_EPS).sqrt();
    for (i, x) in row.iter_mut().enumerate() {
        *x = (*x - mean) * rstd * g[i] + b[i];
    }
}

/// `out[r] = x[r] · W + b` for `[n, d_in]` rows, `W: [d_in, d_out]`.
fn linear(x: &[f64], w: &[f64], b: Option<&[f64]>, d_in: usize, d_out: usize) -> Vec<f64> {
    let n = x.len() / d_in;
    let mut out = vec![0.0; n * d_out];
    for r in 0..n {
        let o = &mut out[r * d_out..(r + 1) * d_out];
        for (k, &xk) in x[r * d_in..(r + 1) * d_in].iter().enumerate() {
            for (oj, wj) in o.iter_mut().zip(&w[k * d_out..(k + 1) * d_out]) {
                *oj += xk * wj;
            }
        }
        if let Some(b) = b {
            o.iter_mut().zip(b).for_each(|(a, c)| *a += c);
        }
    }
    out
}

/// Which keys are hidden, from the targets.
fn hidden_keys(batch: &Batch, v: usize) -> Result<Vec<bool>, HookError> {
    let n = batch.batch * batch.seq_len;
    if batch.seq_len == 0 || batch.tokens.len() != n {
        return Err(HookError::Input(format!(
            "tokens: {} ids for batch {} × seq_len {}",
            batch.tokens.len(),
            batch.batch,
            batch.seq_len
        )));
    }
    if let Some(t) = batch.tokens.iter().find(|&&t| t as usize >= v) {
        return Err(HookError::Input(format!(
            "tokens: id {t} is not below d_vocab = {v}"
        )));
    }
    if batch.targets.is_empty() {
        return Ok(vec![false; n]);
    }
    if batch.targets.len() != n {
        return Err(HookError::Input(format!(
            "targets: {} labels, want [batch, seq_len] = {n} (or none)",
            batch.targets.len()
        )));
    }
    let hidden: Vec<bool> = batch.targets.iter().map(|&t| t >= 0).collect();
    if let Some(t) = batch.targets.iter().find(|&&t| t < -1 || t >= v as i64) {
        return Err(HookError::Input(format!(
            "targets: label {t} is neither -1 nor a token id below {v}"
        )));
    }
    if let Some(b) = (0..batch.batch).find(|b| {
        hidden[b * batch.seq_len..][..batch.seq_len]
            .iter()
            .all(|h| *h)
    }) {
        return Err(HookError::Input(format!(
            "targets: every position of sequence {b} is masked, no key is visible"
        )));
    }
    Ok(hidden)
}

fn forward<T: Float>(
    m: &TopicMlm<T>,
    batch: &Batch,
    site: &mut Site<'_>,
) -> Result<Tensor, HookError> {
    let (v, d) = (m.d_vocab(), m.d_model());
    let hidden = hidden_keys(batch, v)?;
    let (nb, l) = (batch.batch, batch.seq_len);
    let cfg = &m.cfg;
    let w = |s: usize| -> Vec<f64> { m.p[s].value().iter().map(|x| x.as_f64()).collect() };
    let per_head = Axes {
        head: Some(2),
        pos: Some(1),
    };
    let pos1 = Axes {
        head: None,
        pos: Some(1),
    };
    // --- embedding ---
    let e = w(W_E);
    let mut h0 = Tensor::zeros(vec![nb, l, d]);
    let (tt, eg, eb) = (w(TOKEN_TYPE), w(EMB_LN_W), w(EMB_LN_B));
    for (row, &id) in h0.data.chunks_mut(d).zip(&batch.tokens) {
        row.copy_from_slice(&e[id as usize * d..(id as usize + 1) * d]);
        if cfg.bert_embedding_ln {
            row.iter_mut().zip(&tt).for_each(|(a, b)| *a += b);
            layer_norm(row, &eg, &eb);
        }
    }
    site.visit("hook_embed", &mut h0, pos1)?;
    // --- the head ---
    let trained = cfg.attention == AttnKind::Trained;
    let shape = vec![nb, l, 1, d];
    let mut pat = Tensor::zeros(vec![nb, 1, l, l]);
    if trained {
        let mut q = Tensor::new(
            shape.clone(),
            linear(&h0.data, &w(W_Q), Some(&w(B_Q)), d, d),
        );
        site.visit("blocks.0.attn.hook_q", &mut q, per_head)?;
        let mut k = Tensor::new(
            shape.clone(),
            linear(&h0.data, &w(W_K), Some(&w(B_K)), d, d),
        );
        site.visit("blocks.0.attn.hook_k", &mut k, per_head)?;
        let c = 1.0 / (d as f64).sqrt();
        for b in 0..nb {
            let hid = &hidden[b * l..(b + 1) * l];
            for i in 0..l {
                let qi = &q.data[(b * l + i) * d..][..d];
                let row = &mut pat.data[(b * l + i) * l..][..l];
                for (j, x) in row.iter_mut().enumerate() {
                    let kj = &k.data[(b * l + j) * d..][..d];
                    *x = qi.iter().zip(kj).map(|(a, c)| a * c).sum::<f64>() * c;
                }
                let mx = (0..l)
                    .filter(|&j| !hid[j])
                    .map(|j| row[j])
                    .fold(f64::NEG_INFINITY, f64::max);
                for (j, x) in row.iter_mut().enumerate() {
                    *x = if hid[j] { 0.0 } else { (*x - mx).exp() };
                }
                let z: f64 = row.iter().sum();
                row.iter_mut().for_each(|x| *x /= z);
            }
        }
    } else {
        for b in 0..nb {
            let hid = &hidden[b * l..(b + 1) * l];
            let u = 1.0 / hid.iter().filter(|h| !**h).count() as f64;
            for (ij, x) in pat.data[b * l * l..(b + 1) * l * l].iter_mut().enumerate() {
                *x = if hid[ij % l] { 0.0 } else { u };
            }
        }
    }
    let mut val = Tensor::new(
        shape.clone(),
        linear(&h0.data, &w(W_V), Some(&w(B_V)), d, d),
    );
    site.visit("blocks.0.attn.hook_v", &mut val, per_head)?;
    site.visit(
        "blocks.0.attn.hook_pattern",
        &mut pat,
        Axes {
            head: Some(1),
            pos: Some(2),
        },
    )?;
    let mut z = Tensor::zeros(shape);
    for b in 0..nb {
        for i in 0..l {
            let out = &mut z.data[(b * l + i) * d..][..d];
            for j in 0..l {
                let a = pat.data[(b * l + i) * l + j];
                for (o, vj) in out.iter_mut().zip(&val.data[(b * l + j) * d..][..d]) {
                    *o += a * vj;
                }
            }
        }
    }
    site.visit("blocks.0.attn.hook_z", &mut z, per_head)?;
    // --- residual, final norm, decoder ---
    let mut y = Tensor::new(vec![nb, l, d], z.data);
    if cfg.residual {
        y.data.iter_mut().zip(&h0.data).for_each(|(a, b)| *a += b);
        site.visit("blocks.0.hook_resid_post", &mut y, pos1)?;
    }
    if cfg.layer_norm {
        let (g, bb) = (w(LN_W), w(LN_B));
        y.data
            .chunks_mut(d)
            .for_each(|row| layer_norm(row, &g, &bb));
        site.visit("ln_final.hook_normalized", &mut y, pos1)?;
    }
    let logits = match cfg.decoder {
        DecoderKind::Identity => y.data,
        DecoderKind::Tied => {
            // y · W_Eᵀ: W_E is [V, d]
            let mut out = vec![0.0; nb * l * v];
            for (o, yr) in out.chunks_mut(v).zip(y.data.chunks(d)) {
                for (t, ot) in o.iter_mut().enumerate() {
                    *ot = yr
                        .iter()
                        .zip(&e[t * d..(t + 1) * d])
                        .map(|(a, c)| a * c)
                        .sum();
                }
            }
            out
        }
        DecoderKind::Trained => linear(&y.data, &w(W_U), Some(&w(B_U)), d, v),
    };
    Ok(Tensor::new(vec![nb, l, v], logits))
}

impl<T: Float> HookedModel for TopicMlm<T> {
    fn hook_points(&self) -> Vec<HookPoint> {
        points(&self.cfg)
    }
    fn output_layout(&self) -> String {
        OUTPUT.into()
    }
    fn forward_hooked(&mut self, batch: &Batch, site: &mut Site) -> Result<Tensor, HookError> {
        forward(self, batch, site)
    }
}
