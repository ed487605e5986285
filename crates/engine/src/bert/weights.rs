//! A BERT encoder's parameters, read by Hugging Face tensor name from a
//! `model.safetensors` file.
//!
//! Names are those of `transformers.BertModel` (`embeddings.word_embeddings.weight`,
//! `encoder.layer.{l}.attention.self.query.weight`, ...); a checkpoint saved from a
//! task model (`BertForMaskedLM`, ...) prefixes them with `bert.`, which is accepted
//! too. Every tensor must be float32 with the shape the config implies and finite
//! values: a missing tensor, another dtype, a wrong shape or a NaN/inf is an error
//! naming the file and tensor.
//! Linear weights stay `[out, in]` as stored (what [`crate::layers::linear`] takes).
//! Tensors the encoder does not use (the pooler, `position_ids`) are ignored.

use super::{BertConfig, BertError};
use safetensors::{Dtype, SafeTensors};
use std::path::Path;

/// One encoder layer's parameters (`[out, in]` weights).
#[derive(Clone, Debug)]
pub struct LayerWeights {
    /// `[D, D]` each, with `[D]` biases.
    pub wq: Vec<f32>,
    pub bq: Vec<f32>,
    pub wk: Vec<f32>,
    pub bk: Vec<f32>,
    pub wv: Vec<f32>,
    pub bv: Vec<f32>,
    pub wo: Vec<f32>,
    pub bo: Vec<f32>,
    /// Layer norm after the attention residual: `[D]`.
    pub ln1_g: Vec<f32>,
    pub ln1_b: Vec<f32>,
    /// `[d_mlp, D]`, `[d_mlp]`.
    pub w_in: Vec<f32>,
    pub b_in: Vec<f32>,
    /// `[D, d_mlp]`, `[D]`.
    pub w_out: Vec<f32>,
    pub b_out: Vec<f32>,
    /// Layer norm after the feed-forward residual: `[D]`.
    pub ln2_g: Vec<f32>,
    pub ln2_b: Vec<f32>,
}

/// All parameters of the encoder.
#[derive(Clone, Debug)]
pub struct BertWeights {
    /// `[d_vocab, D]` (TransformerLens `W_E`).
    pub word: Vec<f32>,
    /// `[n_ctx, D]` (`W_pos`).
    pub pos: Vec<f32>,
    /// `[n_token_types, D]`.
    pub token_type: Vec<f32>,
    pub emb_ln_g: Vec<f32>,
    pub emb_ln_b: Vec<f32>,
    pub layers: Vec<LayerWeights>,
}

impl BertWeights {
    /// Reads every tensor `cfg` needs from the safetensors file at `path`.
    pub fn from_file(path: &Path, cfg: &BertConfig) -> Result<Self, BertError> {
        let file = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| BertError::Io {
            file: file.clone(),
            source: e,
        })?;
        Self::from_bytes(&bytes, cfg, &file)
    }

    /// Parses the bytes of a safetensors file; `file` names it in errors.
    pub fn from_bytes(bytes: &[u8], cfg: &BertConfig, file: &str) -> Result<Self, BertError> {
        let st = SafeTensors::deserialize(bytes).map_err(|e| BertError::Weights {
            file: file.to_string(),
            reason: format!("not a readable safetensors file ({e})"),
        })?;
        let r = Reader { st: &st, file };
        let (d, m) = (cfg.d_model, cfg.d_mlp);
        let layers = (0..cfg.n_layers)
            .map(|l| {
                let p = |s: &str| format!("encoder.layer.{l}.{s}");
                Ok(LayerWeights {
                    wq: r.get(&p("attention.self.query.weight"), &[d, d])?,
                    bq: r.get(&p("attention.self.query.bias"), &[d])?,
                    wk: r.get(&p("attention.self.key.weight"), &[d, d])?,
                    bk: r.get(&p("attention.self.key.bias"), &[d])?,
                    wv: r.get(&p("attention.self.value.weight"), &[d, d])?,
                    bv: r.get(&p("attention.self.value.bias"), &[d])?,
                    wo: r.get(&p("attention.output.dense.weight"), &[d, d])?,
                    bo: r.get(&p("attention.output.dense.bias"), &[d])?,
                    ln1_g: r.get(&p("attention.output.LayerNorm.weight"), &[d])?,
                    ln1_b: r.get(&p("attention.output.LayerNorm.bias"), &[d])?,
                    w_in: r.get(&p("intermediate.dense.weight"), &[m, d])?,
                    b_in: r.get(&p("intermediate.dense.bias"), &[m])?,
                    w_out: r.get(&p("output.dense.weight"), &[d, m])?,
                    b_out: r.get(&p("output.dense.bias"), &[d])?,
                    ln2_g: r.get(&p("output.LayerNorm.weight"), &[d])?,
                    ln2_b: r.get(&p("output.LayerNorm.bias"), &[d])?,
                })
            })
            .collect::<Result<Vec<_>, BertError>>()?;
        Ok(BertWeights {
            word: r.get("embeddings.word_embeddings.weight", &[cfg.d_vocab, d])?,
            pos: r.get("embeddings.position_embeddings.weight", &[cfg.n_ctx, d])?,
            token_type: r.get(
                "embeddings.token_type_embeddings.weight",
                &[cfg.n_token_types, d],
            )?,
            emb_ln_g: r.get("embeddings.LayerNorm.weight", &[d])?,
            emb_ln_b: r.get("embeddings.LayerNorm.bias", &[d])?,
            layers,
        })
    }
}

struct Reader<'a, 'b> {
    st: &'a SafeTensors<'b>,
    file: &'a str,
}

impl Reader<'_, '_> {
    /// The float32 tensor `name` (or `bert.{name}`), checked against `shape`.
    fn get(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, BertError> {
        let prefixed = format!("bert.{name}");
        let view = self
            .st
            .tensor(name)
            .or_else(|_| self.st.tensor(&prefixed))
            .map_err(|_| BertError::MissingTensor {
                file: self.file.to_string(),
                name: name.to_string(),
            })?;
        if view.shape() != shape {
            return Err(BertError::Shape {
                file: self.file.to_string(),
                name: name.to_string(),
                want: shape.to_vec(),
                got: view.shape().to_vec(),
            });
        }
        if view.dtype() != Dtype::F32 {
            return Err(BertError::Weights {
                file: self.file.to_string(),
                reason: format!(
                    "tensor `{name}` is {:?}, only F32 is supported",
                    view.dtype()
                ),
            });
        }
        let values: Vec<f32> = view
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        // A damaged download: refuse it here rather than give NaN activations later.
        if let Some(i) = values.iter().position(|v| !v.is_finite()) {
            return Err(BertError::Weights {
                file: self.file.to_string(),
                reason: format!("tensor `{name}` holds {} at flat index {i}", values[i]),
            });
        }
        Ok(values)
    }
}
