//! The ⟨cls⟩ query's attention as activations and as the report's viewer: the
//! first test sequences' patterns in TransformerLens's `[batch, head,
//! query_pos, key_pos]` layout (one head, one query), and a viewer over the
//! shortest of them that cites its row of that file.

use super::data::SeqData;
use crate::run::Activation;
use mechlab_report::{AttentionHead, Figure};

/// At most this many test sequences are recorded.
const N_RECORDED: usize = 64;

/// `pattern` is the model's attention over `test` (`[n, n_ctx]`); `word` names a token.
pub fn cls_attention(
    test: &SeqData,
    pattern: &[f64],
    word: impl Fn(u32) -> String,
) -> (Activation, Figure) {
    let n = test.n.min(N_RECORDED);
    let act = Activation {
        name: "blocks.0.attn.hook_pattern".into(),
        shape: vec![n, 1, 1, test.n_ctx],
        data: pattern[..n * test.n_ctx].to_vec(),
    };
    let k = (0..n).min_by_key(|&k| test.lens[k]).unwrap_or(0);
    let at = k * test.n_ctx;
    let fig = Figure::attention(
        "attention",
        &format!("⟨cls⟩ attention on test sequence {k} (label {:+})", test.y[k]),
        test.tokens(k).iter().map(|&t| word(t)).collect(),
        vec![AttentionHead::of_layer(0, 0)],
        pattern[at..at + test.lens[k] as usize].to_vec(),
    )
    .with_queries(vec!["⟨cls⟩".into()])
    .with_source("activations.safetensors", k)
    .caption("Shading is the ⟨cls⟩ query's weight on each token: a trained model selects the label-predictive tokens.");
    (act, fig)
}
