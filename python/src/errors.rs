//! Rust errors as Python exceptions.
//!
//! The exception classes live in `mechlab/_errors.py`, so that `ConfigError` can
//! be both a `MechlabError` and a `ValueError` (PyO3's `create_exception!` takes
//! one base); this module looks them up by name when it raises one.

use mechlab::config::ConfigError;
use mechlab::experiment::ExperimentError;
use mechlab::run::checkpoint::CheckpointError;
use mechlab::run::RunError;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyType;

/// The Python exception classes of `mechlab._errors`, by name.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// Any failure of a run or a file (base class).
    Mechlab,
    /// A bad preset, file, key or value (also a `ValueError`).
    Config,
    /// A checkpoint that is missing, corrupt or does not fit (also a `MechlabError`).
    Checkpoint,
    /// A folder that is not a run (also a `FileNotFoundError`).
    RunFolder,
    /// A bad hook name, hook or model input (also a `ValueError`).
    Hook,
    /// A sweep folder holding another sweep (also a `FileExistsError`).
    SweepFolder,
}

impl Kind {
    fn class(self) -> &'static str {
        match self {
            Kind::Mechlab => "MechlabError",
            Kind::Config => "ConfigError",
            Kind::Checkpoint => "CheckpointError",
            Kind::RunFolder => "RunFolderError",
            Kind::Hook => "HookError",
            Kind::SweepFolder => "SweepFolderError",
        }
    }
}

/// A `mechlab._errors.<kind>` exception carrying `message`.
pub fn raise(py: Python<'_>, kind: Kind, message: impl Into<String>) -> PyErr {
    let message = message.into();
    let class = py
        .import("mechlab._errors")
        .and_then(|m| m.getattr(kind.class()))
        .ok()
        .and_then(|c| c.cast_into::<PyType>().ok());
    match class {
        Some(c) => PyErr::from_type(c, message),
        // Only when the native module is imported without its package.
        None => PyRuntimeError::new_err(message),
    }
}

pub fn config(py: Python<'_>, e: &ConfigError) -> PyErr {
    raise(py, Kind::Config, e.to_string())
}

pub fn checkpoint(py: Python<'_>, e: &CheckpointError) -> PyErr {
    raise(py, Kind::Checkpoint, e.to_string())
}

pub fn run(py: Python<'_>, e: &RunError) -> PyErr {
    match e {
        RunError::Config(c) => config(py, c),
        _ => raise(py, Kind::Mechlab, e.to_string()),
    }
}

pub fn experiment(py: Python<'_>, e: &ExperimentError) -> PyErr {
    match e {
        ExperimentError::Config(c) => config(py, c),
        ExperimentError::Run(r) => run(py, r),
        ExperimentError::Checkpoint(c) => checkpoint(py, c),
        _ => raise(py, Kind::Mechlab, e.to_string()),
    }
}
