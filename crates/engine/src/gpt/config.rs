//! The model's sizes and options, under TransformerLens's config names.

use serde::{Deserialize, Serialize};

/// Whether the blocks and the unembedding normalise their input.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Normalization {
    /// Pre-LayerNorm with a learned gain and bias (`"LN"`).
    #[default]
    LN,
    /// No normalisation (`"none"`; TransformerLens's `None`).
    #[serde(rename = "none")]
    None,
}

/// The MLP's activation (TransformerLens `act_fn`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActFn {
    /// GPT-2's tanh-approximated GELU ([`crate::layers::gelu`]; TransformerLens `"gelu_new"`).
    #[default]
    GeluNew,
    /// `max(x, 0)` ([`crate::layers::relu`]).
    Relu,
    /// The exact GELU `x·Φ(x)` ([`crate::layers::gelu::exact_forward`];
    /// TransformerLens `"gelu"`, PyTorch's `nn.GELU()`, nanoGPT's).
    Gelu,
}

/// How the model knows positions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PositionalEmbedding {
    /// A learned absolute table `W_pos` added to the token embeddings.
    #[default]
    Standard,
    /// A learned bias per head and distance in every attention layer.
    Rpe,
}

/// The model's sizes and options (TransformerLens `HookedTransformerConfig` names).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GptConfig {
    pub n_layers: usize,
    pub d_model: usize,
    pub n_heads: usize,
    pub d_head: usize,
    /// Hidden width of each block's MLP; `0` with `attn_only`.
    pub d_mlp: usize,
    /// Blocks without MLPs (then `d_mlp` is ignored and must be 0).
    pub attn_only: bool,
    /// The MLP's activation.
    #[serde(default)]
    pub act_fn: ActFn,
    /// Longest context.
    pub n_ctx: usize,
    pub d_vocab: usize,
    pub normalization: Normalization,
    pub positional_embedding_type: PositionalEmbedding,
    /// The unembedding is the token embedding (`W_U = W_E`).
    pub tied_embeddings: bool,
    /// Standard deviation of the initial weights.
    pub init_range: f64,
}

impl Default for GptConfig {
    fn default() -> Self {
        GptConfig {
            n_layers: 2,
            d_model: 128,
            n_heads: 4,
            d_head: 32,
            d_mlp: 0,
            attn_only: true,
            act_fn: ActFn::GeluNew,
            n_ctx: 256,
            d_vocab: 256,
            normalization: Normalization::LN,
            positional_embedding_type: PositionalEmbedding::Standard,
            tied_embeddings: false,
            init_range: 0.02,
        }
    }
}

impl GptConfig {
    /// Checks the sizes; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        for (key, v) in [
            ("n_layers", self.n_layers),
            ("d_model", self.d_model),
            ("n_heads", self.n_heads),
            ("d_head", self.d_head),
            ("n_ctx", self.n_ctx),
            ("d_vocab", self.d_vocab),
        ] {
            if v == 0 {
                return Err(format!("{key} = 0: must be at least 1"));
            }
        }
        if self.attn_only && self.d_mlp != 0 {
            return Err(format!(
                "d_mlp = {}: an attn_only model has no MLP (set d_mlp = 0 or attn_only = false)",
                self.d_mlp
            ));
        }
        if !self.attn_only && self.d_mlp == 0 {
            return Err("d_mlp = 0: a model with MLPs (attn_only = false) needs d_mlp ≥ 1".into());
        }
        if !(self.init_range.is_finite() && self.init_range > 0.0) {
            return Err(format!(
                "init_range = {}: must be positive and finite",
                self.init_range
            ));
        }
        Ok(())
    }
}
