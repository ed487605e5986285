//! Regression prompts: `n` context examples `(x_i, y_i = wᵀ x_i + ε_i)` and a
//! query `x_q` whose target is `y_q = wᵀ x_q + ε_q`, with a fresh task `w` per
//! prompt (von Oswald et al. 2023; Ahn et al. 2023; Zhang, Frei, Bartlett 2024).
//!
//! A prompt is `n + 1` tokens of width `D = d + 1`, token `i` being `[x_i; y_i]`
//! and the last the query `[x_q; 0]` (the papers' embedding, one token per
//! column there, one per row here): `[n + 1, D]` row-major.
//!
//! `x` is `Σ^{1/2} ξ` with `ξ ~ N(0, I)` (`data.x = "gaussian"`) or uniform on
//! `[−r/2, r/2]^d` (`"uniform"`, von Oswald et al.'s inputs, covariance `r²/12 · I`); `Σ`
//! has the eigenvalues `data.cov_eigs` (empty: the identity), in a random basis
//! when `data.cov_rotate` (drawn once from the seed's data stream). `w` is
//! `N(0, I)` or `N(0, Σ⁻¹)` (`data.w_prior`).

use crate::rng::{stream, substream, Stream};
use nalgebra::DMatrix;
use rand::RngCore;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};

/// How the inputs are drawn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum XDist {
    /// `Σ^{1/2} ξ`, `ξ ~ N(0, I)`.
    #[default]
    Gaussian,
    /// Uniform on `[−r/2, r/2]^d`, `r = input_range` (von Oswald et al.'s
    /// inputs; `cov_eigs` must be empty).
    Uniform,
}

/// The prior of the task vector `w`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WPrior {
    /// `w ~ N(0, I)` (von Oswald et al.; Zhang, Frei, Bartlett).
    #[default]
    Identity,
    /// `w ~ N(0, Σ⁻¹)` (Ahn et al.'s non-isotropic setting).
    InverseCov,
}

/// The `[data]` section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DataConfig {
    /// Input dimension `d`.
    pub d: usize,
    /// Context examples per prompt `n` (the training prompt length `N`).
    pub n: usize,
    pub x: XDist,
    /// The width `r` of the uniform inputs' range `[−r/2, r/2]`.
    pub input_range: f64,
    /// Eigenvalues of `Σ` (length `d`); empty: `Σ = I`.
    pub cov_eigs: Vec<f64>,
    /// Put `Σ`'s eigenvectors in a random orthonormal basis.
    pub cov_rotate: bool,
    pub w_prior: WPrior,
    /// Standard deviation of the label noise `ε`.
    pub noise: f64,
    /// Fresh prompts per training step.
    pub batch: usize,
    /// Held-out prompts the probes evaluate on (fixed for the run).
    pub eval_prompts: usize,
}

impl Default for DataConfig {
    fn default() -> Self {
        DataConfig {
            d: 5,
            n: 20,
            x: XDist::Gaussian,
            input_range: 1.0,
            cov_eigs: Vec::new(),
            cov_rotate: false,
            w_prior: WPrior::Identity,
            noise: 0.0,
            batch: 1000,
            eval_prompts: 4000,
        }
    }
}

impl DataConfig {
    pub fn check(&self) -> Result<(), String> {
        if !(1..=64).contains(&self.d) {
            return Err(format!("data.d = {}: must be in 1..=64", self.d));
        }
        if !(1..=1024).contains(&self.n) {
            return Err(format!("data.n = {}: must be in 1..=1024", self.n));
        }
        if !self.cov_eigs.is_empty() && self.cov_eigs.len() != self.d {
            return Err(format!(
                "data.cov_eigs has {} values: must be empty (Σ = I) or data.d = {}",
                self.cov_eigs.len(),
                self.d
            ));
        }
        if let Some(e) = self.cov_eigs.iter().find(|e| !(e.is_finite() && **e > 0.0)) {
            return Err(format!(
                "data.cov_eigs holds {e}: every eigenvalue must be positive"
            ));
        }
        if self.x == XDist::Uniform && (!self.cov_eigs.is_empty() || self.cov_rotate) {
            return Err(
                "data.x = \"uniform\" draws from [−r/2, r/2]^d: data.cov_eigs must be empty and data.cov_rotate false"
                    .into(),
            );
        }
        if !(self.input_range.is_finite() && self.input_range > 0.0) {
            return Err(format!(
                "data.input_range = {}: must be finite and > 0",
                self.input_range
            ));
        }
        if !(self.noise.is_finite() && self.noise >= 0.0) {
            return Err(format!(
                "data.noise = {}: must be finite and ≥ 0",
                self.noise
            ));
        }
        if self.batch == 0 || self.eval_prompts == 0 {
            return Err(format!(
                "data.batch = {}, data.eval_prompts = {}: both must be at least 1",
                self.batch, self.eval_prompts
            ));
        }
        Ok(())
    }
}

/// The run's input distribution: `Σ`, its square root and `w`'s covariance.
#[derive(Clone, Debug)]
pub struct Task {
    pub d: usize,
    pub n: usize,
    pub x: XDist,
    /// Half the width of the uniform inputs' range.
    pub half_range: f64,
    /// `Σ` `[d, d]` (the uniform inputs' `r²/12 · I`).
    pub sigma: DMatrix<f64>,
    /// `Σ^{1/2}` (symmetric), what `ξ` is multiplied by.
    pub root: DMatrix<f64>,
    /// The covariance `Ω` of `w`, and its square root.
    pub omega: DMatrix<f64>,
    pub omega_root: DMatrix<f64>,
    pub noise: f64,
}

/// `rng.random_range(low..low + scale)` (rand 0.9's `UniformFloat::sample_single`:
/// 52 random bits as a float in `[1, 2)`, less one, scaled and shifted), written
/// out so that it inlines into [`Task::fill`]'s token loop; a test holds it to
/// rand's bits.
#[inline(always)]
fn uniform(rng: &mut ChaCha8Rng, low: f64, scale: f64) -> f64 {
    let one_two = f64::from_bits((rng.next_u64() >> 12) | 0x3ff0_0000_0000_0000);
    (one_two - 1.0) * scale + low
}

fn normal(rng: &mut ChaCha8Rng) -> f64 {
    <StandardNormal as Distribution<f64>>::sample(&StandardNormal, rng)
}

/// A random orthonormal `[d, d]` basis: QR of a Gaussian matrix with the signs of
/// `R`'s diagonal moved into `Q` (Haar-distributed).
fn rotation(d: usize, rng: &mut ChaCha8Rng) -> DMatrix<f64> {
    let g = DMatrix::from_fn(d, d, |_, _| normal(rng));
    let qr = g.qr();
    let (mut q, r) = (qr.q(), qr.r());
    for j in 0..d {
        if r[(j, j)] < 0.0 {
            q.column_mut(j).neg_mut();
        }
    }
    q
}

impl Task {
    /// The distribution of `cfg`; the basis of `Σ` comes from `seed`'s data stream
    /// (sub-stream 0, before any prompt).
    pub fn new(cfg: &DataConfig, seed: u64) -> Task {
        let d = cfg.d;
        let eigs: Vec<f64> = if cfg.cov_eigs.is_empty() {
            let r = cfg.input_range;
            vec![
                if cfg.x == XDist::Uniform {
                    r * r / 12.0
                } else {
                    1.0
                };
                d
            ]
        } else {
            cfg.cov_eigs.clone()
        };
        let basis = if cfg.cov_rotate {
            rotation(d, &mut stream(seed, Stream::Data))
        } else {
            DMatrix::identity(d, d)
        };
        let with = |f: &dyn Fn(f64) -> f64| {
            let diag = DMatrix::from_diagonal(&nalgebra::DVector::from_iterator(
                d,
                eigs.iter().map(|&e| f(e)),
            ));
            &basis * diag * basis.transpose()
        };
        let (sigma, root) = (with(&|e| e), with(&|e| e.sqrt()));
        let (omega, omega_root) = match cfg.w_prior {
            WPrior::Identity => (DMatrix::identity(d, d), DMatrix::identity(d, d)),
            WPrior::InverseCov => (with(&|e| 1.0 / e), with(&|e| 1.0 / e.sqrt())),
        };
        Task {
            d,
            n: cfg.n,
            x: cfg.x,
            half_range: cfg.input_range / 2.0,
            sigma,
            root,
            omega,
            omega_root,
            noise: cfg.noise,
        }
    }

    /// The same task with the inputs' covariance scaled by `c` (context and query
    /// alike), `w`'s prior unchanged: a covariate shift.
    pub fn shifted(&self, c: f64) -> Task {
        Task {
            sigma: &self.sigma * c,
            root: &self.root * c.sqrt(),
            ..self.clone()
        }
    }

    /// `count` prompts of `m` context examples into `z` (`[count, m + 1, D]`) and
    /// their targets into `y` (`[count]`), drawn in order from `rng`.
    pub fn fill(&self, rng: &mut ChaCha8Rng, m: usize, z: &mut [f64], y: &mut [f64]) {
        macro_rules! fixed {
            ($($n:literal)*) => {
                match self.d {
                    $($n => self.fill_with::<$n>(rng, m, z, y),)*
                    _ => self.fill_with::<0>(rng, m, z, y),
                }
            };
        }
        fixed!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16)
    }

    /// [`Task::fill`] with `d = N` known to the compiler (`N = 0`: read from
    /// `self`), so that the per-token loops unroll; the same operations.
    fn fill_with<const N: usize>(
        &self,
        rng: &mut ChaCha8Rng,
        m: usize,
        z: &mut [f64],
        y: &mut [f64],
    ) {
        let d = if N == 0 { self.d } else { N };
        let dd = d + 1;
        let count = y.len();
        assert_eq!(
            z.len(),
            count * (m + 1) * dd,
            "prompts are [count, m + 1, d + 1]"
        );
        // d ≤ 64 (DataConfig::check): stack scratch, nothing allocated per batch.
        let (mut xi, mut w) = ([0.0; 64], [0.0; 64]);
        let (xi, w) = (&mut xi[..d], &mut w[..d]);
        // Σ^{1/2} row-major: the same products in the same order as indexing the
        // column-major matrix, without its index arithmetic per entry
        let mut root = [0.0; 64 * 64];
        for (r, row) in root.chunks_exact_mut(d).take(d).enumerate() {
            for (c, v) in row.iter_mut().enumerate() {
                *v = self.root[(r, c)];
            }
        }
        for (p, target) in y.iter_mut().enumerate() {
            xi.iter_mut().for_each(|v| *v = normal(rng));
            for (r, wr) in w.iter_mut().enumerate() {
                *wr = (0..d).map(|c| self.omega_root[(r, c)] * xi[c]).sum();
            }
            let prompt = &mut z[p * (m + 1) * dd..(p + 1) * (m + 1) * dd];
            for (i, tok) in prompt.chunks_exact_mut(dd).enumerate() {
                match self.x {
                    XDist::Uniform => {
                        let h = self.half_range;
                        tok[..d]
                            .iter_mut()
                            .for_each(|v| *v = uniform(rng, -h, h - -h));
                    }
                    XDist::Gaussian => {
                        xi.iter_mut().for_each(|v| *v = normal(rng));
                        for (t, row) in tok[..d].iter_mut().zip(root.chunks_exact(d)) {
                            *t = row.iter().zip(xi.iter()).map(|(a, x)| a * x).sum();
                        }
                    }
                }
                let eps = if self.noise > 0.0 {
                    self.noise * normal(rng)
                } else {
                    0.0
                };
                let label = (0..d).map(|r| w[r] * tok[r]).sum::<f64>() + eps;
                if i < m {
                    tok[d] = label;
                } else {
                    tok[d] = 0.0;
                    *target = label;
                }
            }
        }
    }

    /// The training batch of update `step + 1`: its own data sub-stream, so a
    /// resumed run draws the same prompts without saved state.
    pub fn train_batch(&self, seed: u64, step: u64, z: &mut [f64], y: &mut [f64]) {
        let mut rng = substream(seed, Stream::Data, step + 1);
        self.fill(&mut rng, self.n, z, y);
    }
}

/// A fixed set of prompts: `z` `[count, m + 1, D]`, targets `y` `[count]`.
#[derive(Clone, Debug)]
pub struct Prompts {
    pub z: Vec<f64>,
    pub y: Vec<f64>,
    /// Context examples per prompt.
    pub m: usize,
    pub dd: usize,
}

impl Prompts {
    /// `count` prompts of `m` examples from `rng`.
    pub fn draw(task: &Task, rng: &mut ChaCha8Rng, count: usize, m: usize) -> Prompts {
        let dd = task.d + 1;
        let mut z = vec![0.0; count * (m + 1) * dd];
        let mut y = vec![0.0; count];
        task.fill(rng, m, &mut z, &mut y);
        Prompts { z, y, m, dd }
    }
    pub fn len(&self) -> usize {
        self.y.len()
    }
    pub fn is_empty(&self) -> bool {
        self.y.is_empty()
    }
    /// Prompt `p`, `[m + 1, D]`.
    pub fn prompt(&self, p: usize) -> &[f64] {
        let s = (self.m + 1) * self.dd;
        &self.z[p * s..(p + 1) * s]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// The written-out uniform draw is rand's `random_range`, bit for bit.
    #[test]
    fn uniform_is_rands_random_range() {
        let mut a = ChaCha8Rng::seed_from_u64(3);
        let mut b = a.clone();
        for h in [0.5, 1.0, 3.25] {
            for _ in 0..10_000 {
                let x = uniform(&mut a, -h, h - -h);
                let y: f64 = b.random_range(-h..h);
                assert_eq!(x.to_bits(), y.to_bits());
            }
        }
    }
}
