//! Named hook points of both induction models ([`Simplified`], [`Full`], and the
//! general path [`Direct`] that computes either without a table): a direct,
//! unfused forward written for analysis, position by position, so that every
//! activation exists as a tensor that can be read and changed.
//!
//! The fused training path never builds these tensors (it looks layer 2 up in
//! per-step window tables); this forward recomputes the same equations from the
//! model's public parameters, widened to `f64`, and agrees with
//! [`Simplified::predict`] / [`Full::predict`] to rounding (~1e-15 in `f64`).
//! Training pays nothing for it.
//!
//! Input: [`Batch`] token ids `[batch, L]`, the `L` context tokens (ids `< S`);
//! the query is position `L` with a zero token row, as in training. `targets`
//! are not used. Output: `ŷ` `[batch, d_vocab]`, the predicted next-token
//! distribution at the query. Hook points (`P = L + 1` positions, the query last;
//! `d_model = d_head = S`):
//!
//! | name | layout | what |
//! |---|---|---|
//! | `hook_embed` | `[batch, pos, d_model]` | one-hot tokens, the query row zero |
//! | `blocks.0.attn.hook_pattern` | `[batch, head, query_pos, key_pos]` | layer 1, `P × P` |
//! | `blocks.0.attn.hook_z` | `[batch, pos, head, d_head]` | `Σ_j A(i,j) x_j` (full: `· W_OV`) |
//! | `blocks.0.attn.hook_z_unit` | `[batch, pos, head, d_head]` | simplified: `z / (‖z‖ + 1e-7)` |
//! | `blocks.0.ln.hook_normalized` | `[batch, pos, head, d_head]` | full: `LayerNorm(z)` |
//! | `blocks.1.ffn.hook_kernel` | `[batch, key_pos, subset]` | `K_δ(l)` per kernel subset |
//! | `blocks.1.attn.hook_attn_scores` | `[batch, head, query_pos, key_pos]` | `s_l`, `1 × 1 × L` |
//! | `blocks.1.attn.hook_pattern` | `[batch, head, query_pos, key_pos]` | `softmax(s)`, `1 × 1 × L` |
//!
//! Layer 2 computes only the query row: its `query_pos` axis has one entry (index
//! 0 = position `L`) and its `key_pos` axis the `L` context positions. The
//! models have no residual stream (layer 2 reads the concatenated head outputs),
//! so there is no `hook_resid_post`.
//!
//! ```
//! use mechlab::papers::induction::simplified::{Simplified, SimplifiedConfig};
//! use mechlab_engine::hooks::{Batch, HookedModel};
//! let mut m = Simplified::<f64>::new(&SimplifiedConfig::default());
//! let batch = Batch::new(vec![0, 1, 2, 0, 1, 2, 0, 1, 2, 0], 1, 10);
//! let (y, cache) = m.run_with_cache(&batch, &["blocks.1.attn.hook_pattern"]).unwrap();
//! assert_eq!(y.shape, vec![1, 3]);
//! assert_eq!(cache["blocks.1.attn.hook_pattern"].shape, vec![1, 1, 1, 10]);
//! ```

use super::direct::Direct;
use super::full::{Full, LN_EPS, SELF_LOGIT};
use super::simplified::{Simplified, NORM_EPS};
use mechlab_engine::hooks::{Axes, Site};
use mechlab_engine::hooks::{Batch, HookError, HookPoint, HookedModel, Tensor};
use mechlab_engine::{Float, Param};

/// Layer 1 of the full model: `W_Q`, `W_K`, `W_OV` `[H, S, S]`, LayerNorm `[S]`.
struct FullLayer1 {
    wq: Vec<f64>,
    wk: Vec<f64>,
    wov: Vec<f64>,
    ln_w: Vec<f64>,
    ln_b: Vec<f64>,
}

/// Either model's parameters in `f64`.
struct View {
    s: usize,
    h: usize,
    /// `W_pos` `[2H-1, H]`.
    w: Vec<f64>,
    full: Option<FullLayer1>,
    c: Vec<f64>,
    a: f64,
    subsets: Vec<u32>,
    /// Heads ablated by a training-time intervention (bit `h`; direct path only):
    /// their feature is zero, as in the model's own forward.
    ablated: u16,
}

fn wide<T: Float>(p: &Param<T>) -> Vec<f64> {
    p.value().iter().map(|v| v.as_f64()).collect()
}

impl View {
    fn simplified<T: Float>(m: &Simplified<T>) -> Self {
        View {
            s: m.cfg.d_vocab,
            h: m.cfg.n_heads,
            w: wide(&m.w),
            full: None,
            c: wide(&m.c),
            a: m.a.value()[0].as_f64(),
            subsets: m.subsets.clone(),
            ablated: 0,
        }
    }

    fn full<T: Float>(m: &Full<T>) -> Self {
        View {
            s: m.cfg.d_vocab,
            h: m.cfg.n_heads,
            w: wide(&m.w),
            full: Some(FullLayer1 {
                wq: wide(&m.wq),
                wk: wide(&m.wk),
                wov: wide(&m.wov),
                ln_w: wide(&m.ln_w),
                ln_b: wide(&m.ln_b),
            }),
            c: wide(&m.c),
            a: m.a.value()[0].as_f64(),
            subsets: m.subsets.clone(),
            ablated: 0,
        }
    }

    /// The general path holds the same parameters under the same names.
    fn direct<T: Float>(m: &Direct<T>) -> Self {
        View {
            s: m.cfg.d_vocab,
            h: m.cfg.n_heads,
            w: m.w_seen(),
            full: m.full.as_ref().map(|f| FullLayer1 {
                wq: wide(&f.wq),
                wk: wide(&f.wk),
                wov: wide(&f.wov),
                ln_w: wide(&f.ln_w),
                ln_b: wide(&f.ln_b),
            }),
            c: wide(&m.c),
            a: m.a.value()[0].as_f64(),
            subsets: m.subsets.clone(),
            ablated: m.ablated,
        }
    }

    fn feature_name(&self) -> &'static str {
        if self.full.is_some() {
            "blocks.0.ln.hook_normalized"
        } else {
            "blocks.0.attn.hook_z_unit"
        }
    }

    fn points(&self) -> Vec<HookPoint> {
        let full = self.full.is_some();
        let pattern = "[batch, head, query_pos, key_pos]";
        let per_head = "[batch, pos, head, d_head]";
        vec![
            HookPoint::new(
                "hook_embed",
                "[batch, pos, d_model]",
                "one-hot tokens over L + 1 positions; the query (position L) is a zero row",
            ),
            HookPoint::new(
                "blocks.0.attn.hook_pattern",
                pattern,
                if full {
                    "layer-1 attention over L + 1 query and key positions: self and distances h+1..=h+H"
                } else {
                    "layer-1 RPE attention over L + 1 query and key positions: distances h+1..=h+H; \
                     a query row before head h's band (position ≤ h) has no key and is all zero"
                },
            ),
            HookPoint::new(
                "blocks.0.attn.hook_z",
                per_head,
                if full {
                    "each head's attended tokens times W_OV (d_head = d_vocab, before the LayerNorm)"
                } else {
                    "each head's attended one-hot tokens u (d_head = d_vocab, before the unit-norm scaling)"
                },
            ),
            HookPoint::new(
                self.feature_name(),
                per_head,
                if full {
                    "each head's output after the shared LayerNorm: the feature layer 2 reads"
                } else {
                    "each head's output u / (‖u‖ + 1e-7): the feature layer 2 reads"
                },
            ),
            HookPoint::new(
                "blocks.1.ffn.hook_kernel",
                "[batch, key_pos, subset]",
                "K_δ(l) = Π_{c∈δ} ReLU⟨z_L^c, z_l^c⟩ for every kernel subset δ in the model's \
                 `subsets` order (component 0 the raw token, c ≥ 1 head c−1), keys 0..L",
            ),
            HookPoint::new(
                "blocks.1.attn.hook_attn_scores",
                pattern,
                "layer-2 logits s_l = a Σ_δ c_δ² K_δ(l) / Σ_{δ_0=0} c_δ²; one head, the query row only (index 0 = position L), keys 0..L",
            ),
            HookPoint::new(
                "blocks.1.attn.hook_pattern",
                pattern,
                "layer-2 attention softmax(s); one head, the query row only (index 0 = position L), keys 0..L",
            ),
        ]
    }
}

const OUTPUT: &str = "[batch, d_vocab]: ŷ = Σ_l softmax(s)_l x_l, the predicted distribution of the token after the L context tokens";

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// `x W` for head `hd`'s `[S, S]` block of `m` (`[H, S, S]`).
fn proj(out: &mut [f64], xi: &[f64], m: &[f64], hd: usize) {
    let s = out.len();
    for (j, o) in out.iter_mut().enumerate() {
        *o = (0..s).map(|a| xi[a] * m[(hd * s + a) * s + j]).sum();
    }
}

/// Row `i` of sequence `b` of a `[batch, pos, s]` tensor.
fn row(t: &Tensor, b: usize, i: usize) -> &[f64] {
    let (np, s) = (t.shape[1], t.shape[2]);
    &t.data[(b * np + i) * s..(b * np + i + 1) * s]
}

const POS1: Axes = Axes {
    head: None,
    pos: Some(1),
};
const HEAD_POS: Axes = Axes {
    head: Some(2),
    pos: Some(1),
};
const PATTERN_AXES: Axes = Axes {
    head: Some(1),
    pos: Some(2),
};

/// The analysis forward: builds every activation, visiting each at its point.
fn forward(v: &View, batch: &Batch, site: &mut Site<'_>) -> Result<Tensor, HookError> {
    let (s, l, nb) = (v.s, batch.seq_len, batch.batch);
    if l == 0 || batch.tokens.len() != nb * l {
        return Err(HookError::Input(format!(
            "tokens: {} ids for batch {nb} × seq_len {l} (need seq_len ≥ 1)",
            batch.tokens.len()
        )));
    }
    if let Some(t) = batch.tokens.iter().find(|&&t| t as usize >= s) {
        return Err(HookError::Input(format!(
            "tokens: id {t} is not below d_vocab = {s}"
        )));
    }
    // --- embedding: one-hot tokens [batch, L+1, S] (the last row, the query, is empty) ---
    let mut x = Tensor::zeros(vec![nb, l + 1, s]);
    for b in 0..nb {
        for (i, &t) in batch.seq(b).iter().enumerate() {
            x.data[(b * (l + 1) + i) * s + t as usize] = 1.0;
        }
    }
    site.visit("hook_embed", &mut x, POS1)?;
    let mut pat = layer1_pattern(v, &x);
    site.visit("blocks.0.attn.hook_pattern", &mut pat, PATTERN_AXES)?;
    let mut z = head_outputs(v, &x, &pat);
    site.visit("blocks.0.attn.hook_z", &mut z, HEAD_POS)?;
    let mut feat = features(v, &z);
    site.visit(v.feature_name(), &mut feat, HEAD_POS)?;
    let mut kern = kernel(v, &x, &feat);
    site.visit("blocks.1.ffn.hook_kernel", &mut kern, POS1)?;
    let mut sc = scores(v, &kern);
    site.visit("blocks.1.attn.hook_attn_scores", &mut sc, PATTERN_AXES)?;
    let mut p2 = sc.clone();
    for row in p2.data.chunks_mut(l) {
        let mx = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        row.iter_mut().for_each(|e| *e = (*e - mx).exp());
        let sum: f64 = row.iter().sum();
        row.iter_mut().for_each(|e| *e /= sum);
    }
    site.visit("blocks.1.attn.hook_pattern", &mut p2, PATTERN_AXES)?;
    // --- prediction: ŷ = Σ_l softmax(s)_l x_l ---
    let mut y = Tensor::zeros(vec![nb, s]);
    for b in 0..nb {
        for t in 0..l {
            let p = p2.data[b * l + t];
            for (e, xt) in y.data[b * s..(b + 1) * s].iter_mut().zip(row(&x, b, t)) {
                *e += p * xt;
            }
        }
    }
    Ok(y)
}

/// Layer-1 pattern `[batch, head, pos, pos]`: head `hd` at position `i` attends
/// to itself (full model) and to the keys `i − r`, `r = hd+1 ..= hd+H`.
fn layer1_pattern(v: &View, x: &Tensor) -> Tensor {
    let (s, h, nb, np) = (v.s, v.h, x.shape[0], x.shape[1]);
    let mut pat = Tensor::zeros(vec![nb, h, np, np]);
    let (mut keys, mut logits) = (Vec::with_capacity(h + 1), Vec::with_capacity(h + 1));
    let (mut q, mut k) = (vec![0.0; s], vec![0.0; s]);
    for b in 0..nb {
        for hd in 0..h {
            for i in 0..np {
                keys.clear();
                logits.clear();
                if let Some(f) = &v.full {
                    proj(&mut q, row(x, b, i), &f.wq, hd);
                    proj(&mut k, row(x, b, i), &f.wk, hd);
                    keys.push(i);
                    logits.push(dot(&q, &k) + SELF_LOGIT);
                }
                for j in 0..h {
                    let r = hd + 1 + j;
                    if r > i {
                        break;
                    }
                    let mut lg = v.w[(hd + j) * h + hd];
                    if let Some(f) = &v.full {
                        proj(&mut k, row(x, b, i - r), &f.wk, hd);
                        lg += dot(&q, &k);
                    }
                    keys.push(i - r);
                    logits.push(lg);
                }
                let mx = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let mut sum = 0.0;
                for lg in logits.iter_mut() {
                    *lg = (*lg - mx).exp();
                    sum += *lg;
                }
                let out = &mut pat.data[((b * h + hd) * np + i) * np..][..np];
                for (&kk, &e) in keys.iter().zip(&logits) {
                    out[kk] = e / sum;
                }
            }
        }
    }
    pat
}

/// Head outputs `z = Σ_j A(i,j) x_j (· W_OV)` `[batch, pos, head, S]`, summed
/// self first, then nearest keys (the model's order).
fn head_outputs(v: &View, x: &Tensor, pat: &Tensor) -> Tensor {
    let (s, h, nb, np) = (v.s, v.h, x.shape[0], x.shape[1]);
    let mut z = Tensor::zeros(vec![nb, np, h, s]);
    let mut o = vec![0.0; s];
    for b in 0..nb {
        for i in 0..np {
            for hd in 0..h {
                let a = &pat.data[((b * h + hd) * np + i) * np..][..np];
                o.iter_mut().for_each(|e| *e = 0.0);
                let order = std::iter::once(i).chain((0..i).rev()).chain(i + 1..np);
                for j in order {
                    for (e, xj) in o.iter_mut().zip(row(x, b, j)) {
                        *e += a[j] * xj;
                    }
                }
                let out = &mut z.data[((b * np + i) * h + hd) * s..][..s];
                match &v.full {
                    Some(f) => proj(out, &o, &f.wov, hd),
                    None => out.copy_from_slice(&o),
                }
            }
        }
    }
    z
}

/// The feature layer 2 reads: unit norm (simplified) or LayerNorm (full), with
/// training-time ablated heads zeroed.
fn features(v: &View, z: &Tensor) -> Tensor {
    let (s, h) = (v.s, v.h);
    let mut feat = z.clone();
    for row in feat.data.chunks_mut(s) {
        match &v.full {
            None => {
                let n = row.iter().map(|e| e * e).sum::<f64>().sqrt();
                row.iter_mut().for_each(|e| *e /= n + NORM_EPS);
            }
            Some(f) => {
                let mean = row.iter().sum::<f64>() / s as f64;
                let var = row.iter().map(|e| (e - mean).powi(2)).sum::<f64>() / s as f64;
                let rstd = 1.0 / (var + LN_EPS).sqrt();
                for (kk, e) in row.iter_mut().enumerate() {
                    *e = (*e - mean) * rstd * f.ln_w[kk] + f.ln_b[kk];
                }
            }
        }
    }
    if v.ablated != 0 {
        for (k, row) in feat.data.chunks_mut(s).enumerate() {
            if v.ablated >> (k % h) & 1 == 1 {
                row.iter_mut().for_each(|e| *e = 0.0);
            }
        }
    }
    feat
}

/// Layer-2 kernel `[batch, key_pos, subset]` between the query (position L) and
/// each key: `K_δ(l) = Π_{c∈δ} ReLU⟨z_L^c, z_l^c⟩`.
fn kernel(v: &View, x: &Tensor, feat: &Tensor) -> Tensor {
    let (s, h, nb, np) = (v.s, v.h, x.shape[0], x.shape[1]);
    let l = np - 1;
    let ns = v.subsets.len();
    let mut kern = Tensor::zeros(vec![nb, l, ns]);
    let mut ip = vec![0.0; h + 1];
    for b in 0..nb {
        let fq = |c: usize| &feat.data[((b * np + l) * h + c) * s..][..s];
        for t in 0..l {
            ip[0] = dot(row(x, b, l), row(x, b, t)).max(0.0);
            for c in 0..h {
                ip[c + 1] = dot(fq(c), &feat.data[((b * np + t) * h + c) * s..][..s]).max(0.0);
            }
            for (si, &mask) in v.subsets.iter().enumerate() {
                kern.data[(b * l + t) * ns + si] = (0..=h)
                    .filter(|c| mask & (1 << c) != 0)
                    .fold(1.0, |acc, c| acc * ip[c]);
            }
        }
    }
    kern
}

/// Layer-2 scores `[batch, 1, 1, L]`: `s_l = a Σ_δ c_δ² K_δ(l) / Σ_{δ_0=0} c_δ²`.
fn scores(v: &View, kern: &Tensor) -> Tensor {
    let (nb, l, ns) = (kern.shape[0], kern.shape[1], kern.shape[2]);
    let zc: f64 = v
        .subsets
        .iter()
        .zip(&v.c)
        .filter(|(m, _)| *m & 1 == 0)
        .map(|(_, c)| c * c)
        .sum();
    let az = v.a / zc;
    let mut sc = Tensor::zeros(vec![nb, 1, 1, l]);
    for b in 0..nb {
        for t in 0..l {
            let k = &kern.data[(b * l + t) * ns..][..ns];
            sc.data[b * l + t] = az * k.iter().zip(&v.c).map(|(kd, c)| c * c * kd).sum::<f64>();
        }
    }
    sc
}

impl<T: Float> HookedModel for Simplified<T> {
    fn hook_points(&self) -> Vec<HookPoint> {
        View::simplified(self).points()
    }
    fn output_layout(&self) -> String {
        OUTPUT.into()
    }
    fn forward_hooked(&mut self, batch: &Batch, site: &mut Site) -> Result<Tensor, HookError> {
        forward(&View::simplified(self), batch, site)
    }
}

impl<T: Float> HookedModel for Full<T> {
    fn hook_points(&self) -> Vec<HookPoint> {
        View::full(self).points()
    }
    fn output_layout(&self) -> String {
        OUTPUT.into()
    }
    fn forward_hooked(&mut self, batch: &Batch, site: &mut Site) -> Result<Tensor, HookError> {
        forward(&View::full(self), batch, site)
    }
}

impl<T: Float> HookedModel for Direct<T> {
    fn hook_points(&self) -> Vec<HookPoint> {
        View::direct(self).points()
    }
    fn output_layout(&self) -> String {
        OUTPUT.into()
    }
    fn forward_hooked(&mut self, batch: &Batch, site: &mut Site) -> Result<Tensor, HookError> {
        forward(&View::direct(self), batch, site)
    }
}
