//! Experiments: what a paper plugs into mechlab, and the registry that finds it.
//!
//! A paper implements [`Paper`]: its name and citation, its presets, one typed
//! config struct (`serde`, real enums) with its value checks, and `run`, which
//! builds the data and model, trains with [`crate::train::fit`], measures the
//! mechanism with its probes and returns a [`Summary`] with one verdict per claim.
//! Everything else is generic: the config is resolved, type-checked and validated
//! exactly once, before any run folder exists ([`Experiment::prepare`]); the run
//! folder, checkpoints, metrics, figures, summary and report belong to
//! [`crate::run`] and [`crate::commands`]. A paper registers in one place: a
//! [`Registry`] (the built-in papers, [`crate::papers::registry`], plus any a
//! downstream crate adds), which [`crate::cli::main`] takes and passes to every
//! command, so `run`, `resume`, `report`, `sweep`, `reproduce`, `inspect` and
//! `intervene` work unchanged for a paper written elsewhere
//! (`crates/mechlab/tests/it/plugin.rs` is the worked example). There is no
//! global registry: whatever needs one is handed it.
//!
//! ```
//! let reg = mechlab::papers::registry();
//! let names: Vec<&str> = reg.all().iter().map(|e| e.name()).collect();
//! assert!(names.contains(&"induction"));
//! assert!(reg.find_preset("topic-value").is_some());
//! ```

use crate::analysis::{InterveneError, Interventions, LoadError, Model, Request, RunDir};
use crate::claims::Claim;
use crate::config::presets::Preset;
use crate::config::{self, ConfigError};
use crate::run::checkpoint::CheckpointError;
use crate::run::summary::Summary;
use crate::run::{RunConfig, RunCtx, RunError};
use crate::train::config::TrainConfig;
use crate::train::TrainError;
use serde::{de::DeserializeOwned, Deserialize, Serialize};
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

/// The floating-point type a model trains in (`model.dtype`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    F32,
    #[default]
    F64,
    /// The double-double [`mechlab_engine::F64x2`] (~106 bits): a precision check,
    /// 10–40× slower than f64.
    F64x2,
}

impl Dtype {
    /// Whether a run in this dtype loads for analysis as f32 (`true`) or f64;
    /// a double-double run is refused with the reason.
    pub fn analysis_f32(self, run: &RunDir) -> Result<bool, LoadError> {
        match self {
            Dtype::F64x2 => Err(run.unsupported(
                "model.dtype = \"f64x2\": a double-double run is a precision check; inspect and \
                 intervene load f32 and f64 runs (rerun it in f64 to analyse it)",
            )),
            d => Ok(d == Dtype::F32),
        }
    }
}

/// The keys every paper's config shares, read from the *typed* config: the
/// config is parsed once, in [`Experiment::prepare`], and nothing reads these
/// keys from the table again. Implement it with [`common_config!`](crate::common_config).
pub trait Common {
    /// `seed`: the one seed every random stream derives from.
    fn seed(&self) -> u64;
    /// `[run]`: what the run records and how often.
    fn run_config(&self) -> &RunConfig;
    /// `[train]`, for a paper that trains (checked with the rest of the config).
    fn train_config(&self) -> Option<&TrainConfig>;
}

/// [`Common`] for a config struct with fields `seed`, `run` and `train`
/// (`common_config!(MyConfig)`), or `seed` and `run` only
/// (`common_config!(MyConfig, no_train)`).
#[macro_export]
macro_rules! common_config {
    ($ty:ty) => {
        $crate::common_config!(@impl $ty, self, Some(&self.train));
    };
    ($ty:ty, no_train) => {
        $crate::common_config!(@impl $ty, self, None);
    };
    (@impl $ty:ty, $self:ident, $train:expr) => {
        impl $crate::experiment::Common for $ty {
            fn seed(&self) -> u64 {
                self.seed
            }
            fn run_config(&self) -> &$crate::run::RunConfig {
                &self.run
            }
            fn train_config(&$self) -> Option<&$crate::train::config::TrainConfig> {
                $train
            }
        }
    };
}

/// The analysis half of a paper whose `analysis` module (any module, named by
/// `$m`) has `load(cfg, run, step)` and `intervene(cfg, run, req)`, and with
/// `measure` also `measure(cfg, run, step)`: the [`Paper`] methods that hand
/// each call to it, written once. Inside `impl Paper for MyPaper`:
/// `mechlab::analysis_half!(analysis);`.
#[macro_export]
macro_rules! analysis_half {
    ($m:ident) => {
        fn load(
            &self,
            cfg: &Self::Config,
            run: &$crate::analysis::RunDir,
            step: Option<u64>,
        ) -> Result<$crate::analysis::Model, $crate::analysis::LoadError> {
            $m::load(cfg, run, step)
        }
        fn intervene(
            &self,
            cfg: &Self::Config,
            run: &$crate::analysis::RunDir,
            req: &$crate::analysis::Request,
        ) -> Result<$crate::analysis::Interventions, $crate::analysis::InterveneError> {
            $m::intervene(cfg, run, req)
        }
    };
    ($m:ident, measure) => {
        $crate::analysis_half!($m);
        fn measure(
            &self,
            cfg: &Self::Config,
            run: &$crate::analysis::RunDir,
            step: Option<u64>,
        ) -> Result<serde_json::Map<String, serde_json::Value>, $crate::analysis::InterveneError> {
            $m::measure(cfg, run, step)
        }
    };
}

/// A paper, as its author writes it: typed config in, summary out.
pub trait Paper: Sync + Send + 'static {
    /// The whole config: every key with its default, `#[serde(deny_unknown_fields)]`.
    type Config: Common + Serialize + DeserializeOwned + Default + Send + Sync + 'static;
    /// Registry key and `experiment = "..."` value, also the paper's key for
    /// `mechlab reproduce <paper>`.
    fn name(&self) -> &'static str;
    /// The paper, as cited in reports.
    fn citation(&self) -> &'static str;
    /// Its embedded presets (each names this paper as its `experiment`).
    fn presets(&self) -> &'static [Preset];
    /// Value checks the types cannot express (sizes, ranges, combinations); the
    /// message names the key, the value and what is allowed.
    fn validate(&self, cfg: &Self::Config) -> Result<(), String>;
    /// Runs (or, when `ctx.resuming()`, continues) the experiment.
    fn run(&self, cfg: &Self::Config, ctx: &mut RunCtx) -> Result<Summary, ExperimentError>;
    /// The config key that `--data PATH` sets, if the experiment reads real data.
    fn data_key(&self) -> Option<&'static str> {
        None
    }
    /// The presets (with overrides) `mechlab reproduce` runs for this paper.
    fn reproduce(&self) -> Vec<ReproduceItem> {
        Vec::new()
    }
    /// The rules its claims are judged by over seeds in the setting `cfg`, where a
    /// claim's is not "every seed" (see [`crate::claims`]). A rule belongs to the
    /// claim in its setting: the authors' code may hold a claim on every seed in
    /// one setting and on some in another.
    fn claims(&self, _cfg: &Self::Config) -> &'static [Claim] {
        &[]
    }

    // --- the analysis half (crate::analysis): optional, but inspect, intervene
    // and Python's `Run.model()` only reach a paper through it ---

    /// The run's model with the parameters of checkpoint `step` (the latest when
    /// `None`), as a hooked model, built without reading the training data.
    fn load(
        &self,
        cfg: &Self::Config,
        run: &RunDir,
        step: Option<u64>,
    ) -> Result<Model, LoadError> {
        let _ = (cfg, step);
        Err(run.unsupported(format!(
            "experiment = `{}` has no analysis half (its Paper impl does not define `load`)",
            Paper::name(self)
        )))
    }
    /// What the paper measures at every probe step, on checkpoint `step` (the
    /// latest when `None`) of a finished or interrupted run: the record its
    /// probe would log, as `{key: value}`.
    fn measure(
        &self,
        cfg: &Self::Config,
        run: &RunDir,
        step: Option<u64>,
    ) -> Result<serde_json::Map<String, serde_json::Value>, InterveneError> {
        let _ = (cfg, step);
        Err(InterveneError::Invalid(format!(
            "{}: experiment = `{}` cannot measure a checkpoint afterwards (its Paper impl has no `measure`)",
            run.file,
            Paper::name(self)
        )))
    }
    /// The paper's causal questions on the run's own evaluation data, each with
    /// a control.
    fn intervene(
        &self,
        cfg: &Self::Config,
        run: &RunDir,
        req: &Request,
    ) -> Result<Interventions, InterveneError> {
        let _ = (cfg, req);
        Err(InterveneError::Invalid(format!(
            "{}: experiment = `{}` defines no interventions (its Paper impl has no `intervene`)",
            run.file,
            Paper::name(self)
        )))
    }
}

/// A paper seen through the registry: the same, with the config erased to a TOML
/// table until [`Experiment::prepare`] parses and validates it.
pub trait Experiment: Sync + Send {
    fn name(&self) -> &'static str;
    fn citation(&self) -> &'static str;
    fn presets(&self) -> &'static [Preset];
    /// Every config key the experiment understands, with its default.
    fn default_config(&self) -> toml::Table;
    fn data_key(&self) -> Option<&'static str>;
    fn reproduce(&self) -> Vec<ReproduceItem>;
    /// [`Paper::claims`] for a run's config table (none when it does not parse).
    fn claims(&self, table: &toml::Table) -> &'static [Claim];
    /// Parses the resolved table into the typed config and validates it: the only
    /// place a config is parsed. `file` names the source in errors.
    fn prepare(&'static self, table: &toml::Table, file: &str) -> Result<Prepared, ConfigError>;
    /// [`Paper::load`] on the run's config table.
    fn load(
        &self,
        table: &toml::Table,
        run: &RunDir,
        step: Option<u64>,
    ) -> Result<Model, LoadError>;
    /// [`Paper::measure`] on the run's config table.
    fn measure(
        &self,
        table: &toml::Table,
        run: &RunDir,
        step: Option<u64>,
    ) -> Result<serde_json::Map<String, serde_json::Value>, InterveneError>;
    /// [`Paper::intervene`] on the run's config table.
    fn intervene(
        &self,
        table: &toml::Table,
        run: &RunDir,
        req: &Request,
    ) -> Result<Interventions, InterveneError>;
}

/// The run of one typed config, with the config captured.
type RunFn = dyn Fn(&mut RunCtx) -> Result<Summary, ExperimentError> + Send + Sync;

/// A typed, validated config, ready to run.
pub struct Prepared {
    run: Box<RunFn>,
    seed: u64,
    run_config: RunConfig,
}

impl Prepared {
    /// Runs the paper in `ctx`, which gets its `[run]` schedule from the typed config.
    pub fn run(&self, ctx: &mut RunCtx) -> Result<Summary, ExperimentError> {
        ctx.set_run_config(self.run_config.clone());
        (self.run)(ctx)
    }
    /// The typed config's seed (names the run folder).
    pub fn seed(&self) -> u64 {
        self.seed
    }
}

impl<P: Paper> Experiment for P {
    fn name(&self) -> &'static str {
        Paper::name(self)
    }
    fn citation(&self) -> &'static str {
        Paper::citation(self)
    }
    fn presets(&self) -> &'static [Preset] {
        Paper::presets(self)
    }
    fn default_config(&self) -> toml::Table {
        config::table_of(&P::Config::default())
    }
    fn data_key(&self) -> Option<&'static str> {
        Paper::data_key(self)
    }
    fn reproduce(&self) -> Vec<ReproduceItem> {
        Paper::reproduce(self)
    }
    fn claims(&self, table: &toml::Table) -> &'static [Claim] {
        config::typed::<P::Config>(table, "config").map_or(&[], |c| Paper::claims(self, &c))
    }
    fn prepare(&'static self, table: &toml::Table, file: &str) -> Result<Prepared, ConfigError> {
        let cfg: P::Config = config::typed(table, file)?;
        // The section every training paper shares, then the paper's own checks.
        if let Some(train) = cfg.train_config() {
            train.validate(file)?;
        }
        self.validate(&cfg)
            .map_err(|message| ConfigError::Invalid {
                file: file.to_string(),
                message,
            })?;
        Ok(Prepared {
            seed: cfg.seed(),
            run_config: cfg.run_config().clone(),
            run: Box::new(move |ctx| Paper::run(self, &cfg, ctx)),
        })
    }
    fn load(
        &self,
        table: &toml::Table,
        run: &RunDir,
        step: Option<u64>,
    ) -> Result<Model, LoadError> {
        let cfg: P::Config = config::typed(table, &run.file)?;
        Paper::load(self, &cfg, run, step)
    }
    fn measure(
        &self,
        table: &toml::Table,
        run: &RunDir,
        step: Option<u64>,
    ) -> Result<serde_json::Map<String, serde_json::Value>, InterveneError> {
        let cfg: P::Config = config::typed(table, &run.file)?;
        Paper::measure(self, &cfg, run, step)
    }
    fn intervene(
        &self,
        table: &toml::Table,
        run: &RunDir,
        req: &Request,
    ) -> Result<Interventions, InterveneError> {
        let cfg: P::Config = config::typed(table, &run.file)?;
        Paper::intervene(self, &cfg, run, req)
    }
}

/// One setting of `mechlab reproduce`: a preset, its overrides, and how many
/// seeds its claims are judged over (the preset's seed and the ones after it).
#[derive(Clone, Debug)]
pub struct ReproduceItem {
    pub preset: &'static str,
    pub overrides: Vec<String>,
    /// Seeds run by default (`reproduce --seeds N` sets every item's).
    pub seeds: u32,
}

impl ReproduceItem {
    /// One seed, the preset's own.
    pub fn new(preset: &'static str, overrides: &[&str]) -> Self {
        ReproduceItem {
            preset,
            overrides: overrides.iter().map(|s| s.to_string()).collect(),
            seeds: 1,
        }
    }

    /// Runs `n` seeds: the preset's seed and the `n − 1` after it.
    pub fn with_seeds(mut self, n: u32) -> Self {
        self.seeds = n.max(1);
        self
    }
}

/// The papers a program knows: the built-in ones plus any a downstream crate adds.
#[derive(Clone)]
pub struct Registry {
    experiments: Vec<&'static dyn Experiment>,
}

impl Registry {
    /// A registry with no paper.
    pub fn empty() -> Self {
        Registry {
            experiments: Vec::new(),
        }
    }
    /// Adds a paper (its presets come with it).
    pub fn with(mut self, e: &'static dyn Experiment) -> Self {
        self.experiments.push(e);
        self
    }
    pub fn all(&self) -> &[&'static dyn Experiment] {
        &self.experiments
    }
    pub fn find(&self, name: &str) -> Option<&'static dyn Experiment> {
        self.experiments.iter().copied().find(|e| e.name() == name)
    }
    /// Every preset, paper by paper.
    pub fn presets(&self) -> Vec<&'static Preset> {
        self.experiments.iter().flat_map(|e| e.presets()).collect()
    }
    pub fn find_preset(&self, name: &str) -> Option<&'static Preset> {
        self.presets().into_iter().find(|p| p.name == name)
    }
}
