//! Attention as a max-margin token selector (Tarzanagh, Li, Zhang, Oymak 2023;
//! Tarzanagh, Li, Thrampoulidis, Oymak 2023): gradient descent on the key-query
//! matrix of one softmax-attention layer makes `W(t)` grow without bound while its
//! direction turns to the attention-SVM solution `W^mm` of the tokens it selects;
//! trained as `W = K Qᵀ`, the direction is no longer `W^mm` (it is the nuclear-norm
//! SVM's in the papers) and `W` becomes low rank.
//!
//! The run: draw the synthetic setting of the papers' code (`data.rs`), train
//! `W` or `(K, Q)` by normalised GD (`model.rs`), probing the correlation of `W(t)`
//! with the Frobenius attention-SVM (`svm.rs`, solved by `clarabel`) for the tokens
//! the attention selects, for the tokens of highest score (globally optimal) and
//! for a wrong selection (the control), and for `(K, Q)` with the nuclear-norm SVM
//! of the selected tokens (`nuclear.rs`, an SDP solved by `totsu`), then write
//! figures and verdicts.

pub mod analysis;
pub mod data;
pub mod hooked;
mod measure;
pub mod model;
pub mod nuclear;
pub mod regpath;
mod report;
pub mod svm;
mod train;
pub mod verdicts;

use verdicts::ids;

use crate::claims::Claim;
use crate::config::presets::Preset;
use crate::experiment::{Dtype, ExperimentError, Paper, ReproduceItem};
use crate::run::summary::Summary;
use crate::run::{RunConfig, RunCtx};
use crate::train::{OptimizerKind, TrainConfig};
use data::{generate, DataConfig};
use mechlab_engine::{F64x2, Float};
use model::{ModelConfig, Output, Param2};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The `[probe]` section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProbeConfig {
    /// Correlation the direction must reach.
    pub corr_threshold: f64,
    /// Relative size below which a singular value counts as zero in the rank.
    pub rank_tol: f64,
    /// Measure against the wrong selection instead of the selected tokens (a
    /// control that must fail).
    pub swap_selected: bool,
    /// Radii of the regularisation path (`regpath.rs`), increasing; empty: none.
    pub reg_radii: Vec<f64>,
    /// Projected-gradient steps per radius.
    pub reg_steps: u64,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        ProbeConfig {
            corr_threshold: 0.99,
            rank_tol: 1e-3,
            swap_selected: false,
            reg_radii: vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0],
            reg_steps: 2000,
        }
    }
}

/// The experiment's whole config.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AttentionSvmConfig {
    pub experiment: String,
    pub description: String,
    pub seed: u64,
    pub run: RunConfig,
    pub train: TrainConfig,
    pub data: DataConfig,
    pub model: ModelConfig,
    pub probe: ProbeConfig,
}

crate::common_config!(AttentionSvmConfig);

impl Default for AttentionSvmConfig {
    fn default() -> Self {
        AttentionSvmConfig {
            experiment: "attention-svm".into(),
            description: String::new(),
            seed: 0,
            run: RunConfig {
                probe_every: 20,
                ..RunConfig::default()
            },
            train: TrainConfig {
                optimizer: OptimizerKind::NormalizedGd,
                lr: 0.1,
                steps: 2000,
                ..TrainConfig::default()
            },
            data: DataConfig::default(),
            model: ModelConfig::default(),
            probe: ProbeConfig::default(),
        }
    }
}

pub struct AttentionSvm;

/// The paper's presets.
pub const PRESETS: &[Preset] = &[
    crate::preset!("attention-svm-w"),
    crate::preset!("attention-svm-kq"),
    crate::preset!("attention-svm-local"),
];

impl Paper for AttentionSvm {
    type Config = AttentionSvmConfig;
    fn name(&self) -> &'static str {
        "attention-svm"
    }
    fn citation(&self) -> &'static str {
        "Davoud Ataee Tarzanagh, Yingcong Li, Xuechen Zhang, Samet Oymak. Max-Margin Token Selection in Attention Mechanism. NeurIPS 2023 (arXiv 2306.13596); Davoud Ataee Tarzanagh, Yingcong Li, Christos Thrampoulidis, Samet Oymak. Transformers as Support Vector Machines (arXiv 2308.16898)."
    }
    fn presets(&self) -> &'static [Preset] {
        PRESETS
    }
    fn validate(&self, c: &AttentionSvmConfig) -> Result<(), String> {
        c.data.check()?;
        // The sequence output holds every sequence once per query: n·t items of t tokens.
        let cells = c.data.n * c.data.t * c.data.t;
        if c.model.output == Output::Sequence && cells > 1_000_000 {
            return Err(format!(
                "model.output = \"sequence\" with data.n = {} and data.t = {}: n·t² = {cells} tokens, at most 1000000",
                c.data.n, c.data.t
            ));
        }
        c.train.resolved_stages()?;
        if !(c.model.init.is_finite() && c.model.init >= 0.0) {
            return Err(format!(
                "model.init = {}: must be finite and ≥ 0",
                c.model.init
            ));
        }
        if c.model.param == Param2::Kq && c.model.init == 0.0 {
            return Err(
                "model.init = 0 with model.param = \"kq\": K = Q = 0 is a stationary point".into(),
            );
        }
        if !(c.model.kq_reg.is_finite() && c.model.kq_reg >= 0.0) {
            return Err(format!(
                "model.kq_reg = {}: must be finite and ≥ 0",
                c.model.kq_reg
            ));
        }
        if c.model.param == Param2::W && c.model.kq_reg > 0.0 {
            return Err(format!(
                "model.kq_reg = {} with model.param = \"w\": the regulariser is on K and Q, which the w parameterisation does not have",
                c.model.kq_reg
            ));
        }
        if c.model.m > 64 {
            return Err(format!("model.m = {}: must be in 0..=64", c.model.m));
        }
        if !(c.probe.corr_threshold > 0.0 && c.probe.corr_threshold <= 1.0) {
            return Err(format!(
                "probe.corr_threshold = {}: must be in (0, 1]",
                c.probe.corr_threshold
            ));
        }
        let r = &c.probe.reg_radii;
        if r.iter().any(|x| !(x.is_finite() && *x > 0.0)) || r.windows(2).any(|w| w[0] >= w[1]) {
            return Err(format!(
                "probe.reg_radii = {r:?}: must be positive, finite and increasing"
            ));
        }
        if !r.is_empty() && c.probe.reg_steps == 0 {
            return Err(
                "probe.reg_steps = 0: must be at least 1 when probe.reg_radii is set".into(),
            );
        }
        if !(c.probe.rank_tol > 0.0 && c.probe.rank_tol < 1.0) {
            return Err(format!(
                "probe.rank_tol = {}: must be in (0, 1)",
                c.probe.rank_tol
            ));
        }
        Ok(())
    }
    fn run(&self, cfg: &AttentionSvmConfig, ctx: &mut RunCtx) -> Result<Summary, ExperimentError> {
        run(cfg, ctx)
    }
    fn reproduce(&self) -> Vec<ReproduceItem> {
        // Each run takes a fraction of a second (kq a few): five seeds each.
        ["attention-svm-w", "attention-svm-kq", "attention-svm-local"]
            .into_iter()
            .map(|preset| ReproduceItem::new(preset, &[]).with_seeds(5))
            .collect()
    }
    fn claims(&self, _cfg: &AttentionSvmConfig) -> &'static [Claim] {
        // Claim (c) at the authors' 2 000 steps: their algorithm, run on the same
        // data (bench/attention_svm/authors_port.py --from), ends locally optimal
        // on 4 of seeds 0–4 (seed 1 keeps a token a support token outscores, in
        // theirs as in ours); at 20 000 steps both are (docs/attention-svm.md,
        // "Claim (c)").
        CLAIMS
    }
    crate::analysis_half!(analysis);
}

static CLAIMS: &[Claim] = &[Claim::authors(ids::LOCAL, 4, 5, "docs/attention-svm.md")];

fn run(cfg: &AttentionSvmConfig, ctx: &mut RunCtx) -> Result<Summary, ExperimentError> {
    match cfg.model.dtype {
        Dtype::F32 => run_typed::<f32>(cfg, ctx),
        Dtype::F64 => run_typed::<f64>(cfg, ctx),
        Dtype::F64x2 => run_typed::<F64x2>(cfg, ctx),
    }
}

fn run_typed<T: Float>(
    cfg: &AttentionSvmConfig,
    ctx: &mut RunCtx,
) -> Result<Summary, ExperimentError> {
    let seed = cfg.seed;
    let (data, v) = generate(&cfg.data, seed);
    // From here on an item is one (sequence, query) pair: the sequence output makes
    // every token a query, and the SVMs get one constraint set per query.
    let data = Arc::new(match cfg.model.output {
        Output::Cls => data,
        Output::Sequence => data.token_queries(),
    });
    let trained = train::train::<T>(cfg, &data, &v, seed, ctx)?;
    let measured = measure::measure(cfg, &data, &v, seed, &trained);
    report::figures(cfg, &measured, ctx)?;
    let s = verdicts::summary(cfg, &data, &v, seed, &trained, &measured);
    report::notes(cfg, data.t, &trained, &measured, ctx)?;
    Ok(s)
}
