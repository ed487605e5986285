//! The paper's modified χ² mutual information of a parent set, estimated from
//! the data (see `docs/induction.md`): dense counts for small `S^(|P|+1)`,
//! sorted `(context, token)` pairs above ([`DENSE_MI`]), the same value bit for bit.

use super::data::{context, MarkovData};

/// The paper's modified χ² mutual information of the parent set `parents`,
/// estimated from the data: for each sequence the empirical joint law `p̂(e, E)`
/// of a token `e` and its parent tuple `E` over the positions where every parent
/// exists, then `Σ_E p̂(E)^power (Σ_e p̂(e | E)² / p̂(e) − 1)`, averaged over
/// sequences. `power = 1` is the ordinary χ² mutual information; the paper's
/// modified version is `power = 2`, whose weight `p̂(E)²` penalises large
/// parent sets (their contexts are rarer).
pub fn modified_chi2_mi(data: &MarkovData, parents: &[usize], power: f64) -> f64 {
    let s = data.vocab;
    let dense = (s as u64)
        .checked_pow(parents.len() as u32 + 1)
        .is_some_and(|n| n <= DENSE_MI as u64);
    if dense {
        modified_chi2_mi_dense(data, parents, power)
    } else {
        modified_chi2_mi_sparse(data, parents, power)
    }
}

/// Largest `S^(|P|+1)` for which [`modified_chi2_mi`] counts into a dense
/// table; above it, each sequence's `(context, token)` pairs are sorted and
/// counted in runs (`O(L log L)` per sequence, whatever `S^|P|`). Both give the
/// same value bit for bit (same terms, same order: contexts, then tokens, ascending).
pub const DENSE_MI: usize = 1024;

fn modified_chi2_mi_dense(data: &MarkovData, parents: &[usize], power: f64) -> f64 {
    let s = data.vocab;
    let n_ctx = s.pow(parents.len() as u32);
    let mut joint = vec![0.0; n_ctx * s];
    let mut marg = vec![0.0; s];
    let mut ctxm = vec![0.0f64; n_ctx];
    let mut total = 0.0;
    for b in 0..data.len() {
        let seq = data.seq(b);
        joint.iter_mut().for_each(|x| *x = 0.0);
        marg.iter_mut().for_each(|x| *x = 0.0);
        ctxm.iter_mut().for_each(|x| *x = 0.0);
        let mut n = 0.0;
        for i in 0..data.seq_len {
            if let Some(c) = context(seq, i, parents, s) {
                let e = seq[i] as usize;
                joint[c * s + e] += 1.0;
                marg[e] += 1.0;
                ctxm[c] += 1.0;
                n += 1.0;
            }
        }
        if n == 0.0 {
            continue;
        }
        let mut v = 0.0;
        for c in 0..n_ctx {
            if ctxm[c] == 0.0 {
                continue;
            }
            let pc = ctxm[c] / n;
            let mut inner = 0.0;
            for e in 0..s {
                if marg[e] > 0.0 {
                    let cond = joint[c * s + e] / ctxm[c];
                    inner += cond * cond / (marg[e] / n);
                }
            }
            v += pc.powf(power) * (inner - 1.0);
        }
        total += v;
    }
    total / data.len().max(1) as f64
}

fn modified_chi2_mi_sparse(data: &MarkovData, parents: &[usize], power: f64) -> f64 {
    let s = data.vocab;
    let mut pairs: Vec<(usize, u8)> = Vec::with_capacity(data.seq_len);
    let mut marg = vec![0.0; s];
    let mut total = 0.0;
    for b in 0..data.len() {
        let seq = data.seq(b);
        pairs.clear();
        marg.iter_mut().for_each(|x| *x = 0.0);
        for i in 0..data.seq_len {
            if let Some(c) = context(seq, i, parents, s) {
                pairs.push((c, seq[i]));
                marg[seq[i] as usize] += 1.0;
            }
        }
        if pairs.is_empty() {
            continue;
        }
        let n = pairs.len() as f64;
        pairs.sort_unstable();
        let mut v = 0.0;
        let mut k = 0;
        while k < pairs.len() {
            let c = pairs[k].0;
            let end = k + pairs[k..].iter().take_while(|p| p.0 == c).count();
            let cnt_c = (end - k) as f64;
            let mut inner = 0.0;
            let mut j = k;
            while j < end {
                let e = pairs[j].1;
                let run = pairs[j..end].iter().take_while(|p| p.1 == e).count();
                let cond = run as f64 / cnt_c;
                inner += cond * cond / (marg[e as usize] / n);
                j += run;
            }
            v += (cnt_c / n).powf(power) * (inner - 1.0);
            k = end;
        }
        total += v;
    }
    total / data.len().max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::papers::induction::data::{generate, MarkovSpec};

    #[test]
    fn sparse_and_dense_mi_agree_bit_for_bit() {
        let spec = MarkovSpec {
            n_seqs: 50,
            vocab: 5,
            ..MarkovSpec::default()
        };
        let d = generate(&spec, 7).unwrap();
        for p in [vec![1], vec![1, 2], vec![2, 3, 5]] {
            let a = modified_chi2_mi_dense(&d, &p, 2.0);
            let b = modified_chi2_mi_sparse(&d, &p, 2.0);
            assert_eq!(a.to_bits(), b.to_bits(), "{p:?}: {a} vs {b}");
        }
    }
}
