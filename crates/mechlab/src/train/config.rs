//! The `[train]` section every experiment shares.
//!
//! Training is either one stage (`optimizer`, `lr`, `steps`, `groups`) or an explicit
//! list of `[[train.stages]]`, each with its own parameter groups, optimiser,
//! learning rate and step count (the induction paper's "train C, then W, then a").

use crate::config::ConfigError;
use serde::{Deserialize, Serialize};

/// Which update rule a stage uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OptimizerKind {
    /// Plain (full-batch when the data is the whole set) gradient descent, optional momentum.
    Sgd,
    /// `θ ← θ − lr · g / (‖g‖ + ngd_eps)`, the norm over every trained parameter
    /// together or over each tensor alone (`ngd_norm`).
    NormalizedGd,
    /// Adam with L2 weight decay added to the gradient.
    Adam,
    /// Adam with decoupled weight decay (Loshchilov & Hutter).
    Adamw,
}

/// What normalised GD divides each gradient by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NgdNorm {
    /// The norm of all trained gradients together: one step of length `lr`.
    #[default]
    Global,
    /// Each parameter tensor's own gradient norm (what `g /= g.norm() + eps` per
    /// tensor in PyTorch computes, as the attention-SVM authors' code does).
    PerTensor,
}

/// How the learning rate moves within a stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleKind {
    Constant,
    /// Linear decay to `final_lr_ratio · lr`.
    Linear,
    /// Cosine decay to `final_lr_ratio · lr`.
    Cosine,
}

/// One training stage.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageConfig {
    /// Shown in logs and reports, e.g. "C" or "W".
    pub name: String,
    /// Parameter groups trained in this stage; the others are frozen.
    pub groups: Vec<String>,
    pub steps: u64,
    pub lr: f64,
    /// Absent: the section's `optimizer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optimizer: Option<OptimizerKind>,
}

/// The `[train]` section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrainConfig {
    pub optimizer: OptimizerKind,
    pub lr: f64,
    pub steps: u64,
    /// Groups trained in the single-stage form; empty means every group.
    pub groups: Vec<String>,
    /// When non-empty, replaces the single stage above.
    pub stages: Vec<StageConfig>,
    pub momentum: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    /// What `weight_decay` applies to: parameter groups, parameter names, or name
    /// endings such as `W_Q` (see `Optimizer::with_decay_on`); empty: everything.
    pub weight_decay_on: Vec<String>,
    pub schedule: ScheduleKind,
    pub warmup_steps: u64,
    pub final_lr_ratio: f64,
    /// Clip the global gradient norm to this value; 0 turns clipping off.
    pub grad_clip: f64,
    /// Clip each parameter tensor's gradient norm on its own instead (what
    /// `clip_grad_norm_` called once per tensor does, as Ahn et al.'s code does).
    pub grad_clip_per_tensor: bool,
    /// Normalised GD's floor: the step is `lr · g / (‖g‖ + ngd_eps)`, so it dies
    /// out once the gradient is below the floor instead of blowing rounding noise
    /// up to a full step. 0: no floor.
    pub ngd_eps: f64,
    /// Normalised GD: one global norm, or one per parameter tensor.
    pub ngd_norm: NgdNorm,
    /// Learning-rate multiplier per parameter group (PyTorch's per-group `lr` in
    /// `param_groups`), e.g. `{ v = 100.0 }`; groups not named keep 1.
    pub lr_scale: std::collections::BTreeMap<String, f64>,
    /// Log the loss and gradient norms every this many steps.
    pub log_every: u64,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            optimizer: OptimizerKind::Sgd,
            lr: 0.1,
            steps: 100,
            groups: Vec::new(),
            stages: Vec::new(),
            momentum: 0.0,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
            weight_decay_on: Vec::new(),
            schedule: ScheduleKind::Constant,
            warmup_steps: 0,
            final_lr_ratio: 0.0,
            grad_clip: 0.0,
            grad_clip_per_tensor: false,
            ngd_eps: 0.0,
            ngd_norm: NgdNorm::Global,
            lr_scale: Default::default(),
            log_every: 10,
        }
    }
}

/// A stage with every default filled in.
#[derive(Clone, Debug, PartialEq)]
pub struct Stage {
    pub name: String,
    pub groups: Vec<String>,
    pub steps: u64,
    pub lr: f64,
    pub optimizer: OptimizerKind,
}

impl TrainConfig {
    /// The stages to run, in order.
    pub fn resolved_stages(&self) -> Result<Vec<Stage>, String> {
        if self.stages.is_empty() {
            return Ok(vec![Stage {
                name: "train".into(),
                groups: self.groups.clone(),
                steps: self.steps,
                lr: self.lr,
                optimizer: self.optimizer,
            }]);
        }
        self.stages
            .iter()
            .map(|s| {
                let optimizer = s.optimizer.unwrap_or(self.optimizer);
                Ok(Stage {
                    name: s.name.clone(),
                    groups: s.groups.clone(),
                    steps: s.steps,
                    lr: s.lr,
                    optimizer,
                })
            })
            .collect()
    }

    /// Total steps over every stage.
    pub fn total_steps(&self) -> u64 {
        if self.stages.is_empty() {
            self.steps
        } else {
            self.stages.iter().map(|s| s.steps).sum()
        }
    }
}

/// What a float setting may be, for [`TrainConfig::validate`].
#[derive(Clone, Copy)]
enum Allowed {
    /// Finite and > 0.
    Positive,
    /// Finite and ≥ 0.
    NonNegative,
    /// In [0, 1).
    BelowOne,
    /// In [0, 1].
    UnitInterval,
}

impl Allowed {
    fn admits(self, x: f64) -> bool {
        match self {
            Allowed::Positive => x.is_finite() && x > 0.0,
            Allowed::NonNegative => x.is_finite() && x >= 0.0,
            Allowed::BelowOne => (0.0..1.0).contains(&x),
            Allowed::UnitInterval => (0.0..=1.0).contains(&x),
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Allowed::Positive => "a finite number > 0",
            Allowed::NonNegative => "a finite number >= 0",
            Allowed::BelowOne => "a number in [0, 1)",
            Allowed::UnitInterval => "a number in [0, 1]",
        }
    }
}

impl TrainConfig {
    /// Checks the values every experiment's trainer relies on (a NaN learning rate
    /// would otherwise surface as a NaN loss at step 0). The error names the key,
    /// the value and what is allowed; `file` names the config.
    pub fn validate(&self, file: &str) -> Result<(), ConfigError> {
        let check = |key: String, x: f64, allowed: Allowed| {
            if allowed.admits(x) {
                Ok(())
            } else {
                Err(ConfigError::Invalid {
                    file: file.to_string(),
                    message: format!("`{key}` is {x}; it must be {}", allowed.describe()),
                })
            }
        };
        if self.stages.is_empty() {
            check("train.lr".into(), self.lr, Allowed::Positive)?;
        }
        for (i, st) in self.stages.iter().enumerate() {
            check(format!("train.stages[{i}].lr"), st.lr, Allowed::Positive)?;
        }
        check("train.momentum".into(), self.momentum, Allowed::BelowOne)?;
        check("train.beta1".into(), self.beta1, Allowed::BelowOne)?;
        check("train.beta2".into(), self.beta2, Allowed::BelowOne)?;
        check("train.eps".into(), self.eps, Allowed::Positive)?;
        check(
            "train.weight_decay".into(),
            self.weight_decay,
            Allowed::NonNegative,
        )?;
        check(
            "train.final_lr_ratio".into(),
            self.final_lr_ratio,
            Allowed::UnitInterval,
        )?;
        check(
            "train.grad_clip".into(),
            self.grad_clip,
            Allowed::NonNegative,
        )?;
        check("train.ngd_eps".into(), self.ngd_eps, Allowed::NonNegative)?;
        for (g, &x) in &self.lr_scale {
            check(format!("train.lr_scale.{g}"), x, Allowed::Positive)?;
        }
        self.resolved_stages()
            .map(|_| ())
            .map_err(|message| ConfigError::Invalid {
                file: file.to_string(),
                message,
            })
    }
}
