//! The topic experiment's config: one typed struct, parsed and validated once.

use crate::papers::topic::data::LdaConfig;
use crate::papers::topic::model::TopicMlmConfig;
use crate::run::RunConfig;
use crate::train::{OptimizerKind, TrainConfig};
use serde::{Deserialize, Serialize};

/// The `[mlm]` section: minibatches and early stopping.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MlmLoop {
    pub batch_size: usize,
    /// Dev-loss evaluation every this many steps (0: one epoch), plus once after
    /// the first update (the authors' "epoch 0").
    pub eval_every: u64,
    /// Stop after this many evaluations without a new best dev loss (0: never).
    pub patience: u64,
}

impl Default for MlmLoop {
    fn default() -> Self {
        MlmLoop {
            batch_size: 40,
            eval_every: 0,
            patience: 5,
        }
    }
}

impl Default for ProbeConfig {
    fn default() -> Self {
        ProbeConfig {
            docs: 200,
            bound_gap_max: 0.4,
            control_max: 0.2,
            expect_bound: true,
        }
    }
}

/// The `[probe]` section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProbeConfig {
    /// Dev documents the attention probes read.
    pub docs: usize,
    /// Verdict: best dev loss minus the Bayes bound must stay below this (nats).
    pub bound_gap_max: f64,
    /// topic-bert's control verdicts: the shuffled-label |gap| must stay below this
    /// share of the gap (the synthetic and Wikipedia gaps are judged by the
    /// permutation test of `topic::permutation` instead).
    pub control_max: f64,
    /// Judge the dev loss against the Bayes bound (false: only against its start,
    /// for models whose frozen parts cannot reach the bound).
    pub expect_bound: bool,
}

/// The experiment's config.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TopicConfig {
    pub experiment: String,
    pub description: String,
    pub seed: u64,
    pub run: RunConfig,
    pub train: TrainConfig,
    pub data: LdaConfig,
    pub model: TopicMlmConfig,
    pub mlm: MlmLoop,
    pub probe: ProbeConfig,
    pub wiki: WikiConfig,
}

crate::common_config!(TopicConfig);

impl Default for TopicConfig {
    fn default() -> Self {
        TopicConfig {
            experiment: "topic".into(),
            description: "one-layer MLM transformer on LDA documents".into(),
            seed: 0,
            run: RunConfig {
                checkpoint_log_until: 0,
                checkpoint_every: 1000,
                probe_every: 250,
                ..RunConfig::default()
            },
            train: TrainConfig {
                optimizer: OptimizerKind::Adamw,
                lr: 0.01,
                steps: 5000,
                weight_decay: 0.0,
                log_every: 25,
                ..TrainConfig::default()
            },
            data: LdaConfig::default(),
            model: TopicMlmConfig::default(),
            mlm: MlmLoop::default(),
            probe: ProbeConfig::default(),
            wiki: WikiConfig::default(),
        }
    }
}

/// The `[wiki]` section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WikiConfig {
    /// Train on Wikipedia instead of synthetic LDA documents.
    pub enabled: bool,
    /// Relative to the shared data root (`$MECHLAB_DATA` or `../shared/data`), or absolute.
    pub file: String,
    pub n_words: usize,
    pub min_count: u64,
    /// Tokens per document, `START` included.
    pub max_len: usize,
    pub n_dev: usize,
    /// Gold labels left out of the gold-topic probes.
    pub exclude_topics: Vec<String>,
    pub lda_topics: usize,
    pub lda_iterations: usize,
    pub lda_burn_in: usize,
    pub lda_alpha: f64,
    pub lda_beta: f64,
    /// Content words seen fewer times get no topic in the probes.
    pub topic_min_count: u64,
}

impl Default for WikiConfig {
    fn default() -> Self {
        WikiConfig {
            enabled: false,
            file: "wikipedia/vital_articles_en.json".into(),
            n_words: 2000,
            min_count: 3,
            max_len: 128,
            n_dev: 1000,
            exclude_topics: vec!["Uncategorized".into()],
            lda_topics: 12,
            lda_iterations: 100,
            lda_burn_in: 50,
            lda_alpha: 0.1,
            lda_beta: 0.01,
            topic_min_count: 20,
        }
    }
}

impl WikiConfig {
    /// Our Gibbs LDA's settings for this section (`topic-wikipedia` and
    /// `topic-bert` fit the same LDA on the same lead sections).
    pub fn gibbs(&self, seed: u64) -> mechlab_corpora::lda::LdaConfig {
        mechlab_corpora::lda::LdaConfig {
            alpha: self.lda_alpha,
            beta: self.lda_beta,
            iterations: self.lda_iterations,
            burn_in: self.lda_burn_in,
            seed,
            loglik_every: 10,
            ..mechlab_corpora::lda::LdaConfig::new(self.lda_topics)
        }
    }
}

impl TopicConfig {
    /// Every value check, before a run folder exists; messages name the key.
    pub fn validate(&self) -> Result<(), String> {
        if !self.wiki.enabled {
            self.data.check()?;
        }
        if self.mlm.batch_size == 0 {
            return Err("mlm.batch_size = 0: must be at least 1".into());
        }
        if self.probe.docs == 0 {
            return Err("probe.docs = 0: must be at least 1".into());
        }
        if self.wiki.enabled {
            let w = &self.wiki;
            if w.n_words == 0 || w.max_len < 2 || w.n_dev == 0 {
                return Err(format!(
                    "wiki.n_words = {}, wiki.max_len = {}, wiki.n_dev = {}: need n_words >= 1, max_len >= 2, n_dev >= 1",
                    w.n_words, w.max_len, w.n_dev
                ));
            }
            if w.lda_topics == 0 || w.lda_iterations == 0 || w.lda_burn_in >= w.lda_iterations {
                return Err(format!(
                    "wiki.lda_topics = {}, wiki.lda_iterations = {}, wiki.lda_burn_in = {}: need at least one topic and burn_in < iterations",
                    w.lda_topics, w.lda_iterations, w.lda_burn_in
                ));
            }
            if !(w.lda_alpha > 0.0
                && w.lda_beta > 0.0
                && w.lda_alpha.is_finite()
                && w.lda_beta.is_finite())
            {
                return Err(format!(
                    "wiki.lda_alpha = {}, wiki.lda_beta = {}: both must be positive numbers",
                    w.lda_alpha, w.lda_beta
                ));
            }
        }
        Ok(())
    }
}
