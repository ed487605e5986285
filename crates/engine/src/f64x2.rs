//! `F64x2`: a double-double float (about 106 significant bits, f64's exponent
//! range) for checking what f64 rounding does to a run, not for speed.
//!
//! A model generic over [`Float`] runs in it unchanged (`model.dtype = "f64x2"`),
//! so any f64 result can be recomputed with ~32 decimal digits: where the two agree
//! the f64 run was exact enough; where they part, rounding (not the dynamics) moved
//! the f64 run.
//!
//! The arithmetic is the `qd` crate's (the QD library's double-double algorithms:
//! `exp` by argument reduction, a Taylor series and squarings; `ln` by a Newton step
//! on `exp`); sums use its *accurate* addition, whose error is relative to the
//! result, since the cancellations this type exists to check are exactly where the
//! cheaper addition is weakest. We wrap it because mechlab's [`Float`] needs
//! `num_traits::Float`, `std::iter::Sum` and our byte layout, which Rust's orphan
//! rule does not let us implement on a foreign type. What `qd` lacks is written here
//! from textbook identities: `ln_1p` and `exp_m1` by their series near 0 (so a loss
//! of `1e-40` stays `1e-40`), `powi` by squaring, `tanh`/`sinh`/`cosh` from `exp_m1`.
//! The trigonometric functions fall back to f64 accuracy: no model uses them.
//!
//! We first tried `twofloat` 0.8.4, the better-known crate; measured here it gives
//! `1/3` with a zero low word and `exp(−30)` with relative error 1.3e-12, not
//! double-double accuracy, so it could not serve as a reference (`qd`: 1e-32).
//!
//! It is 10–40× slower than f64 (no SIMD, no `gemm`: matrix products fall back to
//! an ordered triple loop in [`crate::matmul`]).
//!
//! ```
//! use mechlab_engine::{F64x2, Float};
//! // 1 + 2⁻⁶⁰ is 1 in f64, but not in F64x2.
//! let x = F64x2::of(1.0) + F64x2::of(2f64.powi(-60));
//! assert_eq!((x - F64x2::of(1.0)).as_f64(), 2f64.powi(-60));
//! assert_eq!((1.0 + 2f64.powi(-60)) - 1.0, 0.0);
//! ```

use crate::Float;
use num_traits::{FloatConst, Num, NumCast, One, ToPrimitive, Zero};
use qd::Quad;
use std::cmp::Ordering;
use std::fmt;
use std::num::FpCategory;
use std::ops::{
    Add, AddAssign, Div, DivAssign, Mul, MulAssign, Neg, Rem, RemAssign, Sub, SubAssign,
};

/// A double-double: the unevaluated sum `hi + lo` of two f64 with `|lo| ≤ ulp(hi)/2`.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct F64x2(Quad);

impl Default for F64x2 {
    fn default() -> Self {
        F64x2::zero()
    }
}

impl F64x2 {
    /// The high word: the value rounded to f64.
    pub fn hi(self) -> f64 {
        self.0 .0
    }
    /// The low word: what rounding to f64 dropped.
    pub fn lo(self) -> f64 {
        self.0 .1
    }
    /// `hi + lo`, renormalised.
    pub fn from_parts(hi: f64, lo: f64) -> Self {
        F64x2(Quad(hi, 0.0).add_accurate(Quad(lo, 0.0)))
    }
    fn c(x: f64) -> Self {
        F64x2(Quad(x, 0.0))
    }
    /// `Σ_(k≥1) c_k xᵏ` for `|x|` small, until a term no longer counts.
    fn series(self, mut coef: impl FnMut(u32) -> F64x2) -> Self {
        let (mut sum, mut pow) = (F64x2::zero(), self);
        for k in 1..40 {
            let term = coef(k) * pow;
            sum += term;
            if term.hi().abs() <= 1e-34 * sum.hi().abs() {
                break;
            }
            pow *= self;
        }
        sum
    }
}

impl PartialEq for F64x2 {
    fn eq(&self, o: &Self) -> bool {
        self.hi() == o.hi() && self.lo() == o.lo()
    }
}

impl PartialOrd for F64x2 {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        match self.hi().partial_cmp(&o.hi())? {
            // Infinities (and zeros of either sign) compare by the high word alone.
            Ordering::Equal if self.hi().is_finite() => self.lo().partial_cmp(&o.lo()),
            ord => Some(ord),
        }
    }
}

impl fmt::Debug for F64x2 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:e}{:+e}", self.hi(), self.lo())
    }
}

impl fmt::Display for F64x2 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A reader wants the number; `{:?}` shows both words.
        fmt::Display::fmt(&self.hi(), f)
    }
}

// qd's algorithms assume finite operands (an infinity makes the error term
// inf − inf = NaN), so a result that is not finite in f64 is returned as f64
// gives it: ±inf and NaN behave as IEEE says, as masked logits of −∞ need.
macro_rules! op {
    ($tr:ident $m:ident $op:tt $dd:expr) => {
        impl $tr for F64x2 {
            type Output = F64x2;
            #[inline]
            fn $m(self, o: F64x2) -> F64x2 {
                let plain = self.hi() $op o.hi();
                if !plain.is_finite() || !self.hi().is_finite() || !o.hi().is_finite() {
                    return F64x2::c(plain);
                }
                let f: fn(Quad, Quad) -> Quad = $dd;
                F64x2(f(self.0, o.0))
            }
        }
    };
}
op!(Add add + |a, b| a.add_accurate(b));
op!(Sub sub - |a, b| a.sub_accurate(b));
op!(Mul mul * |a, b| a * b);
op!(Div div / |a, b| a / b);
impl Rem for F64x2 {
    type Output = F64x2;
    fn rem(self, o: F64x2) -> F64x2 {
        self - num_traits::Float::trunc(self / o) * o
    }
}
macro_rules! assign {
    ($($tr:ident $m:ident $op:tt),*) => {$(
        impl $tr for F64x2 {
            #[inline]
            fn $m(&mut self, o: F64x2) {
                *self = *self $op o;
            }
        }
    )*};
}
assign!(AddAssign add_assign +, SubAssign sub_assign -, MulAssign mul_assign *,
        DivAssign div_assign /, RemAssign rem_assign %);

impl Neg for F64x2 {
    type Output = F64x2;
    #[inline]
    fn neg(self) -> F64x2 {
        F64x2(-self.0)
    }
}

impl std::iter::Sum for F64x2 {
    fn sum<I: Iterator<Item = F64x2>>(iter: I) -> F64x2 {
        iter.fold(F64x2::zero(), |a, b| a + b)
    }
}

impl<'a> std::iter::Sum<&'a F64x2> for F64x2 {
    fn sum<I: Iterator<Item = &'a F64x2>>(iter: I) -> F64x2 {
        iter.fold(F64x2::zero(), |a, b| a + *b)
    }
}

impl Zero for F64x2 {
    fn zero() -> Self {
        F64x2::c(0.0)
    }
    fn is_zero(&self) -> bool {
        self.hi() == 0.0
    }
}

impl One for F64x2 {
    fn one() -> Self {
        F64x2::c(1.0)
    }
}

impl Num for F64x2 {
    type FromStrRadixErr = num_traits::ParseFloatError;
    /// Parses an f64 (decimal strings beyond f64's digits are not needed here).
    fn from_str_radix(s: &str, radix: u32) -> Result<Self, Self::FromStrRadixErr> {
        f64::from_str_radix(s, radix).map(F64x2::c)
    }
}

impl ToPrimitive for F64x2 {
    fn to_i64(&self) -> Option<i64> {
        num_traits::Float::trunc(*self).hi().to_i64()
    }
    fn to_u64(&self) -> Option<u64> {
        num_traits::Float::trunc(*self).hi().to_u64()
    }
    fn to_f64(&self) -> Option<f64> {
        Some(self.hi())
    }
}

impl NumCast for F64x2 {
    fn from<N: ToPrimitive>(n: N) -> Option<Self> {
        // Integers beyond 2⁵³ keep their low bits in the low word.
        if let Some(i) = n.to_i64() {
            let hi = i as f64;
            return Some(F64x2::from_parts(hi, (i - hi as i64) as f64));
        }
        n.to_f64().map(F64x2::c)
    }
}

/// Constants to double-double accuracy: the f64 constant and what it dropped
/// (computed with mpmath at 300 bits).
macro_rules! consts {
    ($($c:ident = $lo:expr),* $(,)?) => {
        impl FloatConst for F64x2 {
            $(fn $c() -> Self { F64x2(Quad(std::f64::consts::$c, $lo)) })*
        }
    };
}
consts!(
    E = 1.4456468917292502e-16,
    FRAC_1_PI = -1.9678676675182486e-17,
    FRAC_1_SQRT_2 = -4.833646656726457e-17,
    FRAC_2_PI = -3.935735335036497e-17,
    FRAC_2_SQRT_PI = 1.533545961316588e-17,
    FRAC_PI_2 = 6.123233995736766e-17,
    FRAC_PI_3 = -1.072081766451091e-16,
    FRAC_PI_4 = 3.061616997868383e-17,
    FRAC_PI_6 = -5.360408832255455e-17,
    FRAC_PI_8 = 1.5308084989341915e-17,
    LN_10 = -2.1707562233822494e-16,
    LN_2 = 2.3190468138462996e-17,
    LOG10_E = 1.098319650216765e-17,
    LOG2_E = 2.0355273740931033e-17,
    PI = 1.2246467991473532e-16,
    SQRT_2 = -9.667293313452913e-17,
);

/// A function computed from the high word in f64 (not needed at double-double
/// accuracy by any model).
macro_rules! via_f64 {
    ($($m:ident),*) => {$(
        fn $m(self) -> Self {
            F64x2::c(self.hi().$m())
        }
    )*};
}

impl num_traits::Float for F64x2 {
    fn nan() -> Self {
        F64x2(Quad::NAN)
    }
    fn infinity() -> Self {
        F64x2::c(f64::INFINITY)
    }
    fn neg_infinity() -> Self {
        F64x2::c(f64::NEG_INFINITY)
    }
    fn neg_zero() -> Self {
        F64x2::c(-0.0)
    }
    fn min_value() -> Self {
        F64x2(Quad::MIN)
    }
    fn min_positive_value() -> Self {
        F64x2(Quad::MIN_POSITIVE)
    }
    fn epsilon() -> Self {
        F64x2(Quad::EPSILON)
    }
    fn max_value() -> Self {
        F64x2(Quad::MAX)
    }
    fn is_nan(self) -> bool {
        self.0.is_nan()
    }
    fn is_infinite(self) -> bool {
        self.hi().is_infinite()
    }
    fn is_finite(self) -> bool {
        self.0.is_finite()
    }
    fn is_normal(self) -> bool {
        self.hi().is_normal()
    }
    fn classify(self) -> FpCategory {
        self.hi().classify()
    }
    fn floor(self) -> Self {
        let h = self.hi().floor();
        if h == self.hi() {
            F64x2::from_parts(h, self.lo().floor())
        } else {
            F64x2::c(h)
        }
    }
    fn ceil(self) -> Self {
        -(-self).floor()
    }
    fn round(self) -> Self {
        let f = (self + F64x2::c(0.5)).floor();
        if self.hi() < 0.0 {
            -((-self).round())
        } else {
            f
        }
    }
    fn trunc(self) -> Self {
        F64x2(self.0.trunc())
    }
    fn fract(self) -> Self {
        self - self.trunc()
    }
    fn abs(self) -> Self {
        if self.hi() < 0.0 {
            -self
        } else {
            self
        }
    }
    fn signum(self) -> Self {
        F64x2::c(self.hi().signum())
    }
    fn is_sign_positive(self) -> bool {
        self.hi().is_sign_positive()
    }
    fn is_sign_negative(self) -> bool {
        self.hi().is_sign_negative()
    }
    fn mul_add(self, a: Self, b: Self) -> Self {
        self * a + b
    }
    fn recip(self) -> Self {
        F64x2::one() / self
    }
    fn powi(self, n: i32) -> Self {
        let (mut base, mut e, mut acc) = (self, n.unsigned_abs(), F64x2::one());
        while e > 0 {
            if e & 1 == 1 {
                acc *= base;
            }
            base *= base;
            e >>= 1;
        }
        if n < 0 {
            acc.recip()
        } else {
            acc
        }
    }
    fn powf(self, y: Self) -> Self {
        (y * self.ln()).exp()
    }
    fn sqrt(self) -> Self {
        if self.hi() < 0.0 {
            Self::nan()
        } else if self.hi().is_infinite() {
            self
        } else {
            F64x2(self.0.sqrt())
        }
    }
    fn exp(self) -> Self {
        if !self.hi().is_finite() {
            return F64x2::c(self.hi().exp());
        }
        if self.hi() < -700.0 {
            // qd returns 0 below −709 where f64 still has subnormals (to −745):
            // e^x = e^(x+700) · e^(−700) keeps them, so nothing underflows earlier
            // than in f64.
            let shifted = F64x2((self + F64x2::c(700.0)).0.exp());
            return shifted * F64x2(Quad(-700.0, 0.0).exp());
        }
        F64x2(self.0.exp())
    }
    fn exp2(self) -> Self {
        (self * F64x2::LN_2()).exp()
    }
    fn ln(self) -> Self {
        if !self.hi().is_finite() || self.hi() <= 0.0 {
            return F64x2::c(self.hi().ln());
        }
        F64x2(self.0.ln())
    }
    fn log(self, base: Self) -> Self {
        self.ln() / base.ln()
    }
    fn log2(self) -> Self {
        self.ln() * F64x2::LOG2_E()
    }
    fn log10(self) -> Self {
        self.ln() * F64x2::LOG10_E()
    }
    fn max(self, o: Self) -> Self {
        if self.is_nan() || o > self {
            o
        } else {
            self
        }
    }
    fn min(self, o: Self) -> Self {
        if self.is_nan() || o < self {
            o
        } else {
            self
        }
    }
    fn abs_sub(self, o: Self) -> Self {
        if self > o {
            self - o
        } else {
            F64x2::zero()
        }
    }
    fn cbrt(self) -> Self {
        // One Newton step from f64's root doubles its ~53 bits.
        let y = F64x2::c(self.hi().cbrt());
        if y.hi() == 0.0 || !y.is_finite() {
            return y;
        }
        y - (y * y * y - self) / (F64x2::c(3.0) * y * y)
    }
    fn hypot(self, o: Self) -> Self {
        let (a, b) = (self.abs(), o.abs());
        let big = if a > b { a } else { b };
        if big.hi() == 0.0 || !big.is_finite() {
            return big;
        }
        let (x, y) = (a / big, b / big);
        big * (x * x + y * y).sqrt()
    }
    via_f64!(sin, cos, tan, asin, acos, atan, asinh, acosh, atanh);
    fn atan2(self, o: Self) -> Self {
        F64x2::c(self.hi().atan2(o.hi()))
    }
    fn sin_cos(self) -> (Self, Self) {
        (self.sin(), self.cos())
    }
    fn exp_m1(self) -> Self {
        if self.hi().abs() < 1e-3 {
            // x + x²/2! + x³/3! + …
            let mut fact = 1.0;
            self.series(|k| {
                fact *= k as f64;
                F64x2::one() / F64x2::c(fact)
            })
        } else {
            self.exp() - F64x2::one()
        }
    }
    fn ln_1p(self) -> Self {
        if self.hi().abs() < 1e-3 {
            // x − x²/2 + x³/3 − …
            self.series(|k| {
                let s = if k % 2 == 1 { 1.0 } else { -1.0 };
                F64x2::c(s) / F64x2::c(k as f64)
            })
        } else {
            (F64x2::one() + self).ln()
        }
    }
    fn sinh(self) -> Self {
        let e = self.exp_m1();
        // (eˣ − e⁻ˣ)/2 = (e − 1 + 1 − 1/(1 + (e − 1)))/2, accurate near 0
        (e + e / (F64x2::one() + e)) * F64x2::c(0.5)
    }
    fn cosh(self) -> Self {
        let e = self.exp();
        (e + e.recip()) * F64x2::c(0.5)
    }
    fn tanh(self) -> Self {
        if self.hi().abs() > 20.0 {
            return F64x2::c(self.hi().signum())
                - F64x2::c(2.0 * self.hi().signum())
                    / ((self.abs() * F64x2::c(2.0)).exp() + F64x2::one());
        }
        let e = (self * F64x2::c(2.0)).exp_m1();
        e / (e + F64x2::c(2.0))
    }
    fn integer_decode(self) -> (u64, i16, i8) {
        // The high word's decoding: a double-double has no single mantissa.
        num_traits::Float::integer_decode(self.hi())
    }
}

impl Float for F64x2 {
    const DTYPE: &'static str = "f64x2";
    /// `hi` then `lo`, each a little-endian f64.
    const BYTES: usize = 16;
    fn of(x: f64) -> Self {
        F64x2::c(x)
    }
    fn as_f64(self) -> f64 {
        self.hi()
    }
    fn write_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.hi().to_le_bytes());
        out.extend_from_slice(&self.lo().to_le_bytes());
    }
    fn read_le(bytes: &[u8]) -> Self {
        let word = |k: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[8 * k..8 * k + 8]);
            f64::from_le_bytes(b)
        };
        // Pairs written by `write_le` are normalised, and renormalising them keeps
        // every bit; a hand-edited pair is made valid rather than trusted.
        F64x2::from_parts(word(0), word(1))
    }
}

#[cfg(test)]
#[path = "f64x2_tests.rs"]
mod tests;
