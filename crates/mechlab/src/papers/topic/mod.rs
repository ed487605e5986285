//! Topic structure (Li, Li, Risteski 2023): a one-layer MLM transformer on LDA
//! documents puts same-topic words together in its value matrix, its embeddings
//! and its attention.
//!
//! The run generates train / dev / test documents ([`crate::papers::topic::data`]), trains
//! `TopicMlm` with minibatch AdamW (the batch order and, optionally, fresh masks
//! come from the seeded data stream and are restored on resume), evaluates the dev
//! loss every epoch with early stopping that keeps the best parameters (the
//! authors' regimen), and probes ([`crate::papers::topic::probes`]) the same-minus-different
//! topic gaps of the value matrix, the embeddings and the attention, their
//! shuffled-label controls, and the attention entropy over training. The final
//! probes, the test loss and the verdicts use the best checkpoint.
//!
//! Files: [`config`] (the typed config), [`data`] (the LDA generator and masking),
//! [`model`] (the one-layer MLM), [`training`] (the loop state, dev loss and
//! probes logged during training), [`synthetic`] and [`wiki`] (the two data
//! settings), [`report`] (figures, notes and verdicts), [`probes`].

pub mod analysis;
pub mod causal;
pub mod config;
pub mod data;
pub mod hooks;
pub mod measure;
pub mod model;
pub mod permutation;
pub mod probes;
pub mod report;
pub mod synthetic;
pub mod training;
pub mod verdicts;
pub mod wiki;
pub mod wiki_data;

pub use config::{MlmLoop, ProbeConfig, TopicConfig, WikiConfig};
pub use training::{dev_loss, make_set, measure, Early, Probes, TopicRun};

use crate::config::presets::Preset;
use crate::experiment::{Dtype, ExperimentError, Paper, ReproduceItem};
use crate::run::summary::Summary;
use crate::run::RunCtx;

/// The registered experiment.
pub struct TopicExperiment;

/// The paper's presets.
pub const PRESETS: &[Preset] = &[
    crate::preset!("topic-value"),
    crate::preset!("topic-embedding"),
    crate::preset!("topic-attention"),
    crate::preset!("topic-two-stage"),
    crate::preset!("topic-wikipedia"),
];

impl Paper for TopicExperiment {
    type Config = TopicConfig;
    fn name(&self) -> &'static str {
        "topic"
    }
    fn citation(&self) -> &'static str {
        "Yuchen Li, Yuanzhi Li, Andrej Risteski. How Do Transformers Learn Topic Structure: Towards a Mechanistic Understanding. ICML 2023 (arXiv 2303.04245)"
    }
    fn presets(&self) -> &'static [Preset] {
        PRESETS
    }
    fn validate(&self, cfg: &TopicConfig) -> Result<(), String> {
        cfg.validate()
    }
    fn run(&self, cfg: &TopicConfig, ctx: &mut RunCtx) -> Result<Summary, ExperimentError> {
        match (cfg.model.dtype, cfg.wiki.enabled) {
            (Dtype::F32, false) => synthetic::run_typed::<f32>(ctx, cfg),
            (Dtype::F64, false) => synthetic::run_typed::<f64>(ctx, cfg),
            (Dtype::F32, true) => wiki::run_wiki::<f32>(ctx, cfg),
            (Dtype::F64, true) => wiki::run_wiki::<f64>(ctx, cfg),
            (Dtype::F64x2, false) => synthetic::run_typed::<mechlab_engine::F64x2>(ctx, cfg),
            (Dtype::F64x2, true) => wiki::run_wiki::<mechlab_engine::F64x2>(ctx, cfg),
        }
    }
    fn data_key(&self) -> Option<&'static str> {
        Some("wiki.file")
    }

    fn reproduce(&self) -> Vec<ReproduceItem> {
        vec![
            ReproduceItem::new("topic-value", &[]).with_seeds(3),
            ReproduceItem::new("topic-value", &["model.bert_embedding_ln=true"]),
            ReproduceItem::new("topic-embedding", &[]).with_seeds(3),
            ReproduceItem::new("topic-attention", &[]),
            ReproduceItem::new("topic-two-stage", &[]),
        ]
    }
    crate::analysis_half!(analysis);
}
