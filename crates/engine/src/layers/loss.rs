//! Losses, each returning its value and writing its gradient.
//!
//! Unlike the layers, losses *write* (`=`) their gradient buffers: they start the
//! backward pass. Values are returned as `f64` (summed in `f64`), gradients are in
//! `T`. Losses over rows take a [`Reduction`]: `Mean` divides by the number of rows
//! that count (labelled rows, or elements for MSE), `Sum` does not; with nothing to
//! count both give loss `0` and a zero gradient.
//!
//! * [`logistic`]: binary logistic loss `log(1 + exp(−y f))`, `y ∈ {±1}`.
//! * [`cross_entropy_logits`]: `−log softmax(z)_y` over `V` classes, unlabelled
//!   rows (`None`) ignored; [`cross_entropy_rows`] is the same with each row's
//!   loss handed back (per-token losses).
//! * [`cross_entropy_probs`]: `−log max(p_y, PROB_FLOOR)` for rows that already are
//!   probabilities.
//! * [`cross_entropy_probs_as_logits`]: `−log softmax(p)_y`, cross-entropy applied
//!   to a probability vector as if it were logits (what one paper's official code
//!   computes; kept so its numbers can be reproduced).
//! * [`mse`]: `(ŷ − y)²`.
//!
//! ```
//! use mechlab_engine::layers::loss::{cross_entropy_logits, Reduction};
//! // row 0: logits [0, ln 3], label 1 → p = [1/4, 3/4]; row 1 unlabelled
//! let logits = [0.0f64, 3f64.ln(), 5.0, 5.0];
//! let mut d = [9.0f64; 4];
//! let out = cross_entropy_logits(&mut d, &logits, &[Some(1), None], 2, Reduction::Mean);
//! assert!((out.loss - (4.0f64 / 3.0).ln()).abs() < 1e-12 && out.count == 1);
//! assert!((d[0] - 0.25).abs() < 1e-12 && (d[1] + 0.25).abs() < 1e-12);
//! assert_eq!(&d[2..], &[0.0, 0.0]);
//! ```

use crate::layers::softmax::first_argmax;
use crate::Float;

/// How per-row losses combine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduction {
    /// Average over the rows (or elements) that count.
    Mean,
    /// Plain sum (for callers that normalise across a whole batch).
    Sum,
}

/// A reduced loss and how many rows (or elements) it counted.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LossOut {
    pub loss: f64,
    pub count: usize,
}

/// Probabilities below this are clamped in [`cross_entropy_probs`].
pub const PROB_FLOOR: f64 = 1e-12;

fn weight(red: Reduction, count: usize) -> f64 {
    match red {
        Reduction::Mean if count > 0 => 1.0 / count as f64,
        _ => 1.0,
    }
}

/// Binary logistic loss `ℓ = log(1 + exp(−y f))` and `dℓ/df = −y σ(−y f)`,
/// computed without overflow for any `f` (meant for `y ∈ {±1}`; any real `y` works
/// as a signed margin scale).
pub fn logistic<T: Float>(f: T, y: T) -> (T, T) {
    let u = -y * f;
    // softplus(u) = max(u, 0) + log(1 + exp(−|u|))
    let loss = u.max(T::zero()) + (-u.abs()).exp().ln_1p();
    let sig = if u >= T::zero() {
        T::one() / (T::one() + (-u).exp())
    } else {
        let e = u.exp();
        e / (T::one() + e)
    };
    (loss, -y * sig)
}

/// [`logistic`] over a batch of scores: writes `df`, returns the reduced loss.
pub fn logistic_batch<T: Float>(df: &mut [T], f: &[T], y: &[T], red: Reduction) -> LossOut {
    // f: [N], y: [N] -> df: [N]
    assert_eq!(f.len(), y.len(), "logistic: f and y differ in length");
    assert_eq!(df.len(), f.len(), "logistic: df is not [N]");
    let w = weight(red, f.len());
    let mut total = 0.0;
    for ((d, &fi), &yi) in df.iter_mut().zip(f).zip(y) {
        let (l, g) = logistic(fi, yi);
        total += l.as_f64();
        *d = g * T::of(w);
    }
    LossOut {
        loss: total * w,
        count: f.len(),
    }
}

/// Cross-entropy from logits `[R, V]` with one optional label per row; writes
/// `dlogits = w · (softmax(z) − onehot(y))` on labelled rows and `0` elsewhere,
/// `w` = 1/(labelled rows) for `Mean`. Panics on a label `≥ V`. Written so that it
/// keeps its relative accuracy when the label's probability rounds to 1 (the loss
/// through `ln_1p`, `dz_y` as `−w Σ_(j≠y) p_j`; tested against [`crate::F64x2`]).
pub fn cross_entropy_logits<T: Float>(
    dlogits: &mut [T],
    logits: &[T],
    labels: &[Option<usize>],
    v: usize,
    red: Reduction,
) -> LossOut {
    // logits: [R, V], labels: [R] -> dlogits: [R, V]
    let count = labels.iter().filter(|l| l.is_some()).count();
    let w = weight(red, count);
    let mut total = 0.0;
    cross_entropy_rows(dlogits, logits, labels, v, w, |_, loss| total += loss);
    LossOut {
        loss: total * w,
        count,
    }
}

/// [`cross_entropy_logits`] row by row: writes `dlogits = w · (softmax(z) −
/// onehot(y))` on labelled rows and `0` elsewhere, and hands each row's unweighted
/// loss to `each(row, loss)` in row order (`0` for an unlabelled row), for callers
/// that keep per-token losses. A row's sums are in-order chains (their order fixes
/// their bits), so four labelled rows' chains run side by side, each in its own
/// order, compiled for the widest SIMD level: the bits are those of one row at a
/// time, [`reference::cross_entropy_row`](super::reference::cross_entropy_row) (tested).
pub fn cross_entropy_rows<T: Float>(
    dlogits: &mut [T],
    logits: &[T],
    labels: &[Option<usize>],
    v: usize,
    w: f64,
    mut each: impl FnMut(usize, f64),
) {
    // logits: [R, V], labels: [R] -> dlogits: [R, V]
    let r = labels.len();
    assert_eq!(logits.len(), r * v, "cross_entropy: logits are not [R, V]");
    assert_eq!(
        dlogits.len(),
        r * v,
        "cross_entropy: dlogits are not [R, V]"
    );
    for y in labels.iter().flatten() {
        assert!(*y < v, "cross_entropy: label {y} outside {v} classes");
    }
    if v == 0 {
        labels.iter().enumerate().for_each(|(i, _)| each(i, 0.0));
        return;
    }
    let tw = T::of(w);
    crate::simd::widest(
        #[inline(always)]
        || {
            let mut i = 0;
            while i < r {
                let rows = i * v..(i + GROUP).min(r) * v;
                if i + GROUP <= r && labels[i..i + GROUP].iter().all(Option::is_some) {
                    let ys = std::array::from_fn(|k| labels[i + k].unwrap_or(0));
                    let losses =
                        ce_group::<T, GROUP>(&mut dlogits[rows.clone()], &logits[rows], ys, v, tw);
                    losses.iter().enumerate().for_each(|(k, &l)| each(i + k, l));
                    i += GROUP;
                    continue;
                }
                let row = i * v..(i + 1) * v;
                match labels[i] {
                    Some(y) => {
                        let [l] =
                            ce_group::<T, 1>(&mut dlogits[row.clone()], &logits[row], [y], v, tw);
                        each(i, l);
                    }
                    None => {
                        dlogits[row].iter_mut().for_each(|x| *x = T::zero());
                        each(i, 0.0);
                    }
                }
                i += 1;
            }
        },
    )
}

/// Labelled rows whose chains [`cross_entropy_rows`] runs side by side.
const GROUP: usize = 4;

/// One row's cross-entropy for each of `G` rows of `v ≥ 1` logits (labels `ys`):
/// writes the rows' `dlogits`, returns their losses.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // the chain loops read the G rows: that is the order
fn ce_group<T: Float, const G: usize>(
    d: &mut [T],
    z: &[T],
    ys: [usize; G],
    v: usize,
    tw: T,
) -> [f64; G] {
    // z: [G, V], ys: [G] -> d: [G, V]
    // The largest logit (the first if tied) contributes exp(0) = 1 to the sum.
    let top: [usize; G] = std::array::from_fn(|k| first_argmax(&z[k * v..(k + 1) * v]));
    let m: [T; G] = std::array::from_fn(|k| z[k * v + top[k]]);
    for k in 0..G {
        T::exp_shifted_into(&mut d[k * v..(k + 1) * v], &z[k * v..(k + 1) * v], m[k]);
    }
    // Σ_(j≠top) and, below, Σ_(j≠y): the c-th term of row k's chain is entry
    // c + (c ≥ skipped), so every row skips its own entry and keeps its order.
    let skip_sum = |d: &[T], skip: [usize; G], start: T| {
        let mut acc = [start; G];
        for c in 0..v - 1 {
            for k in 0..G {
                acc[k] += d[k * v + c + usize::from(c >= skip[k])];
            }
        }
        acc
    };
    let rest = skip_sum(d, top, T::zero());
    let mut losses = [0.0; G];
    for k in 0..G {
        let sum = T::one() + rest[k];
        // loss = log(1 + Σ_(j≠top) exp(z_j − m)) + m − z_y: `ln_1p` keeps a loss
        // near 0 that `ln(sum)` would round to exactly 0 once sum rounds to 1.
        losses[k] = (rest[k].ln_1p() + (m[k] - z[k * v + ys[k]])).as_f64();
        d[k * v..(k + 1) * v]
            .iter_mut()
            .for_each(|x| *x = *x / sum * tw);
    }
    // dz_y = w (p_y − 1) = −w Σ_(j≠y) p_j: the difference would cancel to noise
    // once p_y rounds to 1, the sum of the small terms does not. (`iter().sum()`
    // starts at −0, and so does this chain.)
    let others = skip_sum(d, ys, std::iter::empty().sum());
    for k in 0..G {
        d[k * v + ys[k]] = -others[k];
    }
    losses
}

/// Cross-entropy from probabilities `[R, V]`: per labelled row
/// `ℓ = −log max(p_y, PROB_FLOOR)`. The gradient is that of the clamped
/// function: `dp_y = −w / p_y` where `p_y > PROB_FLOOR` and `0` where the clamp
/// is active; every other entry of `dp` is `0`. Rows need not be normalised.
pub fn cross_entropy_probs<T: Float>(
    dp: &mut [T],
    p: &[T],
    labels: &[Option<usize>],
    v: usize,
    red: Reduction,
) -> LossOut {
    // p: [R, V], labels: [R] -> dp: [R, V]
    cross_entropy_probs_floor(dp, p, labels, v, red, PROB_FLOOR)
}

/// [`cross_entropy_probs`] with the clamp at `floor` instead of [`PROB_FLOOR`]
/// (a model whose config sets its own floor): `ℓ = −log max(p_y, floor)`.
pub fn cross_entropy_probs_floor<T: Float>(
    dp: &mut [T],
    p: &[T],
    labels: &[Option<usize>],
    v: usize,
    red: Reduction,
    floor: f64,
) -> LossOut {
    // p: [R, V], labels: [R] -> dp: [R, V]
    let r = labels.len();
    assert_eq!(p.len(), r * v, "cross_entropy_probs: p is not [R, V]");
    assert_eq!(dp.len(), r * v, "cross_entropy_probs: dp is not [R, V]");
    dp.iter_mut().for_each(|x| *x = T::zero());
    let count = labels.iter().filter(|l| l.is_some()).count();
    let w = weight(red, count);
    let floor = T::of(floor);
    let mut total = 0.0;
    for (i, y) in labels.iter().enumerate() {
        let Some(y) = *y else { continue };
        assert!(y < v, "cross_entropy_probs: label {y} outside {v} classes");
        let py = p[i * v + y];
        total -= py.max(floor).ln().as_f64();
        if py > floor {
            dp[i * v + y] = -T::of(w) / py;
        }
    }
    LossOut {
        loss: total * w,
        count,
    }
}

/// `−log softmax(p)_y`: [`cross_entropy_logits`] applied to probabilities as if
/// they were logits. Because `p ∈ [0, 1]`, the loss can never drop below
/// `log(1 + (V − 1)/e)` even for a perfect prediction; this reproduces the
/// objective of code that feeds a softmax output to a logits cross-entropy. The
/// gradient w.r.t. `p` is `w · (softmax(p) − onehot(y))`.
pub fn cross_entropy_probs_as_logits<T: Float>(
    dp: &mut [T],
    p: &[T],
    labels: &[Option<usize>],
    v: usize,
    red: Reduction,
) -> LossOut {
    // p: [R, V], labels: [R] -> dp: [R, V]
    cross_entropy_logits(dp, p, labels, v, red)
}

/// Squared error `Σ (ŷ − y)²` (over all elements; `/N` for `Mean`); writes
/// `dpred = w · 2 (ŷ − y)`.
pub fn mse<T: Float>(dpred: &mut [T], pred: &[T], target: &[T], red: Reduction) -> LossOut {
    // pred: [N], target: [N] -> dpred: [N]
    assert_eq!(
        pred.len(),
        target.len(),
        "mse: pred and target differ in length"
    );
    assert_eq!(dpred.len(), pred.len(), "mse: dpred is not [N]");
    let w = weight(red, pred.len());
    let mut total = 0.0;
    for ((d, &a), &b) in dpred.iter_mut().zip(pred).zip(target) {
        let e = a - b;
        total += (e * e).as_f64();
        *d = T::of(2.0 * w) * e;
    }
    LossOut {
        loss: total * w,
        count: pred.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;
    use Reduction::{Mean, Sum};

    #[test]
    fn logistic_values_and_stability() {
        let (l, g) = logistic(0.0f64, 1.0);
        assert!((l - 2f64.ln()).abs() < 1e-15 && (g + 0.5).abs() < 1e-15);
        let (l, g) = logistic(1000.0f64, -1.0);
        assert!((l - 1000.0).abs() < 1e-9 && (g - 1.0).abs() < 1e-15);
        let (l, g) = logistic(1000.0f64, 1.0);
        assert!((0.0..1e-300).contains(&l) && g.abs() < 1e-300);
        let (l, g) = logistic(-200.0f32, 1.0);
        assert!(l == 200.0 && g == -1.0);
    }

    #[test]
    fn gradcheck_logistic() {
        let mut r = rng(16);
        let f: Vec<f64> = uniform(&mut r, 8).iter().map(|v| 4.0 * v).collect();
        let y: Vec<f64> = (0..8)
            .map(|i| if i % 3 == 0 { -1.0 } else { 1.0 })
            .collect();
        for red in [Mean, Sum] {
            let mut df = vec![0.0; 8];
            logistic_batch(&mut df, &f, &y, red);
            let mut loss = |x: &[f64]| logistic_batch(&mut [0.0; 8], x, &y, red).loss;
            assert_grad("logistic", &mut loss, &f, &df);
        }
    }

    fn labels() -> Vec<Option<usize>> {
        vec![Some(2), None, Some(0), Some(4), None]
    }

    #[test]
    fn cross_entropy_logits_ignores_unlabelled_rows_and_large_logits() {
        let v = 5;
        let mut r = rng(17);
        let z = uniform(&mut r, 5 * v);
        let mut d = vec![0.0; 5 * v];
        let a = cross_entropy_logits(&mut d, &z, &labels(), v, Mean);
        assert_eq!(a.count, 3);
        // changing an unlabelled row changes nothing; shifting a row changes nothing
        let mut z2 = z.clone();
        z2[v..2 * v].iter_mut().for_each(|x| *x = 1e6);
        z2[..v].iter_mut().for_each(|x| *x += 800.0);
        let b = cross_entropy_logits(&mut vec![0.0; 5 * v], &z2, &labels(), v, Mean);
        assert!((a.loss - b.loss).abs() < 1e-9);
        assert!(d[v..2 * v].iter().all(|&x| x == 0.0));
        // Sum = count · Mean; nothing labelled: zero loss and gradient
        let s = cross_entropy_logits(&mut d, &z, &labels(), v, Sum);
        assert!((s.loss - 3.0 * a.loss).abs() < 1e-12);
        let n = cross_entropy_logits(&mut d, &z, &[None; 5], v, Mean);
        assert_eq!((n.loss, n.count), (0.0, 0));
        assert!(d.iter().all(|&x| x == 0.0));
    }

    #[test]
    fn gradcheck_cross_entropies() {
        let v = 5;
        let mut r = rng(18);
        let z: Vec<f64> = uniform(&mut r, 5 * v).iter().map(|x| 3.0 * x).collect();
        let p: Vec<f64> = uniform(&mut r, 5 * v)
            .iter()
            .map(|x| 0.55 + 0.45 * x)
            .collect();
        type Ce = fn(&mut [f64], &[f64], &[Option<usize>], usize, Reduction) -> LossOut;
        let fns: [(&str, Ce, &Vec<f64>); 3] = [
            ("ce logits", cross_entropy_logits, &z),
            ("ce probs", cross_entropy_probs, &p),
            ("ce probs as logits", cross_entropy_probs_as_logits, &p),
        ];
        for (name, f, x) in fns {
            for red in [Mean, Sum] {
                let mut d = vec![f64::NAN; 5 * v];
                f(&mut d, x, &labels(), v, red);
                let mut loss = |x: &[f64]| f(&mut vec![0.0; 5 * v], x, &labels(), v, red).loss;
                assert_grad(name, &mut loss, x, &d);
            }
        }
    }

    /// A row whose label's probability rounds to 1 in f64: loss and gradient keep
    /// their relative accuracy against the double-double (the textbook `p_y − 1`
    /// and `ln Σ exp` give exactly 0 for both).
    #[test]
    fn cross_entropy_logits_at_saturation() {
        use crate::precision::{assert_direction, MIN_COSINE};
        use crate::F64x2;
        for gap in [40.0, 200.0] {
            let z = [0.3, -1.2, gap, 0.8];
            let mut d = [0.0f64; 4];
            let out = cross_entropy_logits(&mut d, &z, &[Some(2)], 4, Reduction::Mean);
            let mut d2 = [F64x2::of(0.0); 4];
            let z2 = cast::<F64x2>(&z);
            let out2 = cross_entropy_logits(&mut d2, &z2, &[Some(2)], 4, Reduction::Mean);
            let want = to_f64(&d2);
            assert!(
                d[2] < 0.0 && out.loss > 0.0,
                "gap {gap}: {d:?} {}",
                out.loss
            );
            // z_j − m rounds at ulp(gap) in f64: exp of it is good to ~gap·1e-16.
            assert!(
                (out.loss - out2.loss).abs() <= 1e-12 * out2.loss,
                "gap {gap}: {} vs {}",
                out.loss,
                out2.loss
            );
            assert_direction(&format!("CE dz, gap {gap}"), &d, &want, MIN_COSINE);
            assert!((d[2] - want[2]).abs() <= 1e-12 * want[2].abs(), "gap {gap}");
        }
    }

    #[test]
    fn cross_entropy_probs_hand_case_and_floor() {
        let p = [0.2, 0.8, 0.0, 1.0];
        let mut d = [9.0; 4];
        let out = cross_entropy_probs(&mut d, &p, &[Some(0), Some(0)], 2, Sum);
        assert!((out.loss - (-(0.2f64).ln() - PROB_FLOOR.ln())).abs() < 1e-12);
        assert_eq!(d, [-5.0, 0.0, 0.0, 0.0]);
        // a floor of the caller's: clamped rows give −log floor and no gradient
        let out = cross_entropy_probs_floor(&mut d, &p, &[Some(0), Some(1)], 2, Mean, 0.5);
        assert!((out.loss - 0.5 * (-(0.5f64).ln() - 0.0)).abs() < 1e-15);
        assert_eq!(d, [0.0, 0.0, 0.0, -0.5]);
        let x = [0.7, 0.3, 0.9, 0.6];
        let mut d = [0.0; 4];
        cross_entropy_probs_floor(&mut d, &x, &[Some(1), Some(0)], 2, Sum, 1e-8);
        let mut loss = |x: &[f64]| {
            cross_entropy_probs_floor(&mut [0.0; 4], x, &[Some(1), Some(0)], 2, Sum, 1e-8).loss
        };
        assert_grad("ce probs floor", &mut loss, &x, &d);
    }

    #[test]
    fn probs_as_logits_is_softmax_of_probs() {
        let p = [1.0, 0.0, 0.0];
        let mut d = [0.0; 3];
        let out = cross_entropy_probs_as_logits(&mut d, &p, &[Some(0)], 3, Mean);
        let e = 1f64.exp();
        assert!((out.loss - (1.0 + 2.0 / e).ln()).abs() < 1e-12);
        assert!((d[0] - (e / (e + 2.0) - 1.0)).abs() < 1e-12);
    }

    #[test]
    fn mse_hand_case_and_gradcheck() {
        let mut d = [0.0; 2];
        let out = mse(&mut d, &[1.0, 3.0], &[0.0, 1.0], Mean);
        assert_eq!((out.loss, d), (2.5, [1.0, 2.0]));
        let mut r = rng(19);
        let (x, t) = (uniform(&mut r, 6), uniform(&mut r, 6));
        let mut d = vec![0.0; 6];
        mse(&mut d, &x, &t, Mean);
        assert_grad(
            "mse",
            &mut |x: &[f64]| mse(&mut [0.0; 6], x, &t, Mean).loss,
            &x,
            &d,
        );
    }

    #[test]
    fn f32_cross_entropy_matches_f64() {
        let v = 7;
        let z = uniform(&mut rng(20), 5 * v);
        let (mut d32, mut d64) = (vec![0.0f32; 5 * v], vec![0.0f64; 5 * v]);
        let a = cross_entropy_logits(&mut d32, &cast::<f32>(&z), &labels(), v, Mean);
        let b = cross_entropy_logits(&mut d64, &z, &labels(), v, Mean);
        assert!((a.loss - b.loss).abs() < 1e-6);
        assert_close("ce f32", &to_f64(&d32), &d64, 1e-6);
    }

    /// The grouped rows give each row's bits as the plain loop does, and hand
    /// the losses over in row order (unlabelled rows: 0 and a zero gradient):
    /// saturated rows, ties, labels on the top logit, rows past the lanes'
    /// threshold, one class, in f32 and f64.
    #[test]
    fn grouped_rows_give_the_plain_loops_bits() {
        fn check<T: Float>(z: &[T], labels: &[Option<usize>], v: usize) {
            let w = 0.37;
            let mut want = vec![T::zero(); z.len()];
            let mut want_loss = vec![0.0; labels.len()];
            for (i, y) in labels.iter().enumerate() {
                if let Some(y) = *y {
                    let row = i * v..(i + 1) * v;
                    want_loss[i] = crate::layers::reference::cross_entropy_row(
                        &mut want[row.clone()],
                        &z[row],
                        y,
                        T::of(w),
                    );
                }
            }
            let mut got = vec![T::of(9.0); z.len()];
            let mut got_loss = vec![];
            cross_entropy_rows(&mut got, z, labels, v, w, |i, l| got_loss.push((i, l)));
            let bits = |x: &[T]| x.iter().map(|a| a.as_f64().to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "dlogits, v {v}");
            let order: Vec<(usize, u64)> = want_loss
                .iter()
                .enumerate()
                .map(|(i, l)| (i, l.to_bits()))
                .collect();
            let got_order: Vec<(usize, u64)> =
                got_loss.iter().map(|&(i, l)| (i, l.to_bits())).collect();
            assert_eq!(got_order, order, "losses, v {v}");
        }
        let mut r = rng(41);
        for v in [1, 3, 7, 40] {
            let rows = 11;
            let mut z: Vec<f64> = uniform(&mut r, rows * v).iter().map(|x| 6.0 * x).collect();
            if v > 1 {
                z[v] = 800.0; // row 1 saturated
                z[2 * v + 1] = z[2 * v]; // a tie in row 2
            }
            let labels: Vec<Option<usize>> = (0..rows)
                .map(|i| (i != 5 && i != 10).then_some((i * 7 + 3) % v))
                .collect();
            check(&z, &labels, v);
            let z32: Vec<f32> = z.iter().map(|&x| x as f32).collect();
            check(&z32, &labels, v);
        }
    }
}
