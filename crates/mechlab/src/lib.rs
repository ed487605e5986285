//! mechlab: a lab for the provable mechanisms of transformers.
//!
//! Three results say how training shapes a transformer's parts; mechlab reproduces
//! each, measures the mechanism as it forms, and checks it against the theory:
//!
//! - **token selection** (Wu, Shevchenko, Oymak, Mondelli 2025): one-layer softmax
//!   attention with trained embeddings selects the label-predictive tokens;
//! - **induction heads** (Chen, Sheen, Wang, Yang 2024): a two-layer RPE
//!   transformer on n-gram Markov data becomes a copier, a selector and a classifier;
//! - **topic structure** (Li, Li, Risteski 2023): a one-layer MLM transformer on
//!   LDA data puts same-topic words together in its embeddings, values and attention.
//!
//! The layout follows the architecture: [`data`] generates and loads data,
//! [`models`] holds one file per model (forward/backward over preallocated
//! buffers, on [`mechlab_engine`]), [`train`] is the generic loop, [`probes`]
//! measure mechanisms, [`experiments`] wire them together, [`run`] is the run
//! folder, [`config`] resolves presets, and [`commands`] is what the CLI calls.

pub mod commands;
pub mod config;
pub mod experiment;
pub mod papers;
pub mod rng;
pub mod run;
pub mod train;
