//! Run folders: everything a run writes, and the context an experiment runs in.
//!
//! A run is a folder `runs/<name>/`:
//!
//! | file | what |
//! |---|---|
//! | `config.toml` | the resolved config (every key) |
//! | `run.json` | how the run was made: the command line (as a list of arguments) and the mechlab version |
//! | `metrics.jsonl` | one JSON object per log event |
//! | `checkpoints/step_XXXXXX.safetensors` | parameters, optimiser state and position, log-spaced then every N steps |
//! | `figures/<id>.{json,svg,png}` | each figure as data, and rendered |
//! | `summary.json` | `{"experiment", "seed", "metrics", "verdicts"}` |
//! | `report.html`, `report.md` | the report, rebuilt from the files above by `mechlab report` |
//! | `activations.safetensors` | activations recorded at the end, under TransformerLens hook names |
//! | `timing.json` | wall-clock seconds (kept out of the summary so that two runs of the same seed compare equal) |

pub mod atomic;
pub mod checkpoint;
pub mod metrics;
pub mod progress;
pub mod summary;

use crate::config::{self, ConfigError};
use metrics::MetricsLog;
use progress::{Phase, Progress};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;
use summary::Summary;
use thiserror::Error;

/// Why a run folder could not be made, opened or written.
#[derive(Debug, Error)]
pub enum RunError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{path}: {reason}")]
    Folder { path: String, reason: String },
}

impl RunError {
    /// `dir` has no `config.toml`.
    pub fn not_a_run(dir: &Path) -> Self {
        RunError::Folder {
            path: dir.display().to_string(),
            reason: "is not a run folder (no config.toml)".into(),
        }
    }
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> RunError + '_ {
    move |source| RunError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// The `[run]` section: what a run records and how often.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunConfig {
    /// Write checkpoints at all.
    pub checkpoints: bool,
    /// Log-spaced checkpoints (0, 1, 2, 4, ...) up to this step.
    pub checkpoint_log_until: u64,
    /// Then one every this many steps (0: none but the last).
    pub checkpoint_every: u64,
    /// Run the experiment's probes every this many steps (also log-spaced before
    /// it); 0 probes only at the checkpoint steps.
    pub probe_every: u64,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            checkpoints: true,
            checkpoint_log_until: 512,
            checkpoint_every: 1000,
            probe_every: 0,
        }
    }
}

impl RunConfig {
    pub fn checkpoint_at(&self, step: u64, last: u64) -> bool {
        self.checkpoints
            && checkpoint::scheduled(step, self.checkpoint_log_until, self.checkpoint_every, last)
    }

    pub fn probe_at(&self, step: u64, last: u64) -> bool {
        if self.probe_every == 0 {
            checkpoint::scheduled(step, self.checkpoint_log_until, self.checkpoint_every, last)
        } else {
            checkpoint::scheduled(step, self.probe_every, self.probe_every, last)
        }
    }
}

/// What an experiment gets to work with: its config, seed, folder and logs.
pub struct RunCtx {
    dir: PathBuf,
    config: toml::Table,
    experiment: String,
    quiet: bool,
    run_cfg: RunConfig,
    metrics: MetricsLog,
    /// The checkpoint a resumed run continues from (none: it starts over).
    resume_from: Option<PathBuf>,
    started: Instant,
    /// Test hook: behave as if Ctrl-C arrived when training reaches this step.
    pub stop_at: Option<u64>,
    /// Where the training loop reports its position, for an embedding program.
    pub progress: Option<Arc<Progress>>,
    /// The terminal's spinner for the phases around training (none when quiet).
    spinner: std::sync::Mutex<Option<indicatif::ProgressBar>>,
    /// What the caller hands the experiment besides its config (Python's batch
    /// generator for `transformer`), taken once by the experiment.
    input: Option<Box<dyn std::any::Any + Send>>,
}

impl RunCtx {
    /// Creates a fresh run folder holding `config` (resolved) and the command line.
    pub fn create(
        dir: &Path,
        config: toml::Table,
        command: &str,
        quiet: bool,
    ) -> Result<Self, RunError> {
        if dir.join("config.toml").exists() {
            return Err(RunError::Folder {
                path: dir.display().to_string(),
                reason: "already holds a run (use `mechlab resume` or another --out)".into(),
            });
        }
        for sub in ["checkpoints", "figures"] {
            std::fs::create_dir_all(dir.join(sub)).map_err(io_err(dir))?;
        }
        let text = toml::to_string(&config).expect("a TOML table serialises");
        let cfg_path = dir.join("config.toml");
        atomic::write(&cfg_path, text.as_bytes()).map_err(io_err(&cfg_path))?;
        let made = RunOrigin {
            command: command.split_whitespace().map(String::from).collect(),
            version: env!("CARGO_PKG_VERSION").to_string(),
        };
        let origin_path = dir.join("run.json");
        let text = serde_json::to_string_pretty(&made).expect("JSON serialises");
        atomic::write(&origin_path, text.as_bytes()).map_err(io_err(&origin_path))?;
        let mpath = dir.join("metrics.jsonl");
        let metrics = MetricsLog::create(&mpath).map_err(io_err(&mpath))?;
        Self::with(dir, config, quiet, metrics, None)
    }

    /// Reopens a run folder to continue it from its newest intact checkpoint.
    ///
    /// A checkpoint that does not parse or fails its digest is said so on stderr,
    /// set aside as `step_XXXXXX.safetensors.corrupt` and passed over for the one
    /// before it; with none intact (or none written: killed before step 0 was
    /// saved) the run starts over, which a seeded run makes identical. The
    /// metrics are cut back to the step actually resumed from.
    pub fn resume(dir: &Path, quiet: bool) -> Result<(Self, u64), RunError> {
        let cfg_path = dir.join("config.toml");
        if !cfg_path.exists() {
            return Err(RunError::not_a_run(dir));
        }
        let config = config::read_file(&cfg_path)?;
        let from = newest_intact(&dir.join("checkpoints"))?;
        let step = from.as_ref().map(|(s, _)| *s).unwrap_or(0);
        let mpath = dir.join("metrics.jsonl");
        let metrics = MetricsLog::resume(&mpath, step).map_err(io_err(&mpath))?;
        let ctx = Self::with(dir, config, quiet, metrics, from.map(|(_, p)| p))?;
        Ok((ctx, step))
    }

    fn with(
        dir: &Path,
        config: toml::Table,
        quiet: bool,
        metrics: MetricsLog,
        resume_from: Option<PathBuf>,
    ) -> Result<Self, RunError> {
        let experiment = config
            .get("experiment")
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string();
        Ok(RunCtx {
            dir: dir.to_path_buf(),
            config,
            experiment,
            quiet,
            // Set from the typed config by `Prepared::run` (see `set_run_config`).
            run_cfg: RunConfig::default(),
            metrics,
            resume_from,
            started: Instant::now(),
            stop_at: None,
            progress: None,
            spinner: std::sync::Mutex::new(None),
            input: None,
        })
    }

    /// Enters `phase`: tells [`RunCtx::progress`], and on a terminal (unless
    /// quiet) shows a spinner naming it; training draws its own bar instead.
    pub fn set_phase(&self, phase: Phase) {
        if let Some(p) = &self.progress {
            p.set_phase(phase);
        }
        let mut spinner = self.spinner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = spinner.take() {
            old.finish_and_clear();
        }
        if self.quiet || matches!(phase, Phase::Training | Phase::Done) {
            return;
        }
        let s = indicatif::ProgressBar::new_spinner();
        s.set_style(
            indicatif::ProgressStyle::with_template("{prefix} {spinner} {msg} ({elapsed})")
                .expect("valid template"),
        );
        s.set_prefix(self.experiment.clone());
        s.set_message(phase.name());
        s.enable_steady_tick(std::time::Duration::from_millis(120));
        *spinner = Some(s);
    }

    /// Hands the experiment something besides its config (see [`RunCtx::take_input`]).
    pub fn set_input(&mut self, input: Box<dyn std::any::Any + Send>) {
        self.input = Some(input);
    }

    /// What the caller handed over with [`RunCtx::set_input`], once.
    pub fn take_input(&mut self) -> Option<Box<dyn std::any::Any + Send>> {
        self.input.take()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn config(&self) -> &toml::Table {
        &self.config
    }
    pub fn experiment(&self) -> &str {
        &self.experiment
    }
    pub fn quiet(&self) -> bool {
        self.quiet
    }
    pub fn run_config(&self) -> &RunConfig {
        &self.run_cfg
    }
    /// The `[run]` schedule, from the typed config ([`crate::experiment::Prepared::run`]
    /// sets it; a test driving the trainer directly sets its own).
    pub fn set_run_config(&mut self, run: RunConfig) {
        self.run_cfg = run;
    }
    /// Whether training continues from a checkpoint ([`RunCtx::resume_from`]).
    pub fn resuming(&self) -> bool {
        self.resume_from.is_some()
    }
    /// The intact checkpoint a resumed run continues from.
    pub fn resume_from(&self) -> Option<&Path> {
        self.resume_from.as_deref()
    }
    pub fn metrics(&mut self) -> &mut MetricsLog {
        &mut self.metrics
    }
    pub fn checkpoint_dir(&self) -> PathBuf {
        self.dir.join("checkpoints")
    }
    pub fn figures_dir(&self) -> PathBuf {
        self.dir.join("figures")
    }

    /// Appends one event to `metrics.jsonl` (see [`MetricsLog::log`]).
    pub fn log(&mut self, event: &str, step: u64, values: &[(&str, f64)]) -> Result<(), RunError> {
        let path = self.dir.join("metrics.jsonl");
        self.metrics.log(event, step, values).map_err(io_err(&path))
    }

    /// Every event logged so far, read back from `metrics.jsonl` (for figures).
    pub fn records(&self) -> Result<Vec<metrics::Record>, RunError> {
        let path = self.dir.join("metrics.jsonl");
        metrics::read(&path).map_err(|reason| RunError::Folder {
            path: path.display().to_string(),
            reason,
        })
    }

    /// Records a figure (as JSON data; `mechlab report` renders it).
    pub fn figure(&self, fig: &mechlab_report::Figure) -> Result<(), RunError> {
        let path = self.figures_dir().join(format!("{}.json", fig.id));
        let text = serde_json::to_string_pretty(fig).expect("figures serialise");
        atomic::write(&path, text.as_bytes()).map_err(io_err(&path))
    }

    /// Writes `notes.md`: the experiment's prose for the report (settings, caveats,
    /// the paper's numbers beside ours).
    pub fn notes(&self, markdown: &str) -> Result<(), RunError> {
        let path = self.dir.join("notes.md");
        atomic::write(&path, markdown.as_bytes()).map_err(io_err(&path))
    }

    /// Saves any JSON artefact of the run (a vocabulary, a table) under `name`.
    pub fn artifact(&self, name: &str, value: &serde_json::Value) -> Result<(), RunError> {
        let path = self.dir.join(name);
        let text = serde_json::to_string_pretty(value).expect("JSON serialises");
        atomic::write(&path, text.as_bytes()).map_err(io_err(&path))
    }

    /// Records activations (TransformerLens hook names and shapes, e.g.
    /// `blocks.0.attn.hook_pattern` as `[batch, head, query_pos, key_pos]`) in
    /// `activations.safetensors`, which `mechlab export --npy` turns into `.npy`.
    pub fn record_activations(&self, tensors: &[Activation]) -> Result<(), RunError> {
        let path = self.dir.join("activations.safetensors");
        let bytes: Vec<Vec<u8>> = tensors
            .iter()
            .map(|t| t.data.iter().flat_map(|x| x.to_le_bytes()).collect())
            .collect();
        let bad = |reason: String| RunError::Folder {
            path: path.display().to_string(),
            reason,
        };
        let views = tensors
            .iter()
            .zip(&bytes)
            .map(|(t, b)| {
                safetensors::tensor::TensorView::new(safetensors::Dtype::F64, t.shape.clone(), b)
                    .map(|v| (t.name.clone(), v))
                    .map_err(|e| bad(format!("activation {}: {e}", t.name)))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let data = safetensors::serialize(views, None).map_err(|e| bad(e.to_string()))?;
        atomic::write(&path, &data).map_err(io_err(&path))
    }

    /// Writes `summary.json` and `timing.json`.
    pub fn finish(&self, summary: &Summary) -> Result<(), RunError> {
        let path = self.dir.join("summary.json");
        let text = serde_json::to_string_pretty(summary).expect("summaries serialise");
        atomic::write(&path, text.as_bytes()).map_err(io_err(&path))?;
        let tpath = self.dir.join("timing.json");
        let timing = serde_json::json!({ "seconds": self.started.elapsed().as_secs_f64(), "resumed": self.resuming() });
        atomic::write(&tpath, timing.to_string().as_bytes()).map_err(io_err(&tpath))
    }
}

/// `run.json`: how a run was made, kept as data so that reports and tools read
/// it without parsing comments.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunOrigin {
    /// The command line, one argument per element.
    pub command: Vec<String>,
    /// The mechlab version that made the run.
    pub version: String,
}

/// Reads a run's `run.json` (`None` for a folder made before it existed).
pub fn read_origin(dir: &Path) -> Option<RunOrigin> {
    let text = std::fs::read_to_string(dir.join("run.json")).ok()?;
    serde_json::from_str(&text).ok()
}

/// The newest checkpoint in `dir` that is intact, as (step, path); the unreadable
/// ones after it are reported and renamed `*.corrupt`, so that a later resume
/// does not stumble on them again and they stay for a post-mortem.
fn newest_intact(dir: &Path) -> Result<Option<(u64, PathBuf)>, RunError> {
    let all = checkpoint::list(dir);
    for (step, path) in all.iter().rev() {
        let problem = match checkpoint::verify(path) {
            Ok(meta) if meta.step == *step => {
                if step != &all.last().expect("not empty").0 {
                    eprintln!(
                        "resuming from {}, the newest intact checkpoint",
                        path.display()
                    );
                }
                return Ok(Some((*step, path.clone())));
            }
            Ok(meta) => format!(
                "{}: holds step {}, not the step {step} of its name",
                path.display(),
                meta.step
            ),
            Err(e) => e.to_string(),
        };
        let aside = path.with_extension("safetensors.corrupt");
        std::fs::rename(path, &aside).map_err(io_err(path))?;
        eprintln!(
            "warning: skipping an unreadable checkpoint: {problem} (kept as {})",
            aside.display()
        );
    }
    if all.is_empty() {
        eprintln!(
            "no checkpoint in {}; the run starts over from step 0",
            dir.display()
        );
    } else {
        eprintln!("warning: no intact checkpoint left; the run starts over from step 0");
    }
    Ok(None)
}

/// One recorded activation tensor (row-major `f64`).
#[derive(Clone, Debug, PartialEq)]
pub struct Activation {
    pub name: String,
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

/// One layer's attention over one sequence, `[n_heads, n_q, n_k]` row-major,
/// for [`attention_record`].
pub struct LayerPattern {
    pub layer: usize,
    pub n_heads: usize,
    pub pattern: Vec<f64>,
}

/// The activations and the report's attention viewer of one sequence of
/// `tokens` (self-attention): each layer's pattern becomes the activation
/// `blocks.{layer}.attn.hook_pattern` `[1, n_heads, T, T]`, and the viewer
/// (figure `id`) shows every head of every layer, citing that file. Record the
/// activations with [`RunCtx::record_activations`] and the figure with
/// [`RunCtx::figure`].
pub fn attention_record(
    id: &str,
    title: &str,
    tokens: Vec<String>,
    layers: &[LayerPattern],
) -> (Vec<Activation>, mechlab_report::Figure) {
    let t = tokens.len();
    let mut heads = Vec::new();
    let mut pattern = Vec::new();
    let mut acts = Vec::new();
    for l in layers {
        debug_assert_eq!(l.pattern.len(), l.n_heads * t * t, "layer {}", l.layer);
        heads.extend((0..l.n_heads).map(|h| mechlab_report::AttentionHead::of_layer(l.layer, h)));
        pattern.extend_from_slice(&l.pattern);
        acts.push(Activation {
            name: format!("blocks.{}.attn.hook_pattern", l.layer),
            shape: vec![1, l.n_heads, t, t],
            data: l.pattern.clone(),
        });
    }
    let fig = mechlab_report::Figure::attention(id, title, tokens, heads, pattern)
        .with_source("activations.safetensors", 0);
    (acts, fig)
}

/// Reads a run's `summary.json`.
pub fn read_summary(dir: &Path) -> Result<Summary, RunError> {
    let path = dir.join("summary.json");
    let text = std::fs::read_to_string(&path).map_err(io_err(&path))?;
    serde_json::from_str(&text).map_err(|e| RunError::Folder {
        path: path.display().to_string(),
        reason: format!("malformed summary: {e}"),
    })
}
