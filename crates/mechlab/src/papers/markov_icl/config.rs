//! The markov-icl experiment's config: one typed struct, validated once by [`check`].
//!
//! Defaults are the authors' (`training_pipeline.py`, `plots.ipynb`): two
//! symbols, bigrams, Dirichlet(1) rows, T = 100, batch 64, d_model 16, one head,
//! AdamW at 5e-4 with betas (0.9, 0.95) for 2 000 steps on fresh batches.

use super::data::{ChainSpec, FirstToken, Prior};
use super::minimal::Layer1;
use crate::experiment::Dtype;
use crate::run::RunConfig;
use crate::train::{OptimizerKind, TrainConfig};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DataConfig {
    /// Symbols `S`.
    pub vocab: usize,
    /// n of the n-gram (2 = Markov chain, 3 = trigram).
    pub order: usize,
    /// `dirichlet` or `doubly_stochastic`.
    pub prior: Prior,
    /// Dirichlet concentration of every row (the paper: 1).
    pub alpha: f64,
    /// Input length `T` (each sequence has `T + 1` tokens).
    pub seq_len: usize,
    /// Fresh sequences per step.
    pub batch: usize,
    /// Control: permute each sequence's tokens after drawing it, which keeps the
    /// in-context unigram counts and destroys every transition.
    pub shuffle: bool,
    /// The first symbols' law: `stationary` (the chain's) or `uniform` (what the
    /// authors' code draws, `docs/markov-icl.md`).
    pub first: FirstToken,
}

impl Default for DataConfig {
    fn default() -> Self {
        DataConfig {
            vocab: 2,
            order: 2,
            prior: Prior::Dirichlet,
            alpha: 1.0,
            seq_len: 100,
            batch: 64,
            shuffle: false,
            first: FirstToken::Stationary,
        }
    }
}

impl DataConfig {
    pub fn spec(&self) -> ChainSpec {
        ChainSpec {
            vocab: self.vocab,
            order: self.order,
            prior: self.prior,
            alpha: self.alpha,
            len: self.seq_len + 1,
            first: self.first,
        }
    }
}

/// Which model a run trains.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelKind {
    /// The authors' two-layer attention-only transformer with relative positions.
    #[default]
    Transformer,
    /// The paper's minimal model (`minimal.rs`): distance weights `v` and a
    /// token matrix `W`; `d_model`, `init_std` and `proj_std` do not apply.
    Minimal,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
    /// `transformer` or `minimal`.
    pub kind: ModelKind,
    /// The minimal model's first layer: `softmax` over the distance weights, or `linear`.
    pub layer1: Layer1,
    pub d_model: usize,
    /// Heads of layer 0 (layer 1 has one).
    pub n_heads: usize,
    pub init_std: f64,
    /// Init std of the output projections `W_O`.
    pub proj_std: f64,
    /// Dropout rate at the authors' four places (`model.rs`); theirs is 0.1.
    /// Training only; evaluation and probes run without it.
    pub dropout: f64,
    pub dtype: Dtype,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            kind: ModelKind::Transformer,
            layer1: Layer1::Softmax,
            d_model: 16,
            n_heads: 1,
            init_std: 0.02,
            proj_std: 0.01,
            dropout: 0.0,
            dtype: Dtype::F32,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProbeConfig {
    /// Sequences of the fixed evaluation batch (drawn from the Sample stream).
    pub n_eval: usize,
    /// Sequences of the authors' last-token test set (`test_error.py`: 768); 0
    /// leaves their metric out. Measured at every probe step (`run.probe_every`).
    pub n_last: usize,
    /// Also train the same model (same init, same steps) on the doubly
    /// stochastic prior, to compare the plateaus (bigram, Dirichlet runs only).
    pub compare_prior: bool,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        ProbeConfig {
            n_eval: 128,
            n_last: 0,
            compare_prior: false,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MarkovConfig {
    pub experiment: String,
    pub description: String,
    pub seed: u64,
    pub run: RunConfig,
    pub train: TrainConfig,
    pub data: DataConfig,
    pub model: ModelConfig,
    pub probe: ProbeConfig,
}

crate::common_config!(MarkovConfig);

impl Default for MarkovConfig {
    fn default() -> Self {
        MarkovConfig {
            experiment: "markov-icl".into(),
            description:
                "Statistical induction heads on in-context Markov chains (Edelman et al. 2024)"
                    .into(),
            seed: 1,
            run: RunConfig {
                checkpoint_log_until: 64,
                checkpoint_every: 500,
                probe_every: 50,
                ..RunConfig::default()
            },
            train: TrainConfig {
                optimizer: OptimizerKind::Adamw,
                lr: 5e-4,
                steps: 2000,
                beta1: 0.9,
                beta2: 0.95,
                eps: 1e-8,
                weight_decay: 0.0,
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
pub fn check(cfg: &MarkovConfig) -> Result<(), String> {
    cfg.data.spec().check()?;
    let (d, h) = (cfg.model.d_model, cfg.model.n_heads);
    if d == 0 || d > 256 {
        return Err(format!("model.d_model = {d}: must be 1..=256"));
    }
    if h == 0 || d % h != 0 {
        return Err(format!(
            "model.n_heads = {h}: must divide model.d_model = {d}"
        ));
    }
    if !(2..=1024).contains(&cfg.data.seq_len) {
        return Err(format!(
            "data.seq_len = {}: must be 2..=1024",
            cfg.data.seq_len
        ));
    }
    if cfg.data.batch == 0 || cfg.data.batch > 65536 {
        return Err(format!(
            "data.batch = {}: must be 1..=65536",
            cfg.data.batch
        ));
    }
    if cfg.probe.n_eval == 0 || cfg.probe.n_eval > 100_000 {
        return Err(format!(
            "probe.n_eval = {}: must be 1..=100000",
            cfg.probe.n_eval
        ));
    }
    if cfg.probe.n_last > 100_000 {
        return Err(format!(
            "probe.n_last = {}: must be 0..=100000",
            cfg.probe.n_last
        ));
    }
    for (k, v) in [
        ("model.init_std", cfg.model.init_std),
        ("model.proj_std", cfg.model.proj_std),
    ] {
        if !(v.is_finite() && v > 0.0) {
            return Err(format!("{k} = {v}: must be a positive number"));
        }
    }
    let p = cfg.model.dropout;
    if !(p.is_finite() && (0.0..0.99).contains(&p)) {
        return Err(format!("model.dropout = {p}: must be in [0, 0.99)"));
    }
    if cfg.model.kind == ModelKind::Minimal && p != 0.0 {
        return Err(format!(
            "model.dropout = {p}: the minimal model (model.kind = \"minimal\") has no dropout"
        ));
    }
    if cfg.model.kind == ModelKind::Minimal && h != 1 {
        return Err(format!(
            "model.n_heads = {h}: the minimal model (model.kind = \"minimal\") has one head per layer"
        ));
    }
    if cfg.probe.compare_prior && !cfg.train.stages.is_empty() {
        return Err(
            "probe.compare_prior = true needs one training stage (train.stages empty)".into(),
        );
    }
    if cfg.probe.compare_prior && (cfg.data.prior != Prior::Dirichlet || cfg.data.order != 2) {
        return Err(
            "probe.compare_prior = true needs data.prior = \"dirichlet\" and data.order = 2".into(),
        );
    }
    Ok(())
}
