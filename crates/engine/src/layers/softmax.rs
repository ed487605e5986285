//! Row-wise softmax with an optional boolean keep-mask.
//!
//! For each row `z` of a `[R, C]` tensor, `p_j = exp(z_j − m) / Σ_{kept k} exp(z_k − m)`
//! over the kept entries, with `m` the largest kept logit (so no `exp` overflows).
//! Masked entries get probability exactly `0`. A row with no kept entry, or whose
//! kept logits are all `−∞`, gives all zeros (never NaN); logits of `−∞` are
//! otherwise allowed and get probability `0`. The backward is
//! `dz = p ⊙ (dp − ⟨dp, p⟩)`, which is `0` on masked entries and on empty rows.
//!
//! The backward never forms `dp_j − ⟨dp, p⟩` directly: once the largest probability
//! `p_m` rounds to 1, `⟨dp, p⟩` equals `dp_m` to the last bit and `dz_m` (and the
//! direction of every gradient built from `dz`) is rounding noise, although the
//! true `dz` is still far from underflow. Since `Σ p = 1`, the same quantity is
//! `(dp_j − dp_m) − Σ_s p_s (dp_s − dp_m)`, whose terms are all small together:
//! `dz_m = −p_m Σ_(s≠m) p_s (dp_s − dp_m)` keeps its relative accuracy however
//! saturated the row is (tested against the double-double [`crate::F64x2`]).
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

mod rows;
pub use rows::{backward_rows_in_place, prefix_rows_in_place};

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
        let (at_max, inner) = centred_inner(dp, p);
        for ((g, &d), &pj) in dz.iter_mut().zip(dp).zip(p) {
            *g += pj * ((d - at_max) - inner);
        }
    }
}

/// Softmax of one row in place, over the entries `j` with `keep(j)`; the rest
/// become `0`. A row with nothing kept (or only `−∞` kept) becomes all zeros.
pub fn row_in_place<T: Float>(row: &mut [T], keep: impl Fn(usize) -> bool) {
    // row: [C] -> row: [C]
    let m = max_kept(row, &keep);
    normalise(row, m, keep);
}

/// The largest entry that is not NaN (`−∞` if none), taken in 16 independent
/// lanes as [`row_in_place`] takes its maximum (rows under 32 entries: one chain).
#[inline(always)]
pub fn max_in_lanes<T: Float>(row: &[T]) -> T {
    max_kept(row, |_| true)
}

/// The largest kept entry that is not NaN (`−∞` if none), as one in-order
/// compare chain finds it, but in 16 independent lanes that the compiler can
/// vectorise: the maximum of a set does not depend on the order it is read in.
/// Only the sign of a zero maximum can differ (−0 and +0 compare equal), and
/// `v − m` then equals `v` or is a zero whose `exp` is 1 either way, so the
/// softmax is bit-identical. Rows under [`SHORT`] entries take the chain.
#[inline(always)]
fn max_kept<T: Float>(row: &[T], keep: impl Fn(usize) -> bool) -> T {
    let mut m = T::neg_infinity();
    if row.len() < SHORT {
        for (j, &v) in row.iter().enumerate() {
            if keep(j) && v > m {
                m = v;
            }
        }
        return m;
    }
    let mut lanes = [T::neg_infinity(); 16];
    let mut chunks = row.chunks_exact(16);
    for (c, chunk) in (&mut chunks).enumerate() {
        for (i, (l, &v)) in lanes.iter_mut().zip(chunk).enumerate() {
            *l = if keep(c * 16 + i) && v > *l { v } else { *l };
        }
    }
    for &v in &lanes {
        if v > m {
            m = v;
        }
    }
    let base = row.len() - chunks.remainder().len();
    for (i, &v) in chunks.remainder().iter().enumerate() {
        if keep(base + i) && v > m {
            m = v;
        }
    }
    m
}

/// What the compare chain `m = 0; for j { if p[j] > p[m] { m = j } }` finds (the
/// first largest entry, NaNs skipped; 0 when `p[0]` is NaN or `p` is empty), from
/// the maximum in lanes ([`max_in_lanes`]) and then the first entry equal to it:
/// two passes the compiler can vectorise or end early, instead of one chain.
#[inline(always)] // so that it compiles at the SIMD level of its caller
pub fn first_argmax<T: Float>(p: &[T]) -> usize {
    if p.len() < SHORT {
        let mut m = 0;
        for (j, &pj) in p.iter().enumerate() {
            if pj > p[m] {
                m = j;
            }
        }
        return m;
    }
    match p.first() {
        Some(p0) if !p0.is_nan() => {
            let top = max_in_lanes(p);
            // Sixteen entries' comparisons at a time, which vectorise (a loop that
            // returns at the first match does not), then the match's place in
            // its chunk; plain loops: `position`'s closure stayed a call at a
            // wider level.
            let mut chunks = p.chunks_exact(16);
            for (c, chunk) in (&mut chunks).enumerate() {
                let hit = chunk.iter().fold(false, |h, &v| h | (v == top));
                if hit {
                    for (i, &v) in chunk.iter().enumerate() {
                        if v == top {
                            return c * 16 + i;
                        }
                    }
                }
            }
            let base = p.len() - chunks.remainder().len();
            for (i, &v) in chunks.remainder().iter().enumerate() {
                if v == top {
                    return base + i;
                }
            }
            0
        }
        _ => 0,
    }
}

/// Rows shorter than this take the single compare chain: the lanes' setup (and
/// [`first_argmax`]'s second pass) cost more than they save there (induction's
/// rows have 2–10 entries).
const SHORT: usize = 32;

/// The rest of a row's softmax once its largest kept entry `m` is known.
fn normalise<T: Float>(row: &mut [T], m: T, keep: impl Fn(usize) -> bool) {
    if m == T::neg_infinity() {
        row.iter_mut().for_each(|v| *v = T::zero());
        return;
    }
    // Two passes with the one pass's bits: the `exp` calls first, independent of
    // each other, then the in-order sum. In one loop the running sum waited on
    // each call and went through the stack around it (every register is the
    // callee's to clobber), a chain of about 10 cycles per entry.
    // (The masked entries' `exp`s are computed too, then zeroed: the kernel runs
    // whole rows at a time.)
    T::exp_shifted_in_place(row, m);
    for (j, v) in row.iter_mut().enumerate() {
        if !keep(j) {
            *v = T::zero();
        }
    }
    let mut sum = T::zero();
    for &v in row.iter() {
        sum += v;
    }
    // sum >= 1: the maximum contributes exp(0). A division rather than a product
    // with `1/sum`: it is the last bit more accurate, and it is what the models'
    // fused kernels compute, so an engine-layer reference matches them bit for bit.
    row.iter_mut().for_each(|v| *v /= sum);
}

/// One row's backward in place: `g ← p ⊙ (g − ⟨g, p⟩)` (turns `dp` into `dz`),
/// without cancellation (module doc).
pub fn backward_row_in_place<T: Float>(g: &mut [T], p: &[T]) {
    // g: [C] (dp in, dz out), p: [C]
    assert_eq!(g.len(), p.len(), "softmax: row lengths differ");
    let (at_max, inner) = centred_inner(g, p);
    for (gj, &pj) in g.iter_mut().zip(p) {
        *gj = pj * ((*gj - at_max) - inner);
    }
}

/// `(g_m, Σ_s p_s (g_s − g_m))` for `m` the row's largest probability (the first
/// if tied): the backward's inner product, centred where it would cancel.
pub fn centred_inner<T: Float>(g: &[T], p: &[T]) -> (T, T) {
    // g: [C], p: [C]
    let m = first_argmax(p);
    let Some(&at_max) = g.get(m) else {
        return (T::zero(), T::zero());
    };
    let inner = g.iter().zip(p).map(|(&a, &b)| (a - at_max) * b).sum::<T>();
    (at_max, inner)
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

    /// Rows whose largest probability rounds to 1 in f64 (gaps of 40 to 600 nats):
    /// the backward's direction matches the double-double's, entry for entry; the
    /// textbook `p ⊙ (dp − ⟨dp, p⟩)` loses the largest entry completely there.
    #[test]
    fn backward_keeps_its_direction_at_saturation() {
        use crate::precision::{assert_direction, cosine, MIN_COSINE};
        use crate::F64x2;
        let mut r = rng(9);
        for gap in [40.0, 120.0, 600.0] {
            let c = 6;
            let mut z = uniform(&mut r, c);
            z[2] += gap;
            let dp = uniform(&mut r, c);
            let mut p = vec![0.0; c];
            forward(&mut p, &z, None, 1, c);
            assert_eq!(p[2], 1.0, "gap {gap}: the row is saturated in f64");
            let mut dz = vec![0.0; c];
            backward(&mut dz, &dp, &p, 1, c);
            let mut g = dp.clone();
            backward_row_in_place(&mut g, &p);
            assert_eq!(g, dz);
            // The reference: the same layer in F64x2 from the same inputs.
            let (z2, dp2) = (cast::<F64x2>(&z), cast::<F64x2>(&dp));
            let mut p2 = vec![F64x2::of(0.0); c];
            forward(&mut p2, &z2, None, 1, c);
            let mut dz2 = vec![F64x2::of(0.0); c];
            backward(&mut dz2, &dp2, &p2, 1, c);
            let want = to_f64(&dz2);
            assert_direction(&format!("softmax dz, gap {gap}"), &dz, &want, MIN_COSINE);
            assert_close("dz at saturation", &dz, &want, 1e-12 * want[2].abs());
            // The textbook form, in f64: its largest entry is exactly 0.
            let inner: f64 = dp.iter().zip(&p).map(|(a, b)| a * b).sum();
            let naive: Vec<f64> = dp.iter().zip(&p).map(|(d, q)| q * (d - inner)).collect();
            assert_eq!(naive[2], 0.0, "gap {gap}");
            assert!(cosine(&naive, &want) < 0.99, "gap {gap}");
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

    #[test]
    fn the_lanes_give_the_chains_numbers_bit_for_bit() {
        // Rows of every length across the chain / lanes threshold (SHORT) and the
        // 16 lanes, drawn from a small set so that ties (±0 among them), −∞, +∞
        // and NaN all occur, in f32 and f64, with and without a mask.
        let vals = [
            0.0,
            -0.0,
            1.5,
            -2.0,
            3.25,
            3.25,
            f64::NEG_INFINITY,
            -1e30,
            7.0,
        ];
        let mut state = 12345u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) as usize
        };
        // the softmax as one compare chain finds the maximum
        fn chain<T: Float>(row: &mut [T], keep: impl Fn(usize) -> bool) {
            let mut m = T::neg_infinity();
            for (j, &v) in row.iter().enumerate() {
                if keep(j) && v > m {
                    m = v;
                }
            }
            normalise(row, m, keep);
        }
        for len in 0..70 {
            for trial in 0..20 {
                let mut row: Vec<f64> = (0..len).map(|_| vals[next() % vals.len()]).collect();
                if trial % 5 == 4 && len > 0 {
                    let at = next() % len;
                    row[at] = if trial % 2 == 0 {
                        f64::NAN
                    } else {
                        f64::INFINITY
                    };
                }
                let mask: Vec<bool> = (0..len).map(|_| trial % 2 == 0 || next() % 3 > 0).collect();
                let mut a = row.clone();
                let mut b = row.clone();
                chain(&mut a, |j| mask[j]);
                row_in_place(&mut b, |j| mask[j]);
                let bits = |r: &[f64]| r.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&a), bits(&b), "f64 row {row:?} mask {mask:?}");
                let row32: Vec<f32> = row.iter().map(|&x| x as f32).collect();
                let (mut a, mut b) = (row32.clone(), row32.clone());
                chain(&mut a, |j| mask[j]);
                row_in_place(&mut b, |j| mask[j]);
                let bits = |r: &[f32]| r.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&a), bits(&b), "f32 row {row32:?} mask {mask:?}");
            }
        }
        // the first largest entry, as the compare chain finds it
        let chain = |p: &[f64]| {
            let mut m = 0;
            for (j, &pj) in p.iter().enumerate() {
                if pj > p[m] {
                    m = j;
                }
            }
            m
        };
        for len in 0..70 {
            for trial in 0..20 {
                let mut p: Vec<f64> = (0..len).map(|_| vals[next() % vals.len()]).collect();
                if trial % 4 == 3 && len > 0 {
                    let at = if trial % 8 == 3 { 0 } else { next() % len };
                    p[at] = f64::NAN;
                }
                assert_eq!(first_argmax(&p), chain(&p), "{p:?}");
            }
        }
        // a lone maximum in every chunk and in the remainder, a NaN before it
        for at in 0..70 {
            let mut p = vec![-1.0f64; 70];
            p[at] = 2.0;
            p[at.saturating_sub(1).max(1)] = if at > 1 { f64::NAN } else { p[1] };
            assert_eq!(first_argmax(&p), at, "maximum at {at}");
            assert_eq!(first_argmax(&p), chain(&p), "maximum at {at}");
        }
        // the largest non-NaN entry, wherever it sits among the lanes
        let mut row = vec![-5.0f32; 37];
        row[29] = 2.0;
        row[3] = f32::NAN;
        assert_eq!(max_in_lanes(&row), 2.0);
        assert_eq!(max_in_lanes::<f32>(&[]), f32::NEG_INFINITY);
    }
}
