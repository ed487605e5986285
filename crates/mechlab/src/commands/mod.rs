//! What the CLI calls: resolve a config, run, resume, report, sweep, export,
//! reproduce, and encode texts with a pretrained model. Each returns typed errors; only `main.rs` turns them into exit codes.

pub mod cluster;
pub mod encode;
pub mod export;
pub mod intervene;
pub mod patch;
pub mod report;
pub mod reproduce;
mod reproduce_report;
pub mod slurm;
pub mod sweep;
pub mod sweep_folder;
pub mod sweep_phase;

use crate::config::{self, ConfigError};
use crate::experiment::{Experiment, ExperimentError, Prepared, Registry};
use crate::run::progress::{Phase, Progress};
use crate::run::summary::Summary;
use crate::run::{RunCtx, RunError};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A config resolved from a preset or file, with overrides applied.
pub struct Resolved {
    pub table: toml::Table,
    pub experiment: &'static dyn Experiment,
    /// The typed, validated config, ready to run.
    pub prepared: Prepared,
    /// The preset name or the file's stem: the default run name.
    pub label: String,
}

/// Resolves `source` (a preset name or a TOML file) with `--set` overrides and an
/// optional seed.
pub fn resolve(
    reg: &Registry,
    source: &str,
    overrides: &[String],
    seed: Option<u64>,
) -> Result<Resolved, ConfigError> {
    let (file_table, file_label, label) = if let Some(p) = reg.find_preset(source) {
        (
            config::parse(p.text, &format!("preset {}", p.name))?,
            format!("preset {}", p.name),
            p.name.to_string(),
        )
    } else if Path::new(source).is_file() {
        let path = Path::new(source);
        (
            config::read_file(path)?,
            path.display().to_string(),
            path.file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "run".into()),
        )
    } else {
        return Err(ConfigError::UnknownSource {
            name: source.to_string(),
            suggestion: config::closest(source, reg.presets().iter().map(|p| p.name)),
        });
    };
    let names = || {
        reg.all()
            .iter()
            .map(|e| e.name())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let exp_name = match file_table.get("experiment") {
        Some(toml::Value::String(s)) => s.as_str(),
        Some(v) => {
            return Err(ConfigError::Invalid {
                file: file_label,
                message: format!(
                    "`experiment` must be a paper's name in quotes (one of: {}), got {v}",
                    names()
                ),
            })
        }
        None => {
            return Err(ConfigError::Invalid {
                file: file_label,
                message: format!(
                    "no `experiment` key: the first line says which paper the config is \
                     for, e.g. experiment = \"selection\" (one of: {})",
                    names()
                ),
            })
        }
    };
    let experiment = reg
        .find(exp_name)
        .ok_or_else(|| ConfigError::UnknownExperiment {
            file: file_label.clone(),
            name: exp_name.to_string(),
            suggestion: config::closest(exp_name, reg.all().iter().map(|e| e.name())),
        })?;
    let mut table = experiment.default_config();
    config::overlay(&mut table, &file_table, &file_label)?;
    for o in overrides {
        config::apply_override(&mut table, o)?;
    }
    if let Some(seed) = seed {
        table.insert("seed".into(), toml::Value::Integer(seed as i64));
    }
    // Parse and validate once, now, before any folder is made.
    let prepared = experiment.prepare(&table, &file_label)?;
    Ok(Resolved {
        table,
        experiment,
        prepared,
        label,
    })
}

/// A run's folder: `--out` if given, else `runs/<label>-s<seed>`, made unique with a
/// numeric suffix.
pub fn run_dir(out: Option<&Path>, label: &str, seed: u64) -> PathBuf {
    if let Some(o) = out {
        return o.to_path_buf();
    }
    let base = PathBuf::from("runs").join(format!("{label}-s{seed}"));
    if !base.exists() {
        return base;
    }
    (2..)
        .map(|i| PathBuf::from("runs").join(format!("{label}-s{seed}-{i}")))
        .find(|p| !p.exists())
        .expect("an unused name exists")
}

/// Runs a resolved config into `dir` and builds its report.
pub fn run(
    reg: &Registry,
    resolved: &Resolved,
    dir: &Path,
    command: &str,
    quiet: bool,
) -> Result<Summary, ExperimentError> {
    run_with_progress(reg, resolved, dir, command, quiet, None)
}

/// [`run`], reporting the training steps done into `progress` as it goes.
pub fn run_with_progress(
    reg: &Registry,
    resolved: &Resolved,
    dir: &Path,
    command: &str,
    quiet: bool,
    progress: Option<Arc<Progress>>,
) -> Result<Summary, ExperimentError> {
    run_with_input(reg, resolved, dir, command, quiet, progress, None)
}

/// Something a caller hands the experiment besides its config
/// ([`RunCtx::set_input`]: Python's batch generator).
pub type Input = Option<Box<dyn std::any::Any + Send>>;

/// [`run_with_progress`], handing the experiment `input`.
pub fn run_with_input(
    reg: &Registry,
    resolved: &Resolved,
    dir: &Path,
    command: &str,
    quiet: bool,
    progress: Option<Arc<Progress>>,
    input: Input,
) -> Result<Summary, ExperimentError> {
    let mut ctx = RunCtx::create(dir, resolved.table.clone(), command, quiet)?;
    ctx.progress = progress;
    if let Some(i) = input {
        ctx.set_input(i);
    }
    ctx.set_phase(Phase::Setup);
    tracing::info!(run = %dir.display(), experiment = resolved.experiment.name(), "run started");
    let summary = resolved.prepared.run(&mut ctx)?;
    tracing::info!(run = %dir.display(), pass = summary.all_pass(), "run finished");
    finish(reg, &ctx, &summary)?;
    Ok(summary)
}

/// The summary, figures and report of a run that has measured everything.
fn finish(reg: &Registry, ctx: &RunCtx, summary: &Summary) -> Result<(), ExperimentError> {
    ctx.set_phase(Phase::Report);
    ctx.finish(summary)?;
    report::build(reg, ctx.dir())?;
    ctx.set_phase(Phase::Done);
    Ok(())
}

/// Continues an interrupted run from its latest checkpoint, then builds its report.
pub fn resume(reg: &Registry, dir: &Path, quiet: bool) -> Result<Summary, ExperimentError> {
    resume_with_progress(reg, dir, quiet, None)
}

/// [`resume`], reporting its phases and steps (from the step it resumes at) into
/// `progress`.
pub fn resume_with_progress(
    reg: &Registry,
    dir: &Path,
    quiet: bool,
    progress: Option<Arc<Progress>>,
) -> Result<Summary, ExperimentError> {
    resume_with_input(reg, dir, quiet, progress, None)
}

/// [`resume_with_progress`], handing the experiment `input`.
pub fn resume_with_input(
    reg: &Registry,
    dir: &Path,
    quiet: bool,
    progress: Option<Arc<Progress>>,
    input: Input,
) -> Result<Summary, ExperimentError> {
    // The whole config is parsed and checked before the folder is touched
    // (RunCtx::resume sets corrupt checkpoints aside and cuts the metrics back).
    let cfg_path = dir.join("config.toml");
    let file = cfg_path.display().to_string();
    if !cfg_path.exists() {
        return Err(RunError::not_a_run(dir).into());
    }
    let table = config::read_file(&cfg_path)?;
    let name = table
        .get("experiment")
        .and_then(|v| v.as_str())
        .unwrap_or_default();
    let exp = reg
        .find(name)
        .ok_or_else(|| ConfigError::UnknownExperiment {
            file: file.clone(),
            name: name.to_string(),
            suggestion: None,
        })?;
    let prepared = exp.prepare(&table, &file)?;
    let (mut ctx, _) = RunCtx::resume(dir, quiet)?;
    ctx.progress = progress;
    if let Some(i) = input {
        ctx.set_input(i);
    }
    ctx.set_phase(Phase::Setup);
    let name = ctx.experiment().to_string();
    tracing::info!(run = %dir.display(), experiment = %name, "resuming");
    let summary = prepared.run(&mut ctx)?;
    finish(reg, &ctx, &summary)?;
    Ok(summary)
}

/// `(name, experiment, description)` of every preset.
pub fn list(reg: &Registry) -> Vec<(String, String, String)> {
    reg.presets()
        .into_iter()
        .map(|p| (p.name.to_string(), p.experiment(), p.description()))
        .collect()
}
