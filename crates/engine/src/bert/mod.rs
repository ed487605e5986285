//! A pretrained BERT-family encoder for inference: loaded offline from a Hugging
//! Face folder (`config.json` + `model.safetensors`), run in `f32` over the engine's
//! layers, its activations read and changed through [`crate::hooks::HookedModel`].
//!
//! The computation is `transformers.BertModel`'s: word + position + token-type
//! embeddings and a layer norm, then per layer multi-head self-attention with a
//! padding mask, a residual and a layer norm (post-norm), an exact (erf) GELU
//! feed-forward, a residual and a layer norm. Every sequence has token type 0 and
//! positions `0..T`; tokens equal to the config's `pad_token_id` are padding and
//! are never attended to (Hugging Face's `attention_mask`). Layer-norm statistics
//! and the GELU are computed in `f64`; the output is the last hidden state
//! `[batch, pos, d_model]`.
//!
//! One concept per file: [`config`] (the `config.json` fields), [`weights`] (tensors
//! by name), [`encoder`] (the forward pass over preallocated per-chunk buffers,
//! parallel over the batch) and [`hooked`] (TransformerLens hook points and
//! interventions). Bad input gives a [`BertError`] naming the file.
//!
//! ```no_run
//! use mechlab_engine::bert::Bert;
//! use mechlab_engine::hooks::{Batch, HookedModel};
//! let mut bert = Bert::load("../shared/models/all-MiniLM-L6-v2".as_ref()).unwrap();
//! // [CLS] hello world [SEP]
//! let batch = Batch::new(vec![101, 7592, 2088, 102], 1, 4);
//! let (out, cache) = bert.run_with_cache(&batch, &["blocks.0.attn.hook_pattern"]).unwrap();
//! assert_eq!(out.shape, [1, 4, 384]);
//! assert_eq!(cache["blocks.0.attn.hook_pattern"].shape, [1, 12, 4, 4]);
//! ```

pub mod config;
pub mod encoder;
pub mod grad;
pub mod hooked;
pub mod weights;

pub use config::BertConfig;
pub use encoder::{Bert, Site};
pub use weights::{BertWeights, LayerWeights};

use thiserror::Error;

/// Why a model folder could not be loaded. Every message is one line that names
/// the file; text that came from the file (a dtype name, a tensor name, a parser's
/// quote of the bytes it choked on) is shown escaped and cut short by `clean`, so
/// a damaged header cannot write control characters to the terminal.
#[derive(Debug, Error)]
pub enum BertError {
    #[error("{}: {source}", clean(.file))]
    Io {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {}: {}", clean(.file), clean(.key), clean(.reason))]
    Config {
        file: String,
        key: String,
        reason: String,
    },
    #[error("{}: {}", clean(.file), clean(.reason))]
    Weights { file: String, reason: String },
    #[error("{}: missing tensor `{}`", clean(.file), clean(.name))]
    MissingTensor { file: String, name: String },
    #[error("{}: tensor `{}` has shape {got:?}, the config needs {want:?}", clean(.file), clean(.name))]
    Shape {
        file: String,
        name: String,
        want: Vec<usize>,
        got: Vec<usize>,
    },
}

/// `text` as an error message quotes it ([`crate::text::excerpt`], at most 300
/// characters: a file path or a parser's reason).
fn clean(text: &str) -> String {
    crate::text::excerpt(text, 300)
}
