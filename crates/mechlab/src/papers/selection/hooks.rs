//! Named hook points of the token-selection model ([`SelectionModel`]): a direct
//! forward written for analysis, from the model's public parameters widened to
//! `f64`, that agrees with [`SelectionModel::attend`] to rounding.
//!
//! The model is one head with one query, the trained ⟨cls⟩ vector `p`, over the
//! token embeddings; the values are the embeddings themselves (`W_V = I`, so
//! `d_head = d_model`), and the output reads the attended embedding along `v`:
//! `f = v · Σ_i softmax(p·E_x)_i E_(x_i)`.
//!
//! Input: [`Batch`] token ids `[batch, T]`; sequences shorter than `T` end in
//! [`PAD`] (padding only as a suffix, at least one real token); `targets`, when
//! given, are the `±1` labels `[batch]` (not needed for the output). Output: the
//! logit `f` `[batch]`. Hook points:
//!
//! | name | layout | what |
//! |---|---|---|
//! | `hook_embed` | `[batch, pos, d_model]` | `E[x]`, zero rows on padding |
//! | `blocks.0.attn.hook_attn_scores` | `[batch, head, query_pos, key_pos]` | `p·E_x`, `1 × 1 × T`, 0 on padding |
//! | `blocks.0.attn.hook_pattern` | `[batch, head, query_pos, key_pos]` | softmax, `1 × 1 × T`, 0 on padding |
//! | `blocks.0.attn.hook_z` | `[batch, pos, head, d_head]` | `Σ_i a_i E_(x_i)`, `1 × 1 × d_model` |
//!
//! The query axis (`query_pos` of the pattern, `pos` of `hook_z`) has one entry,
//! the ⟨cls⟩ query. There is no residual stream (the output reads `hook_z`).
//!
//! ```
//! use mechlab::papers::selection::data::SeqData;
//! use mechlab::papers::selection::model::{ModelConfig, SelectionModel};
//! use mechlab::papers::selection::hooks::PAD;
//! use mechlab_engine::hooks::{Batch, HookedModel};
//! use std::sync::Arc;
//! let data = Arc::new(SeqData { n: 0, n_ctx: 1, d_vocab: 4, ids: vec![], lens: vec![], y: vec![], signal: vec![] });
//! let mut m = SelectionModel::<f64>::new(&ModelConfig { d_model: 8, ..ModelConfig::default() }, data, 0);
//! let batch = Batch::new(vec![0, 1, 2, 3, 1, PAD], 2, 3);
//! let (f, cache) = m.run_with_cache(&batch, &["blocks.0.attn.hook_pattern"]).unwrap();
//! assert_eq!(f.shape, vec![2]);
//! assert_eq!(cache["blocks.0.attn.hook_pattern"].data[5], 0.0); // padding
//! ```

use super::model::SelectionModel;
use mechlab_engine::hooks::{Axes, Site};
use mechlab_engine::hooks::{Batch, HookError, HookPoint, HookedModel, Tensor};
use mechlab_engine::Float;

/// The padding id of a [`Batch`] for the selection model (only as a suffix).
pub const PAD: u32 = u32::MAX;

fn points() -> Vec<HookPoint> {
    let pattern = "[batch, head, query_pos, key_pos]";
    vec![
        HookPoint::new(
            "hook_embed",
            "[batch, pos, d_model]",
            "the token embeddings E[x]; padding rows are zero",
        ),
        HookPoint::new(
            "blocks.0.attn.hook_attn_scores",
            pattern,
            "scores p·E_x of the one head; query_pos is the ⟨cls⟩ query alone; 0 on padding",
        ),
        HookPoint::new(
            "blocks.0.attn.hook_pattern",
            pattern,
            "softmax of the scores over the real tokens; query_pos is the ⟨cls⟩ query alone; 0 on padding",
        ),
        HookPoint::new(
            "blocks.0.attn.hook_z",
            "[batch, pos, head, d_head]",
            "the attended embedding Σ_i a_i E_(x_i) (values are the embeddings, d_head = d_model); pos is the ⟨cls⟩ query alone",
        ),
    ]
}

const OUTPUT: &str = "[batch]: the logit f = v · hook_z (the label is its sign)";

/// Real lengths of the batch's sequences, checking ids and the padding suffix.
fn lengths(batch: &Batch, d_vocab: usize) -> Result<Vec<usize>, HookError> {
    if batch.seq_len == 0 || batch.tokens.len() != batch.batch * batch.seq_len {
        return Err(HookError::Input(format!(
            "tokens: {} ids for batch {} × seq_len {}",
            batch.tokens.len(),
            batch.batch,
            batch.seq_len
        )));
    }
    (0..batch.batch)
        .map(|b| {
            let seq = batch.seq(b);
            let len = seq.iter().position(|&t| t == PAD).unwrap_or(seq.len());
            if len == 0 {
                return Err(HookError::Input(format!(
                    "sequence {b}: no token before padding"
                )));
            }
            if seq[len..].iter().any(|&t| t != PAD) {
                return Err(HookError::Input(format!(
                    "sequence {b}: padding (PAD = u32::MAX) only as a suffix"
                )));
            }
            if let Some(t) = seq[..len].iter().find(|&&t| t as usize >= d_vocab) {
                return Err(HookError::Input(format!(
                    "sequence {b}: id {t} is not below d_vocab = {d_vocab}"
                )));
            }
            Ok(len)
        })
        .collect()
}

fn forward<T: Float>(
    m: &SelectionModel<T>,
    batch: &Batch,
    site: &mut Site<'_>,
) -> Result<Tensor, HookError> {
    let (d_vocab, d) = (m.w_e.shape()[0], m.w_e.shape()[1]);
    let lens = lengths(batch, d_vocab)?;
    let (nb, t) = (batch.batch, batch.seq_len);
    let e = m.w_e.value();
    let p: Vec<f64> = m.p.value().iter().map(|x| x.as_f64()).collect();
    let v: Vec<f64> = m.v.value().iter().map(|x| x.as_f64()).collect();
    let mut x = Tensor::zeros(vec![nb, t, d]);
    for (b, &len) in lens.iter().enumerate() {
        for (i, &tok) in batch.seq(b)[..len].iter().enumerate() {
            let row = &e[tok as usize * d..(tok as usize + 1) * d];
            for (o, w) in x.data[(b * t + i) * d..][..d].iter_mut().zip(row) {
                *o = w.as_f64();
            }
        }
    }
    site.visit(
        "hook_embed",
        &mut x,
        Axes {
            head: None,
            pos: Some(1),
        },
    )?;
    let pattern_axes = Axes {
        head: Some(1),
        pos: Some(2),
    };
    let mut sc = Tensor::zeros(vec![nb, 1, 1, t]);
    for (b, &len) in lens.iter().enumerate() {
        for i in 0..len {
            let row = &x.data[(b * t + i) * d..][..d];
            sc.data[b * t + i] = row.iter().zip(&p).map(|(a, c)| a * c).sum();
        }
    }
    site.visit("blocks.0.attn.hook_attn_scores", &mut sc, pattern_axes)?;
    let mut a = Tensor::zeros(vec![nb, 1, 1, t]);
    for (b, &len) in lens.iter().enumerate() {
        let (s, row) = (
            &sc.data[b * t..b * t + len],
            &mut a.data[b * t..b * t + len],
        );
        let mx = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        for (o, si) in row.iter_mut().zip(s) {
            *o = (si - mx).exp();
        }
        let z: f64 = row.iter().sum();
        row.iter_mut().for_each(|o| *o /= z);
    }
    site.visit("blocks.0.attn.hook_pattern", &mut a, pattern_axes)?;
    // Every key position is summed, padding included (zero weight and zero row
    // in a clean run), so that a patched pattern or embedding acts everywhere.
    let mut z = Tensor::zeros(vec![nb, 1, 1, d]);
    for b in 0..nb {
        let out = &mut z.data[b * d..(b + 1) * d];
        for i in 0..t {
            let ai = a.data[b * t + i];
            for (o, xi) in out.iter_mut().zip(&x.data[(b * t + i) * d..][..d]) {
                *o += ai * xi;
            }
        }
    }
    site.visit(
        "blocks.0.attn.hook_z",
        &mut z,
        Axes {
            head: Some(2),
            pos: Some(1),
        },
    )?;
    let f = z
        .data
        .chunks(d)
        .map(|zb| zb.iter().zip(&v).map(|(a, c)| a * c).sum())
        .collect();
    Ok(Tensor::new(vec![nb], f))
}

impl<T: Float> HookedModel for SelectionModel<T> {
    fn hook_points(&self) -> Vec<HookPoint> {
        points()
    }
    fn output_layout(&self) -> String {
        OUTPUT.into()
    }
    fn forward_hooked(&mut self, batch: &Batch, site: &mut Site) -> Result<Tensor, HookError> {
        forward(self, batch, site)
    }
}
