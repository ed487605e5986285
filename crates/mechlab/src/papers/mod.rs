//! The papers: one folder each, wiring its data, models, probes, figures and
//! verdicts into an [`Experiment`](crate::experiment::Experiment).
//!
//! A paper folder holds `mod.rs` (the experiment: config, run, verdicts), `data.rs`
//! (its generator or corpus adapter), its model files, and `probes.rs` (the
//! measurements of its mechanism). [`registry`] lists them. `transformer` is
//! not a paper but the general experiment a researcher's own question starts from.

pub mod attention_svm;
pub mod birth;
pub mod causal_structure;
pub mod gpt_task;
pub mod icl_regression;
pub mod induction;
pub mod lm_induction;
pub mod markov_icl;
pub mod selection;
pub mod topic;
pub mod topic_bert;
pub mod transformer;

use crate::experiment::Registry;

/// The built-in papers, in `mechlab list` and `mechlab reproduce` order (add
/// your own with [`Registry::with`]).
pub fn registry() -> Registry {
    Registry::empty()
        .with(&induction::Induction)
        .with(&markov_icl::MarkovIcl)
        .with(&selection::Selection)
        .with(&topic::TopicExperiment)
        .with(&topic_bert::TopicBert)
        .with(&attention_svm::AttentionSvm)
        .with(&lm_induction::LmInduction)
        .with(&birth::Birth)
        .with(&icl_regression::IclRegression)
        .with(&causal_structure::CausalStructure)
        .with(&transformer::Transformer)
}
