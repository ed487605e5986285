//! Loading a trained model from a run folder for analysis: [`load_model`] reads
//! the run's `config.toml`, finds its experiment in the registry and asks the
//! paper ([`crate::experiment::Paper::load`]) for the model it trained at a
//! checkpoint, as a [`HookedModel`](mechlab_engine::hooks::HookedModel) whose
//! activations can be read (`run_with_cache`) and changed (`run_with_hooks`).
//! A plug-in paper loads the same way (`crates/mechlab/tests/it/plugin.rs`).
//!
//! The models are built without their training data: where a model's shape
//! depends on data, the paper recovers it without reading the corpus:
//!
//! - **selection**: the vocabulary size is the first axis of the checkpoint's
//!   `embed.W_E` `[d_vocab, d_model]`; the model gets an empty dataset (its
//!   training buffers are then empty; the analysis forward does not need them).
//! - **topic on LDA documents**: the vocabulary and the topic of each token (the
//!   frozen block value matrix) come from the run's `[data]` generator config,
//!   exactly as training built them.
//! - **topic-bert**: the pretrained encoder at the run's `model.path` (the run
//!   trains nothing and has no checkpoints; its only step is 0).
//! - **topic on Wikipedia** (`wiki.enabled`): the vocabulary size is the first
//!   axis of `embed.W_E` when embeddings are trained, else (`d_model = d_vocab`)
//!   of any stored parameter; `model.value = "blocks"` is refused, since its
//!   frozen matrix comes from an LDA fit of the corpus that no checkpoint holds.
//!
//! ```no_run
//! use mechlab::inspect::load_model;
//! use mechlab_engine::hooks::Batch;
//! let reg = mechlab::papers::registry();
//! let mut m = load_model(&reg, std::path::Path::new("runs/induction-simplified-s0"), None)?;
//! let (y, cache) = m.run_with_cache(&Batch::new(vec![0; 10], 1, 10), &["blocks.1.attn.hook_pattern"])?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::analysis::RunDir;
pub use crate::analysis::{LoadError, Model};
use crate::config;
use crate::experiment::{Experiment, Registry};
use std::path::Path;

/// The model of the run in `run_dir` with the parameters of checkpoint `step`
/// (the latest when `None`), rebuilt by the paper of `registry` the run names.
pub fn load_model(
    registry: &Registry,
    run_dir: &Path,
    step: Option<u64>,
) -> Result<Model, LoadError> {
    let run = RunDir::new(run_dir);
    let table = config::read_file(&run_dir.join("config.toml"))?;
    experiment_of(registry, &table, &run)?.load(&table, &run, step)
}

/// The registered paper a run's config names (`experiment = "..."`).
pub fn experiment_of(
    registry: &Registry,
    table: &toml::Table,
    run: &RunDir,
) -> Result<&'static dyn Experiment, LoadError> {
    let name = table
        .get("experiment")
        .and_then(|v| v.as_str())
        .unwrap_or_default();
    registry.find(name).ok_or_else(|| {
        let known: Vec<&str> = registry.all().iter().map(|e| e.name()).collect();
        run.unsupported(format!(
            "experiment = `{name}`: no registered paper has this name (registered: {})",
            known.join(", ")
        ))
    })
}
