//! Bietti et al.'s synthetic bridge from theory to language models: "Birth of
//! a Transformer: A Memory Viewpoint" (Bietti, Cabannes, Bouchacourt, Jégou,
//! Bottou; NeurIPS 2023), on the engine's general causal transformer.
//!
//! Sequences follow a character-level bigram model of a real text, except that
//! each of `K` fixed trigger tokens is followed, within a sequence, by an
//! output drawn for that sequence ([`data`]). Predicting an output from the
//! trigger's second occurrence on needs the context: an induction head. The
//! authors' simplified two-layer transformer ([`model`]: `W_Q = I`, random
//! frozen embeddings, positions, unembedding and value maps; trained: both
//! `W_K` and the last `W_O`) learns it with SGD on the loss of those outputs
//! only, and their memory-recall probes ([`probes`]) read the three
//! associative memories it stores (`W_O²` token → itself, `W_K²` trigger →
//! its previous-token copy, `W_K¹` position → the next position). The
//! one-layer preset is the control: one layer cannot form the head.
//!
//! ```
//! let cfg = mechlab::papers::birth::BirthConfig::default();
//! assert_eq!((cfg.data.k, cfg.model.n_layers, cfg.train.lr), (5, 2, 0.2));
//! ```

pub mod analysis;
pub mod config;
pub mod data;
pub mod model;
pub mod probes;
mod report;
mod verdicts;
pub use verdicts::one_layer_fails;

use crate::config::presets::Preset;
use crate::experiment::{Dtype, ExperimentError, Paper, ReproduceItem};
use crate::papers::gpt_task::{GptTask, Sampler};
use crate::rng::{stream, substream, Stream};
use crate::run::summary::Summary;
use crate::run::{RunCtx, RunError};
use crate::train::fit;
pub use config::BirthConfig;
use data::Bigrams;
use mechlab_engine::gpt::Gpt;
use mechlab_engine::Float;
use probes::Probe;
use rand_chacha::ChaCha8Rng;

/// The model with its stream of fresh sequences: what the trainer trains.
pub type Task<T> = GptTask<T, Triggered>;

/// The bigram sequences with their per-sequence trigger outputs, scored only
/// at a trigger's second and later occurrences (the authors' loss).
pub struct Triggered {
    pub bigrams: Bigrams,
    /// The step's trigger occurrences `[B, T]`, loss mask (occurrence ≥ 2) and
    /// per-sequence outputs, reused.
    occ: Vec<u32>,
    mask: Vec<bool>,
    outs: Vec<(u32, u32)>,
}

impl Triggered {
    pub fn new(bigrams: Bigrams, batch: usize, seq_len: usize) -> Self {
        Triggered {
            occ: vec![0; batch * seq_len],
            mask: vec![false; batch * seq_len],
            outs: vec![(0, 0); bigrams.triggers.len()],
            bigrams,
        }
    }
}

impl Sampler for Triggered {
    fn draw(
        &mut self,
        tokens: &mut [u32],
        _seq_len: usize,
        rng: &mut ChaCha8Rng,
    ) -> Option<&[bool]> {
        self.bigrams
            .batch(tokens, &mut self.occ, &mut self.outs, rng);
        for (m, &o) in self.mask.iter_mut().zip(&self.occ) {
            *m = o >= 2;
        }
        Some(&self.mask)
    }
}

/// The registered experiment.
pub struct Birth;

pub const PRESETS: &[Preset] = &[
    crate::preset!("birth-2l"),
    crate::preset!("birth-1l"),
    crate::preset!("birth-2l-d128"),
    crate::preset!("birth-1l-d128"),
];

impl Paper for Birth {
    type Config = BirthConfig;
    fn name(&self) -> &'static str {
        "birth"
    }
    fn citation(&self) -> &'static str {
        "Bietti, Cabannes, Bouchacourt, Jégou, Bottou (2023). Birth of a Transformer: A Memory Viewpoint. NeurIPS 2023, arXiv:2306.00802"
    }
    fn presets(&self) -> &'static [Preset] {
        PRESETS
    }
    fn validate(&self, cfg: &BirthConfig) -> Result<(), String> {
        config::check(cfg)
    }
    fn data_key(&self) -> Option<&'static str> {
        Some("data.file")
    }
    fn run(&self, cfg: &BirthConfig, ctx: &mut RunCtx) -> Result<Summary, ExperimentError> {
        match cfg.model.dtype {
            Dtype::F32 => run_typed::<f32>(cfg, ctx),
            Dtype::F64 => run_typed::<f64>(cfg, ctx),
            Dtype::F64x2 => Err(bad("model.dtype = \"f64x2\" is not supported here".into())),
        }
    }
    fn reproduce(&self) -> Vec<ReproduceItem> {
        vec![
            ReproduceItem::new("birth-2l", &[]),
            ReproduceItem::new("birth-1l", &[]).with_seeds(3),
        ]
    }
    crate::analysis_half!(analysis);
}

fn bad(msg: String) -> ExperimentError {
    ExperimentError::Data(msg)
}

/// The fixed evaluation sequences (the seed's Sample stream).
fn probe_for<T: Float>(cfg: &BirthConfig, data: &Bigrams, m: &Gpt<T>) -> Probe<T> {
    let (n, t) = (cfg.probe.n_eval, cfg.data.seq_len);
    let (mut tokens, mut occ) = (vec![0; n * (t + 1)], vec![0; n * t]);
    let mut outs = vec![(0, 0); data.triggers.len()];
    data.batch(
        &mut tokens,
        &mut occ,
        &mut outs,
        &mut substream(cfg.seed, Stream::Sample, 1),
    );
    Probe::new(m, &tokens, occ, n, t)
}

fn run_typed<T: Float>(cfg: &BirthConfig, ctx: &mut RunCtx) -> Result<Summary, ExperimentError> {
    let data = Bigrams::load(&cfg.data.file, cfg.data.k).map_err(bad)?;
    ctx.artifact("bigram.json", &data.json())?;
    let (b, t) = (cfg.data.batch, cfg.data.seq_len);
    let model =
        model::build::<T>(cfg, data.vocab(), &mut stream(cfg.seed, Stream::Init)).map_err(bad)?;
    let mut probe = probe_for(cfg, &data, &model);
    let init = probe.evaluate(&model, &data);
    let data = Triggered::new(data, b, t);
    let mut task = Task::new(model, data, b, t, stream(cfg.seed, Stream::Data));
    let mut probe_fn = |tk: &mut Task<T>, step: u64, ctx: &mut RunCtx| -> Result<(), RunError> {
        let e = probe.evaluate(&tk.model, &tk.data.bigrams);
        ctx.log("probe", step, &e.record())
    };
    let fitted = fit(&mut task, &cfg.train, ctx, &mut probe_fn)?;
    let fin = probe.evaluate(&task.model, &task.data.bigrams);
    let m = report::measured(ctx, init, fin, fitted.final_loss)?;
    report::figures(cfg, ctx, &task, &mut probe, &m)?;
    report::notes(cfg, ctx, &task, &m)?;
    Ok(verdicts::summary(cfg, &m))
}
