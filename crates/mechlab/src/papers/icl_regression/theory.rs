//! The reference predictors and the closed forms (derived in
//! `docs/icl-regression.md`, "The closed forms").
//!
//! A one-layer LSA in the papers' block form predicts `ŷ = x_qᵀ B h`,
//! `h = (1/m) Σ_i y_i x_i`: one step of preconditioned gradient descent from
//! `w = 0` on `½ (1/m) Σ (y_i − wᵀ x_i)²` with preconditioner `B`. For Gaussian
//! inputs (`Σ_c` in the context, `Σ_q` for the query), `w ~ N(0, Ω)` and label
//! noise `σ²`, its risk `E (ŷ − y_q)²` at prompt length `m` is
//!
//! `R(B) = (1 + 1/m) tr(B Σ_c Ω Σ_c Bᵀ Σ_q) + (1/m) (tr(Ω Σ_c) + σ²) tr(B Σ_c Bᵀ Σ_q)
//!        − 2 tr(B Σ_c Ω Σ_q) + tr(Ω Σ_q) + σ²`,
//!
//! minimised at `Σ_c = Σ_q = Σ`, `m = N` by `B* = Γ⁻¹ Ω` with
//! `Γ = (1 + 1/N) Ω Σ + (tr(Ω Σ) + σ²)/N · I`: for `Ω = I`, `σ = 0` Zhang, Frei
//! & Bartlett's global minimum `((1 + 1/N) Σ + tr(Σ)/N I)⁻¹` (their Theorem 4.1),
//! for `Ω = Σ⁻¹` Ahn et al.'s `Σ⁻¹ N/(N + d + 1)` (their Theorem 1).

use nalgebra::{DMatrix, DVector};

/// `B* = Γ⁻¹ Ω` of the module doc for training length `n`.
pub fn optimum(sigma: &DMatrix<f64>, omega: &DMatrix<f64>, noise: f64, n: usize) -> DMatrix<f64> {
    let d = sigma.nrows();
    let os = omega * sigma;
    let nf = n as f64;
    let gamma =
        &os * (1.0 + 1.0 / nf) + DMatrix::identity(d, d) * ((os.trace() + noise * noise) / nf);
    gamma
        .try_inverse()
        .expect("Γ is Ω Σ plus a positive multiple of I: invertible")
        * omega
}

/// The risk `R(B)` of the module doc at prompt length `m`.
pub fn risk(
    b: &DMatrix<f64>,
    s_c: &DMatrix<f64>,
    s_q: &DMatrix<f64>,
    omega: &DMatrix<f64>,
    noise: f64,
    m: usize,
) -> f64 {
    let mf = m as f64;
    let s2 = noise * noise;
    let bt = b.transpose();
    let bscsbsq = (b * s_c * &bt * s_q).trace();
    (1.0 + 1.0 / mf) * (b * s_c * omega * s_c * &bt * s_q).trace()
        + ((omega * s_c).trace() + s2) / mf * bscsbsq
        - 2.0 * (b * s_c * omega * s_q).trace()
        + (omega * s_q).trace()
        + s2
}

/// `h = (1/m) Σ_i y_i x_i` of one prompt `[m + 1, D]`.
pub fn moment(prompt: &[f64], m: usize, d: usize) -> DVector<f64> {
    let dd = d + 1;
    let mut h = DVector::zeros(d);
    for tok in prompt[..m * dd].chunks_exact(dd) {
        for r in 0..d {
            h[r] += tok[d] * tok[r];
        }
    }
    h / m as f64
}

/// `x_q` of one prompt.
pub fn query(prompt: &[f64], m: usize, d: usize) -> DVector<f64> {
    let dd = d + 1;
    DVector::from_column_slice(&prompt[m * dd..m * dd + d])
}

/// `L` steps of preconditioned GD from `w = 0` on one prompt's in-context loss,
/// `w ← w + A_l (1/m) Σ_i (y_i − wᵀ x_i) x_i`: the prediction `wᵀ x_q`.
pub fn preconditioned_gd(prompt: &[f64], m: usize, d: usize, steps: &[DMatrix<f64>]) -> f64 {
    let dd = d + 1;
    let mut w = DVector::zeros(d);
    for a in steps {
        let mut g = DVector::zeros(d);
        for tok in prompt[..m * dd].chunks_exact(dd) {
            let x = DVector::from_column_slice(&tok[..d]);
            let r = tok[d] - w.dot(&x);
            g += x * r;
        }
        w += a * g / m as f64;
    }
    w.dot(&query(prompt, m, d))
}

/// The population-optimal step size of one plain GD step, `ŷ = η x_qᵀ h`, on the
/// task's prompts of length `m`: `η* = E[g y] / E[g²]`, `g = x_qᵀ h`, with
/// `E[g y] = tr(Σ Ω Σ)` and `E[g²] = E tr(Ĥ Ω Ĥ Σ) + σ²/m · tr(Σ²)`. For Gaussian
/// inputs `E[Ĥ Ω Ĥ] = (1 + 1/m) Σ Ω Σ + (1/m) tr(Ω Σ) Σ`; for von Oswald et al.'s
/// uniform inputs on `[−a, a]^d` (`Σ = s I`, `s = a²/3`, fourth moment `a⁴/5`,
/// `Ω = I`), `E tr(Ĥ²) = d s² + (d/m)(a⁴/5 + (d − 2) s²)` (docs/icl-regression.md).
pub fn population_step(task: &super::data::Task, m: usize) -> f64 {
    let (sigma, omega) = (&task.sigma, &task.omega);
    let (mf, s2) = (m as f64, task.noise * task.noise);
    let gy = (sigma * omega * sigma).trace();
    let noise = s2 / mf * (sigma * sigma).trace();
    let gg = match task.x {
        super::data::XDist::Gaussian => {
            (1.0 + 1.0 / mf) * (sigma * omega * sigma * sigma).trace()
                + (omega * sigma).trace() / mf * (sigma * sigma).trace()
        }
        super::data::XDist::Uniform => {
            let (d, a) = (task.d as f64, task.half_range);
            let s = a * a / 3.0;
            s * (d * s * s + d / mf * (a.powi(4) / 5.0 + (d - 2.0) * s * s))
        }
    };
    gy / (gg + noise)
}

/// The step size `η*` that minimises the mean squared error of one plain GD
/// step, `ŷ = η x_qᵀ h`, on `prompts` (`[count, m + 1, D]`, targets `y`): the
/// least-squares coefficient `Σ g y / Σ g²` of `g = x_qᵀ h` (von Oswald et
/// al.'s line search, solved exactly).
pub fn best_step(z: &[f64], y: &[f64], m: usize, d: usize) -> f64 {
    let stride = (m + 1) * (d + 1);
    let (mut gy, mut gg) = (0.0, 0.0);
    for (p, &t) in z.chunks_exact(stride).zip(y) {
        let g = query(p, m, d).dot(&moment(p, m, d));
        gy += g * t;
        gg += g * g;
    }
    if gg > 0.0 {
        gy / gg
    } else {
        0.0
    }
}

/// The best scalar multiple of `target` for `b` and the relative distance left:
/// `c = ⟨b, t⟩/⟨t, t⟩`, `‖b − c t‖_F / ‖b‖_F` (0 when `b` is 0).
pub fn scaled_distance(b: &DMatrix<f64>, target: &DMatrix<f64>) -> (f64, f64) {
    let c = b.dot(target) / target.dot(target);
    let nb = b.norm();
    let rel = if nb > 0.0 {
        (b - target * c).norm() / nb
    } else {
        0.0
    };
    (c, rel)
}

/// The mean and standard error of `xs`.
pub fn mean_se(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    (mean, (var / n).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::papers::icl_regression::data::{DataConfig, Prompts, Task};
    use crate::rng::{stream, Stream};

    /// The closed-form risk against a Monte-Carlo estimate of the same predictor
    /// on Gaussian prompts: non-isotropic `Σ`, both priors, noise, another length.
    #[test]
    fn the_risk_formula_matches_monte_carlo() {
        for (prior, noise, m) in [
            (super::super::data::WPrior::Identity, 0.0, 6),
            (super::super::data::WPrior::InverseCov, 0.3, 11),
        ] {
            let cfg = DataConfig {
                d: 3,
                n: m,
                cov_eigs: vec![0.5, 1.0, 2.5],
                cov_rotate: true,
                w_prior: prior,
                noise,
                ..DataConfig::default()
            };
            let task = Task::new(&cfg, 3);
            let b = optimum(&task.sigma, &task.omega, noise, 8) * 0.9
                + DMatrix::from_fn(3, 3, |i, j| 0.05 * (i as f64 - j as f64));
            let pr = Prompts::draw(&task, &mut stream(4, Stream::Sample), 200_000, m);
            let errs: Vec<f64> = (0..pr.len())
                .map(|p| {
                    let q = pr.prompt(p);
                    let yh = query(q, m, 3).dot(&(&b * moment(q, m, 3)));
                    (yh - pr.y[p]).powi(2)
                })
                .collect();
            let (mc, se) = mean_se(&errs);
            let th = risk(&b, &task.sigma, &task.sigma, &task.omega, noise, m);
            assert!(
                (mc - th).abs() < 4.0 * se,
                "{prior:?}: MC {mc} ± {se}, formula {th}"
            );
        }
    }

    /// `B*` is the formula's minimum: every small perturbation raises the risk.
    #[test]
    fn the_optimum_minimises_the_risk() {
        let cfg = DataConfig {
            d: 3,
            cov_eigs: vec![0.3, 1.0, 4.0],
            cov_rotate: true,
            noise: 0.2,
            ..DataConfig::default()
        };
        let t = Task::new(&cfg, 1);
        let b = optimum(&t.sigma, &t.omega, 0.2, 7);
        let r0 = risk(&b, &t.sigma, &t.sigma, &t.omega, 0.2, 7);
        for k in 0..9 {
            let mut db = DMatrix::zeros(3, 3);
            db[(k / 3, k % 3)] = 1e-3;
            for s in [1.0, -1.0] {
                let r = risk(&(&b + &db * s), &t.sigma, &t.sigma, &t.omega, 0.2, 7);
                assert!(r > r0, "entry {k}: {r} ≤ {r0}");
            }
        }
    }

    /// The population step size against the least-squares step on many prompts,
    /// uniform (von Oswald et al.'s setting: 6.0606 at d = N = 10, a = 1/2) and
    /// Gaussian with noise.
    #[test]
    fn the_population_step_is_the_large_sample_step() {
        for cfg in [
            DataConfig {
                d: 10,
                n: 10,
                x: super::super::data::XDist::Uniform,
                ..DataConfig::default()
            },
            DataConfig {
                d: 3,
                n: 7,
                cov_eigs: vec![0.5, 1.0, 2.0],
                cov_rotate: true,
                noise: 0.4,
                ..DataConfig::default()
            },
        ] {
            let t = Task::new(&cfg, 0);
            let pop = population_step(&t, cfg.n);
            let pr = Prompts::draw(&t, &mut stream(1, Stream::Sample), 400_000, cfg.n);
            let ls = best_step(&pr.z, &pr.y, cfg.n, cfg.d);
            assert!((ls / pop - 1.0).abs() < 0.01, "{:?}: {ls} vs {pop}", cfg.x);
            if cfg.x == super::super::data::XDist::Uniform {
                assert!((pop - 6.0606).abs() < 1e-4, "{pop}");
            }
        }
    }

    /// One GD step is preconditioned GD with `η I`, and `η*` beats its neighbours.
    #[test]
    fn the_best_step_is_the_least_squares_step() {
        let cfg = DataConfig::default();
        let t = Task::new(&cfg, 0);
        let pr = Prompts::draw(&t, &mut stream(0, Stream::Sample), 2000, cfg.n);
        let eta = best_step(&pr.z, &pr.y, cfg.n, cfg.d);
        let mse = |e: f64| {
            let a = [DMatrix::identity(cfg.d, cfg.d) * e];
            (0..pr.len())
                .map(|p| (preconditioned_gd(pr.prompt(p), cfg.n, cfg.d, &a) - pr.y[p]).powi(2))
                .sum::<f64>()
        };
        assert!(mse(eta) < mse(eta * 1.01) && mse(eta) < mse(eta * 0.99));
    }
}
