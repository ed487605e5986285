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
//! The layout follows the architecture (see `docs/architecture.md`): [`papers`]
//! holds one folder per paper (its config, data, models, probes and verdicts,
//! behind the [`experiment::Paper`] trait); [`experiment`] is the trait and the
//! open [`experiment::Registry`]; [`train`] is the generic loop, [`run`] the run
//! folder, [`config`] preset resolution, [`commands`] what the CLI calls, and
//! [`cli`] the command line as a library entry point that takes a registry.
//!
//! ```
//! let registry = mechlab::papers::registry();
//! assert_eq!(registry.find("induction").map(|e| e.name()), Some("induction"));
//! ```

pub mod analysis;
pub mod bpe;
pub mod claims;
pub mod cli;
pub mod commands;
pub mod config;
pub mod experiment;
pub mod inspect;
pub mod interop;
pub mod max_margin;
pub mod papers;
pub mod patching;
pub mod pretrained;
pub mod rng;
pub mod run;
pub mod train;
