//! von Oswald et al.'s GD++ as a reference predictor for `L`-layer models.
//!
//! Their Section 4 names GD++ what their trained multi-layer LSA does beyond
//! plain GD: each layer `l` first moves every token's input by the prompt's
//! curvature, `x_j ← x_j + γ_l Ĥ x_j` (`Ĥ = (1/m) Σ_i x_i x_iᵀ`, the context's
//! inputs as the layer sees them), while the labels take a GD step,
//! `y_j ← y_j + η_l (1/m) Σ_i y_i x_iᵀ x_j`, both from the layer's input. With
//! `γ_l < 0` the inputs are whitened step by step, so `L` GD++ steps converge
//! faster than `L` GD steps when the inputs are ill conditioned. In this module's
//! LSA it is [`Param2::Gdpp`]: `P = [[γ I, 0], [0, η]]`, `Q = [[I, 0], [0, 0]]`.
//!
//! GD++ with its best `2L` numbers is the reference von Oswald et al. set their
//! deeper models beside. [`fit`] trains the numbers by Adam on fresh prompts of a
//! task (their code fits GD's step size the same way, by training the
//! constrained model; a run does it with `model.param = "gdpp"`), and [`compare`]
//! sets a trained model beside the fit on the probes' held-out prompts with von
//! Oswald et al.'s measures: the relative difference of the predictions and the
//! cosine of the sensitivities `∂ŷ/∂x_q`. One layer reaches the closed-form best
//! step (a test); for two layers on their setting the optimum lies far along a
//! shallow valley, which the fit's rate (0.2, decayed linearly) crosses within
//! its 2 000 steps where 0.02 does not (`docs/icl-regression.md`).
//!
//! ```
//! use mechlab::papers::icl_regression::{data::{DataConfig, Task}, gdpp};
//! let task = Task::new(&DataConfig::default(), 0);
//! let fitted = gdpp::fit(&task, 1, 0, 200);
//! // one layer is one GD step: its step size is −η, and γ never gets a gradient
//! let (gamma, eta) = gdpp::numbers(&fitted);
//! assert_eq!(gamma, vec![0.0]);
//! assert!(-eta[0] > 0.0);
//! ```

use super::data::Task;
use super::measure::{cosine, mse, rel_diff, Eval};
use super::model::{Lsa, ModelConfig, Param2};
use crate::rng::{substream, Stream};
use mechlab_engine::Parameters;

/// Sub-streams of [`Stream::Sample`] for the fit's prompts, one per step (the
/// probes' own start at 1, 100 and 200).
const FIT_STREAM: u64 = 1_000;
/// Adam steps of a run's GD++ fit.
pub const FIT_STEPS: u64 = 2_000;
/// Prompts per fitting step.
const FIT_BATCH: usize = 512;
/// Adam's rate at the first step, decayed linearly to 0 at the last (so the last
/// steps average the batch noise out); moments as the trainer's defaults.
const FIT_LR: f64 = 0.2;
const BETA1: f64 = 0.9;
const BETA2: f64 = 0.999;
const EPS: f64 = 1e-8;

/// GD++ with `layers` steps fitted to `task` over `steps` Adam steps of fresh
/// prompts: an [`Lsa`] in the [`Param2::Gdpp`] form.
pub fn fit(task: &Task, layers: usize, seed: u64, steps: u64) -> Lsa {
    let cfg = ModelConfig {
        layers,
        param: Param2::Gdpp,
        ..ModelConfig::default()
    };
    let mut m = Lsa::new(&cfg, task.clone(), FIT_BATCH, seed);
    let (dd, n) = (m.dd, task.n);
    let mut z = vec![0.0; FIT_BATCH * (n + 1) * dd];
    let mut y = vec![0.0; FIT_BATCH];
    // per layer: (γ, η), Adam's first and second moments of each
    let mut theta = vec![[0.0f64; 2]; layers];
    let (mut m1, mut m2) = (vec![[0.0f64; 2]; layers], vec![[0.0f64; 2]; layers]);
    for step in 0..steps {
        let mut rng = substream(seed, Stream::Sample, FIT_STREAM + step);
        task.fill(&mut rng, n, &mut z, &mut y);
        m.zero_grad();
        m.loss_and_grad(&z, &y, n);
        let t = (step + 1) as i32;
        let lr = FIT_LR * (1.0 - step as f64 / steps as f64);
        for (l, b) in m.blocks.iter_mut().enumerate() {
            let g = b.p.grad();
            for (k, gk) in [g[0], g[dd * dd - 1]].into_iter().enumerate() {
                m1[l][k] = BETA1 * m1[l][k] + (1.0 - BETA1) * gk;
                m2[l][k] = BETA2 * m2[l][k] + (1.0 - BETA2) * gk * gk;
                let (mh, vh) = (
                    m1[l][k] / (1.0 - BETA1.powi(t)),
                    m2[l][k] / (1.0 - BETA2.powi(t)),
                );
                theta[l][k] -= lr * mh / (vh.sqrt() + EPS);
            }
            let p = b.p.value_mut();
            for i in 0..dd - 1 {
                p[i * dd + i] = theta[l][0];
            }
            p[dd * dd - 1] = theta[l][1];
        }
    }
    m
}

/// A [`Param2::Gdpp`] model's `(γ_l, η_l)` per layer.
pub fn numbers(m: &Lsa) -> (Vec<f64>, Vec<f64>) {
    let dd = m.dd;
    (0..m.blocks.len())
        .map(|l| {
            let (p, _) = m.pq(l);
            (p[0], p[dd * dd - 1])
        })
        .unzip()
}

/// A trained model beside fitted GD++ on the probes' prompts.
#[derive(Clone, Debug)]
pub struct Reading {
    /// GD++'s numbers per layer.
    pub gamma: Vec<f64>,
    pub eta: Vec<f64>,
    /// GD++'s mean squared error on the held-out prompts.
    pub mse: f64,
    /// `rms(ŷ − ŷ_GD++) / rms(ŷ_GD++)` and the mean cosine of the sensitivities.
    pub diff: f64,
    pub cos: f64,
}

/// Fits GD++ with as many steps as `m` has layers ([`fit`], `steps` Adam steps)
/// and compares `m` with it on `ev`'s prompts (analysis; allocates).
pub fn compare(m: &Lsa, ev: &Eval, seed: u64, steps: u64) -> Reading {
    let task = m.task();
    let g = fit(task, m.blocks.len(), seed, steps);
    let (pr, n) = (&ev.prompts, task.n);
    let (ours, theirs) = (m.predict(&pr.z, n, None), g.predict(&pr.z, n, None));
    let cos = (0..pr.len())
        .map(|p| {
            cosine(
                &m.sensitivity(pr.prompt(p), n),
                &g.sensitivity(pr.prompt(p), n),
            )
        })
        .sum::<f64>()
        / pr.len() as f64;
    let (gamma, eta) = numbers(&g);
    Reading {
        gamma,
        eta,
        mse: mse(&theirs, &pr.y),
        diff: rel_diff(&ours, &theirs),
        cos,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::papers::icl_regression::data::{DataConfig, Prompts, XDist};
    use crate::papers::icl_regression::theory;

    /// The gradient checks' small task (d = 3, N = 4, rotated covariance, noise),
    /// here with two GD++ layers.
    fn small() -> (Lsa, Prompts) {
        crate::papers::icl_regression::model_tests::setup(2, Param2::Gdpp, 1.0)
    }

    fn set(m: &mut Lsa, l: usize, gamma: f64, eta: f64) {
        let dd = m.dd;
        let p = m.blocks[l].p.value_mut();
        for i in 0..dd - 1 {
            p[i * dd + i] = gamma;
        }
        p[dd * dd - 1] = eta;
    }

    /// The shared entry's gradient is the loss's derivative along the tied
    /// direction (every diagonal entry of `P`'s x-block moved together), `η`'s its
    /// own, by central differences in f64 away from the start (where both layers'
    /// numbers matter); `Q` and the rest of `P` get none.
    #[test]
    fn the_tied_gradient_matches_finite_differences() {
        let (mut m, pr) = small();
        let dd = m.dd;
        let numbers = [(-0.4, -0.9), (0.3, -1.2)];
        for (l, &(g, e)) in numbers.iter().enumerate() {
            set(&mut m, l, g, e);
        }
        let loss = |m: &Lsa| {
            let p = m.predict(&pr.z, 4, None);
            p.iter()
                .zip(&pr.y)
                .map(|(a, b)| 0.5 * (a - b).powi(2))
                .sum::<f64>()
                / 7.0
        };
        m.zero_grad();
        m.loss_and_grad(&pr.z, &pr.y, 4);
        let h = 1e-5;
        for (l, &(g, e)) in numbers.iter().enumerate() {
            let grad = m.blocks[l].p.grad().to_vec();
            for (k, v) in grad.iter().enumerate() {
                let tied = (k / dd == k % dd && k / dd < dd - 1) || k == dd * dd - 1;
                assert!(tied || *v == 0.0, "layer {l} entry {k}: {v}");
            }
            assert!(m.blocks[l].q.grad().iter().all(|v| *v == 0.0));
            for (which, analytic) in [(0, grad[0]), (1, grad[dd * dd - 1])] {
                let at = |delta: f64| {
                    let mut m2 = small().0;
                    for (l2, &(g2, e2)) in numbers.iter().enumerate() {
                        let moved = l2 == l;
                        let gg = g2 + if moved && which == 0 { delta } else { 0.0 };
                        let ee = e2 + if moved && which == 1 { delta } else { 0.0 };
                        set(&mut m2, l2, gg, ee);
                    }
                    loss(&m2)
                };
                let numeric = (at(h) - at(-h)) / (2.0 * h);
                let rel = (analytic - numeric).abs() / numeric.abs().max(1e-12);
                assert!(
                    rel < 1e-6,
                    "layer {l} {}: {analytic} vs {numeric} (γ {g}, η {e})",
                    ["γ", "η"][which]
                );
            }
        }
    }

    /// One GD++ layer is one GD step: fitted on von Oswald et al.'s setting its
    /// step size `−η` is the closed-form best step `η* = 6.0606` (within 1 %), and
    /// `γ` stays 0 (the last layer's inputs are never read again).
    #[test]
    fn one_layer_fits_the_best_gd_step() {
        let cfg = DataConfig {
            d: 10,
            n: 10,
            x: XDist::Uniform,
            ..DataConfig::default()
        };
        let task = Task::new(&cfg, 0);
        let star = theory::population_step(&task, cfg.n);
        let (gamma, eta) = numbers(&fit(&task, 1, 0, FIT_STEPS));
        assert_eq!(gamma, vec![0.0]);
        assert!(
            (-eta[0] / star - 1.0).abs() < 0.01,
            "−η {} vs η* {star}",
            -eta[0]
        );
    }
}
