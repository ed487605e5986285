//! `F64x2` against identities that hold exactly, and as f64 behaves at the edges.

use super::*;
use num_traits::Float as _;

fn dd(x: f64) -> F64x2 {
    F64x2::of(x)
}

#[test]
fn arithmetic_keeps_what_f64_drops() {
    let e = 2f64.powi(-80);
    assert_eq!(((dd(1.0) + dd(e)) - dd(1.0)).hi(), e);
    let third = dd(1.0) / dd(3.0);
    assert!(third.lo() != 0.0);
    let back = third * dd(3.0) - dd(1.0);
    assert!(back.hi().abs() < 1e-31, "{back:?}");
    // Accurate addition: a cancelling sum keeps its relative accuracy.
    let a = dd(1.0) + dd(1e-20);
    let b = dd(-1.0) + dd(3e-21);
    assert!(((a + b).hi() - 1.3e-20).abs() < 1e-35, "{:?}", a + b);
}

/// exp, ln, ln_1p, exp_m1 against identities that hold exactly.
#[test]
fn elementary_functions_are_double_double_accurate() {
    for x in [-700.0, -30.0, -3.7, -1e-3, 0.5, 2.0, 11.3, 300.0] {
        let (a, b) = (dd(x) / dd(3.0), dd(x) - dd(x) / dd(3.0));
        let (lhs, rhs) = ((a + b).exp(), a.exp() * b.exp());
        let rel = ((lhs - rhs) / rhs).abs().hi();
        let tol = if x < -600.0 { 1e-19 } else { 1e-30 };
        assert!(rel < tol, "exp at {x}: {rel:e}");
        // exp(−700) has a subnormal low word: only ~20 digits survive there.
        let back = dd(x).exp().ln() - dd(x);
        assert!(
            back.abs().hi() < tol * x.abs().max(1.0),
            "ln at {x}: {back:?}"
        );
    }
    for x in [1e-40, -3e-12, 7e-4, -0.3, 2.5] {
        let l = dd(x).ln_1p();
        // exp_m1(ln_1p(x)) = x
        let back = (l.exp_m1() - dd(x)) / dd(x);
        assert!(back.abs().hi() < 1e-30, "ln_1p/exp_m1 at {x}: {back:?}");
    }
    assert_eq!(dd(1e-40).ln_1p().hi(), 1e-40);
    assert_eq!(dd(2.0).powi(-3).hi(), 0.125);
    assert!((dd(2.0).sqrt() * dd(2.0).sqrt() - dd(2.0)).abs().hi() < 1e-31);
    assert!((dd(0.3).tanh().hi() - 0.3f64.tanh()).abs() < 1e-16);
}

#[test]
fn bytes_round_trip_both_words() {
    let x = dd(1.0) / dd(3.0);
    let mut b = Vec::new();
    x.write_le(&mut b);
    assert_eq!(b.len(), F64x2::BYTES);
    let y = F64x2::read_le(&b);
    assert_eq!((x.hi(), x.lo()), (y.hi(), y.lo()));
}

#[test]
fn sum_and_comparisons() {
    let xs = [dd(1.0), dd(2f64.powi(-70)), dd(-1.0)];
    assert_eq!(xs.iter().copied().sum::<F64x2>().hi(), 2f64.powi(-70));
    assert!(dd(1.0) < dd(1.0) + dd(2f64.powi(-70)));
    assert_eq!(dd(2.0).max(dd(3.0)), dd(3.0));
    assert!(F64x2::neg_infinity() < dd(-1e300));
    assert!(F64x2::neg_infinity() < F64x2::infinity());
    assert!(F64x2::nan().is_nan());
    assert!(F64x2::nan().partial_cmp(&dd(1.0)).is_none());
    // infinities and zeros behave as in f64
    let inf = F64x2::infinity();
    assert_eq!((F64x2::neg_infinity() - dd(3.0)).exp().hi(), 0.0);
    assert_eq!((dd(1.0) / dd(0.0)).hi(), f64::INFINITY);
    assert_eq!((inf * dd(2.0)).hi(), f64::INFINITY);
    assert!((inf - inf).is_nan());
    assert_eq!(dd(0.0).ln().hi(), f64::NEG_INFINITY);
    // as far into the subnormals as f64 goes
    assert_eq!(dd(-740.0).exp().hi(), (-740f64).exp());
    assert_eq!(dd(-800.0).exp().hi(), 0.0);
    assert_eq!(<F64x2 as NumCast>::from(3u8).map(|x| x.hi()), Some(3.0));
}
