//! Transformers learn causal structure with gradient descent (Nichani, Damian &
//! Lee, ICML 2024): on sequences whose positions follow a latent graph, with
//! transitions drawn per sequence, a two-layer attention-only transformer
//! trained by gradient descent puts its first layer's attention on each
//! position's parent (the graph), because that layer's gradient tracks the
//! mutual information between positions, and its second layer becomes an
//! induction head that estimates the query's transition in context.
//!
//! The run: sequences drawn fresh each step (`data.rs`), their CatFormer
//! (`model.rs`, zero init, SGD with cosine decay) trained by the generic
//! trainer with a probe of parent attention, induction and loss
//! (`measure.rs`), then the χ²-MI estimate and the theory's start gradient,
//! figures, and the verdicts of the claim set `probe.claims` (`verdicts.rs`).

pub mod analysis;
pub mod data;
pub mod hooked;
pub mod measure;
pub mod model;
#[cfg(test)]
mod model_tests;
mod report;
pub mod verdicts;

use crate::claims::Claim;
use crate::config::presets::Preset;
use crate::experiment::{ExperimentError, Paper, ReproduceItem};
use crate::run::summary::Summary;
use crate::run::{RunConfig, RunCtx, RunError};
use crate::train::config::ScheduleKind;
use crate::train::{fit, OptimizerKind, TrainConfig};
use data::{Control, DataConfig, Task};
use measure::{Eval, Probe};
use model::{CatFormer, ModelConfig};
use serde::{Deserialize, Serialize};

/// Which claims a run is judged on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Claims {
    /// One graph for the run: parent attention, near-Bayes loss, induction
    /// head, parents at the largest mutual information.
    #[default]
    Graph,
    /// A control (`data.control` not `none`): layer 1 does not find the parents.
    Control,
    /// No claim: the measurements only.
    None,
}

/// The `[probe]` section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProbeConfig {
    pub claims: Claims,
    /// Held-out sequences each probe reads.
    pub n_probe: usize,
    /// The χ²-MI estimate: transition matrices, and sequences per matrix.
    pub mi_pis: usize,
    pub mi_seqs: usize,
    /// The theory's start: `β` of `A2`'s match block, and the sequences the
    /// gradient is averaged over.
    pub start_beta: f64,
    pub start_seqs: usize,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        ProbeConfig {
            claims: Claims::Graph,
            n_probe: 4096,
            mi_pis: 32,
            mi_seqs: 2048,
            start_beta: 0.1,
            start_seqs: 32_768,
        }
    }
}

/// The experiment's whole config.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CausalConfig {
    pub experiment: String,
    pub description: String,
    pub seed: u64,
    pub run: RunConfig,
    pub train: TrainConfig,
    pub data: DataConfig,
    pub model: ModelConfig,
    pub probe: ProbeConfig,
}

crate::common_config!(CausalConfig);

impl Default for CausalConfig {
    fn default() -> Self {
        CausalConfig {
            experiment: "causal-structure".into(),
            description: String::new(),
            seed: 0,
            run: RunConfig {
                probe_every: 100,
                ..RunConfig::default()
            },
            train: TrainConfig {
                optimizer: OptimizerKind::Sgd,
                lr: 8.0,
                steps: 3000,
                schedule: ScheduleKind::Cosine,
                final_lr_ratio: 0.0,
                ..TrainConfig::default()
            },
            data: DataConfig::default(),
            model: ModelConfig::default(),
            probe: ProbeConfig::default(),
        }
    }
}

pub struct CausalStructure;

/// The paper's presets.
pub const PRESETS: &[Preset] = &[
    crate::preset!("causal-structure-chain"),
    crate::preset!("causal-structure-icl"),
    crate::preset!("causal-structure-random"),
    crate::preset!("causal-structure-redraw"),
    crate::preset!("causal-structure-shuffle"),
];

impl Paper for CausalStructure {
    type Config = CausalConfig;
    fn name(&self) -> &'static str {
        "causal-structure"
    }
    fn citation(&self) -> &'static str {
        "Eshaan Nichani, Alex Damian, Jason D. Lee. How Transformers Learn Causal Structure with Gradient Descent. ICML 2024 (PMLR 235)."
    }
    fn presets(&self) -> &'static [Preset] {
        PRESETS
    }
    fn validate(&self, c: &CausalConfig) -> Result<(), String> {
        c.data.check()?;
        c.train.resolved_stages()?;
        if let Some(h) = c.model.heads.iter().find(|h| !(1..=4).contains(*h)) {
            return Err(format!(
                "model.heads holds {h}: each layer has 1 to 4 heads"
            ));
        }
        let p = &c.probe;
        match (p.claims, c.data.control) {
            (Claims::Graph, Control::Redraw | Control::Shuffle) => {
                return Err(format!(
                    "probe.claims = \"graph\" judges one graph shared by the sequences: data.control = \"{}\" moves it; use probe.claims = \"control\"",
                    crate::config::name_of(&c.data.control)
                ))
            }
            (Claims::Control, Control::None) => {
                return Err(
                    "probe.claims = \"control\" judges a control: set data.control to \"redraw\" or \"shuffle\""
                        .into(),
                )
            }
            _ => {}
        }
        if p.n_probe == 0 {
            return Err("probe.n_probe = 0: a probe reads at least one sequence".into());
        }
        if c.data.control == Control::None && (p.mi_pis == 0 || p.mi_seqs < 2) {
            return Err(format!(
                "probe.mi_pis = {}, probe.mi_seqs = {}: the MI estimate needs at least one matrix and two sequences",
                p.mi_pis, p.mi_seqs
            ));
        }
        if !(p.start_beta.is_finite() && p.start_beta > 0.0) || p.start_seqs == 0 {
            return Err(format!(
                "probe.start_beta = {}, probe.start_seqs = {}: β must be positive and the gradient needs sequences",
                p.start_beta, p.start_seqs
            ));
        }
        Ok(())
    }
    fn run(&self, cfg: &CausalConfig, ctx: &mut RunCtx) -> Result<Summary, ExperimentError> {
        run(cfg, ctx)
    }
    fn reproduce(&self) -> Vec<ReproduceItem> {
        // The chain, the pairs and the two controls at the small size (a sixth of
        // a preset run); the random graphs at the presets' size, the smallest
        // where the authors' training finds their parents (7 of 9 graphs; 1 of 9
        // at the small size: docs/causal-structure.md, "What reproduce runs").
        let full: &[&str] = &[];
        [
            ("causal-structure-chain", REPRODUCE_SMALL),
            ("causal-structure-icl", REPRODUCE_SMALL),
            ("causal-structure-random", full),
            ("causal-structure-redraw", REPRODUCE_SMALL),
            ("causal-structure-shuffle", REPRODUCE_SMALL),
        ]
        .into_iter()
        .map(|(preset, overrides)| ReproduceItem::new(preset, overrides).with_seeds(3))
        .collect()
    }
    fn claims(&self, cfg: &CausalConfig) -> &'static [Claim] {
        // On random graphs the authors' training (their code ported and checked,
        // bench/causal_structure) leaves some position's attention peaking away
        // from its parent on some graphs: at the presets' size on 2 of 9 (seeds 7
        // and 8), at the small size on 8 of 9. The parent-attention and max-MI
        // claims, whose rules ask for every position, hold at their rate there
        // (docs/causal-structure.md, "Findings").
        static RANDOM: &[Claim] = &[
            Claim::authors(verdicts::ids::PARENT, 7, 9, "docs/causal-structure.md"),
            Claim::authors(verdicts::ids::MI, 7, 9, "docs/causal-structure.md"),
        ];
        static SMALL_RANDOM: &[Claim] = &[
            Claim::authors(verdicts::ids::PARENT, 1, 9, "docs/causal-structure.md"),
            Claim::authors(verdicts::ids::MI, 1, 9, "docs/causal-structure.md"),
        ];
        match (verdicts::Setting::of(cfg), cfg.data.graph) {
            (Some(verdicts::Setting::Preset), data::GraphKind::Random) => RANDOM,
            (Some(verdicts::Setting::Small), data::GraphKind::Random) => SMALL_RANDOM,
            _ => &[],
        }
    }
    crate::analysis_half!(analysis);
}

/// `reproduce`'s small setting ([`verdicts::Setting::Small`]): S 5, T 10 and
/// 1 000 steps, the presets' batch, learning rate and schedule.
pub const REPRODUCE_SMALL: &[&str] = &["data.vocab=5", "data.seq_len=10", "train.steps=1000"];

/// Logs one probe's reading (not in the training step: a probe allocates).
fn log(p: &Probe, step: u64, ctx: &mut RunCtx) -> Result<(), RunError> {
    let readings = p.readings();
    let rec: Vec<(&str, f64)> = readings.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    ctx.log("probe", step, &rec)
}

fn run(cfg: &CausalConfig, ctx: &mut RunCtx) -> Result<Summary, ExperimentError> {
    let seed = cfg.seed;
    let task = Task::new(&cfg.data, seed);
    let ev = Eval::new(&task, seed, cfg.data.eval_seqs);
    let n_probe = cfg.probe.n_probe;
    let mut model = CatFormer::new(&cfg.model, task, cfg.data.batch, seed);
    let mut probe = |m: &mut CatFormer, step: u64, ctx: &mut RunCtx| {
        log(&measure::probe(m, &ev, n_probe), step, ctx)
    };
    let fitted = fit(&mut model, &cfg.train, ctx, &mut probe)?;
    let last = measure::probe(&model, &ev, n_probe);
    let eval_loss = model.loss(&ev.seqs);
    let mi = model.task().fixed_graph().then(|| {
        let p = &cfg.probe;
        let dag = model.task().dag.clone();
        let chi2 = measure::chi2_mi(model.task(), seed, p.mi_pis, p.mi_seqs);
        let grad = measure::start_gradient(&model, p.start_beta, seed, p.start_seqs);
        let far: Vec<i64> = dag
            .iter()
            .enumerate()
            .map(|(i, &q)| if q >= 0 && q != i as i64 - 1 { q } else { -1 })
            .collect();
        let n_far = far.iter().filter(|&&q| q >= 0).count();
        verdicts::Mi {
            mi_argmax: measure::argmax_is_parent(&chi2, &dag),
            grad_argmax: measure::argmax_is_parent(&grad, &dag),
            grad_mi_corr: measure::row_corr(&grad, &chi2, &dag),
            far: n_far,
            far_found: measure::argmax_is_parent(&chi2, &far),
            chi2,
            grad,
        }
    });
    let m = verdicts::Measured {
        fitted,
        last,
        eval_loss,
        mi,
    };
    report::figures(cfg, &ev, &model, &m, ctx)?;
    report::notes(cfg, &ev, &model, &m, ctx)?;
    Ok(verdicts::summary(cfg, &ev, &m))
}
