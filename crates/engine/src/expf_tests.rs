use super::*;
use crate::F64x2;
use num_traits::Float as _;

/// Inputs at the edges: zeros, infinities, NaNs, the range limits and their
/// neighbours, subnormals, the largest finite values.
#[cfg(all(target_os = "linux", target_env = "gnu"))] // only the glibc sweep reads them
fn edges() -> Vec<f32> {
    let mut xs = vec![
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
    ];
    for b in [
        HI,
        LO,
        88.0,
        -88.0,
        87.5,
        -87.5,
        -103.28,
        f32::MAX,
        f32::MIN,
    ] {
        xs.extend([
            b,
            f32::from_bits(b.to_bits() + 1),
            f32::from_bits(b.to_bits() - 1),
        ]);
    }
    xs.extend([
        f32::from_bits(1),
        -f32::from_bits(1),
        f32::MIN_POSITIVE,
        f32::EPSILON,
    ]);
    // the only two inputs whose result moves when `r` is not contracted into an
    // FMA (found by the full sweep)
    xs.extend([32.564_632, -63.099_46]);
    xs
}

/// Bit for bit, NaN for NaN.
fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// Every 997th bit pattern (4.3 million inputs, every exponent and sign) and the
/// edges, through the scalar body and through each level's slice kernels, in
/// place and out of place, against `f32::exp`. An uncontracted `r`, or the lower
/// range limit one float off, fails it. (The cubic's two smaller coefficients
/// and the upper limit can each move by a bit without moving any result.)
#[test]
#[cfg(all(target_os = "linux", target_env = "gnu"))] // glibc's bits
fn equals_libm_on_a_stride_of_all_inputs() {
    let mut xs: Vec<f32> = (0..=u32::MAX).step_by(997).map(f32::from_bits).collect();
    xs.extend(edges());
    let want: Vec<f32> = xs.iter().map(|x| x.exp()).collect();
    let bad = xs
        .iter()
        .zip(&want)
        .filter(|&(&x, &w)| !same(exp(x), w))
        .count();
    assert_eq!(bad, 0, "scalar: {bad} of {} differ from libm", xs.len());
    for at in simd::supported_levels() {
        let mut got = xs.clone();
        shifted_in_place_at(at, &mut got, 0.0);
        let bad = got
            .iter()
            .zip(&want)
            .filter(|&(&g, &w)| !same(g, w))
            .count();
        assert_eq!(bad, 0, "{at:?} in place: {bad} differ");
        let mut out = vec![0.0; xs.len()];
        shifted_into_at(at, &mut out, &xs, 0.0);
        assert!(
            out.iter().zip(&want).all(|(&g, &w)| same(g, w)),
            "{at:?} into"
        );
    }
}

/// The shift `m` is subtracted in f32 first, as `(x − m).exp()` does, and every
/// length's tail (the masked lanes) is computed and nothing past it written.
#[test]
fn shifted_rows_of_every_length_equal_the_plain_loop() {
    let src: Vec<f32> = (0..40)
        .map(|i| ((i * 7919) % 97) as f32 * 0.37 - 30.0)
        .collect();
    for at in simd::supported_levels() {
        for n in 0..40 {
            let m = src[..n].iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let want: Vec<f32> = src[..n].iter().map(|&x| (x - m).exp()).collect();
            let mut row = src.clone();
            shifted_in_place_at(at, &mut row[..n], m);
            assert!(
                row[..n].iter().zip(&want).all(|(&g, &w)| same(g, w)),
                "{at:?} n={n}"
            );
            assert_eq!(row[n..], src[n..], "{at:?} n={n}: wrote past the row");
            let mut out = [7.0f32; 40];
            shifted_into_at(at, &mut out[..n], &src[..n], m);
            assert!(
                out[..n].iter().zip(&want).all(|(&g, &w)| same(g, w)),
                "{at:?} n={n}"
            );
            assert!(
                out[n..].iter().all(|&v| v == 7.0),
                "{at:?} n={n}: wrote past out"
            );
        }
    }
}

/// The table is `2^(i/32)` rounded to f64 (recomputed in double-double) less
/// `i << 47`.
#[test]
fn table_is_the_rounded_powers_of_two() {
    for (i, &t) in TAB.iter().enumerate() {
        let p = F64x2::from_parts(i as f64 / 32.0, 0.0).exp2();
        assert_eq!(t + ((i as u64) << 47), p.hi().to_bits(), "entry {i}");
    }
}

/// All 2³² inputs (a minute in release: `cargo test --release -p mechlab-engine
/// expf -- --ignored`).
#[test]
#[ignore]
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn equals_libm_on_every_input() {
    let check = |lo: u64, hi: u64| {
        let mut xs = vec![0.0f32; 1 << 16];
        let mut out = vec![0.0f32; 1 << 16];
        let mut bad = 0usize;
        for base in (lo..hi).step_by(1 << 16) {
            for (k, x) in xs.iter_mut().enumerate() {
                *x = f32::from_bits((base + k as u64) as u32);
            }
            shifted_into(&mut out, &xs, 0.0);
            bad += xs
                .iter()
                .zip(&out)
                .filter(|&(x, &y)| !same(x.exp(), y))
                .count();
        }
        bad
    };
    let half = 1u64 << 31;
    let other = std::thread::spawn(move || check(half, 2 * half));
    let bad = check(0, half) + other.join().unwrap();
    assert_eq!(bad, 0, "{bad} inputs differ from libm");
}
