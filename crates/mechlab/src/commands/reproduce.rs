//! `mechlab reproduce [<paper>...]`: every registered paper experiment at its
//! default scale, and one combined report with the verdict table.
//!
//! Each experiment's reproduce presets run into `<out>/<preset>/` (a full run
//! folder each); `<out>/report.html`, `report.md` and `summary.json` gather every
//! verdict (claim, theory's prediction, measured, pass), how long each run took, and
//! each run's figures.

use super::{report, resolve, run};
use crate::config::ConfigError;
use crate::experiment::{ExperimentError, KnownFinding, Registry, ReproduceItem};
use crate::run::progress::Progress;
use crate::run::summary::Summary;
use crate::run::{atomic, io_err, RunError};
use mechlab_report::{Block, Report, Section, Verdict};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// One finished reproduce run.
pub struct Outcome {
    pub paper: String,
    /// The run's name: its preset, plus the overridden keys when a preset runs twice.
    pub name: String,
    pub dir: PathBuf,
    pub seconds: f64,
    pub result: Result<Summary, String>,
    /// The run's claims documented not to hold (see [`KnownFinding`]).
    pub findings: Vec<KnownFinding>,
}

impl Outcome {
    /// Whether the run finished and every verdict passed or is a known finding.
    pub fn passed(&self) -> bool {
        self.result
            .as_ref()
            .is_ok_and(|s| s.verdicts.iter().all(|v| v.pass || self.known(v).is_some()))
    }

    /// The known finding `v` belongs to, if it fails as documented.
    pub fn known(&self, v: &Verdict) -> Option<&KnownFinding> {
        self.findings.iter().find(|f| !v.pass && v.id == f.id)
    }

    /// The run's verdicts, a known finding's measurement marked as such.
    pub fn verdicts(&self) -> Vec<Verdict> {
        let Ok(s) = &self.result else {
            return Vec::new();
        };
        s.verdicts
            .iter()
            .map(|v| match self.known(v) {
                Some(f) => Verdict {
                    measured: format!("{} (known finding: see {})", v.measured, f.doc),
                    ..v.clone()
                },
                None => v.clone(),
            })
            .collect()
    }
}

/// Runs the reproduce presets of `papers` (all when empty) into `out`, `jobs` runs
/// at a time (see [`reproduce_with_progress`]).
pub fn reproduce(
    reg: &Registry,
    papers: &[String],
    out: &Path,
    quiet: bool,
    command: &str,
    jobs: usize,
) -> Result<Vec<Outcome>, ExperimentError> {
    reproduce_with_progress(reg, papers, out, quiet, command, jobs, None)
}

/// How many reproduce runs go at once by default: two where there are two cores
/// or more. A run's serial parts (data generation, probes, solvers, reports)
/// leave a core idle, and a second run's work fills it; both share rayon's one
/// pool, so no more threads compute than there are cores.
pub fn default_jobs() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(2))
}

/// [`reproduce`], counting finished runs into `progress`.
///
/// Up to `jobs` runs go at once, each on its own thread taking the next run in
/// the registry's order, all sharing rayon's global pool for their inner
/// parallelism. Nothing a run computes depends on what runs beside it or on how
/// many threads the pool has (fixed-chunk reductions, one seed per run), so the
/// results are bit for bit those of `jobs = 1`; the outcomes come back in the
/// registry's order whatever order the runs finish in. Each run's `seconds` is
/// its own wall time, shared cores included.
pub fn reproduce_with_progress(
    reg: &Registry,
    papers: &[String],
    out: &Path,
    quiet: bool,
    command: &str,
    jobs: usize,
    progress: Option<&Progress>,
) -> Result<Vec<Outcome>, ExperimentError> {
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
    // Every run, planned in the registry's order before any starts.
    let mut plan = Vec::new();
    for exp in all
        .iter()
        .filter(|e| papers.is_empty() || papers.iter().any(|p| p == e.name()))
    {
        let items = exp.reproduce();
        for item in &items {
            plan.push((exp.name(), run_name(item, &items), item.clone()));
        }
    }
    if let Some(p) = progress {
        p.set_total(plan.len() as u64);
    }
    let jobs = jobs.clamp(1, plan.len().max(1));
    // Side by side, the runs' own bars and spinners would draw over each other:
    // they stay quiet, and a line says when each run starts and ends.
    let run_quiet = quiet || jobs > 1;
    let (next, finished) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let done: Mutex<Vec<Option<Outcome>>> = Mutex::new((0..plan.len()).map(|_| None).collect());
    let work = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some((paper, name, item)) = plan.get(i) else {
            return;
        };
        let dir = out.join(name);
        // This folder is ours (a previous reproduce): start it afresh.
        let _ = std::fs::remove_dir_all(&dir);
        if !quiet {
            eprintln!("reproduce: {name} ({paper})");
        }
        let t0 = Instant::now();
        let result = resolve(reg, item.preset, &item.overrides, None)
            .map_err(ExperimentError::from)
            .and_then(|r| run(reg, &r, &dir, command, run_quiet))
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
            paper: paper.to_string(),
            name: name.clone(),
            dir,
            seconds,
            result,
            findings: item.findings.clone(),
        };
        done.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(outcome);
        if let Some(p) = progress {
            p.inc();
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
    write_combined(reg, out, &outcomes, wall, jobs)?;
    Ok(outcomes)
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

/// The combined report and `summary.json`; `total` is the wall time of all the
/// runs, `jobs` of them at a time (less than the sum of their times when more
/// than one ran side by side).
fn write_combined(
    reg: &Registry,
    out: &Path,
    outcomes: &[Outcome],
    total: f64,
    jobs: usize,
) -> Result<(), RunError> {
    std::fs::create_dir_all(out).map_err(io_err(out))?;
    let mut verdict_blocks = Vec::new();
    let mut runs_rows = Vec::new();
    let mut json_runs = Vec::new();
    for o in outcomes {
        let (status, n_pass, n) = match &o.result {
            Ok(s) => {
                verdict_blocks.push(Block::Markdown(format!("**{}** ({})", o.name, o.paper)));
                verdict_blocks.push(Block::Verdicts(o.verdicts()));
                if !s.measurements.is_empty() {
                    verdict_blocks.push(report::measurements_table(&s.measurements));
                }
                let np = s.verdicts.iter().filter(|v| v.pass).count();
                let nk = s.verdicts.iter().filter(|v| o.known(v).is_some()).count();
                let status = match nk {
                    0 => "ok".to_string(),
                    1 => "ok, 1 known finding".to_string(),
                    k => format!("ok, {k} known findings"),
                };
                (status, np, s.verdicts.len())
            }
            Err(e) => {
                verdict_blocks.push(Block::Markdown(format!("**{}** ({})", o.name, o.paper)));
                verdict_blocks.push(Block::Verdicts(vec![Verdict::new(
                    "the run completes",
                    "no error",
                    e,
                    false,
                )
                .with_id("run.completes")
                .with_source("mechlab")]));
                (format!("error: {e}"), 0, 1)
            }
        };
        runs_rows.push(vec![
            o.paper.clone(),
            format!("[{0}]({0}/report.html)", o.name),
            format!("{:.1} s", o.seconds),
            format!("{n_pass}/{n}"),
            status.clone(),
        ]);
        json_runs.push(serde_json::json!({
            "paper": o.paper, "preset": o.name, "seconds": o.seconds, "status": status,
            "summary": o.result.as_ref().ok(),
        }));
    }
    let passed = outcomes.iter().filter(|o| o.passed()).count();
    let mut sections = vec![
        Section {
            title: format!(
                "Verdicts ({passed}/{} runs pass every claim but known findings)",
                outcomes.len()
            ),
            blocks: verdict_blocks,
        },
        Section {
            title: format!("Runs ({total:.1} s in total)"),
            blocks: vec![Block::Table {
                headers: ["paper", "run", "time", "verdicts", "status"]
                    .map(String::from)
                    .to_vec(),
                rows: runs_rows,
            }],
        },
    ];
    // Each run's figures, under the run's own heading, ids prefixed by the run.
    let mut figures = Vec::new();
    for o in outcomes.iter().filter(|o| o.result.is_ok()) {
        if let Ok((_, figs)) = report::document(reg, &o.dir) {
            let mut blocks = Vec::new();
            for mut f in figs {
                f.id = format!("{}/figures/{}", o.name, f.id);
                // A viewer's activation file, as seen from the combined report.
                if let mechlab_report::Plot::Attention {
                    source: Some(src), ..
                } = &mut f.plot
                {
                    src.file = format!("{}/{}", o.name, src.file);
                }
                blocks.push(Block::Figure(f.id.clone()));
                figures.push(f);
            }
            sections.push(Section {
                title: format!("{} ({})", o.name, o.paper),
                blocks,
            });
        }
    }
    let report = Report {
        title: "mechlab reproduce".into(),
        meta: vec![
            ("runs".into(), outcomes.len().to_string()),
            ("total time".into(), format!("{total:.1} s")),
            ("runs at a time".into(), jobs.to_string()),
        ],
        sections,
    };
    report::write_report(out, &report, &figures, ".")?;
    let p = out.join("summary.json");
    let json = serde_json::json!({ "total_seconds": total, "jobs": jobs, "runs": json_runs });
    atomic::write(
        &p,
        serde_json::to_string_pretty(&json)
            .expect("serialises")
            .as_bytes(),
    )
    .map_err(io_err(&p))
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
