//! Reading a run folder: config, summary, metrics columns, checkpoints.
//!
//! Metrics come back as columns (one numpy array per key) and checkpoints as one
//! numpy array per parameter; both arrays take over the Rust buffers they were
//! read into, so nothing is copied on the way to Python.

use crate::errors::{self, Kind};
use mechlab::run::checkpoint::{self as ck, CheckpointError, Loaded};
use mechlab::run::metrics as mlog;
use mechlab_engine::Float;
use numpy::ndarray::{ArrayD, IxDyn};
use numpy::{Element, IntoPyArray, PyArray1};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::path::{Path, PathBuf};

/// `dir` if it is a run folder (it holds `config.toml`), else `RunFolderError`.
pub fn run_folder(py: Python<'_>, dir: &Path) -> PyResult<PathBuf> {
    if !dir.is_dir() {
        return Err(errors::raise(
            py,
            Kind::RunFolder,
            format!("{}: no such run folder", dir.display()),
        ));
    }
    if !dir.join("config.toml").is_file() {
        return Err(errors::raise(
            py,
            Kind::RunFolder,
            format!("{}: is not a run folder (no config.toml)", dir.display()),
        ));
    }
    Ok(dir.to_path_buf())
}

/// The run's resolved config (`config.toml`) as JSON text.
#[pyfunction]
pub fn read_config_json(py: Python<'_>, dir: PathBuf) -> PyResult<String> {
    let dir = run_folder(py, &dir)?;
    let table =
        mechlab::config::read_file(&dir.join("config.toml")).map_err(|e| errors::config(py, &e))?;
    Ok(serde_json::to_string(&table).expect("TOML tables serialise as JSON"))
}

/// The run's `summary.json`, checked against the summary's shape, as JSON text;
/// `None` while the run has not finished.
#[pyfunction]
pub fn read_summary_json(py: Python<'_>, dir: PathBuf) -> PyResult<Option<String>> {
    let dir = run_folder(py, &dir)?;
    if !dir.join("summary.json").exists() {
        return Ok(None);
    }
    let s = mechlab::run::read_summary(&dir).map_err(|e| errors::run(py, &e))?;
    Ok(Some(
        serde_json::to_string(&s).expect("summaries serialise"),
    ))
}

/// The records of `event` in `metrics.jsonl` as columns: `step` (int64) first,
/// then every other key in order of first appearance (float64, NaN where a
/// record lacks the key or logged a non-finite value as null).
#[pyfunction]
pub fn metrics<'py>(py: Python<'py>, dir: PathBuf, event: &str) -> PyResult<Bound<'py, PyDict>> {
    let dir = run_folder(py, &dir)?;
    let path = dir.join("metrics.jsonl");
    let all = mlog::read(&path).map_err(|e| errors::raise(py, Kind::Mechlab, e))?;
    let records: Vec<_> = all
        .iter()
        .filter(|r| r.get("event").and_then(|e| e.as_str()) == Some(event))
        .collect();
    if records.is_empty() {
        let mut events: Vec<&str> = Vec::new();
        for r in &all {
            if let Some(e) = r.get("event").and_then(|e| e.as_str()) {
                if !events.contains(&e) {
                    events.push(e);
                }
            }
        }
        return Err(errors::raise(
            py,
            Kind::Config,
            format!(
                "{}: no `{event}` records (events: {})",
                path.display(),
                if events.is_empty() {
                    "none".into()
                } else {
                    events.join(", ")
                }
            ),
        ));
    }
    let mut names: Vec<&str> = Vec::new();
    for r in &records {
        for k in r.keys() {
            if k != "event" && k != "step" && !names.contains(&k.as_str()) {
                names.push(k);
            }
        }
    }
    let steps: Vec<i64> = records
        .iter()
        .map(|r| r.get("step").and_then(|s| s.as_i64()).unwrap_or(-1))
        .collect();
    let out = PyDict::new(py);
    out.set_item("step", PyArray1::from_vec(py, steps))?;
    for name in names {
        let col: Vec<f64> = records
            .iter()
            .map(|r| r.get(name).and_then(|v| v.as_f64()).unwrap_or(f64::NAN))
            .collect();
        out.set_item(name, PyArray1::from_vec(py, col))?;
    }
    Ok(out)
}

/// The steps that have a checkpoint, ascending.
#[pyfunction]
pub fn steps(py: Python<'_>, dir: PathBuf) -> PyResult<Vec<u64>> {
    let dir = run_folder(py, &dir)?;
    Ok(ck::list(&dir.join("checkpoints"))
        .into_iter()
        .map(|(s, _)| s)
        .collect())
}

fn arrays<'py, T: Float + Element>(
    py: Python<'py>,
    loaded: Loaded<T>,
) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    let path = loaded.path.display().to_string();
    for (name, (shape, data)) in loaded.tensors {
        // The optimiser's moments are resume state, not the model.
        if name.starts_with("optim.") {
            continue;
        }
        let a = ArrayD::from_shape_vec(IxDyn(&shape), data).map_err(|e| {
            errors::raise(py, Kind::Checkpoint, format!("{path}: tensor {name}: {e}"))
        })?;
        out.set_item(name, a.into_pyarray(py))?;
    }
    Ok(out)
}

/// The checkpoint file of `step` in run `dir` (the latest when `None`) and its
/// step; a missing step is a `CheckpointError` listing the steps there are.
pub fn resolve_step(py: Python<'_>, dir: &Path, step: Option<u64>) -> PyResult<(PathBuf, u64)> {
    let cdir = dir.join("checkpoints");
    let all = ck::list(&cdir);
    let found = match step {
        None => all.last(),
        Some(s) => all.iter().find(|(k, _)| *k == s),
    };
    match (found, step) {
        (Some((k, p)), _) => Ok((p.clone(), *k)),
        (None, None) => Err(errors::checkpoint(
            py,
            &CheckpointError::Missing {
                path: cdir.display().to_string(),
            },
        )),
        (None, Some(s)) => {
            let have: Vec<String> = all.iter().map(|(k, _)| k.to_string()).collect();
            Err(errors::raise(
                py,
                Kind::Checkpoint,
                format!(
                    "{}: no checkpoint at step {s} (steps: {})",
                    cdir.display(),
                    if have.is_empty() {
                        "none".into()
                    } else {
                        have.join(", ")
                    }
                ),
            ))
        }
    }
}

/// The parameters at checkpoint `step` (the latest when `None`), in the run's
/// dtype, and that step.
#[pyfunction]
#[pyo3(signature = (dir, step=None))]
pub fn checkpoint<'py>(
    py: Python<'py>,
    dir: PathBuf,
    step: Option<u64>,
) -> PyResult<(Bound<'py, PyDict>, u64)> {
    let dir = run_folder(py, &dir)?;
    let (path, _) = resolve_step(py, &dir, step)?;
    // The file names its dtype only per tensor: read it as f64, and as f32 when
    // the tensors say so.
    let read = py.detach(|| match ck::load::<f64>(&path) {
        Err(CheckpointError::Mismatch { .. }) => ck::load::<f32>(&path).map(Err),
        other => other.map(Ok),
    });
    match read.map_err(|e| errors::checkpoint(py, &e))? {
        Ok(l) => {
            let s = l.meta.step;
            Ok((arrays(py, l)?, s))
        }
        Err(l) => {
            let s = l.meta.step;
            Ok((arrays(py, l)?, s))
        }
    }
}

/// Writes the run's transformer (checkpoint `step`, the latest when `None`) as
/// a TransformerLens (`format = "transformer_lens"`) or nanoGPT (`"nanogpt"`)
/// state dict and config into `out`; returns the two files.
#[pyfunction]
#[pyo3(signature = (dir, out, format, step=None))]
pub fn export_model(
    py: Python<'_>,
    dir: PathBuf,
    out: PathBuf,
    format: &str,
    step: Option<u64>,
) -> PyResult<Vec<PathBuf>> {
    use mechlab::commands::export::Format;
    let f = match format {
        "transformer_lens" => Format::TransformerLens,
        "nanogpt" => Format::NanoGpt,
        o => {
            return Err(crate::errors::raise(
                py,
                crate::errors::Kind::Config,
                format!("format {o:?}: expected \"transformer_lens\" or \"nanogpt\""),
            ))
        }
    };
    let dir = run_folder(py, &dir)?;
    mechlab::commands::export::model(&dir, step, &out, f).map_err(|e| crate::errors::run(py, &e))
}

/// The run's transformer at checkpoint `step` as TransformerLens's state dict
/// (`{name: array}`, float32 for an f32 run) and its `HookedTransformerConfig`
/// keys as JSON: what `Model.W_Q` and `Model.cfg` read.
#[pyfunction]
#[pyo3(signature = (dir, step=None))]
pub fn transformer_lens_state<'py>(
    py: Python<'py>,
    dir: PathBuf,
    step: Option<u64>,
) -> PyResult<(Bound<'py, PyDict>, String)> {
    let dir = run_folder(py, &dir)?;
    let (tensors, cfg, f32) = mechlab::commands::export::transformer_lens_state(&dir, step)
        .map_err(|e| crate::errors::run(py, &e))?;
    let d = PyDict::new(py);
    for (name, shape, data) in tensors {
        let bad = |e: numpy::ndarray::ShapeError| {
            crate::errors::raise(py, crate::errors::Kind::Mechlab, format!("{name}: {e}"))
        };
        if f32 {
            let v: Vec<f32> = data.iter().map(|&x| x as f32).collect();
            let a = numpy::ndarray::ArrayD::from_shape_vec(numpy::ndarray::IxDyn(&shape), v)
                .map_err(bad)?;
            d.set_item(&name, numpy::IntoPyArray::into_pyarray(a, py))?;
        } else {
            let a = numpy::ndarray::ArrayD::from_shape_vec(numpy::ndarray::IxDyn(&shape), data)
                .map_err(bad)?;
            d.set_item(&name, numpy::IntoPyArray::into_pyarray(a, py))?;
        }
    }
    Ok((d, cfg.to_string()))
}

/// The report's attention viewer of `pattern` (`[head, query, key]`) over
/// `tokens` as an HTML fragment for a notebook cell (offline: styles and script
/// inline); `n` numbers it on the page.
#[pyfunction]
pub fn attention_html(
    py: Python<'_>,
    tokens: Vec<String>,
    pattern: numpy::PyReadonlyArray3<'_, f64>,
    heads: Vec<String>,
    title: String,
    n: usize,
) -> PyResult<String> {
    let a = pattern.as_array();
    let hs = heads
        .iter()
        .enumerate()
        .map(|(i, name)| mechlab_report::AttentionHead {
            name: name.clone(),
            hook: String::new(),
            head: i,
        })
        .collect();
    let fig = mechlab_report::Figure::attention(
        "attention",
        &title,
        tokens,
        hs,
        a.iter().copied().collect(),
    );
    mechlab_report::render_viewer_fragment(&fig, n)
        .map_err(|e| crate::errors::raise(py, crate::errors::Kind::Mechlab, e.to_string()))
}

/// The ids and pieces of `text` under the `tokenizer.json` at `path`.
#[pyfunction]
pub fn encode_text(
    py: Python<'_>,
    path: PathBuf,
    text: String,
) -> PyResult<(Vec<u32>, Vec<String>)> {
    mechlab::bpe::encode_with(&path, &text)
        .map_err(|e| crate::errors::raise(py, crate::errors::Kind::Config, e))
}

/// Each id's piece under the `tokenizer.json` at `path` (None past its vocabulary).
#[pyfunction]
pub fn token_pieces(py: Python<'_>, path: PathBuf, ids: Vec<u32>) -> PyResult<Vec<Option<String>>> {
    mechlab::bpe::pieces_with(&path, &ids)
        .map_err(|e| crate::errors::raise(py, crate::errors::Kind::Config, e))
}

/// The text of `ids` under the `tokenizer.json` at `path`.
#[pyfunction]
pub fn decode_ids(py: Python<'_>, path: PathBuf, ids: Vec<u32>) -> PyResult<String> {
    mechlab::bpe::decode_with(&path, &ids)
        .map_err(|e| crate::errors::raise(py, crate::errors::Kind::Config, e))
}
