//! A trained model from Python: hook points, `run_with_cache`, `run_with_hooks`.
//!
//! `mechlab::inspect::load_model` picks the model from the run's config and
//! loads the checkpoint's weights; this wraps the `HookedModel` it returns. Token
//! ids arrive as an int64 `[batch, seq]` array (the Python layer converts), the
//! activations leave as numpy arrays in the run's dtype: float64 arrays take over
//! the engine's buffers; an f32 run's (whose caches the engine widens exactly)
//! are narrowed back to float32, half the memory, every value unchanged.
//! Forward passes release the GIL.

use crate::errors::{self, Kind};
use crate::files::run_folder;
use mechlab::analysis::{InterveneError, Request};
use mechlab::inspect::LoadError;
use mechlab::pretrained::PretrainedError;
use mechlab_engine::hooks::{Ablation, Batch, Hook, HookError, HookFn, HookedModel, Tensor};
use numpy::ndarray::{ArrayD, IxDyn};
use numpy::{IntoPyArray, PyReadonlyArray2, PyReadonlyArrayDyn};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// One cell of a patching sweep: its heads and its positions (`None`: all).
type Cell = (Option<Vec<usize>>, Option<Vec<usize>>);

/// A model loaded from a run's checkpoint.
#[pyclass(module = "mechlab._native", name = "Model")]
pub struct Model {
    inner: Mutex<Box<dyn HookedModel + Send>>,
    #[pyo3(get)]
    step: u64,
    /// The run trains in f32 (`model.dtype`): arrays go out as float32.
    f32: bool,
}

impl Model {
    pub fn new(inner: Mutex<Box<dyn HookedModel + Send>>, step: u64, f32: bool) -> Self {
        Model { inner, step, f32 }
    }
}

fn hook_err(py: Python<'_>, e: &HookError) -> PyErr {
    errors::raise(py, Kind::Hook, e.to_string())
}

fn to_numpy<'py>(py: Python<'py>, t: Tensor, f32: bool) -> PyResult<Bound<'py, PyAny>> {
    let bad = |e: numpy::ndarray::ShapeError| {
        errors::raise(py, Kind::Mechlab, format!("model output: {e}"))
    };
    if f32 {
        // Exact: the values were f32 before the engine widened them.
        let data: Vec<f32> = t.data.iter().map(|&v| v as f32).collect();
        let a = ArrayD::from_shape_vec(IxDyn(&t.shape), data).map_err(bad)?;
        return Ok(a.into_pyarray(py).into_any());
    }
    let a = ArrayD::from_shape_vec(IxDyn(&t.shape), t.data).map_err(bad)?;
    Ok(a.into_pyarray(py).into_any())
}

fn batch(
    py: Python<'_>,
    tokens: PyReadonlyArray2<'_, i64>,
    targets: Option<PyReadonlyArrayDyn<'_, i64>>,
) -> PyResult<Batch> {
    let a = tokens.as_array();
    let (b, s) = a.dim();
    let mut ids = Vec::with_capacity(b * s);
    for ((i, j), &t) in a.indexed_iter() {
        let id = u32::try_from(t).map_err(|_| {
            errors::raise(
                py,
                Kind::Hook,
                format!("inputs: token id {t} at [{i}, {j}] is not a vocabulary id"),
            )
        })?;
        ids.push(id);
    }
    let mut batch = Batch::new(ids, b, s);
    if let Some(t) = targets {
        batch = batch.with_targets(t.as_array().iter().copied().collect());
    }
    Ok(batch)
}

/// A Python hook function as an engine hook: `call(activation) -> array`
/// (the Python layer wraps the user's `fn(activation, hook)`), run with the GIL
/// taken only while it runs; a raise becomes the hook's error with its traceback.
fn hook_fn(f: Py<PyAny>, f32: bool) -> Ablation {
    Ablation::Call(HookFn(Arc::new(move |t: &Tensor| {
        Python::attach(|py| {
            let arr = to_numpy(py, t.clone(), f32).map_err(|e| e.to_string())?;
            let out = f.bind(py).call1((arr,)).map_err(|e| {
                format!(
                    "the hook function raised\n{}",
                    crate::generator::traceback(py, &e)
                )
            })?;
            let a: PyReadonlyArrayDyn<'_, f64> = out.extract().map_err(|_| {
                "the hook function returned something other than a float array".to_string()
            })?;
            let a = a.as_array();
            Ok(Tensor::new(a.shape().to_vec(), a.iter().copied().collect()))
        })
    })))
}

fn hook(py: Python<'_>, d: &Bound<'_, PyDict>, f32: bool) -> PyResult<Hook> {
    let bad = |m: String| errors::raise(py, Kind::Hook, m);
    let name: String = d
        .get_item("name")?
        .ok_or_else(|| bad("a hook needs a `name` (a hook point)".into()))?
        .extract()?;
    let ablation = match d.get_item("ablation")? {
        Some(f) if f.is_callable() => hook_fn(f.unbind(), f32),
        None => Ablation::Zero,
        Some(v) => {
            if let Ok(s) = v.extract::<String>() {
                match s.as_str() {
                    "zero" => Ablation::Zero,
                    "mean" => Ablation::Mean,
                    other => {
                        return Err(bad(format!(
                            "hook `{name}`: ablation `{other}` (use \"zero\", \"mean\" or an array to patch in)"
                        )))
                    }
                }
            } else {
                let a: PyReadonlyArrayDyn<'_, f64> = v.extract().map_err(|_| {
                    bad(format!(
                        "hook `{name}`: ablation must be \"zero\", \"mean\" or a float array"
                    ))
                })?;
                let a = a.as_array();
                Ablation::patch(Tensor::new(a.shape().to_vec(), a.iter().copied().collect()))
            }
        }
    };
    let idx = |key: &str| -> PyResult<Option<Vec<usize>>> {
        match d.get_item(key)? {
            None => Ok(None),
            Some(v) if v.is_none() => Ok(None),
            Some(v) => v
                .extract::<Vec<usize>>()
                .map(Some)
                .map_err(|_| bad(format!("hook `{name}`: `{key}` must be a list of indices"))),
        }
    };
    Ok(Hook {
        heads: idx("heads")?,
        positions: idx("positions")?,
        name,
        ablation,
    })
}

/// The native hooks of the Python layer's hook dicts.
fn parse_hooks(py: Python<'_>, dicts: &[Bound<'_, PyDict>], f32: bool) -> PyResult<Vec<Hook>> {
    dicts.iter().map(|d| hook(py, d, f32)).collect()
}

/// A cache as `{name: array}` in the run's dtype.
fn cache_dict<'py>(
    py: Python<'py>,
    cache: mechlab_engine::hooks::ActivationCache,
    f32: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, t) in cache {
        d.set_item(k, to_numpy(py, t, f32)?)?;
    }
    Ok(d)
}

#[pymethods]
impl Model {
    /// Every hook point, in forward order: dicts of name, layout and doc.
    fn hook_points<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let pts = self.inner.lock().expect("model lock").hook_points();
        let out = PyList::empty(py);
        for p in pts {
            let d = PyDict::new(py);
            d.set_item("name", p.name)?;
            d.set_item("layout", p.layout)?;
            d.set_item("doc", p.doc)?;
            out.append(d)?;
        }
        Ok(out)
    }

    /// The output's layout, e.g. `[batch, d_vocab]`.
    fn output_layout(&self) -> String {
        self.inner.lock().expect("model lock").output_layout()
    }

    /// Forward pass recording `names`: (output, {name: array}).
    #[pyo3(signature = (tokens, names, targets=None))]
    fn run_with_cache<'py>(
        &self,
        py: Python<'py>,
        tokens: PyReadonlyArray2<'py, i64>,
        names: Vec<String>,
        targets: Option<PyReadonlyArrayDyn<'py, i64>>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyDict>)> {
        let b = batch(py, tokens, targets)?;
        let res = py.detach(|| {
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            self.inner
                .lock()
                .expect("model lock")
                .run_with_cache(&b, &refs)
        });
        let (out, cache) = res.map_err(|e| hook_err(py, &e))?;
        Ok((
            to_numpy(py, out, self.f32)?,
            cache_dict(py, cache, self.f32)?,
        ))
    }

    /// Forward pass with `hooks` applied that records `names` after them:
    /// (output, {name: array}).
    #[pyo3(signature = (tokens, hooks, names, targets=None))]
    fn run_hooked<'py>(
        &self,
        py: Python<'py>,
        tokens: PyReadonlyArray2<'py, i64>,
        hooks: Vec<Bound<'py, PyDict>>,
        names: Vec<String>,
        targets: Option<PyReadonlyArrayDyn<'py, i64>>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyDict>)> {
        let b = batch(py, tokens, targets)?;
        let hooks = parse_hooks(py, &hooks, self.f32)?;
        let res = py.detach(|| {
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            self.inner
                .lock()
                .expect("model lock")
                .run_hooked(&b, &hooks, &refs)
        });
        let (out, cache) = res.map_err(|e| hook_err(py, &e))?;
        Ok((
            to_numpy(py, out, self.f32)?,
            cache_dict(py, cache, self.f32)?,
        ))
    }

    /// Forward pass recording `names`, then the backward of the metric whose
    /// gradient w.r.t. the output `dout(output)` returns: (output,
    /// {name: array}, {name: gradient}).
    fn run_with_grads<'py>(
        &self,
        py: Python<'py>,
        tokens: PyReadonlyArray2<'py, i64>,
        names: Vec<String>,
        dout: Py<PyAny>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyDict>, Bound<'py, PyDict>)> {
        let b = batch(py, tokens, None)?;
        let f32 = self.f32;
        let res = py.detach(|| {
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let mut d = metric_grad_fn(&dout, f32);
            self.inner
                .lock()
                .expect("model lock")
                .run_with_grads(&b, &refs, &mut d)
        });
        let (out, acts, grads) = res.map_err(|e| hook_err(py, &e))?;
        Ok((
            to_numpy(py, out, self.f32)?,
            cache_dict(py, acts, self.f32)?,
            cache_dict(py, grads, self.f32)?,
        ))
    }

    /// Attribution patching in one call: the clean forward recording `names`,
    /// the corrupted forward and backward of the metric whose gradient
    /// `dout(output)` returns, and each point's estimate per position and head
    /// (`mechlab::patching::attribution_cells`), so no activation crosses into
    /// Python: (clean output, corrupted output, [len(names), pos, head] array).
    fn attribute_cells<'py>(
        &self,
        py: Python<'py>,
        clean: PyReadonlyArray2<'py, i64>,
        corrupted: PyReadonlyArray2<'py, i64>,
        names: Vec<String>,
        dout: Py<PyAny>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>, Bound<'py, PyAny>)> {
        let (c, x) = (batch(py, clean, None)?, batch(py, corrupted, None)?);
        let f32 = self.f32;
        let res = py.detach(|| -> Result<_, HookError> {
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let mut d = metric_grad_fn(&dout, f32);
            let mut m = self.inner.lock().expect("model lock");
            let (yc, cache) = m.run_with_cache(&c, &refs)?;
            let (yx, acts, grads) = m.run_with_grads(&x, &refs, &mut d)?;
            let mut shape = vec![names.len(), 0, 0];
            let mut cells = Vec::new();
            for n in &refs {
                let (t, h, v) =
                    mechlab::patching::attribution_cells(n, &cache[*n], &acts[*n], &grads[*n]);
                (shape[1], shape[2]) = (t, h);
                cells.extend(v);
            }
            Ok((yc, yx, Tensor::new(shape, cells)))
        });
        let (yc, yx, cells) = res.map_err(|e| hook_err(py, &e))?;
        Ok((
            to_numpy(py, yc, self.f32)?,
            to_numpy(py, yx, self.f32)?,
            to_numpy(py, cells, false)?,
        ))
    }

    /// One forward per cell with `patch` patched into `name` at that cell's
    /// heads and positions (`None`: all), in parallel where the model allows:
    /// each output handed to `metric` as it comes (with the GIL held only for
    /// the call), the metric's values in order. An activation-patching
    /// sweep's inner loop, holding one output per thread.
    fn run_patched<'py>(
        &self,
        py: Python<'py>,
        tokens: PyReadonlyArray2<'py, i64>,
        name: String,
        patch: PyReadonlyArrayDyn<'py, f64>,
        cells: Vec<Cell>,
        metric: Bound<'py, PyAny>,
    ) -> PyResult<Vec<f64>> {
        let b = batch(py, tokens, None)?;
        let p = patch.as_array();
        let patch = Ablation::patch(Tensor::new(p.shape().to_vec(), p.iter().copied().collect()));
        let jobs: Vec<(&Batch, Vec<Hook>)> = cells
            .into_iter()
            .map(|(heads, positions)| {
                let h = Hook {
                    name: name.clone(),
                    ablation: patch.clone(),
                    heads,
                    positions,
                };
                (&b, vec![h])
            })
            .collect();
        let metric = metric.unbind();
        let f32 = self.f32;
        let values: Mutex<Vec<PyResult<f64>>> =
            Mutex::new(jobs.iter().map(|_| Ok(f64::NAN)).collect());
        let each = |i: usize, y: Result<Tensor, HookError>| {
            let v = Python::attach(|py| -> PyResult<f64> {
                let y = to_numpy(py, y.map_err(|e| hook_err(py, &e))?, f32)?;
                metric.bind(py).call1((y,))?.extract::<f64>()
            });
            values.lock().expect("sweep values")[i] = v;
        };
        py.detach(|| {
            self.inner
                .lock()
                .expect("model lock")
                .run_many_each(&jobs, &each)
        });
        values
            .into_inner()
            .expect("sweep values")
            .into_iter()
            .collect()
    }

    /// Forward pass with `hooks` (dicts: name, ablation, heads, positions) applied.
    #[pyo3(signature = (tokens, hooks, targets=None))]
    fn run_with_hooks<'py>(
        &self,
        py: Python<'py>,
        tokens: PyReadonlyArray2<'py, i64>,
        hooks: Vec<Bound<'py, PyDict>>,
        targets: Option<PyReadonlyArrayDyn<'py, i64>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let b = batch(py, tokens, targets)?;
        let hooks = parse_hooks(py, &hooks, self.f32)?;
        let res = py.detach(|| {
            self.inner
                .lock()
                .expect("model lock")
                .run_with_hooks(&b, &hooks)
        });
        to_numpy(py, res.map_err(|e| hook_err(py, &e))?, self.f32)
    }
}

/// The engine's `dout` from a Python callable returning the metric's
/// gradient w.r.t. the output (called with the GIL held).
fn metric_grad_fn(
    dout: &Py<PyAny>,
    f32: bool,
) -> impl FnMut(&Tensor) -> Result<Tensor, String> + '_ {
    move |y: &Tensor| {
        Python::attach(|py| {
            let arr = to_numpy(py, y.clone(), f32).map_err(|e| e.to_string())?;
            let out = dout.bind(py).call1((arr,)).map_err(|e| {
                format!("the metric raised\n{}", crate::generator::traceback(py, &e))
            })?;
            let a: PyReadonlyArrayDyn<'_, f64> = out
                .extract()
                .map_err(|_| "the metric's gradient is not a float array".to_string())?;
            let a = a.as_array();
            Ok(Tensor::new(a.shape().to_vec(), a.iter().copied().collect()))
        })
    }
}

/// Runs the paper's interventions on run `dir`, as `mechlab intervene` does:
/// writes `intervene.json`, its figures and the report's "Interventions"
/// section, and returns the JSON written (effects first, then the paper's tables).
#[pyfunction]
#[pyo3(signature = (dir, step=None, ablate=None, patch=false))]
pub fn intervene(
    py: Python<'_>,
    dir: PathBuf,
    step: Option<u64>,
    ablate: Option<Vec<String>>,
    patch: bool,
) -> PyResult<String> {
    let dir = run_folder(py, &dir)?;
    let req = Request {
        step,
        ablate: ablate.unwrap_or_default(),
        patch,
    };
    let out =
        py.detach(|| mechlab::commands::intervene::run(&crate::values::registry(), &dir, &req));
    out.map(|v| v.to_string())
        .map_err(|e| intervene_error(py, e))
}

/// What the run's experiment measures at a probe step, on checkpoint `step`
/// (the latest when `None`), as JSON text (`mechlab measure`).
#[pyfunction]
#[pyo3(signature = (dir, step=None))]
pub fn measure(py: Python<'_>, dir: PathBuf, step: Option<u64>) -> PyResult<String> {
    let dir = run_folder(py, &dir)?;
    let out =
        py.detach(|| mechlab::commands::intervene::measure(&crate::values::registry(), &dir, step));
    out.map(|v| v.to_string())
        .map_err(|e| intervene_error(py, e))
}

fn intervene_error(py: Python<'_>, e: InterveneError) -> PyErr {
    match &e {
        InterveneError::Config(c) => errors::config(py, c),
        // A flag the paper's suite does not take, a request it cannot serve.
        InterveneError::Invalid(_) => errors::raise(py, Kind::Config, e.to_string()),
        InterveneError::Hook(_) => errors::raise(py, Kind::Hook, e.to_string()),
        InterveneError::Load(LoadError::Checkpoint(_) | LoadError::NoStep { .. }) => {
            errors::raise(py, Kind::Checkpoint, e.to_string())
        }
        _ => errors::raise(py, Kind::Mechlab, e.to_string()),
    }
}

/// Loads the model of run `dir` at checkpoint `step` (the latest when `None`);
/// a `topic-bert` run's model is its pretrained encoder, at step 0.
#[pyfunction]
#[pyo3(signature = (dir, step=None))]
pub fn load_model(py: Python<'_>, dir: PathBuf, step: Option<u64>) -> PyResult<Model> {
    let dir = run_folder(py, &dir)?;
    let config = std::fs::read_to_string(dir.join("config.toml"))
        .ok()
        .and_then(|t| t.parse::<toml::Table>().ok());
    let experiment = config
        .as_ref()
        .and_then(|c| c.get("experiment")?.as_str())
        .unwrap_or_default();
    let at = if experiment == "topic-bert" {
        step.unwrap_or(0)
    } else {
        crate::files::resolve_step(py, &dir, step)?.1
    };
    let m = py
        .detach(|| mechlab::inspect::load_model(&crate::values::registry(), &dir, Some(at)))
        .map_err(|e| match &e {
            LoadError::Config(c) | LoadError::Pretrained(PretrainedError::Path(c)) => {
                errors::config(py, c)
            }
            LoadError::Checkpoint(_) | LoadError::NoStep { .. } => {
                errors::raise(py, Kind::Checkpoint, e.to_string())
            }
            // A run inspect cannot rebuild, or a broken model folder: not a checkpoint's fault.
            LoadError::Unsupported { .. } | LoadError::Pretrained(_) => {
                errors::raise(py, Kind::Mechlab, e.to_string())
            }
        })?;
    // The dtype the run trains in; a config that does not say is f64.
    let f32 = config
        .as_ref()
        .and_then(|c| c.get("model")?.get("dtype")?.as_str().map(|d| d == "f32"))
        .unwrap_or(false);
    Ok(Model {
        inner: Mutex::new(m),
        step: at,
        f32,
    })
}
