//! Sweeps on a cluster: the plan a sweep folder keeps, and the three steps a job
//! scheduler runs from it.
//!
//! `mechlab sweep --slurm` writes `sweep.json` (the plan: source, overrides, grid,
//! seeds, number of shards, and the mechlab binary and version that wrote it) into
//! the sweep folder. Each array task then runs [`run_shard`] (`mechlab
//! sweep-shard`): the runs whose index is its shard modulo the shard count, into
//! the same `runs/p<point>-s<seed>/` folders an unsharded sweep uses. A run that a
//! killed or requeued attempt left unfinished resumes from its latest checkpoint,
//! so the result is bit-identical to an uninterrupted run. [`merge_sweep`]
//! (`mechlab sweep-merge`) reads every planned run's folder and writes the
//! `index.csv`, `summary.csv` and `summary.json` an unsharded sweep writes, plus
//! `failed.csv` naming each failed or missing run and the log of the task that
//! owned it. [`status`] counts done, running, pending and failed runs for
//! `mechlab sweep-status`.

use super::sweep::{self, Row, SweepError, SweepSpec, MISSING};
use super::sweep_folder;
use super::sweep_phase::row_metrics;
use crate::experiment::Registry;
// Through `super`, so this file does not name where experiments live.
use super::ExperimentError;
use crate::run::{atomic, io_err, read_summary, RunError};
use crate::train::TrainError;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// The plan file in a sweep folder.
pub const PLAN_FILE: &str = "sweep.json";
/// Where a task records why a run failed (in the run's folder).
pub const FAILED_FILE: &str = "failed.json";

/// Why a cluster sweep step could not run.
#[derive(Debug, Error)]
pub enum ClusterError {
    #[error(transparent)]
    Sweep(#[from] SweepError),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error(transparent)]
    Experiment(#[from] ExperimentError),
    #[error("{path}: {reason}")]
    Plan { path: String, reason: String },
    #[error("{0}")]
    Arg(String),
    #[error("`{command}`: {reason}")]
    Slurm { command: String, reason: String },
}

/// The binary that planned a sweep: the array tasks run exactly this one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Writer {
    pub binary: String,
    pub version: String,
}

/// What `sweep.json` holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// A preset name, or the absolute path of the config file's copy in the folder.
    pub source: String,
    pub overrides: Vec<String>,
    pub grid: Vec<(String, Vec<String>)>,
    pub seeds: Vec<u64>,
    pub shards: usize,
    /// A local `--shard i/n`: the folder holds only that slice's runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<(usize, usize)>,
    pub mechlab: Writer,
}

/// One planned run.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedRun {
    pub index: usize,
    pub point: usize,
    pub values: Vec<String>,
    pub seed: u64,
    pub shard: usize,
}

impl PlannedRun {
    pub fn id(&self) -> String {
        format!("p{}-s{}", self.point, self.seed)
    }
    pub fn dir(&self, sweep: &Path) -> PathBuf {
        sweep.join("runs").join(self.id())
    }
}

impl Plan {
    pub fn spec(&self) -> SweepSpec {
        SweepSpec {
            source: self.source.clone(),
            overrides: self.overrides.clone(),
            grid: self.grid.clone(),
            seeds: self.seeds.clone(),
            shard: self.shard,
        }
    }

    pub fn keys(&self) -> Vec<String> {
        self.grid.iter().map(|(k, _)| k.clone()).collect()
    }

    /// Every run the folder holds (all, or a local `--shard`'s slice), in the
    /// order shards split.
    pub fn runs(&self) -> Vec<PlannedRun> {
        sweep::plan(&self.grid, &self.seeds)
            .into_iter()
            .enumerate()
            .filter(|(i, _)| self.shard.is_none_or(|(s, n)| i % n == s))
            .map(|(index, (point, values, seed))| PlannedRun {
                index,
                point,
                values,
                seed,
                shard: index % self.shards,
            })
            .collect()
    }

    pub fn read(dir: &Path) -> Result<Plan, ClusterError> {
        let path = dir.join(PLAN_FILE);
        let bad = |reason: String| ClusterError::Plan {
            path: path.display().to_string(),
            reason,
        };
        let text = std::fs::read_to_string(&path)
            .map_err(|e| bad(format!("{e} (is this a sweep folder?)")))?;
        let plan: Plan = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        if plan.shards == 0 {
            return Err(bad("shards must be at least 1".into()));
        }
        Ok(plan)
    }

    pub(crate) fn write(&self, dir: &Path) -> Result<(), ClusterError> {
        let path = dir.join(PLAN_FILE);
        let text = serde_json::to_string_pretty(self).expect("a plan serialises");
        atomic::write(&path, text.as_bytes()).map_err(io_err(&path))?;
        Ok(())
    }
}

/// Makes the sweep folder for a cluster run: checks every run's config resolves,
/// records the sweep (see [`super::sweep_folder`]: the same sweep again continues
/// the folder, another is refused unless `replace`) and makes the task folders. `shards` defaults
/// to one per run.
pub fn prepare(
    reg: &Registry,
    spec: &SweepSpec,
    out: &Path,
    shards: Option<usize>,
    mechlab: Writer,
    replace: bool,
) -> Result<Plan, ClusterError> {
    let all = sweep::plan(&spec.grid, &spec.seeds);
    let shards = shards.unwrap_or(all.len());
    if shards == 0 || shards > all.len() {
        return Err(ClusterError::Arg(format!(
            "--shards {shards}: expected 1 to {} (the number of runs)",
            all.len()
        )));
    }
    let plan = sweep_folder::open(reg, spec, out, shards, mechlab, replace)?;
    for sub in ["logs", "slurm", "shards"] {
        let d = out.join(sub);
        std::fs::create_dir_all(&d).map_err(io_err(&d))?;
    }
    Ok(plan)
}

/// The log file of the running array task, from Slurm's environment (the array
/// script writes `logs/%A_%a.out`); `None` outside Slurm.
pub fn task_log(sweep: &Path) -> Option<PathBuf> {
    let job = std::env::var("SLURM_ARRAY_JOB_ID").ok()?;
    let task = std::env::var("SLURM_ARRAY_TASK_ID").ok()?;
    Some(sweep.join("logs").join(format!("{job}_{task}.out")))
}

/// What a task records about itself in `shards/<i>.json`, for the merge step's
/// report and `sweep-status`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ShardRecord {
    pub shard: usize,
    pub shards: usize,
    /// The array job id, when run by Slurm.
    pub job: Option<String>,
    pub log: Option<String>,
    /// How many times Slurm restarted the task (requeues).
    pub restarts: u64,
}

fn shard_record_path(sweep: &Path, shard: usize) -> PathBuf {
    sweep.join("shards").join(format!("{shard}.json"))
}

fn read_shard_record(sweep: &Path, shard: usize) -> Option<ShardRecord> {
    let text = std::fs::read_to_string(shard_record_path(sweep, shard)).ok()?;
    serde_json::from_str(&text).ok()
}

/// Why a run failed, as its task recorded it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
struct Failure {
    error: String,
    log: Option<String>,
}

/// Runs shard `i` of `n` of the sweep in `sweep` with `jobs` runs at a time: skips
/// finished runs, resumes started ones from their checkpoints, runs the rest.
/// Returns the shard's rows; a run's error is recorded in its folder
/// (`failed.json`, with this task's log), not returned.
pub fn run_shard(
    reg: &Registry,
    sweep: &Path,
    (i, n): (usize, usize),
    jobs: usize,
    command: &str,
) -> Result<Vec<Row>, ClusterError> {
    // Absolute, so the logs and failures it records name files from anywhere.
    let sweep = &sweep.canonicalize().map_err(io_err(sweep))?;
    let plan = Plan::read(sweep)?;
    if n != plan.shards {
        return Err(ClusterError::Arg(format!(
            "--shard {i}/{n}: {} plans {} shards (an array resubmitted with fewer tasks \
             sees another count: resubmit slurm/array.sbatch whole, finished runs are skipped, \
             or run `mechlab sweep-shard {} --shard {i}/{}` by hand)",
            sweep.join(PLAN_FILE).display(),
            plan.shards,
            sweep.display(),
            plan.shards
        )));
    }
    let log = task_log(sweep);
    let record = ShardRecord {
        shard: i,
        shards: n,
        job: std::env::var("SLURM_ARRAY_JOB_ID").ok(),
        log: log.as_ref().map(|p| p.display().to_string()),
        restarts: std::env::var("SLURM_RESTART_COUNT")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
    };
    let rpath = shard_record_path(sweep, i);
    std::fs::create_dir_all(sweep.join("shards")).map_err(io_err(sweep))?;
    let text = serde_json::to_string_pretty(&record).expect("serialises");
    atomic::write(&rpath, text.as_bytes()).map_err(io_err(&rpath))?;

    let spec = plan.spec();
    let keys = plan.keys();
    let mine: Vec<PlannedRun> = plan.runs().into_iter().filter(|r| r.shard == i).collect();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(jobs.max(1))
        .build()
        .map_err(|e| ClusterError::Arg(format!("thread pool: {e}")))?;
    let rows = pool.install(|| {
        mine.par_iter()
            .map(|r| {
                let dir = r.dir(sweep);
                let (status, metrics) =
                    match sweep_folder::run_or_resume(reg, &spec, &keys, r, &dir, command) {
                        Ok(m) => ("ok".to_string(), m),
                        // Ctrl-C wrote a checkpoint: the run is unfinished, not failed,
                        // and the next attempt resumes it.
                        Err(
                            e @ SweepError::Experiment(ExperimentError::Train(
                                TrainError::Interrupted { .. },
                            )),
                        ) => (format!("error: {e}"), BTreeMap::new()),
                        Err(e) => {
                            let failure = Failure {
                                error: e.to_string(),
                                log: record.log.clone(),
                            };
                            let p = dir.join(FAILED_FILE);
                            let text = serde_json::to_string_pretty(&failure).expect("serialises");
                            if let Err(we) = std::fs::create_dir_all(&dir)
                                .and_then(|_| atomic::write(&p, text.as_bytes()))
                            {
                                eprintln!("{}: could not record the failure: {we}", p.display());
                            }
                            eprintln!("{}: error: {e}", r.id());
                            (format!("error: {e}"), BTreeMap::new())
                        }
                    };
                Row {
                    point: r.point,
                    seed: r.seed,
                    values: r.values.clone(),
                    status,
                    metrics,
                }
            })
            .collect()
    });
    Ok(rows)
}

/// A planned run that did not finish, as the merge step reports it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Problem {
    pub run: String,
    pub shard: usize,
    /// `error: ...` or `missing`.
    pub status: String,
    /// The log of the task that owned it, when known.
    pub log: Option<String>,
}

/// What the merge step wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct MergeReport {
    pub rows: Vec<Row>,
    pub problems: Vec<Problem>,
}

/// Reads every planned run's folder and writes the sweep's `index.csv`,
/// `summary.csv` and `summary.json` (failed and missing runs counted, not averaged
/// over) and `failed.csv` (one line per unfinished run with its task's log).
pub fn merge_sweep(sweep: &Path) -> Result<MergeReport, ClusterError> {
    let plan = Plan::read(sweep)?;
    let mut rows = Vec::new();
    let mut problems = Vec::new();
    for r in plan.runs() {
        let dir = r.dir(sweep);
        let (status, metrics, log) = if dir.join("summary.json").is_file() {
            ("ok".to_string(), row_metrics(&read_summary(&dir)?), None)
        } else if let Some(f) = read_failure(&dir) {
            (format!("error: {}", f.error), BTreeMap::new(), f.log)
        } else {
            let log = read_shard_record(sweep, r.shard).and_then(|s| s.log);
            (MISSING.to_string(), BTreeMap::new(), log)
        };
        if status != "ok" {
            problems.push(Problem {
                run: r.id(),
                shard: r.shard,
                status: status.clone(),
                log,
            });
        }
        rows.push(Row {
            point: r.point,
            seed: r.seed,
            values: r.values,
            status,
            metrics,
        });
    }
    sweep::write_all(sweep, &plan.keys(), &rows)?;
    let mut w = csv::Writer::from_writer(Vec::new());
    let path = sweep.join("failed.csv");
    let csv_err = |e: csv::Error| ClusterError::Plan {
        path: path.display().to_string(),
        reason: e.to_string(),
    };
    w.write_record(["run", "shard", "status", "log"])
        .map_err(csv_err)?;
    for p in &problems {
        let shard = p.shard.to_string();
        let log = p.log.clone().unwrap_or_default();
        w.write_record([
            p.run.as_str(),
            shard.as_str(),
            p.status.as_str(),
            log.as_str(),
        ])
        .map_err(csv_err)?;
    }
    let bytes = w
        .into_inner()
        .map_err(|e| ClusterError::Arg(e.to_string()))?;
    atomic::write(&path, &bytes).map_err(io_err(&path))?;
    Ok(MergeReport { rows, problems })
}

fn read_failure(dir: &Path) -> Option<Failure> {
    let text = std::fs::read_to_string(dir.join(FAILED_FILE)).ok()?;
    serde_json::from_str(&text).ok()
}

/// How the runs of a sweep stand.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Status {
    pub planned: usize,
    pub done: usize,
    pub running: usize,
    pub pending: usize,
    pub failed: usize,
    /// `(run, why, log)` of each failed run.
    pub failures: Vec<(String, String, Option<String>)>,
}

/// A shard's state as the scheduler reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskState {
    Running,
    Pending,
    /// Ended (completed, failed, cancelled, timed out...) and no longer queued.
    Ended,
}

/// Counts the sweep's runs. `tasks` is the scheduler's view, shard -> state, when
/// there is one: then a run that is neither done nor in a queued task has failed
/// (its task ended without finishing it). Without it, an unfinished run with a
/// folder counts as running and one without as pending.
pub fn status(
    sweep: &Path,
    tasks: Option<&BTreeMap<usize, TaskState>>,
) -> Result<Status, ClusterError> {
    let plan = Plan::read(sweep)?;
    let mut s = Status::default();
    for r in plan.runs() {
        s.planned += 1;
        let dir = r.dir(sweep);
        if dir.join("summary.json").is_file() {
            s.done += 1;
            continue;
        }
        let queued = tasks.map(|t| t.get(&r.shard).copied().unwrap_or(TaskState::Ended));
        match (queued, read_failure(&dir)) {
            (Some(TaskState::Running), _) => s.running += 1,
            (Some(TaskState::Pending), _) => s.pending += 1,
            (_, Some(f)) => {
                s.failed += 1;
                s.failures
                    .push((r.id(), format!("error: {}", f.error), f.log));
            }
            (Some(TaskState::Ended), None) => {
                s.failed += 1;
                let log = read_shard_record(sweep, r.shard).and_then(|x| x.log);
                s.failures
                    .push((r.id(), "its task ended before it finished".into(), log));
            }
            (None, None) if dir.exists() => s.running += 1,
            (None, None) => s.pending += 1,
        }
    }
    Ok(s)
}
