//! Training: optimisers, schedules, stages and the generic loop.

pub mod config;
pub mod optim;
pub mod schedule;
pub mod trainer;

pub use config::{OptimizerKind, TrainConfig};
pub use trainer::{fit, Fitted, TrainError, Trainable, INTERRUPTED};

#[cfg(test)]
mod tests;
