//! Models: one file per model, each a forward/backward pair over preallocated
//! buffers with its activations in a named struct (the activation cache).
pub mod induction_full;
mod induction_layer2;
pub mod induction_simplified;
pub mod selection;
pub mod topic_mlm;
