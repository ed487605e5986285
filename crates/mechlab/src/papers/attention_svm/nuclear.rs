//! The nuclear-norm attention SVM, the limit the papers give for `W = K Qᵀ`:
//!
//! `W^mm_* = argmin ‖W‖_*  s.t.  ⟨A_(i,t), W⟩ ≥ 1` (the constraints of [`super::svm`]).
//!
//! With `‖W‖_* = min { (tr P + tr R) / 2 : [[P, W], [Wᵀ, R]] ⪰ 0 }` this is a
//! semidefinite programme in the symmetric `2d × 2d` block matrix
//! `M = [[P, W], [Wᵀ, R]]`: minimise `tr M / 2` subject to `M ⪰ 0` and the linear
//! constraints on its off-diagonal block. It is solved by `totsu`, a pure-Rust
//! first-order conic solver (homogeneous self-dual embedding). Why not `clarabel`,
//! which solves the Frobenius SVM: its PSD cone needs the `sdp` feature and a system
//! BLAS/LAPACK, which would make a C library a requirement of `cargo build`. The cone
//! here is the product `PSD(2d) × R₊^m` (an implementation of `totsu`'s `Cone`
//! trait, a few lines), so the eigen-decompositions stay `2d × 2d` however many
//! constraints there are.
//!
//! ```
//! use mechlab::papers::attention_svm::nuclear::min_nuclear;
//! // W₁₁ ≥ 1, W₂₂ ≥ 1, W₁₂ ≥ 1: the nuclear-norm solution is the all-ones matrix
//! // (‖W‖_* ≥ tr W = 2, reached only by it), where the Frobenius one is [[1, 1], [0, 1]].
//! let e = |k: usize| { let mut a = vec![0.0; 4]; a[k] = 1.0; a };
//! let w = min_nuclear(&[e(0), e(3), e(1)], 2, 1e-8).unwrap();
//! for x in w { assert!((x - 1.0).abs() < 1e-5); }
//! ```

use crate::papers::attention_svm::data::SvmData;
use crate::papers::attention_svm::svm::{constraints, SvmError};
use totsu::prelude::{FloatGeneric, MatType, Solver};
use totsu::totsu_core::solver::{Cone, LinAlg};
use totsu::totsu_core::{ConePSD, ConeRPos};
use totsu::MatBuild;

type La = FloatGeneric<f64>;
type Sl = <La as LinAlg>::Sl;

/// Accuracy asked of the solver (its primal and dual residuals and gap).
pub const EPS: f64 = 1e-6;

/// `PSD(k) × R₊^m` on a slack vector laid out as `[vec(M), s]`.
struct PsdTimesNonneg<'a> {
    sk: usize,
    psd: ConePSD<'a, La>,
    nonneg: ConeRPos<La>,
}

impl Cone<La> for PsdTimesNonneg<'_> {
    fn proj(&mut self, dual_cone: bool, x: &mut Sl) -> Result<(), ()> {
        let (m, s) = x.split_at_mut(self.sk);
        self.psd.proj(dual_cone, m)?;
        self.nonneg.proj(dual_cone, s)
    }
    fn product_group<G: Fn(&mut Sl) + Copy>(&self, dp_tau: &mut Sl, group: G) {
        let (m, s) = dp_tau.split_at_mut(self.sk);
        self.psd.product_group(m, group);
        self.nonneg.product_group(s, group);
    }
}

/// `argmin ‖W‖_*` s.t. `⟨a_r, W⟩ ≥ 1` for each row `a_r` (`[d, d]` row-major), to
/// accuracy `eps`; `W` `[d, d]` row-major.
pub fn min_nuclear(rows: &[Vec<f64>], d: usize, eps: f64) -> Result<Vec<f64>, SvmError> {
    let m = rows.len();
    if m == 0 {
        return Err(SvmError::NoConstraints);
    }
    let k = 2 * d;
    // totsu's vec(M): the upper triangle column by column, off-diagonal entries × √2.
    let sk = k * (k + 1) / 2;
    let at = |p: usize, q: usize| q * (q + 1) / 2 + p; // p ≤ q
    let r2 = std::f64::consts::SQRT_2;
    // Variables x = vec(M). Conic form: A x + s = b with s ∈ PSD × R₊^m, so
    // s_M = vec(M) (A = −I, b = 0) and s_r = ⟨a_r, W⟩ − 1 (A = −a_r, b = −1),
    // where W_(r,c) = M_(r, d+c) = x[at(r, d + c)] / √2.
    let mut c = MatBuild::<La>::new(MatType::General(sk, 1));
    for p in 0..k {
        c[(at(p, p), 0)] = 0.5;
    }
    let mut a = MatBuild::<La>::new(MatType::General(sk + m, sk));
    let mut b = MatBuild::<La>::new(MatType::General(sk + m, 1));
    for j in 0..sk {
        a[(j, j)] = -1.0;
    }
    for (i, row) in rows.iter().enumerate() {
        b[(sk + i, 0)] = -1.0;
        for r in 0..d {
            for col in 0..d {
                a[(sk + i, at(r, d + col))] = -row[r * d + col] / r2;
            }
        }
    }
    let solver = Solver::<La>::new().par(|p| {
        p.max_iter = Some(2_000_000);
        p.eps_acc = eps;
    });
    let mut psd_work = vec![0.0; ConePSD::<La>::query_worklen(sk)];
    let cone = PsdTimesNonneg {
        sk,
        psd: ConePSD::new(&mut psd_work, solver.par.eps_zero),
        nonneg: ConeRPos::new(),
    };
    let mut work = vec![0.0; Solver::<La>::query_worklen((sk + m, sk))];
    let (x, _) = solver
        .solve((c.as_op(), a.as_op(), b.as_op(), cone, &mut work))
        .map_err(|e| match e {
            totsu::prelude::SolverError::Infeasible => SvmError::Infeasible(e.to_string()),
            e => SvmError::Solver(format!("totsu: {e}")),
        })?;
    let mut w = vec![0.0; d * d];
    for r in 0..d {
        for col in 0..d {
            w[r * d + col] = x[at(r, d + col)] / r2;
        }
    }
    Ok(w)
}

/// `W^mm_*` (`[d, d]` row-major) for the selection `sel`.
pub fn w_mm_nuclear(data: &SvmData, sel: &[usize]) -> Result<Vec<f64>, SvmError> {
    min_nuclear(&constraints(data, sel)?, data.d, EPS)
}

/// `‖W‖_*`, the sum of the singular values of a `[d, d]` matrix.
pub fn nuclear_norm(w: &[f64], d: usize) -> f64 {
    crate::papers::attention_svm::svm::singular_values(w, d)
        .iter()
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::max_margin::{margin, min_norm};
    use crate::papers::attention_svm::data::{generate, DataConfig};

    /// On random rank-one constraints the two SVMs differ, and each wins on its own
    /// norm: the nuclear solution is feasible with a smaller nuclear norm than the
    /// Frobenius solution (also feasible), and a larger Frobenius norm.
    #[test]
    fn beats_the_frobenius_solution_on_its_own_norm() {
        let (data, v) = generate(
            &DataConfig {
                n: 4,
                t: 4,
                d: 4,
                twins: 0,
            },
            5,
        );
        let sel = data.optimal(&v);
        let rows = constraints(&data, &sel).unwrap();
        let wn = min_nuclear(&rows, 4, 1e-8).unwrap();
        let wf = min_norm(&rows, 16).unwrap();
        assert!(margin(&rows, &wn) > 1.0 - 1e-5, "{}", margin(&rows, &wn));
        let fro = |w: &[f64]| w.iter().map(|x| x * x).sum::<f64>().sqrt();
        let (nn, nf) = (nuclear_norm(&wn, 4), nuclear_norm(&wf, 4));
        assert!(nn < nf - 1e-3, "nuclear {nn} vs Frobenius solution's {nf}");
        assert!(fro(&wn) > fro(&wf) + 1e-3);
    }

    /// One constraint `⟨a zᵀ, W⟩ ≥ 1`: both SVMs give `a zᵀ / (‖a‖² ‖z‖²)`.
    #[test]
    fn one_rank_one_constraint_has_the_closed_form() {
        let (a, z) = ([1.0, -2.0, 0.5], [0.3, 0.0, -1.0]);
        let row: Vec<f64> = (0..9).map(|j| a[j / 3] * z[j % 3]).collect();
        let s = a.iter().map(|x| x * x).sum::<f64>() * z.iter().map(|x| x * x).sum::<f64>();
        let w = min_nuclear(std::slice::from_ref(&row), 3, 1e-9).unwrap();
        for (x, r) in w.iter().zip(&row) {
            assert!((x - r / s).abs() < 1e-5, "{x} vs {}", r / s);
        }
    }

    #[test]
    fn contradictory_constraints_are_an_error() {
        let e = vec![1.0, 0.0, 0.0, 0.0];
        let neg: Vec<f64> = e.iter().map(|x| -x).collect();
        assert!(min_nuclear(&[e, neg], 2, 1e-8).is_err());
        assert_eq!(min_nuclear(&[], 2, 1e-8), Err(SvmError::NoConstraints));
    }
}
