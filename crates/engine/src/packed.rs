//! An inference linear map `y = x·Wᵀ + b` whose weight is packed once, at load, for
//! an `f32` AVX-512 product kernel: the BERT encoder's linear maps.
//!
//! Why by hand: `gemm` (0.19) has no way to keep an operand packed between calls,
//! so every product re-packs the weight. Packing once at load and running a
//! plain register-blocked kernel over the panels is a little faster.
//! Measured on the 2-core machine (2026-12-04, `cargo run --release --example
//! bench_packed 1024`, one thread, 1 024 rows, GFLOP/s, `gemm` through the engine's
//! `linear::forward` → packed): 229 → 250 at `in = 384, out = 1536`, 215 → 255 at
//! `1536 → 384`, 239 → 256 at `384 → 384` (1.07–1.18×); a whole BERT pass
//! (`bench_bert --speed`, 2 threads, four interleaved pairs against the code
//! before) 1.98 → 1.81 s, medians (1.09×). The kernel is small, so it is written
//! here with `std::arch` intrinsics rather than pulled from a crate; without
//! AVX-512 (or off x86-64) [`PackedLinear`] keeps `W` as given and calls
//! [`crate::layers::linear::forward`] (`gemm`), and a test compares the two paths.
//!
//! **Layout.** `W` (`[out, in]`, as PyTorch stores it) becomes `⌈out/32⌉` panels of
//! `[in, 32]`, the last zero-padded; the bias is padded alike. The kernel keeps a
//! 14 × 32 block of `y` in 28 of the 32 vector registers, and for each `k` loads the
//! panel's 32 weights (two 512-bit loads) and broadcasts 14 entries of `x`, read in
//! place from its rows: nothing is packed per call, and nothing is allocated.
//! Each output sums `x[i,k]·W[j,k]` over `k = 0, 1, …, in−1` in order, one fused
//! multiply-add per term, then adds the bias: within `f32` rounding of `gemm`'s
//! result (which may split the sum over `k` in blocks), and bit-identical from run
//! to run and for any batching of the rows.
//!
//! ```
//! use mechlab_engine::packed::PackedLinear;
//! let w = [1.0f32, 2.0, 0.0, -1.0]; // out = 2, in = 2
//! let lin = PackedLinear::new(&w, Some(&[0.5, 0.0]), 2, 2);
//! let mut y = [0.0f32; 2];
//! lin.forward(&mut y, &[3.0, 4.0], 1);
//! assert_eq!(y, [11.5, -4.0]);
//! ```

use crate::layers::linear;

/// Columns of `y` (rows of `W`) per panel: two 512-bit registers of `f32`.
const NR: usize = 32;
/// Rows of `y` per kernel call: 14 × 2 accumulators leave 4 registers for loads.
const MR: usize = 14;
/// Rows per block: `x`'s block (`MC · in` floats) stays in L2 while the panels pass.
const MC: usize = 8 * MR;

/// Which product a [`PackedLinear`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// The packed AVX-512 kernel of this module.
    Avx512,
    /// [`crate::layers::linear::forward`] on `W` as given (`gemm`).
    Gemm,
}

impl Kernel {
    /// The packed kernel where the processor has AVX-512F, `gemm` otherwise.
    pub fn detect() -> Kernel {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                return Kernel::Avx512;
            }
        }
        Kernel::Gemm
    }
}

/// `y = x·Wᵀ + b` for a fixed `W` (`[out, in]`) and optional bias (`[out]`).
#[derive(Clone, Debug)]
pub struct PackedLinear {
    d_in: usize,
    d_out: usize,
    kernel: Kernel,
    /// Avx512: the panels `[⌈out/32⌉, in, 32]`; Gemm: `W` as given.
    w: Vec<f32>,
    /// Avx512: padded to the panels' width (zeros where absent); Gemm: as given.
    b: Option<Vec<f32>>,
}

impl PackedLinear {
    /// Packs `w` (`[d_out, d_in]`) and `b` (`[d_out]`) for the kernel this
    /// processor runs ([`Kernel::detect`]).
    pub fn new(w: &[f32], b: Option<&[f32]>, d_out: usize, d_in: usize) -> Self {
        Self::with_kernel(w, b, d_out, d_in, Kernel::detect())
    }

    /// As [`PackedLinear::new`] with the kernel chosen; `Kernel::Avx512` on a
    /// processor without AVX-512F falls back to `Gemm` (never an illegal instruction).
    pub fn with_kernel(
        w: &[f32],
        b: Option<&[f32]>,
        d_out: usize,
        d_in: usize,
        kernel: Kernel,
    ) -> Self {
        assert_eq!(w.len(), d_out * d_in, "packed linear: W is not [out, in]");
        if let Some(b) = b {
            assert_eq!(b.len(), d_out, "packed linear: b is not [out]");
        }
        let kernel = if kernel == Kernel::Avx512 {
            Kernel::detect()
        } else {
            kernel
        };
        if kernel == Kernel::Gemm {
            return PackedLinear {
                d_in,
                d_out,
                kernel,
                w: w.to_vec(),
                b: b.map(<[f32]>::to_vec),
            };
        }
        let panels = d_out.div_ceil(NR);
        let mut packed = vec![0.0f32; panels * d_in * NR];
        // packed[p, k, c] = W[p·32 + c, k]
        for (j, row) in w.chunks_exact(d_in.max(1)).enumerate().take(d_out) {
            let (p, c) = (j / NR, j % NR);
            for (kk, &v) in row.iter().enumerate() {
                packed[(p * d_in + kk) * NR + c] = v;
            }
        }
        let mut bias = vec![0.0f32; panels * NR];
        if let Some(b) = b {
            bias[..d_out].copy_from_slice(b);
        }
        PackedLinear {
            d_in,
            d_out,
            kernel,
            w: packed,
            b: b.map(|_| bias),
        }
    }

    /// The kernel this map runs.
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// `y = x·Wᵀ + b` over `n` rows, overwriting `y`.
    pub fn forward(&self, y: &mut [f32], x: &[f32], n: usize) {
        // x: [N, in] -> y: [N, out]
        let (d_in, d_out) = (self.d_in, self.d_out);
        assert_eq!(x.len(), n * d_in, "packed linear: x is not [N, in]");
        assert_eq!(y.len(), n * d_out, "packed linear: y is not [N, out]");
        match self.kernel {
            Kernel::Gemm => linear::forward(y, x, &self.w, self.b.as_deref(), n, d_in, d_out),
            Kernel::Avx512 => {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `kernel` is Avx512 only where `Kernel::detect` saw AVX-512F;
                // the asserts above give the sizes `avx512::forward` relies on.
                unsafe {
                    avx512::forward(y, x, &self.w, self.b.as_deref(), n, d_in, d_out)
                }
                #[cfg(not(target_arch = "x86_64"))]
                unreachable!("the AVX-512 kernel is only chosen on x86-64")
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{MC, MR, NR};
    use std::arch::x86_64::*;

    /// `y[N, out] = x[N, in] · panelsᵀ + bias`, row blocks of `MC`, then panels,
    /// then `MR`-row tiles (shorter tiles for the last rows).
    ///
    /// # Safety
    /// The processor has AVX-512F; `y` is `[n, d_out]`, `x` is `[n, d_in]`,
    /// `panels` is `[⌈d_out/32⌉, d_in, 32]` and `bias`, if any, `[⌈d_out/32⌉·32]`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn forward(
        y: &mut [f32],
        x: &[f32],
        panels: &[f32],
        bias: Option<&[f32]>,
        n: usize,
        d_in: usize,
        d_out: usize,
    ) {
        let zero = [0.0f32; NR];
        let (xp, yp) = (x.as_ptr(), y.as_mut_ptr());
        for r0 in (0..n).step_by(MC) {
            let r1 = (r0 + MC).min(n);
            for p in 0..d_out.div_ceil(NR) {
                let panel = panels.as_ptr().add(p * d_in * NR);
                let b = bias.map_or(zero.as_ptr(), |b| b.as_ptr().add(p * NR));
                let cols = (d_out - p * NR).min(NR);
                let mut i = r0;
                while i < r1 {
                    // SAFETY (each tile): rows i..i+rows < n of x and y, columns
                    // p·32 .. p·32+cols of y; the masks keep stores within `cols`.
                    let (xi, yi) = (xp.add(i * d_in), yp.add(i * d_out + p * NR));
                    let rows = match r1 - i {
                        r if r >= MR => {
                            tile::<MR>(xi, d_in, panel, b, yi, d_out, cols);
                            MR
                        }
                        r if r >= 8 => {
                            tile::<8>(xi, d_in, panel, b, yi, d_out, cols);
                            8
                        }
                        r if r >= 4 => {
                            tile::<4>(xi, d_in, panel, b, yi, d_out, cols);
                            4
                        }
                        r if r >= 2 => {
                            tile::<2>(xi, d_in, panel, b, yi, d_out, cols);
                            2
                        }
                        _ => {
                            tile::<1>(xi, d_in, panel, b, yi, d_out, cols);
                            1
                        }
                    };
                    i += rows;
                }
            }
        }
    }

    /// One `R × 32` tile: `y[i, c] = Σ_k x[i, k]·panel[k, c] + b[c]` for `c < cols`.
    /// Inlined into the `avx512f` caller, whose target features it compiles under.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile<const R: usize>(
        x: *const f32,
        ldx: usize,
        panel: *const f32,
        b: *const f32,
        y: *mut f32,
        ldy: usize,
        cols: usize,
    ) {
        let mut acc = [[_mm512_setzero_ps(); 2]; R];
        for k in 0..ldx {
            let w0 = _mm512_loadu_ps(panel.add(k * NR));
            let w1 = _mm512_loadu_ps(panel.add(k * NR + 16));
            for (r, a) in acc.iter_mut().enumerate() {
                let xv = _mm512_set1_ps(*x.add(r * ldx + k));
                a[0] = _mm512_fmadd_ps(xv, w0, a[0]);
                a[1] = _mm512_fmadd_ps(xv, w1, a[1]);
            }
        }
        let (b0, b1) = (_mm512_loadu_ps(b), _mm512_loadu_ps(b.add(16)));
        let m0: __mmask16 = if cols >= 16 {
            0xffff
        } else {
            (1u16 << cols) - 1
        };
        let m1: __mmask16 = match cols {
            32 => 0xffff,
            c if c > 16 => (1u16 << (c - 16)) - 1,
            _ => 0,
        };
        for (r, a) in acc.iter().enumerate() {
            let row = y.add(r * ldy);
            _mm512_mask_storeu_ps(row, m0, _mm512_add_ps(a[0], b0));
            // wrapping: past the last column the pointer may leave y; mask 0 stores nothing
            _mm512_mask_storeu_ps(row.wrapping_add(16), m1, _mm512_add_ps(a[1], b1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn random(n: usize, rng: &mut ChaCha8Rng) -> Vec<f32> {
        (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
    }

    /// Both kernels against an f64 sum, at shapes that leave partial tiles and a
    /// partial panel: each within the f32 error bound `in·ε·Σ|x||W|` (+ the bias
    /// rounding), and within twice that of each other.
    #[test]
    fn both_kernels_match_an_f64_product_at_ragged_shapes() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for &(n, d_in, d_out) in &[
            (1, 1, 1),
            (29, 37, 45),
            (127, 384, 384),
            (15, 64, 33),
            (3, 5, 17),
        ] {
            let (x, w, b) = (
                random(n * d_in, &mut rng),
                random(d_out * d_in, &mut rng),
                random(d_out, &mut rng),
            );
            let mut ys = Vec::new();
            for kernel in [Kernel::Avx512, Kernel::Gemm] {
                let lin = PackedLinear::with_kernel(&w, Some(&b), d_out, d_in, kernel);
                let mut y = vec![f32::NAN; n * d_out];
                lin.forward(&mut y, &x, n);
                for i in 0..n {
                    for j in 0..d_out {
                        let (mut exact, mut size) = (b[j] as f64, b[j].abs() as f64);
                        for k in 0..d_in {
                            let t = x[i * d_in + k] as f64 * w[j * d_in + k] as f64;
                            exact += t;
                            size += t.abs();
                        }
                        let bound = (d_in as f64 + 2.0) * f32::EPSILON as f64 * size;
                        let got = y[i * d_out + j] as f64;
                        assert!(
                            (got - exact).abs() <= bound,
                            "{kernel:?} {n}x{d_in}->{d_out} [{i},{j}]: {got} vs {exact}"
                        );
                    }
                }
                ys.push(y);
            }
            if Kernel::detect() == Kernel::Avx512 {
                assert_eq!(
                    PackedLinear::with_kernel(&w, None, d_out, d_in, Kernel::Avx512).kernel(),
                    Kernel::Avx512
                );
            }
        }
    }

    /// Rows are independent: a row's output does not depend on which tile or
    /// block it fell in (n = 1 versus a batch of 131 rows), bit for bit.
    #[test]
    fn a_row_gives_the_same_bits_alone_and_in_a_batch() {
        let mut rng = ChaCha8Rng::seed_from_u64(8);
        let (n, d_in, d_out) = (131, 96, 70);
        let (x, w, b) = (
            random(n * d_in, &mut rng),
            random(d_out * d_in, &mut rng),
            random(d_out, &mut rng),
        );
        let lin = PackedLinear::new(&w, Some(&b), d_out, d_in);
        let mut all = vec![0.0; n * d_out];
        lin.forward(&mut all, &x, n);
        for i in [0, 13, 14, 111, 112, 130] {
            let mut one = vec![0.0; d_out];
            lin.forward(&mut one, &x[i * d_in..(i + 1) * d_in], 1);
            assert_eq!(one, all[i * d_out..(i + 1) * d_out], "row {i}");
        }
    }

    /// A bias-free map adds nothing, and stores never pass the last column: the
    /// partial panel leaves `y`'s neighbours (a larger buffer's tail) untouched.
    #[test]
    fn a_partial_panel_writes_only_its_columns() {
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let (n, d_in, d_out) = (3, 8, 5);
        let (x, w) = (random(n * d_in, &mut rng), random(d_out * d_in, &mut rng));
        let lin = PackedLinear::new(&w, None, d_out, d_in);
        let mut buf = vec![7.0f32; n * d_out + 40];
        lin.forward(&mut buf[..n * d_out], &x, n);
        assert!(buf[n * d_out..].iter().all(|&v| v == 7.0));
        let mut reference = vec![0.0f32; n * d_out];
        linear::forward(&mut reference, &x, &w, None, n, d_in, d_out);
        for (a, r) in buf.iter().zip(&reference) {
            assert!((a - r).abs() <= 1e-5, "{a} vs {r}");
        }
    }
}
