//! Affine map `y = x · Wᵀ + b` over rows, with `W` stored `[out, in]` like PyTorch.
//!
//! `x` is `[N, in]` (N rows: positions of one sequence), `W` is `[out, in]`, the
//! optional bias `b` is `[out]`, and `y` is `[N, out]`. The backward accumulates
//! `dW += dyᵀ · x`, `db += Σ_rows dy` and, when asked, `dx += dy · W`.
//!
//! ```
//! use mechlab_engine::layers::linear;
//! let w = [1.0f64, 2.0, 0.0, -1.0]; // out=2, in=2
//! let mut y = [0.0f64; 2];
//! linear::forward(&mut y, &[3.0, 4.0], &w, Some(&[0.5, 0.0]), 1, 2, 2);
//! assert_eq!(y, [11.5, -4.0]);
//! ```

use crate::matmul::{matmul, Op};
use crate::Float;

/// `y = x · Wᵀ (+ b)`, overwriting `y`.
pub fn forward<T: Float>(
    y: &mut [T],
    x: &[T],
    w: &[T],
    b: Option<&[T]>,
    n: usize,
    d_in: usize,
    d_out: usize,
) {
    // x: [N, in], w: [out, in], b: [out] -> y: [N, out]
    assert_eq!(x.len(), n * d_in, "linear: x is not [N, in]");
    assert_eq!(w.len(), d_out * d_in, "linear: W is not [out, in]");
    assert_eq!(y.len(), n * d_out, "linear: y is not [N, out]");
    matmul(y, x, Op::N, w, Op::T, n, d_in, d_out, false);
    if let Some(b) = b {
        assert_eq!(b.len(), d_out, "linear: b is not [out]");
        for row in y.chunks_exact_mut(d_out.max(1)) {
            for (yi, &bi) in row.iter_mut().zip(b) {
                *yi += bi;
            }
        }
    }
}

/// Accumulates `dx += dy · W` (if `dx` is given), `dw += dyᵀ · x` and `db += Σ dy`
/// (if `db` is given).
#[allow(clippy::too_many_arguments)]
pub fn backward<T: Float>(
    dx: Option<&mut [T]>,
    dw: &mut [T],
    db: Option<&mut [T]>,
    dy: &[T],
    x: &[T],
    w: &[T],
    n: usize,
    d_in: usize,
    d_out: usize,
) {
    // dy: [N, out], x: [N, in], w: [out, in] -> dx: [N, in] (+=), dw: [out, in] (+=), db: [out] (+=)
    assert_eq!(w.len(), d_out * d_in, "linear: W is not [out, in]");
    if let Some(dx) = dx {
        backward_input(dx, dy, w, n, d_in, d_out);
    }
    param_products(Some(dw), db, dy, x, n, d_in, d_out, true);
}

/// The parameter gradients written, `dw = dyᵀ · x` and `db = Σ dy` (each if
/// given): [`backward`]'s bits where they held zeros (every sum starts from
/// `+0` either way), without the pass that zeroes them first. A training step
/// forms each weight's gradient once per chunk, so it writes rather than adds.
#[allow(clippy::too_many_arguments)]
pub fn backward_params_set<T: Float>(
    dw: Option<&mut [T]>,
    db: Option<&mut [T]>,
    dy: &[T],
    x: &[T],
    n: usize,
    d_in: usize,
    d_out: usize,
) {
    // dy: [N, out], x: [N, in] -> dw: [out, in], db: [out]
    param_products(dw, db, dy, x, n, d_in, d_out, false);
}

/// `dw (+)= dyᵀ · x` and `db (+)= Σ_rows dy` (each if given) after checking
/// the shapes: added into what they hold (`accumulate`) or summed from `+0`.
#[allow(clippy::too_many_arguments)]
fn param_products<T: Float>(
    dw: Option<&mut [T]>,
    db: Option<&mut [T]>,
    dy: &[T],
    x: &[T],
    n: usize,
    d_in: usize,
    d_out: usize,
    accumulate: bool,
) {
    assert_eq!(dy.len(), n * d_out, "linear: dy is not [N, out]");
    assert_eq!(x.len(), n * d_in, "linear: x is not [N, in]");
    if let Some(dw) = dw {
        assert_eq!(dw.len(), d_out * d_in, "linear: dW is not [out, in]");
        matmul(dw, dy, Op::T, x, Op::N, d_out, n, d_in, accumulate);
    }
    let Some(db) = db else {
        return;
    };
    // db: [out], row by row in order
    assert_eq!(db.len(), d_out, "linear: db is not [out]");
    if !accumulate {
        db.iter_mut().for_each(|g| *g = T::zero());
    }
    for row in dy.chunks_exact(d_out.max(1)) {
        for (g, &v) in db.iter_mut().zip(row) {
            *g += v;
        }
    }
}

/// The input gradient alone, `dx += dy · W`: the backward of a layer whose
/// weights are frozen (no `dW` is formed).
pub fn backward_input<T: Float>(
    dx: &mut [T],
    dy: &[T],
    w: &[T],
    n: usize,
    d_in: usize,
    d_out: usize,
) {
    // dy: [N, out], w: [out, in] -> dx: [N, in] (+=)
    input_product(dx, dy, w, n, d_in, d_out, true);
}

/// The input gradient written, `dx = dy · W`: [`backward_input`]'s bits where
/// `dx` held zeros (the product's sums start from `+0` either way), without
/// the pass that zeroes `dx` first.
pub fn backward_input_set<T: Float>(
    dx: &mut [T],
    dy: &[T],
    w: &[T],
    n: usize,
    d_in: usize,
    d_out: usize,
) {
    // dy: [N, out], w: [out, in] -> dx: [N, in]
    input_product(dx, dy, w, n, d_in, d_out, false);
}

/// `dx (+)= dy · W` after checking the shapes.
fn input_product<T: Float>(
    dx: &mut [T],
    dy: &[T],
    w: &[T],
    n: usize,
    d_in: usize,
    d_out: usize,
    accumulate: bool,
) {
    assert_eq!(dy.len(), n * d_out, "linear: dy is not [N, out]");
    assert_eq!(w.len(), d_out * d_in, "linear: W is not [out, in]");
    assert_eq!(dx.len(), n * d_in, "linear: dx is not [N, in]");
    matmul(dx, dy, Op::N, w, Op::N, n, d_out, d_in, accumulate);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;
    use crate::Float;

    #[test]
    fn forward_hand_case() {
        // x = [[1, 2, 3], [0, 1, 0]], W = [[1, 0, 1], [0, 2, 0]], b = [1, -1]
        let x = [1.0, 2.0, 3.0, 0.0, 1.0, 0.0];
        let w = [1.0, 0.0, 1.0, 0.0, 2.0, 0.0];
        let mut y = [0.0; 4];
        forward(&mut y, &x, &w, Some(&[1.0, -1.0]), 2, 3, 2);
        assert_eq!(y, [5.0, 3.0, 1.0, 1.0]);
        forward(&mut y, &x, &w, None, 2, 3, 2);
        assert_eq!(y, [4.0, 4.0, 0.0, 2.0]);
    }

    #[test]
    fn input_gradient_set_is_the_added_into_zeros_bits() {
        // f32 at the GPT step's shapes (the `gemm` path) and a small one (the
        // direct kernel's or the in-order sum's), over whatever dx held before
        for (n, di, dout) in [(512, 128, 512), (64, 32, 48), (3, 5, 2)] {
            let mut r = rng(7);
            let f = |v: Vec<f64>| v.into_iter().map(|x| x as f32).collect::<Vec<f32>>();
            let dy = f(uniform(&mut r, n * dout));
            let w = f(uniform(&mut r, dout * di));
            let mut added = vec![0.0f32; n * di];
            backward_input(&mut added, &dy, &w, n, di, dout);
            let mut set = f(uniform(&mut r, n * di));
            backward_input_set(&mut set, &dy, &w, n, di, dout);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&set), bits(&added), "{n}x{di}x{dout}");
        }
    }

    #[test]
    fn parameter_gradients_set_are_the_added_into_zeros_bits() {
        // f32 at the GPT step's shapes and small ones, over whatever dW and db
        // held, with a column of −0 (whose sum from +0 is +0) and no rows at all
        for (n, di, dout) in [(512, 128, 512), (64, 32, 48), (3, 5, 2), (0, 4, 3)] {
            let mut r = rng(8);
            let f = |v: Vec<f64>| v.into_iter().map(|x| x as f32).collect::<Vec<f32>>();
            let mut dy = f(uniform(&mut r, n * dout));
            dy.iter_mut().step_by(dout).for_each(|v| *v = -0.0);
            let (x, w) = (f(uniform(&mut r, n * di)), f(uniform(&mut r, dout * di)));
            let (mut dw_add, mut db_add) = (vec![0.0f32; dout * di], vec![0.0f32; dout]);
            backward(
                None,
                &mut dw_add,
                Some(&mut db_add),
                &dy,
                &x,
                &w,
                n,
                di,
                dout,
            );
            let (mut dw, mut db) = (f(uniform(&mut r, dout * di)), f(uniform(&mut r, dout)));
            backward_params_set(Some(&mut dw), Some(&mut db), &dy, &x, n, di, dout);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&dw), bits(&dw_add), "dW {n}x{di}x{dout}");
            assert_eq!(bits(&db), bits(&db_add), "db {n}x{di}x{dout}");
        }
    }

    #[test]
    fn gradcheck_x_w_b() {
        let (n, di, dout) = (4, 3, 5);
        let mut r = rng(2);
        let x = uniform(&mut r, n * di);
        let w = uniform(&mut r, dout * di);
        let b = uniform(&mut r, dout);
        let seed = uniform(&mut r, n * dout); // L = <seed, y>, so dy = seed
        let run = |x: &[f64], w: &[f64], b: &[f64]| {
            let mut y = vec![0.0; n * dout];
            forward(&mut y, x, w, Some(b), n, di, dout);
            dot(&y, &seed)
        };
        let (dx0, dw0, db0) = (
            uniform(&mut r, n * di),
            uniform(&mut r, dout * di),
            uniform(&mut r, dout),
        );
        let (mut dx, mut dw, mut db) = (dx0.clone(), dw0.clone(), db0.clone());
        backward(
            Some(&mut dx),
            &mut dw,
            Some(&mut db),
            &seed,
            &x,
            &w,
            n,
            di,
            dout,
        );
        assert_grad(
            "linear dx",
            &mut |v: &[f64]| run(v, &w, &b),
            &x,
            &accumulated(&dx, &dx0),
        );
        assert_grad(
            "linear dW",
            &mut |v: &[f64]| run(&x, v, &b),
            &w,
            &accumulated(&dw, &dw0),
        );
        assert_grad(
            "linear db",
            &mut |v: &[f64]| run(&x, &w, v),
            &b,
            &accumulated(&db, &db0),
        );
    }

    fn run_generic<T: Float>(
        x: &[f64],
        w: &[f64],
        dy: &[f64],
        n: usize,
        di: usize,
        dout: usize,
    ) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        let (x, w, dy) = (cast::<T>(x), cast::<T>(w), cast::<T>(dy));
        let mut y = vec![T::zero(); n * dout];
        forward(&mut y, &x, &w, None, n, di, dout);
        let mut dx = vec![T::zero(); n * di];
        let mut dw = vec![T::zero(); dout * di];
        backward(Some(&mut dx), &mut dw, None, &dy, &x, &w, n, di, dout);
        (to_f64(&y), to_f64(&dx), to_f64(&dw))
    }

    #[test]
    fn f32_matches_f64() {
        let (n, di, dout) = (6, 8, 7);
        let mut r = rng(3);
        let (x, w, dy) = (
            uniform(&mut r, n * di),
            uniform(&mut r, dout * di),
            uniform(&mut r, n * dout),
        );
        let a = run_generic::<f32>(&x, &w, &dy, n, di, dout);
        let b = run_generic::<f64>(&x, &w, &dy, n, di, dout);
        assert_close("y", &a.0, &b.0, 1e-5);
        assert_close("dx", &a.1, &b.1, 1e-5);
        assert_close("dW", &a.2, &b.2, 1e-5);
    }
}
