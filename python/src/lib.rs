//! `mechlab._native`: the native half of the `mechlab` Python package.
//!
//! It holds no lab logic of its own: every function resolves, runs or reads
//! through the `mechlab` crate, exactly as the CLI does, and converts at the
//! border: Python values into TOML overrides, errors into the Python exceptions
//! of `mechlab._errors`, tensors into numpy arrays that own the Rust buffers
//! (no copy). The pure-Python layer (`python/mechlab/`) builds the friendly API
//! (`Run`, pandas frames, tqdm bars) on top of these functions.

mod errors;
mod files;
mod generator;
mod jobs;
mod model;
mod pretrained;
mod values;

use pyo3::prelude::*;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(values::presets, m)?)?;
    m.add_function(wrap_pyfunction!(values::config_json, m)?)?;
    m.add_function(wrap_pyfunction!(files::read_config_json, m)?)?;
    m.add_function(wrap_pyfunction!(files::read_summary_json, m)?)?;
    m.add_function(wrap_pyfunction!(files::metrics, m)?)?;
    m.add_function(wrap_pyfunction!(files::steps, m)?)?;
    m.add_function(wrap_pyfunction!(files::checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(files::export_model, m)?)?;
    m.add_function(wrap_pyfunction!(files::transformer_lens_state, m)?)?;
    m.add_function(wrap_pyfunction!(files::attention_html, m)?)?;
    m.add_function(wrap_pyfunction!(files::encode_text, m)?)?;
    m.add_function(wrap_pyfunction!(files::token_pieces, m)?)?;
    m.add_function(wrap_pyfunction!(files::decode_ids, m)?)?;
    m.add_function(wrap_pyfunction!(jobs::run, m)?)?;
    m.add_function(wrap_pyfunction!(jobs::resume, m)?)?;
    m.add_function(wrap_pyfunction!(jobs::run_dir, m)?)?;
    m.add_function(wrap_pyfunction!(jobs::sweep, m)?)?;
    m.add_function(wrap_pyfunction!(jobs::reproduce, m)?)?;
    m.add_class::<model::Model>()?;
    m.add_function(wrap_pyfunction!(model::load_model, m)?)?;
    m.add_function(wrap_pyfunction!(model::intervene, m)?)?;
    m.add_function(wrap_pyfunction!(model::measure, m)?)?;
    m.add_class::<pretrained::Tokenizer>()?;
    m.add_function(wrap_pyfunction!(pretrained::load_pretrained, m)?)?;
    Ok(())
}
