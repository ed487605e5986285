//! Probes: measurements of a mechanism on a model and its data.
pub mod induction;
pub mod selection;
pub mod topic;
