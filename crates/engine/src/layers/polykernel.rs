//! Polynomial-kernel features of the induction-head paper's second layer.
//!
//! A query position and `T` key positions each carry `C` components, every
//! component a vector in `R^S`: `zq` is `[C, S]`, `zk` is `[T, C, S]`. Per key `t`
//! and component `c` the forward takes the rectified inner product
//! `g[t, c] = ReLU(⟨zq^c, zk_t^c⟩)` (saved, `[T, C]`), and for every multi-index
//! `δ ∈ {0, 1, …}^C` in a list `deltas` (`[n_delta, C]`) the feature
//!
//! `K[δ, t] = Π_c g[t, c]^(δ_c)`   (empty product = 1, and `0⁰ = 1`).
//!
//! The backward turns `dK` into `dzq` and `dzk`. The ReLU's derivative is taken
//! as `1` where `⟨zq^c, zk_t^c⟩ > 0` and `0` otherwise. [`subsets_up_to`] builds the
//! usual `deltas`: all 0/1 subsets of the components of size at most `D`.
//!
//! ```
//! use mechlab_engine::layers::polykernel::{forward, subsets_up_to};
//! // C = 2 components of size S = 1, one key: inner products [1·3, 2·(-1)] → g = [3, 0]
//! let deltas = subsets_up_to(2, 2); // {}, {0}, {1}, {0,1}
//! assert_eq!(deltas, [0, 0, 1, 0, 0, 1, 1, 1]);
//! let (mut k, mut g) = ([0.0f64; 4], [0.0; 2]);
//! forward(&mut k, &mut g, &[1.0, 2.0], &[3.0, -1.0], &deltas, 2, 1, 1);
//! assert_eq!(k, [1.0, 3.0, 0.0, 0.0]);
//! ```

use crate::Float;

/// All 0/1 multi-indices over `c` components with at most `d` ones, flat
/// `[n, c]` (one row per subset), in a stable order: by size `0, 1, …, min(c, d)`,
/// then lexicographically by the sorted list of chosen components. For `c = 3`,
/// `d = 2`: `{}, {0}, {1}, {2}, {0,1}, {0,2}, {1,2}`.
pub fn subsets_up_to(c: usize, d: usize) -> Vec<u32> {
    let mut out = Vec::with_capacity(n_subsets_up_to(c, d) * c);
    for size in 0..=d.min(c) {
        // chosen components, advanced like an odometer in lexicographic order
        let mut idx: Vec<usize> = (0..size).collect();
        loop {
            let start = out.len();
            out.resize(start + c, 0);
            idx.iter().for_each(|&i| out[start + i] = 1);
            // rightmost index that can still move
            let Some(p) = (0..size).rev().find(|&p| idx[p] < c - size + p) else {
                break;
            };
            idx[p] += 1;
            for q in p + 1..size {
                idx[q] = idx[q - 1] + 1;
            }
        }
    }
    out
}

/// `Σ_{k ≤ min(c, d)} binom(c, k)`: the rows [`subsets_up_to`] returns.
pub fn n_subsets_up_to(c: usize, d: usize) -> usize {
    let mut binom = 1usize; // binom(c, 0)
    let mut total = 0;
    for k in 0..=d.min(c) {
        total += binom;
        binom = binom * (c - k) / (k + 1);
    }
    total
}

fn check_shapes<T>(zq: &[T], zk: &[T], deltas: &[u32], c: usize, s: usize, t: usize) -> usize {
    assert_eq!(zq.len(), c * s, "polykernel: zq is not [C, S]");
    assert_eq!(zk.len(), t * c * s, "polykernel: zk is not [T, C, S]");
    assert!(c > 0, "polykernel: no components");
    let nd = deltas.len() / c;
    assert_eq!(
        nd * c,
        deltas.len(),
        "polykernel: deltas is not [n_delta, C]"
    );
    nd
}

/// Writes the features `k_out` and the rectified inner products `gram`.
#[allow(clippy::too_many_arguments)]
pub fn forward<T: Float>(
    k_out: &mut [T],
    gram: &mut [T],
    zq: &[T],
    zk: &[T],
    deltas: &[u32],
    c: usize,
    s: usize,
    t: usize,
) {
    // zq: [C, S], zk: [T, C, S], deltas: [n_delta, C] -> k_out: [n_delta, T], gram: [T, C]
    let nd = check_shapes(zq, zk, deltas, c, s, t);
    assert_eq!(k_out.len(), nd * t, "polykernel: K is not [n_delta, T]");
    assert_eq!(gram.len(), t * c, "polykernel: gram is not [T, C]");
    for (tc, g) in gram.iter_mut().enumerate() {
        let ci = tc % c;
        let ip: T = zq[ci * s..(ci + 1) * s]
            .iter()
            .zip(&zk[tc * s..(tc + 1) * s])
            .map(|(&a, &b)| a * b)
            .sum();
        *g = ip.max(T::zero());
    }
    for (di, delta) in deltas.chunks_exact(c).enumerate() {
        for ti in 0..t {
            let g = &gram[ti * c..(ti + 1) * c];
            k_out[di * t + ti] = delta
                .iter()
                .zip(g)
                .fold(T::one(), |acc, (&e, &gc)| acc * gc.powi(e as i32));
        }
    }
}

/// Accumulates `dzq` and `dzk` from `dk`, given the forward's `gram`.
#[allow(clippy::too_many_arguments)]
pub fn backward<T: Float>(
    dzq: &mut [T],
    dzk: &mut [T],
    dk: &[T],
    gram: &[T],
    zq: &[T],
    zk: &[T],
    deltas: &[u32],
    c: usize,
    s: usize,
    t: usize,
) {
    // dk: [n_delta, T], gram: [T, C], zq: [C, S], zk: [T, C, S], deltas: [n_delta, C]
    //   -> dzq: [C, S] (+=), dzk: [T, C, S] (+=)
    let nd = check_shapes(zq, zk, deltas, c, s, t);
    assert_eq!(dk.len(), nd * t, "polykernel: dK is not [n_delta, T]");
    assert_eq!(gram.len(), t * c, "polykernel: gram is not [T, C]");
    assert_eq!(dzq.len(), zq.len(), "polykernel: dzq is not [C, S]");
    assert_eq!(dzk.len(), zk.len(), "polykernel: dzk is not [T, C, S]");
    for ti in 0..t {
        let g = &gram[ti * c..(ti + 1) * c];
        for ci in 0..c {
            if g[ci] <= T::zero() {
                continue; // ReLU inactive: no gradient reaches the inner product
            }
            // dL/dg[t, c] = Σ_δ dK[δ, t] · δ_c g_c^(δ_c − 1) Π_{c' ≠ c} g_c'^(δ_c')
            let mut dg = T::zero();
            for (di, delta) in deltas.chunks_exact(c).enumerate() {
                let e = delta[ci];
                if e == 0 {
                    continue;
                }
                let mut part = T::of_usize(e as usize) * g[ci].powi(e as i32 - 1);
                for (cj, (&ej, &gj)) in delta.iter().zip(g).enumerate() {
                    if cj != ci {
                        part *= gj.powi(ej as i32);
                    }
                }
                dg += dk[di * t + ti] * part;
            }
            let (q_row, k_off) = (&zq[ci * s..(ci + 1) * s], (ti * c + ci) * s);
            let k_row = &zk[k_off..k_off + s];
            for (d, &kv) in dzq[ci * s..(ci + 1) * s].iter_mut().zip(k_row) {
                *d += dg * kv;
            }
            for (d, &qv) in dzk[k_off..k_off + s].iter_mut().zip(q_row) {
                *d += dg * qv;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;

    #[test]
    fn subsets_order_and_count() {
        let got: Vec<Vec<u32>> = subsets_up_to(3, 2).chunks(3).map(|r| r.to_vec()).collect();
        let want = [
            [0, 0, 0],
            [1, 0, 0],
            [0, 1, 0],
            [0, 0, 1],
            [1, 1, 0],
            [1, 0, 1],
            [0, 1, 1],
        ];
        assert_eq!(got, want);
        for c in 1..7 {
            for d in 0..8 {
                let v = subsets_up_to(c, d);
                assert_eq!(v.len(), n_subsets_up_to(c, d) * c, "c={c} d={d}");
                // distinct rows, each with at most d ones
                let rows: std::collections::BTreeSet<&[u32]> = v.chunks(c).collect();
                assert_eq!(rows.len(), v.len() / c);
                assert!(v.chunks(c).all(|r| r.iter().sum::<u32>() as usize <= d));
            }
        }
        assert_eq!(n_subsets_up_to(4, 4), 16);
        assert_eq!(n_subsets_up_to(5, 2), 1 + 5 + 10);
    }

    #[test]
    fn forward_hand_case_with_powers() {
        // C=2, S=2, T=2. Key 0: inner products [2, 3]; key 1: [-1, 0.5] -> g = [0, 0.5]
        let zq = [1.0, 0.0, 0.0, 1.0];
        let zk = [2.0, 9.0, 9.0, 3.0, -1.0, 7.0, 7.0, 0.5];
        let deltas = [0, 0, 2, 1, 0, 1];
        let (mut k, mut g) = ([0.0; 6], [0.0; 4]);
        forward(&mut k, &mut g, &zq, &zk, &deltas, 2, 2, 2);
        assert_eq!(g, [2.0, 3.0, 0.0, 0.5]);
        assert_eq!(k, [1.0, 1.0, 12.0, 0.0, 3.0, 0.5]);
    }

    #[test]
    fn gradcheck_zq_zk() {
        let (c, s, t) = (3, 4, 5);
        let mut deltas = subsets_up_to(c, 3);
        deltas.extend_from_slice(&[2, 0, 1, 0, 3, 0]); // higher powers too
        let nd = deltas.len() / c;
        let mut r = rng(14);
        let zq = uniform(&mut r, c * s);
        let zk = uniform(&mut r, t * c * s);
        let seed = uniform(&mut r, nd * t);
        let run = |zq: &[f64], zk: &[f64]| {
            let (mut k, mut g) = (vec![0.0; nd * t], vec![0.0; t * c]);
            forward(&mut k, &mut g, zq, zk, &deltas, c, s, t);
            (dot(&k, &seed), g)
        };
        let (_, g) = run(&zq, &zk);
        // the check is only valid away from the ReLU kink, and must see both sides
        let ips: Vec<f64> = (0..t * c)
            .map(|tc| (0..s).map(|i| zq[(tc % c) * s + i] * zk[tc * s + i]).sum())
            .collect();
        assert!(ips.iter().all(|v| v.abs() > 1e-2), "{ips:?}");
        assert!(g.contains(&0.0) && g.iter().filter(|&&v| v > 0.0).count() > t);
        let (dq0, dk0) = (uniform(&mut r, zq.len()), uniform(&mut r, zk.len()));
        let (mut dq, mut dk) = (dq0.clone(), dk0.clone());
        backward(&mut dq, &mut dk, &seed, &g, &zq, &zk, &deltas, c, s, t);
        assert_grad(
            "polykernel dzq",
            &mut |x: &[f64]| run(x, &zk).0,
            &zq,
            &accumulated(&dq, &dq0),
        );
        assert_grad(
            "polykernel dzk",
            &mut |x: &[f64]| run(&zq, x).0,
            &zk,
            &accumulated(&dk, &dk0),
        );
    }

    fn run_generic<T: Float>(
        zq: &[f64],
        zk: &[f64],
        dkv: &[f64],
        deltas: &[u32],
        c: usize,
        s: usize,
        t: usize,
    ) -> Vec<f64> {
        let (zq, zk, dkv) = (cast::<T>(zq), cast::<T>(zk), cast::<T>(dkv));
        let (mut k, mut g) = (vec![T::zero(); dkv.len()], vec![T::zero(); t * c]);
        forward(&mut k, &mut g, &zq, &zk, deltas, c, s, t);
        let (mut dq, mut dk) = (vec![T::zero(); zq.len()], vec![T::zero(); zk.len()]);
        backward(&mut dq, &mut dk, &dkv, &g, &zq, &zk, deltas, c, s, t);
        [k, dq, dk].iter().flat_map(|x| to_f64(x)).collect()
    }

    #[test]
    fn f32_matches_f64() {
        let (c, s, t) = (4, 3, 6);
        let deltas = subsets_up_to(c, 2);
        let mut r = rng(15);
        let (zq, zk) = (uniform(&mut r, c * s), uniform(&mut r, t * c * s));
        let dkv = uniform(&mut r, deltas.len() / c * t);
        let a = run_generic::<f32>(&zq, &zk, &dkv, &deltas, c, s, t);
        let b = run_generic::<f64>(&zq, &zk, &dkv, &deltas, c, s, t);
        assert_close("polykernel f32", &a, &b, 1e-5);
    }
}
