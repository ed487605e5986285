//! Bietti et al.'s simplified two-layer transformer (their Section 4.2 and
//! `ihead_basic_model.py`) as a configuration of the engine's general model:
//! one head of width `d` per layer, no LayerNorm, no MLP, absolute positions;
//! then their initialisation and their frozen matrices.
//!
//! - `W_Q = I` (their `wq = nn.Identity()`), frozen;
//! - token embeddings and positions `N(0, 1)` (`nn.Embedding`'s default and
//!   their `torch.randn` buffer), frozen;
//! - `W_K`, `W_V`, `W_O` and the unembedding `U(±1/√d)` (`nn.Linear`'s
//!   default); `W_V` of every layer, `W_O` of layer 0 and the unembedding frozen;
//! - the biases our model carries are zero and frozen (theirs have none).
//!
//! The trained matrices are `W_K` of both layers and `W_O` of the last: group
//! [`TRAINED`]; everything else is group [`FROZEN`], which the default
//! `train.groups` leaves out, and frozen in the model too, so the backward forms
//! no gradient for it (as PyTorch skips tensors without `requires_grad`). The one-layer control trains its single layer as
//! the two-layer model trains its last.

use super::config::BirthConfig;
use mechlab_engine::gpt::{ActFn, Gpt, GptConfig, Normalization, PositionalEmbedding};
use mechlab_engine::Float;
use rand::Rng;

/// The group of the trained matrices.
pub const TRAINED: &str = "trained";
/// The group of the frozen ones.
pub const FROZEN: &str = "frozen";

pub fn gpt_config(cfg: &BirthConfig, d_vocab: usize) -> GptConfig {
    let d = cfg.model.d_model;
    GptConfig {
        n_layers: cfg.model.n_layers,
        d_model: d,
        n_heads: 1,
        d_head: d,
        d_mlp: 0,
        attn_only: true,
        act_fn: ActFn::GeluNew,
        n_ctx: cfg.data.seq_len,
        d_vocab,
        normalization: Normalization::None,
        positional_embedding_type: PositionalEmbedding::Standard,
        tied_embeddings: false,
        // the embeddings' and positions' N(0, 1); the linear maps are redrawn below
        init_range: 1.0,
    }
}

/// Whether parameter `name` is trained in a model of `n_layers`.
pub fn trained(name: &str, n_layers: usize) -> bool {
    let last = format!("blocks.{}.attn.W_O", n_layers - 1);
    name.ends_with("attn.W_K") || name == last
}

/// The model with the authors' initialisation and groups.
pub fn build<T: Float>(
    cfg: &BirthConfig,
    d_vocab: usize,
    rng: &mut impl Rng,
) -> Result<Gpt<T>, String> {
    let g = gpt_config(cfg, d_vocab);
    let mut m = Gpt::<T>::new(&g, rng)?;
    let d = g.d_model;
    let bound = 1.0 / (d as f64).sqrt();
    for p in m.params.iter_mut() {
        let name = p.name().to_string();
        if name.ends_with("attn.W_Q") {
            let v = p.value_mut();
            v.iter_mut().for_each(|x| *x = T::zero());
            (0..d).for_each(|i| v[i * d + i] = T::of(1.0));
        } else if ["attn.W_K", "attn.W_V", "attn.W_O", "unembed.W_U"]
            .iter()
            .any(|s| name.ends_with(s))
        {
            for x in p.value_mut() {
                *x = T::of(rng.random_range(-bound..bound));
            }
        }
        p.set_group(if trained(&name, g.n_layers) {
            TRAINED
        } else {
            FROZEN
        });
    }
    // the frozen matrices' gradients are never formed (their requires_grad_(False))
    let names: Vec<String> = m.params.iter().map(|p| p.name().to_string()).collect();
    for name in names.iter().filter(|n| !trained(n, g.n_layers)) {
        m.set_frozen(name, true)?;
    }
    Ok(m)
}
