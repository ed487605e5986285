//! The CatFormer as a hooked model, computed densely: every position of both
//! layers from the concatenated one-hot embeddings, with the engine's masked
//! softmax. It is the analysis model (`Run.model()`, `mechlab intervene`) and
//! the reference the fast training kernel ([`super::model`]) is tested against.
//!
//! A batch row is `T` token ids (`< S`); the output is every position's logits
//! `[batch, pos, d_vocab]` (the loss reads the last).
//!
//! | name | layout | what |
//! |---|---|---|
//! | `hook_embed` | `[batch, pos, d_model]` | `h⁰ = [e(x_i); e(i)]`, `d_model = S + T` |
//! | `blocks.{l}.attn.hook_attn_scores` | `[batch, head, query_pos, key_pos]` | `h_iᵀ A h_j`, `−∞` above the diagonal |
//! | `blocks.{l}.attn.hook_pattern` | `[batch, head, query_pos, key_pos]` | the causal softmax of the scores |
//! | `blocks.{l}.attn.hook_z` | `[batch, pos, head, d_head]` | each head's output `Σ_j a_ij h_j` (`d_head` = the layer's input width) |
//! | `blocks.{l}.hook_resid_post` | `[batch, pos, d_model]` | `[h; o¹; …; o^H]`, the concatenated stream |

use mechlab_engine::hooks::{Axes, Site};
use mechlab_engine::hooks::{Batch, HookError, HookPoint, HookedModel, Tensor};
use mechlab_engine::layers::softmax;

/// The parameters, row-major: `A1` `[H₁, d₀, d₀]`, `A2` `[H₂, d₁, d₁]`, `W` `[d₂, S]`.
pub struct HookedCat {
    pub s: usize,
    pub t: usize,
    pub heads: [usize; 2],
    pub a: [Vec<f64>; 2],
    pub w: Vec<f64>,
}

fn points(heads: [usize; 2]) -> Vec<HookPoint> {
    let mut v = vec![HookPoint::new(
        "hook_embed",
        "[batch, pos, d_model]",
        "the one-hot token and the one-hot position, concatenated",
    )];
    for (l, _) in heads.iter().enumerate() {
        v.push(HookPoint::new(
            format!("blocks.{l}.attn.hook_attn_scores"),
            "[batch, head, query_pos, key_pos]",
            "h_iᵀ A h_j (no scaling), −∞ above the diagonal",
        ));
        v.push(HookPoint::new(
            format!("blocks.{l}.attn.hook_pattern"),
            "[batch, head, query_pos, key_pos]",
            "softmax over the keys j ≤ i",
        ));
        v.push(HookPoint::new(
            format!("blocks.{l}.attn.hook_z"),
            "[batch, pos, head, d_head]",
            "each head's output Σ_j a_ij h_j, as wide as the layer's input",
        ));
        v.push(HookPoint::new(
            format!("blocks.{l}.hook_resid_post"),
            "[batch, pos, d_model]",
            "the layer's input with its heads' outputs concatenated",
        ));
    }
    v
}

const OUTPUT: &str =
    "[batch, pos, d_vocab]: logits Wᵀ h² at every position (the loss reads the last)";

/// One attention layer over the whole batch: `h` `[B, T, d]` → `[B, T, d (1 + H)]`.
fn layer(
    l: usize,
    a: &[f64],
    heads: usize,
    h: Tensor,
    site: &mut Site<'_>,
) -> Result<Tensor, HookError> {
    let (nb, t, d) = (h.shape[0], h.shape[1], h.shape[2]);
    let pat_axes = Axes {
        head: Some(1),
        pos: Some(2),
    };
    let mut scores = Tensor::new(
        vec![nb, heads, t, t],
        vec![f64::NEG_INFINITY; nb * heads * t * t],
    );
    for b in 0..nb {
        let hb = &h.data[b * t * d..(b + 1) * t * d];
        for g in 0..heads {
            let ag = &a[g * d * d..(g + 1) * d * d];
            for i in 0..t {
                // (h_iᵀ A) [d]
                let hi = &hb[i * d..(i + 1) * d];
                let ha: Vec<f64> = (0..d)
                    .map(|c| (0..d).map(|r| hi[r] * ag[r * d + c]).sum())
                    .collect();
                for j in 0..=i {
                    let hj = &hb[j * d..(j + 1) * d];
                    scores.data[((b * heads + g) * t + i) * t + j] =
                        ha.iter().zip(hj).map(|(x, y)| x * y).sum();
                }
            }
        }
    }
    site.visit(
        &format!("blocks.{l}.attn.hook_attn_scores"),
        &mut scores,
        pat_axes,
    )?;
    let mut pattern = Tensor::zeros(scores.shape.clone());
    let mask: Vec<bool> = (0..t * t).map(|k| k % t <= k / t).collect();
    for (p, z) in pattern
        .data
        .chunks_exact_mut(t * t)
        .zip(scores.data.chunks_exact(t * t))
    {
        softmax::forward(p, z, Some(&mask), t, t);
    }
    site.visit(
        &format!("blocks.{l}.attn.hook_pattern"),
        &mut pattern,
        pat_axes,
    )?;
    let mut z = Tensor::zeros(vec![nb, t, heads, d]);
    for b in 0..nb {
        for g in 0..heads {
            for i in 0..t {
                let out =
                    &mut z.data[((b * t + i) * heads + g) * d..((b * t + i) * heads + g + 1) * d];
                for j in 0..t {
                    let p = pattern.data[((b * heads + g) * t + i) * t + j];
                    if p != 0.0 {
                        let hj = &h.data[(b * t + j) * d..(b * t + j + 1) * d];
                        out.iter_mut().zip(hj).for_each(|(o, x)| *o += p * x);
                    }
                }
            }
        }
    }
    site.visit(
        &format!("blocks.{l}.attn.hook_z"),
        &mut z,
        Axes {
            head: Some(2),
            pos: Some(1),
        },
    )?;
    let w = d * (1 + heads);
    let mut resid = Tensor::zeros(vec![nb, t, w]);
    for r in 0..nb * t {
        resid.data[r * w..r * w + d].copy_from_slice(&h.data[r * d..(r + 1) * d]);
        resid.data[r * w + d..(r + 1) * w]
            .copy_from_slice(&z.data[r * heads * d..(r + 1) * heads * d]);
    }
    site.visit(
        &format!("blocks.{l}.hook_resid_post"),
        &mut resid,
        Axes {
            head: None,
            pos: Some(1),
        },
    )?;
    Ok(resid)
}

fn forward(m: &HookedCat, batch: &Batch, site: &mut Site<'_>) -> Result<Tensor, HookError> {
    let (nb, t, s) = (batch.batch, batch.seq_len, m.s);
    if t != m.t {
        return Err(HookError::Input(format!(
            "seq_len {t}: the model's positions are one-hot over exactly T = {} positions",
            m.t
        )));
    }
    if let Some(id) = batch.tokens.iter().find(|&&id| id as usize >= s) {
        return Err(HookError::Input(format!("token {id} is not below S = {s}")));
    }
    let d0 = s + t;
    let mut h = Tensor::zeros(vec![nb, t, d0]);
    for (r, &id) in batch.tokens.iter().enumerate() {
        h.data[r * d0 + id as usize] = 1.0;
        h.data[r * d0 + s + r % t] = 1.0;
    }
    site.visit(
        "hook_embed",
        &mut h,
        Axes {
            head: None,
            pos: Some(1),
        },
    )?;
    for l in 0..2 {
        h = layer(l, &m.a[l], m.heads[l], h, site)?;
    }
    let d2 = h.shape[2];
    let mut out = Tensor::zeros(vec![nb, t, s]);
    for (o, hr) in out.data.chunks_exact_mut(s).zip(h.data.chunks_exact(d2)) {
        for (k, &hk) in hr.iter().enumerate() {
            if hk != 0.0 {
                o.iter_mut()
                    .zip(&m.w[k * s..(k + 1) * s])
                    .for_each(|(o, w)| *o += hk * w);
            }
        }
    }
    Ok(out)
}

impl HookedModel for HookedCat {
    fn hook_points(&self) -> Vec<HookPoint> {
        points(self.heads)
    }
    fn output_layout(&self) -> String {
        OUTPUT.into()
    }
    fn forward_hooked(&mut self, batch: &Batch, site: &mut Site) -> Result<Tensor, HookError> {
        forward(self, batch, site)
    }
}

/// Mean soft-label cross-entropy of the last position's logits
/// (`[batch, pos, d_vocab]`) against `y` `[batch, S]`.
pub fn last_loss(logits: &Tensor, y: &[f64]) -> f64 {
    let (nb, t, s) = (logits.shape[0], logits.shape[1], logits.shape[2]);
    let mut total = 0.0;
    for b in 0..nb {
        let z = &logits.data[(b * t + t - 1) * s..(b * t + t) * s];
        let mx = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = mx + z.iter().map(|v| (v - mx).exp()).sum::<f64>().ln();
        total += y[b * s..(b + 1) * s]
            .iter()
            .zip(z)
            .map(|(ys, zs)| ys * (lse - zs))
            .sum::<f64>();
    }
    total / nb.max(1) as f64
}
