//! What the trained model does: its distance to each in-context strategy, and
//! its two heads.
//!
//! On a fixed evaluation batch the model's predictive distribution at every
//! position is compared with the paper's strategies (uniform, in-context
//! unigram, in-context k-grams up to the data's order) by the KL divergence
//! `KL(strategy ‖ model)`, averaged over positions and sequences; the strategy
//! with the smallest divergence is the one the model is using. The heads are
//! scored TransformerLens-style from `blocks.{l}.attn.hook_pattern`
//! (`[batch, head, query_pos, key_pos]`): layer 0's *previous-token* score is the
//! mean attention from position `i` to `i − r` (r = 1, 2, ... per head), and
//! layer 1's *statistical induction* score is the attention mass a query puts on
//! the keys `j` whose preceding `n − 1` tokens equal the query's own last `n − 1`
//! tokens — the keys holding the next token after an earlier occurrence of the
//! current context, which is what the paper's induction head reads. Each score
//! comes with the value uniform causal attention would get.

use super::data::{ctx_index, strategy_probs, Batch, Strategy};
use super::IclModel;
use mechlab_engine::Float;

/// The strategies compared, for data of order `n`: uniform, unigram, 2..=n-grams.
pub fn strategies(order: usize) -> Vec<Strategy> {
    let mut v = vec![Strategy::Uniform, Strategy::Unigram];
    v.extend((2..=order).map(Strategy::Ngram));
    v
}

/// Display name of a strategy.
pub fn strategy_name(s: Strategy) -> String {
    match s {
        Strategy::Uniform => "uniform".into(),
        Strategy::Unigram => "unigram".into(),
        Strategy::Ngram(2) => "bigram".into(),
        Strategy::Ngram(3) => "trigram".into(),
        Strategy::Ngram(k) => format!("{k}gram"),
    }
}

/// One evaluation of the model.
#[derive(Clone, Debug, PartialEq)]
pub struct Eval {
    /// Mean next-token cross-entropy.
    pub loss: f64,
    /// KL(strategy ‖ model) per strategy of [`strategies`].
    pub kl: Vec<f64>,
    /// Layer 0: per head, attention to distance r = 1..=order−1 (`[head, r]`).
    pub prev_token: Vec<Vec<f64>>,
    /// The same under uniform causal attention.
    pub prev_token_uniform: f64,
    /// Layer 0: per head, the mean attention at every distance 0..T (`[head, r]`,
    /// over the same queries as `prev_token`; a query farther than r from the
    /// start counts 0), whose argmax is the distance the head attends to most.
    pub profile: Vec<Vec<f64>>,
    /// Layer 1's statistical induction score, and uniform attention's.
    pub induction: f64,
    pub induction_uniform: f64,
}

/// Cross-entropy of each strategy on the batch (the model-free baselines).
pub fn strategy_losses(batch: &Batch, vocab: usize, alpha: f64, order: usize) -> Vec<f64> {
    let t = batch.len - 1;
    let mut out = vec![0.0; t * vocab];
    strategies(order)
        .iter()
        .map(|&st| {
            let mut tot = 0.0;
            for seq in batch.tokens.chunks_exact(batch.len) {
                strategy_probs(seq, vocab, alpha, st, &mut out);
                for i in 0..t {
                    tot -= out[i * vocab + seq[i + 1] as usize].ln();
                }
            }
            tot / (batch.n * t) as f64
        })
        .collect()
}

/// Evaluates the model on `batch` (data of order `order`).
pub fn evaluate<T: Float, M: IclModel<T>>(
    m: &mut M,
    batch: &Batch,
    alpha: f64,
    order: usize,
) -> Eval {
    let (s, t) = (m.vocab(), batch.len - 1);
    let h0 = m.layer0_heads();
    let strats = strategies(order);
    let mut kl = vec![0.0; strats.len()];
    let mut sp = vec![0.0; t * s];
    let mut probs = vec![0.0; t * s];
    let (mut loss, mut ind, mut ind_u, mut prev_u) = (0.0, 0.0, 0.0, 0.0);
    let n1 = order - 1;
    let mut prev = vec![vec![0.0; n1]; h0];
    let mut profile = vec![vec![0.0; t]; h0];
    let (mut n_ind, mut n_prev) = (0usize, 0usize);
    for seq in batch.tokens.chunks_exact(batch.len) {
        let (logits, pats) = m.run_one(&seq[..t]);
        for i in 0..t {
            let z: Vec<f64> = logits[i * s..(i + 1) * s]
                .iter()
                .map(|v| v.as_f64())
                .collect();
            let mx = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let lse = z.iter().map(|v| (v - mx).exp()).sum::<f64>().ln() + mx;
            for x in 0..s {
                probs[i * s + x] = z[x] - lse; // log-probabilities
            }
            loss -= probs[i * s + seq[i + 1] as usize];
        }
        for (k, &st) in strats.iter().enumerate() {
            strategy_probs(seq, s, alpha, st, &mut sp);
            for (pv, lq) in sp.iter().zip(&probs) {
                if *pv > 0.0 {
                    kl[k] += pv * (pv.ln() - lq);
                }
            }
        }
        // layer 0: attention at distances 1..=n−1, from queries i ≥ n − 1
        for i in n1..t {
            for (hd, ph) in prev.iter_mut().enumerate() {
                let row = &pats[0][(hd * t + i) * t..(hd * t + i + 1) * t];
                for r in 1..=n1 {
                    ph[r - 1] += row[i - r].as_f64();
                }
                for (j, a) in row[..=i].iter().enumerate() {
                    profile[hd][i - j] += a.as_f64();
                }
            }
            prev_u += 1.0 / (i + 1) as f64;
            n_prev += 1;
        }
        // layer 1: mass on keys j ≥ n−1 whose preceding n−1 tokens match the query's last n−1
        for i in n1..t {
            let row = &pats[1][i * t..(i + 1) * t];
            let ctx = &seq[i + 1 - n1..=i];
            let (mut mass, mut count) = (0.0, 0usize);
            for j in n1..=i {
                if &seq[j - n1..j] == ctx {
                    mass += row[j].as_f64();
                    count += 1;
                }
            }
            ind += mass;
            ind_u += count as f64 / (i + 1) as f64;
            n_ind += 1;
        }
    }
    let npos = (batch.n * t) as f64;
    Eval {
        loss: loss / npos,
        kl: kl.iter().map(|v| v / npos).collect(),
        prev_token: prev
            .iter()
            .map(|ph| ph.iter().map(|v| v / n_prev.max(1) as f64).collect())
            .collect(),
        prev_token_uniform: prev_u / n_prev.max(1) as f64,
        profile: profile
            .iter()
            .map(|ph| ph.iter().map(|v| v / n_prev.max(1) as f64).collect())
            .collect(),
        induction: ind / n_ind.max(1) as f64,
        induction_uniform: ind_u / n_ind.max(1) as f64,
    }
}

/// The first of `steps` at which `pred` holds for the values there (`None`: never).
pub fn first_step(steps: &[f64], pred: impl Fn(usize) -> bool) -> Option<u64> {
    (0..steps.len()).find(|&i| pred(i)).map(|i| steps[i] as u64)
}

/// The authors' metric (`test_error.test_last_token`): at the last position of
/// each sequence of a fixed set, KL(true row ‖ model) and KL(strategy ‖ model)
/// for every strategy of [`strategies`], averaged over the set.
#[derive(Clone, Debug, PartialEq)]
pub struct LastToken {
    pub kl_true: f64,
    pub kl: Vec<f64>,
}

/// The last position's true next-token row and each strategy's prediction
/// there, per sequence of `batch`: `(true [n, S], strategies [k][n, S])`.
pub fn last_targets(
    batch: &Batch,
    vocab: usize,
    alpha: f64,
    order: usize,
) -> (Vec<f64>, Vec<Vec<f64>>) {
    let (s, t, n1) = (vocab, batch.len - 1, order - 1);
    let rows = s.pow(n1 as u32) * s;
    let mut truth = Vec::with_capacity(batch.n * s);
    let strats = strategies(order);
    let mut per = vec![Vec::with_capacity(batch.n * s); strats.len()];
    let mut out = vec![0.0; t * s];
    for (b, seq) in batch.tokens.chunks_exact(batch.len).enumerate() {
        // the input is seq[..t]; its last position predicts seq[t] from seq[t − n1..t]
        let c = ctx_index(&seq[t - n1..t], s);
        truth.extend_from_slice(&batch.trans[b * rows + c * s..b * rows + (c + 1) * s]);
        for (k, &st) in strats.iter().enumerate() {
            strategy_probs(seq, s, alpha, st, &mut out);
            per[k].extend_from_slice(&out[(t - 1) * s..t * s]);
        }
    }
    (truth, per)
}

/// Mean KL(p ‖ q) over rows, `q` as log-probabilities.
pub fn mean_kl(p: &[f64], logq: &[f64], s: usize) -> f64 {
    let n = p.len() / s;
    let tot: f64 = p
        .iter()
        .zip(logq)
        .filter(|(pv, _)| **pv > 0.0)
        .map(|(pv, lq)| pv * (pv.ln() - lq))
        .sum();
    tot / n.max(1) as f64
}

/// The authors' metric of a model on `batch`, whose [`last_targets`] are `targets`.
pub fn last_token<T: Float, M: IclModel<T>>(
    m: &mut M,
    batch: &Batch,
    targets: &(Vec<f64>, Vec<Vec<f64>>),
) -> LastToken {
    let s = m.vocab();
    let mut logq = m.last_logits(&batch.tokens, batch.len);
    for row in logq.chunks_exact_mut(s) {
        let mx = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let lse = row.iter().map(|v| (v - mx).exp()).sum::<f64>().ln() + mx;
        row.iter_mut().for_each(|v| *v -= lse);
    }
    LastToken {
        kl_true: mean_kl(&targets.0, &logq, s),
        kl: targets.1.iter().map(|p| mean_kl(p, &logq, s)).collect(),
    }
}

/// The distance a head's attention profile peaks at.
pub fn peak_distance(profile: &[f64]) -> usize {
    (0..profile.len())
        .max_by(|&a, &b| profile[a].total_cmp(&profile[b]).then(b.cmp(&a)))
        .unwrap_or(0)
}
