//! The `[train]` section every experiment shares.
//!
//! Training is either one stage (`optimizer`, `lr`, `steps`, `groups`) or an explicit
//! list of `[[train.stages]]`, each with its own parameter groups, optimiser,
//! learning rate and step count (the induction paper's "train C, then W, then a").

use serde::{Deserialize, Serialize};

/// Which update rule a stage uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OptimizerKind {
    /// Plain (full-batch when the data is the whole set) gradient descent, optional momentum.
    Sgd,
    /// `θ ← θ − lr · g / ‖g‖` with the norm over every trained parameter together.
    NormalizedGd,
    /// Adam with L2 weight decay added to the gradient.
    Adam,
    /// Adam with decoupled weight decay (Loshchilov & Hutter).
    Adamw,
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
    pub schedule: ScheduleKind,
    pub warmup_steps: u64,
    pub final_lr_ratio: f64,
    /// Clip the global gradient norm to this value; 0 turns clipping off.
    pub grad_clip: f64,
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
            schedule: ScheduleKind::Constant,
            warmup_steps: 0,
            final_lr_ratio: 0.0,
            grad_clip: 0.0,
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
