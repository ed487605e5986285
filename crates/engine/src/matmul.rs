//! Matrix products through the `gemm` crate, on row-major slices.
//!
//! Layers call [`matmul`] inside per-sample (or per-chunk) work that `rayon` already
//! spreads over the cores, so the product itself runs single-threaded by default;
//! [`matmul_par`] is for the rare large product outside such a loop.
//!
//! ```
//! use mechlab_engine::matmul::{matmul, Op};
//! // c[2,2] = a[2,3] · b[3,2]
//! let a = [1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0];
//! let b = [1.0f64, 0.0, 0.0, 1.0, 1.0, 1.0];
//! let mut c = [0.0f64; 4];
//! matmul(&mut c, &a, Op::N, &b, Op::N, 2, 3, 2, false);
//! assert_eq!(c, [4.0, 5.0, 10.0, 11.0]);
//! ```

use crate::Float;
use gemm::Parallelism;

/// Whether an operand is used as stored (`N`) or transposed (`T`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    N,
    T,
}

/// `c[m, n] (+)= op(a)[m, k] · op(b)[k, n]`, all row-major.
///
/// With `Op::N`, `a` is stored `[m, k]`; with `Op::T` it is stored `[k, m]` and used
/// transposed (likewise `b`: `[k, n]` or `[n, k]`). `accumulate` adds into `c`
/// instead of overwriting it (gradient accumulation).
#[allow(clippy::too_many_arguments)]
pub fn matmul<T: Float>(
    c: &mut [T],
    a: &[T],
    op_a: Op,
    b: &[T],
    op_b: Op,
    m: usize,
    k: usize,
    n: usize,
    accumulate: bool,
) {
    gemm_with(c, a, op_a, b, op_b, m, k, n, accumulate, Parallelism::None)
}

/// [`matmul`] spread over `threads` threads by `gemm` itself.
#[allow(clippy::too_many_arguments)]
pub fn matmul_par<T: Float>(
    c: &mut [T],
    a: &[T],
    op_a: Op,
    b: &[T],
    op_b: Op,
    m: usize,
    k: usize,
    n: usize,
    accumulate: bool,
    threads: usize,
) {
    let par = if threads > 1 {
        Parallelism::Rayon(threads)
    } else {
        Parallelism::None
    };
    gemm_with(c, a, op_a, b, op_b, m, k, n, accumulate, par)
}

#[allow(clippy::too_many_arguments)]
fn gemm_with<T: Float>(
    c: &mut [T],
    a: &[T],
    op_a: Op,
    b: &[T],
    op_b: Op,
    m: usize,
    k: usize,
    n: usize,
    accumulate: bool,
    par: Parallelism,
) {
    assert!(c.len() >= m * n, "matmul: c has {} < {m}x{n}", c.len());
    assert!(a.len() >= m * k, "matmul: a has {} < {m}x{k}", a.len());
    assert!(b.len() >= k * n, "matmul: b has {} < {k}x{n}", b.len());
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            c[..m * n].iter_mut().for_each(|x| *x = T::zero());
        }
        return;
    }
    // (column stride, row stride) of each operand as gemm sees it.
    let (a_cs, a_rs) = match op_a {
        Op::N => (1isize, k as isize),
        Op::T => (m as isize, 1isize),
    };
    let (b_cs, b_rs) = match op_b {
        Op::N => (1isize, n as isize),
        Op::T => (k as isize, 1isize),
    };
    // SAFETY: the asserts above guarantee every index gemm touches is in bounds for the
    // given strides; c does not alias a or b (they are distinct borrows).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            accumulate,
            a.as_ptr(),
            a_cs,
            a_rs,
            b.as_ptr(),
            b_cs,
            b_rs,
            T::one(),
            T::one(),
            false,
            false,
            false,
            par,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(a: &[f64], op_a: Op, b: &[f64], op_b: Op, m: usize, k: usize, n: usize) -> Vec<f64> {
        let at = |i: usize, j: usize| match op_a {
            Op::N => a[i * k + j],
            Op::T => a[j * m + i],
        };
        let bt = |i: usize, j: usize| match op_b {
            Op::N => b[i * n + j],
            Op::T => b[j * k + i],
        };
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|l| at(i, l) * bt(l, j)).sum();
            }
        }
        c
    }

    #[test]
    fn all_transpose_combinations_match_naive() {
        let (m, k, n) = (5, 7, 3);
        let a: Vec<f64> = (0..m * k).map(|i| (i as f64 * 0.37).sin()).collect();
        let b: Vec<f64> = (0..k * n).map(|i| (i as f64 * 0.11).cos()).collect();
        for op_a in [Op::N, Op::T] {
            for op_b in [Op::N, Op::T] {
                let want = naive(&a, op_a, &b, op_b, m, k, n);
                let mut c = vec![1.0; m * n];
                matmul(&mut c, &a, op_a, &b, op_b, m, k, n, false);
                for (x, y) in c.iter().zip(&want) {
                    assert!((x - y).abs() < 1e-12);
                }
                matmul(&mut c, &a, op_a, &b, op_b, m, k, n, true);
                for (x, y) in c.iter().zip(&want) {
                    assert!((x - 2.0 * y).abs() < 1e-12);
                }
            }
        }
    }
}
