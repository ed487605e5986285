//! The built-in tasks' Bayes-optimal losses per target token, where they have
//! a closed form ([`super::tasks::Task::bayes`]): the posterior a predictor
//! that knows how the task draws its sequences holds after each prefix.

use crate::papers::birth::data::Bigrams;

/// The posterior over the repeat period `n` (uniform on lm-induction's range):
/// a prefix of length `j` has probability `V^(−min(n, j))` under every period
/// it is consistent with, and the next token is the one `n` back once `j ≥ n`.
pub(super) fn repeated_bayes(row: &[u32], v: usize, out: &mut [f64]) {
    let w = row.len();
    let (lo, hi) = ((w / 4).max(1), w.div_ceil(2).max(1));
    let mut ok = vec![true; hi + 1];
    let lv = (v as f64).ln();
    for j in 1..w {
        // the prefix row[..j] is known; drop the periods it contradicts
        for (n, o) in ok.iter_mut().enumerate().take(hi + 1).skip(lo) {
            if *o && j > n && row[j - 1] != row[j - 1 - n] {
                *o = false;
            }
        }
        let (mut num, mut den) = (0.0, 0.0);
        // weights V^(−min(n, j)), divided by the largest (the shortest period's)
        let top = (lo..=hi).find(|&n| ok[n]).map_or(0, |n| n.min(j));
        for n in lo..=hi {
            if !ok[n] {
                continue;
            }
            let wgt = (-((n.min(j) - top) as f64) * lv).exp();
            den += wgt;
            let p = if j >= n {
                f64::from(row[j] == row[j - n])
            } else {
                1.0 / v as f64
            };
            num += wgt * p;
        }
        out[j] = -(num / den).ln();
    }
}

/// The Dirichlet-multinomial posterior mean of the in-context counts for the
/// parent distances `parents`: `(N(c, x) + α) / (N(c) + Sα)`; a token with a
/// parent before the start is uniform.
pub(super) fn ngram_bayes(row: &[u32], parents: &[usize], s: usize, alpha: f64, out: &mut [f64]) {
    let ctx = |i: usize| -> Option<Vec<u32>> {
        parents
            .iter()
            .map(|&p| (i >= p).then(|| row[i - p]))
            .collect()
    };
    for j in 1..row.len() {
        let Some(c) = ctx(j) else {
            out[j] = (s as f64).ln();
            continue;
        };
        let (mut n, mut nx) = (0.0, 0.0);
        for i in 0..j {
            if ctx(i).as_ref() == Some(&c) {
                n += 1.0;
                if row[i] == row[j] {
                    nx += 1.0;
                }
            }
        }
        out[j] = -((nx + alpha) / (n + s as f64 * alpha)).ln();
    }
}

/// The triggers task's Bayes loss: a trigger's output is uniform the first
/// time and known after; any other token follows its bigram row.
pub(super) fn triggers_bayes(b: &Bigrams, row: &[u32], out: &mut [f64]) {
    let n = b.vocab();
    for j in 1..row.len() {
        let prev = row[j - 1];
        out[j] = if b.trigger(prev).is_some() {
            if row[..j - 1].contains(&prev) {
                0.0
            } else {
                (n as f64).ln()
            }
        } else {
            let r = &b.bigram[prev as usize * n..(prev as usize + 1) * n];
            let tot: u64 = r.iter().sum();
            if tot == 0 {
                let tot: u64 = b.unigram.iter().sum();
                -(b.unigram[row[j] as usize] as f64 / tot as f64).ln()
            } else {
                -(r[row[j] as usize] as f64 / tot as f64).ln()
            }
        };
    }
}
