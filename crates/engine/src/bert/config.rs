//! A BERT encoder's shape, read from a Hugging Face `config.json`.
//!
//! Only the fields that change inference are read; every value the encoder cannot
//! honour (an activation other than the exact erf GELU, relative position
//! embeddings, a hidden size the heads do not divide) is refused with an error
//! naming the file and key rather than silently computed differently. Training-only
//! fields (dropout, initialiser range) are ignored.
//!
//! ```
//! use mechlab_engine::bert::BertConfig;
//! let cfg = BertConfig::from_json_str(
//!     r#"{"hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1,
//!         "intermediate_size": 16, "vocab_size": 10, "max_position_embeddings": 6,
//!         "type_vocab_size": 2, "hidden_act": "gelu", "layer_norm_eps": 1e-12}"#,
//!     "config.json",
//! ).unwrap();
//! assert_eq!(cfg.d_head(), 4);
//! let bad = BertConfig::from_json_str(r#"{"hidden_act": "relu"}"#, "m/config.json");
//! assert!(bad.unwrap_err().to_string().starts_with("m/config.json: hidden_act"));
//! ```

use super::BertError;
use serde_json::{Map, Value};
use std::path::Path;

/// The encoder's dimensions and numerical constants.
#[derive(Clone, Debug, PartialEq)]
pub struct BertConfig {
    pub d_model: usize,
    pub n_heads: usize,
    pub n_layers: usize,
    pub d_mlp: usize,
    pub d_vocab: usize,
    pub n_ctx: usize,
    pub n_token_types: usize,
    pub layer_norm_eps: f64,
    /// The id the tokenizer pads with; such tokens are masked as keys.
    pub pad_token_id: u32,
}

impl BertConfig {
    /// Reads `path` (a Hugging Face `config.json`).
    pub fn from_file(path: &Path) -> Result<Self, BertError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| BertError::Io {
            file: file.clone(),
            source: e,
        })?;
        Self::from_json_str(&text, &file)
    }

    /// Parses the text of a `config.json`; `file` names it in errors.
    pub fn from_json_str(text: &str, file: &str) -> Result<Self, BertError> {
        let bad = |key: &str, reason: String| BertError::Config {
            file: file.to_string(),
            key: key.to_string(),
            reason,
        };
        let v: Value = serde_json::from_str(text)
            .map_err(|e| bad("(json)", format!("not valid JSON: {e}")))?;
        let m = v
            .as_object()
            .ok_or_else(|| bad("(json)", "not a JSON object".into()))?;
        // Refuse what the encoder would compute differently before reading sizes.
        let act = str_or(m, "hidden_act", "gelu");
        if act != "gelu" {
            return Err(bad(
                "hidden_act",
                format!("{act:?} is not supported (only \"gelu\", the exact erf GELU)"),
            ));
        }
        let pos = str_or(m, "position_embedding_type", "absolute");
        if pos != "absolute" {
            return Err(bad(
                "position_embedding_type",
                format!("{pos:?} is not supported (only \"absolute\")"),
            ));
        }
        if m.get("is_decoder").and_then(Value::as_bool) == Some(true) {
            return Err(bad(
                "is_decoder",
                "true is not supported (bidirectional encoders only)".into(),
            ));
        }
        let size = |key: &str| -> Result<usize, BertError> {
            match m.get(key) {
                None => Err(bad(key, "missing".into())),
                Some(x) => x
                    .as_u64()
                    .filter(|&n| n > 0)
                    .map(|n| n as usize)
                    .ok_or_else(|| bad(key, format!("{x} is not a positive integer"))),
            }
        };
        let cfg = BertConfig {
            d_model: size("hidden_size")?,
            n_heads: size("num_attention_heads")?,
            n_layers: size("num_hidden_layers")?,
            d_mlp: size("intermediate_size")?,
            d_vocab: size("vocab_size")?,
            n_ctx: size("max_position_embeddings")?,
            n_token_types: size("type_vocab_size")?,
            layer_norm_eps: match m.get("layer_norm_eps") {
                None => 1e-12,
                Some(x) => x
                    .as_f64()
                    .filter(|e| *e >= 0.0)
                    .ok_or_else(|| bad("layer_norm_eps", format!("{x} is not a number ≥ 0")))?,
            },
            pad_token_id: match m.get("pad_token_id") {
                None | Some(Value::Null) => 0,
                Some(x) => x
                    .as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| bad("pad_token_id", format!("{x} is not a token id")))?,
            },
        };
        if !cfg.d_model.is_multiple_of(cfg.n_heads) {
            return Err(bad(
                "num_attention_heads",
                format!(
                    "{} heads do not divide hidden_size {}",
                    cfg.n_heads, cfg.d_model
                ),
            ));
        }
        Ok(cfg)
    }

    pub fn d_head(&self) -> usize {
        self.d_model / self.n_heads
    }
}

fn str_or<'a>(m: &'a Map<String, Value>, key: &str, default: &'a str) -> &'a str {
    m.get(key).and_then(Value::as_str).unwrap_or(default)
}
