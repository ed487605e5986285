//! The attention-SVM of Tarzanagh, Li, Zhang, Oymak (2023): the key-query matrix of
//! maximum margin that separates each sequence's selected token from the others,
//!
//! `W^mm = argmin ‖W‖_F  s.t.  (x_(i,opt_i) − x_(i,t))ᵀ W z_i ≥ 1  for all i, t ≠ opt_i`,
//!
//! a quadratic programme in `vec(W)` (`d²` unknowns, one constraint per pair),
//! solved by [`crate::max_margin::min_norm`] (the solver token selection uses too). Each constraint is the inner
//! product `⟨A_(i,t), W⟩ ≥ 1` with `A_(i,t) = (x_opt − x_t) z_iᵀ`, `[d, d]`.

use crate::max_margin::{margin, min_norm, MarginError};
use crate::papers::attention_svm::data::SvmData;
use thiserror::Error;

/// Why no max-margin matrix came back.
#[derive(Debug, Error, PartialEq)]
pub enum SvmError {
    #[error("the SVM has no constraints (every sequence has one token)")]
    NoConstraints,
    #[error("selection has {got} entries, data has {n} sequences")]
    Selection { got: usize, n: usize },
    #[error("clarabel: {0}")]
    Solver(String),
    #[error("attention SVM not solved ({0}): the selected tokens cannot be separated")]
    Infeasible(String),
}

impl From<MarginError> for SvmError {
    fn from(e: MarginError) -> Self {
        match e {
            MarginError::NoConstraints => SvmError::NoConstraints,
            MarginError::Solver(m) => SvmError::Solver(m),
            MarginError::Infeasible(m) => SvmError::Infeasible(m),
        }
    }
}

/// The constraint matrices `A_(i,t) = (x_(i,opt_i) − x_(i,t)) z_iᵀ`, each `[d, d]` row-major.
pub fn constraints(data: &SvmData, opt: &[usize]) -> Result<Vec<Vec<f64>>, SvmError> {
    if opt.len() != data.n {
        return Err(SvmError::Selection {
            got: opt.len(),
            n: data.n,
        });
    }
    let d = data.d;
    let mut out = Vec::new();
    for (i, &o) in opt.iter().enumerate() {
        let z = data.query(i);
        for t in (0..data.t).filter(|&t| t != o) {
            let (xo, xt) = (data.token(i, o), data.token(i, t));
            let mut a = vec![0.0; d * d];
            for r in 0..d {
                let dx = xo[r] - xt[r];
                for c in 0..d {
                    a[r * d + c] = dx * z[c];
                }
            }
            out.push(a);
        }
    }
    if out.is_empty() {
        return Err(SvmError::NoConstraints);
    }
    Ok(out)
}

/// `W^mm` (`[d, d]` row-major) for the selection `opt`.
pub fn w_mm(data: &SvmData, opt: &[usize]) -> Result<Vec<f64>, SvmError> {
    Ok(min_norm(&constraints(data, opt)?, data.d * data.d)?)
}

/// How far above 1 a margin may sit for its token to count as a support token
/// (the solver's accuracy is far below it).
pub const SUPPORT_TOL: f64 = 1e-5;

/// Whether the selection `sel` is *locally optimal* (Tarzanagh, Li, Thrampoulidis,
/// Oymak 2023, "Transformers as Support Vector Machines", Definition 2): at its
/// SVM solution `w_mm`, every selected token scores strictly above each support
/// token of its sequence, the tokens whose constraint is active (margin within
/// [`SUPPORT_TOL`] of 1). `scores` is [`SvmData::scores`] (`[n, t]`). The
/// highest-score selection passes whenever it is separable; the papers prove
/// gradient descent can converge to the direction of any locally optimal one.
pub fn locally_optimal(
    data: &SvmData,
    scores: &[f64],
    sel: &[usize],
    w_mm: &[f64],
) -> Result<bool, SvmError> {
    let rows = constraints(data, sel)?;
    let mut rows = rows.iter();
    for (i, &o) in sel.iter().enumerate() {
        let row_scores = &scores[i * data.t..(i + 1) * data.t];
        for t in (0..data.t).filter(|&t| t != o) {
            let a = rows
                .next()
                .expect("one constraint per token but the selected");
            let support = margin(std::slice::from_ref(a), w_mm) <= 1.0 + SUPPORT_TOL;
            if support && row_scores[t] >= row_scores[o] {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// The correlation `⟨A, B⟩ / (‖A‖ ‖B‖)` the papers plot (0 when either is zero).
pub fn corr(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na = a.iter().map(|x| x * x).sum::<f64>().sqrt();
    let nb = b.iter().map(|x| x * x).sum::<f64>().sqrt();
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na * nb)
    }
}

/// The singular values of a `[d, d]` matrix, largest first: square roots of the
/// eigenvalues of `WᵀW`, found by cyclic Jacobi rotations (tiny `d` only).
pub fn singular_values(w: &[f64], d: usize) -> Vec<f64> {
    // a = WᵀW: [d, d], symmetric
    let mut a = vec![0.0; d * d];
    for i in 0..d {
        for j in 0..d {
            a[i * d + j] = (0..d).map(|r| w[r * d + i] * w[r * d + j]).sum();
        }
    }
    for _sweep in 0..100 {
        let off: f64 = (0..d * d)
            .filter(|k| k / d != k % d)
            .map(|k| a[k] * a[k])
            .sum();
        if off < 1e-30 {
            break;
        }
        for p in 0..d {
            for q in p + 1..d {
                let apq = a[p * d + q];
                if apq.abs() < 1e-300 {
                    continue;
                }
                let theta = (a[q * d + q] - a[p * d + p]) / (2.0 * apq);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let t = if theta == 0.0 { 1.0 } else { t };
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for k in 0..d {
                    let (akp, akq) = (a[k * d + p], a[k * d + q]);
                    a[k * d + p] = c * akp - s * akq;
                    a[k * d + q] = s * akp + c * akq;
                }
                for k in 0..d {
                    let (apk, aqk) = (a[p * d + k], a[q * d + k]);
                    a[p * d + k] = c * apk - s * aqk;
                    a[q * d + k] = s * apk + c * aqk;
                }
            }
        }
    }
    let mut sv: Vec<f64> = (0..d).map(|i| a[i * d + i].max(0.0).sqrt()).collect();
    sv.sort_by(|x, y| y.total_cmp(x));
    sv
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::papers::attention_svm::data::{argmax_rows, generate, DataConfig};

    /// The highest-score selection is locally optimal; the lowest-score one is not
    /// (some support token of it outscores it), though both are separable here.
    #[test]
    fn the_best_tokens_are_locally_optimal_and_the_worst_are_not() {
        let (data, v) = generate(
            &DataConfig {
                n: 4,
                t: 4,
                d: 6,
                twins: 0,
            },
            3,
        );
        let scores = data.scores(&v);
        let best = data.optimal(&v);
        let neg: Vec<f64> = scores.iter().map(|x| -x).collect();
        let worst = argmax_rows(&neg, data.t);
        let local = |sel: &[usize]| {
            let w = w_mm(&data, sel).unwrap();
            locally_optimal(&data, &scores, sel, &w).unwrap()
        };
        assert!(local(&best));
        assert!(!local(&worst));
    }

    #[test]
    fn one_constraint_has_the_closed_form() {
        // min ‖x‖ s.t. ⟨a, x⟩ ≥ 1  ⇒  x = a / ‖a‖²
        let a = vec![1.0, -2.0, 0.5, 3.0];
        let n2: f64 = a.iter().map(|x| x * x).sum();
        let x = min_norm(std::slice::from_ref(&a), 4).unwrap();
        for (xi, ai) in x.iter().zip(&a) {
            assert!((xi - ai / n2).abs() < 1e-8, "{x:?}");
        }
    }

    #[test]
    fn two_tokens_one_sequence_gives_the_rank_one_closed_form() {
        // T = 2, opt = 0: W^mm = (x_0 − x_1) zᵀ / (‖x_0 − x_1‖² ‖z‖²)
        let data = SvmData {
            n: 1,
            t: 2,
            d: 2,
            x: vec![1.0, 2.0, -1.0, 0.5],
            z: vec![1.0, 2.0],
            y: vec![1.0],
            group: 1,
        };
        let w = w_mm(&data, &[0]).unwrap();
        let (dx, z) = ([2.0, 1.5], [1.0, 2.0]);
        let s = (4.0 + 2.25) * 5.0;
        for r in 0..2 {
            for c in 0..2 {
                assert!((w[r * 2 + c] - dx[r] * z[c] / s).abs() < 1e-8);
            }
        }
    }

    #[test]
    fn singular_values_of_a_rotation_times_diagonal() {
        // W = R diag(3, 1), R a rotation: σ = (3, 1)
        let (c, s) = (0.6f64, 0.8f64);
        let w = [3.0 * c, -s, 3.0 * s, c];
        let sv = singular_values(&w, 2);
        assert!(
            (sv[0] - 3.0).abs() < 1e-12 && (sv[1] - 1.0).abs() < 1e-12,
            "{sv:?}"
        );
    }

    #[test]
    fn contradictory_constraints_are_infeasible() {
        let a = vec![1.0, 0.0];
        let b = vec![-1.0, 0.0];
        assert!(matches!(
            min_norm(&[a, b], 2),
            Err(MarginError::Infeasible(_))
        ));
    }
}
