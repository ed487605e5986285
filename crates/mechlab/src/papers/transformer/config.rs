//! The `transformer` experiment's config: one typed struct, checked once by [`check`].
//!
//! `[model]` uses TransformerLens's `HookedTransformerConfig` names; `[data]`
//! says where the token windows come from (a built-in task, a file, or arrays
//! and a generator handed over from Python); `[task]` holds the built-in tasks'
//! parameters; `[probe]` what is measured at every probe step.

use crate::experiment::Dtype;
use crate::run::RunConfig;
use crate::train::config::ScheduleKind;
use crate::train::{OptimizerKind, TrainConfig};
use mechlab_engine::gpt::{ActFn, GptConfig, Normalization, PositionalEmbedding};
use serde::{Deserialize, Serialize};

/// A built-in synthetic task ([`super::tasks`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskKind {
    /// A random segment and its repeat (Olsson et al.'s induction probe).
    #[default]
    Repeated,
    /// In-context Markov chains of order `task.order` (Edelman et al.'s generator).
    Markov,
    /// In-context n-gram chains with parents `task.parents` (Chen et al.'s generator).
    Ngram,
    /// Key-value pairs, then queries of earlier keys answered by their values.
    Assoc,
    /// A random segment, a separator, the segment again.
    Copy,
    /// A random segment, a separator, the segment sorted.
    Sort,
    /// `a b = (a + b) mod p`, on a fixed split of the `p²` pairs.
    Modadd,
    /// Bigram sequences whose triggers are followed by a per-sequence output (Bietti et al.'s).
    Triggers,
}

/// Where the batches come from besides the config.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Inputs {
    /// The config says: `data.file` when set, else `data.task`.
    #[default]
    Config,
    /// Arrays handed to `mechlab.train` from Python, stored in the run's `inputs/`.
    Arrays,
    /// A Python function called for every batch (`mechlab.train(generator=...)`).
    Generator,
}

/// How a text file becomes tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tokenizer {
    /// One token per byte (`d_vocab` 256).
    #[default]
    Bytes,
    /// The `tokenizer.json` named by `data.tokenizer_file` (Hugging Face `tokenizers`).
    Json,
    /// A byte-level BPE of `data.bpe_vocab` tokens trained on `data.file`,
    /// saved in the run folder as `tokenizer.json`.
    Bpe,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DataConfig {
    pub inputs: Inputs,
    pub task: TaskKind,
    /// Token ids (`.npy` or `.safetensors`: `[N, L]` windows or a flat `[N]`
    /// stream) or a text file (`.txt`); replaces `data.task` when set.
    pub file: String,
    /// Which tokens are targets: the same shape as `data.file`, nonzero = predict.
    pub loss_mask_file: String,
    /// Held-out windows (else the last `heldout_frac` of `data.file`).
    pub heldout_file: String,
    pub heldout_mask_file: String,
    pub heldout_frac: f64,
    /// Text files: `bytes`, `json` or `bpe`.
    pub tokenizer: Tokenizer,
    pub tokenizer_file: String,
    /// The vocabulary of the BPE `data.tokenizer = "bpe"` trains.
    pub bpe_vocab: usize,
    /// Positions the model reads, `T` (windows are `T + 1` tokens); 0: the task's
    /// own, or the file's `[N, L]` windows (`L − 1`).
    pub seq_len: usize,
    /// Sequences per step.
    pub batch: usize,
    /// A control: every batch's targets are those of the next sequence in the
    /// batch (the inputs no longer tell the answers).
    pub shuffle_targets: bool,
}

impl Default for DataConfig {
    fn default() -> Self {
        DataConfig {
            inputs: Inputs::Config,
            task: TaskKind::Repeated,
            file: String::new(),
            loss_mask_file: String::new(),
            heldout_file: String::new(),
            heldout_mask_file: String::new(),
            heldout_frac: 0.1,
            tokenizer: Tokenizer::Bytes,
            tokenizer_file: String::new(),
            bpe_vocab: 1024,
            seq_len: 0,
            batch: 32,
            shuffle_targets: false,
        }
    }
}

/// The built-in tasks' parameters (each task reads the ones it names).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TaskConfig {
    /// Symbols of the task (repeated, markov, ngram, copy, sort, triggers; assoc:
    /// keys and as many values); 0: the task's own (32 for repeated and
    /// triggers, 3 for markov and ngram, 16 for the others).
    pub vocab: usize,
    /// markov: how many previous tokens a transition reads.
    pub order: usize,
    /// ngram: the parent distances (1 = previous token).
    pub parents: Vec<usize>,
    /// markov, ngram: Dirichlet concentration of each transition row.
    pub alpha: f64,
    /// assoc: key-value pairs before the queries.
    pub n_pairs: usize,
    /// modadd: the modulus.
    pub p: usize,
    /// modadd: the share of the `p²` pairs trained on (the rest are held out).
    pub train_frac: f64,
    /// triggers: how many trigger tokens.
    pub triggers: usize,
}

impl Default for TaskConfig {
    fn default() -> Self {
        TaskConfig {
            vocab: 0,
            order: 1,
            parents: vec![1, 2],
            alpha: 1.0,
            n_pairs: 8,
            p: 23,
            train_frac: 0.5,
            triggers: 3,
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
    /// `"gelu_new"` (GPT-2's tanh GELU), `"gelu"` (exact) or `"relu"`.
    pub act_fn: ActFn,
    /// `"LN"` or `"none"`.
    pub normalization: Normalization,
    /// `"standard"` or `"rpe"`.
    pub positional_embedding_type: PositionalEmbedding,
    /// Longest context; 0: the window length `data.seq_len + 1`.
    pub n_ctx: usize,
    /// Vocabulary; 0: the task's, or one past the largest id in the data.
    pub d_vocab: usize,
    pub tied_embeddings: bool,
    /// Train the unembedding's bias `unembed.b_U` (false: it stays zero, as in
    /// nanoGPT, whose `lm_head` has none).
    pub unembed_bias: bool,
    pub init_range: f64,
    pub dtype: Dtype,
    /// Start from the weights of a TransformerLens or nanoGPT export folder
    /// (`model.safetensors` and `config.json`, [`crate::interop`]) instead of a
    /// fresh initialisation; the keys above must describe the same model.
    pub init_from: String,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            n_layers: 2,
            d_model: 64,
            n_heads: 4,
            d_head: 16,
            d_mlp: 0,
            attn_only: true,
            act_fn: ActFn::GeluNew,
            normalization: Normalization::LN,
            positional_embedding_type: PositionalEmbedding::Standard,
            n_ctx: 0,
            d_vocab: 0,
            tied_embeddings: false,
            unembed_bias: true,
            init_range: 0.02,
            dtype: Dtype::F32,
            init_from: String::new(),
        }
    }
}

impl ModelConfig {
    /// The engine's config for windows of `t + 1` tokens over `d_vocab` ids.
    pub fn gpt(&self, t: usize, d_vocab: usize) -> GptConfig {
        GptConfig {
            n_layers: self.n_layers,
            d_model: self.d_model,
            n_heads: self.n_heads,
            d_head: self.d_head,
            d_mlp: self.d_mlp,
            attn_only: self.attn_only,
            act_fn: self.act_fn,
            n_ctx: if self.n_ctx == 0 { t + 1 } else { self.n_ctx },
            d_vocab: if self.d_vocab == 0 {
                d_vocab
            } else {
                self.d_vocab
            },
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
    /// Held-out windows each probe evaluates (all of them when fewer).
    pub n_eval: usize,
    /// Length of the random segment of the repeated-token induction probe; 0:
    /// half the context.
    pub rep_len: usize,
    /// A detection pattern of your own (`.npy`, `[T, T]` over the held-out
    /// windows' positions), scored for every head as TransformerLens's
    /// `detect_head` scores its built-in ones.
    pub pattern_file: String,
    /// Detection patterns from Python functions of each held-out window
    /// (`mechlab.train(patterns={name: fn})`), evaluated once and stored in
    /// the run's `inputs/pattern_{name}.npy` `[n_eval, T, T]`; logged as
    /// `custom_{name}.l{l}.h{h}`.
    pub pattern_fns: Vec<String>,
    /// The in-context learning score compares the mean loss at positions
    /// `icl_late ± icl_window` with `icl_early ± icl_window` (0: the last).
    pub icl_early: usize,
    pub icl_late: usize,
    pub icl_window: usize,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        ProbeConfig {
            n_eval: 64,
            rep_len: 0,
            pattern_file: String::new(),
            pattern_fns: Vec::new(),
            icl_early: 4,
            icl_late: 0,
            icl_window: 2,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TransformerConfig {
    pub experiment: String,
    pub description: String,
    pub seed: u64,
    pub run: RunConfig,
    pub train: TrainConfig,
    pub model: ModelConfig,
    pub data: DataConfig,
    pub task: TaskConfig,
    pub probe: ProbeConfig,
}

crate::common_config!(TransformerConfig);

impl Default for TransformerConfig {
    fn default() -> Self {
        TransformerConfig {
            experiment: "transformer".into(),
            description: "A general causal transformer on a task or data of your own".into(),
            seed: 0,
            run: RunConfig {
                probe_every: 50,
                checkpoint_every: 500,
                ..RunConfig::default()
            },
            train: TrainConfig {
                optimizer: OptimizerKind::Adamw,
                lr: 1e-3,
                steps: 1000,
                beta1: 0.9,
                beta2: 0.99,
                eps: 1e-8,
                weight_decay: 0.0,
                warmup_steps: 50,
                schedule: ScheduleKind::Cosine,
                final_lr_ratio: 0.1,
                grad_clip: 1.0,
                log_every: 50,
                ..TrainConfig::default()
            },
            model: ModelConfig::default(),
            data: DataConfig::default(),
            task: TaskConfig::default(),
            probe: ProbeConfig::default(),
        }
    }
}

/// Value checks that need no data; the message names the key, the value and
/// what is allowed. (The data's own checks, a token past `d_vocab` or a window
/// longer than `n_ctx`, come when it is read: [`super::windows`].)
pub fn check(cfg: &TransformerConfig) -> Result<(), String> {
    let d = &cfg.data;
    if d.batch == 0 || d.batch > 65536 {
        return Err(format!("data.batch = {}: must be 1..=65536", d.batch));
    }
    if d.seq_len > 8192 {
        return Err(format!(
            "data.seq_len = {}: must be at most 8192",
            d.seq_len
        ));
    }
    if !(0.0..1.0).contains(&d.heldout_frac) {
        return Err(format!(
            "data.heldout_frac = {}: must be in [0, 1)",
            d.heldout_frac
        ));
    }
    if d.inputs != Inputs::Config && !d.file.is_empty() {
        return Err(format!(
            "data.file = {:?} with data.inputs = {:?}: the batches come from Python; leave data.file empty",
            d.file,
            format!("{:?}", d.inputs).to_lowercase()
        ));
    }
    if d.tokenizer == Tokenizer::Json && d.tokenizer_file.is_empty() {
        return Err(
            "data.tokenizer = \"json\" needs data.tokenizer_file (a tokenizer.json)".into(),
        );
    }
    if d.tokenizer == Tokenizer::Bpe && !(257..=65536).contains(&d.bpe_vocab) {
        return Err(format!(
            "data.bpe_vocab = {}: must be 257..=65536 (the 256 bytes and at least one merge)",
            d.bpe_vocab
        ));
    }
    for (i, name) in cfg.probe.pattern_fns.iter().enumerate() {
        let ok = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            return Err(format!(
                "probe.pattern_fns[{i}] = {name:?}: a pattern's name is letters, digits and _, not starting with a digit"
            ));
        }
        if cfg.probe.pattern_fns[..i].contains(name) {
            return Err(format!("probe.pattern_fns[{i}] = {name:?}: named twice"));
        }
    }
    if cfg.probe.n_eval == 0 || cfg.probe.n_eval > 65536 {
        return Err(format!(
            "probe.n_eval = {}: must be 1..=65536",
            cfg.probe.n_eval
        ));
    }
    if cfg.model.dtype == Dtype::F64x2 {
        return Err("model.dtype = \"f64x2\": the transformer runs in f32 or f64".into());
    }
    let t = d.seq_len.max(1);
    cfg.model
        .gpt(t, cfg.model.d_vocab.max(2))
        .validate()
        .map_err(|e| format!("model.{e}"))?;
    if d.file.is_empty() && d.inputs == Inputs::Config {
        super::tasks::Task::new(cfg).map(|_| ())?;
    }
    Ok(())
}
