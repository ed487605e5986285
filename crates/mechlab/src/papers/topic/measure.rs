//! What a topic run measured on its best checkpoint ([`FinalProbes`]), the
//! authors' numbers it is compared with, and the curve summary the verdicts and
//! the figures share ([`time_to_fraction`]).

use super::training::{Early, Probes};

/// The authors' committed demo outputs (topic-value with the BERT embedding block).
pub const PAPER_DEV_LOSS_EPOCH0: f64 = 4.80;
pub const PAPER_DEV_LOSS_BEST: f64 = 3.395;
pub const PAPER_BEST_EPOCH: u64 = 4;
pub const PAPER_WV_SAME: f64 = 7.34;
pub const PAPER_WV_DIFF: f64 = -0.18;

/// What the run measured on its best checkpoint.
pub struct FinalProbes {
    pub probes: Probes,
    /// The verdicts' permutation tests ([`super::permutation`]).
    pub perm: super::permutation::Tests,
    /// The same tests with the shuffled labels (`*_control`) as the labels.
    pub perm_control: super::permutation::Tests,
    pub bound: f64,
    pub test_loss: f64,
    pub early: Early,
    pub spe: u64,
    pub stopped_at: u64,
    pub value_rows: Vec<f64>,
    pub embeddings: Vec<f64>,
    pub d_model: usize,
    /// The uniform-attention check ([`super::causal`]), attention presets only.
    pub causal: Option<super::causal::UniformAttention>,
}

/// First step at which `y` reaches `frac` of its last value (None if it never does
/// or the last value is not positive).
pub fn time_to_fraction(x: &[f64], y: &[f64], frac: f64) -> Option<f64> {
    let last = *y.last()?;
    if last <= 0.0 {
        return None;
    }
    x.iter()
        .zip(y)
        .find(|(_, v)| **v >= frac * last)
        .map(|(s, _)| *s)
}
