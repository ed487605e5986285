//! Small f32 products without packing, bit for bit what `gemm` computes.
//!
//! Why hand-written: at the shapes of one attention head (a few dozen query rows,
//! `d_head` 32–100, up to a few hundred keys) `gemm` spends a large part of each
//! call outside its inner kernel: it allocates and fills packed copies of both
//! operands, looks up its cache-blocking plan, and writes ragged edge tiles
//! through a scalar loop. Here the second operand is read in place when it is
//! used as stored (its rows are contiguous), or first copied into that order
//! through 16 × 16 register transposes when it is used transposed (`q·kᵀ`,
//! `dz·vᵀ`); one entry of the first operand is broadcast at a time, and ragged
//! columns are masked loads and stores. Nothing is allocated once a thread's
//! copy buffer has grown to its largest product.
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
//!
//! What it wins depends on the processor and on where the operands are. Alone
//! in a loop on an Intel Xeon (family 6, model 207; `bench_direct` on one quiet
//! core) it took 0.67–0.90 of `gemm`'s time with `b` as stored or `a`
//! transposed, and 0.93–1.24 times `gemm`'s with `b` transposed (the copy); in a
//! GPT training step both ran at the same rate, waiting on operands written long
//! before (`bench/gpt/README.md`).

use super::{Op, Product};
use crate::simd::{self, Level};

/// Past this many multiply-adds the products stay with `gemm`: its cache blocking
/// matters once the operands leave L1, and with the bound at `2²⁴` (the GPT
/// linear layers' backward taken here too) `bench_gpt 60 0` ran 1.6 % slower.
/// `crates/engine/examples/bench_direct.rs` times the shapes below it.
pub(super) const MAX_WORK: usize = 1 << 21;

/// A transposed `b` is first copied into `[k, n]` order (a thread's own buffer,
/// 16 × 16 blocks transposed in registers); past this many entries that copy
/// stops fitting the first-level caches and the product stays with `gemm`.
pub(super) const MAX_PACKED: usize = 1 << 14;

/// Whether [`product`] takes this shape: exactly the shapes where `gemm` runs its
/// tiled micro-kernel over a single depth block (see the module doc), small
/// enough that skipping its packing pays.
pub(super) fn takes(op_b: Op, m: usize, k: usize, n: usize) -> bool {
    shape_taken(op_b, m, k, n) && simd::level() == Level::Avx512
}

/// [`takes`]'s conditions on the shape alone, whatever the processor.
pub(super) fn shape_taken(op_b: Op, m: usize, k: usize, n: usize) -> bool {
    (3..=512).contains(&k)
        && m >= 2
        && n >= 2
        && m * n > 256
        && m * k * n <= MAX_WORK
        && (op_b == Op::N || k * n <= MAX_PACKED)
}

#[cfg(target_arch = "x86_64")]
thread_local! {
    /// `b` in `[k, n]` order when it comes transposed: grown to the largest
    /// product a thread has seen, then reused, so a training step allocates nothing.
    static PACKED: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Computes `p` if [`takes`] says so (returns whether it ran). The caller has
/// checked that every index is inside its slice.
pub(super) fn product(p: Product<'_, f32>) -> bool {
    let (m, k, n, ldb) = (p.m, p.k, p.n, p.ldb);
    if !takes(p.op_b, m, k, n) {
        return false;
    }
    // a(i, q) sits at a[i·row + q·depth]
    let (row, depth) = p.a_steps();
    #[cfg(target_arch = "x86_64")]
    {
        let shape = Shape {
            ldc: p.ldc,
            row,
            depth,
            ldb,
            k,
            accumulate: p.accumulate,
        };
        // SAFETY (both calls): `takes` checked AVX-512 (with every feature the
        // engine's wide level requires); the caller checked that c[(m−1)·ldc + n − 1],
        // a(m−1, k−1) and op(b)(k−1, n−1) are in their slices, which bounds every
        // address a tile or the copy reads or writes (masked lanes touch no
        // memory), and the copy fills `k·n` entries of a buffer at least that long.
        let (c, a, b) = (p.c, p.a, p.b);
        if p.op_b == Op::N {
            unsafe { avx512::run(c.as_mut_ptr(), a.as_ptr(), b.as_ptr(), m, n, shape) };
        } else {
            PACKED.with(|cell| {
                let mut bt = cell.borrow_mut();
                if bt.len() < k * n {
                    bt.resize(k * n, 0.0);
                }
                unsafe {
                    avx512::transpose(bt.as_mut_ptr(), b.as_ptr(), ldb, n, k);
                    let shape = Shape { ldb: n, ..shape };
                    avx512::run(c.as_mut_ptr(), a.as_ptr(), bt.as_ptr(), m, n, shape);
                }
            });
        }
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (p, row, depth, ldb);
        false
    }
}

/// `f(bᵀ)` with `b` (`[n, k]`, row stride `ldb`) copied into a thread's own dense
/// `[k, n]` buffer (the copy [`product`] makes for a transposed `b`), for
/// [`super::with_b_transposed`], which checked AVX-512 and that `b` spans `n`
/// rows of `k`.
#[cfg(target_arch = "x86_64")]
pub(super) fn with_transposed<R>(
    b: &[f32],
    ldb: usize,
    n: usize,
    k: usize,
    f: impl FnOnce(&[f32]) -> R,
) -> R {
    thread_local! {
        /// Its own buffer: the products `f` runs may take `PACKED`.
        static SHARED: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    assert!(
        simd::level() == Level::Avx512,
        "direct: a transposed copy without AVX-512"
    );
    SHARED.with(|cell| {
        let mut bt = cell.borrow_mut();
        if bt.len() < k * n {
            bt.resize(k * n, 0.0);
        }
        // SAFETY: AVX-512 is here (asserted); b holds n rows of k at stride ldb
        // (the caller checked), and bt at least k·n entries.
        unsafe { avx512::transpose(bt.as_mut_ptr(), b.as_ptr(), ldb, n, k) };
        f(&bt[..k * n])
    })
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

    /// `out[q, j] = x[j, q]` for `x` stored `[rows, cols]` with row stride `ld`,
    /// `out` dense `[cols, rows]`: 16 × 16 blocks, each loaded as 16 rows
    /// (masked at the edges) and transposed in registers.
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
    pub(super) unsafe fn transpose(
        out: *mut f32,
        x: *const f32,
        ld: usize,
        rows: usize,
        cols: usize,
    ) {
        let lanes = |l: usize| ((1u32 << l.min(16)) - 1) as u16;
        let mut j = 0;
        while j < rows {
            let jn = (rows - j).min(16);
            let mut q = 0;
            while q < cols {
                let qn = (cols - q).min(16);
                let mut r = [_mm512_setzero_ps(); 16];
                for (l, rl) in r.iter_mut().enumerate().take(jn) {
                    *rl = _mm512_maskz_loadu_ps(lanes(qn), x.add((j + l) * ld + q));
                }
                let t = block16(r);
                for (s, ts) in t.iter().enumerate().take(qn) {
                    _mm512_mask_storeu_ps(out.add((q + s) * rows + j), lanes(jn), *ts);
                }
                q += 16;
            }
            j += 16;
        }
    }

    /// The 16 × 16 transpose: `t[s][l] = r[l][s]`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
    unsafe fn block16(r: [__m512; 16]) -> [__m512; 16] {
        // pairs of rows interleaved by 32-bit entries (within each 128-bit block)
        let mut a = [_mm512_setzero_ps(); 16];
        for g in 0..8 {
            a[2 * g] = _mm512_unpacklo_ps(r[2 * g], r[2 * g + 1]);
            a[2 * g + 1] = _mm512_unpackhi_ps(r[2 * g], r[2 * g + 1]);
        }
        // c[g][s], block u: column 4u + s of rows 4g … 4g + 3
        let mut c = [[_mm512_setzero_ps(); 4]; 4];
        let lo = |x: __m512, y: __m512| {
            _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(x), _mm512_castps_pd(y)))
        };
        let hi = |x: __m512, y: __m512| {
            _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(x), _mm512_castps_pd(y)))
        };
        for (g, cg) in c.iter_mut().enumerate() {
            let (x0, x1, y0, y1) = (a[4 * g], a[4 * g + 1], a[4 * g + 2], a[4 * g + 3]);
            *cg = [lo(x0, y0), hi(x0, y0), lo(x1, y1), hi(x1, y1)];
        }
        // gather block u of c[0][s] … c[3][s] into column 4u + s
        let mut t = [_mm512_setzero_ps(); 16];
        for s in 0..4 {
            let d0 = _mm512_shuffle_f32x4::<0x88>(c[0][s], c[1][s]);
            let d1 = _mm512_shuffle_f32x4::<0xDD>(c[0][s], c[1][s]);
            let d2 = _mm512_shuffle_f32x4::<0x88>(c[2][s], c[3][s]);
            let d3 = _mm512_shuffle_f32x4::<0xDD>(c[2][s], c[3][s]);
            t[s] = _mm512_shuffle_f32x4::<0x88>(d0, d2);
            t[4 + s] = _mm512_shuffle_f32x4::<0x88>(d1, d3);
            t[8 + s] = _mm512_shuffle_f32x4::<0xDD>(d0, d2);
            t[12 + s] = _mm512_shuffle_f32x4::<0xDD>(d1, d3);
        }
        t
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
    fn same_bits(
        rng: &mut rand_chacha::ChaCha8Rng,
        (op_a, op_b): (Op, Op),
        [m, k, n]: [usize; 3],
        acc: bool,
    ) {
        let (ar, ac) = if op_a == Op::N { (m, k) } else { (k, m) };
        let (br, bc) = if op_b == Op::N { (k, n) } else { (n, k) };
        let (lda, ldb, ldc) = (ac + 3, bc + 5, n + 2);
        let a = values(rng, ar * lda);
        let b = values(rng, br * ldb);
        let c0 = values(rng, m * ldc);
        let (mut want, mut got) = (c0.clone(), c0);
        let shape = [m, k, n];
        let product_into = |c| Product {
            c,
            ldc,
            a: &a,
            lda,
            op_a,
            b: &b,
            ldb,
            op_b,
            m,
            k,
            n,
            accumulate: acc,
        };
        call_gemm(product_into(&mut want), Parallelism::None);
        assert!(product(product_into(&mut got)));
        for (idx, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                g.to_bits(),
                w.to_bits(),
                "{op_a:?}{op_b:?} {shape:?} accumulate {acc}: c[{}, {}] is {g}, gemm {w}",
                idx / ldc,
                idx % ldc
            );
        }
    }

    #[test]
    fn equals_gemm_bit_for_bit() {
        if simd::level() != Level::Avx512 {
            // the kernel does not run here; `gemm` computes every product
            let why = format!("no AVX-512 (level {:?})", simd::level());
            return crate::testutil::not_run("equals_gemm_bit_for_bit", &why);
        }
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        // Row counts that leave every remainder from 0 to 7 under the 8-row
        // tiles, column counts around the 16- and 32-lane blocks, depths from the
        // smallest taken to gemm's block, and the shapes attention uses (d_head
        // 32, blocks of 64 queries, topic's 19 × 100).
        for &(m, k, n) in &[
            (19, 100, 120),
            (120, 19, 100),
            (64, 32, 128),
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
            for ops in [
                (Op::N, Op::N),
                (Op::T, Op::N),
                (Op::N, Op::T),
                (Op::T, Op::T),
            ] {
                for acc in [false, true] {
                    if takes(ops.1, m, k, n) {
                        same_bits(&mut rng, ops, [m, k, n], acc);
                    }
                }
            }
        }
    }

    #[test]
    fn transposes_every_block_and_edge() {
        if simd::level() != Level::Avx512 {
            let why = format!("no AVX-512 (level {:?})", simd::level());
            return crate::testutil::not_run("transposes_every_block_and_edge", &why);
        }
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(8);
        for (rows, cols) in [(1, 1), (16, 16), (5, 40), (17, 3), (33, 47), (40, 16)] {
            let ld = cols + 2;
            let x = values(&mut rng, rows * ld);
            let mut out = vec![f32::NAN; rows * cols + 1];
            // SAFETY: AVX-512 is here; x holds rows·ld, out rows·cols entries.
            unsafe { avx512::transpose(out.as_mut_ptr(), x.as_ptr(), ld, rows, cols) };
            for j in 0..rows {
                for q in 0..cols {
                    assert_eq!(
                        out[q * rows + j].to_bits(),
                        x[j * ld + q].to_bits(),
                        "{rows}×{cols} [{j}, {q}]"
                    );
                }
            }
            assert!(
                out[rows * cols].is_nan(),
                "{rows}×{cols}: wrote past the end"
            );
        }
    }

    #[test]
    fn declines_what_gemm_sums_in_another_order() {
        // vector-vector (k ≤ 2), matrix-vector (a single row or column), tiny
        // outputs (m·n ≤ 256), depths past one gemm block, a transposed `b` past
        // the copy's bound, work past the bound
        assert!(!takes(Op::N, 64, 2, 64));
        assert!(!takes(Op::N, 1, 64, 512));
        assert!(!takes(Op::N, 512, 64, 1));
        assert!(!takes(Op::N, 16, 64, 16));
        assert!(!takes(Op::N, 64, 513, 64));
        assert!(!takes(Op::T, 64, 128, 256));
        assert!(takes(Op::T, 64, 128, 128));
        assert!(!takes(Op::N, 1024, 1024, 1024));
        let mut c = vec![0.0f32; 4];
        let p = Product {
            c: &mut c,
            ldc: 2,
            a: &[1.0; 4],
            lda: 2,
            op_a: Op::N,
            b: &[1.0; 4],
            ldb: 2,
            op_b: Op::N,
            m: 2,
            k: 2,
            n: 2,
            accumulate: false,
        };
        assert!(!product(p));
    }
}
