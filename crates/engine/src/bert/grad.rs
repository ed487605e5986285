//! The encoder's gradients at its hook points: the forward again in `f64`,
//! assembled from the engine's layers (linear, layer norm, attention with a key
//! mask, the exact GELU), and its backward through the same layers.
//!
//! The fused forward ([`Bert::forward_chunk`]) is `f32`, packed and chunked for
//! speed, and keeps nothing a backward needs; analysis asks for exact
//! gradients (`run_with_grads`, TransformerLens's `incl_bwd`), so this path
//! keeps every activation of the batch in `f64` and is checked against finite
//! differences taken through its own `edit` visitor (`tests/bert_grads.rs`).
//! It agrees with the fused forward to `f32` rounding (and the GELU's `erf`,
//! which the fused path approximates to 1.5·10⁻⁷).

use super::{Bert, Site};
use crate::hooks::{ActivationCache, Batch, HookError, Tensor};
use crate::layers::attention::{Attention, AttnExtras};
use crate::layers::{gelu, layernorm, linear};

fn wide(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| f64::from(v)).collect()
}

/// One layer's weights in `f64`.
struct Layer64 {
    wq: Vec<f64>,
    bq: Vec<f64>,
    wk: Vec<f64>,
    bk: Vec<f64>,
    wv: Vec<f64>,
    bv: Vec<f64>,
    wo: Vec<f64>,
    bo: Vec<f64>,
    ln1: (Vec<f64>, Vec<f64>),
    w_in: Vec<f64>,
    b_in: Vec<f64>,
    w_out: Vec<f64>,
    b_out: Vec<f64>,
    ln2: (Vec<f64>, Vec<f64>),
}

/// One layer's saved activations, `[n·T, ·]` rows (the pattern `[n, H, T, T]`).
#[derive(Default)]
struct Saved {
    x: Vec<f64>,
    q: Vec<f64>,
    k: Vec<f64>,
    v: Vec<f64>,
    pattern: Vec<f64>,
    mid: Vec<f64>,
    mid_stats: (Vec<f64>, Vec<f64>),
    mid_norm: Vec<f64>,
    pre: Vec<f64>,
    post: Vec<f64>,
    sum2: Vec<f64>,
    sum2_stats: (Vec<f64>, Vec<f64>),
}

/// The `f64` forward's activations: what [`Bert::backward_f64`] reads.
pub struct Forward64 {
    n: usize,
    t: usize,
    sum: Vec<f64>,
    sum_stats: (Vec<f64>, Vec<f64>),
    layers: Vec<Saved>,
    weights: Vec<Layer64>,
    /// The last block's output `[n, T, D]`.
    pub output: Vec<f64>,
}

impl Bert {
    /// The forward pass in `f64` over `n` sequences of `t` tokens, handing every
    /// site's activation (all sequences, `[n, ...]`) to `edit`, which may
    /// change it; the result keeps what [`Bert::backward_f64`] needs.
    pub fn forward_f64(
        &self,
        tokens: &[u32],
        n: usize,
        t: usize,
        edit: &mut dyn FnMut(Site, &mut [f64]),
    ) -> Forward64 {
        let cfg = &self.config;
        let w = self.weights();
        let (d, h, dh, eps) = (cfg.d_model, cfg.n_heads, cfg.d_head(), cfg.layer_norm_eps);
        let r = n * t;
        let key_mask: Vec<bool> = tokens.iter().map(|&x| x != cfg.pad_token_id).collect();
        fn row(table: &[f32], i: usize, d: usize) -> &[f32] {
            &table[i * d..(i + 1) * d]
        }
        let (mut embed, mut pos, mut typ) = (vec![0.0; r * d], vec![0.0; r * d], vec![0.0; r * d]);
        for (i, &tok) in tokens.iter().enumerate() {
            let o = i * d..(i + 1) * d;
            embed[o.clone()]
                .iter_mut()
                .zip(row(&w.word, tok as usize, d))
                .for_each(|(a, &b)| *a = f64::from(b));
            pos[o.clone()]
                .iter_mut()
                .zip(row(&w.pos, i % t, d))
                .for_each(|(a, &b)| *a = f64::from(b));
            typ[o]
                .iter_mut()
                .zip(row(&w.token_type, 0, d))
                .for_each(|(a, &b)| *a = f64::from(b));
        }
        edit(Site::Embed, &mut embed);
        edit(Site::PosEmbed, &mut pos);
        edit(Site::TokenTypeEmbed, &mut typ);
        let sum: Vec<f64> = (0..r * d).map(|i| (embed[i] + typ[i]) + pos[i]).collect();
        let (mut mean, mut rstd) = (vec![0.0; r], vec![0.0; r]);
        let mut x = vec![0.0; r * d];
        let (g, b) = (wide(&w.emb_ln_g), wide(&w.emb_ln_b));
        layernorm::forward(&mut x, &mut mean, &mut rstd, &sum, &g, &b, r, d, eps);
        edit(Site::FullEmbed, &mut x);
        let weights: Vec<Layer64> = w
            .layers
            .iter()
            .map(|lw| Layer64 {
                wq: wide(&lw.wq),
                bq: wide(&lw.bq),
                wk: wide(&lw.wk),
                bk: wide(&lw.bk),
                wv: wide(&lw.wv),
                bv: wide(&lw.bv),
                wo: wide(&lw.wo),
                bo: wide(&lw.bo),
                ln1: (wide(&lw.ln1_g), wide(&lw.ln1_b)),
                w_in: wide(&lw.w_in),
                b_in: wide(&lw.b_in),
                w_out: wide(&lw.w_out),
                b_out: wide(&lw.b_out),
                ln2: (wide(&lw.ln2_g), wide(&lw.ln2_b)),
            })
            .collect();
        let attn = Attention::new(h, t, t, dh, dh);
        let (td, htt, m) = (t * d, h * t * t, cfg.d_mlp);
        let mut layers = Vec::with_capacity(weights.len());
        for (l, lw) in weights.iter().enumerate() {
            let mut s = Saved::default();
            edit(Site::ResidPre(l), &mut x);
            s.x = x.clone();
            for (buf, wt, bias, site) in [
                (&mut s.q, &lw.wq, &lw.bq, Site::Q(l)),
                (&mut s.k, &lw.wk, &lw.bk, Site::K(l)),
                (&mut s.v, &lw.wv, &lw.bv, Site::V(l)),
            ] {
                *buf = vec![0.0; r * d];
                linear::forward(buf, &s.x, wt, Some(bias), r, d, d);
                edit(site, buf);
            }
            let mut z = vec![0.0; r * d];
            s.pattern = vec![0.0; n * htt];
            for q in 0..n {
                let ex = AttnExtras {
                    key_mask: Some(&key_mask[q * t..(q + 1) * t]),
                    ..AttnExtras::default()
                };
                let rows = q * td..(q + 1) * td;
                attn.forward(
                    &mut z[rows.clone()],
                    &mut s.pattern[q * htt..(q + 1) * htt],
                    &s.q[rows.clone()],
                    &s.k[rows.clone()],
                    &s.v[rows],
                    &ex,
                );
            }
            edit(Site::Pattern(l), &mut s.pattern);
            // z from the pattern as edit left it: z[q, h] = Σ_k pattern[h, q, k] v[k, h]
            z.iter_mut().for_each(|v| *v = 0.0);
            for sq in 0..n {
                for hh in 0..h {
                    for i in 0..t {
                        for j in 0..t {
                            let p = s.pattern[sq * htt + (hh * t + i) * t + j];
                            if p == 0.0 {
                                continue;
                            }
                            let (zo, vo) = ((sq * t + i) * d + hh * dh, (sq * t + j) * d + hh * dh);
                            for c in 0..dh {
                                z[zo + c] += p * s.v[vo + c];
                            }
                        }
                    }
                }
            }
            edit(Site::Z(l), &mut z);
            let mut attn_out = vec![0.0; r * d];
            linear::forward(&mut attn_out, &z, &lw.wo, Some(&lw.bo), r, d, d);
            edit(Site::AttnOut(l), &mut attn_out);
            s.mid = (0..r * d).map(|i| attn_out[i] + s.x[i]).collect();
            edit(Site::ResidMid(l), &mut s.mid);
            s.mid_stats = (vec![0.0; r], vec![0.0; r]);
            s.mid_norm = vec![0.0; r * d];
            layernorm::forward(
                &mut s.mid_norm,
                &mut s.mid_stats.0,
                &mut s.mid_stats.1,
                &s.mid,
                &lw.ln1.0,
                &lw.ln1.1,
                r,
                d,
                eps,
            );
            edit(Site::NormResidMid(l), &mut s.mid_norm);
            s.pre = vec![0.0; r * m];
            linear::forward(&mut s.pre, &s.mid_norm, &lw.w_in, Some(&lw.b_in), r, d, m);
            edit(Site::MlpPre(l), &mut s.pre);
            s.post = vec![0.0; r * m];
            gelu::exact_forward(&mut s.post, &s.pre);
            edit(Site::MlpPost(l), &mut s.post);
            let mut mlp_out = vec![0.0; r * d];
            linear::forward(&mut mlp_out, &s.post, &lw.w_out, Some(&lw.b_out), r, m, d);
            edit(Site::MlpOut(l), &mut mlp_out);
            s.sum2 = (0..r * d).map(|i| mlp_out[i] + s.mid_norm[i]).collect();
            edit(Site::ResidPost(l), &mut s.sum2);
            s.sum2_stats = (vec![0.0; r], vec![0.0; r]);
            layernorm::forward(
                &mut x,
                &mut s.sum2_stats.0,
                &mut s.sum2_stats.1,
                &s.sum2,
                &lw.ln2.0,
                &lw.ln2.1,
                r,
                d,
                eps,
            );
            edit(Site::NormResidPost(l), &mut x);
            layers.push(s);
        }
        Forward64 {
            n,
            t,
            sum,
            sum_stats: (mean, rstd),
            layers,
            weights,
            output: x,
        }
    }

    /// The backward of [`Bert::forward_f64`] from `dy` (the gradient w.r.t. the
    /// output, `[n, T, D]`), handing the gradient at every site to `visit` as
    /// it is reached.
    pub fn backward_f64(&self, f: &Forward64, dy: &[f64], visit: &mut dyn FnMut(Site, &[f64])) {
        let cfg = &self.config;
        let (d, h, dh, m) = (cfg.d_model, cfg.n_heads, cfg.d_head(), cfg.d_mlp);
        let (n, t) = (f.n, f.t);
        let (r, td, htt) = (n * t, t * d, h * t * t);
        let attn = Attention::new(h, t, t, dh, dh);
        let mut dres = dy.to_vec();
        let mut scratch = vec![0.0; t * t];
        for (l, (s, lw)) in f.layers.iter().zip(&f.weights).enumerate().rev() {
            visit(Site::NormResidPost(l), &dres);
            let mut d_sum2 = vec![0.0; r * d];
            let (mean, rstd) = &s.sum2_stats;
            layernorm::backward(
                &mut d_sum2,
                None::<&mut [f64]>,
                None,
                &dres,
                &s.sum2,
                mean,
                rstd,
                &lw.ln2.0,
                r,
                d,
            );
            visit(Site::ResidPost(l), &d_sum2);
            visit(Site::MlpOut(l), &d_sum2);
            let mut d_post = vec![0.0; r * m];
            linear::backward_input(&mut d_post, &d_sum2, &lw.w_out, r, m, d);
            visit(Site::MlpPost(l), &d_post);
            let mut d_pre = vec![0.0; r * m];
            gelu::exact_backward(&mut d_pre, &d_post, &s.pre);
            visit(Site::MlpPre(l), &d_pre);
            let mut d_norm = d_sum2;
            linear::backward_input(&mut d_norm, &d_pre, &lw.w_in, r, d, m);
            visit(Site::NormResidMid(l), &d_norm);
            let mut d_mid = vec![0.0; r * d];
            let (mean, rstd) = &s.mid_stats;
            layernorm::backward(
                &mut d_mid,
                None::<&mut [f64]>,
                None,
                &d_norm,
                &s.mid,
                mean,
                rstd,
                &lw.ln1.0,
                r,
                d,
            );
            visit(Site::ResidMid(l), &d_mid);
            visit(Site::AttnOut(l), &d_mid);
            let mut dz = vec![0.0; r * d];
            linear::backward_input(&mut dz, &d_mid, &lw.wo, r, d, d);
            visit(Site::Z(l), &dz);
            // d pattern[h, q, k] = Σ_c dz[q, h, c] · v[k, h, c]
            let mut dp = vec![0.0; n * htt];
            for sq in 0..n {
                for hh in 0..h {
                    for i in 0..t {
                        for j in 0..t {
                            let (zo, vo) = ((sq * t + i) * d + hh * dh, (sq * t + j) * d + hh * dh);
                            dp[sq * htt + (hh * t + i) * t + j] =
                                (0..dh).map(|c| dz[zo + c] * s.v[vo + c]).sum();
                        }
                    }
                }
            }
            visit(Site::Pattern(l), &dp);
            let (mut dq, mut dk, mut dv) = (vec![0.0; r * d], vec![0.0; r * d], vec![0.0; r * d]);
            for sq in 0..n {
                let rows = sq * td..(sq + 1) * td;
                attn.backward(
                    &mut dq[rows.clone()],
                    &mut dk[rows.clone()],
                    &mut dv[rows.clone()],
                    None,
                    &mut scratch,
                    &dz[rows.clone()],
                    &s.pattern[sq * htt..(sq + 1) * htt],
                    &s.q[rows.clone()],
                    &s.k[rows.clone()],
                    &s.v[rows],
                );
            }
            visit(Site::Q(l), &dq);
            visit(Site::K(l), &dk);
            visit(Site::V(l), &dv);
            dres = d_mid;
            for (dyv, wt) in [(&dq, &lw.wq), (&dk, &lw.wk), (&dv, &lw.wv)] {
                linear::backward_input(&mut dres, dyv, wt, r, d, d);
            }
            visit(Site::ResidPre(l), &dres);
        }
        visit(Site::FullEmbed, &dres);
        let mut d_sum = vec![0.0; r * d];
        let g = wide(&self.weights().emb_ln_g);
        let (mean, rstd) = &f.sum_stats;
        layernorm::backward(
            &mut d_sum,
            None::<&mut [f64]>,
            None,
            &dres,
            &f.sum,
            mean,
            rstd,
            &g,
            r,
            d,
        );
        visit(Site::Embed, &d_sum);
        visit(Site::PosEmbed, &d_sum);
        visit(Site::TokenTypeEmbed, &d_sum);
    }

    /// `run_with_grads` for the encoder: the `f64` forward recording `names`,
    /// `dout` of its output, the backward recording their gradients.
    pub(super) fn grads(
        &mut self,
        batch: &Batch,
        names: &[&str],
        dout: &mut dyn FnMut(&Tensor) -> Result<Tensor, String>,
    ) -> Result<(Tensor, ActivationCache, ActivationCache), HookError> {
        self.check_batch(batch)?;
        let sites = names
            .iter()
            .map(|n| self.site_of(n))
            .collect::<Result<Vec<_>, _>>()?;
        let (n, t) = (batch.batch, batch.seq_len);
        let shape = |s: Site| {
            let mut v = vec![n];
            v.extend(s.layout(&self.config, t).1);
            v
        };
        let mut acts = ActivationCache::new();
        let f = self.forward_f64(&batch.tokens, n, t, &mut |s, x| {
            if let Some(i) = sites.iter().position(|&w| w == s) {
                acts.insert(names[i].to_string(), Tensor::new(shape(s), x.to_vec()));
            }
        });
        let y = Tensor::new(vec![n, t, self.config.d_model], f.output.clone());
        let d = crate::hooks::metric_grad(dout, &y)?;
        let mut grads = ActivationCache::new();
        self.backward_f64(&f, &d.data, &mut |s, g| {
            if let Some(i) = sites.iter().position(|&w| w == s) {
                grads.insert(names[i].to_string(), Tensor::new(shape(s), g.to_vec()));
            }
        });
        Ok((y, acts, grads))
    }
}
