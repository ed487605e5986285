//! The one hard-margin solver: `min ½‖x‖²` subject to `⟨a_r, x⟩ ≥ 1` for every
//! constraint row `a_r`, the quadratic programme behind every max-margin
//! prediction in mechlab (token selection's ⟨cls⟩ direction `p`, the
//! attention-SVM's `W^mm`).
//!
//! Solved by the interior-point solver `clarabel` (a maintained conic solver; an
//! SVM dual written here would be ours to get right at 1e-10), with gap and
//! feasibility tolerances of 1e-10 so that margins can be compared with 1 at
//! 1e-5. The rows are passed dense and stored column by column, zeros dropped.
//!
//! ```
//! use mechlab::max_margin::min_norm;
//! // x₀ ≥ 1 and x₁ ≥ 1: the smallest such x is (1, 1).
//! let x = min_norm(&[vec![1.0, 0.0], vec![0.0, 1.0]], 2).unwrap();
//! assert!((x[0] - 1.0).abs() < 1e-8 && (x[1] - 1.0).abs() < 1e-8);
//! ```

use clarabel::algebra::CscMatrix;
use clarabel::solver::{
    DefaultSettingsBuilder, DefaultSolver, IPSolver, NonnegativeConeT, SolverStatus,
};
use thiserror::Error;

/// Why no max-margin solution came back.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum MarginError {
    #[error("the problem has no constraints")]
    NoConstraints,
    #[error("clarabel: {0}")]
    Solver(String),
    /// No `x` meets every constraint (the solver's status).
    #[error("no solution meets every constraint ({0})")]
    Infeasible(String),
}

/// `min ½‖x‖²` s.t. `⟨a_r, x⟩ ≥ 1` for each row `a_r` (all of length `dim`).
pub fn min_norm(rows: &[Vec<f64>], dim: usize) -> Result<Vec<f64>, MarginError> {
    let m = rows.len();
    if m == 0 {
        return Err(MarginError::NoConstraints);
    }
    // Clarabel form: A x + s = b, s ≥ 0, with A = −a, b = −1 (dense columns).
    let (mut colptr, mut rowval, mut nzval) = (vec![0], Vec::new(), Vec::new());
    for j in 0..dim {
        for (r, a) in rows.iter().enumerate() {
            if a[j] != 0.0 {
                rowval.push(r);
                nzval.push(-a[j]);
            }
        }
        colptr.push(rowval.len());
    }
    let a = CscMatrix::new(m, dim, colptr, rowval, nzval);
    let p = CscMatrix::identity(dim);
    let settings = DefaultSettingsBuilder::default()
        .verbose(false)
        .tol_gap_abs(1e-10)
        .tol_gap_rel(1e-10)
        .tol_feas(1e-10)
        .build()
        .map_err(|e| MarginError::Solver(format!("{e:?}")))?;
    let cones = [NonnegativeConeT(m)];
    let mut solver = DefaultSolver::new(&p, &vec![0.0; dim], &a, &vec![-1.0; m], &cones, settings)
        .map_err(|e| MarginError::Solver(format!("{e:?}")))?;
    solver.solve();
    match solver.solution.status {
        SolverStatus::Solved | SolverStatus::AlmostSolved => Ok(solver.solution.x.clone()),
        st => Err(MarginError::Infeasible(format!("{st:?}"))),
    }
}

/// The smallest `⟨a_r, x⟩` over the rows (1 at the solution of [`min_norm`]).
pub fn margin(rows: &[Vec<f64>], x: &[f64]) -> f64 {
    rows.iter()
        .map(|a| a.iter().zip(x).map(|(p, q)| p * q).sum::<f64>())
        .fold(f64::INFINITY, f64::min)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn infeasible_and_empty_problems_are_errors() {
        assert_eq!(min_norm(&[], 2), Err(MarginError::NoConstraints));
        // x₀ ≥ 1 and −x₀ ≥ 1 cannot both hold.
        let r = min_norm(&[vec![1.0], vec![-1.0]], 1);
        assert!(matches!(r, Err(MarginError::Infeasible(_))), "{r:?}");
    }

    #[test]
    fn the_solution_sits_on_its_binding_constraint_only() {
        // x₀ + x₁ ≥ 1 binds at (½, ½); 4 x₀ ≥ 1 holds there with room (2).
        let rows = vec![vec![1.0, 1.0], vec![4.0, 0.0]];
        let x = min_norm(&rows, 2).unwrap();
        assert!(
            (x[0] - 0.5).abs() < 1e-7 && (x[1] - 0.5).abs() < 1e-7,
            "{x:?}"
        );
        assert!((margin(&rows, &x) - 1.0).abs() < 1e-7);
        assert!((margin(&rows[1..], &x) - 2.0).abs() < 1e-6);
    }
}
