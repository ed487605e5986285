//! A Python batch function as the `transformer` experiment's generator: the
//! training thread takes the GIL only while the function runs, and a raise
//! becomes the run's error with its traceback, naming the step.

use mechlab::papers::transformer::source::{BatchFn, GenBatch, Generator, Handover, PatternFn};
use numpy::{PyArrayMethods, PyReadonlyArray2, PyReadonlyArray3, PyUntypedArrayMethods};
use pyo3::prelude::*;

/// `call(step) -> (tokens int64 [B, L], mask bool [B, L] or None)`, as the
/// Python layer (`mechlab.train`) wraps the user's `fn(step, rng)`.
struct PyBatchFn(Py<PyAny>);

/// A Python exception as its formatted traceback.
pub fn traceback(py: Python<'_>, e: &PyErr) -> String {
    let formatted = py
        .import("traceback")
        .and_then(|tb| tb.call_method1("format_exception", (e.value(py),)))
        .and_then(|lines| lines.extract::<Vec<String>>());
    match formatted {
        Ok(lines) => lines.concat().trim_end().to_string(),
        Err(_) => e.to_string(),
    }
}

impl BatchFn for PyBatchFn {
    fn call(&mut self, step: i64) -> Result<GenBatch, String> {
        Python::attach(|py| {
            let at = if step < 0 {
                "held-out batch (step −1)".to_string()
            } else {
                format!("step {step}")
            };
            let out = self
                .0
                .bind(py)
                .call1((step,))
                .map_err(|e| format!("generator, {at}: it raised\n{}", traceback(py, &e)))?;
            let (tok, mask): (Bound<'_, PyAny>, Bound<'_, PyAny>) =
                out.extract().map_err(|_| {
                    format!("generator, {at}: expected (tokens, mask) from the wrapper")
                })?;
            let arr: PyReadonlyArray2<'_, i64> = tok
                .extract()
                .map_err(|_| format!("generator, {at}: tokens are not a 2-D int64 array"))?;
            let shape = arr.shape().to_vec();
            let tokens = arr.as_array().iter().copied().collect();
            let mask = if mask.is_none() {
                None
            } else {
                let m: PyReadonlyArray2<'_, bool> = mask
                    .extract()
                    .map_err(|_| format!("generator, {at}: the mask is not a 2-D bool array"))?;
                if m.shape() != &shape[..] {
                    return Err(format!(
                        "generator, {at}: the mask has shape {:?}, the tokens {shape:?}",
                        m.shape()
                    ));
                }
                Some(m.as_array().iter().copied().collect())
            };
            Ok(GenBatch {
                tokens,
                shape,
                mask,
            })
        })
    }
}

/// `call(x int64 [n, T]) -> [(name, float64 [n, T, T]), ...]`, as the Python
/// layer (`mechlab.train(patterns=...)`) wraps the user's pattern functions.
struct PyPatternFn(Py<PyAny>);

impl PatternFn for PyPatternFn {
    fn call(&mut self, x: &[u32], n: usize, t: usize) -> Result<Vec<(String, Vec<f64>)>, String> {
        Python::attach(|py| {
            let arr = numpy::PyArray1::from_iter(py, x.iter().map(|&v| i64::from(v)))
                .reshape([n, t])
                .map_err(|e| e.to_string())?;
            let out = self.0.bind(py).call1((arr,)).map_err(|e| {
                format!("patterns: a pattern function raised\n{}", traceback(py, &e))
            })?;
            let pairs: Vec<(String, PyReadonlyArray3<'_, f64>)> = out.extract().map_err(|_| {
                "patterns: expected [(name, float64 [n, T, T])] from the wrapper".to_string()
            })?;
            Ok(pairs
                .into_iter()
                .map(|(k, a)| (k, a.as_array().iter().copied().collect()))
                .collect())
        })
    }
}

/// The run input for Python callables: a batch generator and the pattern
/// functions' wrapper (`None` each when not given).
pub fn input(
    generator: Option<&Bound<'_, PyAny>>,
    patterns: Option<&Bound<'_, PyAny>>,
) -> mechlab::commands::Input {
    if generator.is_none() && patterns.is_none() {
        return None;
    }
    Some(Box::new(Handover {
        generator: generator.map(|f| Generator(Box::new(PyBatchFn(f.clone().unbind())))),
        patterns: patterns.map(|f| Box::new(PyPatternFn(f.clone().unbind())) as Box<dyn PatternFn>),
    }))
}
