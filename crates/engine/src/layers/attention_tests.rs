//! The attention layer's tests: the forward against the plain loops, the causal
//! blocks against the full masked product, fully masked queries, the gradients
//! against finite differences and at saturation, f32 against f64, and the
//! written gradients against the added ones.

use super::*;
use crate::testutil::*;

struct Case {
    a: Attention,
    q: Vec<f64>,
    k: Vec<f64>,
    v: Vec<f64>,
    bias: Vec<f64>,
    mask: Vec<bool>,
    key_mask: Vec<bool>,
}

fn case(seed: u64, causal: bool, t_q: usize) -> Case {
    let a = Attention::new(2, t_q, 4, 3, 2).with_causal(causal);
    let mut r = rng(seed);
    let mut big = |n| {
        uniform(&mut r, n)
            .iter()
            .map(|x| 2.0 * x)
            .collect::<Vec<_>>()
    };
    Case {
        q: big(a.t_q * 2 * 3),
        k: big(4 * 2 * 3),
        v: big(4 * 2 * 2),
        bias: big(a.pattern_len()),
        // head 0 loses key 1 for query 0; everything else allowed
        mask: (0..a.pattern_len()).map(|i| i != 1).collect(),
        key_mask: vec![true, true, false, true],
        a,
    }
}

#[test]
fn forward_matches_reference_loops() {
    for (causal, tq) in [(false, 4), (true, 4), (true, 2), (false, 3)] {
        let c = case(5, causal, tq);
        let ex = AttnExtras {
            bias: Some(&c.bias[..]),
            mask: Some(&c.mask[..]),
            key_mask: Some(&c.key_mask[..]),
        };
        let mut z = vec![0.0; tq * 2 * 2];
        let mut pat = vec![0.0; c.a.pattern_len()];
        c.a.forward(&mut z, &mut pat, &c.q, &c.k, &c.v, &ex);
        let (zr, pr) = crate::layers::reference::attention(&c.a, &c.q, &c.k, &c.v, &ex);
        assert_close("z", &z, &zr, 1e-12);
        assert_close("pattern", &pat, &pr, 1e-12);
        // key 2 is masked everywhere: exact zeros
        assert!((0..2 * tq).all(|r| pat[r * 4 + 2] == 0.0));
    }
}

/// The causal path computes only the lower triangle, in blocks of
/// [`CAUSAL_BLOCK`] rows: at a context of several blocks (and with fewer
/// queries than keys) it gives what the full product with the causal mask
/// spelled out gives, forward and backward.
#[test]
fn causal_blocks_match_the_full_masked_product() {
    for (tq, tk) in [(150, 150), (70, 150)] {
        let (nh, d) = (2, 3);
        let blocked = Attention::new(nh, tq, tk, d, d).with_causal(true);
        let full = Attention::new(nh, tq, tk, d, d);
        let mask: Vec<bool> = (0..nh * tq * tk)
            .map(|e| (e % tk) + tq <= (e / tk) % tq + tk)
            .collect();
        let mut r = rng(21);
        let (q, k, v) = (
            uniform(&mut r, tq * nh * d),
            uniform(&mut r, tk * nh * d),
            uniform(&mut r, tk * nh * d),
        );
        let dz = uniform(&mut r, tq * nh * d);
        let run = |a: &Attention, ex: &AttnExtras<'_, f64>| {
            let (mut z, mut p) = (vec![0.0; tq * nh * d], vec![9.0; a.pattern_len()]);
            a.forward(&mut z, &mut p, &q, &k, &v, ex);
            let (mut dq, mut dk, mut dv) =
                (vec![0.0; q.len()], vec![0.0; k.len()], vec![0.0; v.len()]);
            let mut scratch = vec![7.0; tq * tk];
            a.backward(
                &mut dq,
                &mut dk,
                &mut dv,
                None,
                &mut scratch,
                &dz,
                &p,
                &q,
                &k,
                &v,
            );
            [z, p, dq, dk, dv]
        };
        let ex_full = AttnExtras {
            mask: Some(&mask[..]),
            ..AttnExtras::default()
        };
        let (a, b) = (run(&blocked, &AttnExtras::default()), run(&full, &ex_full));
        for (name, (x, y)) in ["z", "pattern", "dq", "dk", "dv"]
            .iter()
            .zip(a.iter().zip(&b))
        {
            assert_close(name, x, y, 1e-12);
        }
    }
}

#[test]
fn fully_masked_query_gives_zero_output_and_gradient() {
    let a = Attention::new(1, 2, 2, 2, 2);
    let (q, k, v) = (vec![1.0; 4], vec![0.5; 4], vec![3.0; 4]);
    let mask = [false, false, true, false]; // query 0 sees nothing
    let ex = AttnExtras {
        mask: Some(&mask[..]),
        ..Default::default()
    };
    let (mut z, mut pat) = (vec![9.0; 4], vec![9.0; 4]);
    a.forward(&mut z, &mut pat, &q, &k, &v, &ex);
    assert_eq!(z, [0.0, 0.0, 3.0, 3.0]);
    assert_eq!(pat, [0.0, 0.0, 1.0, 0.0]);
    let (mut dq, mut dk, mut dv, mut db, mut s) = (
        vec![0.0f64; 4],
        vec![0.0; 4],
        vec![0.0; 4],
        vec![0.0; 4],
        vec![0.0; 4],
    );
    a.backward(
        &mut dq,
        &mut dk,
        &mut dv,
        Some(&mut db),
        &mut s,
        &[1.0; 4],
        &pat,
        &q,
        &k,
        &v,
    );
    assert!(dq
        .iter()
        .chain(&dk)
        .chain(&dv)
        .chain(&db)
        .all(|x| x.is_finite()));
    assert_eq!(&dq[..2], &[0.0, 0.0]);
    assert_eq!(dv, [1.0, 1.0, 0.0, 0.0]);
}

#[test]
fn gradcheck_q_k_v_bias() {
    for (causal, tq, seed) in [(false, 4, 6), (true, 4, 7), (true, 3, 8)] {
        let c = case(seed, causal, tq);
        let a = c.a;
        let mut r = rng(seed + 100);
        let seed_z = uniform(&mut r, tq * 2 * 2);
        let run = |q: &[f64], k: &[f64], v: &[f64], bias: &[f64]| {
            let ex = AttnExtras {
                bias: Some(bias),
                mask: Some(&c.mask[..]),
                key_mask: Some(&c.key_mask[..]),
            };
            let mut z = vec![0.0; tq * 2 * 2];
            let mut pat = vec![0.0; a.pattern_len()];
            a.forward(&mut z, &mut pat, q, k, v, &ex);
            (dot(&z, &seed_z), pat)
        };
        let (_, pat) = run(&c.q, &c.k, &c.v, &c.bias);
        let (dq0, dk0, dv0, db0) = (
            uniform(&mut r, c.q.len()),
            uniform(&mut r, c.k.len()),
            uniform(&mut r, c.v.len()),
            uniform(&mut r, c.bias.len()),
        );
        let (mut dq, mut dk, mut dv, mut db) = (dq0.clone(), dk0.clone(), dv0.clone(), db0.clone());
        let mut scratch = vec![f64::NAN; tq * 4];
        a.backward(
            &mut dq,
            &mut dk,
            &mut dv,
            Some(&mut db),
            &mut scratch,
            &seed_z,
            &pat,
            &c.q,
            &c.k,
            &c.v,
        );
        assert_grad(
            "attn dq",
            &mut |x: &[f64]| run(x, &c.k, &c.v, &c.bias).0,
            &c.q,
            &accumulated(&dq, &dq0),
        );
        assert_grad(
            "attn dk",
            &mut |x: &[f64]| run(&c.q, x, &c.v, &c.bias).0,
            &c.k,
            &accumulated(&dk, &dk0),
        );
        assert_grad(
            "attn dv",
            &mut |x: &[f64]| run(&c.q, &c.k, x, &c.bias).0,
            &c.v,
            &accumulated(&dv, &dv0),
        );
        assert_grad(
            "attn dbias",
            &mut |x: &[f64]| run(&c.q, &c.k, &c.v, x).0,
            &c.bias,
            &accumulated(&db, &db0),
        );
    }
}

fn run_generic<T: Float>(c: &Case, dz: &[f64]) -> Vec<f64> {
    let (q, k, v, bias, dz) = (
        cast::<T>(&c.q),
        cast::<T>(&c.k),
        cast::<T>(&c.v),
        cast::<T>(&c.bias),
        cast::<T>(dz),
    );
    let ex = AttnExtras {
        bias: Some(&bias[..]),
        mask: None,
        key_mask: Some(&c.key_mask[..]),
    };
    let mut z = vec![T::zero(); dz.len()];
    let mut pat = vec![T::zero(); c.a.pattern_len()];
    c.a.forward(&mut z, &mut pat, &q, &k, &v, &ex);
    let (mut dq, mut dk, mut dv) = (
        vec![T::zero(); q.len()],
        vec![T::zero(); k.len()],
        vec![T::zero(); v.len()],
    );
    let mut s = vec![T::zero(); c.a.t_q * c.a.t_k];
    c.a.backward(
        &mut dq, &mut dk, &mut dv, None, &mut s, &dz, &pat, &q, &k, &v,
    );
    [z, pat, dq, dk, dv]
        .iter()
        .flat_map(|x| to_f64(x))
        .collect()
}

/// With `grads_written` the backward writes over whatever `dq`, `dk`, `dv`
/// held the bits that the adding backward leaves in zeros: f32, causal over
/// several blocks (`T` 200, `Tq < Tk`) and not, with a logit bias.
#[test]
fn written_gradients_are_the_added_into_zeros_bits() {
    for (causal, tq, tk) in [(true, 200, 200), (true, 150, 200), (false, 70, 90)] {
        let (nh, dqk, dv_) = (2, 8, 4);
        let a = Attention::new(nh, tq, tk, dqk, dv_).with_causal(causal);
        let mut r = rng(tq as u64);
        let mut f = |n: usize| -> Vec<f32> {
            uniform(&mut r, n)
                .into_iter()
                .map(|x| (2.0 * x) as f32)
                .collect()
        };
        let (q, k, v, dz) = (
            f(tq * nh * dqk),
            f(tk * nh * dqk),
            f(tk * nh * dv_),
            f(tq * nh * dv_),
        );
        let bias = f(a.pattern_len());
        let ex = AttnExtras {
            bias: Some(&bias[..]),
            ..AttnExtras::default()
        };
        let mut z = vec![0.0f32; tq * nh * dv_];
        let mut pat = vec![0.0f32; a.pattern_len()];
        a.forward(&mut z, &mut pat, &q, &k, &v, &ex);
        let mut s = vec![0.0f32; tq * tk];
        let grads = |a: Attention, g: (Vec<f32>, Vec<f32>, Vec<f32>), s: &mut [f32]| {
            let (mut dq, mut dk, mut dv) = g;
            let mut db = vec![0.0f32; a.pattern_len()];
            a.backward(
                &mut dq,
                &mut dk,
                &mut dv,
                Some(&mut db),
                s,
                &dz,
                &pat,
                &q,
                &k,
                &v,
            );
            [dq, dk, dv, db].map(|x| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>())
        };
        let zeros = (vec![0.0; q.len()], vec![0.0; k.len()], vec![0.0; v.len()]);
        let added = grads(a, zeros, &mut s);
        let junk = (f(q.len()), f(k.len()), f(v.len()));
        let written = grads(a.with_grads_written(true), junk, &mut s);
        for (name, (w, g)) in ["dq", "dk", "dv", "d_bias"]
            .iter()
            .zip(written.iter().zip(&added))
        {
            assert_eq!(w, g, "{name}, causal {causal}, Tq {tq}, Tk {tk}");
        }
    }
}

#[test]
fn f32_matches_f64() {
    let c = case(9, true, 4);
    let dz = uniform(&mut rng(10), 4 * 2 * 2);
    assert_close(
        "attn f32",
        &run_generic::<f32>(&c, &dz),
        &run_generic::<f64>(&c, &dz),
        1e-5,
    );
}

/// Every query's pattern saturated on key 0 (a bias of 60 nats): dq and dk, the
/// gradients that pass through the softmax backward, point where the
/// double-double's do.
#[test]
fn backward_keeps_its_direction_at_saturation() {
    use crate::precision::{assert_direction, MIN_COSINE};
    use crate::F64x2;
    let mut c = case(11, false, 4);
    let (tq, tk) = (c.a.t_q, c.a.t_k);
    for (i, b) in c.bias.iter_mut().enumerate() {
        if i % tk == 0 {
            *b += 60.0;
        }
    }
    let dz = uniform(&mut rng(12), tq * 2 * 2);
    let (got, want) = (run_generic::<f64>(&c, &dz), run_generic::<F64x2>(&c, &dz));
    let pat = tq * 2 * 2..tq * 2 * 2 + c.a.pattern_len();
    assert!(got[pat.clone()].iter().step_by(tk).all(|&p| p == 1.0));
    let dq = pat.end..pat.end + c.q.len();
    let dk = dq.end..dq.end + c.k.len();
    for (name, r) in [("dq", dq), ("dk", dk)] {
        assert_direction(name, &got[r.clone()], &want[r], MIN_COSINE);
    }
}

/// With `rest_zeroed` the forward leaves the entries past each causal block's
/// keys as it finds them, and computes the same bits everywhere else.
#[test]
fn rest_zeroed_leaves_only_the_never_computed_entries() {
    let (nh, tq, tk, d) = (2, 150, 150, 3);
    let mut r = rng(31);
    let (q, k, v) = (
        uniform(&mut r, tq * nh * d),
        uniform(&mut r, tk * nh * d),
        uniform(&mut r, tk * nh * d),
    );
    let a = Attention::new(nh, tq, tk, d, d).with_causal(true);
    let run = |a: Attention, fill: f64| {
        let (mut z, mut p) = (vec![0.0; tq * nh * d], vec![fill; a.pattern_len()]);
        a.forward(&mut z, &mut p, &q, &k, &v, &AttnExtras::default());
        (z, p)
    };
    let (z0, p0) = run(a, 9.0);
    let (z1, p1) = run(a.with_rest_zeroed(true), 9.0);
    assert_eq!(z1, z0);
    let mut kept = 0;
    for (e, (&x, &y)) in p1.iter().zip(&p0).enumerate() {
        let (i, j) = ((e / tk) % tq, e % tk);
        // the block of row i computes keys up to its last row
        let n = (i / CAUSAL_BLOCK + 1) * CAUSAL_BLOCK;
        if j >= n {
            assert_eq!((x, y), (9.0, 0.0), "[{i}, {j}] is left alone");
            kept += 1;
        } else {
            assert_eq!(x.to_bits(), y.to_bits(), "[{i}, {j}]");
        }
    }
    assert!(kept > 0);
    // on a buffer that holds those zeros, the same pattern
    assert_eq!(run(a.with_rest_zeroed(true), 0.0), (z0, p0));
}
