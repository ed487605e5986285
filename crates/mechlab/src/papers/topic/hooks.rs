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
///
/// A one-hot row (the `one_hot` embedding's) picks `W`'s row instead of summing:
/// `Σ_k x_k · W[k, j]` from `0.0` adds signed zeros and one `1 · W[id, j]`, which
/// gives `W[id, j]` exactly, or `+0.0` where that entry is a zero, as long as no
/// entry of `W` is infinite or NaN (`0 · ∞` would make the sum NaN).
fn linear(x: &[f64], w: &[f64], b: Option<&[f64]>, d_in: usize, d_out: usize) -> Vec<f64> {
    let n = x.len() / d_in;
    let mut out = vec![0.0; n * d_out];
    let finite = w.iter().all(|v| v.is_finite());
    for (o, xr) in out.chunks_mut(d_out).zip(x.chunks(d_in)) {
        match one_hot(xr).filter(|_| finite) {
            Some(id) => o
                .iter_mut()
                .zip(&w[id * d_out..][..d_out])
                .for_each(|(o, &wj)| *o = if wj == 0.0 { 0.0 } else { wj }),
            None => rows_times(o, xr, w, d_in, d_out),
        }
    }
    if let Some(b) = b {
        for o in out.chunks_mut(d_out) {
            o.iter_mut().zip(b).for_each(|(a, c)| *a += c);
        }
    }
    out
}

/// The index of the one entry equal to 1 when every other entry is ±0.
fn one_hot(x: &[f64]) -> Option<usize> {
    let mut at = None;
    for (k, &v) in x.iter().enumerate() {
        if v == 1.0 && at.is_none() {
            at = Some(k);
        } else if v != 0.0 {
            return None;
        }
    }
    at
}

/// Output columns per block of [`rows_times`]: 16 `f64` accumulators, which stay
/// in registers at every SIMD level.
const COLS: usize = 16;

/// `out[r, j] = Σ_k x[r, k] · w[k, j]` for `x: [n, d_in]`, `w: [d_in, d_out]`,
/// each entry summed from `0.0` with `k` in order, a product rounded before its
/// add. Those are the operations of the plain sweep (`out[r, :] += x[r, k] ·
/// w[k, :]` for each `k`), so the bits are its bits; here a block of outputs stays
/// in registers over the whole sum instead of going through memory at every `k`.
fn rows_times(out: &mut [f64], x: &[f64], w: &[f64], d_in: usize, d_out: usize) {
    mechlab_engine::simd::widest(
        #[inline(always)]
        || {
            for (o, xr) in out.chunks_mut(d_out).zip(x.chunks(d_in)) {
                for j0 in (0..d_out).step_by(COLS) {
                    let cols = COLS.min(d_out - j0);
                    let mut acc = [0.0f64; COLS];
                    for (k, &xk) in xr.iter().enumerate() {
                        let wk = &w[k * d_out + j0..][..cols];
                        for (a, &wkj) in acc.iter_mut().zip(wk) {
                            *a += xk * wkj;
                        }
                    }
                    o[j0..j0 + cols].copy_from_slice(&acc[..cols]);
                }
            }
        },
    )
}

/// Keys per block of [`dots`]: independent sums side by side.
const KEYS: usize = 8;

/// `out[j] = Σ_e q[e] · keys[j, e]` (`keys: [out.len(), d]`), each exactly as
/// `Iterator::sum` adds the products (from its own starting value, `e` in order),
/// eight keys at a time so that no sum waits on the one before it.
fn dots(out: &mut [f64], q: &[f64], keys: &[f64], d: usize) {
    let start: f64 = std::iter::empty::<f64>().sum();
    mechlab_engine::simd::widest(
        #[inline(always)]
        || {
            for (j0, o) in (0..out.len()).step_by(KEYS).zip(out.chunks_mut(KEYS)) {
                let mut acc = [start; KEYS];
                for (e, &qe) in q[..d].iter().enumerate() {
                    for (t, a) in acc[..o.len()].iter_mut().enumerate() {
                        *a += qe * keys[(j0 + t) * d + e];
                    }
                }
                o.copy_from_slice(&acc[..o.len()]);
            }
        },
    )
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
                dots(row, qi, &k.data[b * l * d..][..l * d], d);
                row.iter_mut().for_each(|x| *x *= c);
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
        // z[b] = pattern[b] · v[b]: [l, l] · [l, d]
        let (zb, pb) = (
            &mut z.data[b * l * d..][..l * d],
            &pat.data[b * l * l..][..l * l],
        );
        rows_times(zb, pb, &val.data[b * l * d..][..l * d], l, d);
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
                dots(o, yr, &e, d);
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

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Entries over several binades, some exactly zero (signed), so that another
    /// order, a fused multiply-add or another starting zero would show.
    fn values(rng: &mut rand_chacha::ChaCha8Rng, len: usize) -> Vec<f64> {
        (0..len)
            .map(|_| match rng.random_range(0..10) {
                0 => 0.0,
                1 => -0.0,
                _ => rng.random_range(-1.0..1.0) * 2f64.powi(rng.random_range(-20..20)),
            })
            .collect()
    }

    #[test]
    fn blocked_loops_compute_the_plain_loops_bits() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        for (n, d_in, d_out) in [(1, 1, 1), (3, 7, 16), (5, 100, 100), (2, 33, 47), (4, 3, 1)] {
            let (x, w) = (values(&mut rng, n * d_in), values(&mut rng, d_in * d_out));
            // the sweep `linear` used before
            let mut want = vec![0.0; n * d_out];
            for r in 0..n {
                for k in 0..d_in {
                    for j in 0..d_out {
                        want[r * d_out + j] += x[r * d_in + k] * w[k * d_out + j];
                    }
                }
            }
            let mut got = vec![f64::NAN; n * d_out];
            rows_times(&mut got, &x, &w, d_in, d_out);
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "rows_times {n}×{d_in}×{d_out}");
            // the per-key sums the scores and the tied decoder used before
            let q = &x[..d_in];
            let want: Vec<f64> = (0..d_out)
                .map(|j| q.iter().enumerate().map(|(e, a)| a * w[j * d_in + e]).sum())
                .collect();
            let mut got = vec![f64::NAN; d_out];
            dots(&mut got, q, &w, d_in);
            assert_eq!(bits(&got), bits(&want), "dots {d_in}×{d_out}");
        }
        // one-hot rows take W's row; signed zeros in both and a row of two ones
        // or of an infinity go through the sums
        let (d_in, d_out) = (5, 7);
        let mut w = values(&mut rng, d_in * d_out);
        w[2 * d_out + 1] = -0.0;
        w[2 * d_out + 2] = 0.0;
        let mut x = vec![0.0; 3 * d_in];
        x[2] = 1.0;
        x[d_in + 1] = -0.0;
        x[d_in + 4] = 1.0;
        x[2 * d_in] = 1.0;
        x[2 * d_in + 3] = 1.0;
        for w in [w.clone(), {
            let mut v = w;
            v[4 * d_out] = f64::INFINITY;
            v
        }] {
            let mut want = vec![0.0; 3 * d_out];
            rows_times(&mut want, &x, &w, d_in, d_out);
            let got = linear(&x, &w, None, d_in, d_out);
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&got),
                bits(&want),
                "one-hot rows, W finite: {}",
                w[4 * d_out].is_finite()
            );
        }
        // all products zero: the sums' starting value decides the sign
        let mut got = [f64::NAN; 3];
        dots(&mut got, &[-0.0, 0.0], &[0.0, 0.0, 0.0, -0.0, -0.0, 0.0], 2);
        let want: Vec<f64> = (0..3)
            .map(|j| {
                [-0.0, 0.0]
                    .iter()
                    .zip(&[0.0, 0.0, 0.0, -0.0, -0.0, 0.0][2 * j..])
                    .map(|(a, b)| a * b)
                    .sum()
            })
            .collect();
        assert_eq!(
            got.map(f64::to_bits).to_vec(),
            want.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
    }
}
