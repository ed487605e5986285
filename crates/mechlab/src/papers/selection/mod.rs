//! Token selection (Wu, Shevchenko, Oymak, Mondelli 2025): one gradient step
//! aligns each embedding with `v` by its signed frequency; gradient flow on the
//! ⟨cls⟩ query `p` then selects each sequence's label-predictive token and `p`
//! turns to the attention-SVM (max-margin) direction; on real reviews the score
//! `p·E_s` is U-shaped in the token's label posterior.
//!
//! The run: build the data (synthetic with known signal tokens, or IMDB / Yelp),
//! check the one-step formula on a fresh copy of the model, train through the
//! `[[train.stages]]` (default: one SGD step on `embed`, then normalised GD on
//! `cls`), probing cos(p, p_mm), the margin, ‖p‖ and the attention mass on the
//! selected tokens, and finally write the figures, notes and one verdict per claim.

pub mod analysis;
pub mod causal;
pub mod data;
pub mod hooks;
mod measure;
pub mod model;
pub mod probes;
mod report;
pub mod reviews;
mod train;
mod verdicts;
mod viewer;

use crate::config;
use crate::config::presets::Preset;
use crate::experiment::{Dtype, ExperimentError, Paper, ReproduceItem};
use crate::papers::selection::data::{generate, SeqData, SynthConfig, TokenClass};
use crate::papers::selection::model::ModelConfig;
use crate::rng::{stream, Stream};
use crate::run::summary::Summary;
use crate::run::{RunConfig, RunCtx};
use crate::train::config::StageConfig;
use crate::train::{OptimizerKind, TrainConfig};
use mechlab_engine::{F64x2, Float};
use reviews::{ReviewsConfig, Source};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The `[probe]` section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProbeConfig {
    /// Solve the max-margin problem (skipped when it has more than `max_pairs` constraints).
    pub max_margin: bool,
    pub max_pairs: usize,
    /// Step size of the one-step check when the first stage is not one SGD step on `embed`.
    pub one_step_lr: f64,
    /// Replace each selected token by the sequence's worst one (a control that must fail).
    pub swap_selected: bool,
    /// U-shape: tokens seen at least this often; ends are `|posterior diff| > edge`,
    /// the middle `< middle`.
    pub min_count: usize,
    pub edge: f64,
    pub middle: f64,
    /// Words listed per class in the most-selected table, and labelled per end of the U.
    pub top_words: usize,
    /// Probe on at most this many training sequences (0: all).
    pub eval_max: usize,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        ProbeConfig {
            max_margin: true,
            max_pairs: 50_000,
            one_step_lr: 100.0,
            swap_selected: false,
            min_count: 1,
            edge: 0.5,
            middle: 0.2,
            top_words: 10,
            eval_max: 0,
        }
    }
}

/// The experiment's whole config.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SelectionConfig {
    pub experiment: String,
    pub description: String,
    pub seed: u64,
    pub run: RunConfig,
    pub train: TrainConfig,
    pub data: ReviewsConfig,
    pub synthetic: SynthConfig,
    pub model: ModelConfig,
    pub probe: ProbeConfig,
}

crate::common_config!(SelectionConfig);

impl Default for SelectionConfig {
    fn default() -> Self {
        let stage = |name: &str, group: &str, steps, lr, opt| StageConfig {
            name: name.into(),
            groups: vec![group.into()],
            steps,
            lr,
            optimizer: Some(opt),
        };
        SelectionConfig {
            experiment: "selection".into(),
            description: String::new(),
            seed: 0,
            run: RunConfig {
                probe_every: 50,
                ..RunConfig::default()
            },
            train: TrainConfig {
                optimizer: OptimizerKind::Sgd,
                stages: vec![
                    stage("one_step", "embed", 1, 100.0, OptimizerKind::Sgd),
                    stage("cls", "cls", 1000, 0.3, OptimizerKind::NormalizedGd),
                ],
                ..TrainConfig::default()
            },
            data: ReviewsConfig::default(),
            synthetic: SynthConfig::default(),
            model: ModelConfig::default(),
            probe: ProbeConfig::default(),
        }
    }
}

pub struct Selection;

/// The paper's presets.
pub const PRESETS: &[Preset] = &[
    crate::preset!("selection-synthetic"),
    crate::preset!("selection-imdb"),
    crate::preset!("selection-yelp"),
];

impl Paper for Selection {
    type Config = SelectionConfig;
    fn name(&self) -> &'static str {
        "selection"
    }
    fn citation(&self) -> &'static str {
        "Diyuan Wu, Aleksandr Shevchenko, Samet Oymak, Marco Mondelli. Attention with Trained Embeddings Provably Selects Important Tokens. NeurIPS 2025 (arXiv 2505.17282)."
    }
    fn presets(&self) -> &'static [Preset] {
        PRESETS
    }
    fn validate(&self, c: &SelectionConfig) -> Result<(), String> {
        c.train.resolved_stages()?;
        if c.data.source == Source::Synthetic {
            c.synthetic
                .check()
                .map_err(|m| m.replacen("data.", "synthetic.", 1))?;
        }
        if c.model.d_model == 0 {
            return Err("model.d_model = 0: must be > 0".into());
        }
        Ok(())
    }
    fn run(&self, cfg: &SelectionConfig, ctx: &mut RunCtx) -> Result<Summary, ExperimentError> {
        match cfg.model.dtype {
            Dtype::F64 => run_typed::<f64>(ctx, cfg),
            Dtype::F32 => run_typed::<f32>(ctx, cfg),
            Dtype::F64x2 => run_typed::<F64x2>(ctx, cfg),
        }
    }
    fn data_key(&self) -> Option<&'static str> {
        Some("data.path")
    }

    fn reproduce(&self) -> Vec<ReproduceItem> {
        vec![ReproduceItem::new("selection-synthetic", &[]).with_seeds(5)]
    }
    crate::analysis_half!(analysis);
}

/// The training and test sets, and a name per token id.
pub(crate) struct DataSets {
    pub train: Arc<SeqData>,
    pub test: SeqData,
    pub words: Vec<String>,
}

impl DataSets {
    /// The word of token `t` (`#t` past the vocabulary).
    pub fn word(&self, t: u32) -> String {
        self.words
            .get(t as usize)
            .cloned()
            .unwrap_or_else(|| format!("#{t}"))
    }
}

/// The data stage: synthetic sequences, or IMDB / Yelp reviews (their
/// vocabulary and counts written to the run as `vocab.json`, `data.json`).
fn datasets(
    cfg: &SelectionConfig,
    seed: u64,
    ctx: &mut RunCtx,
) -> Result<DataSets, ExperimentError> {
    let data_err = ExperimentError::Data;
    let mut rng = stream(seed, Stream::Data);
    let source = cfg.data.source;
    let (train, test, words) = match source {
        Source::Synthetic => {
            let s = &cfg.synthetic;
            let train = generate(s, s.n_train, &mut rng).map_err(data_err)?;
            let test = generate(s, s.n_test.max(1), &mut rng).map_err(data_err)?;
            let name = |t: usize| match s.class_of(t) {
                TokenClass::Positive => format!("+{t}"),
                TokenClass::Negative => format!("-{}", t - s.n_pos),
                TokenClass::Neutral => format!("n{}", t - s.n_pos - s.n_neg),
            };
            (train, test, (0..s.d_vocab()).map(name).collect::<Vec<_>>())
        }
        Source::Imdb | Source::Yelp => {
            let r =
                reviews::load(&config::name_of(&source), &cfg.data, &mut rng).map_err(data_err)?;
            let vocab: serde_json::Value =
                serde_json::from_str(&r.vocab.to_json()).expect("the vocabulary is JSON");
            ctx.artifact("vocab.json", &vocab)?;
            ctx.artifact(
                "data.json",
                &serde_json::json!({"source": r.source.display().to_string(), "train": r.train.n,
                    "test": r.test.n, "d_vocab": r.vocab.len(), "skipped": r.skipped, "empty": r.empty}),
            )?;
            (r.train, r.test, r.vocab.words().to_vec())
        }
    };
    train
        .check()
        .map_err(|m| data_err(format!("training set: {m}")))?;
    let train = Arc::new(train);
    Ok(DataSets { train, test, words })
}

fn run_typed<T: Float>(
    ctx: &mut RunCtx,
    cfg: &SelectionConfig,
) -> Result<Summary, ExperimentError> {
    let seed = cfg.seed;
    let sets = datasets(cfg, seed, ctx)?;
    let (one, stages) = measure::one_step::<T>(cfg, &sets.train, seed)?;
    let mut trained = train::train::<T>(cfg, &sets, seed, ctx)?;
    let m = measure::measure(cfg, &mut trained.model, &sets);
    report::figures(cfg, &sets, &one, &m, &trained.last, ctx)?;
    let s = verdicts::summary(cfg, seed, &sets, &one, &m, &mut trained)?;
    report::notes(cfg, &sets, &stages, &one, &m, &trained.last, ctx)?;
    Ok(s)
}
