//! The birth config: one typed struct, checked once by [`check`].
//!
//! The defaults are the authors' code's (`ihead_basic_main.py` and its README
//! command: `data_args.k=5 fixed_special_toks=True`, `loss_head_only=True`,
//! frozen embeddings and output, SGD momentum 0.9, weight decay 1e-4, 1 000
//! iterations; the code's default width 64 and learning rate 0.2) at the
//! reduced CPU size of `docs/birth.md`: T 64 and batch 32 instead of 256 and 512.

use crate::experiment::Dtype;
use crate::run::RunConfig;
use crate::train::{OptimizerKind, TrainConfig};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DataConfig {
    /// The text whose byte unigrams and bigrams drive the sequences (WikiText
    /// format), relative to the shared data folder.
    pub file: String,
    /// Number of triggers `K`: the `K` most frequent tokens, fixed.
    pub k: usize,
    /// Context length `T` (= the model's `n_ctx`).
    pub seq_len: usize,
    /// Fresh sequences per step.
    pub batch: usize,
}

impl Default for DataConfig {
    fn default() -> Self {
        DataConfig {
            file: "wikipedia/wikitext-2/wiki.test.tokens".into(),
            k: 5,
            seq_len: 64,
            batch: 32,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
    /// 2 (the paper's model) or 1 (the control).
    pub n_layers: usize,
    /// Width `d` of the residual stream and of each layer's single head.
    pub d_model: usize,
    pub dtype: Dtype,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            n_layers: 2,
            d_model: 64,
            dtype: Dtype::F32,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProbeConfig {
    /// Fixed evaluation sequences (the authors' test batch).
    pub n_eval: usize,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        ProbeConfig { n_eval: 128 }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BirthConfig {
    pub experiment: String,
    pub description: String,
    pub seed: u64,
    pub run: RunConfig,
    pub train: TrainConfig,
    pub data: DataConfig,
    pub model: ModelConfig,
    pub probe: ProbeConfig,
}

crate::common_config!(BirthConfig);

impl Default for BirthConfig {
    fn default() -> Self {
        BirthConfig {
            experiment: "birth".into(),
            description: "Bietti et al. 2023: an induction head forms as associative memories on bigram text with triggers".into(),
            seed: 1,
            run: RunConfig {
                probe_every: 50,
                checkpoint_every: 500,
                ..RunConfig::default()
            },
            train: TrainConfig {
                optimizer: OptimizerKind::Sgd,
                lr: 0.2,
                momentum: 0.9,
                weight_decay: 1e-4,
                steps: 1000,
                groups: vec![super::model::TRAINED.into()],
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
pub fn check(cfg: &BirthConfig) -> Result<(), String> {
    let (d, m) = (&cfg.data, &cfg.model);
    let n_eval = cfg.probe.n_eval;
    crate::papers::gpt_task::check_sizes("birth", d.seq_len, d.batch, n_eval, m.dtype)?;
    if d.k == 0 || d.k > 32 {
        return Err(format!("data.k = {}: must be 1..=32 triggers", d.k));
    }
    if !(1..=2).contains(&m.n_layers) {
        return Err(format!(
            "model.n_layers = {}: the paper's model has 2 layers (1 is the control)",
            m.n_layers
        ));
    }
    if !(2..=1024).contains(&m.d_model) {
        return Err(format!("model.d_model = {}: must be 2..=1024", m.d_model));
    }
    Ok(())
}
