//! Checkpoints: a model's parameters, its optimiser's state and the trainer's
//! position, in one `.safetensors` file.
//!
//! Tensors are stored under their parameter names (`blocks.0.attn.W_Q`), the
//! optimiser's moments under `optim.m.<name>` and `optim.v.<name>`; the
//! `__metadata__` header carries a JSON [`CheckpointMeta`] under the key `mechlab`
//! (step, stage, optimiser update count, the data stream's position, ...). So the
//! file opens in Python with `safetensors.numpy.load_file` and resumes bit for bit
//! here.
//!
//! The metadata JSON opens with `"fnv64"`, a 64-bit FNV-1a digest of the rest of
//! the metadata and of every tensor's name, dtype, shape and bytes (it lives
//! inside the one metadata value because safetensors writes several in hash
//! order, which would make two identical runs' files differ). A flipped byte in
//! the tensor data still parses as safetensors, so without the digest a damaged
//! checkpoint would resume silently into different numbers; with it, any one
//! changed byte either fails to parse or fails the digest (FNV-1a maps a one-byte
//! change to a different digest), and `mechlab resume` falls back to an older
//! checkpoint. Files written before the digest existed still load when their
//! metadata has exactly the known fields.

use crate::run::atomic;
use mechlab_engine::{Float, Parameters};
use safetensors::tensor::{Dtype, TensorView};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Why a checkpoint could not be written, found or read.
#[derive(Debug, Error)]
pub enum CheckpointError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "{path}: not a readable checkpoint ({}); it may be truncated or corrupt",
        clean(reason)
    )]
    Corrupt { path: String, reason: String },
    #[error("{path}: no checkpoint found (expected checkpoints/step_XXXXXX.safetensors)")]
    Missing { path: String },
    #[error("{path}: {}", clean(reason))]
    Mismatch { path: String, reason: String },
}

/// A parser's reason as it may appear in a one-line message: the safetensors and
/// JSON parsers quote the bytes they failed on, which may be control characters.
fn clean(reason: &str) -> String {
    mechlab_engine::text::excerpt(reason, mechlab_engine::text::MESSAGE_CHARS)
}

/// The trainer's position and everything else a resume needs besides tensors.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CheckpointMeta {
    pub experiment: String,
    pub dtype: String,
    /// Updates taken in total.
    pub step: u64,
    /// Index of the stage whose optimiser state is stored (none before the first update).
    pub stage: Option<usize>,
    /// The optimiser's own update count (Adam bias correction).
    pub optimizer_updates: u64,
    /// The model's extra state (data stream position, epoch, ...).
    pub model_state: serde_json::Value,
    /// The loss of the update that led to this state, as `f64::to_bits` (exact
    /// through JSON), so that a run resumed at its last step reports the same
    /// final loss. Absent in older files and before the first update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_loss_bits: Option<u64>,
}

/// The file name of the checkpoint after `step` updates.
pub fn file_name(step: u64) -> String {
    format!("step_{step:06}.safetensors")
}

fn to_bytes<T: Float>(xs: &[T]) -> Vec<u8> {
    let mut out = Vec::with_capacity(xs.len() * T::BYTES);
    for &x in xs {
        x.write_le(&mut out);
    }
    out
}

fn dtype<T: Float>() -> Dtype {
    match T::BYTES {
        4 => Dtype::F32,
        // f64, and the double-double as (hi, lo) pairs of f64 ([`stored_shape`]).
        _ => Dtype::F64,
    }
}

/// f64 values per element: 2 for the double-double, which safetensors stores as
/// f64 with a trailing axis of 2 (`hi`, `lo`), so numpy and PyTorch read it.
fn lanes<T: Float>() -> usize {
    (T::BYTES / 8).max(1)
}

/// The shape a tensor of `shape` is stored under.
fn stored_shape<T: Float>(shape: &[usize]) -> Vec<usize> {
    let mut s = shape.to_vec();
    if lanes::<T>() > 1 {
        s.push(lanes::<T>());
    }
    s
}

/// An optimiser's first and second moments, per parameter in visit order.
pub type OptimizerMoments<'a, T> = (&'a [Vec<T>], &'a [Vec<T>]);

/// Writes a checkpoint atomically.
pub fn save<T: Float>(
    path: &Path,
    model: &dyn Parameters<T>,
    optimizer: Option<OptimizerMoments<'_, T>>,
    meta: &CheckpointMeta,
) -> Result<(), CheckpointError> {
    let io = |source| CheckpointError::Io {
        path: path.display().to_string(),
        source,
    };
    // (name, shape, bytes), collected first because TensorView borrows the bytes.
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    let mut i = 0;
    model.visit(&mut |p| {
        tensors.push((
            p.name().to_string(),
            p.shape().to_vec(),
            to_bytes(p.value()),
        ));
        if let Some((m, v)) = optimizer {
            if !m[i].is_empty() {
                tensors.push((
                    format!("optim.m.{}", p.name()),
                    p.shape().to_vec(),
                    to_bytes(&m[i]),
                ));
            }
            if !v[i].is_empty() {
                tensors.push((
                    format!("optim.v.{}", p.name()),
                    p.shape().to_vec(),
                    to_bytes(&v[i]),
                ));
            }
        }
        i += 1;
    });
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(n, s, b)| {
            TensorView::new(dtype::<T>(), stored_shape::<T>(s), b)
                .map(|v| (n.clone(), v))
                .map_err(|e| CheckpointError::Corrupt {
                    path: path.display().to_string(),
                    reason: e.to_string(),
                })
        })
        .collect::<Result<_, _>>()?;
    let meta_json = serde_json::to_string(meta).expect("metadata serialises");
    let mut sorted: Vec<_> = tensors
        .iter()
        .map(|(n, s, b)| (n, stored_shape::<T>(s), b))
        .collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    let sum = digest(
        &meta_json,
        sorted
            .iter()
            .map(|(n, s, b)| (n.as_str(), dtype::<T>(), s.as_slice(), b.as_slice())),
    );
    let mut md = HashMap::new();
    md.insert("mechlab".to_string(), with_digest(&meta_json, sum));
    let bytes = safetensors::serialize(views, Some(md)).map_err(|e| CheckpointError::Corrupt {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    atomic::write(path, &bytes).map_err(io)
}

/// A checkpoint read back into memory.
pub struct Loaded<T> {
    pub path: PathBuf,
    pub meta: CheckpointMeta,
    pub tensors: BTreeMap<String, (Vec<usize>, Vec<T>)>,
}

/// How the stored metadata opens: the digest comes first, in a fixed place.
const DIGEST_OPEN: &str = "{\"fnv64\":\"";

/// `{"a":1}` with digest `d` → `{"fnv64":"<d as 16 hex digits>","a":1}`.
fn with_digest(meta_json: &str, sum: u64) -> String {
    format!("{DIGEST_OPEN}{sum:016x}\",{}", &meta_json[1..])
}

/// Splits stored metadata into (digest, the metadata JSON it covers), or `None`
/// for metadata without a digest.
fn split_digest(stored: &str) -> Option<(&str, String)> {
    let rest = stored.strip_prefix(DIGEST_OPEN)?;
    let (hex, tail) = (rest.get(..16)?, rest.get(16..)?);
    let tail = tail.strip_prefix("\",")?;
    Some((hex, format!("{{{tail}")))
}

/// The fields of [`CheckpointMeta`], for telling a pre-digest file from a
/// damaged one.
const META_FIELDS: [&str; 7] = [
    "experiment",
    "dtype",
    "step",
    "stage",
    "optimizer_updates",
    "model_state",
    "last_loss_bits",
];

/// 64-bit FNV-1a over the metadata JSON and each `(name, dtype, shape, bytes)`,
/// with lengths folded in so that no two different layouts share a byte stream.
fn digest<'a>(
    meta_json: &str,
    tensors: impl Iterator<Item = (&'a str, Dtype, &'a [usize], &'a [u8])>,
) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    let mut field = |bytes: &[u8]| {
        eat(&(bytes.len() as u64).to_le_bytes());
        eat(bytes);
    };
    field(meta_json.as_bytes());
    for (name, dt, shape, data) in tensors {
        field(name.as_bytes());
        field(format!("{dt:?}").as_bytes());
        let dims: Vec<u8> = shape
            .iter()
            .flat_map(|d| (*d as u64).to_le_bytes())
            .collect();
        field(&dims);
        field(data);
    }
    h
}

/// A checkpoint file parsed and checked against its digest, its tensors still
/// in the file's bytes.
struct Checked {
    meta: CheckpointMeta,
    bytes: Vec<u8>,
}

fn read_checked(path: &Path) -> Result<Checked, CheckpointError> {
    let p = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| CheckpointError::Io {
        path: p.clone(),
        source,
    })?;
    let corrupt = |reason: String| CheckpointError::Corrupt {
        path: p.clone(),
        reason,
    };
    let (_, header) =
        safetensors::SafeTensors::read_metadata(&bytes).map_err(|e| corrupt(e.to_string()))?;
    let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| corrupt(e.to_string()))?;
    let md = header.metadata().clone().unwrap_or_default();
    let stored = md
        .get("mechlab")
        .ok_or_else(|| corrupt("no mechlab metadata".into()))?;
    let meta_json = match split_digest(stored) {
        Some((hex, meta_json)) => {
            let mut views = st.tensors();
            views.sort_by(|a, b| a.0.cmp(&b.0));
            let sum = digest(
                &meta_json,
                views
                    .iter()
                    .map(|(n, v)| (n.as_str(), v.dtype(), v.shape(), v.data())),
            );
            if hex != format!("{sum:016x}") {
                return Err(corrupt("its contents do not match its digest".into()));
            }
            meta_json
        }
        None => {
            // Written before digests, or a digest damaged out of shape: only the
            // first has exactly the known fields.
            let fields: serde_json::Map<String, serde_json::Value> =
                serde_json::from_str(stored).map_err(|e| corrupt(format!("metadata: {e}")))?;
            if let Some(k) = fields.keys().find(|k| !META_FIELDS.contains(&k.as_str())) {
                return Err(corrupt(format!("unexpected metadata field {k:?}")));
            }
            stored.clone()
        }
    };
    let meta: CheckpointMeta =
        serde_json::from_str(&meta_json).map_err(|e| corrupt(format!("metadata: {e}")))?;
    Ok(Checked { meta, bytes })
}

/// Checks that a checkpoint is intact (parses, and matches its digest) and
/// returns its metadata, whatever float width it stores.
pub fn verify(path: &Path) -> Result<CheckpointMeta, CheckpointError> {
    read_checked(path).map(|c| c.meta)
}

/// Reads a checkpoint written by [`save`] (or any safetensors file of `T`'s dtype
/// with mechlab metadata), checking its digest.
pub fn load<T: Float>(path: &Path) -> Result<Loaded<T>, CheckpointError> {
    let p = path.display().to_string();
    let Checked { meta, bytes } = read_checked(path)?;
    let st =
        safetensors::SafeTensors::deserialize(&bytes).map_err(|e| CheckpointError::Corrupt {
            path: p.clone(),
            reason: e.to_string(),
        })?;
    let mut tensors = BTreeMap::new();
    for (name, view) in st.tensors() {
        if view.dtype() != dtype::<T>() {
            return Err(CheckpointError::Mismatch {
                path: p.clone(),
                reason: format!(
                    "tensor {name} is {:?}, the run computes in {}",
                    view.dtype(),
                    T::DTYPE
                ),
            });
        }
        let mut shape = view.shape().to_vec();
        if lanes::<T>() > 1 {
            if shape.last() != Some(&lanes::<T>()) {
                return Err(CheckpointError::Mismatch {
                    path: p.clone(),
                    reason: format!(
                        "tensor {name} has shape {shape:?}; a {} run stores a last axis of {} (hi, lo)",
                        T::DTYPE,
                        lanes::<T>()
                    ),
                });
            }
            shape.pop();
        }
        let data: Vec<T> = view.data().chunks_exact(T::BYTES).map(T::read_le).collect();
        tensors.insert(name, (shape, data));
    }
    Ok(Loaded {
        path: path.to_path_buf(),
        meta,
        tensors,
    })
}

impl<T: Float> Loaded<T> {
    /// Copies the stored parameters into `model`, checking names and shapes.
    pub fn apply_params(&self, model: &mut dyn Parameters<T>) -> Result<(), CheckpointError> {
        let mut err = None;
        model.visit_mut(&mut |p| {
            if err.is_some() {
                return;
            }
            match self.tensors.get(p.name()) {
                Some((shape, data)) if shape.as_slice() == p.shape() => {
                    p.value_mut().copy_from_slice(data)
                }
                Some((shape, _)) => {
                    err = Some(format!(
                        "parameter {} has shape {shape:?} in the checkpoint, {:?} in the model",
                        p.name(),
                        p.shape()
                    ))
                }
                None => err = Some(format!("parameter {} is missing", p.name())),
            }
        });
        match err {
            Some(reason) => Err(CheckpointError::Mismatch {
                path: self.path.display().to_string(),
                reason,
            }),
            None => Ok(()),
        }
    }

    /// The optimiser's moments in the model's visit order (empty where not stored).
    pub fn optimizer_state(&self, model: &dyn Parameters<T>) -> (Vec<Vec<T>>, Vec<Vec<T>>) {
        let mut m = Vec::new();
        let mut v = Vec::new();
        model.visit(&mut |p| {
            let get = |k: String| {
                self.tensors
                    .get(&k)
                    .map(|(_, d)| d.clone())
                    .unwrap_or_default()
            };
            m.push(get(format!("optim.m.{}", p.name())));
            v.push(get(format!("optim.v.{}", p.name())));
        });
        (m, v)
    }
}

/// Every checkpoint in a folder, as (step, path), sorted by step.
pub fn list(dir: &Path) -> Vec<(u64, PathBuf)> {
    let mut out: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let step = name.strip_prefix("step_")?.strip_suffix(".safetensors")?;
            Some((step.parse().ok()?, e.path()))
        })
        .collect();
    out.sort();
    out
}

/// The latest checkpoint in a folder.
pub fn latest(dir: &Path) -> Result<PathBuf, CheckpointError> {
    list(dir)
        .pop()
        .map(|(_, p)| p)
        .ok_or_else(|| CheckpointError::Missing {
            path: dir.display().to_string(),
        })
}

/// The default schedule: 0, 1, 2, 4, ..., up to `log_until`, then every `every`
/// steps, and always the last step.
pub fn scheduled(step: u64, log_until: u64, every: u64, last: u64) -> bool {
    step == last
        || (step <= log_until && (step == 0 || step.is_power_of_two()))
        || (every > 0 && step.is_multiple_of(every))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_damaged_header_is_named_with_its_bytes_escaped() {
        // Found by the `checkpoint` fuzz target: a DEL byte in a dtype name
        // reached the terminal raw.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("step_000001.safetensors");
        let header = b"{\"t\":{\"dtype\":\"F\x7f4\",\"shape\":[1],\"data_offsets\":[0,8]}}";
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header);
        bytes.extend_from_slice(&[0; 8]);
        std::fs::write(&p, &bytes).unwrap();
        let e = super::verify(&p).unwrap_err().to_string();
        assert!(
            e.contains("step_000001") && !e.chars().any(char::is_control),
            "{e:?}"
        );
    }

    /// A double-double checkpoint stores (hi, lo) pairs as f64 `[.., 2]` and reads
    /// back every bit; an f64 run refuses it by shape.
    #[test]
    fn double_double_round_trips_both_words() {
        use mechlab_engine::{param, F64x2, Float, Param, Parameters};
        struct M(Param<F64x2>);
        impl Parameters<F64x2> for M {
            fn visit(&self, f: &mut dyn FnMut(&Param<F64x2>)) {
                f(&self.0)
            }
            fn visit_mut(&mut self, f: &mut dyn FnMut(&mut Param<F64x2>)) {
                f(&mut self.0)
            }
        }
        let third = F64x2::of(1.0) / F64x2::of(3.0);
        let m = M(param("w", "w", &[2], vec![third, -third]));
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("step_000001.safetensors");
        let meta = super::CheckpointMeta {
            experiment: "x".into(),
            dtype: F64x2::DTYPE.into(),
            step: 1,
            stage: None,
            optimizer_updates: 0,
            model_state: serde_json::Value::Null,
            last_loss_bits: None,
        };
        super::save(&p, &m, None, &meta).unwrap();
        super::verify(&p).unwrap();
        let back = super::load::<F64x2>(&p).unwrap();
        let (shape, v) = &back.tensors["w"];
        assert_eq!(shape, &vec![2]);
        assert_eq!((v[0].hi(), v[0].lo()), (third.hi(), third.lo()));
        assert_ne!(v[0].lo(), 0.0);
        let as_f64 = super::load::<f64>(&p).unwrap();
        assert_eq!(as_f64.tensors["w"].0, vec![2, 2]);
    }
}
