//! A pretrained encoder from Python: `load_pretrained(path)` gives the hooked
//! model (the same `Model` class as a run's) and its tokenizer.

use crate::errors::{self, Kind};
use crate::model::Model;
use mechlab::pretrained::{Pretrained, PretrainedError};
use numpy::ndarray::Array2;
use numpy::IntoPyArray;
use pyo3::prelude::*;
use std::sync::Mutex;

fn err(py: Python<'_>, e: &PretrainedError) -> PyErr {
    match e {
        PretrainedError::Path(c) => errors::config(py, c),
        PretrainedError::Input(_) => errors::raise(py, Kind::Hook, e.to_string()),
        _ => errors::raise(py, Kind::Mechlab, e.to_string()),
    }
}

/// A pretrained model's tokenizer: texts to padded token ids and pieces.
#[pyclass(module = "mechlab._native", name = "Tokenizer")]
pub struct Tokenizer {
    inner: mechlab::pretrained::Tokenizer,
}

#[pymethods]
impl Tokenizer {
    /// Token ids `[batch, seq]` (int64, `[CLS] … [SEP]`, padded with the pad id
    /// to the longest text) and each text's pieces.
    fn encode<'py>(
        &self,
        py: Python<'py>,
        texts: Vec<String>,
    ) -> PyResult<(Bound<'py, PyAny>, Vec<Vec<String>>)> {
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let (batch, enc) = self.inner.encode(&refs).map_err(|e| err(py, &e))?;
        let ids: Vec<i64> = batch.tokens.iter().map(|&t| i64::from(t)).collect();
        let a = Array2::from_shape_vec((batch.batch, batch.seq_len), ids)
            .map_err(|e| errors::raise(py, Kind::Mechlab, e.to_string()))?;
        let pieces = enc.into_iter().map(|e| e.tokens).collect();
        Ok((a.into_pyarray(py).into_any(), pieces))
    }

    /// The piece of vocabulary id `id`, or None.
    fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.pieces.id_to_token(id)
    }

    #[getter]
    fn pad_token_id(&self) -> u32 {
        self.inner.pad_token_id
    }

    #[getter]
    fn vocab_size(&self) -> usize {
        self.inner.pieces.vocab_size()
    }

    /// The longest input in pieces (the model's `max_position_embeddings`).
    #[getter]
    fn n_ctx(&self) -> usize {
        self.inner.n_ctx
    }
}

/// Loads a Hugging Face BERT folder (or a name in the shared models folder):
/// `(model, tokenizer, folder)`.
#[pyfunction]
pub fn load_pretrained(py: Python<'_>, path: String) -> PyResult<(Model, Tokenizer, String)> {
    let p = py
        .detach(|| Pretrained::load(&path))
        .map_err(|e| err(py, &e))?;
    let dir = p.dir.display().to_string();
    Ok((
        Model::new(Mutex::new(Box::new(p.model)), 0, false),
        Tokenizer { inner: p.tokenizer },
        dir,
    ))
}
