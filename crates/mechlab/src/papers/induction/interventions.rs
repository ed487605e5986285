//! Training-time interventions of the induction experiment: `[[interventions]]`
//! entries of the config, checked before the run folder exists, and applied by
//! the trainer through [`crate::train::Trainable::frozen`].
//!
//! ```toml
//! [[interventions]]
//! kind = "freeze"        # hold parameters at their current values
//! params = "layer1"      # a parameter group (W, C, a; full: QK, OV, LN) or layer1 / layer2
//! from_step = 0          # first update frozen is from_step + 1
//! to_step = 1000         # state to_step is the last one frozen; omitted: to the end
//! ```
//!
//! `freeze` keeps the values and the optimiser state of the named groups
//! unchanged for the updates `from_step + 1 ..= to_step` (a frozen parameter
//! does not move under momentum or weight decay either). With no entry the
//! trainer asks [`Freezes::frozen`] once per group per update and gets `false`.
//! Clamping a pattern or ablating a head during training is not offered: the
//! fused training kernel has no hook sites.
//!
//! ```
//! use mechlab::papers::induction::interventions::{Intervention, Freezes};
//! use mechlab::papers::induction::ModelKind;
//! let iv: Intervention = toml::from_str("kind = 'freeze'\nparams = 'layer1'\nto_step = 10").unwrap();
//! let f = Freezes::new(&[iv], ModelKind::Simplified).unwrap();
//! assert!(f.frozen(9, "W") && !f.frozen(10, "W") && !f.frozen(0, "C"));
//! let bad: Intervention = toml::from_str("kind = 'freeze'\nparams = 'QK'").unwrap();
//! let e = Freezes::new(&[bad], ModelKind::Simplified).unwrap_err();
//! assert!(e.contains("interventions[0].params = \"QK\"") && e.contains("allowed"), "{e}");
//! ```

use super::config::ModelKind;
use serde::{Deserialize, Serialize};

/// What a training-time intervention does (`kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InterventionKind {
    /// Hold the parameter groups `params` fixed.
    Freeze,
}

/// One `[[interventions]]` entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Intervention {
    pub kind: InterventionKind,
    /// A parameter group, or `layer1` / `layer2` for every group of that layer.
    pub params: String,
    /// The intervention applies from state `from_step` (update `from_step + 1`).
    #[serde(default)]
    pub from_step: u64,
    /// ... up to state `to_step` (exclusive); omitted: to the end of training.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_step: Option<u64>,
}

/// The parameter groups of each model, by layer.
fn groups(kind: ModelKind) -> (&'static [&'static str], &'static [&'static str]) {
    match kind {
        ModelKind::Simplified => (&["W"], &["C", "a"]),
        ModelKind::Full => (&["W", "QK", "OV", "LN"], &["C", "a"]),
    }
}

/// The resolved freezes: `(group, from, to)`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Freezes(Vec<(String, u64, u64)>);

impl Freezes {
    /// Checks every entry against `kind`'s groups; the error names the key, the
    /// value and what is allowed.
    pub fn new(entries: &[Intervention], kind: ModelKind) -> Result<Self, String> {
        let (l1, l2) = groups(kind);
        let mut out = Vec::new();
        for (i, iv) in entries.iter().enumerate() {
            let InterventionKind::Freeze = iv.kind;
            let named: Vec<&str> = match iv.params.as_str() {
                "layer1" => l1.to_vec(),
                "layer2" => l2.to_vec(),
                g if l1.contains(&g) || l2.contains(&g) => vec![g],
                other => {
                    let allowed: Vec<&str> = ["layer1", "layer2"]
                        .into_iter()
                        .chain(l1.iter().copied())
                        .chain(l2.iter().copied())
                        .collect();
                    return Err(format!(
                        "interventions[{i}].params = {other:?}: allowed for model.kind = {}: {}",
                        crate::config::name_of(&kind),
                        allowed.join(", ")
                    ));
                }
            };
            let to = iv.to_step.unwrap_or(u64::MAX);
            if to <= iv.from_step {
                return Err(format!(
                    "interventions[{i}].to_step = {to}: must be greater than from_step = {}",
                    iv.from_step
                ));
            }
            out.extend(named.into_iter().map(|g| (g.to_string(), iv.from_step, to)));
        }
        Ok(Freezes(out))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `group` is frozen for update `step + 1`.
    pub fn frozen(&self, step: u64, group: &str) -> bool {
        self.0
            .iter()
            .any(|(g, from, to)| g == group && (*from..*to).contains(&step))
    }
}
