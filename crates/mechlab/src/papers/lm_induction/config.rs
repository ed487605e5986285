//! The lm-induction config: one typed struct, checked once by [`check`].
//!
//! The model keys are TransformerLens's (`n_layers`, `d_model`, `n_heads`,
//! `d_head`, `d_mlp`, `attn_only`, `normalization`, `positional_embedding_type`);
//! `n_ctx` is `data.seq_len` and `d_vocab` comes from the data.

use crate::experiment::Dtype;
use crate::run::RunConfig;
use crate::train::config::ScheduleKind;
use crate::train::{OptimizerKind, TrainConfig};
use mechlab_engine::gpt::{ActFn, GptConfig, Normalization, PositionalEmbedding};
use serde::{Deserialize, Serialize};

/// Where the training sequences come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// Contiguous windows of a real text, one byte per token (`data.file`).
    #[default]
    Text,
    /// Random tokens over `data.vocab` ids, each sequence a random segment
    /// followed by its repeat (Olsson et al.'s probe, used as training data).
    Repeated,
}

/// How text becomes tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tokenizer {
    /// One token per byte (over the bytes that occur).
    #[default]
    Bytes,
    /// A byte-level BPE trained on the training text (`data.bpe_vocab` tokens),
    /// saved with the run as `tokenizer.json`.
    Bpe,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DataConfig {
    pub source: Source,
    /// Text: `bytes` or `bpe`.
    pub tokenizer: Tokenizer,
    /// Vocabulary size of the trained BPE.
    pub bpe_vocab: usize,
    /// Training text (WikiText format), relative to the shared data folder.
    pub file: String,
    /// Held-out text for the loss and the in-context learning score.
    pub heldout_file: String,
    /// Context length `T` (= the model's `n_ctx`).
    pub seq_len: usize,
    /// Sequences per step.
    pub batch: usize,
    /// Vocabulary of the `repeated` source.
    pub vocab: usize,
    /// Text: the share of training windows whose second half repeats their
    /// first half (a curriculum; 0 = plain text).
    pub repeat_frac: f64,
}

impl Default for DataConfig {
    fn default() -> Self {
        DataConfig {
            source: Source::Text,
            tokenizer: Tokenizer::Bytes,
            bpe_vocab: 1024,
            file: "wikipedia/wikitext-2/wiki.test.tokens".into(),
            heldout_file: "wikipedia/wikitext-2/wiki.valid.tokens".into(),
            seq_len: 256,
            batch: 16,
            vocab: 64,
            repeat_frac: 0.0,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
    pub n_layers: usize,
    pub d_model: usize,
    pub n_heads: usize,
    pub d_head: usize,
    pub d_mlp: usize,
    pub attn_only: bool,
    /// `"LN"` or `"none"`.
    pub normalization: Normalization,
    /// `"standard"` (learned absolute) or `"rpe"` (learned bias per head and distance).
    pub positional_embedding_type: PositionalEmbedding,
    pub tied_embeddings: bool,
    pub init_range: f64,
    pub dtype: Dtype,
}

impl Default for ModelConfig {
    fn default() -> Self {
        let g = GptConfig::default();
        ModelConfig {
            n_layers: g.n_layers,
            d_model: g.d_model,
            n_heads: g.n_heads,
            d_head: g.d_head,
            d_mlp: g.d_mlp,
            attn_only: g.attn_only,
            normalization: g.normalization,
            positional_embedding_type: g.positional_embedding_type,
            tied_embeddings: g.tied_embeddings,
            init_range: g.init_range,
            dtype: Dtype::F32,
        }
    }
}

impl ModelConfig {
    /// The engine's config for a vocabulary of `d_vocab` and context `n_ctx`.
    pub fn gpt(&self, n_ctx: usize, d_vocab: usize) -> GptConfig {
        GptConfig {
            n_layers: self.n_layers,
            d_model: self.d_model,
            n_heads: self.n_heads,
            d_head: self.d_head,
            d_mlp: self.d_mlp,
            attn_only: self.attn_only,
            act_fn: ActFn::GeluNew,
            n_ctx,
            d_vocab,
            normalization: self.normalization,
            positional_embedding_type: self.positional_embedding_type,
            tied_embeddings: self.tied_embeddings,
            init_range: self.init_range,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProbeConfig {
    /// Held-out windows (and repeated random sequences) per probe.
    pub n_eval: usize,
    /// Length of the random segment of the repeated sequences (twice it ≤ `seq_len`).
    pub rep_len: usize,
    /// Positions whose losses the in-context learning score compares: the mean
    /// loss at `icl_late` minus the mean at `icl_early`, each over ±`icl_window`.
    pub icl_early: usize,
    /// 0: the last position.
    pub icl_late: usize,
    pub icl_window: usize,
    /// Which ids the repeated random sequences draw from (uniformly).
    pub rep_tokens: RepTokens,
}

/// The ids of the induction probe's random sequences.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RepTokens {
    /// The ids that occur in the training split at least once per training
    /// batch on average (count · batch · seq_len ≥ training tokens): an id rarer
    /// than that has an embedding training has barely moved, and a head cannot
    /// match what it cannot tell apart. Byte-level WikiText-2 numbers 205 bytes,
    /// of which only about 80 are that frequent.
    #[default]
    Trained,
    /// Every id of the vocabulary (TransformerLens's `induction_score`).
    All,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        ProbeConfig {
            n_eval: 32,
            rep_len: 100,
            icl_early: 50,
            icl_late: 0,
            icl_window: 5,
            rep_tokens: RepTokens::Trained,
        }
    }
}

impl ProbeConfig {
    /// `(early, late)` windows of positions for a context of `t`.
    pub fn icl_windows(&self, t: usize) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
        let late = if self.icl_late == 0 {
            t - 1
        } else {
            self.icl_late
        };
        let w = self.icl_window;
        let around = |c: usize| c.saturating_sub(w)..(c + w + 1).min(t);
        (around(self.icl_early), around(late))
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LmConfig {
    pub experiment: String,
    pub description: String,
    pub seed: u64,
    pub run: RunConfig,
    pub train: TrainConfig,
    pub data: DataConfig,
    pub model: ModelConfig,
    pub probe: ProbeConfig,
}

crate::common_config!(LmConfig);

impl Default for LmConfig {
    fn default() -> Self {
        LmConfig {
            experiment: "lm-induction".into(),
            description:
                "Induction heads in a small causal transformer on real text (Olsson et al. 2022)"
                    .into(),
            seed: 1,
            run: RunConfig {
                probe_every: 50,
                checkpoint_every: 500,
                ..RunConfig::default()
            },
            train: TrainConfig {
                optimizer: OptimizerKind::Adamw,
                lr: 1e-3,
                steps: 2000,
                beta1: 0.9,
                beta2: 0.99,
                eps: 1e-8,
                weight_decay: 0.0,
                warmup_steps: 100,
                schedule: ScheduleKind::Cosine,
                final_lr_ratio: 0.1,
                log_every: 50,
                ..TrainConfig::default()
            },
            data: DataConfig::default(),
            model: ModelConfig::default(),
            probe: ProbeConfig::default(),
        }
    }
}

/// Value checks; the message names the key, the value and what is allowed.
pub fn check(cfg: &LmConfig) -> Result<(), String> {
    let (d, p) = (&cfg.data, &cfg.probe);
    let dtype = cfg.model.dtype;
    crate::papers::gpt_task::check_sizes("lm-induction", d.seq_len, d.batch, p.n_eval, dtype)?;
    if d.source == Source::Repeated && !(2..=65536).contains(&d.vocab) {
        return Err(format!("data.vocab = {}: must be 2..=65536", d.vocab));
    }
    if d.tokenizer == Tokenizer::Bpe && !(300..=65536).contains(&d.bpe_vocab) {
        return Err(format!(
            "data.bpe_vocab = {}: must be 300..=65536 (the 256 bytes and some merges)",
            d.bpe_vocab
        ));
    }
    if !(0.0..=1.0).contains(&d.repeat_frac) {
        return Err(format!(
            "data.repeat_frac = {}: must be in [0, 1]",
            d.repeat_frac
        ));
    }
    if p.rep_len < 2 || 2 * p.rep_len > d.seq_len {
        return Err(format!(
            "probe.rep_len = {}: must be at least 2 and at most data.seq_len / 2 = {}",
            p.rep_len,
            d.seq_len / 2
        ));
    }
    let late = if p.icl_late == 0 {
        d.seq_len - 1
    } else {
        p.icl_late
    };
    if p.icl_early >= late || late >= d.seq_len {
        return Err(format!(
            "probe.icl_early = {} and probe.icl_late = {late}: need icl_early < icl_late < data.seq_len = {}",
            p.icl_early, d.seq_len
        ));
    }
    cfg.model
        .gpt(d.seq_len, 2)
        .validate()
        .map_err(|e| format!("model.{e}"))
}
