//! A general small causal transformer (GPT-2 shaped), assembled from the engine's
//! layers: the model future papers plug into, beside the papers' hand-fused ones.
//!
//! Per layer `l`, with pre-LayerNorm (`normalization_type = "LN"`) or none:
//!
//! ```text
//! resid_pre = W_E[x] + W_pos[pos]                      (layer 0; "rpe": no W_pos)
//! q, k, v   = LN1(resid_pre) · W_{Q,K,V}ᵀ + b          [T, H, d_head]
//! pattern   = causal softmax(q·kᵀ/√d_head (+ rpe[h, i−j]))  [H, T, T]
//! resid_mid = resid_pre + (pattern · v) · W_Oᵀ + b_O
//! resid_post = resid_mid + W_out · act(W_in · LN2(resid_mid) + b_in) + b_out   (no MLP: = resid_mid)
//! logits    = LN_final(resid_post of the last layer) · W_Uᵀ + b_U    (tied: W_U = W_E)
//! ```
//!
//! Config names are TransformerLens's (`n_layers`, `d_model`, `n_heads`,
//! `d_head`, `d_mlp`, `n_ctx`, `d_vocab`, `attn_only`, `normalization_type`,
//! `positional_embedding_type`, `init_range`); parameter names too
//! (`embed.W_E`, `pos_embed.W_pos`, `blocks.{l}.attn.W_Q`, `blocks.{l}.mlp.W_in`,
//! `ln_final.w`, `unembed.W_U`, ...), but stored as PyTorch's `nn.Linear` stores
//! them, `[out, in]`: `W_Q` is `[H·d_head, d_model]` (TL's `[H, d_model, d_head]`
//! transposed per head), `W_O` is `[d_model, H·d_head]`, `W_U` is `[d_vocab,
//! d_model]`. The one relative-position option, `"rpe"`, adds a learned bias per
//! head and distance, `rpe[h, i − j]` (`blocks.{l}.attn.rpe`, the engine's
//! [`Rpe`] layer), instead of absolute positions.
//!
//! Initialisation is GPT-2's: weights `N(0, init_range)`, the two projections
//! into the residual stream (`W_O`, `W_out`) `N(0, init_range/√(2·n_layers))`,
//! biases and the RPE table zero, LayerNorm gains one.
//!
//! Training ([`Gpt::train_step`]) runs forward and backward over a
//! [`Workspace`] preallocated for one batch shape: the batch is split into
//! [`N_CHUNKS`] fixed chunks, each chunk runs its sequences as one `[n·T, D]`
//! block through the linear layers (so `gemm` sees tall matrices) and one
//! sequence at a time through attention, and the chunks' gradients are added in
//! chunk order, so a step is bit-identical for any thread count. Nothing is
//! allocated in a step. The forward (`forward.rs`) and backward (`backward.rs`)
//! are one function per stage over one chunk's buffers (`work.rs`). The
//! analysis forward with TransformerLens hook points
//! ([`crate::hooks::HookedModel`]) is the same forward with a visitor between
//! its stages (`hooked.rs`), so the two cannot drift apart.
//!
//! ```
//! use mechlab_engine::gpt::{Gpt, GptConfig, Workspace};
//! use rand::SeedableRng;
//! let cfg = GptConfig { n_layers: 2, d_model: 16, n_heads: 2, d_head: 8, d_mlp: 0,
//!     n_ctx: 8, d_vocab: 5, ..GptConfig::default() };
//! let mut m = Gpt::<f32>::new(&cfg, &mut rand_chacha::ChaCha8Rng::seed_from_u64(0)).unwrap();
//! let mut ws = Workspace::new(&m, 2, 8);
//! let tokens: Vec<u32> = (0..2 * 9).map(|i| (i % 5) as u32).collect(); // [B, T + 1]
//! let loss = m.train_step(&mut ws, &tokens);
//! assert!((loss - (5f64).ln()).abs() < 0.1); // about ln V at initialisation
//! ```

mod backward;
mod config;
mod forward;
mod hooked;
mod work;

#[cfg(test)]
mod hooked_tests;
#[cfg(test)]
mod tests;

pub use config::{ActFn, GptConfig, Normalization, PositionalEmbedding};
pub use work::{Kind, Work};

use crate::layers::rpe::Rpe;
use crate::parallel::{chunk_range, for_each_chunk, reduce_ordered, N_CHUNKS};
use crate::{param, Float, Param, Parameters};
use rand::Rng;
use rand_distr::{Distribution, Normal};

/// LayerNorm ε (TransformerLens's and `nn.LayerNorm`'s).
pub const LN_EPS: f64 = 1e-5;

/// Where each parameter of one block sits in [`Gpt::params`].
#[derive(Clone, Debug, Default)]
pub(crate) struct BlockIx {
    pub ln1: Option<(usize, usize)>,
    pub w_q: usize,
    pub b_q: usize,
    pub w_k: usize,
    pub b_k: usize,
    pub w_v: usize,
    pub b_v: usize,
    pub w_o: usize,
    pub b_o: usize,
    pub rpe: Option<usize>,
    pub ln2: Option<(usize, usize)>,
    /// `W_in`, `b_in`, `W_out`, `b_out` when the block has an MLP.
    pub mlp: Option<[usize; 4]>,
}

/// Where every parameter sits in [`Gpt::params`] (the visit and checkpoint order).
#[derive(Clone, Debug, Default)]
pub(crate) struct Ix {
    pub w_e: usize,
    pub w_pos: Option<usize>,
    pub blocks: Vec<BlockIx>,
    pub ln_f: Option<(usize, usize)>,
    /// `W_U`: its own parameter, or `w_e` when tied.
    pub w_u: usize,
    pub b_u: usize,
}

impl Ix {
    /// Every linear map's `(weight, bias)`: the parameters whose gradients
    /// the backward writes rather than adds into.
    pub fn linear_pairs(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let blocks = self.blocks.iter().flat_map(|b| {
            let attn = [
                (b.w_q, b.b_q),
                (b.w_k, b.b_k),
                (b.w_v, b.b_v),
                (b.w_o, b.b_o),
            ];
            let mlp = b.mlp.map(|[wi, bi, wo, bo]| [(wi, bi), (wo, bo)]);
            attn.into_iter().chain(mlp.into_iter().flatten())
        });
        blocks.chain([(self.w_u, self.b_u)])
    }
}

/// The model: its configuration and parameters.
#[derive(Clone, Debug)]
pub struct Gpt<T: Float> {
    pub cfg: GptConfig,
    /// Every parameter, in visit order (TransformerLens names, [`Param::name`]).
    pub params: Vec<Param<T>>,
    pub(crate) ix: Ix,
    pub(crate) rpe: Option<Rpe>,
    /// Per parameter: frozen, so the backward forms no gradient for it.
    pub(crate) frozen: Vec<bool>,
    /// The analysis passes' workspace, kept for the next call.
    pub(crate) scratch: Scratch<T>,
}

/// The analysis passes' workspaces, kept between calls on one batch shape:
/// allocating their buffers afresh costs about a third of a small model's
/// forward. One is kept per chunking (the hooked forward's one chunk, the
/// recording passes' fixed chunks), so a sweep and an attribution taking turns
/// both find theirs; only workspaces of at most [`Scratch::MAX_ROWS`] rows are
/// kept, so a one-off large batch does not hold its memory; a clone of the
/// model starts without any.
#[derive(Default)]
pub(crate) struct Scratch<T: Float>(std::sync::Mutex<Vec<Workspace<T>>>);

impl<T: Float> Clone for Scratch<T> {
    fn clone(&self) -> Self {
        Scratch::default()
    }
}

impl<T: Float> std::fmt::Debug for Scratch<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Scratch")
    }
}

impl<T: Float> Scratch<T> {
    /// Rows (`batch · T`) of the largest workspace kept.
    pub(crate) const MAX_ROWS: usize = 1 << 14;

    /// The kept workspace of this shape and chunking, else a new one.
    pub(crate) fn take(&self, m: &Gpt<T>, batch: usize, t: usize, n_chunks: usize) -> Workspace<T> {
        let mut kept = self.0.lock().expect("gpt scratch");
        let fits =
            |ws: &Workspace<T>| ws.batch == batch && ws.t == t && ws.chunks.len() == n_chunks;
        match kept.iter().position(fits) {
            Some(i) => kept.swap_remove(i),
            None => Workspace::with_chunks(m, batch, t, n_chunks),
        }
    }

    /// Keeps `ws` for the next call (if small enough), in place of one of
    /// the same chunking.
    pub(crate) fn put(&self, ws: Workspace<T>) {
        if ws.batch * ws.t <= Self::MAX_ROWS {
            let mut kept = self.0.lock().expect("gpt scratch");
            kept.retain(|k| k.chunks.len() != ws.chunks.len());
            kept.push(ws);
        }
    }
}

impl<T: Float> Parameters<T> for Gpt<T> {
    crate::parameters!(T; params);
}

struct Init<'r, R: Rng> {
    rng: &'r mut R,
    params: Vec<(String, String, Vec<usize>, Vec<f64>)>,
}

impl<R: Rng> Init<'_, R> {
    fn push(&mut self, name: String, group: &str, shape: &[usize], value: Vec<f64>) -> usize {
        self.params
            .push((name, group.to_string(), shape.to_vec(), value));
        self.params.len() - 1
    }
    fn normal(&mut self, name: String, group: &str, shape: &[usize], std: Normal<f64>) -> usize {
        let n = shape.iter().product();
        let v = (0..n).map(|_| std.sample(self.rng)).collect();
        self.push(name, group, shape, v)
    }
    fn fill(&mut self, name: String, group: &str, n: usize, x: f64) -> usize {
        self.push(name, group, &[n], vec![x; n])
    }
    fn ln(&mut self, prefix: &str, group: &str, d: usize) -> (usize, usize) {
        (
            self.fill(format!("{prefix}.w"), group, d, 1.0),
            self.fill(format!("{prefix}.b"), group, d, 0.0),
        )
    }
}

impl<T: Float> Gpt<T> {
    /// A freshly initialised model (GPT-2's initialisation, module doc).
    pub fn new(cfg: &GptConfig, rng: &mut impl Rng) -> Result<Self, String> {
        cfg.validate()?;
        let (d, hd, v) = (cfg.d_model, cfg.n_heads * cfg.d_head, cfg.d_vocab);
        let normal = |std: f64| Normal::new(0.0, std).map_err(|e| format!("init_range {std}: {e}"));
        let (w, proj) = (
            normal(cfg.init_range)?,
            normal(cfg.init_range / (2.0 * cfg.n_layers as f64).sqrt())?,
        );
        let ln = cfg.normalization == Normalization::LN;
        let rpe_on = cfg.positional_embedding_type == PositionalEmbedding::Rpe;
        let mut it = Init {
            rng,
            params: Vec::new(),
        };
        let mut ix = Ix {
            w_e: it.normal("embed.W_E".into(), "embed", &[v, d], w),
            ..Ix::default()
        };
        if !rpe_on {
            ix.w_pos = Some(it.normal("pos_embed.W_pos".into(), "embed", &[cfg.n_ctx, d], w));
        }
        for l in 0..cfg.n_layers {
            let (b, g) = (format!("blocks.{l}"), format!("layer{l}"));
            let mut bi = BlockIx::default();
            if ln {
                bi.ln1 = Some(it.ln(&format!("{b}.ln1"), &g, d));
            }
            bi.w_q = it.normal(format!("{b}.attn.W_Q"), &g, &[hd, d], w);
            bi.b_q = it.fill(format!("{b}.attn.b_Q"), &g, hd, 0.0);
            bi.w_k = it.normal(format!("{b}.attn.W_K"), &g, &[hd, d], w);
            bi.b_k = it.fill(format!("{b}.attn.b_K"), &g, hd, 0.0);
            bi.w_v = it.normal(format!("{b}.attn.W_V"), &g, &[hd, d], w);
            bi.b_v = it.fill(format!("{b}.attn.b_V"), &g, hd, 0.0);
            bi.w_o = it.normal(format!("{b}.attn.W_O"), &g, &[d, hd], proj);
            bi.b_o = it.fill(format!("{b}.attn.b_O"), &g, d, 0.0);
            if rpe_on {
                let n = cfg.n_heads * cfg.n_ctx;
                bi.rpe = Some(it.push(
                    format!("{b}.attn.rpe"),
                    &g,
                    &[cfg.n_heads, cfg.n_ctx],
                    vec![0.0; n],
                ));
            }
            if cfg.d_mlp > 0 {
                if ln {
                    bi.ln2 = Some(it.ln(&format!("{b}.ln2"), &g, d));
                }
                let m = cfg.d_mlp;
                bi.mlp = Some([
                    it.normal(format!("{b}.mlp.W_in"), &g, &[m, d], w),
                    it.fill(format!("{b}.mlp.b_in"), &g, m, 0.0),
                    it.normal(format!("{b}.mlp.W_out"), &g, &[d, m], proj),
                    it.fill(format!("{b}.mlp.b_out"), &g, d, 0.0),
                ]);
            }
            ix.blocks.push(bi);
        }
        if ln {
            ix.ln_f = Some(it.ln("ln_final", "unembed", d));
        }
        ix.w_u = if cfg.tied_embeddings {
            ix.w_e
        } else {
            it.normal("unembed.W_U".into(), "unembed", &[v, d], w)
        };
        ix.b_u = it.fill("unembed.b_U".into(), "unembed", v, 0.0);
        let params: Vec<Param<T>> = it
            .params
            .into_iter()
            .map(|(n, g, s, val)| param(&n, &g, &s, val.into_iter().map(T::of).collect()))
            .collect();
        let rpe = rpe_on.then(|| Rpe::causal(cfg.n_heads, cfg.n_ctx - 1));
        let frozen = vec![false; params.len()];
        Ok(Gpt {
            cfg: cfg.clone(),
            params,
            ix,
            rpe,
            frozen,
            scratch: Scratch::default(),
        })
    }

    /// The parameter called `name` (TransformerLens name), if the model has it.
    pub fn param(&self, name: &str) -> Option<&Param<T>> {
        self.params.iter().find(|p| p.name() == name)
    }

    /// Mutable access to the parameter called `name`.
    pub fn param_mut(&mut self, name: &str) -> Option<&mut Param<T>> {
        self.params.iter_mut().find(|p| p.name() == name)
    }

    /// Freezes (or unfreezes) the parameter called `name`: the backward then
    /// forms no gradient for it (its `grad` stays zero), which saves the weight
    /// products of frozen matrices (PyTorch's `requires_grad_(False)`). What an
    /// optimiser updates is still decided by its groups. `Err` names an unknown
    /// parameter.
    pub fn set_frozen(&mut self, name: &str, frozen: bool) -> Result<(), String> {
        let i = self
            .params
            .iter()
            .position(|p| p.name() == name)
            .ok_or_else(|| format!("the model has no parameter {name}"))?;
        self.frozen[i] = frozen;
        Ok(())
    }

    /// Whether the parameter called `name` is frozen (false if there is none).
    pub fn is_frozen(&self, name: &str) -> bool {
        self.params
            .iter()
            .position(|p| p.name() == name)
            .is_some_and(|i| self.frozen[i])
    }

    pub(crate) fn value(&self, i: usize) -> &[T] {
        self.params[i].value()
    }

    /// One training update's forward and backward on `tokens` (`[B, T + 1]`: the
    /// inputs are each row's first `T` ids, the targets its last `T`). Returns the
    /// mean next-token cross-entropy over the `B·T` positions and adds its
    /// gradient to every parameter's `grad` (zero them first).
    pub fn train_step(&mut self, ws: &mut Workspace<T>, tokens: &[u32]) -> f64 {
        self.train_step_masked(ws, tokens, None)
    }

    /// [`Gpt::train_step`] with the loss taken only where `mask` (`[B, T]`, one
    /// flag per target) is true: the mean over the selected positions, PyTorch's
    /// `F.cross_entropy(logits[mask], y[mask])`. Returns 0 and adds nothing when
    /// no position is selected.
    pub fn train_step_masked(
        &mut self,
        ws: &mut Workspace<T>,
        tokens: &[u32],
        mask: Option<&[bool]>,
    ) -> f64 {
        let t = ws.t;
        assert_eq!(
            tokens.len(),
            ws.batch * (t + 1),
            "gpt: tokens are not [B, T + 1]"
        );
        self.step_with(ws, mask, |w, items| w.load(tokens, items, t + 1))
    }

    /// [`Gpt::train_step_masked`] with the targets given apart from the inputs
    /// (`inputs`, `targets`: `[B, T]`; `mask`: `[B, T]` or all): a task whose
    /// answer is not the next input token, or a control whose targets are
    /// shuffled, trains through the same forward and backward.
    pub fn train_step_pairs(
        &mut self,
        ws: &mut Workspace<T>,
        inputs: &[u32],
        targets: &[u32],
        mask: Option<&[bool]>,
    ) -> f64 {
        let n = ws.batch * ws.t;
        assert_eq!(inputs.len(), n, "gpt: inputs are not [B, T]");
        assert_eq!(targets.len(), n, "gpt: targets are not [B, T]");
        self.step_with(ws, mask, |w, items| {
            w.load_pair(inputs, Some(targets), items);
        })
    }

    /// One update's forward and backward, each chunk's sequences put in place
    /// by `load`, the loss the mean over the positions `mask` selects.
    fn step_with(
        &mut self,
        ws: &mut Workspace<T>,
        mask: Option<&[bool]>,
        load: impl Fn(&mut Work<T>, std::ops::Range<usize>) + Sync,
    ) -> f64 {
        let (b, t) = (ws.batch, ws.t);
        let count = match mask {
            Some(m) => {
                assert_eq!(m.len(), b * t, "gpt: mask is not [B, T]");
                m.iter().filter(|&&x| x).count()
            }
            None => b * t,
        };
        if count == 0 {
            return 0.0;
        }
        let scale = 1.0 / count as f64;
        let model = &*self;
        for_each_chunk(b, &mut ws.chunks, |_, items, w| {
            load(w, items.clone());
            w.zero_grads_for(model);
            w.keep_slopes = true;
            if let Some(m) = mask {
                w.mask_labels(m, items);
            }
            w.forward(model, &mut None)
                .expect("a forward without a visitor cannot fail");
            w.loss_and_dlogits(scale);
            w.backward(model);
        });
        let chunks = &ws.chunks;
        for (i, p) in self.params.iter_mut().enumerate() {
            reduce_ordered(p.grad_mut(), chunks, |w| &w.grads[i]);
        }
        chunks.iter().map(|w| w.loss_sum).sum::<f64>() * scale
    }

    /// Forward only on `inputs` (`[B, T]`), with next-token `targets` (`[B, T]`)
    /// when given: afterwards [`Workspace::seq`] reads each sequence's patterns,
    /// logits and per-position losses. Returns the mean loss (0 without targets).
    pub fn evaluate(&self, ws: &mut Workspace<T>, inputs: &[u32], targets: Option<&[u32]>) -> f64 {
        let (b, t) = (ws.batch, ws.t);
        assert_eq!(inputs.len(), b * t, "gpt: inputs are not [B, T]");
        if let Some(y) = targets {
            assert_eq!(y.len(), b * t, "gpt: targets are not [B, T]");
        }
        for_each_chunk(b, &mut ws.chunks, |_, items, w| {
            w.load_pair(inputs, targets, items);
            w.keep_slopes = false;
            w.forward(self, &mut None)
                .expect("a forward without a visitor cannot fail");
            if targets.is_some() {
                w.losses_only();
            }
        });
        let total: f64 = ws.chunks.iter().map(|w| w.loss_sum).sum();
        total * (1.0 / (b * t) as f64)
    }
}

/// Preallocated activations and gradients for one batch shape `[B, T]`.
pub struct Workspace<T: Float> {
    batch: usize,
    t: usize,
    chunks: Vec<Work<T>>,
}

impl<T: Float> Workspace<T> {
    /// For batches of `batch` sequences of `t ≤ n_ctx` positions.
    pub fn new(model: &Gpt<T>, batch: usize, t: usize) -> Self {
        Self::with_chunks(model, batch, t, N_CHUNKS)
    }
    /// With `n_chunks` chunks (the hooked forward uses one).
    pub(crate) fn with_chunks(model: &Gpt<T>, batch: usize, t: usize, n_chunks: usize) -> Self {
        assert!(
            t >= 1 && t <= model.cfg.n_ctx,
            "gpt: T = {t} must be 1..={}",
            model.cfg.n_ctx
        );
        let per = batch.div_ceil(n_chunks).max(1);
        Workspace {
            batch,
            t,
            chunks: (0..n_chunks).map(|_| Work::new(model, per, t)).collect(),
        }
    }
    pub fn batch(&self) -> usize {
        self.batch
    }
    pub fn seq_len(&self) -> usize {
        self.t
    }
    /// The chunk holding sequence `b` and its index inside that chunk.
    pub fn seq(&self, b: usize) -> (&Work<T>, usize) {
        let n = self.chunks.len();
        let c = (0..n)
            .find(|&c| chunk_range(self.batch, n, c).contains(&b))
            .expect("gpt: sequence outside the batch");
        (&self.chunks[c], b - chunk_range(self.batch, n, c).start)
    }
}
