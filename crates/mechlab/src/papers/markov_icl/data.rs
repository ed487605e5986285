//! ICL-MC data: every sequence is a fresh Markov chain, drawn from a prior.
//!
//! Edelman et al. (2024) train on sequences whose transition matrix is drawn
//! anew for each sequence, so the only way to predict well is to infer the
//! chain *in context*. A chain of order `n − 1` over `S` symbols has one row per
//! context of `n − 1` symbols (`S^(n−1)` rows of `S` probabilities). The
//! [`Prior::Dirichlet`] prior draws every row from `Dir(α·1)` (the paper uses
//! α = 1); [`Prior::DoublyStochastic`] draws a bigram matrix uniformly from the
//! doubly stochastic matrices (rows *and* columns sum to one), the authors'
//! rejection sampler, under which the stationary law is uniform and in-context
//! unigram statistics carry no information. The first `n − 1` symbols come from
//! the chain's stationary law, as in the official `datasets.py`.
//!
//! The in-context strategies of the paper are here too: uniform, unigram and
//! n-gram predictors, each the posterior mean under a symmetric Dirichlet prior
//! on the counts seen so far (the n-gram one with the true α is the Bayes
//! predictor for the Dirichlet prior, up to the first symbols).

use rand::Rng;
use rand_distr::{Distribution, Gamma};
use serde::{Deserialize, Serialize};

/// The prior over transition matrices (`data.prior`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Prior {
    /// Every row from Dirichlet(α).
    #[default]
    Dirichlet,
    /// Uniform on the doubly stochastic matrices (bigrams only).
    DoublyStochastic,
}

/// The law of a sequence's first `n − 1` symbols (`data.first`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FirstToken {
    /// The chain's stationary law (what the authors' `datasets.py` means to do).
    #[default]
    Stationary,
    /// Uniform (what their code does: its `stationary_distribution` returns 1/S).
    Uniform,
}

/// What a batch is drawn from.
#[derive(Clone, Debug, PartialEq)]
pub struct ChainSpec {
    /// Symbols `S`.
    pub vocab: usize,
    /// n of the n-gram: 2 = bigram (a Markov chain), 3 = trigram.
    pub order: usize,
    pub prior: Prior,
    /// Dirichlet concentration of the rows.
    pub alpha: f64,
    /// Tokens per sequence, `T + 1` (inputs are the first `T`, targets the last `T`).
    pub len: usize,
    /// The first symbols' law.
    pub first: FirstToken,
}

impl ChainSpec {
    /// Rows of a transition table: `S^(n−1)`.
    pub fn n_ctx(&self) -> usize {
        self.vocab.pow(self.order as u32 - 1)
    }
    /// The value checks the generator relies on.
    pub fn check(&self) -> Result<(), String> {
        if !(2..=8).contains(&self.vocab) {
            return Err(format!("data.vocab = {}: must be 2..=8", self.vocab));
        }
        if !(2..=4).contains(&self.order) {
            return Err(format!("data.order = {}: must be 2..=4", self.order));
        }
        if self.len < self.order + 1 {
            return Err(format!(
                "data.seq_len = {}: must exceed data.order",
                self.len - 1
            ));
        }
        if !(self.alpha.is_finite() && self.alpha > 0.0) {
            return Err(format!(
                "data.alpha = {}: must be a positive number",
                self.alpha
            ));
        }
        if self.prior == Prior::DoublyStochastic && (self.order != 2 || self.vocab > 4) {
            return Err(format!(
                "data.prior = \"doubly_stochastic\" needs data.order = 2 and data.vocab ≤ 4 (got {} and {})",
                self.order, self.vocab
            ));
        }
        Ok(())
    }
}

/// A batch of sequences with the chains that made them.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    /// tokens: [B, len]
    pub tokens: Vec<u8>,
    /// trans: [B, S^(n−1), S]
    pub trans: Vec<f64>,
    pub n: usize,
    pub len: usize,
}

/// Index of the context `toks` (oldest first) in a transition table.
pub fn ctx_index(toks: &[u8], vocab: usize) -> usize {
    toks.iter().fold(0, |acc, &t| acc * vocab + t as usize)
}

fn dirichlet_row(rng: &mut impl Rng, gamma: &Gamma<f64>, row: &mut [f64]) {
    let mut sum = 0.0;
    for v in row.iter_mut() {
        *v = gamma.sample(rng).max(1e-300);
        sum += *v;
    }
    row.iter_mut().for_each(|v| *v /= sum);
}

/// Uniform on the S×S doubly stochastic matrices: the top-left (S−1)² block
/// uniform on [0,1], the last row and column completing the sums, rejected
/// unless every entry is positive (the authors' sampler).
fn doubly_stochastic(rng: &mut impl Rng, s: usize, out: &mut [f64]) {
    loop {
        for i in 0..s - 1 {
            for j in 0..s - 1 {
                out[i * s + j] = rng.random::<f64>();
            }
        }
        for i in 0..s - 1 {
            out[i * s + s - 1] = 1.0 - (0..s - 1).map(|j| out[i * s + j]).sum::<f64>();
        }
        for j in 0..s {
            out[(s - 1) * s + j] = 1.0 - (0..s - 1).map(|i| out[i * s + j]).sum::<f64>();
        }
        if out.iter().all(|&v| v > 0.0) {
            return;
        }
    }
}

/// The stationary law of the chain on contexts (`S^(n−1)` states), by power
/// iteration from uniform (rows are positive almost surely, so it converges).
fn stationary(trans: &[f64], s: usize, n_ctx: usize) -> Vec<f64> {
    let mut p = vec![1.0 / n_ctx as f64; n_ctx];
    let mut q = vec![0.0; n_ctx];
    for _ in 0..200 {
        q.iter_mut().for_each(|v| *v = 0.0);
        for c in 0..n_ctx {
            for x in 0..s {
                q[(c * s + x) % n_ctx] += p[c] * trans[c * s + x];
            }
        }
        std::mem::swap(&mut p, &mut q);
    }
    p
}

fn pick(rng: &mut impl Rng, probs: &[f64]) -> u8 {
    let u: f64 = rng.random();
    let mut acc = 0.0;
    for (i, &p) in probs.iter().enumerate() {
        acc += p;
        if u < acc {
            return i as u8;
        }
    }
    (probs.len() - 1) as u8
}

/// Draws `b` sequences, each from its own chain.
pub fn sample(spec: &ChainSpec, b: usize, rng: &mut impl Rng) -> Result<Batch, String> {
    spec.check()?;
    Ok(draw(spec, &gamma_of(spec)?, b, rng))
}

/// The row distribution's Gamma(α, 1) (normalised Gammas are Dirichlet).
pub fn gamma_of(spec: &ChainSpec) -> Result<Gamma<f64>, String> {
    Gamma::new(spec.alpha, 1.0).map_err(|e| format!("data.alpha = {}: {e}", spec.alpha))
}

/// [`sample`] for a spec that passed [`ChainSpec::check`], with its [`gamma_of`].
pub fn draw(spec: &ChainSpec, gamma: &Gamma<f64>, b: usize, rng: &mut impl Rng) -> Batch {
    let (s, nc, n1, len) = (spec.vocab, spec.n_ctx(), spec.order - 1, spec.len);
    let mut tokens = vec![0u8; b * len];
    let mut trans = vec![0.0; b * nc * s];
    for i in 0..b {
        let tr = &mut trans[i * nc * s..(i + 1) * nc * s];
        match spec.prior {
            Prior::Dirichlet => tr
                .chunks_exact_mut(s)
                .for_each(|r| dirichlet_row(rng, gamma, r)),
            Prior::DoublyStochastic => doubly_stochastic(rng, s, tr),
        }
        let start = match spec.first {
            FirstToken::Stationary => pick(rng, &stationary(tr, s, nc)) as usize,
            FirstToken::Uniform => rng.random_range(0..nc),
        };
        let seq = &mut tokens[i * len..(i + 1) * len];
        for (k, v) in seq[..n1].iter_mut().enumerate() {
            *v = ((start / s.pow((n1 - 1 - k) as u32)) % s) as u8;
        }
        for t in n1..len {
            let c = ctx_index(&seq[t - n1..t], s);
            seq[t] = pick(rng, &tr[c * s..(c + 1) * s]);
        }
    }
    Batch {
        tokens,
        trans,
        n: b,
        len,
    }
}

/// Permutes each sequence's tokens in place (the shuffled control): the
/// in-context unigram counts stay, every transition is destroyed.
pub fn shuffle(batch: &mut Batch, rng: &mut impl Rng) {
    for seq in batch.tokens.chunks_exact_mut(batch.len) {
        for i in (1..seq.len()).rev() {
            let j = rng.random_range(0..=i);
            seq.swap(i, j);
        }
    }
}

/// An in-context strategy of the paper.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    Uniform,
    /// Posterior-mean unigram: (count(x) + α) / (i + 1 + Sα).
    Unigram,
    /// Posterior-mean k-gram with `k − 1` symbols of context (2 = bigram).
    Ngram(usize),
}

/// The strategy's predictive distributions for every input position of one
/// sequence: `out[i]` predicts token `i + 1` from tokens `0..=i`.
pub fn strategy_probs(seq: &[u8], s: usize, alpha: f64, st: Strategy, out: &mut [f64]) {
    // seq: [T + 1], out: [T, S]
    let t = seq.len() - 1;
    match st {
        Strategy::Uniform => out.iter_mut().for_each(|v| *v = 1.0 / s as f64),
        Strategy::Unigram => {
            let mut c = vec![0.0; s];
            for i in 0..t {
                c[seq[i] as usize] += 1.0;
                let den = (i + 1) as f64 + s as f64 * alpha;
                for x in 0..s {
                    out[i * s + x] = (c[x] + alpha) / den;
                }
            }
        }
        Strategy::Ngram(k) => {
            let n1 = k - 1;
            let nc = s.pow(n1 as u32);
            let mut c = vec![0.0; nc * s];
            for i in 0..t {
                // transitions fully inside 0..=i: (ctx ending at j−1) → seq[j], j ≤ i
                if i >= n1 {
                    let ctx = ctx_index(&seq[i - n1..i], s);
                    c[ctx * s + seq[i] as usize] += 1.0;
                }
                let row = if i + 1 >= n1 {
                    let ctx = ctx_index(&seq[i + 1 - n1..=i], s);
                    &c[ctx * s..(ctx + 1) * s]
                } else {
                    &c[0..0]
                };
                let tot: f64 = row.iter().sum();
                for x in 0..s {
                    out[i * s + x] = if row.is_empty() {
                        1.0 / s as f64
                    } else {
                        (row[x] + alpha) / (tot + s as f64 * alpha)
                    };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::{stream, Stream};

    fn spec(prior: Prior, order: usize) -> ChainSpec {
        ChainSpec {
            vocab: 3,
            order,
            prior,
            alpha: 1.0,
            len: 40,
            first: FirstToken::Stationary,
        }
    }

    #[test]
    fn rows_are_distributions_and_doubly_stochastic_columns_too() {
        let mut rng = stream(1, Stream::Data);
        for (prior, order) in [
            (Prior::Dirichlet, 2),
            (Prior::Dirichlet, 3),
            (Prior::DoublyStochastic, 2),
        ] {
            let sp = spec(prior, order);
            let b = sample(&sp, 20, &mut rng).unwrap();
            assert!(b.tokens.iter().all(|&t| (t as usize) < 3));
            let s = 3;
            for tr in b.trans.chunks_exact(sp.n_ctx() * s) {
                for r in tr.chunks_exact(s) {
                    assert!((r.iter().sum::<f64>() - 1.0).abs() < 1e-12);
                }
                if prior == Prior::DoublyStochastic {
                    for j in 0..s {
                        let col: f64 = (0..s).map(|i| tr[i * s + j]).sum();
                        assert!((col - 1.0).abs() < 1e-12);
                    }
                }
            }
        }
    }

    /// The doubly stochastic sampler: rows and columns sum to one (above), the
    /// stationary law is uniform, and the law is symmetric under permutations
    /// (as the uniform law on the Birkhoff polytope is): every entry has mean
    /// 1/S, including those the sampler completes rather than draws.
    #[test]
    fn doubly_stochastic_matrices_are_uniform_on_the_polytope_in_mean() {
        for s in [2usize, 3] {
            let mut rng = stream(2, Stream::Data);
            let (n, mut mean) = (4000, vec![0.0; s * s]);
            let mut tr = vec![0.0; s * s];
            for _ in 0..n {
                doubly_stochastic(&mut rng, s, &mut tr);
                let pi = stationary(&tr, s, s);
                assert!(
                    pi.iter().all(|&p| (p - 1.0 / s as f64).abs() < 1e-9),
                    "{pi:?}"
                );
                mean.iter_mut()
                    .zip(&tr)
                    .for_each(|(m, v)| *m += v / n as f64);
            }
            // s.e. of a mean of U(0,1)-like entries over 4000 draws: ≈ 0.005
            for (k, m) in mean.iter().enumerate() {
                assert!(
                    (m - 1.0 / s as f64).abs() < 0.02,
                    "S = {s}, entry {k}: mean {m}"
                );
            }
        }
    }

    #[test]
    fn uniform_first_tokens_ignore_the_stationary_law() {
        let mut sp = spec(Prior::Dirichlet, 2);
        sp.first = FirstToken::Uniform;
        let b = sample(&sp, 3000, &mut stream(4, Stream::Data)).unwrap();
        let mut c = [0.0f64; 3];
        b.tokens
            .chunks_exact(b.len)
            .for_each(|q| c[q[0] as usize] += 1.0 / 3000.0);
        assert!(c.iter().all(|&f| (f - 1.0 / 3.0).abs() < 0.03), "{c:?}");
    }

    #[test]
    fn bigram_strategy_counts_transitions_in_context() {
        // 0 1 0 1 0 → after the last 0, counts (0→1) = 2, (0→0) = 0.
        let seq = [0u8, 1, 0, 1, 0, 0];
        let mut out = vec![0.0; 5 * 2];
        strategy_probs(&seq, 2, 1.0, Strategy::Ngram(2), &mut out);
        assert!((out[4 * 2 + 1] - 3.0 / 4.0).abs() < 1e-12);
        strategy_probs(&seq, 2, 1.0, Strategy::Unigram, &mut out);
        assert!((out[4 * 2] - 4.0 / 7.0).abs() < 1e-12);
    }

    #[test]
    fn bad_settings_are_errors() {
        let mut sp = spec(Prior::DoublyStochastic, 3);
        assert!(sample(&sp, 1, &mut stream(0, Stream::Data)).is_err());
        sp.order = 2;
        sp.alpha = 0.0;
        assert!(sp.check().is_err());
    }
}
