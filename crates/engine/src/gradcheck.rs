//! Finite-difference gradient checks in `f64`.
//!
//! Every backward in mechlab is tested by comparing its analytic gradient with a
//! numerical one. [`check`] takes a closure that computes a scalar loss from a flat
//! parameter vector, the point `x`, and the analytic gradient at `x`; it returns the
//! largest relative error over all components (defined at [`GradCheck`]) and where
//! it occurred. The numerical derivative is the fourth-order central difference
//!
//! `n_i = (−L(x + 2h e_i) + 8 L(x + h e_i) − 8 L(x − h e_i) + L(x − 2h e_i)) / 12h`
//!
//! whose truncation error is `O(h⁴)`, so with `h =` [`DEFAULT_H`] both truncation
//! and rounding error sit far below the `1e-6` tolerance the tests use. (It needs
//! four loss evaluations per component; keep checked problems small.)
//!
//! ```
//! use mechlab_engine::gradcheck::{check, DEFAULT_H};
//! // L(x) = Σ x_i³, ∂L/∂x_i = 3 x_i²
//! let x = [0.5, -1.0, 2.0];
//! let good: Vec<f64> = x.iter().map(|v| 3.0 * v * v).collect();
//! let mut loss = |x: &[f64]| x.iter().map(|v| v * v * v).sum::<f64>();
//! check(&mut loss, &x, &good, DEFAULT_H).assert_below(1e-6, "cube");
//! // a gradient that is wrong in one component is caught, and located
//! let bad = [good[0], good[1] * 1.01, good[2]];
//! let r = check(&mut loss, &x, &bad, DEFAULT_H);
//! assert!(r.max_rel_err > 1e-3 && r.worst_index == 1);
//! ```

use crate::Parameters;

/// Step for [`check`] that suits losses of order one in `f64`.
pub const DEFAULT_H: f64 = 1e-4;

/// Components smaller than this fraction of the largest gradient component are
/// measured against that fraction instead of their own size (see [`GradCheck`]).
pub const REL_FLOOR: f64 = 1e-3;

/// Absolute denominator floor, so an all-zero gradient compares as `0 / 1e-12`.
pub const ABS_FLOOR: f64 = 1e-12;

/// The result of a gradient check.
///
/// With analytic gradient `a`, numerical gradient `n` and
/// `G = max_j max(|a_j|, |n_j|)`, the error of component `i` is
///
/// `err_i = |a_i − n_i| / max(|a_i|, |n_i|, REL_FLOOR · G, ABS_FLOOR)`
///
/// i.e. relative error for every component at least `1e-3` of the largest, and
/// error relative to `1e-3 · G` for smaller ones, whose own relative error would
/// be dominated by finite-difference rounding. `max_rel_err = max_i err_i`.
#[derive(Clone, Debug, PartialEq)]
pub struct GradCheck {
    pub max_rel_err: f64,
    /// Index of the component with the largest error (0 for an empty vector).
    pub worst_index: usize,
    /// Analytic and numerical derivative at `worst_index`.
    pub analytic: f64,
    pub numeric: f64,
    /// `G` above: the scale of the gradient.
    pub scale: f64,
}

impl GradCheck {
    /// Panics with a readable report if `max_rel_err >= tol`.
    #[track_caller]
    pub fn assert_below(&self, tol: f64, what: &str) {
        assert!(
            self.max_rel_err < tol,
            "gradcheck {what}: max rel err {:.3e} >= {tol:.1e} at index {} \
             (analytic {:.9e}, numeric {:.9e}, scale {:.3e})",
            self.max_rel_err,
            self.worst_index,
            self.analytic,
            self.numeric,
            self.scale
        );
    }
}

/// Numerical gradient of `f` at `x` by the fourth-order central difference with
/// step `h` (see the module doc); `f` sees a perturbed copy of `x`.
pub fn numeric_grad<F: FnMut(&[f64]) -> f64>(f: &mut F, x: &[f64], h: f64) -> Vec<f64> {
    let mut xp = x.to_vec();
    let mut out = vec![0.0; x.len()];
    for i in 0..x.len() {
        let x0 = x[i];
        let mut at = |d: f64| {
            xp[i] = x0 + d;
            f(&xp)
        };
        let (p2, p1, m1, m2) = (at(2.0 * h), at(h), at(-h), at(-2.0 * h));
        xp[i] = x0;
        out[i] = (-p2 + 8.0 * p1 - 8.0 * m1 + m2) / (12.0 * h);
    }
    out
}

/// Compares `analytic` with the numerical gradient of `f` at `x` (see [`GradCheck`]).
///
/// Panics if `analytic.len() != x.len()`.
pub fn check<F: FnMut(&[f64]) -> f64>(f: &mut F, x: &[f64], analytic: &[f64], h: f64) -> GradCheck {
    assert_eq!(
        x.len(),
        analytic.len(),
        "gradcheck: x has {} components, analytic gradient {}",
        x.len(),
        analytic.len()
    );
    let numeric = numeric_grad(f, x, h);
    compare(analytic, &numeric)
}

/// The error report of [`check`] for two given gradients.
pub fn compare(analytic: &[f64], numeric: &[f64]) -> GradCheck {
    assert_eq!(analytic.len(), numeric.len());
    let scale = analytic
        .iter()
        .chain(numeric)
        .fold(0.0f64, |m, v| m.max(v.abs()));
    let mut out = GradCheck {
        max_rel_err: 0.0,
        worst_index: 0,
        analytic: analytic.first().copied().unwrap_or(0.0),
        numeric: numeric.first().copied().unwrap_or(0.0),
        scale,
    };
    for (i, (&a, &n)) in analytic.iter().zip(numeric).enumerate() {
        let denom = a.abs().max(n.abs()).max(REL_FLOOR * scale).max(ABS_FLOOR);
        let err = (a - n).abs() / denom;
        // A NaN error (NaN in either gradient) is the worst possible and sticks.
        let worse = err.is_nan() || (!out.max_rel_err.is_nan() && err > out.max_rel_err);
        if worse {
            out.max_rel_err = err;
            out.worst_index = i;
            out.analytic = a;
            out.numeric = n;
        }
    }
    out
}

/// Checks every parameter of a model, one [`GradCheck`] per parameter in visit order.
///
/// `loss(model)` computes the loss at the model's current values. `grads(model)`
/// runs forward and backward so that the parameters' gradient buffers hold the
/// analytic gradient (they are zeroed before it is called). Each parameter is
/// then perturbed in place and restored; the model's values are unchanged after.
///
/// ```
/// use mechlab_engine::gradcheck::{check_params, DEFAULT_H};
/// use mechlab_engine::{param, Param, Parameters};
/// struct Quad { w: Param<f64> }
/// impl Parameters<f64> for Quad {
///     mechlab_engine::parameters!(f64; w);
/// }
/// let mut m = Quad { w: param("w", "all", &[2], vec![1.0, -2.0]) };
/// // L = Σ w², dL/dw = 2w
/// let loss = |m: &Quad| m.w.value().iter().map(|v| v * v).sum::<f64>();
/// let grads = |m: &mut Quad| {
///     let (v, g) = m.w.value_and_grad_mut();
///     g.iter_mut().zip(v.iter()).for_each(|(g, v)| *g += 2.0 * v);
/// };
/// for (name, r) in check_params(&mut m, loss, grads, DEFAULT_H) {
///     r.assert_below(1e-6, &name);
/// }
/// ```
pub fn check_params<M, L, G>(
    model: &mut M,
    mut loss: L,
    mut grads: G,
    h: f64,
) -> Vec<(String, GradCheck)>
where
    M: Parameters<f64>,
    L: FnMut(&M) -> f64,
    G: FnMut(&mut M),
{
    model.zero_grad();
    grads(model);
    let mut analytic: Vec<(String, Vec<f64>, Vec<f64>)> = Vec::new();
    model.visit(&mut |p| {
        analytic.push((p.name().to_string(), p.value().to_vec(), p.grad().to_vec()))
    });
    let set = |model: &mut M, k: usize, x: &[f64]| {
        let mut idx = 0;
        model.visit_mut(&mut |p| {
            if idx == k {
                p.value_mut().copy_from_slice(x);
            }
            idx += 1;
        });
    };
    let mut out = Vec::with_capacity(analytic.len());
    for (k, (name, x0, a)) in analytic.into_iter().enumerate() {
        let mut f = |x: &[f64]| {
            set(model, k, x);
            loss(model)
        };
        let r = check(&mut f, &x0, &a, h);
        set(model, k, &x0);
        out.push((name, r));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loss(x: &[f64]) -> f64 {
        // a smooth coupled function: L = sin(x0 x1) + x2² exp(x0)
        (x[0] * x[1]).sin() + x[2] * x[2] * x[0].exp()
    }
    fn grad(x: &[f64]) -> Vec<f64> {
        let c = (x[0] * x[1]).cos();
        vec![
            c * x[1] + x[2] * x[2] * x[0].exp(),
            c * x[0],
            2.0 * x[2] * x[0].exp(),
        ]
    }

    #[test]
    fn exact_gradient_passes_tightly() {
        let x = [0.3, -1.2, 0.7];
        let r = check(&mut loss, &x, &grad(&x), DEFAULT_H);
        assert!(r.max_rel_err < 1e-9, "{r:?}");
    }

    #[test]
    fn wrong_gradients_are_caught() {
        let x = [0.3, -1.2, 0.7];
        let g = grad(&x);
        for i in 0..3 {
            let mut bad = g.clone();
            bad[i] *= 1.0 + 1e-4;
            let r = check(&mut loss, &x, &bad, DEFAULT_H);
            assert!(r.max_rel_err > 1e-5, "component {i} not caught: {r:?}");
            assert_eq!(r.worst_index, i);
        }
        // sign error and a missing component
        let r = check(&mut loss, &x, &[g[0], -g[1], g[2]], DEFAULT_H);
        assert!(r.max_rel_err > 1.0);
        let r = check(&mut loss, &x, &[g[0], g[1], 0.0], DEFAULT_H);
        assert!((r.max_rel_err - 1.0).abs() < 1e-9);
        // NaN in the analytic gradient is reported (and fails any tolerance)
        let r = check(&mut loss, &x, &[g[0], f64::NAN, g[2]], DEFAULT_H);
        assert!(r.max_rel_err.is_nan() && r.worst_index == 1);
    }

    #[test]
    #[should_panic(expected = "gradcheck demo")]
    fn assert_below_panics_on_failure() {
        let x = [0.3, -1.2, 0.7];
        let mut g = grad(&x);
        g[2] += 0.1;
        check(&mut loss, &x, &g, DEFAULT_H).assert_below(1e-6, "demo");
    }

    #[test]
    fn tiny_components_are_measured_against_the_gradient_scale() {
        // L = x0 + 1e-9 x1: a 1e-15 absolute error on the tiny component is fine,
        // a 1e-3 relative error on the large one is not.
        let mut f = |x: &[f64]| x[0] + 1e-9 * x[1];
        let r = check(&mut f, &[1.0, 1.0], &[1.0, 1e-9 + 1e-15], DEFAULT_H);
        assert!(r.max_rel_err < 1e-9, "{r:?}");
        let r = check(&mut f, &[1.0, 1.0], &[1.001, 1e-9], DEFAULT_H);
        assert!(r.max_rel_err > 1e-4);
        // an all-zero gradient of a constant function checks exactly
        let mut c = |_: &[f64]| 3.0;
        assert_eq!(
            check(&mut c, &[1.0, 2.0], &[0.0, 0.0], DEFAULT_H).max_rel_err,
            0.0
        );
    }

    #[test]
    fn check_params_reports_each_parameter_and_restores_values() {
        use crate::layers::linear;
        use crate::{param, Param};
        struct Lin {
            w: Param<f64>,
            b: Param<f64>,
        }
        impl Parameters<f64> for Lin {
            fn visit(&self, f: &mut dyn FnMut(&Param<f64>)) {
                f(&self.w);
                f(&self.b);
            }
            fn visit_mut(&mut self, f: &mut dyn FnMut(&mut Param<f64>)) {
                f(&mut self.w);
                f(&mut self.b);
            }
        }
        let x = [0.5, -1.0, 2.0, 0.25, 1.5, -0.75]; // [N=2, in=3]
        let w0: Vec<f64> = (0..6).map(|i| (i as f64 * 0.9).sin()).collect();
        let mut m = Lin {
            w: param("w", "g", &[2, 3], w0.clone()),
            b: param("b", "g", &[2], vec![0.1, -0.2]),
        };
        // L = Σ y², dy = 2y
        let fwd = |m: &Lin| {
            let mut y = [0.0; 4];
            linear::forward(&mut y, &x, m.w.value(), Some(m.b.value()), 2, 3, 2);
            y
        };
        let loss = |m: &Lin| fwd(m).iter().map(|v| v * v).sum::<f64>();
        let grads = |bug: f64| {
            move |m: &mut Lin| {
                let dy = fwd(m).map(|v| 2.0 * v);
                let w = m.w.value().to_vec();
                let mut db = [0.0; 2];
                linear::backward(None, m.w.grad_mut(), Some(&mut db), &dy, &x, &w, 2, 3, 2);
                m.b.grad_mut()
                    .iter_mut()
                    .zip(db)
                    .for_each(|(g, d)| *g += d * bug);
            }
        };
        let ok = check_params(&mut m, loss, grads(1.0), DEFAULT_H);
        assert_eq!(
            ok.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
            ["w", "b"]
        );
        ok.iter().for_each(|(n, r)| r.assert_below(1e-9, n));
        assert_eq!(m.w.value(), &w0[..]);
        let bad = check_params(&mut m, loss, grads(1.001), DEFAULT_H);
        assert!(bad[0].1.max_rel_err < 1e-9 && bad[1].1.max_rel_err > 1e-4);
    }
}
