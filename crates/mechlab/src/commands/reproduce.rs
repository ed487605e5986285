//! `mechlab reproduce [<paper>...]`: every registered paper experiment at its
//! default scale, over its seeds, and one combined report that judges each claim
//! by its rule.
//!
//! Each reproduce item is a setting (a preset and its overrides) run on
//! [`ReproduceItem::seeds`] seeds, each into its own run folder: `<out>/<setting>/`
//! for the preset's seed and `<out>/<setting>+seed=<s>/` for the others. Every
//! claim of a setting is then judged over its seeds ([`crate::claims`]); the
//! combined `report.html`, `report.md` and `summary.json` open with the claims
//! per paper (what held, what failed and why, the findings with their evidence),
//! then one row per claim with its rate, rule and per-seed values, and keep each
//! run's verdicts and figures folded below.

use super::reproduce_report::write_combined;
use super::{report, resolve, run};
use crate::claims::{self, Judgement, Status};
use crate::config::ConfigError;
use crate::experiment::{ExperimentError, Registry, ReproduceItem};
use crate::run::progress::Progress;
use crate::run::summary::Summary;
use mechlab_report::Verdict;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// One finished reproduce run (one seed of one setting).
pub struct Outcome {
    pub paper: String,
    /// The run's folder name: its setting, plus `+seed=<s>` past the first seed.
    pub name: String,
    /// The setting: the preset, plus the overridden keys when a preset runs twice.
    pub setting: String,
    pub seed: u64,
    pub dir: PathBuf,
    pub seconds: f64,
    pub result: Result<Summary, String>,
}

/// Every run and every claim judged over its seeds.
pub struct Reproduction {
    pub outcomes: Vec<Outcome>,
    pub claims: Vec<Judgement>,
}

impl Reproduction {
    /// Whether every run finished and no claim failed its rule (findings pass).
    pub fn passed(&self) -> bool {
        self.outcomes.iter().all(|o| o.result.is_ok())
            && self.claims.iter().all(|j| j.status != Status::Failed)
    }
}

impl Outcome {
    /// The run's verdicts, the failures its claims' rules allow marked as known.
    pub fn verdicts(&self, reg: &Registry) -> Vec<Verdict> {
        let Ok(s) = &self.result else {
            return Vec::new();
        };
        let mut v = s.verdicts.clone();
        claims::annotate(report::claim_rules(reg, &self.dir), &mut v);
        v
    }
}

/// Runs the reproduce presets of `papers` (all when empty) into `out`, `jobs` runs
/// at a time, each setting on its default seeds or on `seeds` (see
/// [`reproduce_with_progress`]).
pub fn reproduce(
    reg: &Registry,
    papers: &[String],
    out: &Path,
    opts: &Options,
) -> Result<Reproduction, ExperimentError> {
    reproduce_with_progress(reg, papers, out, opts, None)
}

/// How `reproduce` runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// No bars, spinners or per-run lines.
    pub quiet: bool,
    /// The command line, recorded in each run's folder.
    pub command: String,
    /// Runs at a time (see [`default_jobs`]).
    pub jobs: usize,
    /// Seeds per setting, instead of each setting's own number.
    pub seeds: Option<u32>,
}

impl Options {
    pub fn new(command: &str) -> Self {
        Options {
            quiet: false,
            command: command.to_string(),
            jobs: default_jobs(),
            seeds: None,
        }
    }
}

/// How many reproduce runs go at once by default: two where there are two cores
/// or more. A run's serial parts (data generation, probes, solvers, reports)
/// leave a core idle, and a second run's work fills it.
pub fn default_jobs() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(2))
}

/// One planned run.
struct Planned {
    paper: &'static str,
    setting: String,
    name: String,
    seed: Option<u64>,
    item: ReproduceItem,
}

/// [`reproduce`], counting finished runs into `progress`.
///
/// Up to `jobs` runs go at once, each on its own thread taking the next run in
/// the registry's order, each thread with its own rayon pool for its runs' inner
/// parallelism. Nothing a run computes depends on what runs beside it or on how
/// many threads the pool has (fixed-chunk reductions, one seed per run), so the
/// results are bit for bit those of `jobs = 1`; the outcomes come back in the
/// registry's order whatever order the runs finish in. Each run's `seconds` is
/// its own wall time, shared cores included.
pub fn reproduce_with_progress(
    reg: &Registry,
    papers: &[String],
    out: &Path,
    opts: &Options,
    progress: Option<&Progress>,
) -> Result<Reproduction, ExperimentError> {
    let all = reg.all();
    for p in papers {
        if !all.iter().any(|e| e.name() == p) {
            return Err(ExperimentError::Config(ConfigError::UnknownExperiment {
                file: "reproduce".into(),
                name: p.clone(),
                suggestion: crate::config::closest(p, all.iter().map(|e| e.name())),
            }));
        }
    }
    if opts.seeds == Some(0) {
        return Err(ExperimentError::Config(ConfigError::Invalid {
            file: "reproduce".into(),
            message: "--seeds 0: expected at least 1 seed per setting".into(),
        }));
    }
    // Every run, planned in the registry's order before any starts: each
    // setting's seeds one after another, the preset's own seed first.
    let mut plan = Vec::new();
    for exp in all
        .iter()
        .filter(|e| papers.is_empty() || papers.iter().any(|p| p == e.name()))
    {
        let items = exp.reproduce();
        for item in &items {
            let setting = run_name(item, &items);
            // A preset that does not resolve fails as its one run, with the error.
            let base = resolve(reg, item.preset, &item.overrides, None)
                .map(|r| r.prepared.seed())
                .ok();
            let n = opts.seeds.unwrap_or(item.seeds);
            for i in 0..n as u64 {
                let seed = base.map(|b| b + i);
                let name = match seed {
                    Some(s) if i > 0 => format!("{setting}+seed={s}"),
                    _ => setting.clone(),
                };
                plan.push(Planned {
                    paper: exp.name(),
                    setting: setting.clone(),
                    name,
                    seed,
                    item: item.clone(),
                });
                if base.is_none() {
                    break;
                }
            }
        }
    }
    if let Some(p) = progress {
        p.set_total(plan.len() as u64);
    }
    let jobs = opts.jobs.clamp(1, plan.len().max(1));
    // Side by side, the runs' own bars and spinners would draw over each other:
    // they stay quiet, and a line says when each run starts and ends.
    let quiet = opts.quiet;
    let run_quiet = quiet || jobs > 1;
    let (next, finished) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let done: Mutex<Vec<Option<Outcome>>> = Mutex::new((0..plan.len()).map(|_| None).collect());
    let work_loop = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(pl) = plan.get(i) else {
            return;
        };
        let name = &pl.name;
        let dir = out.join(name);
        // This folder is ours (a previous reproduce): start it afresh.
        let _ = std::fs::remove_dir_all(&dir);
        if !quiet {
            eprintln!("reproduce: {name} ({})", pl.paper);
        }
        let t0 = Instant::now();
        let seed = pl.seed.filter(|_| pl.name != pl.setting);
        let result = resolve(reg, pl.item.preset, &pl.item.overrides, seed)
            .map_err(ExperimentError::from)
            .and_then(|r| run(reg, &r, &dir, &opts.command, run_quiet))
            .map_err(|e| e.to_string());
        let seconds = t0.elapsed().as_secs_f64();
        let n = finished.fetch_add(1, Ordering::Relaxed) + 1;
        if !quiet && jobs > 1 {
            let status = if result.is_ok() { "done" } else { "failed" };
            eprintln!(
                "reproduce: {name} {status} in {seconds:.1} s ({n} of {})",
                plan.len()
            );
        }
        let outcome = Outcome {
            paper: pl.paper.to_string(),
            name: name.clone(),
            setting: pl.setting.clone(),
            seed: pl.seed.unwrap_or(0),
            dir,
            seconds,
            result,
        };
        done.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(outcome);
        if let Some(p) = progress {
            p.inc();
        }
    };
    // Each of several runs side by side gets its own pool, as many threads as
    // cores, and the system shares the cores between them. In one shared pool a
    // short run's join waits while its thread steals and finishes a long run's
    // task: topic-value's 1.2 s alone took 14–17 s beside markov-icl-s3 that way.
    let threads = rayon::current_num_threads();
    let work = || {
        let pool = (jobs > 1)
            .then(|| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .ok()
            })
            .flatten();
        match &pool {
            Some(p) => p.install(work_loop),
            None => work_loop(),
        }
    };
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for _ in 1..jobs {
            s.spawn(work);
        }
        work();
    });
    let wall = t0.elapsed().as_secs_f64();
    let outcomes: Vec<Outcome> = done
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .flatten()
        .collect();
    let claims = judge_all(reg, &outcomes);
    let r = Reproduction { outcomes, claims };
    write_combined(reg, out, &r, wall, jobs)?;
    Ok(r)
}

/// Every setting's claims judged over its seeds, in the runs' order; a seed whose
/// run failed fails the setting's `run.completes`.
fn judge_all(reg: &Registry, outcomes: &[Outcome]) -> Vec<Judgement> {
    let mut settings: Vec<(&str, &str)> = Vec::new();
    for o in outcomes {
        if !settings.contains(&(o.paper.as_str(), o.setting.as_str())) {
            settings.push((&o.paper, &o.setting));
        }
    }
    let mut out = Vec::new();
    for (paper, setting) in settings {
        let runs: Vec<&Outcome> = outcomes
            .iter()
            .filter(|o| o.paper == paper && o.setting == setting)
            .collect();
        let mut seeds: Vec<(u64, Verdict)> = Vec::new();
        for o in &runs {
            match &o.result {
                Ok(s) => seeds.extend(s.verdicts.iter().map(|v| (o.seed, v.clone()))),
                Err(e) => seeds.push((
                    o.seed,
                    Verdict::new("the run completes", "no error", e, false)
                        .with_id("run.completes")
                        .with_source("mechlab"),
                )),
            }
        }
        // Every seed of a setting shares its config but for the seed.
        let rules = runs
            .iter()
            .find(|o| o.result.is_ok())
            .map_or(&[][..], |o| report::claim_rules(reg, &o.dir));
        out.extend(claims::judge(paper, setting, rules, &seeds));
    }
    out
}

/// A reproduce run's folder name: its preset, plus the keys it overrides when the
/// same preset runs more than once (`topic-value+bert_embedding_ln`).
/// When the keys alone do not tell the runs apart (`seed=1`, `seed=2`), the
/// values are kept too (`attention-svm-w+seed=1`).
fn run_name(item: &ReproduceItem, all: &[ReproduceItem]) -> String {
    let same: Vec<&ReproduceItem> = all.iter().filter(|i| i.preset == item.preset).collect();
    if same.len() < 2 || item.overrides.is_empty() {
        return item.preset.to_string();
    }
    let short = |i: &ReproduceItem, values: bool| -> String {
        let parts: Vec<String> = i
            .overrides
            .iter()
            .map(|o| {
                let (k, v) = o.split_once('=').unwrap_or((o, ""));
                let k = k.rsplit('.').next().unwrap_or(k);
                if values {
                    format!("{k}={v}")
                } else {
                    k.to_string()
                }
            })
            .collect();
        format!("{}+{}", i.preset, parts.join("+"))
    };
    let mine = short(item, false);
    let clash = same
        .iter()
        .filter(|i| !std::ptr::eq(**i, item) && !i.overrides.is_empty())
        .any(|i| short(i, false) == mine);
    if clash {
        short(item, true)
    } else {
        mine
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_names_stay_apart_when_only_values_differ() {
        let items = vec![
            ReproduceItem::new("p", &[]),
            ReproduceItem::new("p", &["seed=1"]),
            ReproduceItem::new("p", &["seed=2"]),
            ReproduceItem::new("q", &[]),
            ReproduceItem::new("q", &["model.ln=true"]),
        ];
        let names: Vec<String> = items.iter().map(|i| run_name(i, &items)).collect();
        assert_eq!(names, ["p", "p+seed=1", "p+seed=2", "q", "q+ln"]);
    }
}
