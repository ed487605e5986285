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
//!
//! ```toml
//! [[interventions]]
//! kind = "ablate"        # zero a layer-1 head's output v^h at every position
//! head = 1               # 0-based, below model.n_heads
//! from_step = 0          # as for freeze; omitted to_step: to the end
//! ```
//!
//! `ablate` zeroes the head's output in the forward and backward passes of the
//! updates in its window (and of the probes run while it lasts), so the head
//! gets no gradient and the kernel products holding it vanish; an ablation that
//! lasts to the end also holds for the final measurements.
//!
//! `clamp` (same keys, simplified model) holds the head's layer-1 pattern at its
//! value when the window opens: the pattern is a function of the head's RPE
//! logits alone, so the model keeps a copy of them (saved with each checkpoint,
//! so a resume is exact) and reads the copy instead of `W` while the clamp lasts.
//! The head's `W` gets no gradient meanwhile, but the optimiser may still move it
//! (momentum, weight decay): the clamp holds the pattern, `freeze` holds
//! parameters. When the window closes the head reads `W` again.
//!
//! Both run on the general (direct) path, which has the hook sites:
//! `model.path = "auto"` takes that path when one is configured, and `"table"` is
//! refused; `clamp` is refused for the full model, whose pattern also depends on
//! `W_Q`, `W_K` and the tokens.
//!
//! ```
//! use mechlab::papers::induction::interventions::{HeadInterventions, Intervention, Freezes};
//! use mechlab::papers::induction::ModelKind;
//! let iv: Intervention = toml::from_str("kind = 'freeze'\nparams = 'layer1'\nto_step = 10").unwrap();
//! let f = Freezes::new(&[iv], ModelKind::Simplified).unwrap();
//! assert!(f.frozen(9, "W") && !f.frozen(10, "W") && !f.frozen(0, "C"));
//! let bad: Intervention = toml::from_str("kind = 'freeze'\nparams = 'QK'").unwrap();
//! let e = Freezes::new(&[bad], ModelKind::Simplified).unwrap_err();
//! assert!(e.contains("interventions[0].params = \"QK\"") && e.contains("allowed"), "{e}");
//! let ab: Intervention = toml::from_str("kind = 'ablate'\nhead = 1\nfrom_step = 5").unwrap();
//! let cl: Intervention = toml::from_str("kind = 'clamp'\nhead = 0\nto_step = 5").unwrap();
//! let a = HeadInterventions::new(&[ab, cl], 3).unwrap();
//! assert_eq!((a.ablated(4), a.ablated(5)), (0, 0b010));
//! assert_eq!((a.clamped(4), a.clamped(5)), (0b001, 0));
//! ```

use super::config::ModelKind;
use serde::{Deserialize, Serialize};

/// What a training-time intervention does (`kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InterventionKind {
    /// Hold the parameter groups `params` fixed.
    Freeze,
    /// Zero the output of layer-1 head `head`.
    Ablate,
    /// Hold layer-1 head `head`'s pattern at its value when the clamp starts.
    Clamp,
}

/// One `[[interventions]]` entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Intervention {
    pub kind: InterventionKind,
    /// `freeze`: a parameter group, or `layer1` / `layer2` for every group of that layer.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub params: String,
    /// `ablate`, `clamp`: the layer-1 head (0-based).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<usize>,
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
            if iv.kind != InterventionKind::Freeze {
                continue;
            }
            if let Some(h) = iv.head {
                return Err(format!(
                    "interventions[{i}].head = {h}: kind = \"freeze\" takes params, not head"
                ));
            }
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
            let to = window(i, iv)?;
            out.extend(named.into_iter().map(|g| (g.to_string(), iv.from_step, to)));
        }
        Ok(Freezes(out))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `group` is frozen for every update (from step 0, no end).
    pub fn always(&self, group: &str) -> bool {
        self.0
            .iter()
            .any(|(g, from, to)| g == group && *from == 0 && *to == u64::MAX)
    }

    /// Whether `group` is frozen for update `step + 1`.
    pub fn frozen(&self, step: u64, group: &str) -> bool {
        self.0
            .iter()
            .any(|(g, from, to)| g == group && (*from..*to).contains(&step))
    }
}

/// The `from_step .. to_step` window of entry `i` (`to_step` omitted: no end).
fn window(i: usize, iv: &Intervention) -> Result<u64, String> {
    let to = iv.to_step.unwrap_or(u64::MAX);
    if to <= iv.from_step {
        return Err(format!(
            "interventions[{i}].to_step = {to}: must be greater than from_step = {}",
            iv.from_step
        ));
    }
    Ok(to)
}

/// The resolved head interventions: `(kind, head, from, to)`, kind `ablate` or
/// `clamp`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HeadInterventions(Vec<(InterventionKind, usize, u64, u64)>);

impl HeadInterventions {
    /// Checks every `ablate` and `clamp` entry against the number of heads; the
    /// error names the key, the value and what is allowed.
    pub fn new(entries: &[Intervention], n_heads: usize) -> Result<Self, String> {
        let mut out = Vec::new();
        for (i, iv) in entries.iter().enumerate() {
            if iv.kind == InterventionKind::Freeze {
                continue;
            }
            let kind = crate::config::name_of(&iv.kind);
            if !iv.params.is_empty() {
                return Err(format!(
                    "interventions[{i}].params = {:?}: kind = \"{kind}\" takes head, not params",
                    iv.params
                ));
            }
            let head = match iv.head {
                Some(h) if h < n_heads => h,
                Some(h) => {
                    return Err(format!(
                        "interventions[{i}].head = {h}: must be below model.n_heads = {n_heads}"
                    ))
                }
                None => {
                    return Err(format!(
                        "interventions[{i}]: kind = \"{kind}\" needs head (0..{n_heads})"
                    ))
                }
            };
            out.push((iv.kind, head, iv.from_step, window(i, iv)?));
        }
        Ok(HeadInterventions(out))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether any entry is of `kind`.
    pub fn has(&self, kind: InterventionKind) -> bool {
        self.0.iter().any(|e| e.0 == kind)
    }

    fn mask(&self, kind: InterventionKind, step: u64) -> u16 {
        self.0
            .iter()
            .filter(|(k, _, from, to)| *k == kind && (*from..*to).contains(&step))
            .fold(0, |m, (_, h, _, _)| m | 1 << h)
    }

    /// The heads ablated (bit `h`) for update `step + 1`.
    pub fn ablated(&self, step: u64) -> u16 {
        self.mask(InterventionKind::Ablate, step)
    }

    /// The heads whose pattern is clamped (bit `h`) for update `step + 1`.
    pub fn clamped(&self, step: u64) -> u16 {
        self.mask(InterventionKind::Clamp, step)
    }

    /// Puts the ablations and clamps of update `step + 1` in force on `model`
    /// (training calls it before each update; loading a checkpoint of state `s`
    /// calls it with `s − 1`, the update that produced it). `false` when the model
    /// cannot take them (checked before a run starts).
    pub fn apply<T: mechlab_engine::Float, M: super::probes::InductionModel<T>>(
        &self,
        model: &mut M,
        step: u64,
    ) -> bool {
        let ablated = model.set_ablated(self.ablated(step));
        model.set_clamped(self.clamped(step)) && ablated
    }
}
