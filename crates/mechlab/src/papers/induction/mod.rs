//! Induction heads: "Unveiling Induction Heads: Provable Training Dynamics and
//! Feature Learning in Transformers" (Chen, Sheen, Wang, Yang; NeurIPS 2024).
//!
//! A two-layer RPE transformer trained by full-batch gradient descent on in-context
//! n-gram data becomes a *copier* (layer-1 heads each copy one parent distance), a
//! *selector* (the FFN's kernel keeps the subset of heads that matches the true
//! parents, the one maximising the modified χ² mutual information) and a
//! *classifier* (layer 2's scale `a` grows, sharpening the induction head). This
//! experiment trains the simplified model, logs the three probes over training,
//! compares the loss with the uniform, Bayes, induction-head and oracle baselines,
//! and tests the trained parameters on other lengths and priors.
//!
//! ```
//! use mechlab::papers::induction::InductionConfig;
//! let cfg = InductionConfig::default();
//! assert_eq!(cfg.data.parents, vec![1, 2]);
//! ```

pub mod analysis;
pub mod causal;
mod cells;
mod chi2;
pub mod config;
pub mod data;
pub mod direct;
mod direct_l1;
pub mod full;
pub mod hooks;
pub mod interventions;
mod layer2;
mod measure;
pub mod probes;
mod report;
mod rows;
pub mod simplified;
pub(crate) mod task;
mod train;
mod verdicts;
mod viewer;
mod windows;

use crate::config::presets::Preset;
use crate::experiment::{Dtype, ExperimentError, Paper, ReproduceItem};
use crate::papers::induction::direct::{Direct, DirectConfig};
use crate::papers::induction::full::{Full, FullConfig};
use crate::papers::induction::probes::InductionModel;
use crate::papers::induction::simplified::{Simplified, SimplifiedConfig};
use crate::run::metrics;
use crate::run::summary::Summary;
use crate::run::RunCtx;
use data::MarkovSpec;
use mechlab_engine::{F64x2, Float};
pub use task::Task;

fn bad(msg: String) -> ExperimentError {
    ExperimentError::Data(msg)
}

use config::check;
pub use config::{DataConfig, InductionConfig, ModelConfig, ModelKind, ModelPath, ProbeConfig};

/// The registered experiment.
pub struct Induction;

/// The paper's presets.
pub const PRESETS: &[Preset] = &[
    crate::preset!("induction-simplified"),
    crate::preset!("induction-staged"),
    crate::preset!("induction-full"),
    crate::preset!("induction-bigram"),
    crate::preset!("induction-noncontiguous"),
    crate::preset!("induction-vocab10"),
    crate::preset!("induction-copier"),
    crate::preset!("induction-copier-frozen"),
];

impl Paper for Induction {
    type Config = InductionConfig;
    fn name(&self) -> &'static str {
        "induction"
    }
    fn citation(&self) -> &'static str {
        "Chen, Sheen, Wang, Yang (2024). Unveiling Induction Heads: Provable Training Dynamics and Feature Learning in Transformers. NeurIPS 2024, arXiv:2409.10559"
    }
    fn presets(&self) -> &'static [Preset] {
        PRESETS
    }
    fn validate(&self, cfg: &InductionConfig) -> Result<(), String> {
        check(cfg)
    }
    fn run(&self, cfg: &InductionConfig, ctx: &mut RunCtx) -> Result<Summary, ExperimentError> {
        let m = &cfg.model;
        let (simple, full) = (simplified_config(cfg), full_config(cfg));
        if !config::uses_table(cfg) {
            let dc = direct_config(cfg);
            return match m.dtype {
                Dtype::F32 => run_typed(cfg, ctx, Direct::<f32>::new(&dc)),
                Dtype::F64 => run_typed(cfg, ctx, Direct::<f64>::new(&dc)),
                Dtype::F64x2 => run_typed(cfg, ctx, Direct::<F64x2>::new(&dc)),
            };
        }
        match (m.kind, m.dtype) {
            (ModelKind::Full, Dtype::F32) => run_typed(cfg, ctx, Full::<f32>::new(&full)),
            (ModelKind::Full, Dtype::F64) => run_typed(cfg, ctx, Full::<f64>::new(&full)),
            (ModelKind::Full, Dtype::F64x2) => run_typed(cfg, ctx, Full::<F64x2>::new(&full)),
            (ModelKind::Simplified, Dtype::F32) => {
                run_typed(cfg, ctx, Simplified::<f32>::new(&simple))
            }
            (ModelKind::Simplified, Dtype::F64) => {
                run_typed(cfg, ctx, Simplified::<f64>::new(&simple))
            }
            (ModelKind::Simplified, Dtype::F64x2) => {
                run_typed(cfg, ctx, Simplified::<F64x2>::new(&simple))
            }
        }
    }
    fn reproduce(&self) -> Vec<ReproduceItem> {
        vec![
            ReproduceItem::new("induction-simplified", REPRODUCE_OVERRIDES),
            ReproduceItem::new("induction-noncontiguous", REPRODUCE_SHORT),
            ReproduceItem::new("induction-bigram", REPRODUCE_SHORT),
            ReproduceItem::new("induction-vocab10", REPRODUCE_GENERAL),
            // The frozen-copier verdict and its control (docs/interventions.md).
            ReproduceItem::new("induction-copier", REPRODUCE_COPIER),
            ReproduceItem::new("induction-copier-frozen", REPRODUCE_COPIER),
        ]
    }
    crate::analysis_half!(analysis);
}

/// The simplified model's settings from a run's config (the table path).
pub fn simplified_config(cfg: &InductionConfig) -> SimplifiedConfig {
    let m = &cfg.model;
    SimplifiedConfig {
        d_vocab: cfg.data.vocab,
        n_heads: m.n_heads,
        degree: m.degree,
        w_plus: m.w_plus,
        w_minus: m.w_minus,
        c_init: m.c_init,
        a_init: m.a_init,
        loss: m.loss,
        nll_floor: m.nll_floor,
    }
}

/// The full model's settings from a run's config (the table path).
pub fn full_config(cfg: &InductionConfig) -> FullConfig {
    let m = &cfg.model;
    FullConfig {
        d_vocab: cfg.data.vocab,
        n_heads: m.n_heads,
        degree: m.degree,
        w_plus: m.w_plus,
        w_minus: m.w_minus,
        c_init: m.c_init,
        a_init: m.a_init,
        proj_init: m.proj_init,
        loss: m.loss,
        nll_floor: m.nll_floor,
    }
}

/// Either model's settings for the general (direct) path.
pub fn direct_config(cfg: &InductionConfig) -> DirectConfig {
    let f = full_config(cfg);
    DirectConfig {
        kind: cfg.model.kind,
        d_vocab: f.d_vocab,
        n_heads: f.n_heads,
        degree: f.degree,
        w_plus: f.w_plus,
        w_minus: f.w_minus,
        c_init: f.c_init,
        a_init: f.a_init,
        proj_init: f.proj_init,
        loss: f.loss,
        nll_floor: f.nll_floor,
    }
}

/// The shortened schedule `mechlab reproduce induction` runs for the paper's setting
/// (1 500 of the paper's 50 000 epochs; see `docs/induction.md`).
pub const REPRODUCE_OVERRIDES: &[&str] = &["train.steps=1500", "probe.gen_n=500"];
/// The S = 10 preset's schedule under `mechlab reproduce induction` (the direct
/// path; see `docs/induction.md`).
pub const REPRODUCE_GENERAL: &[&str] = &["train.steps=300", "probe.gen_n=200"];
/// The copier pair's schedule under `mechlab reproduce induction`: head 2 moves
/// onto distance 4 between epochs 600 and 1 000 when free (seed 2024).
pub const REPRODUCE_COPIER: &[&str] = &["train.steps=1200", "probe.gen_n=300"];
/// The variants' shortened schedule under `mechlab reproduce induction`.
pub const REPRODUCE_SHORT: &[&str] = &["train.steps=600", "probe.gen_n=300"];

pub(crate) fn spec_of(cfg: &InductionConfig, n: usize) -> MarkovSpec {
    MarkovSpec {
        vocab: cfg.data.vocab,
        seq_len: cfg.data.seq_len,
        parents: cfg.data.parents.clone(),
        alpha: cfg.data.alpha,
        n_seqs: n,
        variant: cfg.data.variant,
    }
}

fn run_typed<T: Float, M: InductionModel<T> + mechlab_engine::hooks::HookedModel>(
    cfg: &InductionConfig,
    ctx: &mut RunCtx,
    model: M,
) -> Result<Summary, ExperimentError> {
    let seed = cfg.seed;
    let spec = spec_of(cfg, cfg.data.n_train + cfg.data.n_val);
    let all = data::generate(&spec, seed).map_err(bad)?;
    let train = all.slice(0, cfg.data.n_train);
    let val = all.slice(cfg.data.n_train, all.len());
    let mut trained = train::train::<T, M>(cfg, ctx, model, &train, &val)?;
    let m = measure::measure::<T, M>(cfg, seed, &mut trained.task.model, &train, &val)?;
    report::figures::<T, M>(cfg, &mut trained, &m, &val, ctx)?;
    let s = verdicts::summary::<T, M>(cfg, seed, &mut trained, &m, &val)?;
    report::notes(cfg, &m, ctx)?;
    Ok(s)
}

fn a_at(recs: &[serde_json::Map<String, serde_json::Value>], steps: &[u64]) -> String {
    let (x, y) = metrics::series(recs, "probe", "a");
    steps
        .iter()
        .filter_map(|&st| {
            x.iter()
                .position(|&s| s as u64 == st)
                .map(|i| format!("epoch {st}: {:.2}", y[i]))
        })
        .collect::<Vec<_>>()
        .join(", ")
}
