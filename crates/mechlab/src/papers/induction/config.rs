//! The induction experiment's config: one typed struct, parsed and validated once
//! (before any run folder exists) by [`check`].

use super::data::Variant;
use super::full::Full;
use super::interventions::{Freezes, HeadInterventions, Intervention, InterventionKind};
use super::layer2::LossKind;
use super::simplified::Simplified;
use crate::experiment::Dtype;
use crate::run::RunConfig;
use crate::train::TrainConfig;
use serde::{Deserialize, Serialize};

/// `[data]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DataConfig {
    pub vocab: usize,
    pub seq_len: usize,
    /// Parent distances of the generating chain (1 = previous token).
    pub parents: Vec<usize>,
    pub alpha: f64,
    pub n_train: usize,
    pub n_val: usize,
    /// `ngram`, `redraw_last` or `doubly_stochastic`.
    pub variant: Variant,
}

impl Default for DataConfig {
    fn default() -> Self {
        DataConfig {
            vocab: 3,
            seq_len: 100,
            parents: vec![1, 2],
            alpha: 0.1,
            n_train: 9000,
            n_val: 1000,
            variant: Variant::NGram,
        }
    }
}

/// Which induction model (`model.kind`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelKind {
    /// The paper's simplified model (RPE-only layer 1, fused table kernel).
    #[default]
    Simplified,
    /// The full model with `W_Q`, `W_K`, `W_OV` and layer norm.
    Full,
}

/// How the model is computed (`model.path`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelPath {
    /// The window-table kernel when its table fits, else the direct path.
    #[default]
    Auto,
    /// The window-table kernel (refused when its table is too big).
    Table,
    /// The direct computation ([`super::direct`]), any supported size.
    Direct,
}

/// Largest vocabulary, number of heads and context length of the direct path.
pub const MAX_VOCAB: usize = 256;
pub const MAX_HEADS: usize = 8;
pub const MAX_SEQ_LEN: usize = 1024;

/// `[model]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
    /// `simplified` or `full`.
    pub kind: ModelKind,
    /// `auto` (the table kernel where its table fits), `table` or `direct`.
    pub path: ModelPath,
    /// `f64` or `f32`.
    pub dtype: Dtype,
    pub n_heads: usize,
    /// Largest subset size `D` of the kernel.
    pub degree: usize,
    pub w_plus: f64,
    pub w_minus: f64,
    pub c_init: f64,
    pub a_init: f64,
    /// `code` (the authors' loss) or `nll` (the true −log ŷ_y).
    pub loss: LossKind,
    pub nll_floor: f64,
    /// Full model: `W_Q = W_K = W_OV = proj_init · I` at init.
    pub proj_init: f64,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            kind: ModelKind::Simplified,
            path: ModelPath::Auto,
            dtype: Dtype::F64,
            n_heads: 3,
            degree: 2,
            w_plus: 3.0,
            w_minus: 0.1,
            c_init: 0.01,
            a_init: 0.01,
            loss: LossKind::Code,
            nll_floor: 1e-8,
            proj_init: 0.01,
        }
    }
}

/// `[probe]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProbeConfig {
    /// Sequence lengths for the generalisation curve (at the training α).
    pub gen_lengths: Vec<usize>,
    /// Priors α for the generalisation curve (at the training L).
    pub gen_alphas: Vec<f64>,
    /// Fresh sequences per generalisation point.
    pub gen_n: usize,
    /// Exponent of `p(E)` in the modified χ² MI (2: the paper's; 1: ordinary χ²).
    pub mi_power: f64,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        ProbeConfig {
            gen_lengths: vec![10, 20, 50, 100, 200, 400],
            gen_alphas: vec![0.05, 0.1, 0.3, 1.0],
            gen_n: 1000,
            mi_power: 2.0,
        }
    }
}

/// The experiment's whole config.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InductionConfig {
    pub experiment: String,
    pub description: String,
    pub seed: u64,
    pub run: RunConfig,
    pub train: TrainConfig,
    pub data: DataConfig,
    pub model: ModelConfig,
    pub probe: ProbeConfig,
    /// Training-time interventions (`[[interventions]]`); empty: none.
    pub interventions: Vec<Intervention>,
}

crate::common_config!(InductionConfig);

impl Default for InductionConfig {
    fn default() -> Self {
        InductionConfig {
            experiment: "induction".into(),
            description: "Induction heads on in-context n-gram data (Chen et al. 2024)".into(),
            seed: 2024,
            run: RunConfig {
                checkpoints: true,
                checkpoint_log_until: 1024,
                checkpoint_every: 5000,
                probe_every: 10,
            },
            train: TrainConfig {
                lr: 1.0,
                steps: 2000,
                log_every: 10,
                ..TrainConfig::default()
            },
            data: DataConfig::default(),
            model: ModelConfig::default(),
            probe: ProbeConfig::default(),
            interventions: Vec::new(),
        }
    }
}

/// The table kernel's size check for this config's model.
fn table_fits(cfg: &InductionConfig) -> Result<(), String> {
    let (s, h) = (cfg.data.vocab, cfg.model.n_heads);
    match cfg.model.kind {
        ModelKind::Simplified => Simplified::<f64>::check_size(s, h),
        ModelKind::Full => Full::<f64>::check_size(s, h),
    }
}

/// Whether the run uses the window-table kernel (`model.path`, resolved).
pub fn uses_table(cfg: &InductionConfig) -> bool {
    // A head ablation or clamp needs the direct path's hook sites.
    let ablates = cfg
        .interventions
        .iter()
        .any(|iv| iv.kind != InterventionKind::Freeze);
    match cfg.model.path {
        ModelPath::Auto => !ablates && table_fits(cfg).is_ok(),
        ModelPath::Table => true,
        ModelPath::Direct => false,
    }
}

pub fn check(cfg: &InductionConfig) -> Result<(), String> {
    let m = &cfg.model;
    if !(1..=MAX_HEADS).contains(&m.n_heads) {
        return Err(format!(
            "model.n_heads = {}: must be in 1..={MAX_HEADS}",
            m.n_heads
        ));
    }
    let s = cfg.data.vocab;
    if !(2..=MAX_VOCAB).contains(&s) {
        return Err(format!("data.vocab = {s}: must be in 2..={MAX_VOCAB}"));
    }
    if m.path == ModelPath::Table {
        table_fits(cfg).map_err(|e| {
            format!("model.path = \"table\": {e}; use model.path = \"auto\" or \"direct\"")
        })?;
    }
    if cfg.data.seq_len > MAX_SEQ_LEN {
        return Err(format!(
            "data.seq_len = {}: must be at most {MAX_SEQ_LEN}",
            cfg.data.seq_len
        ));
    }
    if cfg.data.seq_len + 1 < 2 * m.n_heads {
        return Err(format!(
            "data.seq_len = {}: must be at least 2 n_heads - 1 = {}",
            cfg.data.seq_len,
            2 * m.n_heads - 1
        ));
    }
    let window = 2 * m.n_heads - 1;
    if let Some(&l) = cfg
        .probe
        .gen_lengths
        .iter()
        .find(|&&l| l < window || l > MAX_SEQ_LEN)
    {
        return Err(format!(
            "probe.gen_lengths = {:?}: length {l} is outside {window}..={MAX_SEQ_LEN} (2 n_heads - 1 up to the largest L)",
            cfg.probe.gen_lengths
        ));
    }
    if m.degree == 0 || m.degree > m.n_heads {
        return Err(format!(
            "model.degree = {}: must be in 1..=n_heads ({})",
            m.degree, m.n_heads
        ));
    }
    if let Some(p) = cfg.data.parents.iter().find(|&&p| p == 0 || p > window) {
        return Err(format!(
            "data.parents = {:?}: parent distance {p} is outside the heads' windows 1..={window} (2 n_heads - 1)",
            cfg.data.parents
        ));
    }
    if cfg.data.parents.is_empty() {
        return Err("data.parents = []: give at least one parent distance".into());
    }
    let n_ctx = (s as u64).checked_pow(cfg.data.parents.len() as u32);
    if n_ctx.is_none_or(|n| n > super::data::MAX_CONTEXTS) {
        return Err(format!(
            "data.parents = {:?}: S^|parents| = {s}^{} contexts exceeds {} (fewer parents or a smaller vocabulary)",
            cfg.data.parents,
            cfg.data.parents.len(),
            super::data::MAX_CONTEXTS
        ));
    }
    if cfg.data.variant == Variant::DoublyStochastic
        && n_ctx.unwrap_or(u64::MAX) * s as u64 > super::data::EAGER_TABLE as u64
    {
        return Err(format!(
            "data.variant = \"doubly_stochastic\": needs S^(|parents|+1) ≤ {} (the whole table is drawn), got {s}^{}",
            super::data::EAGER_TABLE,
            cfg.data.parents.len() + 1
        ));
    }
    if cfg.data.n_train == 0 || cfg.data.n_val == 0 {
        return Err(format!(
            "data.n_train = {}, data.n_val = {}: both must be > 0",
            cfg.data.n_train, cfg.data.n_val
        ));
    }
    Freezes::new(&cfg.interventions, m.kind)?;
    let heads = HeadInterventions::new(&cfg.interventions, m.n_heads)?;
    if !heads.is_empty() && m.path == ModelPath::Table {
        return Err(
            "model.path = \"table\": a kind = \"ablate\" or \"clamp\" intervention needs the direct path's hook sites; use model.path = \"auto\" or \"direct\"".into(),
        );
    }
    if heads.has(InterventionKind::Clamp) && m.kind == ModelKind::Full {
        return Err(
            "interventions: kind = \"clamp\" needs model.kind = \"simplified\" (the full model's layer-1 pattern also depends on W_Q, W_K and the tokens)".into(),
        );
    }
    if !(cfg.data.alpha.is_finite() && cfg.data.alpha > 0.0) {
        return Err(format!(
            "data.alpha = {}: must be a positive number",
            cfg.data.alpha
        ));
    }
    Ok(())
}
