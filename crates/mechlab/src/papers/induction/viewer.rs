//! The report's attention viewers of a trained induction model: layer 1's
//! heads (the copiers, each looking back at one parent distance) over the first
//! validation context and its query, and layer 2's query over the context
//! (the classifier, attending to the positions whose parents match the
//! query's). Both read the hooked forward ([`super::hooks`]), and the same
//! tensors are recorded as the run's activations, so the page and the file agree.

use super::causal::batch_of;
use super::data::MarkovData;
use crate::run::Activation;
use mechlab_engine::hooks::{HookError, HookedModel};
use mechlab_report::{AttentionHead, Figure};

const L0: &str = "blocks.0.attn.hook_pattern";
const L1: &str = "blocks.1.attn.hook_pattern";

/// The activations (`blocks.{0,1}.attn.hook_pattern` of validation sequence 0)
/// and the two viewers.
pub fn attention_viewers<M: HookedModel + ?Sized>(
    model: &mut M,
    val: &MarkovData,
) -> Result<(Vec<Activation>, [Figure; 2]), HookError> {
    let (batch, _) = batch_of(val, 1);
    let (_, cache) = model.run_with_cache(&batch, &[L0, L1])?;
    let (p0, p1) = (&cache[L0], &cache[L1]);
    // p0: [1, H, P, P] with P = L + 1 (the query last); p1: [1, 1, 1, L]
    let (h, p) = (p0.shape[1], p0.shape[2]);
    let l = p1.shape[3];
    let context: Vec<String> = batch.tokens.iter().map(|t| t.to_string()).collect();
    let mut with_query = context.clone();
    with_query.push("⟨query⟩".into());
    debug_assert_eq!(with_query.len(), p);
    let copiers = Figure::attention(
        "attention",
        "Layer 1 (copier heads) on validation sequence 0",
        with_query,
        (0..h).map(|i| AttentionHead::of_layer(0, i)).collect(),
        p0.data.clone(),
    )
    .with_source("activations.safetensors", 0)
    .caption("Each copier head should look back a fixed distance, at one of the parents of the n-gram chain; the query is the last position (a zero token row, as in training).");
    let classifier = Figure::attention(
        "attention_l2",
        "Layer 2 (classifier) on validation sequence 0",
        context[..l].to_vec(),
        vec![AttentionHead::of_layer(1, 0)],
        p1.data.clone(),
    )
    .with_queries(vec!["⟨query⟩".into()])
    .with_source("activations.safetensors", 0)
    .caption("The query's attention over the context: an induction head puts it on the positions whose parent tokens match the query's parents, and copies the token there.");
    let acts = [(L0, p0), (L1, p1)]
        .into_iter()
        .map(|(name, t)| Activation {
            name: name.into(),
            shape: t.shape.clone(),
            data: t.data.clone(),
        })
        .collect();
    Ok((acts, [copiers, classifier]))
}
