//! What the probes and the final measurements read off the model: its error on
//! held-out prompts beside the reference predictors of [`super::theory`], the
//! effective preconditioner of each layer, von Oswald et al.'s comparison with
//! one GD step (predictions and sensitivities), and the risk over prompt
//! lengths and under covariate shift against the closed form.

use super::data::{Prompts, Task};
use super::model::Lsa;
use super::theory::{self, mean_se};
use crate::rng::{substream, Stream};
use nalgebra::DMatrix;

/// Sub-streams of [`Stream::Sample`]: the probes' held-out prompts, then one per
/// prompt length and one per covariate shift.
const EVAL_STREAM: u64 = 1;
const LENGTH_STREAM: u64 = 100;
const SHIFT_STREAM: u64 = 200;

/// The held-out prompts and the references computed on them once.
pub struct Eval {
    pub prompts: Prompts,
    /// `η*` of one plain GD step on the task ([`theory::population_step`]).
    pub eta: f64,
    /// `B*` of the training distribution (one layer).
    pub b_star: DMatrix<f64>,
    /// Per prompt: one GD step's prediction and `B*`'s.
    pub gd: Vec<f64>,
    pub opt: Vec<f64>,
    /// Mean squared errors of one GD step (`η*`), of `B*`, and of predicting 0.
    pub mse_gd: f64,
    pub mse_opt: f64,
    pub mse_zero: f64,
}

pub(super) fn mse(pred: &[f64], y: &[f64]) -> f64 {
    pred.iter()
        .zip(y)
        .map(|(p, t)| (p - t).powi(2))
        .sum::<f64>()
        / y.len() as f64
}

/// `rms(a − b) / rms(b)`: von Oswald et al.'s "preds diff", relative.
pub fn rel_diff(a: &[f64], b: &[f64]) -> f64 {
    let num: f64 = a.iter().zip(b).map(|(x, y)| (x - y).powi(2)).sum();
    let den: f64 = b.iter().map(|y| y * y).sum();
    (num / den.max(1e-300)).sqrt()
}

impl Eval {
    pub fn new(task: &Task, seed: u64, count: usize) -> Eval {
        let (d, n) = (task.d, task.n);
        let prompts = Prompts::draw(
            task,
            &mut substream(seed, Stream::Sample, EVAL_STREAM),
            count,
            n,
        );
        let eta = theory::population_step(task, n);
        let b_star = theory::optimum(&task.sigma, &task.omega, task.noise, n);
        let (mut gd, mut opt) = (Vec::with_capacity(count), Vec::with_capacity(count));
        for p in 0..count {
            let q = prompts.prompt(p);
            let (x, h) = (theory::query(q, n, d), theory::moment(q, n, d));
            gd.push(eta * x.dot(&h));
            opt.push(x.dot(&(&b_star * &h)));
        }
        Eval {
            mse_gd: mse(&gd, &prompts.y),
            mse_opt: mse(&opt, &prompts.y),
            mse_zero: prompts.y.iter().map(|y| y * y).sum::<f64>() / count as f64,
            prompts,
            eta,
            b_star,
            gd,
            opt,
        }
    }
}

/// One probe's reading.
#[derive(Clone, Debug, Default)]
pub struct Probe {
    pub mse: f64,
    /// `rms(ŷ − ŷ_GD)/rms(ŷ_GD)` against one GD step with `η*`, and against `B*`.
    pub diff_gd: f64,
    pub diff_opt: f64,
    /// Mean cosine of `∂ŷ/∂x_q` with one GD step's (`η* h`) and with `B*`'s (`B* h`).
    pub cos_gd: f64,
    pub cos_opt: f64,
    /// Each layer's effective preconditioner `B_l = −P_l[D, D] · Q_l[x, x]ᵀ`.
    /// This and the other readings of the weights (`rel_b`, `precond`,
    /// `whitened`, `p_identity`, `diff_blocks`) are linear attention's: empty or
    /// NaN with softmax attention, whose prediction is not a preconditioned step.
    pub b: Vec<DMatrix<f64>>,
    /// One layer: `‖B_0 − B*‖_F / ‖B*‖_F`.
    pub rel_b: f64,
    /// Each layer: the best multiple `c` of `Σ⁻¹` for `B_l`, and the relative distance left.
    pub precond: Vec<(f64, f64)>,
    /// Each layer: Ahn et al.'s distance to identity of the whitened `Σ^{1/2} B_l Σ^{1/2}`
    /// ([`identity_distance`]; 0 exactly when `B_l ∝ Σ⁻¹`).
    pub whitened: Vec<f64>,
    /// Each layer: the distance to identity of `P_l`'s x-block (Ahn et al.'s `P_l ∝ I`).
    pub p_identity: Vec<f64>,
    /// von Oswald et al.'s absolute measures against one GD step: mean `|ŷ − ŷ_GD|`
    /// ("preds diff") and mean `‖∂ŷ/∂x_q − η* h‖` ("model diff").
    pub preds_diff: f64,
    pub model_diff: f64,
    /// `rms(ŷ − ŷ_blocks)/rms(ŷ_blocks)`, `ŷ_blocks` the prediction of `L` steps of
    /// preconditioned GD with the `B_l`: how much the blocks outside the papers'
    /// form contribute.
    pub diff_blocks: f64,
}

impl Probe {
    /// The reading's scalars by name, as the probes log them and the summary keeps them.
    pub fn readings(&self) -> Vec<(String, f64)> {
        let mut r: Vec<(String, f64)> = [
            ("mse", self.mse),
            ("diff_gd", self.diff_gd),
            ("cos_gd", self.cos_gd),
            ("diff_opt", self.diff_opt),
            ("cos_opt", self.cos_opt),
            ("rel_b", self.rel_b),
            ("diff_blocks", self.diff_blocks),
            ("preds_diff", self.preds_diff),
            ("model_diff", self.model_diff),
        ]
        .into_iter()
        .filter(|(_, v)| !v.is_nan())
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        for (l, (w, pi)) in self.whitened.iter().zip(&self.p_identity).enumerate() {
            r.push((format!("whitened_{l}"), *w));
            r.push((format!("p_identity_{l}"), *pi));
        }
        r
    }
}

/// `B_l` of the module's [`Probe::b`].
pub fn effective(m: &Lsa, l: usize) -> DMatrix<f64> {
    let (p, q) = m.pq(l);
    let dd = m.dd;
    let d = dd - 1;
    let py = p[dd * dd - 1];
    DMatrix::from_fn(d, d, |i, j| -py * q[j * dd + i])
}

/// Ahn et al.'s distance to identity, `‖M − (tr M / d) I‖_F / ‖M‖_F` (0 when `M` is 0).
pub fn identity_distance(m: &DMatrix<f64>) -> f64 {
    let d = m.nrows();
    let nm = m.norm();
    if nm == 0.0 {
        return 0.0;
    }
    (m - DMatrix::identity(d, d) * (m.trace() / d as f64)).norm() / nm
}

/// `P_l`'s x-block `[d, d]`.
pub fn p_block(m: &Lsa, l: usize) -> DMatrix<f64> {
    let (p, _) = m.pq(l);
    let dd = m.dd;
    DMatrix::from_fn(dd - 1, dd - 1, |i, j| p[i * dd + j])
}

pub(super) fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f64 = a.iter().map(|x| x * x).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| x * x).sum::<f64>().sqrt();
    if na > 0.0 && nb > 0.0 {
        dot / (na * nb)
    } else {
        0.0
    }
}

/// The probe on `ev`'s prompts (analysis; allocates).
pub fn probe(m: &Lsa, ev: &Eval) -> Probe {
    let task = m.task();
    let (d, n) = (task.d, task.n);
    let pr = &ev.prompts;
    let pred = m.predict(&pr.z, n, None);
    let linear = m.softmax_heads().is_none();
    let layers = if linear { m.blocks.len() } else { 0 };
    let b: Vec<DMatrix<f64>> = (0..layers).map(|l| effective(m, l)).collect();
    let sigma_inv = task
        .sigma
        .clone()
        .try_inverse()
        .expect("Σ is positive definite");
    let (mut cos_gd, mut cos_opt, mut model_diff) = (0.0, 0.0, 0.0);
    let mut blocks = Vec::with_capacity(pr.len());
    for p in 0..pr.len() {
        let q = pr.prompt(p);
        let s = m.sensitivity(q, n);
        let h = theory::moment(q, n, d);
        let g: Vec<f64> = h.iter().map(|v| ev.eta * v).collect();
        let o = &ev.b_star * &h;
        cos_gd += cosine(&s, &g);
        model_diff += s
            .iter()
            .zip(&g)
            .map(|(a, b)| (a - b).powi(2))
            .sum::<f64>()
            .sqrt();
        cos_opt += cosine(&s, o.as_slice());
        if linear {
            blocks.push(theory::preconditioned_gd(q, n, d, &b));
        }
    }
    let count = pr.len() as f64;
    Probe {
        mse: mse(&pred, &pr.y),
        diff_gd: rel_diff(&pred, &ev.gd),
        diff_opt: rel_diff(&pred, &ev.opt),
        cos_gd: cos_gd / count,
        cos_opt: cos_opt / count,
        rel_b: b
            .first()
            .map_or(f64::NAN, |b0| (b0 - &ev.b_star).norm() / ev.b_star.norm()),
        precond: b
            .iter()
            .map(|bl| theory::scaled_distance(bl, &sigma_inv))
            .collect(),
        diff_blocks: if linear {
            rel_diff(&pred, &blocks)
        } else {
            f64::NAN
        },
        whitened: b
            .iter()
            .map(|bl| identity_distance(&(&task.root * bl * &task.root)))
            .collect(),
        p_identity: (0..layers)
            .map(|l| identity_distance(&p_block(m, l)))
            .collect(),
        preds_diff: pred
            .iter()
            .zip(&ev.gd)
            .map(|(a, b)| (a - b).abs())
            .sum::<f64>()
            / count,
        model_diff: model_diff / count,
        b,
    }
}

/// The model's risk on fresh prompts beside the closed form at `B*`.
#[derive(Clone, Debug)]
pub struct RiskPoint {
    /// The prompt length `M`, or the covariance scale `c` of a shift.
    pub at: f64,
    pub mc: f64,
    pub se: f64,
    /// `R(B*)` for these prompts.
    pub formula: f64,
    /// The model's error minus `B*`'s on the same prompts (mean, standard error):
    /// the excess risk over the training optimum, paired.
    pub excess: f64,
    pub excess_se: f64,
    /// The risk the one-layer optimum for these prompts' own distribution
    /// (`B*` refitted) would have: what a learner that adapts reaches.
    pub refit: f64,
}

impl RiskPoint {
    /// `|mc − formula|` in standard errors.
    pub fn z(&self) -> f64 {
        (self.mc - self.formula).abs() / self.se.max(1e-300)
    }
}

/// The model's risk on fresh prompts (mean, s.e.) and its excess over `b_star`'s
/// on the same prompts (mean, s.e.).
fn risk_on(
    m: &Lsa,
    b_star: &DMatrix<f64>,
    task: &Task,
    seed: u64,
    sub: u64,
    count: usize,
    len: usize,
) -> ((f64, f64), (f64, f64)) {
    let pr = Prompts::draw(task, &mut substream(seed, Stream::Sample, sub), count, len);
    let pred = m.predict(&pr.z, len, None);
    let errs: Vec<f64> = pred
        .iter()
        .zip(&pr.y)
        .map(|(p, t)| (p - t).powi(2))
        .collect();
    let excess: Vec<f64> = (0..count)
        .map(|k| {
            let q = pr.prompt(k);
            let o = theory::query(q, len, task.d).dot(&(b_star * theory::moment(q, len, task.d)));
            errs[k] - (o - pr.y[k]).powi(2)
        })
        .collect();
    (mean_se(&errs), mean_se(&excess))
}

/// The risk at each prompt length in `lengths` (training distribution).
pub fn over_lengths(
    m: &Lsa,
    ev: &Eval,
    seed: u64,
    count: usize,
    lengths: &[usize],
) -> Vec<RiskPoint> {
    let t = m.task();
    lengths
        .iter()
        .enumerate()
        .map(|(k, &len)| {
            let ((mc, se), (excess, excess_se)) =
                risk_on(m, &ev.b_star, t, seed, LENGTH_STREAM + k as u64, count, len);
            let refit = theory::optimum(&t.sigma, &t.omega, t.noise, len);
            RiskPoint {
                at: len as f64,
                mc,
                se,
                excess,
                excess_se,
                formula: theory::risk(&ev.b_star, &t.sigma, &t.sigma, &t.omega, t.noise, len),
                refit: theory::risk(&refit, &t.sigma, &t.sigma, &t.omega, t.noise, len),
            }
        })
        .collect()
}

/// The risk at training length with the inputs' covariance scaled by each of
/// `scales` (context and query alike).
pub fn under_shift(m: &Lsa, ev: &Eval, seed: u64, count: usize, scales: &[f64]) -> Vec<RiskPoint> {
    let t = m.task();
    scales
        .iter()
        .enumerate()
        .map(|(k, &c)| {
            let s = t.shifted(c);
            let ((mc, se), (excess, excess_se)) =
                risk_on(m, &ev.b_star, &s, seed, SHIFT_STREAM + k as u64, count, t.n);
            let refit = theory::optimum(&s.sigma, &s.omega, s.noise, t.n);
            RiskPoint {
                at: c,
                mc,
                se,
                excess,
                excess_se,
                formula: theory::risk(&ev.b_star, &s.sigma, &s.sigma, &s.omega, s.noise, t.n),
                refit: theory::risk(&refit, &s.sigma, &s.sigma, &s.omega, s.noise, t.n),
            }
        })
        .collect()
}
