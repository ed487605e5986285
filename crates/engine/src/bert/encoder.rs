//! The encoder's forward pass over one sequence at a time, in per-chunk
//! workspaces, with a tap at every hook site.
//!
//! A batch is split into a fixed number of contiguous chunks
//! ([`crate::parallel::for_each_chunk`]); each chunk owns a [`Workspace`] whose
//! buffers are sized once for its sequences, so nothing is allocated per layer.
//! A chunk's sequences are stacked `[n·T, D]` for the row-wise layers (one product
//! per weight matrix, whose weights [`PackedLinear`] packed once at load) and split
//! for attention. At every [`Site`] the forward hands the sequence's activation to a tap,
//! which may read it (the activation cache) or overwrite it (interventions); when
//! a tap changes an attention pattern, `z` is computed from the changed pattern.
//! Sequences do not interact; chunks hold a fixed number of sequences, so results
//! do not depend on the thread count (a sequence run in another batch may differ
//! by `f32` rounding, its rows sharing products of another height).
//!
//! ```
//! use mechlab_engine::bert::Site;
//! assert_eq!(Site::Pattern(2).name(), "blocks.2.attn.hook_pattern");
//! assert_eq!(Site::from_index(Site::Z(1).index(), 6), Some(Site::Z(1)));
//! ```

use super::{BertConfig, BertError, BertWeights};
use crate::layers::{embedding, layernorm};
use crate::matmul::{matmul_strided, Op};
use crate::packed::PackedLinear;
use crate::simd;
use std::path::Path;

/// One hook site: where in the forward pass an activation lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Site {
    /// Word embeddings `[pos, d_model]`.
    Embed,
    /// Position embeddings `[pos, d_model]`.
    PosEmbed,
    /// Token-type embeddings `[pos, d_model]`.
    TokenTypeEmbed,
    /// The embedding layer norm's output, which enters block 0.
    FullEmbed,
    /// Block input (the previous block's output).
    ResidPre(usize),
    Q(usize),
    K(usize),
    V(usize),
    /// `[head, query_pos, key_pos]`.
    Pattern(usize),
    /// `[pos, head, d_head]`: the pattern-weighted values.
    Z(usize),
    AttnOut(usize),
    /// `resid_pre + attn_out`, before the post-attention layer norm.
    ResidMid(usize),
    /// The normalised `resid_mid` (input of the feed-forward).
    NormResidMid(usize),
    MlpPre(usize),
    MlpPost(usize),
    MlpOut(usize),
    /// `norm(resid_mid) + mlp_out`, before the block's final layer norm (as in
    /// TransformerLens's `BertBlock`).
    ResidPost(usize),
    /// The block's output.
    NormResidPost(usize),
}

const N_GLOBAL: usize = 4;
const PER_LAYER: usize = 14;

impl Site {
    /// Position in forward order, `0..n_sites(n_layers)`.
    pub fn index(self) -> usize {
        use Site::*;
        let (l, k) = match self {
            Embed => return 0,
            PosEmbed => return 1,
            TokenTypeEmbed => return 2,
            FullEmbed => return 3,
            ResidPre(l) => (l, 0),
            Q(l) => (l, 1),
            K(l) => (l, 2),
            V(l) => (l, 3),
            Pattern(l) => (l, 4),
            Z(l) => (l, 5),
            AttnOut(l) => (l, 6),
            ResidMid(l) => (l, 7),
            NormResidMid(l) => (l, 8),
            MlpPre(l) => (l, 9),
            MlpPost(l) => (l, 10),
            MlpOut(l) => (l, 11),
            ResidPost(l) => (l, 12),
            NormResidPost(l) => (l, 13),
        };
        N_GLOBAL + l * PER_LAYER + k
    }

    pub fn n_sites(n_layers: usize) -> usize {
        N_GLOBAL + n_layers * PER_LAYER
    }

    pub fn from_index(i: usize, n_layers: usize) -> Option<Site> {
        use Site::*;
        if i < N_GLOBAL {
            return Some([Embed, PosEmbed, TokenTypeEmbed, FullEmbed][i]);
        }
        let (l, k) = ((i - N_GLOBAL) / PER_LAYER, (i - N_GLOBAL) % PER_LAYER);
        if l >= n_layers {
            return None;
        }
        Some(
            [
                ResidPre(l),
                Q(l),
                K(l),
                V(l),
                Pattern(l),
                Z(l),
                AttnOut(l),
                ResidMid(l),
                NormResidMid(l),
                MlpPre(l),
                MlpPost(l),
                MlpOut(l),
                ResidPost(l),
                NormResidPost(l),
            ][k],
        )
    }

    /// The TransformerLens hook name.
    pub fn name(self) -> String {
        use Site::*;
        match self {
            Embed => "hook_embed".into(),
            PosEmbed => "hook_pos_embed".into(),
            TokenTypeEmbed => "hook_token_type_embed".into(),
            FullEmbed => "hook_full_embed".into(),
            ResidPre(l) => format!("blocks.{l}.hook_resid_pre"),
            Q(l) => format!("blocks.{l}.attn.hook_q"),
            K(l) => format!("blocks.{l}.attn.hook_k"),
            V(l) => format!("blocks.{l}.attn.hook_v"),
            Pattern(l) => format!("blocks.{l}.attn.hook_pattern"),
            Z(l) => format!("blocks.{l}.attn.hook_z"),
            AttnOut(l) => format!("blocks.{l}.hook_attn_out"),
            ResidMid(l) => format!("blocks.{l}.hook_resid_mid"),
            NormResidMid(l) => format!("blocks.{l}.hook_normalized_resid_mid"),
            MlpPre(l) => format!("blocks.{l}.mlp.hook_pre"),
            MlpPost(l) => format!("blocks.{l}.mlp.hook_post"),
            MlpOut(l) => format!("blocks.{l}.hook_mlp_out"),
            ResidPost(l) => format!("blocks.{l}.hook_resid_post"),
            NormResidPost(l) => format!("blocks.{l}.hook_normalized_resid_post"),
        }
    }

    /// Axis names after `batch`, and the sizes of those axes for `t` positions.
    pub fn layout(self, cfg: &BertConfig, t: usize) -> (&'static str, Vec<usize>) {
        use Site::*;
        let (d, h, dh, m) = (cfg.d_model, cfg.n_heads, cfg.d_head(), cfg.d_mlp);
        match self {
            Q(_) | K(_) | V(_) | Z(_) => ("[batch, pos, head, d_head]", vec![t, h, dh]),
            Pattern(_) => ("[batch, head, query_pos, key_pos]", vec![h, t, t]),
            MlpPre(_) | MlpPost(_) => ("[batch, pos, d_mlp]", vec![t, m]),
            _ => ("[batch, pos, d_model]", vec![t, d]),
        }
    }
}

/// One chunk's buffers for sequences of up to `t` positions (all `[T, ·]`
/// row-major, TransformerLens layouts per sequence).
#[derive(Clone, Debug, Default)]
pub struct Workspace {
    n: usize,
    t: usize,
    ids: Vec<usize>,
    positions: Vec<usize>,
    types: Vec<usize>,
    key_mask: Vec<bool>,
    /// `[T, D]` each.
    embed: Vec<f32>,
    pos_embed: Vec<f32>,
    type_embed: Vec<f32>,
    /// The residual stream entering / leaving a block.
    resid: Vec<f32>,
    /// `[T, H, d_head]` each.
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    z: Vec<f32>,
    /// `[H, T, T]`: one sequence's, the sequences in turn.
    pattern: Vec<f32>,
    attn_out: Vec<f32>,
    mid: Vec<f32>,
    mid_norm: Vec<f32>,
    /// `[T, d_mlp]` each.
    pre: Vec<f32>,
    post: Vec<f32>,
    mlp_out: Vec<f32>,
    /// `mid_norm + mlp_out`, before the final layer norm.
    sum: Vec<f32>,
}

impl Workspace {
    /// Sizes every buffer for `n` sequences of `t` positions. A new shape resizes
    /// within the capacity of the largest so far, allocating only past it (every
    /// buffer is written before it is read), so once a model has seen its largest
    /// batch a pass allocates nothing, however the lengths vary.
    fn ensure(&mut self, cfg: &BertConfig, n: usize, t: usize) {
        if (self.n, self.t) == (n, t) {
            return;
        }
        /// `len` elements; past the capacity, dropped first, so nothing is copied.
        fn fit<T: Copy>(b: &mut Vec<T>, len: usize, fill: T) {
            if len > b.capacity() {
                *b = Vec::new();
            }
            b.resize(len, fill);
        }
        let (d, h, m) = (cfg.d_model, cfg.n_heads, cfg.d_mlp);
        (self.n, self.t) = (n, t);
        let t1 = t;
        let t = n * t1;
        fit(&mut self.ids, t, 0);
        self.positions.clear();
        self.positions.extend((0..t).map(|i| i % t1));
        fit(&mut self.types, t, 0); // token type 0 everywhere, never written
        fit(&mut self.key_mask, t, true);
        for b in [
            &mut self.embed,
            &mut self.pos_embed,
            &mut self.type_embed,
            &mut self.resid,
            &mut self.q,
            &mut self.k,
            &mut self.v,
            &mut self.z,
            &mut self.attn_out,
            &mut self.mid,
            &mut self.mid_norm,
            &mut self.mlp_out,
            &mut self.sum,
        ] {
            fit(b, t * d, 0.0);
        }
        fit(&mut self.pattern, h * t1 * t1, 0.0);
        fit(&mut self.pre, t * m, 0.0);
        fit(&mut self.post, t * m, 0.0);
    }

    /// The final hidden state `[n·T, D]` after [`Bert::forward_chunk`].
    pub fn output(&self) -> &[f32] {
        &self.resid
    }
}

/// The encoder: config, weights (read-only once loaded: the linear maps run on
/// packed copies of them) and one workspace per chunk.
pub struct Bert {
    pub config: BertConfig,
    weights: BertWeights,
    linears: Vec<LayerLinears>,
    pub(super) workspaces: Vec<Workspace>,
}

/// One layer's linear maps, packed at construction ([`PackedLinear`]).
struct LayerLinears {
    q: PackedLinear,
    k: PackedLinear,
    v: PackedLinear,
    o: PackedLinear,
    mlp_in: PackedLinear,
    mlp_out: PackedLinear,
}

/// A tap sees each site's activation of one sequence (its index in the chunk)
/// and returns whether it changed it.
pub type Tap<'a> = dyn FnMut(Site, usize, &mut [f32]) -> bool + 'a;

impl Bert {
    /// Reads `dir/config.json` and `dir/model.safetensors`.
    pub fn load(dir: &Path) -> Result<Self, BertError> {
        let config = BertConfig::from_file(&dir.join("config.json"))?;
        let weights = BertWeights::from_file(&dir.join("model.safetensors"), &config)?;
        Ok(Self::new(config, weights))
    }

    pub fn new(config: BertConfig, weights: BertWeights) -> Self {
        let (d, m) = (config.d_model, config.d_mlp);
        let linears = weights
            .layers
            .iter()
            .map(|lw| LayerLinears {
                q: PackedLinear::new(&lw.wq, Some(&lw.bq), d, d),
                k: PackedLinear::new(&lw.wk, Some(&lw.bk), d, d),
                v: PackedLinear::new(&lw.wv, Some(&lw.bv), d, d),
                o: PackedLinear::new(&lw.wo, Some(&lw.bo), d, d),
                mlp_in: PackedLinear::new(&lw.w_in, Some(&lw.b_in), m, d),
                mlp_out: PackedLinear::new(&lw.w_out, Some(&lw.b_out), d, m),
            })
            .collect();
        Bert {
            config,
            weights,
            linears,
            workspaces: Vec::new(),
        }
    }

    /// The parameters as loaded.
    pub fn weights(&self) -> &BertWeights {
        &self.weights
    }

    /// The forward pass of `n` sequences of `t` tokens stacked in `tokens`
    /// (`[n, T]`) into `ws` (the output in [`Workspace::output`], `[n·T, D]`),
    /// calling `tap(site, sequence, activation)` at every site in forward order.
    /// Row-wise layers (linear maps, layer norms, GELU) run on all `n·T` rows at
    /// once; attention runs per
    /// sequence. `tokens` are already checked against the vocabulary and the
    /// context length.
    pub fn forward_chunk(&self, ws: &mut Workspace, tokens: &[u32], n: usize, tap: &mut Tap<'_>) {
        let cfg = &self.config;
        let w = &self.weights;
        let t = tokens.len() / n.max(1);
        ws.ensure(cfg, n, t);
        let (d, h, dh, eps) = (cfg.d_model, cfg.n_heads, cfg.d_head(), cfg.layer_norm_eps);
        let r = n * t;
        for (i, &tok) in tokens.iter().enumerate() {
            ws.ids[i] = tok as usize;
            ws.key_mask[i] = tok != cfg.pad_token_id;
        }
        // One tap per sequence on its rows of a stacked buffer that holds `count`
        // sequences from sequence `first` on.
        let mut each = |site: Site, first: usize, count: usize, buf: &mut [f32]| {
            let per = buf.len() / count.max(1);
            for (s, x) in buf.chunks_mut(per.max(1)).enumerate() {
                tap(site, first + s, x);
            }
        };
        // embed, pos_embed, type_embed: [n·T, D]
        embedding::forward(&mut ws.embed, &ws.ids, &w.word, d);
        each(Site::Embed, 0, n, &mut ws.embed);
        embedding::forward(&mut ws.pos_embed, &ws.positions, &w.pos, d);
        each(Site::PosEmbed, 0, n, &mut ws.pos_embed);
        embedding::forward(&mut ws.type_embed, &ws.types, &w.token_type, d);
        each(Site::TokenTypeEmbed, 0, n, &mut ws.type_embed);
        // Hugging Face adds (word + type) + position; f32 sums follow that order.
        add3(&mut ws.sum, &ws.embed, &ws.type_embed, &ws.pos_embed);
        layernorm::forward_f64_stats(&mut ws.resid, &ws.sum, &w.emb_ln_g, &w.emb_ln_b, r, d, eps);
        each(Site::FullEmbed, 0, n, &mut ws.resid);
        let td = t * d;
        for (l, (lw, lin)) in w.layers.iter().zip(&self.linears).enumerate() {
            each(Site::ResidPre(l), 0, n, &mut ws.resid);
            // q, k, v: [n·T, D] = [n, T, H, d_head]
            lin.q.forward(&mut ws.q, &ws.resid, r);
            each(Site::Q(l), 0, n, &mut ws.q);
            lin.k.forward(&mut ws.k, &ws.resid, r);
            each(Site::K(l), 0, n, &mut ws.k);
            lin.v.forward(&mut ws.v, &ws.resid, r);
            each(Site::V(l), 0, n, &mut ws.v);
            // per sequence: its pattern [H, T, T], tapped, then its z [T, H, d_head]
            // from the pattern as the tap leaves it (an intervention on the pattern
            // reaches z). One sequence at a time, in one buffer, so that z reads the
            // pattern while it is still in cache.
            for s in 0..n {
                let rows = s * td..(s + 1) * td;
                attention_pattern(
                    &mut ws.pattern,
                    &ws.q[rows.clone()],
                    &ws.k[rows.clone()],
                    &ws.key_mask[s * t..(s + 1) * t],
                    h,
                    dh,
                );
                each(Site::Pattern(l), s, 1, &mut ws.pattern);
                pattern_times_values(&mut ws.z[rows.clone()], &ws.pattern, &ws.v[rows], h, t, dh);
            }
            each(Site::Z(l), 0, n, &mut ws.z);
            // attn_out: [n·T, D]
            lin.o.forward(&mut ws.attn_out, &ws.z, r);
            each(Site::AttnOut(l), 0, n, &mut ws.attn_out);
            add(&mut ws.mid, &ws.attn_out, &ws.resid);
            each(Site::ResidMid(l), 0, n, &mut ws.mid);
            layernorm::forward_f64_stats(
                &mut ws.mid_norm,
                &ws.mid,
                &lw.ln1_g,
                &lw.ln1_b,
                r,
                d,
                eps,
            );
            each(Site::NormResidMid(l), 0, n, &mut ws.mid_norm);
            // pre, post: [n·T, d_mlp]
            lin.mlp_in.forward(&mut ws.pre, &ws.mid_norm, r);
            each(Site::MlpPre(l), 0, n, &mut ws.pre);
            simd::gelu_erf(&mut ws.post, &ws.pre);
            each(Site::MlpPost(l), 0, n, &mut ws.post);
            lin.mlp_out.forward(&mut ws.mlp_out, &ws.post, r);
            each(Site::MlpOut(l), 0, n, &mut ws.mlp_out);
            add(&mut ws.sum, &ws.mlp_out, &ws.mid_norm);
            each(Site::ResidPost(l), 0, n, &mut ws.sum);
            layernorm::forward_f64_stats(&mut ws.resid, &ws.sum, &lw.ln2_g, &lw.ln2_b, r, d, eps);
            each(Site::NormResidPost(l), 0, n, &mut ws.resid);
        }
    }

    /// Takes `n` workspaces (sized by [`Bert::forward_chunk`] on first use).
    pub(super) fn workspaces_for(&mut self, n: usize) -> Vec<Workspace> {
        let mut ws = std::mem::take(&mut self.workspaces);
        ws.resize_with(n.max(1), Workspace::default);
        ws
    }
}

/// The exact (erf) GELU `x · Φ(x) = x/2 · (1 + erf(x/√2))`, not the tanh
/// approximation. `erf` is Abramowitz & Stegun 7.1.26 (absolute error ≤ 1.5·10⁻⁷,
/// the size of an `f32` rounding), which costs one `exp` where a correctly
/// rounded `erf` cost most of the forward pass.
pub fn gelu(x: f32) -> f32 {
    let z = x * std::f32::consts::FRAC_1_SQRT_2;
    let a = z.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let poly = t
        * (0.254_829_6
            + t * (-0.284_496_74 + t * (1.421_413_7 + t * (-1.453_152 + t * 1.061_405_4))));
    let erf = (1.0 - poly * (-a * a).exp()).copysign(z);
    0.5 * x * (1.0 + erf)
}

/// The attention pattern of one sequence, fused: per head the scores
/// `q_h·k_hᵀ / √d_head` by one `gemm` straight into `pattern`, then the masked
/// softmax of each row with [`simd::softmax_row`] (vectorised `exp`; padding keys
/// get exactly 0). It computes what [`Attention::forward`]'s pattern does with the
/// same key mask, up to the `exp` rounding (a test compares them).
fn attention_pattern(
    pattern: &mut [f32],
    q: &[f32],
    k: &[f32],
    key_mask: &[bool],
    h: usize,
    dh: usize,
) {
    // q, k: [T, H, d_head], key_mask: [T] -> pattern: [H, T, T]
    let t = key_mask.len();
    let scale = (1.0 / (dh as f64).sqrt()) as f32;
    for hd in 0..h {
        let pat = &mut pattern[hd * t * t..(hd + 1) * t * t];
        matmul_strided(
            pat,
            t,
            &q[hd * dh..],
            h * dh,
            Op::N,
            &k[hd * dh..],
            h * dh,
            Op::T,
            t,
            dh,
            t,
            false,
        );
        simd::widest(
            #[inline(always)]
            || pat.iter_mut().for_each(|x| *x *= scale),
        );
        for row in pat.chunks_exact_mut(t) {
            simd::softmax_row(row, key_mask);
        }
    }
}

/// `out = a + b` entry by entry, compiled at the processor's widest level (an
/// indexed loop over the workspace's fields ran scalar, reloading every pointer).
fn add(out: &mut [f32], a: &[f32], b: &[f32]) {
    assert!(
        a.len() == out.len() && b.len() == out.len(),
        "add: lengths differ"
    );
    simd::widest(
        #[inline(always)]
        || {
            for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
                *o = x + y;
            }
        },
    );
}

/// `out = (a + b) + c` entry by entry, as [`add`]: the embeddings' sum in Hugging
/// Face's order.
fn add3(out: &mut [f32], a: &[f32], b: &[f32], c: &[f32]) {
    assert!(
        a.len() == out.len() && b.len() == out.len() && c.len() == out.len(),
        "add3: lengths differ"
    );
    simd::widest(
        #[inline(always)]
        || {
            for (((o, &x), &y), &z) in out.iter_mut().zip(a).zip(b).zip(c) {
                *o = (x + y) + z;
            }
        },
    );
}

/// `z[:, h] = pattern[h] · v[:, h]` for every head, overwriting `z`.
fn pattern_times_values(z: &mut [f32], pattern: &[f32], v: &[f32], h: usize, t: usize, dh: usize) {
    // pattern: [H, T, T], v: [T, H, d_head] -> z: [T, H, d_head]
    let ld = h * dh;
    for hd in 0..h {
        matmul_strided(
            &mut z[hd * dh..],
            ld,
            &pattern[hd * t * t..(hd + 1) * t * t],
            t,
            Op::N,
            &v[hd * dh..],
            ld,
            Op::N,
            t,
            t,
            dh,
            false,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fused pattern against the engine's attention layer (the reference) on
    /// padded sequences: equal up to `exp` rounding, padding keys exactly 0.
    #[test]
    fn fused_attention_pattern_matches_the_attention_layer() {
        use crate::layers::attention::{Attention, AttnExtras};
        let (h, t, dh) = (3, 11, 8);
        let x = |i: usize, f: f32| ((i as f32) * f).sin() * 2.0;
        let q: Vec<f32> = (0..t * h * dh).map(|i| x(i, 0.37)).collect();
        let k: Vec<f32> = (0..t * h * dh).map(|i| x(i, 0.23)).collect();
        let v: Vec<f32> = (0..t * h * dh).map(|i| x(i, 0.11)).collect();
        let key_mask: Vec<bool> = (0..t).map(|j| j < 8).collect(); // 3 padding keys
        let (mut pat, mut z) = (vec![0.0; h * t * t], vec![0.0; t * h * dh]);
        attention_pattern(&mut pat, &q, &k, &key_mask, h, dh);
        pattern_times_values(&mut z, &pat, &v, h, t, dh);
        let (mut pat_ref, mut z_ref) = (vec![0.0; h * t * t], vec![0.0; t * h * dh]);
        let ex = AttnExtras {
            key_mask: Some(&key_mask),
            ..AttnExtras::default()
        };
        Attention::new(h, t, t, dh, dh).forward(&mut z_ref, &mut pat_ref, &q, &k, &v, &ex);
        for (i, (a, b)) in pat.iter().zip(&pat_ref).enumerate() {
            assert!((a - b).abs() <= 1e-6, "pattern entry {i}: {a} vs {b}");
            if !key_mask[i % t] {
                assert_eq!(*a, 0.0);
            }
        }
        for (a, b) in z.iter().zip(&z_ref) {
            assert!((a - b).abs() <= 1e-5, "z: {a} vs {b}");
        }
    }

    #[test]
    fn gelu_matches_erf_in_f64() {
        let mut worst = 0.0f64;
        for i in -8000..=8000 {
            let x = i as f32 * 1e-3;
            let exact = 0.5 * x as f64 * (1.0 + libm::erf(x as f64 / 2f64.sqrt()));
            worst = worst.max((gelu(x) as f64 - exact).abs() / (1.0 + exact.abs()));
        }
        assert!(worst < 1e-6, "worst relative error {worst:e}");
        // The tanh approximation differs by ~1e-4 near x = -2: this is not it.
        let tanh = |x: f64| {
            0.5 * x
                * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh())
        };
        assert!((gelu(-2.0) as f64 - tanh(-2.0)).abs() > 1e-5);
    }
}
