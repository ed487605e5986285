//! The `[model]` section of icl-regression: how many layers, which entries of
//! `P` and `Q` train (the papers' forms), and where they start.

use crate::rng::{stream, Stream};
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};

/// How the layers start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Init {
    /// Every entry of `P` and `Q` drawn from `N(0, init_scale²)`.
    #[default]
    Normal,
    /// Zhang, Frei, Bartlett's initialisation (their Assumption 3.3, one layer):
    /// `P = σ e_D e_Dᵀ` and `Q = −σ [[Θ Θᵀ, 0], [0, 0]]` with `Θ Θᵀ = I/√d`
    /// (`‖Θ Θᵀ‖_F = 1`), `σ = init_scale`; every other entry 0.
    Zfb,
}

/// Which entries of `P` and `Q` are trained.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Param2 {
    /// All `D × D` entries of both (von Oswald et al.; Zhang, Frei, Bartlett).
    #[default]
    Full,
    /// Ahn et al.'s code: `P = [[P_x, 0], [0, 1]]`, `Q = [[Q_x, 0], [0, 0]]`, only
    /// the `d × d` blocks `P_x`, `Q_x` trained (the rest held where it starts).
    Blocks,
    /// Ahn et al.'s `P = 0` form: `P = [[0, 0], [0, 1]]` held, only `Q_x` trained,
    /// so `L` layers are exactly `L` steps of preconditioned GD with
    /// `B_l = −Q_lᵀ` on the prompt (the layers update only the labels' residuals).
    Steps,
    /// von Oswald et al.'s GD++: `P = [[γ I, 0], [0, η]]`, `Q = [[I, 0], [0, 0]]`
    /// held, two numbers per layer trained (the `d` diagonal entries of `P`'s
    /// x-block start at 0 and get one shared gradient, their sum's, so they stay
    /// equal; `init` and `init_scale` are not read). A layer moves every token's
    /// input by `γ Ĥ x` (their curvature correction) and its label by `η hᵀ x`, so
    /// one layer is one GD step with step size `−η` ([`super::gdpp`]).
    Gdpp,
}

/// How a layer's tokens attend to the context.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Attention {
    /// Linear self-attention, `(1/m) Σ_j (z_jᵀ Q z_i) P z_j` (the papers' model).
    #[default]
    Linear,
    /// Softmax attention over the context tokens, `Σ_j softmax_j(z_jᵀ Q_h z_i) P_h z_j`
    /// summed over `heads` heads (von Oswald et al.'s `use_softmax`, their
    /// `1/√key_size` folded into `Q`; [`super::softmax`]).
    Softmax,
}

/// The `[model]` section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
    pub layers: usize,
    pub attention: Attention,
    /// Heads per layer (softmax attention only: linear heads add up to one).
    pub heads: usize,
    pub param: Param2,
    pub init: Init,
    pub init_scale: f64,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            layers: 1,
            attention: Attention::Linear,
            heads: 1,
            param: Param2::Full,
            init: Init::Normal,
            init_scale: 0.01,
        }
    }
}

impl ModelConfig {
    /// The rules the initial draw and the model rely on.
    pub fn check(&self) -> Result<(), String> {
        if !(1..=8).contains(&self.layers) {
            return Err(format!("model.layers = {}: must be in 1..=8", self.layers));
        }
        if !(self.init_scale.is_finite() && self.init_scale > 0.0) {
            return Err(format!(
                "model.init_scale = {}: must be finite and > 0 (P = Q = 0 is a stationary point)",
                self.init_scale
            ));
        }
        if !(1..=8).contains(&self.heads) {
            return Err(format!("model.heads = {}: must be in 1..=8", self.heads));
        }
        if self.attention == Attention::Linear && self.heads != 1 {
            return Err(format!(
                "model.heads = {}: linear heads add up to one head (a sum of P A Q); heads > 1 needs model.attention = \"softmax\"",
                self.heads
            ));
        }
        if self.attention == Attention::Softmax
            && (self.param != Param2::Full || self.init != Init::Normal)
        {
            return Err(format!(
                "model.attention = \"softmax\" trains every entry from a normal draw: model.param = \"{}\" and model.init = \"{}\" are linear attention's forms (use \"full\" and \"normal\")",
                crate::config::name_of(&self.param),
                crate::config::name_of(&self.init)
            ));
        }
        Ok(())
    }
}

/// Each layer's starting `P` and `Q` (`[D, D]` row-major; `[H, D, D]` with
/// `H = cfg.heads`) for `cfg`, drawn from the seed's [`Stream::Init`] where
/// `cfg.init` is random.
pub(super) fn initial(cfg: &ModelConfig, d: usize, seed: u64) -> Vec<(Vec<f64>, Vec<f64>)> {
    let dd = d + 1;
    let mut rng = stream(seed, Stream::Init);
    let s = cfg.init_scale;
    (0..cfg.layers)
        .map(|_| {
            let (p, q) = match cfg.init {
                Init::Normal => {
                    let mut g = || -> Vec<f64> {
                        (0..cfg.heads * dd * dd)
                            .map(|_| {
                                s * <StandardNormal as Distribution<f64>>::sample(
                                    &StandardNormal,
                                    &mut rng,
                                )
                            })
                            .collect()
                    };
                    (g(), g())
                }
                Init::Zfb => {
                    let mut p = vec![0.0; dd * dd];
                    let mut q = vec![0.0; dd * dd];
                    p[dd * dd - 1] = s;
                    for i in 0..d {
                        q[i * dd + i] = -s / (d as f64).sqrt();
                    }
                    (p, q)
                }
            };
            let (p, q) = match cfg.param {
                Param2::Full => (p, q),
                // Ahn et al.'s structure: the x-blocks as drawn, P's y-y entry 1.
                Param2::Blocks => {
                    let keep = |v: Vec<f64>, yy: f64| -> Vec<f64> {
                        (0..dd * dd)
                            .map(|k| match (k / dd < d, k % dd < d) {
                                (true, true) => v[k],
                                (false, false) => yy,
                                _ => 0.0,
                            })
                            .collect()
                    };
                    (keep(p, 1.0), keep(q, 0.0))
                }
                Param2::Gdpp => {
                    let (p0, mut q0) = (vec![0.0; dd * dd], vec![0.0; dd * dd]);
                    for i in 0..d {
                        q0[i * dd + i] = 1.0;
                    }
                    (p0, q0)
                }
                Param2::Steps => {
                    let mut p0 = vec![0.0; dd * dd];
                    p0[dd * dd - 1] = 1.0;
                    let q = (0..dd * dd)
                        .map(|k| if k / dd < d && k % dd < d { q[k] } else { 0.0 })
                        .collect();
                    (p0, q)
                }
            };
            (p, q)
        })
        .collect()
}
