//! LDA documents and BERT-style masked-language-modelling inputs (Li, Li, Risteski 2023).
//!
//! A topic model with `n_topics` topics over `n_topics · words_per_topic` words:
//! topic `t` owns words `t·W ... t·W + W − 1` and, with `overlap = o > 0`, also the
//! first `o` words of topic `t + 1` (cyclically), so supports overlap. Within its
//! support a topic is uniform (the paper's demo) or Zipf-shaped. A document draws
//! `θ ~ Dirichlet(α·1)`, a length `N ~ Uniform{min_len..=max_len}`, and for each
//! word a topic from `θ` and a word from that topic. Token ids follow the
//! authors' vocabulary: `PAD = 0, MASK = 1, START = 2, END = 3`, then the words;
//! every document starts with `START`.
//!
//! Masking ([`mask_docs`]) selects each word token with probability `mask_prob`
//! (redrawing the document's selection until at least one is selected); a selected
//! token becomes `MASK` (80%), a uniformly random id from the whole vocabulary
//! (10%), or stays (10%); selected positions carry a label and are hidden as keys.
//!
//! ```
//! use mechlab::papers::topic::data::{LdaConfig, LdaModel, generate, mask_docs, NO_LABEL, START};
//! let cfg = LdaConfig { n_train: 3, ..LdaConfig::default() };
//! let lda = LdaModel::new(&cfg).unwrap();
//! let mut rng = mechlab::rng::stream(0, mechlab::rng::Stream::Data);
//! let docs = generate(&lda, &cfg, 3, &mut rng);
//! assert_eq!(docs.len(), 3);
//! assert_eq!(docs.doc(0)[0], START);
//! let mut set = docs.to_mlm();
//! mask_docs(&mut set, &cfg, lda.d_vocab(), &mut rng);
//! assert!(set.label[set.offsets[0]..set.offsets[1]].iter().any(|&l| l != NO_LABEL));
//! ```

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Gamma};
use serde::{Deserialize, Serialize};

pub const PAD: u32 = 0;
pub const MASK: u32 = 1;
pub const START: u32 = 2;
pub const END: u32 = 3;
/// Number of special tokens before the first word id.
pub const N_SPECIAL: usize = 4;
/// Label of a position that is not predicted.
pub const NO_LABEL: u32 = u32::MAX;

/// Shape of a topic's distribution over its support.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WordDist {
    /// Uniform over the support (the paper).
    Uniform,
    /// `p(i-th word) ∝ (i + 1)^(−zipf_exponent)` over the support.
    Zipf,
}

/// The `[data]` section: the generator and the masking.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LdaConfig {
    pub n_topics: usize,
    pub words_per_topic: usize,
    /// Extra words of the next topic each topic also emits (0: disjoint supports).
    pub overlap: usize,
    pub word_dist: WordDist,
    pub zipf_exponent: f64,
    /// Dirichlet concentration of the document-topic distribution.
    pub alpha: f64,
    pub min_len: usize,
    pub max_len: usize,
    pub n_train: usize,
    pub n_dev: usize,
    pub n_test: usize,
    pub mask_prob: f64,
    /// Share of selected tokens left unchanged.
    pub mask_keep: f64,
    /// Share of selected tokens replaced by a random id.
    pub mask_random: f64,
    /// Redraw the training masks every epoch (the authors draw them once).
    pub fresh_masks: bool,
}

impl Default for LdaConfig {
    fn default() -> Self {
        LdaConfig {
            n_topics: 10,
            words_per_topic: 10,
            overlap: 0,
            word_dist: WordDist::Uniform,
            zipf_exponent: 1.0,
            alpha: 0.1,
            min_len: 100,
            max_len: 150,
            n_train: 10_000,
            n_dev: 10_000,
            n_test: 10_000,
            mask_prob: 0.15,
            mask_keep: 0.1,
            mask_random: 0.1,
            fresh_masks: false,
        }
    }
}

impl LdaConfig {
    /// Checks the generator settings, naming the offending key.
    pub fn check(&self) -> Result<(), String> {
        let bad = |k: &str, why: &str| Err(format!("data.{k}: {why}"));
        if self.n_topics == 0 || self.words_per_topic == 0 {
            return bad(
                "n_topics",
                "n_topics and words_per_topic must be at least 1",
            );
        }
        if self.overlap + self.words_per_topic > self.n_topics * self.words_per_topic {
            return bad(
                "overlap",
                "overlap must be smaller than the other topics' words",
            );
        }
        if !(self.alpha > 0.0 && self.alpha.is_finite()) {
            return bad("alpha", "must be a positive number");
        }
        if self.min_len == 0 || self.min_len > self.max_len {
            return bad("min_len", "need 1 <= min_len <= max_len");
        }
        if !(0.0..=1.0).contains(&self.mask_prob) || self.mask_prob == 0.0 {
            return bad("mask_prob", "must lie in (0, 1]");
        }
        if self.mask_keep < 0.0 || self.mask_random < 0.0 || self.mask_keep + self.mask_random > 1.0
        {
            return bad("mask_keep", "mask_keep, mask_random >= 0 with sum <= 1");
        }
        if self.word_dist == WordDist::Zipf && !self.zipf_exponent.is_finite() {
            return bad("zipf_exponent", "must be finite");
        }
        if self.n_train == 0 || self.n_dev == 0 {
            return bad("n_train", "need at least one train and one dev document");
        }
        Ok(())
    }
}

/// The topic-word distributions of a config.
#[derive(Clone, Debug)]
pub struct LdaModel {
    pub n_topics: usize,
    pub words_per_topic: usize,
    pub alpha: f64,
    /// Per topic: its support (word indices) and the probability of each.
    pub support: Vec<Vec<usize>>,
    pub prob: Vec<Vec<f64>>,
    cum: Vec<Vec<f64>>,
}

impl LdaModel {
    pub fn new(cfg: &LdaConfig) -> Result<Self, String> {
        cfg.check()?;
        let (t, w) = (cfg.n_topics, cfg.words_per_topic);
        let n_words = t * w;
        let mut support = Vec::with_capacity(t);
        let mut prob = Vec::with_capacity(t);
        let mut cum = Vec::with_capacity(t);
        for topic in 0..t {
            let s: Vec<usize> = (0..w + cfg.overlap)
                .map(|i| (topic * w + i) % n_words)
                .collect();
            let raw: Vec<f64> = (0..s.len())
                .map(|i| match cfg.word_dist {
                    WordDist::Uniform => 1.0,
                    WordDist::Zipf => ((i + 1) as f64).powf(-cfg.zipf_exponent),
                })
                .collect();
            let z: f64 = raw.iter().sum();
            let p: Vec<f64> = raw.iter().map(|r| r / z).collect();
            let c: Vec<f64> = p
                .iter()
                .scan(0.0, |a, x| {
                    *a += x;
                    Some(*a)
                })
                .collect();
            support.push(s);
            prob.push(p);
            cum.push(c);
        }
        Ok(LdaModel {
            n_topics: t,
            words_per_topic: w,
            alpha: cfg.alpha,
            support,
            prob,
            cum,
        })
    }

    pub fn n_words(&self) -> usize {
        self.n_topics * self.words_per_topic
    }

    /// Vocabulary size: the special tokens plus the words.
    pub fn d_vocab(&self) -> usize {
        N_SPECIAL + self.n_words()
    }

    /// Each token id's primary topic (the topic owning the word); specials get
    /// `usize::MAX`. This is the word index `id − 4` divided by the words per topic,
    /// not the token id (the authors' inspection code divides the id).
    pub fn topic_of_token(&self) -> Vec<usize> {
        (0..self.d_vocab())
            .map(|id| {
                if id < N_SPECIAL {
                    usize::MAX
                } else {
                    (id - N_SPECIAL) / self.words_per_topic
                }
            })
            .collect()
    }

    /// `θ ~ Dirichlet(α·1)` via normalised Gamma draws.
    pub fn draw_theta(&self, rng: &mut ChaCha8Rng, theta: &mut [f64]) {
        let g = Gamma::new(self.alpha, 1.0).expect("alpha checked positive");
        loop {
            let mut s = 0.0;
            for x in theta.iter_mut() {
                *x = g.sample(rng);
                s += *x;
            }
            if s > 0.0 && s.is_finite() {
                theta.iter_mut().for_each(|x| *x /= s);
                return;
            }
        }
    }

    /// Word index drawn from topic `t`.
    pub fn draw_word(&self, t: usize, rng: &mut ChaCha8Rng) -> usize {
        self.support[t][pick(&self.cum[t], rng.random::<f64>())]
    }
}

/// Index of the first cumulative weight above `u` (the last if rounding leaves none).
fn pick(cum: &[f64], u: f64) -> usize {
    let total = *cum.last().expect("non-empty");
    let u = u * total;
    cum.iter().position(|&c| u < c).unwrap_or(cum.len() - 1)
}

/// Documents as token ids (each starting with `START`), concatenated.
#[derive(Clone, Debug, Default)]
pub struct Docs {
    pub tokens: Vec<u32>,
    /// `offsets[i]..offsets[i + 1]` is document `i`.
    pub offsets: Vec<usize>,
}

impl Docs {
    pub fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn doc(&self, i: usize) -> &[u32] {
        &self.tokens[self.offsets[i]..self.offsets[i + 1]]
    }
    pub fn max_len(&self) -> usize {
        self.offsets
            .windows(2)
            .map(|w| w[1] - w[0])
            .max()
            .unwrap_or(0)
    }
    /// Unmasked MLM inputs over these documents (call [`mask_docs`] next).
    pub fn to_mlm(&self) -> MlmSet {
        MlmSet {
            offsets: self.offsets.clone(),
            original: self.tokens.clone(),
            input: self.tokens.clone(),
            label: vec![NO_LABEL; self.tokens.len()],
            hidden: vec![false; self.tokens.len()],
        }
    }
}

/// Draws `n` documents.
pub fn generate(lda: &LdaModel, cfg: &LdaConfig, n: usize, rng: &mut ChaCha8Rng) -> Docs {
    let mut docs = Docs {
        tokens: Vec::with_capacity(n * (cfg.max_len + 1)),
        offsets: Vec::with_capacity(n + 1),
    };
    docs.offsets.push(0);
    let mut theta = vec![0.0; lda.n_topics];
    let mut cum = vec![0.0; lda.n_topics];
    for _ in 0..n {
        lda.draw_theta(rng, &mut theta);
        let mut a = 0.0;
        for (c, t) in cum.iter_mut().zip(&theta) {
            a += t;
            *c = a;
        }
        let len = rng.random_range(cfg.min_len..=cfg.max_len);
        docs.tokens.push(START);
        for _ in 0..len {
            let t = pick(&cum, rng.random::<f64>());
            docs.tokens.push((N_SPECIAL + lda.draw_word(t, rng)) as u32);
        }
        docs.offsets.push(docs.tokens.len());
    }
    docs
}

/// Masked-LM inputs: per token the model's input id, the label (or [`NO_LABEL`])
/// and whether the position is hidden as an attention key.
#[derive(Clone, Debug, Default)]
pub struct MlmSet {
    pub offsets: Vec<usize>,
    /// The unmasked tokens (for probes that need the true words).
    pub original: Vec<u32>,
    pub input: Vec<u32>,
    pub label: Vec<u32>,
    pub hidden: Vec<bool>,
}

impl MlmSet {
    pub fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn range(&self, i: usize) -> std::ops::Range<usize> {
        self.offsets[i]..self.offsets[i + 1]
    }
    pub fn max_len(&self) -> usize {
        self.offsets
            .windows(2)
            .map(|w| w[1] - w[0])
            .max()
            .unwrap_or(0)
    }
    /// Labelled positions in the documents `docs`.
    pub fn n_labels(&self, docs: &[u32]) -> usize {
        docs.iter()
            .map(|&d| {
                self.label[self.range(d as usize)]
                    .iter()
                    .filter(|&&l| l != NO_LABEL)
                    .count()
            })
            .sum()
    }
}

/// Redraws every document's mask in place (no allocation). Special tokens are
/// never selected.
pub fn mask_docs(set: &mut MlmSet, cfg: &LdaConfig, d_vocab: usize, rng: &mut ChaCha8Rng) {
    for i in 0..set.len() {
        let r = set.range(i);
        let n_words = set.original[r.clone()]
            .iter()
            .filter(|&&t| t as usize >= N_SPECIAL)
            .count();
        // Redraw the selection until one token is chosen (the authors try up to
        // 100 times; with 100+ words and p = 0.15 this never matters).
        for attempt in 0..100 {
            let mut any = false;
            for j in r.clone() {
                let tok = set.original[j];
                let sel = tok as usize >= N_SPECIAL && rng.random::<f64>() < cfg.mask_prob;
                set.hidden[j] = sel;
                any |= sel;
            }
            if any || n_words == 0 || attempt == 99 {
                break;
            }
        }
        for j in r {
            let tok = set.original[j];
            if set.hidden[j] {
                set.label[j] = tok;
                let u = rng.random::<f64>();
                set.input[j] = if u < 1.0 - cfg.mask_keep - cfg.mask_random {
                    MASK
                } else if u < 1.0 - cfg.mask_keep {
                    rng.random_range(0..d_vocab as u32)
                } else {
                    tok
                };
            } else {
                set.label[j] = NO_LABEL;
                set.input[j] = tok;
            }
        }
    }
}

/// `E[H(θ)]` for `θ ~ Dirichlet(α·1_T)`: `ψ(Tα + 1) − ψ(α + 1)` nats.
pub fn expected_theta_entropy(n_topics: usize, alpha: f64) -> f64 {
    digamma(n_topics as f64 * alpha + 1.0) - digamma(alpha + 1.0)
}

/// The MLM Bayes bound `E_θ[H(w | θ)]` for this config: with disjoint supports
/// `E[H(θ)] + mean_t H(β_t)` exactly (`log W + E[H(θ)]` when uniform); with
/// overlapping supports a Monte-Carlo mean over `samples` draws of `θ`.
pub fn bayes_bound(lda: &LdaModel, overlap: usize, samples: usize, rng: &mut ChaCha8Rng) -> f64 {
    let h = |p: &[f64]| -> f64 { p.iter().filter(|&&x| x > 0.0).map(|x| -x * x.ln()).sum() };
    if overlap == 0 {
        let mean_h: f64 = lda.prob.iter().map(|p| h(p)).sum::<f64>() / lda.n_topics as f64;
        return expected_theta_entropy(lda.n_topics, lda.alpha) + mean_h;
    }
    let mut theta = vec![0.0; lda.n_topics];
    let mut pw = vec![0.0; lda.n_words()];
    let mut acc = 0.0;
    for _ in 0..samples {
        lda.draw_theta(rng, &mut theta);
        pw.iter_mut().for_each(|x| *x = 0.0);
        for (t, th) in theta.iter().enumerate() {
            for (w, p) in lda.support[t].iter().zip(&lda.prob[t]) {
                pw[*w] += th * p;
            }
        }
        acc += h(&pw);
    }
    acc / samples as f64
}

/// Digamma by recurrence up to x ≥ 6 and the asymptotic series.
pub fn digamma(mut x: f64) -> f64 {
    let mut r = 0.0;
    while x < 6.0 {
        r -= 1.0 / x;
        x += 1.0;
    }
    let f = 1.0 / (x * x);
    r + x.ln()
        - 0.5 / x
        - f * (1.0 / 12.0 - f * (1.0 / 120.0 - f * (1.0 / 252.0 - f * (1.0 / 240.0 - f / 132.0))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::{stream, Stream};

    #[test]
    fn demo_bayes_bound_is_3_149() {
        let lda = LdaModel::new(&LdaConfig::default()).unwrap();
        let b = bayes_bound(&lda, 0, 0, &mut stream(0, Stream::Sample));
        assert!((b - 3.149).abs() < 5e-4, "{b}");
        assert!((digamma(1.0) + 0.5772156649).abs() < 1e-9);
    }

    #[test]
    fn documents_follow_the_config() {
        let cfg = LdaConfig::default();
        let lda = LdaModel::new(&cfg).unwrap();
        let docs = generate(&lda, &cfg, 200, &mut stream(1, Stream::Data));
        for i in 0..docs.len() {
            let d = docs.doc(i);
            assert!(d.len() >= 101 && d.len() <= 151);
            assert!(d[1..].iter().all(|&t| (4..104).contains(&t)));
        }
        // Sparse θ: most documents are dominated by few topics.
        let mut set = docs.to_mlm();
        mask_docs(
            &mut set,
            &cfg,
            lda.d_vocab(),
            &mut stream(1, Stream::Sample),
        );
        let sel =
            set.hidden.iter().filter(|&&h| h).count() as f64 / (set.hidden.len() - 200) as f64;
        assert!((sel - 0.15).abs() < 0.01, "{sel}");
        let masks = set.input.iter().filter(|&&t| t == MASK).count() as f64;
        let share = masks / set.hidden.iter().filter(|&&h| h).count() as f64;
        assert!((share - 0.8).abs() < 0.03, "{share}");
        assert!(set
            .hidden
            .iter()
            .zip(&set.original)
            .all(|(h, t)| !h || *t >= 4));
    }

    #[test]
    fn overlap_bound_is_below_disjoint_mixture_entropy() {
        let cfg = LdaConfig {
            overlap: 5,
            ..LdaConfig::default()
        };
        let lda = LdaModel::new(&cfg).unwrap();
        assert_eq!(lda.support[9][14], 4);
        let b = bayes_bound(&lda, 5, 2000, &mut stream(0, Stream::Sample));
        assert!(b > 2.5 && b < 4.0, "{b}");
        assert!(LdaModel::new(&LdaConfig { alpha: 0.0, ..cfg }).is_err());
    }
}
