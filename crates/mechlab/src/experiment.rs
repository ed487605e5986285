//! Experiments: each paper's claims, wired from data, model, trainer and probes.
//!
//! An experiment is a small file that builds its data and model from the resolved
//! config, trains with [`crate::train::fit`], measures the mechanism with its
//! probes, and writes figures, notes and a [`Summary`] with one verdict per claim.
//! It registers here, and its presets in [`crate::config::presets`].

use crate::config::ConfigError;
use crate::run::checkpoint::CheckpointError;
use crate::run::summary::Summary;
use crate::run::{RunCtx, RunError};
use crate::train::TrainError;
use thiserror::Error;

/// Why an experiment failed.
#[derive(Debug, Error)]
pub enum ExperimentError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error(transparent)]
    Train(#[from] TrainError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// Bad input data (a corpus file, a generator setting), with the file or key named.
    #[error("{0}")]
    Data(String),
}

/// A paper's experiment.
pub trait Experiment: Sync {
    /// Registry key and `experiment = "..."` value, also the paper's key for
    /// `mechlab reproduce <paper>`: `induction`, `selection` or `topic`.
    fn name(&self) -> &'static str;
    /// The paper, as cited in reports.
    fn citation(&self) -> &'static str;
    /// Every config key the experiment understands, with its default.
    fn default_config(&self) -> toml::Table;
    /// Checks that a resolved table parses as the experiment's typed config
    /// (enum values, stage tables), before any folder is made.
    fn validate(&self, table: &toml::Table, file: &str) -> Result<(), ConfigError>;
    /// Runs (or, when `ctx.resuming()`, continues) the experiment.
    fn run(&self, ctx: &mut RunCtx) -> Result<Summary, ExperimentError>;
    /// The config key that `--data PATH` sets (a corpus file or folder), if the
    /// experiment reads real data.
    fn data_key(&self) -> Option<&'static str> {
        None
    }
    /// The presets (with overrides) `mechlab reproduce` runs for this paper at its
    /// default scale.
    fn reproduce(&self) -> Vec<ReproduceItem>;
}

/// One run of `mechlab reproduce`.
#[derive(Clone, Debug)]
pub struct ReproduceItem {
    pub preset: &'static str,
    pub overrides: Vec<String>,
}

/// Every registered experiment.
pub fn all() -> Vec<&'static dyn Experiment> {
    vec![
        &crate::papers::induction::Induction,
        &crate::papers::selection::Selection,
        &crate::papers::topic::TopicExperiment,
    ]
}

/// The experiment registered as `name`.
pub fn find(name: &str) -> Option<&'static dyn Experiment> {
    all().into_iter().find(|e| e.name() == name)
}
