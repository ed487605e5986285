//! Loading a trained model from a run folder for analysis: [`load_model`] reads
//! the run's `config.toml`, builds the model its experiment trained (experiment,
//! `model.kind`, `model.dtype`, the run's shapes), restores a checkpoint's
//! parameters and hands it back as a [`HookedModel`] whose activations can be
//! read ([`HookedModel::run_with_cache`]) and changed ([`HookedModel::run_with_hooks`]).
//!
//! The models are built without their training data: where a model's shape
//! depends on data, it is recovered without reading the corpus.
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
//! let mut m = load_model(std::path::Path::new("runs/induction-simplified-s0"), None)?;
//! let (y, cache) = m.run_with_cache(&Batch::new(vec![0; 10], 1, 10), &["blocks.1.attn.hook_pattern"])?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::config::{self, ConfigError};
use crate::experiment::Dtype;
use crate::papers::induction::direct::Direct;
use crate::papers::induction::full::Full;
use crate::papers::induction::interventions::HeadInterventions;
use crate::papers::induction::simplified::Simplified;
use crate::papers::induction::task::{clamp_state_of, CLAMP_MISFIT};
use crate::papers::induction::{self, InductionConfig, ModelKind};
use crate::papers::markov_icl::{self, model::RpeTransformer, MarkovConfig};
use crate::papers::selection::data::SeqData;
use crate::papers::selection::model::SelectionModel;
use crate::papers::selection::SelectionConfig;
use crate::papers::topic::data::LdaModel;
use crate::papers::topic::model::{TopicMlm, ValueKind};
use crate::papers::topic::TopicConfig;
use crate::papers::topic_bert::TopicBertConfig;
use crate::pretrained::{Pretrained, PretrainedError};
use crate::run::checkpoint::{self, CheckpointError, Loaded};
use mechlab_engine::hooks::HookedModel;
use mechlab_engine::{Float, Parameters};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use thiserror::Error;

/// A loaded model, ready for analysis.
pub type Model = Box<dyn HookedModel + Send>;

/// Why a run's model could not be loaded.
#[derive(Debug, Error)]
pub enum LoadError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error("{path}: no checkpoint for step {step} (this run has steps {available:?})")]
    NoStep {
        path: String,
        step: u64,
        available: Vec<u64>,
    },
    /// A `topic-bert` run's pretrained encoder could not be loaded.
    #[error(transparent)]
    Pretrained(#[from] PretrainedError),
    /// The config or checkpoint describes a model this loader cannot rebuild.
    #[error("{file}: {reason}")]
    Unsupported { file: String, reason: String },
}

/// The model of the run in `run_dir` with the parameters of checkpoint `step`
/// (the latest when `None`).
pub fn load_model(run_dir: &Path, step: Option<u64>) -> Result<Model, LoadError> {
    let cfg_path = run_dir.join("config.toml");
    let file = cfg_path.display().to_string();
    let table = config::read_file(&cfg_path)?;
    let experiment = table
        .get("experiment")
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_string();
    if experiment == "topic-bert" {
        return pretrained_of(&table, &file, step);
    }
    let ckpt = checkpoint_path(run_dir, step)?;
    let dtype = |d: &Dtype| match d {
        Dtype::F64x2 => Err(unsupported(
            &file,
            "model.dtype = \"f64x2\": a double-double run is a precision check; inspect and \
             intervene load f32 and f64 runs (rerun it in f64 to analyse it)"
                .to_string(),
        )),
        d => Ok(*d == Dtype::F32),
    };
    match experiment.as_str() {
        "induction" => {
            let cfg: InductionConfig = config::typed(&table, &file)?;
            let f32 = dtype(&cfg.model.dtype)?;
            induction(&cfg, f32, &ckpt, &file)
        }
        "selection" => {
            let cfg: SelectionConfig = config::typed(&table, &file)?;
            if dtype(&cfg.model.dtype)? {
                selection::<f32>(&cfg, &ckpt)
            } else {
                selection::<f64>(&cfg, &ckpt)
            }
        }
        "topic" => {
            let cfg: TopicConfig = config::typed(&table, &file)?;
            if dtype(&cfg.model.dtype)? {
                topic::<f32>(&cfg, &ckpt, &file)
            } else {
                topic::<f64>(&cfg, &ckpt, &file)
            }
        }
        "markov-icl" => {
            let cfg: MarkovConfig = config::typed(&table, &file)?;
            markov_icl::config::check(&cfg).map_err(|r| unsupported(&file, r))?;
            if cfg.model.kind == markov_icl::config::ModelKind::Minimal {
                return Err(unsupported(
                    &file,
                    "model.kind = \"minimal\": the minimal model has no hook points yet; \
                     inspect and intervene read model.kind = \"transformer\" runs"
                        .to_string(),
                ));
            }
            if dtype(&cfg.model.dtype)? {
                markov::<f32>(&cfg, &ckpt, &file)
            } else {
                markov::<f64>(&cfg, &ckpt, &file)
            }
        }
        other => Err(unsupported(
            &file,
            format!(
                "experiment = `{other}`: inspect loads induction, markov-icl, selection, topic \
                 and topic-bert runs"
            ),
        )),
    }
}

/// A `topic-bert` run trains nothing: its model is the pretrained encoder at
/// its `model.path`, at "step" 0.
fn pretrained_of(table: &toml::Table, file: &str, step: Option<u64>) -> Built {
    if let Some(s) = step.filter(|&s| s != 0) {
        return Err(LoadError::NoStep {
            path: format!("{file}: model.path"),
            step: s,
            available: vec![0],
        });
    }
    let cfg: TopicBertConfig = config::typed(table, file)?;
    let key = format!("{file}: model.path");
    let p = Pretrained::load_at(&cfg.model.path, &key)?;
    Ok(Box::new(p.model))
}

/// The checkpoint file of `step`, or the latest.
fn checkpoint_path(run_dir: &Path, step: Option<u64>) -> Result<PathBuf, LoadError> {
    let dir = run_dir.join("checkpoints");
    match step {
        None => Ok(checkpoint::latest(&dir)?),
        Some(s) => {
            let path = dir.join(checkpoint::file_name(s));
            if path.is_file() {
                Ok(path)
            } else {
                Err(LoadError::NoStep {
                    path: path.display().to_string(),
                    step: s,
                    available: checkpoint::list(&dir).into_iter().map(|(s, _)| s).collect(),
                })
            }
        }
    }
}

type Built = Result<Model, LoadError>;

fn unsupported(file: &str, reason: impl Into<String>) -> LoadError {
    LoadError::Unsupported {
        file: file.to_string(),
        reason: reason.into(),
    }
}

fn restore<T: Float, M>(mut model: M, loaded: &Loaded<T>) -> Built
where
    M: Parameters<T> + HookedModel + Send + 'static,
{
    loaded.apply_params(&mut model)?;
    Ok(Box::new(model))
}

fn read<T: Float>(ckpt: &Path) -> Result<Loaded<T>, LoadError> {
    Ok(checkpoint::load::<T>(ckpt)?)
}

fn markov<T: Float>(cfg: &MarkovConfig, ckpt: &Path, file: &str) -> Built {
    let mut rng = crate::rng::stream(cfg.seed, crate::rng::Stream::Init);
    let m = RpeTransformer::<T>::new(&markov_icl::dims(cfg), &mut rng)
        .map_err(|r| unsupported(file, r))?;
    restore(m, &read::<T>(ckpt)?)
}

fn induction(cfg: &InductionConfig, f32: bool, ckpt: &Path, file: &str) -> Built {
    let m = &cfg.model;
    let (s, h) = (cfg.data.vocab, m.n_heads);
    if m.degree == 0 || m.degree > h {
        return Err(unsupported(
            file,
            format!("model.degree = {}: must be in 1..=n_heads", m.degree),
        ));
    }
    if !crate::papers::induction::config::uses_table(cfg) {
        // The run trained on the general path: the same parameters, no table.
        return if f32 {
            direct::<f32>(cfg, ckpt, file)
        } else {
            direct::<f64>(cfg, ckpt, file)
        };
    }
    match m.kind {
        ModelKind::Simplified => {
            Simplified::<f64>::check_size(s, h).map_err(|r| unsupported(file, r))?;
            let c = induction::simplified_config(cfg);
            if f32 {
                restore(Simplified::<f32>::new(&c), &read::<f32>(ckpt)?)
            } else {
                restore(Simplified::<f64>::new(&c), &read::<f64>(ckpt)?)
            }
        }
        ModelKind::Full => {
            Full::<f64>::check_size(s, h).map_err(|r| unsupported(file, r))?;
            let c = induction::full_config(cfg);
            if f32 {
                restore(Full::<f32>::new(&c), &read::<f32>(ckpt)?)
            } else {
                restore(Full::<f64>::new(&c), &read::<f64>(ckpt)?)
            }
        }
    }
}

/// A direct-path induction model as it stood at the checkpoint: its parameters,
/// and the training-time head ablations and clamps of the run's
/// `[[interventions]]` that were in force for its last update (with the clamp's
/// copied logits from the checkpoint), so what `inspect` and `intervene` measure
/// is the model the run trained and judged.
fn direct<T: Float>(cfg: &InductionConfig, ckpt: &Path, file: &str) -> Built {
    let loaded = read::<T>(ckpt)?;
    let mut m = Direct::<T>::new(&induction::direct_config(cfg));
    loaded.apply_params(&mut m)?;
    let heads = HeadInterventions::new(&cfg.interventions, cfg.model.n_heads)
        .map_err(|r| unsupported(file, r))?;
    let step = loaded.meta.step;
    if !heads.is_empty() && step > 0 {
        let state = &loaded.meta.model_state;
        if !state.is_null() {
            let fits = clamp_state_of(state).is_some_and(|(mask, w)| m.load_clamp_state(mask, &w));
            if !fits {
                return Err(LoadError::Checkpoint(CheckpointError::Mismatch {
                    path: loaded.path.display().to_string(),
                    reason: CLAMP_MISFIT.into(),
                }));
            }
        }
        heads.apply(&mut m, step - 1);
    }
    Ok(Box::new(m))
}

/// The first axis of a stored tensor, or a mismatch naming the checkpoint.
fn first_axis<T>(loaded: &Loaded<T>, name: &str) -> Result<usize, LoadError> {
    loaded
        .tensors
        .get(name)
        .and_then(|(shape, _)| shape.first().copied())
        .ok_or_else(|| {
            LoadError::Checkpoint(CheckpointError::Mismatch {
                path: loaded.path.display().to_string(),
                reason: format!("no tensor {name}, so the vocabulary size is unknown"),
            })
        })
}

fn selection<T: Float>(cfg: &SelectionConfig, ckpt: &Path) -> Built {
    let loaded = read::<T>(ckpt)?;
    let d_vocab = first_axis(&loaded, "embed.W_E")?;
    let data = Arc::new(SeqData {
        n: 0,
        n_ctx: 1,
        d_vocab,
        ids: Vec::new(),
        lens: Vec::new(),
        y: Vec::new(),
        signal: Vec::new(),
    });
    restore(
        SelectionModel::<T>::new(&cfg.model, data, cfg.seed),
        &loaded,
    )
}

fn topic<T: Float>(cfg: &TopicConfig, ckpt: &Path, file: &str) -> Built {
    let loaded = read::<T>(ckpt)?;
    let (d_vocab, topics) = if cfg.wiki.enabled {
        if cfg.model.value == ValueKind::Blocks {
            return Err(unsupported(
                file,
                "model.value = \"blocks\" on Wikipedia: the frozen block matrix comes from the run's \
                 LDA fit, which no checkpoint stores",
            ));
        }
        let v = if loaded.tensors.contains_key("embed.W_E") {
            first_axis(&loaded, "embed.W_E")?
        } else {
            // d_model = d_vocab here: every stored parameter's first axis is it.
            let any = loaded.tensors.keys().next().cloned().unwrap_or_default();
            first_axis(&loaded, &any)?
        };
        (v, vec![usize::MAX; v])
    } else {
        let lda = LdaModel::new(&cfg.data).map_err(|r| unsupported(file, r))?;
        (lda.d_vocab(), lda.topic_of_token())
    };
    let model = TopicMlm::<T>::new(&cfg.model, d_vocab, &topics, 1, cfg.seed)
        .map_err(|r| unsupported(file, r))?;
    restore(model, &loaded)
}
