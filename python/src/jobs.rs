//! Long jobs (run, resume, sweep, reproduce) on a worker thread.
//!
//! The calling thread releases the GIL while it waits, wakes ten times a second
//! to draw progress (a Python callback, `on_progress(done, total)`) and to let
//! Python handle signals. On Ctrl-C it does what the CLI's handler does: it
//! raises the trainer's stop flag, waits for the job to write its checkpoint and
//! return, lowers the flag again (it is process-wide, and the next call must
//! start clean), and raises `KeyboardInterrupt` naming the checkpoint.

use crate::errors::{self, Kind};
use crate::values;
use mechlab::commands::{self, reproduce as repro, sweep as sw};
use mechlab::experiment::ExperimentError;
use mechlab::run::progress::Progress;
use mechlab::train::{TrainError, INTERRUPTED};
use pyo3::exceptions::PyKeyboardInterrupt;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

const POLL: Duration = Duration::from_millis(100);

/// How a supervised job ended.
enum Ended<T> {
    Done(T),
    /// Stopped by `err` (a signal's exception, or the progress callback's); the
    /// job's own result follows, or `None` when it panicked.
    Stopped(PyErr, Option<T>),
}

/// Runs `job` on a worker thread while this thread polls signals and progress.
fn supervise<T: Send + 'static>(
    py: Python<'_>,
    progress: &Progress,
    on_progress: Option<&Bound<'_, PyAny>>,
    job: impl FnOnce() -> T + Send + 'static,
) -> PyResult<Ended<T>> {
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::Builder::new()
        .name("mechlab-job".into())
        .spawn(move || {
            let _ = tx.send(job());
        })
        .map_err(|e| errors::raise(py, Kind::Mechlab, format!("cannot start a thread: {e}")))?;
    // What the callback last saw: (done, total, phase).
    let mut shown = (u64::MAX, u64::MAX, "");
    let now = || {
        let (d, t) = progress.get();
        (d, t, progress.phase().name())
    };
    let mut rx = rx;
    loop {
        let (got, back) = py.detach(move || (rx.recv_timeout(POLL), rx));
        rx = back;
        let stop = match got {
            Ok(v) => {
                let _ = handle.join();
                if let Some(cb) = on_progress {
                    cb.call1(now())?;
                }
                return Ok(Ended::Done(v));
            }
            Err(RecvTimeoutError::Disconnected) => {
                let _ = handle.join();
                return Err(errors::raise(
                    py,
                    Kind::Mechlab,
                    "the job's thread panicked (a bug in mechlab: please report it)",
                ));
            }
            Err(RecvTimeoutError::Timeout) => {
                let now = now();
                let shown_err = match on_progress {
                    Some(cb) if now != shown => {
                        shown = now;
                        cb.call1(now).err()
                    }
                    _ => None,
                };
                shown_err.or_else(|| py.check_signals().err())
            }
        };
        if let Some(err) = stop {
            INTERRUPTED.store(true, Ordering::SeqCst);
            let (res, _) = py.detach(move || (rx.recv().ok(), handle.join()));
            INTERRUPTED.store(false, Ordering::SeqCst);
            return Ok(Ended::Stopped(err, res));
        }
    }
}

/// The exception for a job stopped by `err`: a `KeyboardInterrupt` that says
/// where the checkpoint went when the job got to write one.
fn stopped(py: Python<'_>, err: PyErr, detail: Option<String>) -> PyErr {
    match detail {
        Some(d) if err.is_instance_of::<PyKeyboardInterrupt>(py) => PyKeyboardInterrupt::new_err(d),
        _ => err,
    }
}

/// Runs a preset or config file into a run folder; returns the folder. The
/// terminal bar stays off (it is the CLI's): the caller draws its own.
/// `generator` and `patterns`: the `transformer` experiment's batch function
/// and pattern functions' wrapper (see `generator.rs`).
#[pyfunction]
#[pyo3(signature = (source, *, seed=None, overrides=None, out=None, command=None, on_progress=None, generator=None, patterns=None))]
#[allow(clippy::too_many_arguments)]
pub fn run(
    py: Python<'_>,
    source: &str,
    seed: Option<u64>,
    overrides: Option<&Bound<'_, PyDict>>,
    out: Option<PathBuf>,
    command: Option<String>,
    on_progress: Option<&Bound<'_, PyAny>>,
    generator: Option<&Bound<'_, PyAny>>,
    patterns: Option<&Bound<'_, PyAny>>,
) -> PyResult<PathBuf> {
    let ov = values::overrides(overrides)?;
    let resolved = values::resolve(py, source, &ov, seed)?;
    let seed = resolved.prepared.seed();
    let dir = commands::run_dir(out.as_deref(), &resolved.label, seed);
    let command = command.unwrap_or_else(|| format!("mechlab.run({source:?})"));
    let progress = Arc::new(Progress::new());
    let (p, d) = (progress.clone(), dir.clone());
    let reg = values::registry();
    let input = crate::generator::input(generator, patterns);
    let job = move || commands::run_with_input(&reg, &resolved, &d, &command, true, Some(p), input);
    finish_run(py, supervise(py, &progress, on_progress, job)?, dir)
}

/// The folder `run` would use for this source, seed and overrides (`out` when
/// given), resolved and checked the same way: `mechlab.train` stores its
/// arrays there before the run starts.
#[pyfunction]
#[pyo3(signature = (source, *, seed=None, overrides=None, out=None))]
pub fn run_dir(
    py: Python<'_>,
    source: &str,
    seed: Option<u64>,
    overrides: Option<&Bound<'_, PyDict>>,
    out: Option<PathBuf>,
) -> PyResult<PathBuf> {
    let ov = values::overrides(overrides)?;
    let resolved = values::resolve(py, source, &ov, seed)?;
    Ok(commands::run_dir(
        out.as_deref(),
        &resolved.label,
        resolved.prepared.seed(),
    ))
}

/// Continues an interrupted run from its latest checkpoint; returns the folder.
#[pyfunction]
#[pyo3(signature = (dir, *, on_progress=None, generator=None))]
pub fn resume(
    py: Python<'_>,
    dir: PathBuf,
    on_progress: Option<&Bound<'_, PyAny>>,
    generator: Option<&Bound<'_, PyAny>>,
) -> PyResult<PathBuf> {
    let dir = crate::files::run_folder(py, &dir)?;
    let progress = Arc::new(Progress::new());
    let d = dir.clone();
    let p = progress.clone();
    let reg = values::registry();
    let input = crate::generator::input(generator, None);
    let job = move || commands::resume_with_input(&reg, &d, true, Some(p), input);
    finish_run(py, supervise(py, &progress, on_progress, job)?, dir)
}

fn finish_run(
    py: Python<'_>,
    ended: Ended<Result<mechlab::run::summary::Summary, ExperimentError>>,
    dir: PathBuf,
) -> PyResult<PathBuf> {
    match ended {
        Ended::Done(Ok(_)) => Ok(dir),
        Ended::Done(Err(e)) => Err(errors::experiment(py, &e)),
        Ended::Stopped(err, res) => {
            let detail = res.and_then(|r| r.err()).map(|e| match e {
                // The CLI's message names `mechlab resume`; a notebook resumes in Python.
                ExperimentError::Train(TrainError::Interrupted { step, checkpoint }) => format!(
                    "interrupted at step {step}; checkpoint {} written, continue with \
                     mechlab.resume({:?})",
                    checkpoint.display(),
                    dir.display().to_string()
                ),
                e => e.to_string(),
            });
            Err(stopped(py, err, detail))
        }
    }
}

/// Runs a sweep; returns its folder. `grid` maps dotted keys to lists of values.
#[pyfunction]
#[pyo3(signature = (source, grid, seeds, *, overrides=None, out, jobs=None, shard=None, replace=false, command=None, on_progress=None))]
#[allow(clippy::too_many_arguments)]
pub fn sweep(
    py: Python<'_>,
    source: &str,
    grid: &Bound<'_, PyDict>,
    seeds: Vec<u64>,
    overrides: Option<&Bound<'_, PyDict>>,
    out: PathBuf,
    jobs: Option<usize>,
    shard: Option<(usize, usize)>,
    replace: bool,
    command: Option<String>,
    on_progress: Option<&Bound<'_, PyAny>>,
) -> PyResult<PathBuf> {
    let mut axes = Vec::new();
    for (k, vals) in grid.iter() {
        let key: String = k.extract()?;
        let vals: Vec<String> = vals
            .try_iter()?
            .map(|v| Ok(values::to_toml(&key, &v?)?.to_string()))
            .collect::<PyResult<_>>()?;
        if vals.is_empty() {
            return Err(errors::raise(
                py,
                Kind::Config,
                format!("grid `{key}`: no values"),
            ));
        }
        axes.push((key, vals));
    }
    if seeds.is_empty() {
        return Err(errors::raise(py, Kind::Config, "seeds: no seeds"));
    }
    if let Some((i, n)) = shard {
        if n == 0 || i >= n {
            return Err(errors::raise(
                py,
                Kind::Config,
                format!("shard ({i}, {n}): expected (i, n) with 0 <= i < n"),
            ));
        }
    }
    let spec = sw::SweepSpec {
        source: source.to_string(),
        overrides: values::overrides(overrides)?,
        grid: axes,
        seeds,
        shard,
    };
    let jobs = jobs.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let command = command.unwrap_or_else(|| format!("mechlab.sweep({source:?})"));
    let progress = Arc::new(Progress::new());
    let (p, o) = (progress.clone(), out.clone());
    let reg = values::registry();
    let job = move || sw::sweep_with_progress(&reg, &spec, &o, jobs, &command, Some(&p), replace);
    match supervise(py, &progress, on_progress, job)? {
        Ended::Done(Ok(_)) => Ok(out),
        Ended::Done(Err(sw::SweepError::Config(e))) => Err(errors::config(py, &e)),
        Ended::Done(Err(e @ sw::SweepError::Folder { .. })) => {
            Err(errors::raise(py, Kind::SweepFolder, e.to_string()))
        }
        Ended::Done(Err(e)) => Err(errors::raise(py, Kind::Mechlab, e.to_string())),
        Ended::Stopped(err, _) => Err(stopped(
            py,
            err,
            Some(format!(
                "sweep interrupted: the runs in progress wrote checkpoints under {}",
                out.join("runs").display()
            )),
        )),
    }
}

/// Runs the reproduce presets of `papers` (all when empty) into `out`, each
/// setting on its own seeds or `seeds`; returns one dict per run (paper, name,
/// setting, seed, dir, seconds, summary or None, error) and the claims judged
/// over seeds as JSON.
#[pyfunction]
#[pyo3(signature = (papers, out, *, command=None, on_progress=None, jobs=None, seeds=None))]
pub fn reproduce<'py>(
    py: Python<'py>,
    papers: Vec<String>,
    out: PathBuf,
    command: Option<String>,
    on_progress: Option<&Bound<'py, PyAny>>,
    jobs: Option<usize>,
    seeds: Option<u32>,
) -> PyResult<(Bound<'py, PyList>, String)> {
    let opts = repro::Options {
        quiet: true,
        command: command.unwrap_or_else(|| "mechlab.reproduce()".into()),
        jobs: jobs.unwrap_or_else(repro::default_jobs),
        seeds,
    };
    let progress = Arc::new(Progress::new());
    let (p, o) = (progress.clone(), out.clone());
    let reg = values::registry();
    let job = move || repro::reproduce_with_progress(&reg, &papers, &o, &opts, Some(&p));
    let done = match supervise(py, &progress, on_progress, job)? {
        Ended::Done(Ok(o)) => o,
        Ended::Done(Err(e)) => return Err(errors::experiment(py, &e)),
        Ended::Stopped(err, _) => {
            return Err(stopped(
                py,
                err,
                Some(format!(
                    "reproduce interrupted: the runs in progress wrote checkpoints under {}",
                    out.display()
                )),
            ))
        }
    };
    let reg = values::registry();
    let list = PyList::empty(py);
    for o in &done.outcomes {
        let d = PyDict::new(py);
        d.set_item("paper", &o.paper)?;
        d.set_item("name", &o.name)?;
        d.set_item("setting", &o.setting)?;
        d.set_item("seed", o.seed)?;
        d.set_item("dir", &o.dir)?;
        d.set_item("seconds", o.seconds)?;
        // The failures the claims' rules allow (the CLI's `FAIL, known`).
        let known: Vec<String> = o
            .verdicts(&reg)
            .into_iter()
            .filter(|v| v.known)
            .map(|v| v.id)
            .collect();
        d.set_item("known_findings", known)?;
        match &o.result {
            Ok(s) => {
                d.set_item(
                    "summary_json",
                    serde_json::to_string(s).expect("summaries serialise"),
                )?;
                d.set_item("error", py.None())?;
            }
            Err(e) => {
                d.set_item("summary_json", py.None())?;
                d.set_item("error", e)?;
            }
        }
        list.append(d)?;
    }
    let claims = serde_json::to_string(&done.claims).expect("judgements serialise");
    Ok((list, claims))
}
