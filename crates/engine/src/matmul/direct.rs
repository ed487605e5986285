//! Small f32 products without packing, bit for bit what `gemm` computes.
//!
//! Why hand-written: at the shapes of one attention head (a few dozen query rows,
//! `d_head` 32–100, up to a few hundred keys) `gemm` spends a large part of each
//! call outside its inner kernel: it allocates and fills packed copies of both
//! operands, looks up its cache-blocking plan, and writes ragged edge tiles
//! through a scalar loop. Here the second operand is read in place (its rows are
//! contiguous when it is used as stored), one row of the first is broadcast at a
//! time, and ragged columns are masked loads and stores. Nothing is allocated.
//!
//! Why the bits are `gemm`'s: for a product with `2 < k ≤ 512`, `m, n ≥ 2` and
//! `m·n > 256`, `gemm` (0.19, every x86 kernel that has FMA) runs its
//! register-tiled micro-kernel over one depth block (its depth block is never
//! under `min(k, 512)`): each entry starts at `+0`, takes `acc ← fma(a_ip, b_pj,
//! acc)` for `p = 0, 1, …, k−1` in order, and is stored as `acc` (overwrite) or
//! `fma(1, acc, c) = c + acc` (accumulate). This kernel does exactly that, sixteen
//! entries of a row per register. Outside those shapes (`gemm`'s vector-vector,
//! matrix-vector and tiny-output paths sum in other orders) [`product`] declines
//! and the caller uses `gemm`. The tests compare both, bit for bit.
//!
//! It runs only at [`Level::Avx512`], where the engine's own level allows it
//! (`MECHLAB_SIMD=avx2` sends every product to `gemm`, with the same bits).

use super::Op;
use crate::simd::{self, Level};

/// Past this many multiply-adds the products stay with `gemm`: its cache blocking
/// matters once the operands leave L1, and with the bound at `2²⁴` (the GPT
/// linear layers' backward taken here too) `bench_gpt 60 0` ran 1.6 % slower.
/// `crates/engine/examples/bench_direct.rs` times the shapes below it.
pub(super) const MAX_WORK: usize = 1 << 21;

/// Whether [`product`] takes this shape: exactly the shapes where `gemm` runs its
/// tiled micro-kernel over a single depth block (see the module doc), small
/// enough that skipping its packing pays, with `b` used as stored.
pub(super) fn takes(op_b: Op, m: usize, k: usize, n: usize) -> bool {
    op_b == Op::N
        && (3..=512).contains(&k)
        && m >= 2
        && n >= 2
        && m * n > 256
        && m * k * n <= MAX_WORK
        && simd::level() == Level::Avx512
}

/// `c[m, n] (+)= op(a)[m, k] · b[k, n]`, row-major with row strides `ldc`, `lda`,
/// `ldb`, if [`takes`] says so (returns whether it ran). The caller has checked
/// that every index is inside its slice.
#[allow(clippy::too_many_arguments)]
pub(super) fn product(
    c: &mut [f32],
    ldc: usize,
    a: &[f32],
    lda: usize,
    op_a: Op,
    b: &[f32],
    ldb: usize,
    op_b: Op,
    [m, k, n]: [usize; 3],
    accumulate: bool,
) -> bool {
    if !takes(op_b, m, k, n) {
        return false;
    }
    // a(i, p) sits at a[i·row + p·depth]
    let (row, depth) = match op_a {
        Op::N => (lda, 1),
        Op::T => (1, lda),
    };
    #[cfg(target_arch = "x86_64")]
    {
        let shape = Shape {
            ldc,
            row,
            depth,
            ldb,
            k,
            accumulate,
        };
        // SAFETY: `takes` checked AVX-512 (with every feature the engine's wide
        // level requires); the caller checked that c[(m−1)·ldc + n − 1],
        // a(m−1, k−1) and b[(k−1)·ldb + n − 1] are in their slices, which bounds
        // every address a tile reads or writes (masked lanes touch no memory).
        unsafe { avx512::run(c.as_mut_ptr(), a.as_ptr(), b.as_ptr(), m, n, shape) };
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (c, ldc, a, row, depth, b, ldb, accumulate);
        false
    }
}

/// Strides and options shared by every tile of one product.
#[derive(Clone, Copy)]
struct Shape {
    ldc: usize,
    /// a's step from one output row to the next
    row: usize,
    /// a's step from one depth index to the next
    depth: usize,
    ldb: usize,
    k: usize,
    accumulate: bool,
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::Shape;
    use std::arch::x86_64::*;

    /// Output rows per tile: 8 rows × 32 columns is 16 accumulators, and a
    /// depth step is 2 loads of `b`, 8 broadcasts of `a` and 16 FMAs.
    const ROWS: usize = 8;

    /// The whole product, 32 columns at a time (16 for a last block of at most
    /// 16), every block of rows under them.
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
    pub(super) unsafe fn run(
        c: *mut f32,
        a: *const f32,
        b: *const f32,
        m: usize,
        n: usize,
        s: Shape,
    ) {
        let mut j = 0;
        while j < n {
            let left = n - j;
            let lanes = |w: usize| -> u16 {
                let l = left.saturating_sub(16 * w).min(16);
                ((1u32 << l) - 1) as u16
            };
            let (cj, bj) = (c.add(j), b.add(j));
            if left > 16 {
                rows::<2>(cj, a, bj, m, [lanes(0), lanes(1)], s);
            } else {
                rows::<1>(cj, a, bj, m, [lanes(0)], s);
            }
            j += 32;
        }
    }

    /// One block of columns, `16·W` wide (`mask` per register), for every row.
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
    unsafe fn rows<const W: usize>(
        c: *mut f32,
        a: *const f32,
        b: *const f32,
        m: usize,
        mask: [u16; W],
        s: Shape,
    ) {
        let mut i = 0;
        while i + ROWS <= m {
            tile::<ROWS, W>(c.add(i * s.ldc), a.add(i * s.row), b, mask, s);
            i += ROWS;
        }
        let (c, a) = (c.add(i * s.ldc), a.add(i * s.row));
        match m - i {
            0 => {}
            1 => tile::<1, W>(c, a, b, mask, s),
            2 => tile::<2, W>(c, a, b, mask, s),
            3 => tile::<3, W>(c, a, b, mask, s),
            4 => tile::<4, W>(c, a, b, mask, s),
            5 => tile::<5, W>(c, a, b, mask, s),
            6 => tile::<6, W>(c, a, b, mask, s),
            _ => tile::<7, W>(c, a, b, mask, s),
        }
    }

    /// `R` rows × `16·W` columns: each entry `acc ← fma(a_ip, b_pj, acc)` from
    /// `+0` over `p` in order, then stored, or added to what `c` holds.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
    unsafe fn tile<const R: usize, const W: usize>(
        c: *mut f32,
        a: *const f32,
        b: *const f32,
        mask: [u16; W],
        s: Shape,
    ) {
        // acc: [R, 16·W]
        let mut acc = [[_mm512_setzero_ps(); W]; R];
        let (mut a, mut b) = (a, b);
        for _ in 0..s.k {
            let mut bv = [_mm512_setzero_ps(); W];
            for w in 0..W {
                bv[w] = _mm512_maskz_loadu_ps(mask[w], b.add(16 * w));
            }
            for (r, acc_r) in acc.iter_mut().enumerate() {
                let ar = _mm512_set1_ps(*a.add(r * s.row));
                for w in 0..W {
                    acc_r[w] = _mm512_fmadd_ps(ar, bv[w], acc_r[w]);
                }
            }
            a = a.add(s.depth);
            b = b.add(s.ldb);
        }
        for (r, acc_r) in acc.iter().enumerate() {
            for w in 0..W {
                let at = c.add(r * s.ldc + 16 * w);
                let v = if s.accumulate {
                    _mm512_add_ps(_mm512_maskz_loadu_ps(mask[w], at), acc_r[w])
                } else {
                    acc_r[w]
                };
                _mm512_mask_storeu_ps(at, mask[w], v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::call_gemm;
    use super::*;
    use gemm_common::Parallelism;
    use rand::{Rng, SeedableRng};

    /// Values spread over several binades, so that a different rounding (a
    /// product rounded before its add, or another summation order) shows.
    fn values(rng: &mut rand_chacha::ChaCha8Rng, len: usize) -> Vec<f32> {
        (0..len)
            .map(|_| rng.random_range(-1.0f32..1.0) * 2f32.powi(rng.random_range(-6..6)))
            .collect()
    }

    /// One product both ways, with padded row strides; the bits of every entry
    /// of `c` (padding included) must agree.
    fn same_bits(rng: &mut rand_chacha::ChaCha8Rng, op_a: Op, [m, k, n]: [usize; 3], acc: bool) {
        let (ar, ac) = if op_a == Op::N { (m, k) } else { (k, m) };
        let (lda, ldb, ldc) = (ac + 3, n + 5, n + 2);
        let a = values(rng, ar * lda);
        let b = values(rng, k * ldb);
        let c0 = values(rng, m * ldc);
        let mut want = c0.clone();
        let shape = [m, k, n];
        call_gemm(
            &mut want,
            ldc,
            &a,
            lda,
            op_a,
            &b,
            ldb,
            Op::N,
            shape,
            acc,
            Parallelism::None,
        );
        let mut got = c0;
        assert!(product(
            &mut got,
            ldc,
            &a,
            lda,
            op_a,
            &b,
            ldb,
            Op::N,
            shape,
            acc
        ));
        for (idx, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                g.to_bits(),
                w.to_bits(),
                "{op_a:?} {shape:?} accumulate {acc}: c[{}, {}] is {g}, gemm {w}",
                idx / ldc,
                idx % ldc
            );
        }
    }

    #[test]
    fn equals_gemm_bit_for_bit() {
        if simd::level() != Level::Avx512 {
            return; // the kernel does not run here; `gemm` computes every product
        }
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        // Row counts that leave every remainder from 0 to 7 under the 8-row
        // tiles, column counts around the 16- and 32-lane blocks, depths from the smallest taken to gemm's block, and the
        // shapes attention uses (d_head 32, blocks of 64 queries, topic's 19 × 100).
        for &(m, k, n) in &[
            (19, 100, 120),
            (120, 19, 100),
            (64, 128, 32),
            (128, 64, 32),
            (2, 3, 129),
            (9, 3, 33),
            (17, 512, 17),
            (8, 31, 48),
            (7, 64, 64),
            (33, 5, 16),
            (65, 40, 31),
            (3, 250, 100),
            (4, 17, 70),
            (5, 9, 60),
            (6, 12, 50),
            (13, 33, 40),
            (11, 8, 32),
            (12, 64, 24),
        ] {
            for op_a in [Op::N, Op::T] {
                for acc in [false, true] {
                    same_bits(&mut rng, op_a, [m, k, n], acc);
                }
            }
        }
    }

    #[test]
    fn declines_what_gemm_sums_in_another_order() {
        // vector-vector (k ≤ 2), matrix-vector (a single row or column), tiny
        // outputs (m·n ≤ 256), depths past one gemm block, `b` transposed
        assert!(!takes(Op::N, 64, 2, 64));
        assert!(!takes(Op::N, 1, 64, 512));
        assert!(!takes(Op::N, 512, 64, 1));
        assert!(!takes(Op::N, 16, 64, 16));
        assert!(!takes(Op::N, 64, 513, 64));
        assert!(!takes(Op::T, 64, 64, 64));
        assert!(!takes(Op::N, 1024, 1024, 1024));
        let mut c = vec![0.0f32; 4];
        assert!(!product(
            &mut c,
            2,
            &[1.0; 4],
            2,
            Op::N,
            &[1.0; 4],
            2,
            Op::N,
            [2, 2, 2],
            false
        ));
    }
}
