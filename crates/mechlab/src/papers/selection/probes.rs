//! Probes of token selection: the one-step signed frequencies, the attention-SVM
//! (max-margin) direction, and what the trained ⟨cls⟩ query selects.
//!
//! - [`signed_frequency`]: `α_s = (1/n) Σ_k y_k count_s(X_k) / T_k`, the quantity the
//!   first gradient step writes into `E_s·v` (see `docs/selection.md` for the derivation);
//! - [`selected_tokens`]: the token of each sequence that serves its label best,
//!   `s*_k = argmax_(t ∈ X_k) y_k E_t·v`;
//! - [`max_margin`]: `p_mm = argmin ‖p‖` s.t. `p·(E_(s*_k) − E_t) ≥ 1` for every `k` and
//!   every other token `t` of `X_k` (Tarzanagh et al. 2023), solved by [`crate::max_margin::min_norm`];
//! - [`attention_mass`], [`margin`], [`cosine`]: how far a query `p` has got there;
//! - [`u_shape`] and [`most_selected`]: the score `p·E_s` against a token's label
//!   posterior, and the words the attention picks per class, for real text.
//!
//! ```
//! use mechlab::papers::selection::probes::max_margin;
//! // E = I (3 tokens, d = 3); token 0 is selected over tokens 1 and 2 in one sequence:
//! // p_0 − p_1 ≥ 1, p_0 − p_2 ≥ 1  ⇒  p_mm = (2/3, −1/3, −1/3).
//! let e = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0];
//! let p = max_margin(&e, 3, &[(0, 1), (0, 2)]).unwrap();
//! assert!((p[0] - 2.0 / 3.0).abs() < 1e-6 && (p[1] + 1.0 / 3.0).abs() < 1e-6);
//! ```

use crate::max_margin::{min_norm, MarginError};
use crate::papers::selection::data::SeqData;
use crate::papers::selection::model::{ModelConfig, SelectionModel};
use crate::train::Trainable;
use mechlab_engine::{Float, Parameters};
use std::collections::BTreeSet;
use std::sync::Arc;

/// `α_s = (1/n) Σ_k y_k count_s(X_k) / T_k` for every token `s`: `[d_vocab]`.
pub fn signed_frequency(data: &SeqData) -> Vec<f64> {
    let mut alpha = vec![0.0; data.d_vocab];
    for k in 0..data.n {
        let toks = data.tokens(k);
        let w = data.y[k] / toks.len() as f64;
        for &t in toks {
            alpha[t as usize] += w;
        }
    }
    let n = data.n.max(1) as f64;
    alpha.iter_mut().for_each(|a| *a /= n);
    alpha
}

/// A parameter's values as `f64`.
pub fn vals<T: Float>(x: &[T]) -> Vec<f64> {
    x.iter().map(|v| v.as_f64()).collect()
}

/// Claim-1 result: `Δ(E_s·v)` after one step against `(η/2) α_s ‖v‖²`.
pub struct OneStep {
    pub alpha: Vec<f64>,
    pub measured: Vec<f64>,
    pub predicted: Vec<f64>,
    /// `max_s |measured − predicted| / max_s |predicted|`.
    pub rel_err: f64,
    pub eta: f64,
    pub slope: f64,
}

/// One SGD step of size `eta` on `E` alone from the model's initial state, on a
/// fresh copy (so it is available on resume too), against the formula.
pub fn one_step_check<T: Float>(
    cfg: &ModelConfig,
    data: Arc<SeqData>,
    seed: u64,
    eta: f64,
) -> OneStep {
    let mut m = SelectionModel::<T>::new(cfg, data.clone(), seed);
    let d = cfg.d_model;
    let v = vals(m.v.value());
    let ev0 = project(&vals(m.w_e.value()), d, &v);
    m.set_trainable(&["embed".into()]);
    m.zero_grad();
    m.train_step(0);
    let (e, g) = m.w_e.value_and_grad_mut();
    for (x, gx) in e.iter_mut().zip(g.iter()) {
        *x -= T::of(eta) * *gx;
    }
    let ev1 = project(&vals(m.w_e.value()), d, &v);
    let alpha = signed_frequency(&data);
    let slope = eta / 2.0 * v.iter().map(|x| x * x).sum::<f64>();
    let measured: Vec<f64> = ev1.iter().zip(&ev0).map(|(a, b)| a - b).collect();
    let predicted: Vec<f64> = alpha.iter().map(|a| slope * a).collect();
    let scale = predicted
        .iter()
        .fold(0.0f64, |m, x| m.max(x.abs()))
        .max(1e-300);
    let err = measured
        .iter()
        .zip(&predicted)
        .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
    OneStep {
        alpha,
        measured,
        predicted,
        rel_err: err / scale,
        eta,
        slope,
    }
}

/// `E·x` for every row: `[d_vocab]`.
pub fn project(e: &[f64], d: usize, x: &[f64]) -> Vec<f64> {
    e.chunks(d)
        .map(|row| row.iter().zip(x).map(|(a, b)| a * b).sum())
        .collect()
}

/// `s*_k = argmax_(t ∈ X_k) y_k E_t·v` (first on ties), given `ev = E·v`.
pub fn selected_tokens(data: &SeqData, ev: &[f64]) -> Vec<u32> {
    (0..data.n)
        .map(|k| {
            let y = data.y[k];
            let mut best = data.tokens(k)[0];
            for &t in data.tokens(k) {
                if y * ev[t as usize] > y * ev[best as usize] {
                    best = t;
                }
            }
            best
        })
        .collect()
}

/// The distinct (selected, other) token pairs of the max-margin constraints.
pub fn constraint_pairs(data: &SeqData, selected: &[u32]) -> Vec<(u32, u32)> {
    let mut set = BTreeSet::new();
    for (k, &s) in selected.iter().enumerate().take(data.n) {
        for &t in data.tokens(k) {
            if t != s {
                set.insert((s, t));
            }
        }
    }
    set.into_iter().collect()
}

/// Solves `min ½‖p‖²` s.t. `p·(E_s − E_t) ≥ 1` for every pair `(s, t)` with
/// [`crate::max_margin::min_norm`]. `e`: `[d_vocab, d]` row-major.
pub fn max_margin(e: &[f64], d: usize, pairs: &[(u32, u32)]) -> Result<Vec<f64>, String> {
    let rows: Vec<Vec<f64>> = pairs
        .iter()
        .map(|&(s, t)| {
            let (es, et) = (&e[s as usize * d..][..d], &e[t as usize * d..][..d]);
            es.iter().zip(et).map(|(a, b)| a - b).collect()
        })
        .collect();
    min_norm(&rows, d).map_err(|err| match err {
        MarginError::NoConstraints => {
            "max-margin problem has no constraints (every sequence holds one distinct token)"
                .into()
        }
        MarginError::Solver(m) => format!("clarabel: {m}"),
        MarginError::Infeasible(st) => format!(
            "max-margin problem not solved ({st}): the selected tokens cannot be separated from the others by any p"
        ),
    })
}

/// `cos(a, b)` (0 when either is zero).
pub fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na = a.iter().map(|x| x * x).sum::<f64>().sqrt();
    let nb = b.iter().map(|x| x * x).sum::<f64>().sqrt();
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na * nb)
    }
}

/// The smallest `p·(E_s − E_t)` over the constraint pairs, given `ep = E·p`
/// (≥ 1 at the max-margin solution; divide by `‖p‖` for the geometric margin).
pub fn margin(ep: &[f64], pairs: &[(u32, u32)]) -> f64 {
    pairs
        .iter()
        .map(|&(s, t)| ep[s as usize] - ep[t as usize])
        .fold(f64::INFINITY, f64::min)
}

/// Mean over sequences of the attention on (every copy of) the selected token.
/// `pattern`: `[n, n_ctx]`.
pub fn attention_mass(data: &SeqData, pattern: &[f64], selected: &[u32]) -> f64 {
    let mut total = 0.0;
    for (k, &s) in selected.iter().enumerate().take(data.n) {
        let row = &pattern[k * data.n_ctx..];
        total += data
            .tokens(k)
            .iter()
            .zip(row)
            .filter(|(&t, _)| t == s)
            .map(|(_, &a)| a)
            .sum::<f64>();
    }
    total / data.n.max(1) as f64
}

/// One token of the U-shape scatter.
#[derive(Clone, Debug, PartialEq)]
pub struct UPoint {
    pub token: u32,
    /// `P̂(y=+1 | s) − P̂(y=−1 | s)` over the token's occurrences.
    pub posterior_diff: f64,
    /// `p·E_s`.
    pub score: f64,
    pub count: usize,
}

/// The score `p·E_s` against each token's label posterior, for tokens seen at
/// least `min_count` times in `data`.
pub fn u_shape(data: &SeqData, ep: &[f64], min_count: usize) -> Vec<UPoint> {
    let mut pos = vec![0usize; data.d_vocab];
    let mut all = vec![0usize; data.d_vocab];
    for k in 0..data.n {
        for &t in data.tokens(k) {
            all[t as usize] += 1;
            if data.y[k] > 0.0 {
                pos[t as usize] += 1;
            }
        }
    }
    (0..data.d_vocab)
        .filter(|&s| all[s] >= min_count.max(1))
        .map(|s| UPoint {
            token: s as u32,
            posterior_diff: (2.0 * pos[s] as f64 - all[s] as f64) / all[s] as f64,
            score: ep[s],
            count: all[s],
        })
        .collect()
}

/// Mean score at the two ends (`posterior_diff < −edge`, `> edge`) and in the middle
/// (`|posterior_diff| < middle`) of a U-shape scatter: `(left, middle, right)` (NaN
/// where a bin is empty).
pub fn u_ends(points: &[UPoint], edge: f64, middle: f64) -> (f64, f64, f64) {
    let mean = |f: &dyn Fn(f64) -> bool| {
        let v: Vec<f64> = points
            .iter()
            .filter(|p| f(p.posterior_diff))
            .map(|p| p.score)
            .collect();
        if v.is_empty() {
            f64::NAN
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    (
        mean(&|x| x < -edge),
        mean(&|x| x.abs() < middle),
        mean(&|x| x > edge),
    )
}

/// For each class (`[negative, positive]`), the `top` tokens that most often receive
/// the largest attention weight of a sequence of that class, with their counts.
pub fn most_selected(data: &SeqData, pattern: &[f64], top: usize) -> [Vec<(u32, usize)>; 2] {
    let mut counts = [vec![0usize; data.d_vocab], vec![0usize; data.d_vocab]];
    for k in 0..data.n {
        let row = &pattern[k * data.n_ctx..];
        let toks = data.tokens(k);
        let mut best = 0;
        for i in 0..toks.len() {
            if row[i] > row[best] {
                best = i;
            }
        }
        counts[(data.y[k] > 0.0) as usize][toks[best] as usize] += 1;
    }
    counts.map(|c| {
        let mut v: Vec<(u32, usize)> = c
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(s, &n)| (s as u32, n))
            .collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v.truncate(top);
        v
    })
}
