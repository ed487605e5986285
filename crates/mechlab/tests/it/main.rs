//! The mechlab crate's integration tests, one module per concern, built as one
//! test binary: every integration-test binary links the whole lab and re-instantiates
//! its generic code, so CI's test build paid for that 25 times.

mod support;

mod attention_svm;
mod birth;
mod causal_structure;
mod claims;
mod cli;
mod docs;
mod double_double;
mod encode;
mod hooks;
mod icl_regression;
mod induction;
mod induction_direct;
mod induction_reference;
mod inspect;
mod intervene_papers;
mod interventions;
mod lm_induction;
mod markov_icl;
mod patch_cli;
mod patching;
mod plugin;
mod progress;
mod reliability;
mod saturation;
mod selection;
mod selection_reference;
mod simd_levels;
mod slurm;
mod sweep_phase;
mod topic;
mod topic_bert;
mod topic_causal;
mod topic_reference;
mod transformer;
mod transformer_probe;
mod transformer_text;
