//! Vectorised `f32` elementwise kernels for inference: `exp`, a masked softmax row
//! and the exact (erf) GELU, at 512 bits where the processor has AVX-512, 256 bits
//! with AVX2 and FMA, and SSE2 otherwise, chosen once at run time.
//!
//! Why by hand: the standard library's `f32::exp` is a scalar call into libm, and
//! in the BERT encoder those calls (softmax and GELU) took a quarter of the forward
//! pass once `gemm` ran its AVX-512 kernels. The kernels here are plain Rust loops
//! written so that the compiler vectorises them (no calls, no branches, only
//! selects); each is compiled three times under `#[target_feature]` and dispatched
//! on `is_x86_feature_detected!`. No intrinsics and no SIMD crate are needed for
//! that, and Rust never contracts `a·b + c` into an FMA on its own, so **every
//! path computes the same operations in the same order: results are bit-identical
//! on AVX-512, AVX2 and SSE2 machines** (tested by running each path this
//! processor supports on the same inputs).
//!
//! The same dispatch serves code outside this module: [`widest`] runs a closure
//! compiled for the widest level, so a generic hot loop elsewhere (the induction
//! tables' per-cell and per-key loops) gets the wide registers and the newer
//! instructions (masked selects, gathers) without being written per level, and
//! with the same bits. `MECHLAB_SIMD=baseline` (or `avx2`) caps the level for a
//! whole process, which is how a test compares a run at each level.
//!
//! `exp` is Cody–Waite range reduction `x = k·ln2 + r`, `|r| ≤ ln2/2`, with `ln2`
//! split in two so `k·ln2_hi` is exact, and the degree-7 Taylor polynomial of
//! `e^r` (truncation below 6·10⁻⁹ relative); the result is within 2 ulp of the
//! true value for `x ∈ [−87.5, 88]` (tested against f64). Below −87.5 it returns
//! exactly 0 (the true value is under 1.1·10⁻³⁸, subnormal), so `exp(−∞) = 0`;
//! above 88 it returns `e^88`: callers here only pass `x ≤ 0`.
//! Training keeps libm's bits instead, through [`crate::expf`] (slower than this
//! one, but every f32 run's numbers stay as they were).
//!
//! ```
//! use mechlab_engine::simd;
//! let mut row = [1.0f32, 2.0, 3.0, 50.0];
//! simd::softmax_row(&mut row, &[true, true, true, false]); // the last key masked
//! assert_eq!(row[3], 0.0);
//! assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-6);
//! ```

/// The instruction set these kernels run at on this processor, narrowest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Baseline,
    Avx2,
    Avx512,
}

/// The widest level this processor supports, detected once, and capped by the
/// environment variable `MECHLAB_SIMD` (`avx512`, `avx2` or `baseline`; other
/// values are ignored) when it names a narrower one: every level computes the
/// same bits, and the cap is how a test (or a doubting user) shows it.
pub fn level() -> Level {
    use std::sync::OnceLock;
    static LEVEL: OnceLock<Level> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        let cap = match std::env::var("MECHLAB_SIMD").as_deref().map(str::trim) {
            Ok(v) if v.eq_ignore_ascii_case("baseline") => Level::Baseline,
            Ok(v) if v.eq_ignore_ascii_case("avx2") => Level::Avx2,
            _ => Level::Avx512,
        };
        detected().min(cap)
    })
}

fn detected() -> Level {
    #[cfg(target_arch = "x86_64")]
    {
        // every feature the wide path is compiled with, not only AVX-512F
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
        {
            return Level::Avx512;
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            return Level::Avx2;
        }
    }
    Level::Baseline
}

/// Every level this processor can run (for tests that compare the paths).
pub fn supported_levels() -> Vec<Level> {
    match level() {
        Level::Avx512 => vec![Level::Avx512, Level::Avx2, Level::Baseline],
        Level::Avx2 => vec![Level::Avx2, Level::Baseline],
        Level::Baseline => vec![Level::Baseline],
    }
}

/// Runs `f` with its body compiled for the instruction set of `at` (which this
/// processor must support): the way to give a hot loop that is generic (over
/// [`crate::Float`], over a model) the wide registers without writing it three
/// times. Mark the closure `#[inline(always)]` (else it may be compiled apart,
/// at the baseline) and so the loop's helpers: what is inlined into it is
/// compiled under `#[target_feature]`; anything called out of line runs at the
/// baseline. Rust contracts no `a·b + c` into an FMA and
/// the compiler reorders no float sum, so every level computes the same bits.
#[inline(always)]
pub fn at_level<R>(at: Level, f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
        fn wide<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        #[target_feature(enable = "avx2,fma")]
        fn mid<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        // a comparison, not `supported_levels()`: this runs inside training
        // steps, which allocate nothing
        assert!(at <= level(), "{at:?} is not supported here");
        match at {
            // SAFETY: `at` is one of the levels detected on this processor.
            Level::Avx512 => return unsafe { wide(f) },
            Level::Avx2 => return unsafe { mid(f) },
            Level::Baseline => {}
        }
    }
    let _ = at;
    f()
}

/// [`at_level`] at this processor's widest [`level`].
#[inline(always)]
pub fn widest<R>(f: impl FnOnce() -> R) -> R {
    at_level(level(), f)
}

/// Defines `pub fn $name(args)` dispatching on [`level`], and `$name_at(level, args)`
/// for tests, over the `#[inline(always)]` body `$body`.
macro_rules! multiversion {
    ($(#[$doc:meta])* $name:ident, $at:ident, $body:ident, ($($arg:ident: $ty:ty),*)) => {
        $(#[$doc])*
        pub fn $name($($arg: $ty),*) {
            $at(level(), $($arg),*)
        }

        /// The same at a given level; panics if this processor lacks it.
        pub fn $at(at: Level, $($arg: $ty),*) {
            at_level(
                at,
                #[inline(always)]
                || $body($($arg),*),
            )
        }
    };
}

const LOG2E: f32 = std::f32::consts::LOG2_E;
/// `ln 2` in two parts: the high part has 9 trailing zero bits, so `k·LN2_HI` is
/// exact for `|k| < 2⁹`.
const LN2_HI: f32 = 0.693_145_75;
const LN2_LO: f32 = 1.428_606_8e-6;
/// 1.5·2²³: adding and subtracting it rounds an `f32` below 2²² to the nearest integer.
const ROUND: f32 = 12_582_912.0;

/// `e^x` for one element (module doc); the body every path vectorises.
#[inline(always)]
fn exp1(x: f32) -> f32 {
    let xc = x.clamp(-87.5, 88.0);
    // y's low mantissa bits hold k = round(xc·log2 e) (|k| ≤ 127), read off as an
    // integer: a float-to-int cast would not vectorise (it saturates NaN to 0).
    let y = xc * LOG2E + ROUND;
    let k = y - ROUND;
    let ki = y.to_bits() as i32 - ROUND.to_bits() as i32;
    let r = (xc - k * LN2_HI) - k * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0
                        + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    let scale = f32::from_bits(((ki + 127) as u32) << 23);
    if x < -87.5 {
        0.0
    } else {
        p * scale
    }
}

#[inline(always)]
fn exp_body(xs: &mut [f32]) {
    for x in xs.iter_mut() {
        *x = exp1(*x);
    }
}

#[inline(always)]
fn softmax_body(row: &mut [f32], keep: &[bool]) {
    assert_eq!(
        row.len(),
        keep.len(),
        "softmax_row: row and keep differ in length"
    );
    // Eight partial maxima and sums: reductions the compiler may vectorise (it
    // keeps a single accumulator's order), the same order on every path.
    let mut part = [f32::NEG_INFINITY; 8];
    let (mut rows, mut keeps) = (row.chunks_exact(8), keep.chunks_exact(8));
    for (c, kc) in (&mut rows).zip(&mut keeps) {
        for ((p, &v), &k) in part.iter_mut().zip(c).zip(kc) {
            *p = p.max(if k { v } else { f32::NEG_INFINITY });
        }
    }
    let mut m = part.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    for (&v, &k) in rows.remainder().iter().zip(keeps.remainder()) {
        m = m.max(if k { v } else { f32::NEG_INFINITY });
    }
    if m == f32::NEG_INFINITY {
        row.iter_mut().for_each(|v| *v = 0.0);
        return;
    }
    for (v, &k) in row.iter_mut().zip(keep) {
        *v = if k { *v - m } else { f32::NEG_INFINITY };
    }
    exp_body(row);
    let mut part = [0.0f32; 8];
    let mut chunks = row.chunks_exact(8);
    for c in &mut chunks {
        for (p, &v) in part.iter_mut().zip(c) {
            *p += v;
        }
    }
    let tail: f32 = chunks.remainder().iter().sum();
    let sum = part.iter().sum::<f32>() + tail;
    // sum ≥ 1 (the maximum contributes e⁰); a division, as the engine's softmax.
    row.iter_mut().for_each(|v| *v /= sum);
}

/// The exact GELU `x/2 · (1 + erf(x/√2))`, `erf` by Abramowitz & Stegun 7.1.26 as
/// in [`crate::bert`]'s scalar `gelu`, with this module's `exp`.
#[inline(always)]
fn gelu_body(out: &mut [f32], x: &[f32]) {
    assert_eq!(out.len(), x.len(), "gelu: out and x differ in length");
    for (o, &x) in out.iter_mut().zip(x) {
        let z = x * std::f32::consts::FRAC_1_SQRT_2;
        let a = z.abs();
        let t = 1.0 / (1.0 + 0.327_591_1 * a);
        let poly = t
            * (0.254_829_6
                + t * (-0.284_496_74 + t * (1.421_413_7 + t * (-1.453_152 + t * 1.061_405_4))));
        let erf = (1.0 - poly * exp1(-a * a)).copysign(z);
        *o = 0.5 * x * (1.0 + erf);
    }
}

multiversion!(
    /// `x ← e^x` elementwise (module doc for range and accuracy).
    exp_in_place,
    exp_in_place_at,
    exp_body,
    (xs: &mut [f32])
);

multiversion!(
    /// Softmax of `row` in place over the entries with `keep[j]`; the rest become
    /// exactly 0, and a row with nothing kept (or only `−∞` kept) becomes all zeros,
    /// as [`crate::layers::softmax::row_in_place`].
    softmax_row,
    softmax_row_at,
    softmax_body,
    (row: &mut [f32], keep: &[bool])
);

multiversion!(
    /// `out = GELU(x)`, the exact (erf) form BERT uses.
    gelu_erf,
    gelu_erf_at,
    gelu_body,
    (out: &mut [f32], x: &[f32])
);

#[cfg(test)]
mod tests {
    use super::*;

    /// A loop of the kind `at_level` is for: a gather, products, a select and
    /// a running sum, over f64.
    #[inline(always)]
    fn mixed(x: &[f64], idx: &[usize]) -> f64 {
        let mut acc = 0.0;
        for (i, &k) in idx.iter().enumerate() {
            let p = x[k] * x[i % x.len()] * 1.000_000_1;
            acc += if k % 3 == 0 { p } else { -0.5 * p };
        }
        acc
    }

    #[test]
    fn at_level_computes_the_same_bits_at_every_level() {
        let x: Vec<f64> = (0..97).map(|i| (i as f64 * 0.37).sin() * 1e3).collect();
        let idx: Vec<usize> = (0..1000).map(|i| (i * 31 + 7) % 97).collect();
        let plain = mixed(&x, &idx);
        for at in supported_levels() {
            let v = at_level(
                at,
                #[inline(always)]
                || mixed(&x, &idx),
            );
            assert_eq!(v.to_bits(), plain.to_bits(), "{at:?}");
        }
        assert_eq!(widest(|| mixed(&x, &idx)).to_bits(), plain.to_bits());
    }

    fn inputs() -> Vec<f32> {
        let mut xs: Vec<f32> = (-90_000..=88_000).map(|i| i as f32 * 1e-3).collect();
        xs.extend([
            f32::NEG_INFINITY,
            -1e30,
            -87.5,
            -87.49,
            0.0,
            -0.0,
            1e-30,
            88.0,
        ]);
        xs
    }

    #[test]
    fn exp_is_within_two_ulp_of_f64_and_zero_below_the_normal_range() {
        let xs = inputs();
        let mut ys = xs.clone();
        exp_in_place(&mut ys);
        let (mut worst, mut at) = (0.0f64, 0.0f32);
        for (&x, &y) in xs.iter().zip(&ys) {
            if x < -87.5 {
                assert_eq!(y, 0.0, "exp({x})");
                continue;
            }
            if x > 88.0 {
                assert_eq!(y, exp1(88.0), "exp({x}) saturates at e^88");
                continue;
            }
            let want = (x as f64).exp();
            // one ulp: relative for normal results, 2⁻¹⁴⁹ for subnormal ones
            let ulp = (want * f32::EPSILON as f64).max(f32::from_bits(1) as f64);
            let err = (y as f64 - want).abs() / ulp;
            if err > worst {
                worst = err;
                at = x;
            }
        }
        assert!(worst <= 2.0, "worst error {worst} ulp at x = {at}");
    }

    #[test]
    fn every_path_this_processor_runs_gives_the_same_bits() {
        let xs = inputs();
        let keep: Vec<bool> = (0..xs.len()).map(|i| i % 7 != 3).collect();
        let mut want: Option<(Vec<f32>, Vec<f32>, Vec<f32>)> = None;
        for at in supported_levels() {
            let mut e = xs.clone();
            exp_in_place_at(at, &mut e);
            let mut s: Vec<f32> = xs.iter().map(|x| x.clamp(-50.0, 0.0)).collect();
            for row in s.chunks_mut(100) {
                let n = row.len();
                softmax_row_at(at, row, &keep[..n]);
            }
            let mut g = vec![0.0; xs.len()];
            let finite: Vec<f32> = xs.iter().map(|x| x.clamp(-20.0, 20.0)).collect();
            gelu_erf_at(at, &mut g, &finite);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            match &want {
                None => want = Some((e, s, g)),
                Some((e0, s0, g0)) => {
                    assert_eq!(bits(&e), bits(e0), "exp at {at:?}");
                    assert_eq!(bits(&s), bits(s0), "softmax at {at:?}");
                    assert_eq!(bits(&g), bits(g0), "gelu at {at:?}");
                }
            }
        }
    }

    /// The softmax written out plainly (the maximum, `exp` of the kept entries less
    /// it, eight partial sums in order, divide): `softmax_row` at every level must
    /// give its bits, which pins the order of the sums any faster body has to keep
    /// (the rows' spread of magnitudes makes a swapped pair of terms show).
    fn softmax_in_passes(row: &mut [f32], keep: &[bool]) {
        let m = row.iter().zip(keep).fold(
            f32::NEG_INFINITY,
            |a, (&v, &k)| if k { a.max(v) } else { a },
        );
        if m == f32::NEG_INFINITY {
            row.iter_mut().for_each(|v| *v = 0.0);
            return;
        }
        for (v, &k) in row.iter_mut().zip(keep) {
            *v = exp1(if k { *v - m } else { f32::NEG_INFINITY });
        }
        let mut part = [0.0f32; 8];
        let mut chunks = row.chunks_exact(8);
        for c in &mut chunks {
            for (p, &v) in part.iter_mut().zip(c) {
                *p += v;
            }
        }
        let sum = part.iter().sum::<f32>() + chunks.remainder().iter().sum::<f32>();
        row.iter_mut().for_each(|v| *v /= sum);
    }

    #[test]
    fn softmax_row_is_the_plain_softmax_bit_for_bit() {
        // rows of scores spread over e^−15 … 1, where the order of a sum shows in its bits
        for (n, row) in [1usize, 7, 8, 15, 16, 17, 24, 31, 42, 100, 128, 129]
            .into_iter()
            .flat_map(|n| (0..40).map(move |row| (n, row)))
        {
            let z: Vec<f32> = (0..n)
                .map(|i| {
                    ((i as u64 * 2_654_435_761 + row as u64 * 40_503) % 10_007) as f32 * 1.5e-3
                        - 12.0
                })
                .collect();
            let keep: Vec<bool> = (0..n).map(|i| i % 11 != 4 && i + 3 < n.max(4)).collect();
            let mut want = z.clone();
            softmax_in_passes(&mut want, &keep);
            for at in supported_levels() {
                let mut got = z.clone();
                softmax_row_at(at, &mut got, &keep);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "n = {n}, row {row} at {at:?}");
            }
        }
    }

    #[test]
    fn softmax_row_matches_the_engine_softmax() {
        use crate::layers::softmax;
        for n in [1usize, 5, 8, 17, 128] {
            let z: Vec<f32> = (0..n)
                .map(|i| ((i * 13) as f32 * 0.37).sin() * 6.0)
                .collect();
            let keep: Vec<bool> = (0..n).map(|i| i == 0 || i % 5 != 2).collect();
            let mut ours = z.clone();
            softmax_row(&mut ours, &keep);
            let mut theirs = z.clone();
            softmax::row_in_place(&mut theirs, |j| keep[j]);
            for (a, b) in ours.iter().zip(&theirs) {
                assert!(
                    (a - b).abs() <= 4.0 * f32::EPSILON * b.max(1e-30),
                    "{a} vs {b}"
                );
            }
            assert!(ours.iter().zip(&keep).all(|(p, k)| *k || *p == 0.0));
        }
        let mut none = [1.0f32, 2.0];
        softmax_row(&mut none, &[false, false]);
        assert_eq!(none, [0.0, 0.0]);
    }

    #[test]
    fn gelu_matches_the_scalar_bert_gelu() {
        let xs: Vec<f32> = (-8000..=8000).map(|i| i as f32 * 1e-3).collect();
        let mut ys = vec![0.0; xs.len()];
        gelu_erf(&mut ys, &xs);
        for (&x, &y) in xs.iter().zip(&ys) {
            let want = crate::bert::encoder::gelu(x);
            assert!(
                (y - want).abs() <= 4.0 * f32::EPSILON * (1.0 + want.abs()),
                "gelu({x}): {y} vs {want}"
            );
        }
    }
}
