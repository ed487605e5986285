//! Row-wise softmax with an optional boolean keep-mask.
//!
//! For each row `z` of a `[R, C]` tensor, `p_j = exp(z_j − m) / Σ_{kept k} exp(z_k − m)`
//! over the kept entries, with `m` the largest kept logit (so no `exp` overflows).
//! Masked entries get probability exactly `0`. A row with no kept entry, or whose
//! kept logits are all `−∞`, gives all zeros (never NaN); logits of `−∞` are
//! otherwise allowed and get probability `0`. The backward is
//! `dz = p ⊙ (dp − ⟨dp, p⟩)`, which is `0` on masked entries and on empty rows.
//!
//! ```
//! use mechlab_engine::layers::softmax;
//! let z = [0.0f64, 0.0, 5.0, 1.0, 2.0, 3.0];
//! let mask = [true, true, false]; // one mask for every row: drop column 2
//! let mut p = [0.0f64; 6];
//! softmax::forward(&mut p, &z, Some(&mask), 2, 3);
//! assert_eq!(&p[..3], &[0.5, 0.5, 0.0]);
//! assert!((p[3] - 1.0 / (1.0 + 1f64.exp())).abs() < 1e-15);
//! ```

use crate::Float;

/// Softmax of every row of `z` into `p`, overwriting `p`.
///
/// `mask` (`true` = keep) is either `[C]`, shared by all rows, or `[R, C]`.
pub fn forward<T: Float>(p: &mut [T], z: &[T], mask: Option<&[bool]>, rows: usize, cols: usize) {
    // z: [R, C], mask: [C] or [R, C] -> p: [R, C]
    assert_eq!(z.len(), rows * cols, "softmax: z is not [R, C]");
    assert_eq!(p.len(), rows * cols, "softmax: p is not [R, C]");
    p.copy_from_slice(z);
    for r in 0..rows {
        let row = &mut p[r * cols..(r + 1) * cols];
        match mask {
            None => row_in_place(row, |_| true),
            Some(m) if m.len() == cols => row_in_place(row, |j| m[j]),
            Some(m) => {
                assert_eq!(
                    m.len(),
                    rows * cols,
                    "softmax: mask is neither [C] nor [R, C]"
                );
                let m = &m[r * cols..(r + 1) * cols];
                row_in_place(row, |j| m[j])
            }
        }
    }
}

/// Accumulates `dz += p ⊙ (dp − ⟨dp, p⟩)` row by row.
pub fn backward<T: Float>(dz: &mut [T], dp: &[T], p: &[T], rows: usize, cols: usize) {
    // dp: [R, C], p: [R, C] -> dz: [R, C] (+=)
    assert_eq!(dz.len(), rows * cols, "softmax: dz is not [R, C]");
    assert_eq!(dp.len(), rows * cols, "softmax: dp is not [R, C]");
    assert_eq!(p.len(), rows * cols, "softmax: p is not [R, C]");
    for r in 0..rows {
        let s = r * cols..(r + 1) * cols;
        let (dz, dp, p) = (&mut dz[s.clone()], &dp[s.clone()], &p[s]);
        let inner: T = dp.iter().zip(p).map(|(&a, &b)| a * b).sum();
        for ((g, &d), &pj) in dz.iter_mut().zip(dp).zip(p) {
            *g += pj * (d - inner);
        }
    }
}

/// Softmax of one row in place, over the entries `j` with `keep(j)`; the rest
/// become `0`. A row with nothing kept (or only `−∞` kept) becomes all zeros.
pub fn row_in_place<T: Float>(row: &mut [T], keep: impl Fn(usize) -> bool) {
    // row: [C] -> row: [C]
    let mut m = T::neg_infinity();
    for (j, &v) in row.iter().enumerate() {
        if keep(j) && v > m {
            m = v;
        }
    }
    if m == T::neg_infinity() {
        row.iter_mut().for_each(|v| *v = T::zero());
        return;
    }
    let mut sum = T::zero();
    for (j, v) in row.iter_mut().enumerate() {
        *v = if keep(j) { (*v - m).exp() } else { T::zero() };
        sum += *v;
    }
    // sum >= 1: the maximum contributes exp(0). A division rather than a product
    // with `1/sum`: it is the last bit more accurate, and it is what the models'
    // fused kernels compute, so an engine-layer reference matches them bit for bit.
    row.iter_mut().for_each(|v| *v /= sum);
}

/// One row's backward in place: `g ← p ⊙ (g − ⟨g, p⟩)` (turns `dp` into `dz`).
pub fn backward_row_in_place<T: Float>(g: &mut [T], p: &[T]) {
    // g: [C] (dp in, dz out), p: [C]
    assert_eq!(g.len(), p.len(), "softmax: row lengths differ");
    let inner: T = g.iter().zip(p).map(|(&a, &b)| a * b).sum();
    for (gj, &pj) in g.iter_mut().zip(p) {
        *gj = pj * (*gj - inner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;

    #[test]
    fn forward_hand_case() {
        // row [ln 1, ln 2, ln 5] -> [1/8, 2/8, 5/8]; large logits do not overflow
        let z = [
            0.0,
            2f64.ln(),
            5f64.ln(),
            1000.0,
            1000.0,
            1000.0 + 3f64.ln(),
        ];
        let mut p = [0.0; 6];
        forward(&mut p, &z, None, 2, 3);
        assert_close("p", &p, &[0.125, 0.25, 0.625, 0.2, 0.2, 0.6], 1e-12);
    }

    #[test]
    fn masks_give_exact_zeros_and_empty_rows_give_zeros() {
        let z = [1.0, 2.0, 3.0, 4.0, f64::NEG_INFINITY, 0.0];
        let mask = [true, false, true, false, false, false];
        let mut p = [9.0; 6];
        forward(&mut p, &z, Some(&mask), 2, 3);
        assert_eq!(p[1], 0.0);
        assert!((p[0] + p[2] - 1.0).abs() < 1e-15);
        assert_eq!(&p[3..], &[0.0, 0.0, 0.0]);
        // -inf logits: probability 0; a row of only -inf: zeros
        let z = [f64::NEG_INFINITY, 0.0, f64::NEG_INFINITY, f64::NEG_INFINITY];
        let mut p = [9.0; 4];
        forward(&mut p, &z, None, 2, 2);
        assert_eq!(p, [0.0, 1.0, 0.0, 0.0]);
        // and the backward of empty rows is zero, not NaN
        let mut dz = [0.0; 4];
        backward(&mut dz, &[1.0, 2.0, 3.0, 4.0], &p, 2, 2);
        assert_eq!(dz, [0.0; 4]);
    }

    #[test]
    fn gradcheck_with_and_without_mask() {
        let (r_, c) = (3, 5);
        let mut r = rng(4);
        let z = uniform(&mut r, r_ * c);
        let seed = uniform(&mut r, r_ * c);
        let mask: Vec<bool> = (0..r_ * c).map(|i| i % 4 != 1).collect();
        for m in [None, Some(&mask[..]), Some(&mask[..c])] {
            let run = |z: &[f64]| {
                let mut p = vec![0.0; r_ * c];
                forward(&mut p, z, m, r_, c);
                // a nonlinear loss of p, so dp varies with p
                p.iter().zip(&seed).map(|(a, b)| a * b + a * a).sum::<f64>()
            };
            let mut p = vec![0.0; r_ * c];
            forward(&mut p, &z, m, r_, c);
            let dp: Vec<f64> = p.iter().zip(&seed).map(|(a, b)| b + 2.0 * a).collect();
            let dz0 = uniform(&mut r, r_ * c);
            let mut dz = dz0.clone();
            backward(&mut dz, &dp, &p, r_, c);
            assert_grad("softmax dz", &mut { run }, &z, &accumulated(&dz, &dz0));
        }
    }

    #[test]
    fn f32_smoke() {
        let z = [100.0f32, 0.0, -100.0, 3.0];
        let mut p = [0.0f32; 4];
        forward(&mut p, &z, None, 1, 4);
        assert!(p.iter().all(|v| v.is_finite()));
        assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        let mut dz = [0.0f32; 4];
        backward(&mut dz, &[1.0, 0.0, 0.0, 0.0], &p, 1, 4);
        assert!(dz.iter().sum::<f32>().abs() < 1e-6);
    }
}
