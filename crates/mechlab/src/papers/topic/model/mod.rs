//! The one-layer, one-head masked-LM transformer of Li, Li, Risteski (2023).
//!
//! `h0 = E[x]` (optionally BERT's embedding block `LayerNorm(E[x] + token_type)`),
//! one attention head with `d_head = d_model`, no FFN, no output projection, then
//! `y = a (+ h0)` (optionally layer-normed) and `logits = y W_U + b_U`. Every part
//! the paper freezes is a flag ([`TopicMlmConfig`]): one-hot or trained embeddings,
//! frozen-uniform or trained attention, value matrix trained / identity / topic
//! blocks, decoder identity / tied / trained, residual, layer norm, cross-entropy
//! or MSE. Frozen parts are not parameters (they are not visited, optimised or
//! checkpointed) and skip their work: one-hot inputs turn every `h0 · W` into a row
//! gather, uniform attention skips queries and keys and averages the values once
//! per document, and only labelled positions are ever used as queries, since the
//! MLM loss reads nothing else.
//!
//! Weights follow TransformerLens layout (`x · W`, `W: [d_in, d_out]`), so the
//! authors' "column Gram `W_Vᵀ W_V`" of the PyTorch `[out, in]` weight is the Gram
//! of our `W_V`'s rows.
//!
//! ```
//! use mechlab::papers::topic::model::{TopicMlm, TopicMlmConfig};
//! use mechlab::papers::topic::data::{LdaConfig, LdaModel, generate, mask_docs};
//! let cfg = LdaConfig { n_train: 4, ..LdaConfig::default() };
//! let lda = LdaModel::new(&cfg).unwrap();
//! let mut rng = mechlab::rng::stream(0, mechlab::rng::Stream::Data);
//! let mut set = generate(&lda, &cfg, 4, &mut rng).to_mlm();
//! mask_docs(&mut set, &cfg, lda.d_vocab(), &mut rng);
//! let mut m = TopicMlm::<f64>::new(&TopicMlmConfig::default(), lda.d_vocab(),
//!     &lda.topic_of_token(), set.max_len(), 0).unwrap();
//! let loss = m.loss(&set, &[0, 1, 2, 3]);
//! assert!((loss - (104f64).ln()).abs() < 0.5); // near-uniform predictions at init
//! ```

use crate::papers::topic::data::{MlmSet, NO_LABEL};
use mechlab_engine::matmul::{matmul, Op};
use mechlab_engine::parallel;
use mechlab_engine::{Float, Param, Parameters};

mod attention;
mod init;
mod kernel;
mod probe;
use init::init_params;
use kernel::{doc_step, embed, embed_back};
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EmbedKind {
    OneHot,
    Trained,
}
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttnKind {
    /// `W_Q = W_K = 0`, frozen: every query attends uniformly to the visible keys.
    Uniform,
    Trained,
}
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ValueKind {
    Trained,
    Identity,
    /// Frozen to `1[topic(i) = topic(j)]` over word dimensions (the authors' block matrix).
    Blocks,
}
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecoderKind {
    Identity,
    /// `W_U = W_Eᵀ`, no bias.
    Tied,
    Trained,
}
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LossKind {
    CrossEntropy,
    /// Mean squared error against the one-hot label, over all `labels × d_vocab` entries.
    Mse,
}
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InitKind {
    /// PyTorch defaults: linears `U(±1/√d_in)`, embeddings `N(0, 1)`.
    Default,
    /// Trained `W_Q, W_K, W_V` and embeddings `init_noise · U[0, 1)`, biases 0.
    NearZero,
}

/// The `[model]` section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TopicMlmConfig {
    /// `"f32"` or `"f64"`.
    pub dtype: crate::experiment::Dtype,
    /// 0: `d_vocab` (required by one-hot embeddings and the identity decoder).
    pub d_model: usize,
    pub embedding: EmbedKind,
    pub attention: AttnKind,
    pub value: ValueKind,
    pub decoder: DecoderKind,
    pub residual: bool,
    pub layer_norm: bool,
    pub loss: LossKind,
    /// The authors' code keeps Hugging Face BERT's embedding block:
    /// `h0 = LayerNorm(E[x] + t)` with a trained token-type vector `t ~ N(0, 1)`
    /// and a trained gain and bias. Off by default (the clean model).
    pub bert_embedding_ln: bool,
    pub init: InitKind,
    pub init_noise: f64,
}

impl Default for TopicMlmConfig {
    fn default() -> Self {
        TopicMlmConfig {
            dtype: crate::experiment::Dtype::F32,
            d_model: 0,
            embedding: EmbedKind::OneHot,
            attention: AttnKind::Uniform,
            value: ValueKind::Trained,
            decoder: DecoderKind::Identity,
            residual: false,
            layer_norm: false,
            loss: LossKind::CrossEntropy,
            bert_embedding_ln: false,
            init: InitKind::Default,
            init_noise: 0.0,
        }
    }
}

// Parameter slots, in visit order.
pub const W_E: usize = 0;
pub const TOKEN_TYPE: usize = 1;
pub const EMB_LN_W: usize = 2;
pub const EMB_LN_B: usize = 3;
pub const W_Q: usize = 4;
pub const B_Q: usize = 5;
pub const W_K: usize = 6;
pub const B_K: usize = 7;
pub const W_V: usize = 8;
pub const B_V: usize = 9;
pub const LN_W: usize = 10;
pub const LN_B: usize = 11;
pub const W_U: usize = 12;
pub const B_U: usize = 13;
const N_SLOTS: usize = 14;
/// The layer norms' ε (BERT's).
pub const LN_EPS: f64 = 1e-12;
/// Fixed number of batch chunks (the engine's [`parallel::N_CHUNKS`]): each gets
/// its own gradient buffers, reduced in chunk order, so results do not depend on
/// the thread count.
pub const N_CHUNKS: usize = parallel::N_CHUNKS;

/// The fast paths a config allows.
#[derive(Clone, Copy, Debug)]
struct Plan {
    d: usize,
    v: usize,
    /// `h0` is the one-hot row of the token: products with it are gathers.
    onehot: bool,
    /// Something below `h0` is trained, so `dh0` is needed.
    need_dh0: bool,
    uniform: bool,
    /// Uniform attention and no residual: every query row is the same; compute one.
    shared: bool,
    cfg_value: ValueKind,
    decoder: DecoderKind,
    residual: bool,
    layer_norm: bool,
    bert_ln: bool,
    loss: LossKind,
    train: [bool; N_SLOTS],
}

/// Activations and gradients of one chunk, sized for the longest document.
/// Names follow TransformerLens hooks where they match.
struct Work<T> {
    hook_embed: Vec<T>,   // h0: [L, d]
    emb_pre: Vec<T>,      // [L, d]: the BERT layer norm's input
    emb_mean: Vec<T>,     // [L]
    emb_rstd: Vec<T>,     // [L]
    hq: Vec<T>,           // h0 at the query rows: [S, d]
    hook_q: Vec<T>,       // [S, d]
    hook_k: Vec<T>,       // [L, d]
    hook_v: Vec<T>,       // [L, d]
    hook_pattern: Vec<T>, // [S, L]
    hook_z: Vec<T>,       // a: [S, d]
    resid: Vec<T>,        // [S, d] before the final norm
    ln_mean: Vec<T>,      // [S]: the final layer norm's statistics (its input is resid)
    ln_rstd: Vec<T>,
    y: Vec<T>,      // [S, d]
    logits: Vec<T>, // [S, V]
    d_logits: Vec<T>,
    d_y: Vec<T>,
    d_resid: Vec<T>,
    d_pattern: Vec<T>,
    d_q: Vec<T>,
    d_k: Vec<T>,
    d_v: Vec<T>,
    d_h0: Vec<T>,
    d_hq: Vec<T>,
    hbar: Vec<T>,    // [d]
    d_table: Vec<T>, // [V, d]: dh0 summed per token id
    qpos: Vec<usize>,
    /// Per logits row `[S]`: its largest entry and `ln(1 + Σ_(i≠top) e^(z_i − z_top))`,
    /// so each label's loss is `that + (z_top − z_label)` without another pass.
    row_top: Vec<usize>,
    row_l1p: Vec<T>,
    grads: [Vec<T>; N_SLOTS],
    loss: f64,
}

/// The model: its parameters (frozen ones included, not visited), the plan and
/// one workspace per chunk.
pub struct TopicMlm<T: Float> {
    pub cfg: TopicMlmConfig,
    pub p: [Param<T>; N_SLOTS],
    plan: Plan,
    work: Vec<Work<T>>,
    /// `h0` depends on the token id only (no positions): computed once per step
    /// for the whole vocabulary `[V, d]`, gathered per document, and its
    /// gradient `d_table` summed per id before one backward through the embedding.
    table: Vec<T>,
    tab_pre: Vec<T>,
    tab_mean: Vec<T>,
    tab_rstd: Vec<T>,
    d_table: Vec<T>,
    du: Vec<T>,
    /// `0..d_vocab`, the ids the table embeds.
    vocab_ids: Vec<u32>,
}

impl<T: Float> TopicMlm<T> {
    /// Builds the model for `d_vocab` tokens and documents up to `max_len` tokens;
    /// `topic_of_token` (specials `usize::MAX`) fixes the frozen block value matrix.
    pub fn new(
        cfg: &TopicMlmConfig,
        d_vocab: usize,
        topic_of_token: &[usize],
        max_len: usize,
        seed: u64,
    ) -> Result<Self, String> {
        let v = d_vocab;
        let d = if cfg.d_model == 0 { v } else { cfg.d_model };
        let onehot_e = cfg.embedding == EmbedKind::OneHot;
        if (onehot_e || cfg.decoder == DecoderKind::Identity || cfg.value == ValueKind::Blocks)
            && d != v
        {
            return Err(format!(
                "model.d_model = {d}: one-hot embeddings, the identity decoder and block values need d_model = d_vocab = {v}"
            ));
        }
        if cfg.decoder == DecoderKind::Tied && onehot_e {
            return Err("model.decoder = \"tied\" needs model.embedding = \"trained\"".into());
        }
        if cfg.init == InitKind::NearZero && !(cfg.init_noise >= 0.0 && cfg.init_noise.is_finite())
        {
            return Err("model.init_noise must be a finite number >= 0".into());
        }
        let p = init_params(cfg, d, v, topic_of_token, seed);
        let plan = Plan::of(cfg, d, v);
        let l = max_len.max(1);
        let work = (0..N_CHUNKS)
            .map(|_| Work::new(l, d, v, &plan, &p))
            .collect();
        let tab = if plan.onehot { 0 } else { v * d };
        Ok(TopicMlm {
            cfg: cfg.clone(),
            p,
            plan,
            work,
            table: vec![T::zero(); tab],
            tab_pre: vec![T::zero(); tab],
            tab_mean: vec![T::zero(); if plan.onehot { 0 } else { v }],
            tab_rstd: vec![T::zero(); if plan.onehot { 0 } else { v }],
            d_table: vec![T::zero(); tab],
            du: vec![T::zero(); d],
            vocab_ids: (0..v as u32).collect(),
        })
    }

    pub fn d_model(&self) -> usize {
        self.plan.d
    }
    pub fn d_vocab(&self) -> usize {
        self.plan.v
    }
    /// Whether slot `s` is a trained parameter.
    pub fn trains(&self, s: usize) -> bool {
        self.plan.train[s]
    }
    /// Whether a trained head's backward computes `dv = Pᵀ dz` (six products a
    /// document) or skips it because nothing reads it (five).
    pub fn head_computes_dv(&self) -> bool {
        self.plan.reads_dv()
    }

    /// Forward and backward over documents `docs` of `set`: accumulates the
    /// gradients of the mean loss over all labelled positions and returns that loss.
    pub fn forward_backward(&mut self, set: &MlmSet, docs: &[u32]) -> T {
        T::of(self.run(set, docs, true))
    }

    /// The mean loss over the labelled positions of `docs`, without gradients.
    pub fn loss(&mut self, set: &MlmSet, docs: &[u32]) -> f64 {
        self.run(set, docs, false)
    }

    fn run(&mut self, set: &MlmSet, docs: &[u32], backward: bool) -> f64 {
        let n_lab = set.n_labels(docs);
        if n_lab == 0 {
            return 0.0;
        }
        let inv_n = T::of(1.0 / n_lab as f64);
        let TopicMlm {
            p,
            plan,
            work,
            table,
            tab_pre,
            tab_mean,
            tab_rstd,
            d_table,
            du,
            vocab_ids,
            ..
        } = self;
        if !plan.onehot {
            embed(p, plan, vocab_ids, table, tab_pre, tab_mean, tab_rstd);
        }
        let (p, plan, table) = (&*p, *plan, &*table);
        let n = docs.len();
        parallel::for_each_chunk(n, work, |_, items, w| {
            w.loss = 0.0;
            if backward {
                w.grads
                    .iter_mut()
                    .for_each(|g| g.iter_mut().for_each(|x| *x = T::zero()));
                w.d_table.iter_mut().for_each(|x| *x = T::zero());
            }
            for &doc in &docs[items] {
                let r = set.range(doc as usize);
                w.loss += doc_step(
                    p,
                    &plan,
                    table,
                    w,
                    &set.input[r.clone()],
                    &set.hidden[r.clone()],
                    &set.label[r],
                    inv_n,
                    backward,
                );
            }
        });
        if backward {
            for s in 0..N_SLOTS {
                if plan.train[s] {
                    let g = self.p[s].grad_mut();
                    for w in work.iter() {
                        g.iter_mut().zip(&w.grads[s]).for_each(|(a, b)| *a += *b);
                    }
                }
            }
            if plan.need_dh0 {
                d_table.iter_mut().for_each(|x| *x = T::zero());
                for w in work.iter() {
                    d_table
                        .iter_mut()
                        .zip(&w.d_table)
                        .for_each(|(a, b)| *a += *b);
                }
                embed_back(&mut self.p, &plan, d_table, tab_pre, tab_mean, tab_rstd, du);
            }
        }
        work.iter().map(|w| w.loss).sum()
    }
}

impl<T: Float> Parameters<T> for TopicMlm<T> {
    fn visit(&self, f: &mut dyn FnMut(&Param<T>)) {
        for s in 0..N_SLOTS {
            if self.plan.train[s] {
                f(&self.p[s]);
            }
        }
    }
    fn visit_mut(&mut self, f: &mut dyn FnMut(&mut Param<T>)) {
        for s in 0..N_SLOTS {
            if self.plan.train[s] {
                f(&mut self.p[s]);
            }
        }
    }
}
