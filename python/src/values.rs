//! Python values into config overrides, and the config functions.
//!
//! `overrides={"train.steps": 200}` becomes the `--set train.steps=200` the CLI
//! would take: each value is turned into a TOML value (bool, int, float, str, or
//! a list of those; numpy scalars too) and written back as TOML text, so the core
//! type-checks it exactly as it checks `--set`, with the same messages.

use crate::errors::{self, Kind};
use mechlab::commands::{self, Resolved};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyList, PyString, PyTuple};

/// The TOML value of a Python config value; `key` names it in errors.
pub fn to_toml(key: &str, v: &Bound<'_, PyAny>) -> PyResult<toml::Value> {
    let py = v.py();
    let ty = v.get_type();
    let numpy_bool = ty.module().is_ok_and(|m| m == "numpy")
        && matches!(ty.name()?.to_string().as_str(), "bool" | "bool_");
    if v.is_instance_of::<PyBool>() || numpy_bool {
        return Ok(toml::Value::Boolean(v.is_truthy()?));
    }
    if v.is_instance_of::<PyString>() {
        return Ok(toml::Value::String(v.extract()?));
    }
    if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
        let items = v
            .try_iter()?
            .map(|x| to_toml(key, &x?))
            .collect::<PyResult<Vec<_>>>()?;
        return Ok(toml::Value::Array(items));
    }
    if v.is_instance_of::<PyFloat>() {
        return Ok(toml::Value::Float(v.extract()?));
    }
    // Python ints and numpy integers (via __index__), then numpy floats.
    if let Ok(i) = v.extract::<i64>() {
        return Ok(toml::Value::Integer(i));
    }
    if v.hasattr("__index__")? {
        return Err(errors::raise(
            py,
            Kind::Config,
            format!(
                "override `{key}`: {v} does not fit a 64-bit integer (config integers are i64)"
            ),
        ));
    }
    if let Ok(x) = v.extract::<f64>() {
        return Ok(toml::Value::Float(x));
    }
    let ty = v.get_type().name()?.to_string();
    Err(errors::raise(
        py,
        Kind::Config,
        format!(
            "override `{key}`: a {ty} is not a config value (use a bool, int, float, str or list)"
        ),
    ))
}

/// A dict of dotted keys as `key=value` override strings.
pub fn overrides(overrides: Option<&Bound<'_, PyDict>>) -> PyResult<Vec<String>> {
    let Some(d) = overrides else {
        return Ok(Vec::new());
    };
    d.iter()
        .map(|(k, v)| {
            let key: String = k.extract().map_err(|_| {
                errors::raise(
                    k.py(),
                    Kind::Config,
                    format!("override keys are dotted strings like \"train.lr\", got {k}"),
                )
            })?;
            Ok(format!("{key}={}", to_toml(&key, &v)?))
        })
        .collect()
}

/// Resolves a preset or file with overrides, raising `ConfigError`.
pub fn resolve(
    py: Python<'_>,
    source: &str,
    overrides: &[String],
    seed: Option<u64>,
) -> PyResult<Resolved> {
    commands::resolve(&registry(), source, overrides, seed).map_err(|e| errors::config(py, &e))
}

/// Every preset's name, in `mechlab list` order.
#[pyfunction]
pub fn presets() -> Vec<&'static str> {
    registry().presets().iter().map(|p| p.name).collect()
}

/// The resolved config of a preset or file, as JSON text.
#[pyfunction]
#[pyo3(signature = (source, overrides=None, seed=None))]
pub fn config_json(
    py: Python<'_>,
    source: &str,
    overrides: Option<&Bound<'_, PyDict>>,
    seed: Option<u64>,
) -> PyResult<String> {
    let ov = self::overrides(overrides)?;
    let r = resolve(py, source, &ov, seed)?;
    Ok(serde_json::to_string(&r.table).expect("TOML tables serialise as JSON"))
}

/// The papers Python sees: mechlab's own (the registry is passed to every
/// command, never global).
pub fn registry() -> mechlab::experiment::Registry {
    mechlab::papers::registry()
}
