//! In-context linear regression by gradient descent: a linear self-attention
//! layer trained on regression prompts computes one step of gradient descent on
//! the prompt's least-squares loss (von Oswald et al. 2023), preconditioned by
//! the inverse input covariance when the inputs are not isotropic (Ahn et al.
//! 2023), `L` layers computing `L` steps; gradient flow from Zhang, Frei &
//! Bartlett's initialisation reaches the closed-form global minimum, whose error
//! over prompt lengths and under covariate shift their formulas give (2024).
//!
//! The run: prompts drawn fresh each step (`data.rs`), the LSA (`model.rs`)
//! trained by the generic trainer with a probe that compares it with the
//! reference predictors (`measure.rs`, `theory.rs`), then the risk over prompt
//! lengths and shifts, figures, and the verdicts of the claim set
//! `probe.claims` (`verdicts.rs`).

pub mod analysis;
pub mod data;
pub mod gdpp;
pub mod hooked;
mod lanes;
pub mod measure;
pub mod model;
mod model_config;
#[cfg(test)]
mod model_tests;
mod products;
mod report;
pub mod softmax;
#[cfg(test)]
mod softmax_tests;
mod steps;
pub mod theory;
pub mod verdicts;

use crate::config::presets::Preset;
use crate::experiment::{ExperimentError, Paper, ReproduceItem};
use crate::run::summary::Summary;
use crate::run::{RunConfig, RunCtx, RunError};
use crate::train::{fit, OptimizerKind, TrainConfig};
use data::{DataConfig, Task, XDist};
use measure::{Eval, Probe};
use model::{Attention, Init, Lsa, ModelConfig, Param2};
use serde::{Deserialize, Serialize};

/// Which paper's claims a run is judged on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Claims {
    /// von Oswald et al.: one layer on isotropic inputs is one GD step.
    #[default]
    OneStep,
    /// Ahn et al.: one layer on non-isotropic inputs is one preconditioned step.
    Preconditioner,
    /// Ahn et al.: `L` layers in the `P = 0` form (`model.param = "steps"`) are
    /// `L` steps of GD, each preconditioned by a multiple of `Σ⁻¹`.
    MultiLayer,
    /// No claim: the measurements only (any number of layers).
    None,
    /// Zhang, Frei, Bartlett: the global minimum, its risk over prompt lengths
    /// and under covariate shift.
    GlobalMin,
}

/// The `[probe]` section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProbeConfig {
    pub claims: Claims,
    /// Prompt lengths at which the final risk is measured (global-min).
    pub lengths: Vec<usize>,
    /// Scales of the inputs' covariance for the covariate-shift risk (global-min).
    pub shift_scales: Vec<f64>,
    /// Fresh prompts per length and per shift.
    pub risk_prompts: usize,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        ProbeConfig {
            claims: Claims::OneStep,
            lengths: Vec::new(),
            shift_scales: Vec::new(),
            risk_prompts: 20_000,
        }
    }
}

/// The experiment's whole config.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IclRegressionConfig {
    pub experiment: String,
    pub description: String,
    pub seed: u64,
    pub run: RunConfig,
    pub train: TrainConfig,
    pub data: DataConfig,
    pub model: ModelConfig,
    pub probe: ProbeConfig,
}

crate::common_config!(IclRegressionConfig);

impl Default for IclRegressionConfig {
    fn default() -> Self {
        IclRegressionConfig {
            experiment: "icl-regression".into(),
            description: String::new(),
            seed: 0,
            run: RunConfig {
                probe_every: 100,
                ..RunConfig::default()
            },
            train: TrainConfig {
                optimizer: OptimizerKind::Adam,
                lr: 1e-3,
                steps: 2000,
                ..TrainConfig::default()
            },
            data: DataConfig::default(),
            model: ModelConfig::default(),
            probe: ProbeConfig::default(),
        }
    }
}

pub struct IclRegression;

/// The paper's presets.
pub const PRESETS: &[Preset] = &[
    crate::preset!("icl-regression-gd"),
    crate::preset!("icl-regression-precond"),
    crate::preset!("icl-regression-zfb"),
    crate::preset!("icl-regression-3l"),
    crate::preset!("icl-regression-softmax"),
];

impl Paper for IclRegression {
    type Config = IclRegressionConfig;
    fn name(&self) -> &'static str {
        "icl-regression"
    }
    fn citation(&self) -> &'static str {
        "Johannes von Oswald, Eyvind Niklasson, Ettore Randazzo, João Sacramento, Alexander Mordvintsev, Andrey Zhmoginov, Max Vladymyrov. Transformers learn in-context by gradient descent. ICML 2023; Kwangjun Ahn, Xiang Cheng, Hadi Daneshmand, Suvrit Sra. Transformers learn to implement preconditioned gradient descent for in-context learning. NeurIPS 2023; Ruiqi Zhang, Spencer Frei, Peter L. Bartlett. Trained transformers learn linear models in-context. JMLR 25(49), 2024."
    }
    fn presets(&self) -> &'static [Preset] {
        PRESETS
    }
    fn validate(&self, c: &IclRegressionConfig) -> Result<(), String> {
        c.data.check()?;
        c.train.resolved_stages()?;
        let m = &c.model;
        m.check()?;
        let p = &c.probe;
        if m.attention == Attention::Softmax && p.claims != Claims::None {
            return Err(format!(
                "probe.claims = \"{}\" judges linear attention's weights against the papers' constructions: with model.attention = \"softmax\" use probe.claims = \"none\" (the comparison with GD is measured)",
                crate::config::name_of(&p.claims)
            ));
        }
        if matches!(
            p.claims,
            Claims::OneStep | Claims::Preconditioner | Claims::GlobalMin
        ) && m.layers != 1
        {
            return Err(format!(
                "probe.claims = \"{}\" judges a one-layer model: model.layers = {} must be 1",
                crate::config::name_of(&p.claims),
                m.layers
            ));
        }
        if p.claims == Claims::MultiLayer && (m.layers < 2 || m.param != model::Param2::Steps) {
            return Err(format!(
                "probe.claims = \"multi-layer\" judges layers that are GD steps: model.layers = {} must be at least 2 and model.param = \"{}\" must be \"steps\"",
                m.layers,
                crate::config::name_of(&m.param)
            ));
        }
        if p.claims == Claims::GlobalMin && c.data.x == XDist::Uniform {
            return Err(
                "probe.claims = \"global-min\": the closed forms hold for Gaussian inputs, data.x = \"uniform\" is not"
                    .into(),
            );
        }
        if let Some(l) = p.lengths.iter().find(|&&l| !(1..=1024).contains(&l)) {
            return Err(format!("probe.lengths holds {l}: each must be in 1..=1024"));
        }
        if let Some(s) = p
            .shift_scales
            .iter()
            .find(|s| !(s.is_finite() && **s > 0.0))
        {
            return Err(format!(
                "probe.shift_scales holds {s}: each must be positive"
            ));
        }
        if p.risk_prompts < 2 {
            return Err(format!(
                "probe.risk_prompts = {}: must be at least 2",
                p.risk_prompts
            ));
        }
        Ok(())
    }
    fn run(&self, cfg: &IclRegressionConfig, ctx: &mut RunCtx) -> Result<Summary, ExperimentError> {
        run(cfg, ctx)
    }
    fn reproduce(&self) -> Vec<ReproduceItem> {
        [
            "icl-regression-gd",
            "icl-regression-precond",
            "icl-regression-zfb",
            "icl-regression-3l",
        ]
        .into_iter()
        .map(|preset| ReproduceItem::new(preset, &[]).with_seeds(3))
        .collect()
    }
    crate::analysis_half!(analysis);
}

/// Logs one probe's reading (not in the training step: a probe allocates).
fn log(p: &Probe, ev: &Eval, step: u64, ctx: &mut RunCtx) -> Result<(), RunError> {
    let mut readings = p.readings();
    readings.push(("mse_gd".into(), ev.mse_gd));
    readings.push(("mse_opt".into(), ev.mse_opt));
    let rec: Vec<(&str, f64)> = readings.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    ctx.log("probe", step, &rec)
}

fn run(cfg: &IclRegressionConfig, ctx: &mut RunCtx) -> Result<Summary, ExperimentError> {
    let seed = cfg.seed;
    let task = Task::new(&cfg.data, seed);
    let ev = Eval::new(&task, seed, cfg.data.eval_prompts);
    let mut model = Lsa::new(&cfg.model, task, cfg.data.batch, seed);
    let mut probe =
        |m: &mut Lsa, step: u64, ctx: &mut RunCtx| log(&measure::probe(m, &ev), &ev, step, ctx);
    let fitted = fit(&mut model, &cfg.train, ctx, &mut probe)?;
    let last = measure::probe(&model, &ev);
    let (count, p) = (cfg.probe.risk_prompts, &cfg.probe);
    let lengths = measure::over_lengths(&model, &ev, seed, count, &p.lengths);
    let shifts = measure::under_shift(&model, &ev, seed, count, &p.shift_scales);
    let at_n = measure::over_lengths(&model, &ev, seed, count, &[cfg.data.n]);
    // GD++ is what von Oswald et al. set deeper models beside; P = 0 models are GD
    let gdpp = (cfg.model.layers >= 2
        && cfg.model.attention == Attention::Linear
        && matches!(cfg.model.param, Param2::Full | Param2::Blocks))
    .then(|| gdpp::compare(&model, &ev, seed, gdpp::FIT_STEPS));
    let m = verdicts::Measured {
        fitted,
        last,
        lengths,
        shifts,
        at_n: at_n[0].clone(),
        sigma_scale: model.task().sigma[(0, 0)],
        gdpp,
    };
    report::figures(cfg, &ev, &m, ctx)?;
    report::notes(cfg, &ev, &m, ctx)?;
    Ok(verdicts::summary(cfg, &ev, &m))
}

/// The init a config names, for notes.
pub(crate) fn init_name(m: &ModelConfig) -> &'static str {
    match m.init {
        Init::Normal => "normal",
        Init::Zfb => "zfb",
    }
}
