//! Several rows of a softmax (forward or backward) side by side, with each row's
//! bits: a row's sum is an in-order chain, whose order fixes its bits, so four
//! (`ROWS`) rows' chains run together, each in its own order, and the loops
//! compile for the widest SIMD level ([`crate::simd::widest`]). Both are for the
//! causal attention blocks, whose rows share a stride and (nearly) a length.

use super::{first_argmax, max_in_lanes};
use crate::Float;

/// [`backward_row_in_place`](super::backward_row_in_place) of `rows` rows of `n`
/// entries, row `r` at `g[r·stride..]` and `p[r·stride..]`, with the same bits: a
/// row's `⟨g − g_m, p⟩` is an in-order chain (its order fixes its bits), so four
/// (`ROWS`) rows' chains run side by side, each in its own order, and the loops
/// compile for the widest SIMD level ([`crate::simd::widest`]).
pub fn backward_rows_in_place<T: Float>(
    g: &mut [T],
    p: &[T],
    rows: usize,
    n: usize,
    stride: usize,
) {
    // g: [rows, stride] (dp in, dz out on the first n columns), p: [rows, stride]
    if rows == 0 || n == 0 {
        return;
    }
    assert!(rows == 1 || n <= stride, "softmax: rows overlap");
    let need = (rows - 1) * stride + n;
    assert!(
        g.len() >= need && p.len() >= need,
        "softmax: rows run past the buffers"
    );
    let full = rows / ROWS * ROWS;
    crate::simd::widest(
        #[inline(always)]
        || {
            for r in (0..full).step_by(ROWS) {
                let at = r * stride;
                backward_group::<T, ROWS>(&mut g[at..], &p[at..], n, stride);
            }
            for r in full..rows {
                let at = r * stride;
                backward_group::<T, 1>(&mut g[at..], &p[at..], n, stride);
            }
        },
    )
}

/// [`row_in_place`](super::row_in_place) of `rows` rows over a prefix each, with
/// the same bits: row `r` is `p[r·stride..]`, and its softmax runs over its first
/// `len(r)` entries (the kept keys of a causal row; nothing past them is touched).
/// A row's sum of `exp`s is an in-order chain, so four (`ROWS`) rows' chains run
/// side by side, each in its own order, and the loops compile for the widest SIMD
/// level.
pub fn prefix_rows_in_place<T: Float>(
    p: &mut [T],
    rows: usize,
    stride: usize,
    len: impl Fn(usize) -> usize,
) {
    // p: [rows, stride] -> the first len(r) entries of row r: their softmax
    if rows == 0 {
        return;
    }
    let need = (rows - 1) * stride + len(rows - 1);
    assert!(p.len() >= need, "softmax: rows run past the buffer");
    assert!(
        (0..rows).all(|r| len(r) <= stride || rows == 1),
        "softmax: rows overlap"
    );
    let full = rows / ROWS * ROWS;
    crate::simd::widest(
        #[inline(always)]
        || {
            for r in (0..full).step_by(ROWS) {
                let lens = std::array::from_fn(|k| len(r + k));
                prefix_group::<T, ROWS>(&mut p[r * stride..], lens, stride);
            }
            for r in full..rows {
                prefix_group::<T, 1>(&mut p[r * stride..], [len(r)], stride);
            }
        },
    )
}

/// [`prefix_rows_in_place`] of `G` rows with `lens[k]` entries each.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // the column loop reads the G rows: that is the order
fn prefix_group<T: Float, const G: usize>(p: &mut [T], mut lens: [usize; G], stride: usize) {
    for k in 0..G {
        let row = &mut p[k * stride..k * stride + lens[k]];
        let m = max_in_lanes(row);
        if m == T::neg_infinity() {
            // nothing to keep (as `normalise`): zeros, and no sum to take
            row.iter_mut().for_each(|v| *v = T::zero());
            lens[k] = 0;
            continue;
        }
        T::exp_shifted_in_place(row, m);
    }
    // `normalise`'s sum starts at +0; so do these chains.
    let mut sums = [T::zero(); G];
    let common = lens.iter().copied().min().unwrap_or(0);
    {
        let ps: [&[T]; G] = std::array::from_fn(|k| &p[k * stride..k * stride + lens[k]]);
        for j in 0..common {
            for k in 0..G {
                sums[k] += ps[k][j];
            }
        }
        for k in 0..G {
            for &v in &ps[k][common..] {
                sums[k] += v;
            }
        }
    }
    for k in 0..G {
        let sum = sums[k];
        p[k * stride..k * stride + lens[k]]
            .iter_mut()
            .for_each(|v| *v /= sum);
    }
}

/// Rows whose backward chains run side by side ([`backward_rows_in_place`]).
const ROWS: usize = 4;

/// [`backward_row_in_place`](super::backward_row_in_place) of `G` rows (`n ≥ 1`
/// entries each, `stride` apart).
#[inline(always)]
#[allow(clippy::needless_range_loop)] // the column loop reads the G rows: that is the order
fn backward_group<T: Float, const G: usize>(g: &mut [T], p: &[T], n: usize, stride: usize) {
    let ps: [&[T]; G] = std::array::from_fn(|k| &p[k * stride..k * stride + n]);
    let at_max: [T; G] = std::array::from_fn(|k| g[k * stride + first_argmax(ps[k])]);
    // `iter().sum()` starts at −0 for f32 and f64; so do these chains.
    let mut inner: [T; G] = [std::iter::empty().sum(); G];
    {
        let gs: [&[T]; G] = std::array::from_fn(|k| &g[k * stride..k * stride + n]);
        for j in 0..n {
            for k in 0..G {
                inner[k] += (gs[k][j] - at_max[k]) * ps[k][j];
            }
        }
    }
    for k in 0..G {
        let row = &mut g[k * stride..k * stride + n];
        for (gj, &pj) in row.iter_mut().zip(ps[k]) {
            *gj = pj * ((*gj - at_max[k]) - inner[k]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{backward_row_in_place, row_in_place};
    use super::*;
    use crate::testutil::*;

    #[test]
    fn rows_side_by_side_give_each_rows_bits() {
        // rows of a shared stride, a saturated one, ties and −0 among them
        let mut state = 99u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 33) % 1000) as f64 / 1000.0
        };
        for (rows, n, stride) in [(1, 5, 5), (3, 7, 9), (4, 1, 4), (9, 33, 40), (6, 64, 64)] {
            let mut p: Vec<f64> = (0..rows * stride).map(|_| next()).collect();
            for r in 0..rows {
                let row = &mut p[r * stride..r * stride + n];
                let s: f64 = row.iter().sum();
                row.iter_mut().for_each(|v| *v /= s);
            }
            p[0] = 1.0; // a saturated row's top entry
            p[1..n.min(stride)].iter_mut().for_each(|v| *v *= 1e-20);
            let mut g: Vec<f64> = (0..rows * stride).map(|_| next() - 0.5).collect();
            let at = stride.min(g.len() - 1);
            g[at] = -0.0;
            {
                let (gg, pp) = (&g, &p);
                let mut want = gg.clone();
                for r in 0..rows {
                    let at = r * stride;
                    backward_row_in_place(&mut want[at..at + n], &pp[at..at + n]);
                }
                let mut got = gg.clone();
                backward_rows_in_place(&mut got, pp, rows, n, stride);
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "f64 rows {rows} n {n}");
                let (g32, p32): (Vec<f32>, Vec<f32>) = (
                    gg.iter().map(|&x| x as f32).collect(),
                    pp.iter().map(|&x| x as f32).collect(),
                );
                let mut want = g32.clone();
                for r in 0..rows {
                    let at = r * stride;
                    backward_row_in_place(&mut want[at..at + n], &p32[at..at + n]);
                }
                let mut got = g32.clone();
                backward_rows_in_place(&mut got, &p32, rows, n, stride);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "f32 rows {rows} n {n}");
            }
        }
    }

    /// The grouped prefix softmax computes each row's bits, leaves what lies past
    /// a row's prefix alone, and zeroes a row of only `−∞`, at causal lengths
    /// (one more key per row) and ragged ones, in f32 and f64.
    #[test]
    fn prefix_rows_side_by_side_give_each_rows_bits() {
        fn check<T: Float>(z: &[T], rows: usize, stride: usize, len: &dyn Fn(usize) -> usize) {
            let mut want = z.to_vec();
            for r in 0..rows {
                row_in_place(&mut want[r * stride..r * stride + len(r)], |_| true);
            }
            let mut got = z.to_vec();
            prefix_rows_in_place(&mut got, rows, stride, len);
            let bits = |v: &[T]| v.iter().map(|x| x.as_f64().to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "rows {rows} stride {stride}");
        }
        let mut r = rng(17);
        for (rows, stride, ragged) in [(1, 5, false), (4, 4, false), (7, 40, true), (9, 70, false)]
        {
            let mut z: Vec<f64> = uniform(&mut r, rows * stride)
                .iter()
                .map(|x| 8.0 * x)
                .collect();
            z[0] = 900.0; // a saturated row
            z[1] = -0.0;
            if rows > 2 {
                // a row of only −∞ over its prefix
                z[2 * stride..3 * stride]
                    .iter_mut()
                    .for_each(|v| *v = f64::NEG_INFINITY);
            }
            let len = move |i: usize| {
                if ragged {
                    (i * 13 + 5) % (stride + 1)
                } else {
                    (i + 1).min(stride)
                }
            };
            check(&z, rows, stride, &len);
            let z32: Vec<f32> = z.iter().map(|&x| x as f32).collect();
            check(&z32, rows, stride, &len);
        }
    }
}
