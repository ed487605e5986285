//! Named hook points of the markov-icl model: an unfused analysis forward in
//! `f64`, position by position, in which every activation is a tensor that can
//! be read ([`HookedModel::run_with_cache`]) or changed
//! ([`HookedModel::run_with_hooks`]).
//!
//! It recomputes the training forward's equations from the public parameters and
//! agrees with [`RpeTransformer::run_one`] to rounding; training never runs it.
//! Input: [`Batch`] token ids `[batch, T]` (ids `< S`, `T ≤ max_len`). Output: the
//! logits `[batch, pos, d_vocab]`. Hook points, for `l` in 0, 1:
//!
//! | name | layout |
//! |---|---|
//! | `hook_embed` | `[batch, pos, d_model]` |
//! | `blocks.{l}.hook_resid_pre` | `[batch, pos, d_model]` |
//! | `blocks.{l}.attn.hook_q`, `hook_k`, `hook_v`, `hook_z` | `[batch, pos, head, d_head]` |
//! | `blocks.{l}.attn.hook_pattern` | `[batch, head, query_pos, key_pos]` |
//! | `blocks.{l}.hook_attn_out`, `blocks.{l}.hook_resid_post` | `[batch, pos, d_model]` |
//!
//! ```
//! use mechlab::papers::markov_icl::model::{Dims, RpeTransformer};
//! use mechlab_engine::hooks::{Batch, HookedModel};
//! let dims = Dims { vocab: 2, max_len: 8, d_model: 4, n_heads: 2, init_std: 0.02, proj_std: 0.01, dropout: 0.0 };
//! let mut m = RpeTransformer::<f64>::new(&dims, &mut mechlab::rng::stream(0, mechlab::rng::Stream::Init)).unwrap();
//! let (y, cache) = m.run_with_cache(&Batch::new(vec![0, 1, 1, 0], 1, 4), &["blocks.0.attn.hook_pattern"]).unwrap();
//! assert_eq!(y.shape, vec![1, 4, 2]);
//! assert_eq!(cache["blocks.0.attn.hook_pattern"].shape, vec![1, 2, 4, 4]);
//! ```

use super::model::RpeTransformer;
use mechlab_engine::hooks::{Axes, Site};
use mechlab_engine::hooks::{Batch, HookError, HookPoint, HookedModel, Tensor};
use mechlab_engine::Float;

const OUTPUT: &str = "[batch, pos, d_vocab]";

fn points(n_layers: usize) -> Vec<HookPoint> {
    let mut v = vec![HookPoint::new(
        "hook_embed",
        "[batch, pos, d_model]",
        "token embeddings W_E[x]",
    )];
    for l in 0..n_layers {
        let b = format!("blocks.{l}");
        v.push(HookPoint::new(
            format!("{b}.hook_resid_pre"),
            "[batch, pos, d_model]",
            "residual stream into the layer",
        ));
        for (n, d) in [
            ("hook_q", "queries of LayerNorm(resid)"),
            ("hook_k", "keys"),
            ("hook_v", "values"),
        ] {
            v.push(HookPoint::new(
                format!("{b}.attn.{n}"),
                "[batch, pos, head, d_head]",
                d,
            ));
        }
        v.push(HookPoint::new(
            format!("{b}.attn.hook_pattern"),
            "[batch, head, query_pos, key_pos]",
            "softmax of (q·k + q·p_{i−j})/√d_head, causal",
        ));
        v.push(HookPoint::new(
            format!("{b}.attn.hook_z"),
            "[batch, pos, head, d_head]",
            "Σ_j pattern · v_j",
        ));
        v.push(HookPoint::new(
            format!("{b}.hook_attn_out"),
            "[batch, pos, d_model]",
            "z · W_Oᵀ",
        ));
        v.push(HookPoint::new(
            format!("{b}.hook_resid_post"),
            "[batch, pos, d_model]",
            "resid_pre + attn_out",
        ));
    }
    v
}

fn layernorm(x: &[f64], w: &[f64], b: &[f64], out: &mut [f64]) {
    let d = w.len();
    for (xr, or) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        let mu = xr.iter().sum::<f64>() / d as f64;
        let var = xr.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / d as f64;
        let s = 1.0 / (var + 1e-5).sqrt();
        for e in 0..d {
            or[e] = (xr[e] - mu) * s * w[e] + b[e];
        }
    }
}

/// rows [N, in] · Wᵀ with W [out, in].
fn matmul_t(x: &[f64], w: &[f64], d_in: usize, d_out: usize) -> Vec<f64> {
    let n = x.len() / d_in;
    let mut y = vec![0.0; n * d_out];
    for r in 0..n {
        for o in 0..d_out {
            y[r * d_out + o] = (0..d_in).map(|i| x[r * d_in + i] * w[o * d_in + i]).sum();
        }
    }
    y
}

fn forward<T: Float>(
    m: &RpeTransformer<T>,
    batch: &Batch,
    site: &mut Site<'_>,
) -> Result<Tensor, HookError> {
    let (s, d) = (m.dims.vocab, m.dims.d_model);
    let (nb, t) = (batch.batch, batch.seq_len);
    if t == 0 || t > m.dims.max_len {
        return Err(HookError::Input(format!(
            "seq_len {t}: must be 1..={}",
            m.dims.max_len
        )));
    }
    if let Some(bad) = batch.tokens.iter().find(|&&x| x as usize >= s) {
        return Err(HookError::Input(format!(
            "token {bad} outside the vocabulary of {s}"
        )));
    }
    let p: Vec<Vec<f64>> = m
        .params
        .iter()
        .map(|q| q.value().iter().map(|v| v.as_f64()).collect())
        .collect();
    let pos = Axes {
        head: None,
        pos: Some(1),
    };
    let head_pos = Axes {
        head: Some(2),
        pos: Some(1),
    };
    let pat_axes = Axes {
        head: Some(1),
        pos: Some(2),
    };
    // x: [B, T, D]
    let mut x = Tensor::zeros(vec![nb, t, d]);
    for (i, &tok) in batch.tokens.iter().enumerate() {
        x.data[i * d..(i + 1) * d].copy_from_slice(&p[0][tok as usize * d..(tok as usize + 1) * d]);
    }
    site.visit("hook_embed", &mut x, pos)?;
    for l in 0..2 {
        let base = 1 + 7 * l;
        let h = if l == 0 { m.dims.n_heads } else { 1 };
        let dh = d / h;
        let b = format!("blocks.{l}");
        site.visit(&format!("{b}.hook_resid_pre"), &mut x, pos)?;
        let mut ln = vec![0.0; x.data.len()];
        layernorm(&x.data, &p[base], &p[base + 1], &mut ln);
        let mut qkv: Vec<Tensor> = (0..3)
            .map(|k| Tensor::new(vec![nb, t, h, dh], matmul_t(&ln, &p[base + 2 + k], d, d)))
            .collect();
        for (k, n) in ["hook_q", "hook_k", "hook_v"].iter().enumerate() {
            site.visit(&format!("{b}.attn.{n}"), &mut qkv[k], head_pos)?;
        }
        let (q, k, v) = (&qkv[0].data, &qkv[1].data, &qkv[2].data);
        let wpos = &p[base + 6];
        // pattern: [B, H, T, T]
        let mut pat = Tensor::zeros(vec![nb, h, t, t]);
        let scale = 1.0 / (dh as f64).sqrt();
        for bi in 0..nb {
            for hd in 0..h {
                for i in 0..t {
                    let row =
                        &mut pat.data[((bi * h + hd) * t + i) * t..((bi * h + hd) * t + i + 1) * t];
                    let qi = &q[(bi * t + i) * d + hd * dh..(bi * t + i) * d + (hd + 1) * dh];
                    for (j, r) in row.iter_mut().enumerate().take(i + 1) {
                        let kj = &k[(bi * t + j) * d + hd * dh..];
                        let pr = &wpos[(i - j) * d + hd * dh..];
                        *r = (0..dh).map(|e| qi[e] * (kj[e] + pr[e])).sum::<f64>() * scale;
                    }
                    let mx = row[..=i].iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let sum: f64 = row[..=i]
                        .iter_mut()
                        .map(|r| {
                            *r = (*r - mx).exp();
                            *r
                        })
                        .sum();
                    row[..=i].iter_mut().for_each(|r| *r /= sum);
                }
            }
        }
        site.visit(&format!("{b}.attn.hook_pattern"), &mut pat, pat_axes)?;
        // z: [B, T, H, dh]
        let mut z = Tensor::zeros(vec![nb, t, h, dh]);
        for bi in 0..nb {
            for hd in 0..h {
                for i in 0..t {
                    for j in 0..t {
                        let a = pat.data[((bi * h + hd) * t + i) * t + j];
                        for e in 0..dh {
                            z.data[(bi * t + i) * d + hd * dh + e] +=
                                a * v[(bi * t + j) * d + hd * dh + e];
                        }
                    }
                }
            }
        }
        site.visit(&format!("{b}.attn.hook_z"), &mut z, head_pos)?;
        let mut out = Tensor::new(vec![nb, t, d], matmul_t(&z.data, &p[base + 5], d, d));
        site.visit(&format!("{b}.hook_attn_out"), &mut out, pos)?;
        for (xi, oi) in x.data.iter_mut().zip(&out.data) {
            *xi += oi;
        }
        site.visit(&format!("{b}.hook_resid_post"), &mut x, pos)?;
    }
    let mut ln = vec![0.0; x.data.len()];
    layernorm(&x.data, &p[15], &p[16], &mut ln);
    Ok(Tensor::new(vec![nb, t, s], matmul_t(&ln, &p[17], d, s)))
}

impl<T: Float> HookedModel for RpeTransformer<T> {
    fn hook_points(&self) -> Vec<HookPoint> {
        points(2)
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
    use crate::papers::markov_icl::model::Dims;
    use crate::rng::{stream, Stream};
    use mechlab_engine::hooks::{Ablation, Hook};

    fn model() -> RpeTransformer<f64> {
        let dims = Dims {
            vocab: 3,
            max_len: 12,
            d_model: 6,
            n_heads: 2,
            init_std: 0.4,
            proj_std: 0.4,
            dropout: 0.0,
        };
        RpeTransformer::new(&dims, &mut stream(5, Stream::Init)).unwrap()
    }

    #[test]
    fn the_analysis_forward_matches_the_training_forward() {
        let mut m = model();
        let toks = [0u8, 2, 1, 1, 0, 2, 2, 1, 0];
        let (logits, pats) = m.run_one(&toks);
        let batch = Batch::new(toks.iter().map(|&v| v as u32).collect(), 1, toks.len());
        let (y, cache) = m
            .run_with_cache(
                &batch,
                &["blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern"],
            )
            .unwrap();
        let close = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-12);
        assert!(close(&y.data, &logits));
        assert!(close(&cache["blocks.0.attn.hook_pattern"].data, &pats[0]));
        assert!(close(&cache["blocks.1.attn.hook_pattern"].data, &pats[1]));
    }

    #[test]
    fn hooks_change_what_follows_and_bad_input_is_an_error() {
        let mut m = model();
        let batch = Batch::new(vec![0, 1, 2, 1, 0], 1, 5);
        let clean = m.run_with_hooks(&batch, &[]).unwrap();
        let zero = Hook {
            name: "blocks.1.hook_attn_out".into(),
            ablation: Ablation::Zero,
            heads: None,
            positions: None,
        };
        assert_ne!(m.run_with_hooks(&batch, &[zero]).unwrap().data, clean.data);
        assert!(m
            .run_with_cache(&batch, &["blocks.2.attn.hook_pattern"])
            .is_err());
        assert!(m
            .run_with_hooks(&Batch::new(vec![0, 7], 1, 2), &[])
            .is_err());
        assert!(m
            .run_with_hooks(&Batch::new(vec![0; 13], 1, 13), &[])
            .is_err());
    }
}
