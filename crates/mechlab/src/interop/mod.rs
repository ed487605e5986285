//! Weights in and out of TransformerLens and nanoGPT: the engine's general transformer
//! ([`mechlab_engine::gpt`]) as a `HookedTransformer` state dict
//! (`model.safetensors`, TransformerLens's parameter names and layouts) beside a
//! `config.json` that `HookedTransformerConfig(**cfg)` accepts, and back.
//!
//! Only the layouts differ: mechlab stores linear maps as PyTorch's `nn.Linear`
//! does, `[out, in]`; TransformerLens per head and `x @ W`:
//!
//! | mechlab | TransformerLens |
//! |---|---|
//! | `blocks.l.attn.W_Q` `[H·d_head, d_model]` (also `W_K`, `W_V`) | `[H, d_model, d_head]`, `W_Q[h][i][c] = ours[h·d_head + c][i]` |
//! | `blocks.l.attn.b_Q` `[H·d_head]` | `[H, d_head]` |
//! | `blocks.l.attn.W_O` `[d_model, H·d_head]` | `[H, d_head, d_model]` |
//! | `blocks.l.mlp.W_in` `[d_mlp, d_model]`, `W_out` `[d_model, d_mlp]` | transposed |
//! | `unembed.W_U` `[d_vocab, d_model]` (or `embed.W_E` when tied) | `[d_model, d_vocab]` |
//! | `embed.W_E`, `pos_embed.W_pos`, biases `b_O`, `b_in`, `b_out`, `b_U`, LayerNorm `w`, `b` | the same |
//!
//! Values keep their dtype (an f32 run exports f32), so export then import is
//! bit-exact. TransformerLens has no learned relative-position bias, so an
//! `"rpe"` model does not export; a tied unembedding exports as its own copy of
//! `W_Eᵀ` (TransformerLens has no tying) and imports untied.
//!
//! ```
//! use mechlab::interop::{from_transformer_lens, to_transformer_lens};
//! use mechlab_engine::gpt::{Gpt, GptConfig};
//! use rand::SeedableRng;
//! let cfg = GptConfig { n_layers: 1, d_model: 4, n_heads: 2, d_head: 2, n_ctx: 3, d_vocab: 5, ..GptConfig::default() };
//! let m = Gpt::<f32>::new(&cfg, &mut rand_chacha::ChaCha8Rng::seed_from_u64(0)).unwrap();
//! let (tensors, json) = to_transformer_lens(&m).unwrap();
//! assert_eq!(tensors.iter().find(|t| t.0 == "blocks.0.attn.W_Q").unwrap().1, vec![2, 4, 2]);
//! let back = from_transformer_lens::<f32>(&json, &tensors).unwrap();
//! assert_eq!(back.param("blocks.0.attn.W_Q").unwrap().value(), m.param("blocks.0.attn.W_Q").unwrap().value());
//! ```
//!
//! `transformer_lens` holds TransformerLens's layouts, `nanogpt` nanoGPT's
//! (a narrower model: see [`to_nanogpt`]); this module the folder's files and
//! the model a checkpoint holds.

mod nanogpt;
#[cfg(test)]
mod tests;
mod transformer_lens;

pub use nanogpt::{from_nanogpt, is_nanogpt, nanogpt_config, to_nanogpt};
pub use transformer_lens::{from_transformer_lens, gpt_config, to_transformer_lens};

use mechlab_engine::gpt::{ActFn, Gpt, GptConfig, Normalization, PositionalEmbedding};
use mechlab_engine::Float;
use rand::SeedableRng;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// One tensor: name, shape, row-major values.
pub type Named<T> = (String, Vec<usize>, Vec<T>);

/// A state dict by name, its tensors read with the shape the config implies.
pub(crate) struct Dict<'a, T>(BTreeMap<&'a str, (&'a Vec<usize>, &'a Vec<T>)>);

impl<'a, T> Dict<'a, T> {
    pub(crate) fn new(tensors: &'a [Named<T>]) -> Self {
        Dict(
            tensors
                .iter()
                .map(|(n, s, x)| (n.as_str(), (s, x)))
                .collect(),
        )
    }

    /// Tensor `name`, which must have `shape`; the error names both.
    pub(crate) fn get(&self, name: &str, shape: &[usize]) -> Result<&'a Vec<T>, String> {
        match self.0.get(name) {
            None => Err(format!("the state dict has no {name}")),
            Some((s, _)) if s.as_slice() != shape => Err(format!(
                "{name} has shape {s:?}, expected {shape:?} from config.json"
            )),
            Some((_, x)) => Ok(x),
        }
    }

    /// Tensor `name`, if the state dict has it.
    pub(crate) fn find(&self, name: &str) -> Option<&'a Vec<T>> {
        self.0.get(name).map(|(_, x)| *x)
    }
}

/// The state-dict file and the config file of an export folder.
pub const STATE: &str = "model.safetensors";
pub const CONFIG: &str = "config.json";

fn value<T: Float>(m: &Gpt<T>, name: &str) -> Result<Vec<T>, String> {
    m.param(name)
        .map(|p| p.value().to_vec())
        .ok_or_else(|| format!("the model has no {name}"))
}

/// Writes `model.safetensors` and `config.json` into `dir`.
pub fn write<T: Float>(dir: &Path, tensors: &[Named<T>], cfg: &Value) -> Result<(), String> {
    let bad = |e: String| format!("{}: {e}", dir.display());
    std::fs::create_dir_all(dir).map_err(|e| bad(e.to_string()))?;
    let dtype = if T::BYTES == 4 {
        safetensors::Dtype::F32
    } else {
        safetensors::Dtype::F64
    };
    if T::DTYPE == "f64x2" {
        return Err("a double-double model does not export".into());
    }
    let bytes: Vec<Vec<u8>> = tensors
        .iter()
        .map(|(_, _, x)| {
            let mut b = Vec::with_capacity(x.len() * T::BYTES);
            x.iter().for_each(|v| v.write_le(&mut b));
            b
        })
        .collect();
    let views = tensors
        .iter()
        .zip(&bytes)
        .map(|((n, s, _), b)| {
            safetensors::tensor::TensorView::new(dtype, s.clone(), b)
                .map(|v| (n.clone(), v))
                .map_err(|e| bad(e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let data = safetensors::serialize(views, None).map_err(|e| bad(e.to_string()))?;
    crate::run::atomic::write(&dir.join(STATE), &data).map_err(|e| bad(e.to_string()))?;
    let text = serde_json::to_string_pretty(cfg).expect("JSON serialises");
    crate::run::atomic::write(&dir.join(CONFIG), text.as_bytes()).map_err(|e| bad(e.to_string()))
}

/// Reads an export folder: its config and its tensors in `T` (f32 or f64 files).
pub fn read<T: Float>(dir: &Path) -> Result<(Value, Vec<Named<T>>), String> {
    let cp = dir.join(CONFIG);
    let bad = |p: &Path, e: String| format!("{}: {e}", p.display());
    let text = std::fs::read_to_string(&cp).map_err(|e| bad(&cp, e.to_string()))?;
    let cfg: Value = serde_json::from_str(&text).map_err(|e| bad(&cp, e.to_string()))?;
    let sp = dir.join(STATE);
    let bytes = std::fs::read(&sp).map_err(|e| bad(&sp, e.to_string()))?;
    let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| bad(&sp, e.to_string()))?;
    let mut out = Vec::new();
    for (name, view) in st.tensors() {
        let data: Vec<T> = match view.dtype() {
            safetensors::Dtype::F32 => view
                .data()
                .chunks_exact(4)
                .map(|c| T::of(f32::from_le_bytes(c.try_into().expect("4")) as f64))
                .collect(),
            safetensors::Dtype::F64 => view
                .data()
                .chunks_exact(8)
                .map(|c| T::of(f64::from_le_bytes(c.try_into().expect("8"))))
                .collect(),
            // TransformerLens's boolean mask buffers and the like
            _ => continue,
        };
        out.push((name, view.shape().to_vec(), data));
    }
    Ok((cfg, out))
}

/// A model from an export folder's config and tensors, TransformerLens's or nanoGPT's.
pub fn from_export<T: Float>(cfg: &Value, tensors: &[Named<T>]) -> Result<Gpt<T>, String> {
    if is_nanogpt(cfg) {
        from_nanogpt(cfg, tensors)
    } else {
        from_transformer_lens(cfg, tensors)
    }
}

/// The engine's config of a checkpoint that holds a [`Gpt`]: every size from
/// the tensors' shapes, the head count and activation (which shapes cannot
/// tell) given.
pub fn config_from_shapes<T>(
    tensors: &BTreeMap<String, (Vec<usize>, Vec<T>)>,
    n_heads: usize,
    act_fn: ActFn,
) -> Result<GptConfig, String> {
    let shape = |n: &str| tensors.get(n).map(|(s, _)| s.clone());
    let we = shape("embed.W_E").ok_or("the checkpoint has no embed.W_E: not a transformer")?;
    let (d_vocab, d_model) = (we[0], we[1]);
    let n_layers = (0..)
        .take_while(|l| tensors.contains_key(&format!("blocks.{l}.attn.W_Q")))
        .count();
    let hd = shape("blocks.0.attn.W_Q")
        .map(|s| s[0])
        .ok_or("the checkpoint has no blocks.0.attn.W_Q")?;
    if n_heads == 0 || hd % n_heads != 0 {
        return Err(format!(
            "model.n_heads = {n_heads} does not divide the {hd} query rows of blocks.0.attn.W_Q"
        ));
    }
    let d_mlp = shape("blocks.0.mlp.W_in").map_or(0, |s| s[0]);
    let (n_ctx, pos) = match (shape("pos_embed.W_pos"), shape("blocks.0.attn.rpe")) {
        (Some(s), _) => (s[0], PositionalEmbedding::Standard),
        (None, Some(s)) => (s[1], PositionalEmbedding::Rpe),
        (None, None) => {
            return Err("the checkpoint has no positions (pos_embed.W_pos or an rpe table)".into())
        }
    };
    Ok(GptConfig {
        n_layers,
        d_model,
        n_heads,
        d_head: hd / n_heads,
        d_mlp,
        attn_only: d_mlp == 0,
        act_fn,
        n_ctx,
        d_vocab,
        normalization: if tensors.contains_key("ln_final.w") {
            Normalization::LN
        } else {
            Normalization::None
        },
        positional_embedding_type: pos,
        tied_embeddings: !tensors.contains_key("unembed.W_U"),
        init_range: 0.02,
    })
}

/// The [`Gpt`] a checkpoint's tensors hold (see [`config_from_shapes`]).
pub fn gpt_from_tensors<T: Float>(
    tensors: &BTreeMap<String, (Vec<usize>, Vec<T>)>,
    n_heads: usize,
    act_fn: ActFn,
) -> Result<Gpt<T>, String> {
    let g = config_from_shapes(tensors, n_heads, act_fn)?;
    let mut m = Gpt::<T>::new(&g, &mut rand_chacha::ChaCha8Rng::seed_from_u64(0))?;
    for p in m.params.iter_mut() {
        match tensors.get(p.name()) {
            Some((s, x)) if s.as_slice() == p.shape() => p.value_mut().copy_from_slice(x),
            Some((s, _)) => {
                return Err(format!(
                    "{} has shape {s:?}, the model {:?}",
                    p.name(),
                    p.shape()
                ))
            }
            None => return Err(format!("the checkpoint has no {}", p.name())),
        }
    }
    Ok(m)
}
