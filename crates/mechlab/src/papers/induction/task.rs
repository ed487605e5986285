//! What the trainer trains for the induction experiment: a model with its full
//! training batch and the run's training-time interventions (`interventions.rs`),
//! applied through the [`Trainable`] hooks.

use super::interventions;
use super::probes::InductionModel;
use crate::train::Trainable;
use mechlab_engine::{Float, Parameters};

/// The model with its full training batch: what the trainer trains.
pub struct Task<M> {
    pub model: M,
    pub tokens: Vec<u8>,
    pub seq_len: usize,
    /// Training-time freezes from `[[interventions]]`.
    pub freezes: interventions::Freezes,
    /// Training-time head ablations and clamps from `[[interventions]]`.
    pub heads: interventions::HeadInterventions,
}

impl<T: Float, M: InductionModel<T>> Parameters<T> for Task<M> {
    mechlab_engine::parameters!(T; model);
}

impl<T: Float, M: InductionModel<T>> Trainable<T> for Task<M> {
    fn train_step(&mut self, step: u64) -> T {
        if !self.heads.is_empty() {
            // Checked in `run_typed`: a model that takes them.
            self.heads.apply(&mut self.model, step);
        }
        self.model.loss(&self.tokens, self.seq_len, true)
    }
    // A clamp's copied logits are state a resume needs (the model's W may have
    // moved under the optimiser since the clamp began).
    fn save_state(&self) -> serde_json::Value {
        match self.model.clamp_state() {
            Some((mask, w)) if !self.heads.is_empty() => {
                serde_json::json!({ "clamped": mask, "clamp_w": w })
            }
            _ => serde_json::Value::Null,
        }
    }
    fn load_state(&mut self, state: &serde_json::Value) -> Result<(), String> {
        if state.is_null() {
            return Ok(());
        }
        match clamp_state_of(state) {
            Some((m, w)) if self.model.load_clamp_state(m, &w) => Ok(()),
            _ => Err(CLAMP_MISFIT.into()),
        }
    }
    fn set_trainable(&mut self, groups: &[String]) {
        self.model.set_groups(groups);
    }
    fn frozen(&self, step: u64, group: &str) -> bool {
        !self.freezes.is_empty() && self.freezes.frozen(step, group)
    }
}

/// The reason a checkpoint's clamp state is refused.
pub(crate) const CLAMP_MISFIT: &str =
    "the checkpoint's clamp state (clamped, clamp_w) does not fit this model";

/// The clamp mask and copied logits a checkpoint's model state carries
/// (`Task::save_state`); `None` when they are missing or malformed.
pub(crate) fn clamp_state_of(state: &serde_json::Value) -> Option<(u16, Vec<f64>)> {
    let mask = state["clamped"]
        .as_u64()
        .and_then(|m| u16::try_from(m).ok())?;
    let w: Vec<f64> = state["clamp_w"]
        .as_array()?
        .iter()
        .map(|x| x.as_f64())
        .collect::<Option<_>>()?;
    Some((mask, w))
}
