//! A sweep folder never loses results: it records what it is a sweep of, and a
//! second sweep into it either continues the first or is refused.
//!
//! Every sweep (local, `--shard`, or `--slurm`) writes `sweep.json` ([`Plan`]:
//! the source, overrides, grid, seeds, local shard, and the mechlab that wrote
//! it) before any run starts. [`open`] compares a new sweep with that record:
//!
//! - **the same sweep** continues the folder: a finished run (its `summary.json`
//!   is there) is read, not rerun; a run cut short resumes from its newest
//!   checkpoint (`run_or_resume`); a failed one runs again;
//! - **another sweep** (any of those fields differs, including the content of a
//!   config file, whose copy the folder keeps) is refused before anything in the
//!   folder is touched, with each difference named;
//! - a folder holding runs but no `sweep.json` (an older mechlab's) is refused
//!   too, since nothing says which sweep made them.
//!
//! `replace` (the CLI's `--replace`, Python's `replace=True`) deletes what mechlab
//! wrote there (the entries in [`MADE_HERE`] and the config copy) and starts
//! over; files a user put in the folder stay. Resuming a single run clears only
//! mechlab's files from its folder ([`RUN_FILES`]), for the same reason.
//!
//! The shard count of a Slurm sweep is not part of the comparison: resubmitting
//! with another `--shards` only re-deals the same runs.

use super::cluster::{Plan, PlannedRun, Writer, PLAN_FILE};
use super::sweep::{self, SweepError, SweepSpec};
use super::sweep_phase::row_metrics;
use super::{resume, run};
use crate::experiment::Registry;
use crate::run::{atomic, checkpoint, io_err, read_summary};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What a sweep writes at the top of its folder (the config copy aside).
pub const MADE_HERE: &[&str] = &[
    "runs",
    "index.csv",
    "summary.csv",
    "summary.json",
    "failed.csv",
    PLAN_FILE,
    "shards",
    "logs",
    "slurm",
];

/// What a run writes into its folder.
pub const RUN_FILES: &[&str] = &[
    "config.toml",
    "run.json",
    "metrics.jsonl",
    "timing.json",
    "summary.json",
    "notes.md",
    "report.md",
    "report.html",
    "activations.safetensors",
    "failed.json",
    "figures",
    "checkpoints",
];

/// Records `spec` as the sweep `out` holds (or checks it is the one already
/// recorded) and returns its plan; see the module doc. Every run's config is
/// resolved first, so a bad key fails before the folder is touched.
pub fn open(
    reg: &Registry,
    spec: &SweepSpec,
    out: &Path,
    shards: usize,
    writer: Writer,
    replace: bool,
) -> Result<Plan, SweepError> {
    let keys: Vec<String> = spec.grid.iter().map(|(k, _)| k.clone()).collect();
    let all = sweep::plan(&spec.grid, &spec.seeds);
    for (i, (_, vals, seed)) in all.iter().enumerate() {
        if spec.shard.is_none_or(|(s, n)| i % n == s) {
            sweep::resolve_run(reg, spec, &keys, vals, *seed)?;
        }
    }
    let is_preset = reg.find_preset(&spec.source).is_some();
    let file_name = if is_preset {
        None
    } else {
        Some(
            Path::new(&spec.source)
                .file_name()
                .ok_or_else(|| SweepError::Arg(format!("{}: not a config file", spec.source)))?
                .to_owned(),
        )
    };

    let recorded = out.join(PLAN_FILE);
    let refuse = |reason: String| SweepError::Folder {
        path: out.display().to_string(),
        reason: format!(
            "{reason}; continuing it would mix two sweeps' results. Choose another output \
             folder, or pass --replace (Python: replace=True) to delete this folder's sweep \
             results and start over"
        ),
    };
    if replace {
        clear_sweep(out)?;
    } else if recorded.is_file() {
        let old = read_plan(out)?;
        let diffs = differences(reg, &old, spec, writer.version.as_str());
        if !diffs.is_empty() {
            return Err(refuse(format!(
                "holds another sweep ({} records it): {}",
                recorded.display(),
                diffs.join("; ")
            )));
        }
    } else if out.join("runs").exists() || out.join("index.csv").exists() {
        return Err(refuse(format!(
            "holds sweep results but no {PLAN_FILE} saying which sweep made them \
             (an older mechlab's, or copied by hand)"
        )));
    }

    std::fs::create_dir_all(out.join("runs")).map_err(io_err(out))?;
    let out = out.canonicalize().map_err(io_err(out))?;
    let source = match file_name {
        None => spec.source.clone(),
        Some(name) => {
            // The sweep reads its config from this copy, so a later edit to the
            // user's file cannot change the runs still to come.
            let from = Path::new(&spec.source);
            let to = out.join(name);
            if from.canonicalize().ok() != Some(to.clone()) {
                let text = std::fs::read(from).map_err(io_err(from))?;
                atomic::write(&to, &text).map_err(io_err(&to))?;
            }
            to.display().to_string()
        }
    };
    let plan = Plan {
        source,
        overrides: spec.overrides.clone(),
        grid: spec.grid.clone(),
        seeds: spec.seeds.clone(),
        shards,
        shard: spec.shard,
        mechlab: writer,
    };
    plan.write(&out).map_err(folder_err)?;
    Ok(plan)
}

fn folder_err(e: super::cluster::ClusterError) -> SweepError {
    match e {
        super::cluster::ClusterError::Plan { path, reason } => SweepError::Folder { path, reason },
        super::cluster::ClusterError::Sweep(e) => e,
        e => SweepError::Arg(e.to_string()),
    }
}

fn read_plan(out: &Path) -> Result<Plan, SweepError> {
    Plan::read(out).map_err(folder_err)
}

/// Each way `spec` (run by mechlab `version`) is not the sweep `old` records, in
/// words; empty when it is the same sweep.
fn differences(reg: &Registry, old: &Plan, spec: &SweepSpec, version: &str) -> Vec<String> {
    let mut out = Vec::new();
    let recorded_is_preset = reg.find_preset(&old.source).is_some();
    let new_is_preset = reg.find_preset(&spec.source).is_some();
    match (recorded_is_preset, new_is_preset) {
        (true, true) if old.source != spec.source => out.push(format!(
            "the preset was {}, now {}",
            old.source, spec.source
        )),
        (true, true) => {}
        (true, false) => out.push(format!(
            "the source was preset {}, now file {}",
            old.source, spec.source
        )),
        (false, true) => out.push(format!(
            "the source was file {}, now preset {}",
            old.source, spec.source
        )),
        (false, false) => {
            let (a, b) = (Path::new(&old.source), Path::new(&spec.source));
            if a.file_name() != b.file_name() {
                out.push(format!(
                    "the config file was {}, now {}",
                    old.source, spec.source
                ));
            } else {
                match (std::fs::read(a), std::fs::read(b)) {
                    (Ok(x), Ok(y)) if x == y => {}
                    (Ok(_), Ok(_)) => out.push(format!(
                        "{} differs from the copy this sweep ran from ({})",
                        spec.source, old.source
                    )),
                    (Err(e), _) => out.push(format!(
                        "the config copy {} cannot be read ({e})",
                        old.source
                    )),
                    (_, Err(e)) => out.push(format!("{} cannot be read ({e})", spec.source)),
                }
            }
        }
    }
    if old.overrides != spec.overrides {
        out.push(format!(
            "--set was {:?}, now {:?}",
            old.overrides, spec.overrides
        ));
    }
    if old.grid != spec.grid {
        let show = |g: &[(String, Vec<String>)]| {
            g.iter()
                .map(|(k, v)| format!("{k}={}", v.join(",")))
                .collect::<Vec<_>>()
                .join(" ")
        };
        out.push(format!(
            "--grid was `{}`, now `{}`",
            show(&old.grid),
            show(&spec.grid)
        ));
    }
    if old.seeds != spec.seeds {
        out.push(format!("--seeds was {:?}, now {:?}", old.seeds, spec.seeds));
    }
    if old.shard != spec.shard {
        let show = |s: Option<(usize, usize)>| match s {
            Some((i, n)) => format!("{i}/{n}"),
            None => "none".into(),
        };
        out.push(format!(
            "--shard was {}, now {}",
            show(old.shard),
            show(spec.shard)
        ));
    }
    if old.mechlab.version != version {
        out.push(format!(
            "it was run by mechlab {}, this is {version}",
            old.mechlab.version
        ));
    }
    out
}

/// Deletes what a sweep wrote into `out` (see [`MADE_HERE`]) and the config copy
/// its `sweep.json` names; anything else stays.
fn clear_sweep(out: &Path) -> Result<(), SweepError> {
    let mut doomed: Vec<PathBuf> = MADE_HERE.iter().map(|n| out.join(n)).collect();
    if let Ok(old) = read_plan(out) {
        let copy = PathBuf::from(&old.source);
        if copy.parent().and_then(|p| p.canonicalize().ok()) == out.canonicalize().ok() {
            doomed.push(copy);
        }
    }
    remove_all(&doomed)
}

fn remove_all(paths: &[PathBuf]) -> Result<(), SweepError> {
    for p in paths {
        let res = if p.is_dir() {
            std::fs::remove_dir_all(p)
        } else if p.exists() {
            std::fs::remove_file(p)
        } else {
            Ok(())
        };
        res.map_err(io_err(p))?;
    }
    Ok(())
}

/// One planned run: its summary's metrics if it finished before, else resumed
/// from its newest checkpoint, else run from scratch (a folder it cannot resume
/// from is cleared of mechlab's files first, a user's files stay).
pub(crate) fn run_or_resume(
    reg: &Registry,
    spec: &SweepSpec,
    keys: &[String],
    r: &PlannedRun,
    dir: &Path,
    command: &str,
) -> Result<BTreeMap<String, f64>, SweepError> {
    let _ = std::fs::remove_file(dir.join(super::cluster::FAILED_FILE));
    if dir.join("summary.json").is_file() {
        // A kill between the summary and the report leaves the report to rebuild.
        if !dir.join("report.html").is_file() {
            super::report::build(reg, dir)?;
        }
        return Ok(row_metrics(&read_summary(dir)?));
    }
    let started =
        dir.join("config.toml").is_file() && !checkpoint::list(&dir.join("checkpoints")).is_empty();
    if started {
        match resume(reg, dir, true) {
            Ok(s) => {
                eprintln!("{}: resumed from its checkpoints", r.id());
                return Ok(row_metrics(&s));
            }
            // A checkpoint cut short by the kill: the run is deterministic, so
            // starting over gives the same result, only later.
            Err(e) => eprintln!("{}: cannot resume ({e}); starting over", r.id()),
        }
    }
    remove_all(&RUN_FILES.iter().map(|n| dir.join(n)).collect::<Vec<_>>())?;
    let resolved = sweep::resolve_run(reg, spec, keys, &r.values, r.seed)?;
    Ok(row_metrics(&run(reg, &resolved, dir, command, true)?))
}
