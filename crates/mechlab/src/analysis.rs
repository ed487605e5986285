//! The analysis half of the paper contract: what a paper hands back so that a
//! finished run can be loaded, inspected and intervened on without the CLI,
//! Python or a test knowing which paper trained it.
//!
//! A paper implements [`crate::experiment::Paper::load`] (the run's model at a
//! checkpoint, as a hooked model) and [`crate::experiment::Paper::intervene`]
//! (its causal questions, each with a control, as [`Interventions`]); the
//! registry erases the config type, and [`crate::inspect::load_model`],
//! `mechlab intervene` ([`crate::commands::intervene`]) and Python's
//! `Run.model()` go through it. This module holds what every paper's half
//! shares: the run folder as a paper sees it ([`RunDir`]: its config file,
//! checkpoints by step), the errors, and the shape of an intervention result
//! ([`Effect`]: clean, intervened and control values of one metric), which the
//! command writes to `intervene.json`, a figure and a report section the same
//! way for every paper.
//!
//! ```
//! use mechlab::analysis::Effect;
//! let e = Effect::new("ablate-top", "does the model need the tokens it attends to?", "accuracy")
//!     .values(0.98, 0.51, 0.97)
//!     .labels("zero the 2 most-attended tokens", "zero 2 random tokens");
//! assert!(e.effect() > 10.0 * e.control_effect());
//! ```

use crate::config::ConfigError;
use crate::pretrained::PretrainedError;
use crate::run::checkpoint::{self, CheckpointError, Loaded};
use crate::run::RunError;
use mechlab_engine::hooks::{HookError, HookedModel};
use mechlab_engine::{Float, Parameters};
use mechlab_report::Figure;
use serde::Serialize;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// A loaded model, ready for analysis.
pub type Model = Box<dyn HookedModel + Send>;

/// Why a run's model could not be loaded.
#[derive(Debug, Error)]
pub enum LoadError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error("{path}: no checkpoint for step {step} (this run has steps {available:?})")]
    NoStep {
        path: String,
        step: u64,
        available: Vec<u64>,
    },
    /// A run's pretrained encoder could not be loaded.
    #[error(transparent)]
    Pretrained(#[from] PretrainedError),
    /// The config or checkpoint describes a model this loader cannot rebuild.
    #[error("{file}: {reason}")]
    Unsupported { file: String, reason: String },
}

/// Why `intervene` could not run.
#[derive(Debug, Error)]
pub enum InterveneError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Hook(#[from] HookError),
    #[error(transparent)]
    Run(#[from] RunError),
    /// A request or run the paper's interventions cannot serve, with the key,
    /// flag or file named.
    #[error("{0}")]
    Invalid(String),
}

/// A run folder as a paper's analysis half sees it.
#[derive(Clone, Debug)]
pub struct RunDir {
    pub dir: PathBuf,
    /// `<dir>/config.toml`, as errors name it.
    pub file: String,
}

impl RunDir {
    pub fn new(dir: &Path) -> Self {
        RunDir {
            dir: dir.to_path_buf(),
            file: dir.join("config.toml").display().to_string(),
        }
    }

    /// The checkpoint file of `step`, or the latest.
    pub fn checkpoint(&self, step: Option<u64>) -> Result<PathBuf, LoadError> {
        let dir = self.dir.join("checkpoints");
        match step {
            None => Ok(checkpoint::latest(&dir)?),
            Some(s) => {
                let path = dir.join(checkpoint::file_name(s));
                if path.is_file() {
                    Ok(path)
                } else {
                    Err(LoadError::NoStep {
                        path: path.display().to_string(),
                        step: s,
                        available: checkpoint::list(&dir).into_iter().map(|(s, _)| s).collect(),
                    })
                }
            }
        }
    }

    /// The parameters of checkpoint `step` (the latest when `None`).
    pub fn read<T: Float>(&self, step: Option<u64>) -> Result<Loaded<T>, LoadError> {
        Ok(checkpoint::load::<T>(&self.checkpoint(step)?)?)
    }

    /// A [`LoadError::Unsupported`] naming this run's config.
    pub fn unsupported(&self, reason: impl Into<String>) -> LoadError {
        LoadError::Unsupported {
            file: self.file.clone(),
            reason: reason.into(),
        }
    }
}

/// `model` with the checkpoint's parameters, boxed for analysis.
pub fn restore<T: Float, M>(mut model: M, loaded: &Loaded<T>) -> Result<Model, LoadError>
where
    M: Parameters<T> + HookedModel + Send + 'static,
{
    loaded.apply_params(&mut model)?;
    Ok(Box::new(model))
}

/// The first axis of a stored tensor (a vocabulary size a model's shape needs),
/// or a mismatch naming the checkpoint.
pub fn first_axis<T>(loaded: &Loaded<T>, name: &str) -> Result<usize, LoadError> {
    loaded
        .tensors
        .get(name)
        .and_then(|(shape, _)| shape.first().copied())
        .ok_or_else(|| {
            LoadError::Checkpoint(CheckpointError::Mismatch {
                path: loaded.path.display().to_string(),
                reason: format!("no tensor {name}, so the vocabulary size is unknown"),
            })
        })
}

/// What `mechlab intervene` was asked for.
#[derive(Clone, Debug, Default)]
pub struct Request {
    pub step: Option<u64>,
    /// Ablation kinds among zero, mean, resample (empty: the paper's default).
    pub ablate: Vec<String>,
    /// The paper's activation-patching grid, where it has one.
    pub patch: bool,
}

impl Request {
    /// Refuses `--ablate` / `--patch` for a paper whose interventions are a fixed
    /// suite, naming the flag and what the paper runs instead.
    pub fn fixed_suite(&self, paper: &str, runs: &str) -> Result<(), InterveneError> {
        let flag = if !self.ablate.is_empty() {
            "--ablate"
        } else if self.patch {
            "--patch"
        } else {
            return Ok(());
        };
        Err(InterveneError::Invalid(format!(
            "{flag}: {paper} runs take no {flag}; `mechlab intervene` runs their fixed suite: {runs}"
        )))
    }
}

/// One causal question, answered on one metric: its value on the clean model,
/// with the intervention, and with a control intervention of the same size that
/// the mechanism says should matter little.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Effect {
    pub id: String,
    pub question: String,
    /// What is measured (e.g. "test accuracy", "validation loss").
    pub metric: String,
    pub clean: f64,
    pub intervened: f64,
    pub control: f64,
    /// What the intervention and the control did.
    pub intervention: String,
    pub control_label: String,
}

impl Effect {
    pub fn new(id: &str, question: &str, metric: &str) -> Self {
        Effect {
            id: id.into(),
            question: question.into(),
            metric: metric.into(),
            clean: f64::NAN,
            intervened: f64::NAN,
            control: f64::NAN,
            intervention: String::new(),
            control_label: String::new(),
        }
    }
    pub fn values(mut self, clean: f64, intervened: f64, control: f64) -> Self {
        (self.clean, self.intervened, self.control) = (clean, intervened, control);
        self
    }
    pub fn labels(mut self, intervention: &str, control: &str) -> Self {
        self.intervention = intervention.into();
        self.control_label = control.into();
        self
    }
    /// |intervened − clean|.
    pub fn effect(&self) -> f64 {
        (self.intervened - self.clean).abs()
    }
    /// |control − clean|.
    pub fn control_effect(&self) -> f64 {
        (self.control - self.clean).abs()
    }
}

/// A paper's interventions on one run.
#[derive(Clone, Debug, Default)]
pub struct Interventions {
    /// The causal questions with their controls.
    pub effects: Vec<Effect>,
    /// Anything else the paper reports (grids, per-head tables), merged into
    /// `intervene.json` beside `effects`.
    pub extra: serde_json::Map<String, serde_json::Value>,
    /// The paper's own figures (each written to `figures/<id>.json`).
    pub figures: Vec<Figure>,
    /// Markdown for the report's "Interventions" section, after the effects table.
    pub notes: String,
    /// What was intervened on (e.g. "200 test sequences").
    pub data: String,
}

/// The effects table (markdown) and figure every paper's section starts with.
pub fn effects_section(effects: &[Effect]) -> (String, Option<Figure>) {
    if effects.is_empty() {
        return (String::new(), None);
    }
    let mut md = String::from(
        "| question | metric | clean | intervention | control |\n|---|---|---|---|---|\n",
    );
    for e in effects {
        md.push_str(&format!(
            "| `{}`: {} | {} | {:.4} | {:.4} ({}) | {:.4} ({}) |\n",
            e.id,
            e.question,
            e.metric,
            e.clean,
            e.intervened,
            e.intervention,
            e.control,
            e.control_label
        ));
    }
    let n = effects.len();
    let vals: Vec<f64> = effects
        .iter()
        .flat_map(|e| [e.intervened - e.clean, e.control - e.clean])
        .collect();
    let fig = Figure::heatmap(
        "intervene_effects",
        "Interventions and their controls: change of each metric",
        "",
        "question",
        n,
        2,
        vals,
        true,
    )
    .with_ticks(
        effects.iter().map(|e| e.id.clone()).collect(),
        vec!["intervention".into(), "control".into()],
    )
    .caption(
        "Each row is one causal question: the intervened and the control value of its metric, \
         minus the clean model's.",
    );
    (md, Some(fig))
}
