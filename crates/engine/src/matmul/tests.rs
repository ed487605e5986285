//! The products against a naive sum, every transpose and stride.

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

#[test]
fn strided_submatrices_match_naive() {
    // Embed a, b, c as sub-blocks of wider buffers and compare with the dense product.
    let (m, k, n) = (3, 4, 2);
    let (lda_pad, ldb_pad, ldc_pad) = (3, 5, 1);
    for op_a in [Op::N, Op::T] {
        for op_b in [Op::N, Op::T] {
            let a: Vec<f64> = (0..m * k).map(|i| (i as f64 * 0.7).sin()).collect();
            let b: Vec<f64> = (0..k * n).map(|i| (i as f64 * 0.3).cos()).collect();
            let want = naive(&a, op_a, &b, op_b, m, k, n);
            let (ar, ac) = if op_a == Op::N { (m, k) } else { (k, m) };
            let (br, bc) = if op_b == Op::N { (k, n) } else { (n, k) };
            let (lda, ldb, ldc) = (ac + lda_pad, bc + ldb_pad, n + ldc_pad);
            let mut aw = vec![f64::NAN; 1 + ar * lda];
            let mut bw = vec![f64::NAN; 2 + br * ldb];
            for r in 0..ar {
                aw[1 + r * lda..1 + r * lda + ac].copy_from_slice(&a[r * ac..(r + 1) * ac]);
            }
            for r in 0..br {
                bw[2 + r * ldb..2 + r * ldb + bc].copy_from_slice(&b[r * bc..(r + 1) * bc]);
            }
            let mut cw = vec![7.0; m * ldc];
            matmul_strided(
                &mut cw,
                ldc,
                &aw[1..],
                lda,
                op_a,
                &bw[2..],
                ldb,
                op_b,
                m,
                k,
                n,
                false,
            );
            for i in 0..m {
                for j in 0..n {
                    assert!((cw[i * ldc + j] - want[i * n + j]).abs() < 1e-12);
                }
                // padding columns untouched
                assert_eq!(cw[i * ldc + n], 7.0);
            }
        }
    }
}

/// `gemm`'s register-blocked kernels (AVX-512 where the processor has it, else
/// AVX2) agree with an in-order f64 sum at sizes on both sides of their tile edges
/// (16 and 48 rows of f32, 8 and 24 of f64 at 512 bits; half that at 256) and of
/// the packing blocks, in f32 and f64, every layout, accumulating or not. On an
/// AVX-512 machine this checks the `x86-v4` kernels the workspace enables; on an
/// AVX2-only machine the same test checks the AVX2 ones.
#[test]
fn simd_kernels_match_naive_across_tile_edges() {
    fn check<T: Float>(tol: f64) {
        let sizes = [
            1usize, 3, 7, 8, 9, 15, 16, 17, 23, 24, 25, 47, 48, 49, 97, 130,
        ];
        let mut case = 0usize;
        for &m in &sizes {
            for &(k, n) in &[(5usize, 33usize), (64, 17), (300, 49), (1, 8)] {
                let (op_a, op_b) = ([Op::N, Op::T][case % 2], [Op::N, Op::T][(case / 2) % 2]);
                let acc = case.is_multiple_of(3);
                case += 1;
                let a: Vec<f64> = (0..m * k)
                    .map(|i| ((i * 7 + m) as f64 * 0.13).sin())
                    .collect();
                let b: Vec<f64> = (0..k * n)
                    .map(|i| ((i * 3 + n) as f64 * 0.29).cos())
                    .collect();
                let mut want = naive(&a, op_a, &b, op_b, m, k, n);
                let start: Vec<f64> = (0..m * n).map(|i| (i as f64 * 0.5).sin()).collect();
                if acc {
                    want.iter_mut().zip(&start).for_each(|(w, s)| *w += s);
                }
                let cast = |x: &[f64]| x.iter().map(|&v| T::of(v)).collect::<Vec<T>>();
                let mut c = cast(&start);
                matmul(&mut c, &cast(&a), op_a, &cast(&b), op_b, m, k, n, acc);
                for (i, (x, y)) in c.iter().zip(&want).enumerate() {
                    let err = (x.as_f64() - y).abs();
                    assert!(
                        err < tol * (k as f64).sqrt() * (1.0 + y.abs()),
                        "{} m={m} k={k} n={n} {op_a:?}{op_b:?} acc={acc} entry {i}: {} vs {y}",
                        gemm_kernel(),
                        x.as_f64()
                    );
                }
            }
        }
    }
    check::<f32>(4e-6);
    check::<f64>(1e-14);
}

/// The double-double's ordered fallback computes what gemm computes in f64, for
/// every layout and stride (to f64 rounding), accumulating or not.
#[test]
fn double_double_fallback_matches_gemm() {
    use crate::F64x2;
    let (m, k, n) = (3, 5, 4);
    let (lda, ldb, ldc) = (7, 9, 6);
    let a: Vec<f64> = (0..k * lda).map(|i| (i as f64 * 0.7).sin()).collect();
    let b: Vec<f64> = (0..k * ldb).map(|i| (i as f64 * 0.3).cos()).collect();
    let dd = |x: &[f64]| x.iter().map(|&v| F64x2::of(v)).collect::<Vec<_>>();
    for op_a in [Op::N, Op::T] {
        for op_b in [Op::N, Op::T] {
            for acc in [false, true] {
                let mut c = vec![0.5f64; m * ldc];
                let mut c2 = dd(&c);
                matmul_strided(&mut c, ldc, &a, lda, op_a, &b, ldb, op_b, m, k, n, acc);
                let (a2, b2) = (dd(&a), dd(&b));
                matmul_strided(&mut c2, ldc, &a2, lda, op_a, &b2, ldb, op_b, m, k, n, acc);
                for (x, y) in c.iter().zip(&c2) {
                    assert!((x - y.as_f64()).abs() < 1e-14, "{op_a:?} {op_b:?} {acc}");
                }
            }
        }
    }
}

/// Products through [`with_b_transposed`] are the bits of the same products
/// with `b` used transposed in place, for column prefixes of one `b` (causal
/// attention's blocks; 2 columns: a product `gemm` sums in another order, which
/// must not take the copy), with a strided `b`, in f32 (the copy, where the
/// direct kernel runs) and f64 (`b` as given).
#[test]
fn products_on_a_shared_transposed_b_are_the_products_on_b() {
    fn check<T: Float>(scale: f64) {
        let (m, k, n, ldb) = (64, 32, 150, 40);
        let a: Vec<T> = (0..m * k)
            .map(|i| T::of((i as f64 * 0.37).sin() * scale))
            .collect();
        let b: Vec<T> = (0..n * ldb)
            .map(|i| T::of((i as f64 * 0.11).cos() * 2f64.powi(i as i32 % 9 - 4)))
            .collect();
        let widths = [64, 128, 150, 2];
        let direct: Vec<Vec<T>> = widths
            .iter()
            .map(|&w| {
                let mut c = vec![T::zero(); m * w];
                matmul_strided(&mut c, w, &a, k, Op::N, &b, ldb, Op::T, m, k, w, false);
                c
            })
            .collect();
        with_b_transposed(&b, ldb, n, k, |bt| {
            for (&w, want) in widths.iter().zip(&direct) {
                let mut c = vec![T::zero(); m * w];
                bt.product(&mut c, w, &a, k, Op::N, m, w, false);
                let bits = |v: &[T]| v.iter().map(|x| x.as_f64().to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&c), bits(want), "{} columns", w);
            }
        });
    }
    check::<f32>(3.0);
    check::<f64>(3.0);
}
