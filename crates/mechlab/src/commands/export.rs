//! `mechlab export <run> --npy`: a run's parameters (and recorded activations) as
//! `.npy` files numpy loads directly.
//!
//! Reads the chosen checkpoint (the latest by default) and, when the experiment
//! recorded them, `activations.safetensors` (tensors under TransformerLens hook
//! names such as `blocks.0.attn.hook_pattern`), and writes one `<name>.npy` per
//! tensor into `<run>/export/`. Optimiser moments are left out.

use crate::run::checkpoint::{self, CheckpointError};
use crate::run::{atomic, io_err, RunError};
use safetensors::tensor::Dtype;
use std::path::{Path, PathBuf};

/// Encodes a little-endian array as an NPY v1.0 file.
pub fn npy_bytes(descr: &str, shape: &[usize], data: &[u8]) -> Vec<u8> {
    let shape_txt = match shape.len() {
        0 => "()".to_string(),
        1 => format!("({},)", shape[0]),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header =
        format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_txt}, }}");
    // Magic (6) + version (2) + header length (2) + header, padded with spaces and
    // ended by a newline to a multiple of 64 bytes.
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - unpadded % 64) % 64));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + data.len());
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

fn descr(d: Dtype) -> Option<&'static str> {
    match d {
        Dtype::F64 => Some("<f8"),
        Dtype::F32 => Some("<f4"),
        Dtype::I64 => Some("<i8"),
        Dtype::I32 => Some("<i4"),
        Dtype::U8 => Some("|u1"),
        _ => None,
    }
}

/// Writes every tensor of a safetensors file (except optimiser state) as `.npy`.
fn export_file(src: &Path, dst: &Path, written: &mut Vec<PathBuf>) -> Result<(), RunError> {
    let bytes = std::fs::read(src).map_err(io_err(src))?;
    let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| RunError::Folder {
        path: src.display().to_string(),
        reason: format!("not a readable safetensors file ({e}); it may be truncated"),
    })?;
    for (name, view) in st.tensors() {
        if name.starts_with("optim.") {
            continue;
        }
        let Some(d) = descr(view.dtype()) else {
            continue;
        };
        let path = dst.join(format!("{name}.npy"));
        atomic::write(&path, &npy_bytes(d, view.shape(), view.data())).map_err(io_err(&path))?;
        written.push(path);
    }
    Ok(())
}

/// Exports the checkpoint at `step` (latest when `None`) and any recorded
/// activations of the run in `dir`; returns the files written.
pub fn export(dir: &Path, step: Option<u64>) -> Result<Vec<PathBuf>, RunError> {
    let ckdir = dir.join("checkpoints");
    let ck = match step {
        Some(s) => {
            let p = ckdir.join(checkpoint::file_name(s));
            if !p.exists() {
                return Err(RunError::Folder {
                    path: p.display().to_string(),
                    reason: "no such checkpoint".into(),
                });
            }
            p
        }
        None => checkpoint::latest(&ckdir).map_err(|e: CheckpointError| RunError::Folder {
            path: ckdir.display().to_string(),
            reason: e.to_string(),
        })?,
    };
    let out = dir.join("export");
    std::fs::create_dir_all(&out).map_err(io_err(&out))?;
    let mut written = Vec::new();
    export_file(&ck, &out, &mut written)?;
    let act = dir.join("activations.safetensors");
    if act.exists() {
        export_file(&act, &out, &mut written)?;
    }
    Ok(written)
}

/// Whose state dict [`model`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// TransformerLens's `HookedTransformer`.
    TransformerLens,
    /// karpathy/nanoGPT's `GPT`.
    NanoGpt,
}

/// [`model`] as a TransformerLens state dict.
pub fn transformer_lens(
    dir: &Path,
    step: Option<u64>,
    out: &Path,
) -> Result<Vec<PathBuf>, RunError> {
    model(dir, step, out, Format::TransformerLens)
}

/// Writes the transformer of the run in `dir` (checkpoint `step`, the latest
/// when `None`) as a `format` state dict and config into `out`
/// ([`crate::interop`]); returns the two files. The head count and activation
/// come from the run's `[model]` keys, every size from the checkpoint.
pub fn model(
    dir: &Path,
    step: Option<u64>,
    out: &Path,
    format: Format,
) -> Result<Vec<PathBuf>, RunError> {
    let (ck, n_heads, act_fn, dtype) = transformer_checkpoint(dir, step)?;
    let bad = |reason: String| RunError::Folder {
        path: dir.display().to_string(),
        reason,
    };
    match dtype.as_str() {
        "f32" => write_as::<f32>(&ck, n_heads, act_fn, out, format).map_err(bad)?,
        _ => write_as::<f64>(&ck, n_heads, act_fn, out, format).map_err(bad)?,
    }
    Ok(vec![
        out.join(crate::interop::STATE),
        out.join(crate::interop::CONFIG),
    ])
}

/// The transformer of the run in `dir` at checkpoint `step` as a
/// TransformerLens state dict in memory, every value widened to `f64`
/// (exactly, from an f32 run), with its `HookedTransformerConfig` keys and
/// whether the run is f32: what Python's `Model.W_Q` and `Model.cfg` read.
#[allow(clippy::type_complexity)]
pub fn transformer_lens_state(
    dir: &Path,
    step: Option<u64>,
) -> Result<(Vec<crate::interop::Named<f64>>, serde_json::Value, bool), RunError> {
    let (ck, n_heads, act_fn, dtype) = transformer_checkpoint(dir, step)?;
    let bad = |reason: String| RunError::Folder {
        path: dir.display().to_string(),
        reason,
    };
    if dtype == "f32" {
        let l = checkpoint::load::<f32>(&ck).map_err(|e| bad(e.to_string()))?;
        let m = crate::interop::gpt_from_tensors(&l.tensors, n_heads, act_fn).map_err(bad)?;
        let (t, j) = crate::interop::to_transformer_lens(&m).map_err(bad)?;
        let wide = t
            .into_iter()
            .map(|(n, s, x)| (n, s, x.into_iter().map(f64::from).collect()))
            .collect();
        Ok((wide, j, true))
    } else {
        let l = checkpoint::load::<f64>(&ck).map_err(|e| bad(e.to_string()))?;
        let m = crate::interop::gpt_from_tensors(&l.tensors, n_heads, act_fn).map_err(bad)?;
        let (t, j) = crate::interop::to_transformer_lens(&m).map_err(bad)?;
        Ok((t, j, false))
    }
}

/// The checkpoint of the run in `dir` at `step` with the head count, the
/// activation and the dtype the run's `[model]` keys give.
fn transformer_checkpoint(
    dir: &Path,
    step: Option<u64>,
) -> Result<(PathBuf, usize, mechlab_engine::gpt::ActFn, String), RunError> {
    let cfg_path = dir.join("config.toml");
    if !cfg_path.exists() {
        return Err(RunError::not_a_run(dir));
    }
    let table = crate::config::read_file(&cfg_path)?;
    let bad = |reason: String| RunError::Folder {
        path: dir.display().to_string(),
        reason,
    };
    let model = table.get("model").and_then(|v| v.as_table());
    let n_heads = model
        .and_then(|m| m.get("n_heads"))
        .and_then(|v| v.as_integer())
        .ok_or_else(|| {
            bad("its config has no model.n_heads: not a run of the engine's transformer".into())
        })?;
    let act_fn = match model.and_then(|m| m.get("act_fn")).and_then(|v| v.as_str()) {
        None | Some("gelu_new") => mechlab_engine::gpt::ActFn::GeluNew,
        Some("relu") => mechlab_engine::gpt::ActFn::Relu,
        Some("gelu") => mechlab_engine::gpt::ActFn::Gelu,
        Some(o) => return Err(bad(format!("model.act_fn = {o:?}: cannot export"))),
    };
    let ck = crate::analysis::RunDir::new(dir)
        .checkpoint(step)
        .map_err(|e| bad(e.to_string()))?;
    let meta = checkpoint::verify(&ck).map_err(|e| bad(e.to_string()))?;
    if !matches!(meta.dtype.as_str(), "f32" | "f64") {
        return Err(bad(format!(
            "a {} checkpoint does not export (f32 and f64 do)",
            meta.dtype
        )));
    }
    Ok((ck, n_heads as usize, act_fn, meta.dtype))
}

fn write_as<T: mechlab_engine::Float>(
    ck: &Path,
    n_heads: usize,
    act_fn: mechlab_engine::gpt::ActFn,
    out: &Path,
    format: Format,
) -> Result<(), String> {
    let l = checkpoint::load::<T>(ck).map_err(|e| e.to_string())?;
    let m = crate::interop::gpt_from_tensors(&l.tensors, n_heads, act_fn)?;
    let (t, j) = match format {
        Format::TransformerLens => crate::interop::to_transformer_lens(&m)?,
        Format::NanoGpt => crate::interop::to_nanogpt(&m)?,
    };
    crate::interop::write(out, &t, &j)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npy_header_is_aligned_and_parsable() {
        let data: Vec<u8> = [1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let b = npy_bytes("<f8", &[2, 3], &data);
        assert_eq!(&b[..6], b"\x93NUMPY");
        let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
        assert_eq!((10 + hlen) % 64, 0);
        let header = std::str::from_utf8(&b[10..10 + hlen]).unwrap();
        assert!(header.contains("'shape': (2, 3)"), "{header}");
        assert!(header.ends_with('\n'));
        assert_eq!(&b[10 + hlen..], &data[..]);
    }
}
