//! `f32` `exp` with the system libm's bits, sixteen at a time: training's
//! softmax and cross-entropy rows call it instead of `f32::exp`.
//!
//! Why by hand: `f32::exp` is one scalar call into libm per entry, and those
//! calls were the largest cost outside the matrix products in training (8 % of
//! an lm-induction run, 13 % of topic-attention's epoch). [`crate::simd`]'s
//! `exp` is faster still but rounds differently (within 2 ulp), which would move
//! every f32 preset's numbers; this one changes none of them.
//!
//! It is glibc's `expf` (since 2.28; its FMA build, which the library picks on
//! any processor with FMA) recomputed lane by lane in `f64`:
//! `x·32/ln 2 = k + r` with `k` rounded to the nearest integer by adding
//! `1.5·2⁵²`, `2^(k/32)` read from a 32-entry table and scaled by `k div 32` in
//! the exponent bits, and `2^(r/32)` a cubic in `r`. glibc's compiler contracts
//! both uses of `x·32/ln 2` into FMAs (`k` and `r`), so these do too, and with
//! that the results equal glibc's for **all 2³² inputs** (the test sweeps a
//! stride of them against `f32::exp`; the `--ignored` one sweeps every input).
//! The cubic's three coefficients are glibc's minimax fit (Arm's
//! optimized-routines), needed for the bits; the table is `2^(i/32)` rounded
//! to `f64`, which the test recomputes in double-double.
//!
//! Paths: AVX-512 with `std::arch` intrinsics, because the table lookup is two
//! `vpermt2q` (a 32-entry table is four registers) where the compiler emits a
//! gather; AVX2 as the scalar body compiled under `#[target_feature]`, which the
//! compiler vectorises with a gather; the baseline as the scalar body, whose
//! `mul_add` is libm's `fma`. Every path computes the same bits.
//!
//! ```
//! use mechlab_engine::expf;
//! let mut row = [0.0f32, -1.0, -100.0, f32::NEG_INFINITY];
//! expf::shifted_in_place(&mut row, 0.0);
//! assert_eq!(row.map(f32::to_bits), [0.0f32, -1.0, -100.0, f32::NEG_INFINITY].map(|x| x.exp().to_bits()));
//! ```

use crate::simd::{self, Level};

/// `TAB[i] = bits(2^(i/32)) − (i << 47)`: adding `k << 47` restores the entry's
/// exponent and scales it by `2^(k div 32)` in one integer add.
const TAB: [u64; 32] = [
    0x3ff0000000000000,
    0x3fefd9b0d3158574,
    0x3fefb5586cf9890f,
    0x3fef9301d0125b51,
    0x3fef72b83c7d517b,
    0x3fef54873168b9aa,
    0x3fef387a6e756238,
    0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715,
    0x3feef1a7373aa9cb,
    0x3feedea64c123422,
    0x3feece086061892d,
    0x3feebfdad5362a27,
    0x3feeb42b569d4f82,
    0x3feeab07dd485429,
    0x3feea47eb03a5585,
    0x3feea09e667f3bcd,
    0x3fee9f75e8ec5f74,
    0x3feea11473eb0187,
    0x3feea589994cce13,
    0x3feeace5422aa0db,
    0x3feeb737b0cdc5e5,
    0x3feec49182a3f090,
    0x3feed503b23e255d,
    0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47,
    0x3fef199bdd85529c,
    0x3fef3720dcef9069,
    0x3fef5818dcfba487,
    0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da,
    0x3fefd0765b6e4540,
];
/// Table entries per doubling.
const N: f64 = 32.0;
/// `32 / ln 2`.
const INV_LN2_N: f64 = f64::from_bits(0x3ff71547652b82fe) * N;
/// `1.5·2⁵²`: adding it rounds to the nearest integer (ties to even) and leaves
/// that integer in the low mantissa bits.
const SHIFT: f64 = f64::from_bits(0x4338000000000000);
/// `2^(r/32) ≈ 1 + C2·r + C1·r² + C0·r³`.
const C0: f64 = f64::from_bits(0x3fac6af84b912394) / N / N / N;
const C1: f64 = f64::from_bits(0x3fcebfce50fac4f3) / N / N;
const C2: f64 = f64::from_bits(0x3fe62e42ff0c52d6) / N;
/// Above this (`≈ 88.72`, ln of 2¹²⁸) the result is `+∞`.
const HI: f32 = f32::from_bits(0x42b17217);
/// Below this (`≈ −103.97`, ln of 2⁻¹⁵⁰) the result is `+0`.
const LO: f32 = f32::from_bits(0xc2cff1b4);

/// `e^x`, equal to glibc's `expf(x)` for every `x` (module doc).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    let xd = x as f64;
    let kd = INV_LN2_N.mul_add(xd, SHIFT);
    let ki = kd.to_bits();
    let kd = kd - SHIFT;
    let r = INV_LN2_N.mul_add(xd, -kd);
    // NaN and out-of-range lanes compute garbage here (no panic: the index is
    // masked, the add wraps) and are replaced below, without a branch
    let s = f64::from_bits(TAB[(ki & 31) as usize].wrapping_add(ki << 47));
    let z = C0.mul_add(r, C1);
    let y = C2.mul_add(r, 1.0);
    let y = (z.mul_add(r * r, y) * s) as f32;
    let y = if x > HI { f32::INFINITY } else { y };
    let y = if x < LO { 0.0 } else { y };
    if x.is_nan() {
        x + x
    } else {
        y
    }
}

/// `x ← e^(x − m)` for every entry: `(x − m).exp()` bit for bit.
pub fn shifted_in_place(xs: &mut [f32], m: f32) {
    shifted_in_place_at(simd::level(), xs, m)
}

/// `out ← e^(x − m)` entry by entry: `(x − m).exp()` bit for bit.
pub fn shifted_into(out: &mut [f32], xs: &[f32], m: f32) {
    shifted_into_at(simd::level(), out, xs, m)
}

/// [`shifted_in_place`] at a given level (tests compare the levels); panics if
/// this processor lacks it.
pub fn shifted_in_place_at(at: Level, xs: &mut [f32], m: f32) {
    // xs: [N]
    assert!(at <= simd::level(), "{at:?} is not supported here");
    match at {
        // SAFETY: `at` is a level this processor has; `xs` is valid for its length.
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 => unsafe { avx512::shifted(xs.as_mut_ptr(), xs.as_ptr(), xs.len(), m) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 => unsafe { avx2_in_place(xs, m) },
        _ => xs.iter_mut().for_each(|v| *v = exp(*v - m)),
    }
}

/// [`shifted_into`] at a given level; panics if this processor lacks it.
pub fn shifted_into_at(at: Level, out: &mut [f32], xs: &[f32], m: f32) {
    // xs: [N] -> out: [N]
    assert_eq!(out.len(), xs.len(), "expf: out and xs differ in length");
    assert!(at <= simd::level(), "{at:?} is not supported here");
    match at {
        // SAFETY: as above; `out` and `xs` are distinct and of equal length.
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 => unsafe { avx512::shifted(out.as_mut_ptr(), xs.as_ptr(), xs.len(), m) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 => unsafe { avx2_into(out, xs, m) },
        _ => out.iter_mut().zip(xs).for_each(|(o, &x)| *o = exp(x - m)),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn avx2_in_place(xs: &mut [f32], m: f32) {
    xs.iter_mut().for_each(|v| *v = exp(*v - m));
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn avx2_into(out: &mut [f32], xs: &[f32], m: f32) {
    out.iter_mut().zip(xs).for_each(|(o, &x)| *o = exp(x - m));
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::*;
    use std::arch::x86_64::*;

    /// [`exp`] of eight lanes; `tab` is [`TAB`] in four registers.
    #[inline]
    #[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
    fn exp8(x: __m256, tab: [__m512i; 4]) -> __m256 {
        let xd = _mm512_cvtps_pd(x);
        let inv = _mm512_set1_pd(INV_LN2_N);
        let shift = _mm512_set1_pd(SHIFT);
        let kd = _mm512_fmadd_pd(inv, xd, shift);
        let ki = _mm512_castpd_si512(kd);
        let kd = _mm512_sub_pd(kd, shift);
        let r = _mm512_fmsub_pd(inv, xd, kd);
        // entries 0–15 and 16–31 by the index's low four bits, then bit 4 picks
        let low = _mm512_permutex2var_epi64(tab[0], ki, tab[1]);
        let high = _mm512_permutex2var_epi64(tab[2], ki, tab[3]);
        let upper = _mm512_test_epi64_mask(ki, _mm512_set1_epi64(16));
        let t = _mm512_mask_blend_epi64(upper, low, high);
        let s = _mm512_castsi512_pd(_mm512_add_epi64(t, _mm512_slli_epi64::<47>(ki)));
        let z = _mm512_fmadd_pd(_mm512_set1_pd(C0), r, _mm512_set1_pd(C1));
        let y = _mm512_fmadd_pd(_mm512_set1_pd(C2), r, _mm512_set1_pd(1.0));
        let y = _mm512_mul_pd(_mm512_fmadd_pd(z, _mm512_mul_pd(r, r), y), s);
        let y = _mm512_cvtpd_ps(y);
        let over = _mm256_cmp_ps_mask::<_CMP_GT_OQ>(x, _mm256_set1_ps(HI));
        let y = _mm256_mask_blend_ps(over, y, _mm256_set1_ps(f32::INFINITY));
        let under = _mm256_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm256_set1_ps(LO));
        let y = _mm256_mask_blend_ps(under, y, _mm256_setzero_ps());
        let nan = _mm256_cmp_ps_mask::<_CMP_UNORD_Q>(x, x);
        _mm256_mask_blend_ps(nan, y, _mm256_add_ps(x, x))
    }

    /// `out[i] ← exp(xs[i] − m)` for `i < n`; `out` may be `xs`.
    ///
    /// # Safety
    /// The processor has AVX-512 F/DQ/VL, AVX2 and FMA; `xs` and `out` are valid
    /// for `n` reads and writes.
    #[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
    pub(super) unsafe fn shifted(out: *mut f32, xs: *const f32, n: usize, m: f32) {
        // SAFETY: `TAB` is 32 u64s, four unaligned 512-bit loads.
        let tab = std::array::from_fn(|q| unsafe {
            _mm512_loadu_si512(TAB[8 * q..].as_ptr() as *const __m512i)
        });
        let mv = _mm256_set1_ps(m);
        let mut i = 0;
        // two independent halves per step, so their latency chains overlap
        while i + 16 <= n {
            // SAFETY: i + 16 ≤ n.
            unsafe {
                let a = _mm256_sub_ps(_mm256_loadu_ps(xs.add(i)), mv);
                let b = _mm256_sub_ps(_mm256_loadu_ps(xs.add(i + 8)), mv);
                let (a, b) = (exp8(a, tab), exp8(b, tab));
                _mm256_storeu_ps(out.add(i), a);
                _mm256_storeu_ps(out.add(i + 8), b);
            }
            i += 16;
        }
        while i < n {
            // the last 1–15 entries, eight lanes at a time, masked
            let k = (n - i).min(8);
            let mask = ((1u16 << k) - 1) as u8;
            // SAFETY: the mask reads and writes only lanes below n − i.
            unsafe {
                let a = _mm256_sub_ps(_mm256_maskz_loadu_ps(mask, xs.add(i)), mv);
                _mm256_mask_storeu_ps(out.add(i), mask, exp8(a, tab));
            }
            i += k;
        }
    }
}

#[cfg(test)]
#[path = "expf_tests.rs"]
mod tests;
