//! Models: one file per model, each a forward/backward pair over preallocated
//! buffers with its activations in a named struct (the activation cache).
pub mod induction_full;
pub mod induction_simplified;
pub mod selection;
pub mod topic_mlm;
