//! A pretrained encoder for analysis, outside any run: the BERT-family model of
//! a Hugging Face folder with its own tokenizer, as a hooked model
//! (TransformerLens's `HookedEncoder.from_pretrained` … `run_with_cache`).
//! `mechlab encode` and Python's `mechlab.load_pretrained` are built on it.
//!
//! [`Pretrained::encode`] turns texts into one padded [`Batch`] (pieces with
//! `[CLS]` and `[SEP]`, truncated to the model's context, padded with its
//! `pad_token_id`, which the encoder masks as keys); the model's
//! `run_with_cache` / `run_with_hooks` then take it like any other.
//!
//! ```no_run
//! use mechlab::pretrained::Pretrained;
//! use mechlab_engine::hooks::HookedModel;
//! let mut p = Pretrained::load("all-MiniLM-L6-v2")?; // a folder, or a name in the shared models folder
//! let (batch, pieces) = p.encode(&["The Roman Empire was the state of ancient Rome."])?;
//! let (_, cache) = p.model.run_with_cache(&batch, &["blocks.0.attn.hook_pattern"])?;
//! assert_eq!(cache["blocks.0.attn.hook_pattern"].shape[3], pieces[0].ids.len());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::config::ConfigError;
use mechlab_corpora::wordpiece::{Encoded, PretrainedTokenizer, TokenizerError};
use mechlab_engine::bert::{Bert, BertError};
use mechlab_engine::hooks::Batch;
use std::path::PathBuf;
use thiserror::Error;

/// Why a pretrained model could not be found, loaded or fed; each names the
/// path, file or key at fault.
#[derive(Debug, Error)]
pub enum PretrainedError {
    #[error(transparent)]
    Path(#[from] ConfigError),
    #[error(transparent)]
    Model(#[from] BertError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error("texts: {0}")]
    Input(String),
}

/// A Hugging Face BERT folder loaded for analysis.
pub struct Pretrained {
    pub model: Bert,
    pub tokenizer: Tokenizer,
    /// The folder it was read from.
    pub dir: PathBuf,
}

/// A model's own tokenizer with what batching needs from the model: its
/// context length and pad id.
pub struct Tokenizer {
    pub pieces: PretrainedTokenizer,
    pub n_ctx: usize,
    pub pad_token_id: u32,
}

impl Pretrained {
    /// Loads the model and tokenizer of folder `path` (see [`model_dir`]).
    pub fn load(path: &str) -> Result<Self, PretrainedError> {
        Self::load_at(path, "model")
    }

    /// [`Pretrained::load`], naming the setting `path` came from (`key`) in errors.
    pub fn load_at(path: &str, key: &str) -> Result<Self, PretrainedError> {
        let dir = model_dir(path, key)?;
        let model = Bert::load(&dir)?;
        let tokenizer = Tokenizer {
            pieces: PretrainedTokenizer::from_dir(&dir)?,
            n_ctx: model.config.n_ctx,
            pad_token_id: model.config.pad_token_id,
        };
        Ok(Pretrained {
            model,
            tokenizer,
            dir,
        })
    }

    /// [`Tokenizer::encode`].
    pub fn encode(&self, texts: &[&str]) -> Result<(Batch, Vec<Encoded>), PretrainedError> {
        self.tokenizer.encode(texts)
    }
}

impl Tokenizer {
    /// The pieces of each text (truncated to the model's context) and the batch
    /// of all of them, padded to the longest with the model's pad id.
    pub fn encode(&self, texts: &[&str]) -> Result<(Batch, Vec<Encoded>), PretrainedError> {
        if texts.is_empty() {
            return Err(PretrainedError::Input("no text to encode".into()));
        }
        let enc = texts
            .iter()
            .map(|t| self.pieces.encode(t, self.n_ctx))
            .collect::<Result<Vec<_>, _>>()?;
        let t = enc.iter().map(|e| e.ids.len()).max().unwrap_or(1).max(1);
        let mut tokens = vec![self.pad_token_id; texts.len() * t];
        for (b, e) in enc.iter().enumerate() {
            tokens[b * t..b * t + e.ids.len()].copy_from_slice(&e.ids);
        }
        Ok((Batch::new(tokens, texts.len(), t), enc))
    }
}

/// The model folder for `path`: the path as given (absolute, or relative to the
/// working directory) when it is a folder; else its last component in the
/// shared models folder (`shared/models` beside the data folder: beside the
/// checkout, or `$MECHLAB_DATA/../models`), so that a default works from any
/// working directory (a notebook's folder, a sweep's). `key` names the setting
/// in the error (`model.path` in a config).
pub fn model_dir(path: &str, key: &str) -> Result<PathBuf, ConfigError> {
    let given = PathBuf::from(path);
    if given.is_dir() {
        return Ok(given);
    }
    let shared = mechlab_corpora::datadir::data_dir()
        .ok()
        .and_then(|d| Some(d.parent()?.join("models").join(given.file_name()?)));
    if let Some(s) = shared.filter(|s| s.is_dir()) {
        return Ok(s);
    }
    let cwd = std::env::current_dir().unwrap_or_default();
    Err(ConfigError::Invalid {
        file: key.into(),
        message: format!(
            "`{path}` is not a folder (looked in the working directory {} and in the \
             shared models folder); give a Hugging Face BERT folder (config.json, \
             model.safetensors, tokenizer.json or vocab.txt)",
            cwd.display()
        ),
    })
}
