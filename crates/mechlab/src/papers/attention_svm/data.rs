//! The synthetic setting of the papers' code (`TF-as-SVM/local_converge.ipynb`):
//! `n` sequences of `T` tokens drawn uniformly on the unit sphere of `R^d`, labels
//! `y_i = ±1` at random, a unit read-out `v`, and a cross-attention query `z_i`,
//! also uniform on the sphere. Each sequence's *optimal* token is the one of highest score
//! `γ_(i,t) = y_i vᵀ x_(i,t)`; the attention-SVM separates those.

use crate::rng::{stream, Stream};
use rand::Rng;
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};

/// The `[data]` section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DataConfig {
    /// Sequences.
    pub n: usize,
    /// Tokens per sequence.
    pub t: usize,
    /// Token dimension.
    pub d: usize,
    /// Opposite-label twins: the last `twins` sequences repeat the tokens and
    /// query of the first `twins` with the label flipped. A twin pair's
    /// highest-score tokens are then the top and the bottom of the same `vᵀ x`
    /// ranking, which no `W` can both select, so the attention SVM of the
    /// highest-score tokens is infeasible by construction (claim c).
    pub twins: usize,
}

impl Default for DataConfig {
    fn default() -> Self {
        DataConfig {
            n: 6,
            t: 8,
            d: 10,
            twins: 0,
        }
    }
}

impl DataConfig {
    /// Value checks; the message names the key.
    pub fn check(&self) -> Result<(), String> {
        if self.n == 0 || self.n > 10_000 {
            return Err(format!("data.n = {}: must be in 1..=10000", self.n));
        }
        if self.t < 2 || self.t > 1000 {
            return Err(format!("data.t = {}: must be in 2..=1000", self.t));
        }
        if self.d == 0 || self.d > 64 {
            return Err(format!("data.d = {}: must be in 1..=64", self.d));
        }
        if 2 * self.twins > self.n {
            return Err(format!(
                "data.twins = {}: must be at most data.n / 2 = {}",
                self.twins,
                self.n / 2
            ));
        }
        Ok(())
    }
}

/// The data: `n` items, each tokens `x` `[t, d]`, a query `z` `[d]` and a label
/// `y`. Consecutive runs of `group` items share one output (1 for the ⟨cls⟩-query
/// model; `t` for [`SvmData::token_queries`], where every token of a sequence is
/// a query and the model's output is the mean over them).
#[derive(Clone, Debug, PartialEq)]
pub struct SvmData {
    pub n: usize,
    pub t: usize,
    pub d: usize,
    pub x: Vec<f64>,
    pub z: Vec<f64>,
    pub y: Vec<f64>,
    pub group: usize,
}

impl SvmData {
    /// Token `t` of sequence `i`: `[d]`.
    pub fn token(&self, i: usize, t: usize) -> &[f64] {
        let o = (i * self.t + t) * self.d;
        &self.x[o..o + self.d]
    }
    /// The query `z_i`: `[d]`.
    pub fn query(&self, i: usize) -> &[f64] {
        &self.z[i * self.d..(i + 1) * self.d]
    }
    /// The scores `γ_(i,t) = y_i vᵀ x_(i,t)`: `[n, t]`.
    pub fn scores(&self, v: &[f64]) -> Vec<f64> {
        (0..self.n * self.t)
            .map(|k| {
                let (i, t) = (k / self.t, k % self.t);
                self.y[i] * dot(v, self.token(i, t))
            })
            .collect()
    }
    /// The sequence-output (self-attention) form of the data: item `(i, k)` holds
    /// sequence `i`'s tokens with its own token `k` as the query, so the attention
    /// SVM gets one constraint set per query, `(x_(i,α_ik) − x_(i,t))ᵀ W x_(i,k) ≥ 1`,
    /// and the `t` items of a sequence form one output group.
    pub fn token_queries(&self) -> SvmData {
        let (n, t, d) = (self.n, self.t, self.d);
        let td = t * d;
        let x = (0..n * t)
            .flat_map(|k| self.x[(k / t) * td..(k / t + 1) * td].iter().copied())
            .collect();
        SvmData {
            n: n * t,
            t,
            d,
            x,
            z: self.x.clone(),
            y: (0..n * t).map(|k| self.y[k / t]).collect(),
            group: t,
        }
    }
    /// The optimal token of each sequence (highest score).
    pub fn optimal(&self, v: &[f64]) -> Vec<usize> {
        argmax_rows(&self.scores(v), self.t)
    }
}

pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The index of the largest entry of each row of `m` (`[rows, cols]`).
pub fn argmax_rows(m: &[f64], cols: usize) -> Vec<usize> {
    m.chunks(cols)
        .map(|r| {
            (0..cols)
                .max_by(|&a, &b| r[a].total_cmp(&r[b]).then(b.cmp(&a)))
                .unwrap_or(0)
        })
        .collect()
}

/// Scales each `d`-row of `m` to unit norm.
fn unit_rows(m: &mut [f64], d: usize) {
    for r in m.chunks_mut(d) {
        let n = dot(r, r).sqrt().max(1e-300);
        r.iter_mut().for_each(|a| *a /= n);
    }
}

/// Tokens, queries, `v` and labels from the seed's `Data` stream.
pub fn generate(c: &DataConfig, seed: u64) -> (SvmData, Vec<f64>) {
    let mut rng = stream(seed, Stream::Data);
    let mut g = || <StandardNormal as Distribution<f64>>::sample(&StandardNormal, &mut rng);
    let mut x: Vec<f64> = (0..c.n * c.t * c.d).map(|_| g()).collect();
    let mut z: Vec<f64> = (0..c.n * c.d).map(|_| g()).collect();
    let mut v: Vec<f64> = (0..c.d).map(|_| g()).collect();
    unit_rows(&mut x, c.d);
    unit_rows(&mut z, c.d);
    unit_rows(&mut v, c.d);
    let mut y: Vec<f64> = (0..c.n)
        .map(|_| if rng.random::<bool>() { 1.0 } else { -1.0 })
        .collect();
    // Twins: sequence n − twins + k copies sequence k with the opposite label.
    let (td, first) = (c.t * c.d, c.n - c.twins);
    for k in 0..c.twins {
        x.copy_within(k * td..(k + 1) * td, (first + k) * td);
        z.copy_within(k * c.d..(k + 1) * c.d, (first + k) * c.d);
        y[first + k] = -y[k];
    }
    (
        SvmData {
            n: c.n,
            t: c.t,
            d: c.d,
            x,
            z,
            y,
            group: 1,
        },
        v,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::papers::attention_svm::svm::{w_mm, SvmError};

    /// Twins repeat tokens and query with the label flipped, which leaves the rest of
    /// the draw as it was and makes the SVM of the highest-score tokens infeasible.
    #[test]
    fn twins_copy_with_flipped_labels_and_make_the_optimum_inseparable() {
        let base = DataConfig::default();
        let tw = DataConfig {
            twins: 2,
            ..base.clone()
        };
        let ((a, va), (b, vb)) = (generate(&base, 4), generate(&tw, 4));
        assert_eq!(va, vb);
        let (n, td) = (a.n, a.t * a.d);
        assert_eq!(a.x[..(n - 2) * td], b.x[..(n - 2) * td]);
        for k in 0..2 {
            assert_eq!(
                b.x[k * td..(k + 1) * td],
                b.x[(n - 2 + k) * td..(n - 1 + k) * td]
            );
            assert_eq!(b.query(k), b.query(n - 2 + k));
            assert_eq!(b.y[n - 2 + k], -b.y[k]);
        }
        assert!(w_mm(&a, &a.optimal(&va)).is_ok());
        assert!(matches!(
            w_mm(&b, &b.optimal(&vb)),
            Err(SvmError::Infeasible(_))
        ));
        assert!(DataConfig { twins: 4, ..base }
            .check()
            .unwrap_err()
            .contains("data.twins"));
    }

    /// Item `(i, k)` of the token-query form is sequence `i` queried by its own
    /// token `k`, with `i`'s label, in groups of `t`.
    #[test]
    fn token_queries_make_every_token_a_query() {
        let (a, _) = generate(&DataConfig::default(), 2);
        let q = a.token_queries();
        assert_eq!((q.n, q.t, q.group), (a.n * a.t, a.t, a.t));
        for (i, k) in [(0, 0), (2, 5), (5, 7)] {
            let item = i * a.t + k;
            assert_eq!(q.query(item), a.token(i, k));
            assert_eq!(q.y[item], a.y[i]);
            for t in 0..a.t {
                assert_eq!(q.token(item, t), a.token(i, t));
            }
        }
    }
}
