//! The small dense products of the LSA's general path ([`super::model`]):
//! `[D, D]` and `[m + 1, D]` matrices, `D ≤ 65`, too small for `gemm`'s packing
//! to pay, written so that every inner loop is a contiguous `axpy`.

/// `out [r, c] = a [r, k] · b [k, c]` (`ta`: `a` is stored transposed). Rows of
/// `b` are added into rows of `out`, `x` outer, so every inner loop is a
/// contiguous `axpy` the compiler vectorises (a dot-product form would leave a
/// serial chain of `k` additions per entry; the layers keep `Pᵀ`, `Qᵀ` so that
/// no product needs a transposed `b`).
///
/// Every product here has `c = D`; for `D ≤ 17` (`d ≤ 16`) the row length is a
/// compile-time constant ([`mm_fixed`]), which lets the compiler unroll the rows
/// into whole vector registers (about 2× on the presets' sizes).
#[allow(clippy::too_many_arguments)]
pub(super) fn mm(out: &mut [f64], a: &[f64], ta: bool, b: &[f64], r: usize, k: usize, c: usize) {
    macro_rules! fixed {
        ($($n:literal)*) => {
            match c {
                $($n => return mm_fixed::<$n>(out, a, ta, b, r, k),)*
                _ => {}
            }
        };
    }
    fixed!(2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17);
    let out = &mut out[..r * c];
    out.iter_mut().for_each(|v| *v = 0.0);
    for (x, brow) in b[..k * c].chunks_exact(c).enumerate() {
        for (i, orow) in out.chunks_exact_mut(c).enumerate() {
            let av = if ta { a[x * r + i] } else { a[i * k + x] };
            for (o, bv) in orow.iter_mut().zip(brow) {
                *o += av * bv;
            }
        }
    }
}

/// [`mm`] with the row length `C` fixed: the same additions in the same order.
fn mm_fixed<const C: usize>(out: &mut [f64], a: &[f64], ta: bool, b: &[f64], r: usize, k: usize) {
    let out = &mut out[..r * C];
    out.iter_mut().for_each(|v| *v = 0.0);
    for (x, brow) in b[..k * C].chunks_exact(C).enumerate() {
        let brow: &[f64; C] = brow.try_into().expect("a row of C");
        for (i, orow) in out.chunks_exact_mut(C).enumerate() {
            let orow: &mut [f64; C] = orow.try_into().expect("a row of C");
            let av = if ta { a[x * r + i] } else { a[i * k + x] };
            for j in 0..C {
                orow[j] += av * brow[j];
            }
        }
    }
}

/// `out [n, n] = aᵀ`.
pub(super) fn transpose(out: &mut [f64], a: &[f64], n: usize) {
    for i in 0..n {
        for j in 0..n {
            out[j * n + i] = a[i * n + j];
        }
    }
}

/// `out [n, n] = eᵀ e` for `e` `[k, n]`: the bits of
/// [`mm`]`(out, e, true, e, n, k, n)` (entry `(i, j)` sums `e[x, i] e[x, j]` over
/// `x` in order in both, and the product commutes) for about half its work: the
/// upper triangle, then mirrored.
pub(super) fn gram(out: &mut [f64], e: &[f64], k: usize, n: usize) {
    macro_rules! fixed {
        ($($n:literal)*) => {
            match n {
                $($n => return gram_fixed::<$n>(out, e, k),)*
                _ => {}
            }
        };
    }
    fixed!(2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17);
    let out = &mut out[..n * n];
    out.iter_mut().for_each(|v| *v = 0.0);
    for row in e[..k * n].chunks_exact(n) {
        for (i, &ei) in row.iter().enumerate() {
            let o = &mut out[i * n + i..(i + 1) * n];
            for (ov, ej) in o.iter_mut().zip(&row[i..]) {
                *ov += ei * ej;
            }
        }
    }
    for i in 0..n {
        for j in 0..i {
            out[i * n + j] = out[j * n + i];
        }
    }
}

/// [`gram`] with `n` fixed, so that the triangle's rows unroll.
fn gram_fixed<const N: usize>(out: &mut [f64], e: &[f64], k: usize) {
    let out = &mut out[..N * N];
    out.iter_mut().for_each(|v| *v = 0.0);
    for row in e[..k * N].chunks_exact(N) {
        let row: &[f64; N] = row.try_into().expect("a row of N");
        for (i, orow) in out.chunks_exact_mut(N).enumerate() {
            let orow: &mut [f64; N] = orow.try_into().expect("a row of N");
            for j in i..N {
                orow[j] += row[i] * row[j];
            }
        }
    }
    for i in 0..N {
        for j in 0..i {
            out[i * N + j] = out[j * N + i];
        }
    }
}

/// [`gram`] for [`LANES`](super::lanes::LANES) matrices side by side, one per
/// lane: each lane's bits are `gram`'s.
#[inline(always)]
pub(super) fn gram_lanes<const W: usize>(out: &mut [[f64; W]], e: &[[f64; W]], k: usize, n: usize) {
    let e = &e[..k * n];
    // each entry's sum kept in registers over the rows (the rows in order, as
    // `gram` adds them)
    for i in 0..n {
        for j in i..n {
            let mut acc = [0.0; W];
            for row in e.chunks_exact(n) {
                let (a, b) = (row[i], row[j]);
                for l in 0..W {
                    acc[l] += a[l] * b[l];
                }
            }
            out[i * n + j] = acc;
            out[j * n + i] = acc;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The triangle's Gram matrix is `mm`'s, bit for bit, at the fixed and the
    /// general widths.
    #[test]
    fn gram_is_the_products_bits() {
        for n in [2, 5, 6, 11, 17, 18, 30] {
            for k in [1, 4, 20] {
                let e: Vec<f64> = (0..k * n)
                    .map(|i| ((i * 7919 % 97) as f64 - 48.0) / 13.0)
                    .collect();
                let (mut a, mut b) = (vec![0.0; n * n], vec![0.0; n * n]);
                mm(&mut a, &e, true, &e, n, k, n);
                gram(&mut b, &e, k, n);
                assert!(
                    a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
                    "n = {n}, k = {k}"
                );
            }
        }
    }
}
