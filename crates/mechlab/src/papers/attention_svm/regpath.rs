//! The regularisation path (claim d): the norm-constrained minimisers
//!
//! `W̄_R = argmin_{‖W‖_F ≤ R} L(W)`  and  `(K̄, Q̄)_R = argmin_{‖K‖²_F + ‖Q‖²_F ≤ 2R} L(K Qᵀ)`,
//!
//! whose directions the papers prove converge, as `R → ∞`, to the Frobenius and the
//! nuclear-norm attention SVM respectively (`‖K‖²_F + ‖Q‖²_F ≥ 2‖K Qᵀ‖_*`, with
//! equality for balanced factors, so the second ball is the nuclear-norm ball of W).
//!
//! Each radius is solved from the run's initial parameters by projected normalised
//! gradient descent with the diminishing step `η_k = c R / √(k + 1)` (`c` =
//! [`STEP`]): a normalised step keeps the update the same size however flat the
//! saturating softmax makes the loss, and scaling it with `R` makes the accuracy
//! relative to the ball. The projection onto either ball is a rescaling.

use super::data::{argmax_rows, SvmData};
use super::model::{ModelConfig, Param2, SvmModel};
use super::train::{shifted, SolveSvm};
use super::{nuclear, svm, AttentionSvmConfig};
use crate::train::Trainable;
use mechlab_engine::Parameters;
use std::sync::Arc;

/// `c` of the step `η_k = c R / √(k + 1)`.
pub const STEP: f64 = 0.5;

/// One radius of the path.
pub struct PathPoint {
    pub radius: f64,
    /// `W̄_R` (`[d, d]`; `K̄ Q̄ᵀ` for the `kq` parameterisation).
    pub w: Vec<f64>,
    /// `L(W̄_R)`.
    pub loss: f64,
}

/// The path over `radii`, `steps` projected steps each, every radius started from
/// the initial parameters of `seed`.
pub fn path(
    cfg: &ModelConfig,
    data: &Arc<SvmData>,
    v: &[f64],
    seed: u64,
    radii: &[f64],
    steps: u64,
) -> Vec<PathPoint> {
    radii
        .iter()
        .map(|&radius| {
            // The constrained problem: no penalty on top of the ball.
            let cfg = ModelConfig {
                kq_reg: 0.0,
                ..cfg.clone()
            };
            let mut m = SvmModel::<f64>::new(&cfg, data.clone(), v.to_vec(), seed);
            // The ball: ‖W‖² ≤ R², or ‖K‖² + ‖Q‖² ≤ 2R.
            let bound = match cfg.param {
                Param2::W => radius * radius,
                Param2::Kq => 2.0 * radius,
            };
            project(&mut m, bound);
            for k in 0..steps {
                m.visit_mut(&mut |p| p.zero_grad());
                m.train_step(k);
                let mut g2 = 0.0;
                m.visit(&mut |p| g2 += p.grad_norm_sq());
                if g2 == 0.0 {
                    break;
                }
                let eta = STEP * radius / ((k + 1) as f64).sqrt() / g2.sqrt();
                m.visit_mut(&mut |p| {
                    let (val, g) = p.value_and_grad_mut();
                    val.iter_mut()
                        .zip(g.iter())
                        .for_each(|(x, g)| *x -= eta * g);
                });
                project(&mut m, bound);
            }
            let w = m.w_eff();
            let loss = m.forward(&w).0;
            PathPoint { radius, w, loss }
        })
        .collect()
}

/// Scales the parameters onto the ball `Σ ‖p‖² ≤ bound` when they are outside it.
fn project(m: &mut SvmModel<f64>, bound: f64) {
    let mut n2 = 0.0;
    m.visit(&mut |p| n2 += p.value().iter().map(|x| x * x).sum::<f64>());
    if n2 > bound {
        let s = (bound / n2).sqrt();
        m.visit_mut(&mut |p| p.value_mut().iter_mut().for_each(|x| *x *= s));
    }
}

/// The regularisation path's correlations, against the SVM (Frobenius for `W`,
/// nuclear for `K Qᵀ`) of the selection of the largest radius.
pub(super) struct RegPath {
    pub radii: Vec<f64>,
    pub corr: Vec<f64>,
    pub corr_ctrl: Vec<f64>,
    pub norm: &'static str,
    /// Fraction of sequences where that selection is the highest-score token.
    pub sel_is_opt: f64,
    /// Why the SVM was not solved (empty when it was).
    pub err: String,
}

/// The path of `cfg.probe.reg_radii` (none when empty) and its correlations.
pub(super) fn against_svm(
    cfg: &AttentionSvmConfig,
    data: &Arc<SvmData>,
    v: &[f64],
    seed: u64,
) -> Option<RegPath> {
    let radii = &cfg.probe.reg_radii;
    if radii.is_empty() {
        return None;
    }
    let pts = path(&cfg.model, data, v, seed, radii, cfg.probe.reg_steps);
    let w_big = &pts.last()?.w;
    let (_, att) = SvmModel::<f64>::new(&cfg.model, data.clone(), v.to_vec(), seed).forward(w_big);
    let mut sel = argmax_rows(&att, data.t);
    let mut ctrl = shifted(&sel, data.t);
    if cfg.probe.swap_selected {
        std::mem::swap(&mut sel, &mut ctrl);
    }
    let (norm, solve): (&str, SolveSvm) = match cfg.model.param {
        Param2::W => ("Frobenius", svm::w_mm),
        Param2::Kq => ("nuclear-norm", nuclear::w_mm_nuclear),
    };
    // An unsolvable SVM gives NaN correlations: a failed claim for the selection,
    // a passed control for the wrong one (nothing to align with).
    let corr_with = |sel: &[usize]| match solve(data, sel) {
        Ok(m) => (
            pts.iter().map(|p| svm::corr(&p.w, &m)).collect(),
            String::new(),
        ),
        Err(e) => (vec![f64::NAN; pts.len()], e.to_string()),
    };
    let (corr, e_sel) = corr_with(&sel);
    let (corr_ctrl, e_ctrl) = corr_with(&ctrl);
    let err = match (e_sel.is_empty(), e_ctrl.is_empty()) {
        (true, true) => String::new(),
        (false, _) => format!(" ({e_sel})"),
        (true, false) => format!(" (control: {e_ctrl})"),
    };
    let opt = data.optimal(v);
    let sel_is_opt = sel.iter().zip(&opt).filter(|(a, b)| a == b).count() as f64 / data.n as f64;
    Some(RegPath {
        radii: radii.clone(),
        corr,
        corr_ctrl,
        norm,
        sel_is_opt,
        err,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::papers::attention_svm::data::{generate, DataConfig};

    /// Every point of the path lies in its ball, the loss falls as the ball grows,
    /// and (W parameterisation) a large ball's minimiser sits on its boundary.
    #[test]
    fn points_lie_in_their_balls_and_the_loss_falls() {
        let (data, v) = generate(
            &DataConfig {
                n: 4,
                t: 4,
                d: 4,
                twins: 0,
            },
            9,
        );
        let data = Arc::new(data);
        for param in [Param2::W, Param2::Kq] {
            let cfg = ModelConfig {
                param,
                ..ModelConfig::default()
            };
            let pts = path(&cfg, &data, &v, 9, &[0.5, 2.0, 8.0], 500);
            for p in &pts {
                let fro = p.w.iter().map(|x| x * x).sum::<f64>().sqrt();
                assert!(
                    fro <= p.radius * (1.0 + 1e-9),
                    "{param:?}: ‖W‖ {fro} > R {}",
                    p.radius
                );
            }
            assert!(
                pts[0].loss > pts[1].loss && pts[1].loss > pts[2].loss,
                "{param:?}"
            );
            if param == Param2::W {
                let fro = pts[2].w.iter().map(|x| x * x).sum::<f64>().sqrt();
                assert!(fro > 0.99 * 8.0, "{fro}");
            }
        }
    }
}
