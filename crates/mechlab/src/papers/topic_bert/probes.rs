//! The topic probes on a pretrained encoder, as Li, Li & Risteski define them
//! (their `inspect_result.py`): embedding inner products and average attention,
//! each split by whether two words share a topic.
//!
//! Every pair falls in one class: the same word (a word with itself, two pieces of
//! one word, or a word repeated), *no topic* (either word has none), *same topic*
//! or *different topic*. The statistic of a class is the mean over its pairs; the
//! gap is same-topic minus different-topic. Special tokens, stop words and
//! punctuation take part in no class (the authors' stop tokens).
//!
//! ```
//! use mechlab::papers::topic_bert::probes::{class_of, Class, NO_TOPIC};
//! assert_eq!(class_of(3, 3, false), Some(Class::SameTopic));
//! assert_eq!(class_of(3, NO_TOPIC, false), Some(Class::NoTopic));
//! assert_eq!(class_of(3, 4, true), Some(Class::SameWord));
//! ```

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

pub const NO_TOPIC: usize = usize::MAX;
/// A piece that takes part in no class (special token, stop word, punctuation).
pub const EXCLUDED: usize = usize::MAX - 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Class {
    SameWord = 0,
    SameTopic = 1,
    DifferentTopic = 2,
    NoTopic = 3,
}

pub const CLASS_NAMES: [&str; 4] = ["same word", "same topic", "different topic", "no topic"];

/// The class of a pair with topics `a`, `b` (or `None` when either is excluded).
pub fn class_of(a: usize, b: usize, same_word: bool) -> Option<Class> {
    if a == EXCLUDED || b == EXCLUDED {
        None
    } else if same_word {
        Some(Class::SameWord)
    } else if a == NO_TOPIC || b == NO_TOPIC {
        Some(Class::NoTopic)
    } else if a == b {
        Some(Class::SameTopic)
    } else {
        Some(Class::DifferentTopic)
    }
}

/// Sums and counts per class.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct ClassStats {
    pub sum: [f64; 4],
    pub count: [u64; 4],
}

impl ClassStats {
    pub fn add(&mut self, c: Class, x: f64) {
        self.sum[c as usize] += x;
        self.count[c as usize] += 1;
    }
    pub fn mean(&self, c: Class) -> f64 {
        self.sum[c as usize] / self.count[c as usize].max(1) as f64
    }
    /// Same-topic minus different-topic mean.
    pub fn gap(&self) -> f64 {
        self.mean(Class::SameTopic) - self.mean(Class::DifferentTopic)
    }
}

/// Inner products and cosines of embedding rows, by class, with a sample of
/// values per class for histograms.
#[derive(Clone, Debug, Default)]
pub struct EmbeddingProbe {
    pub dot: ClassStats,
    pub cos: ClassStats,
    /// Up to `keep` inner products per class (in sampling order).
    pub samples: [Vec<f64>; 4],
}

/// The embedding probe over the rows of `emb` (`[V, d]`): every pair of distinct
/// topic words (`topic[id] < NO_TOPIC`), each word with itself, and `n_random`
/// random pairs of eligible rows of which at least one has no topic.
pub fn embedding_probe(
    emb: &[f32],
    d: usize,
    topic: &[usize],
    n_random: usize,
    keep: usize,
    rng: &mut ChaCha8Rng,
) -> EmbeddingProbe {
    let row = |i: usize| &emb[i * d..(i + 1) * d];
    let dot = |a: usize, b: usize| -> f64 {
        row(a)
            .iter()
            .zip(row(b))
            .map(|(&x, &y)| x as f64 * y as f64)
            .sum()
    };
    let norms: Vec<f64> = (0..topic.len()).map(|i| dot(i, i).sqrt()).collect();
    let mut p = EmbeddingProbe::default();
    let add = |p: &mut EmbeddingProbe, c: Class, a: usize, b: usize| {
        let x = dot(a, b);
        p.dot.add(c, x);
        p.cos.add(c, x / (norms[a] * norms[b]).max(1e-30));
        if p.samples[c as usize].len() < keep {
            p.samples[c as usize].push(x);
        }
    };
    let words: Vec<usize> = (0..topic.len())
        .filter(|&i| topic[i] < NO_TOPIC - 1)
        .collect();
    for (k, &a) in words.iter().enumerate() {
        add(&mut p, Class::SameWord, a, a);
        for &b in &words[k + 1..] {
            let c = if topic[a] == topic[b] {
                Class::SameTopic
            } else {
                Class::DifferentTopic
            };
            add(&mut p, c, a, b);
        }
    }
    let eligible: Vec<usize> = (0..topic.len()).filter(|&i| topic[i] != EXCLUDED).collect();
    let mut n = 0;
    while n < n_random && eligible.len() > 1 {
        let (a, b) = (
            eligible[rng.random_range(0..eligible.len())],
            eligible[rng.random_range(0..eligible.len())],
        );
        if a != b && (topic[a] == NO_TOPIC || topic[b] == NO_TOPIC) {
            add(&mut p, Class::NoTopic, a, b);
            n += 1;
        }
    }
    p
}

/// Average attention per layer and head, by class.
#[derive(Clone, Debug)]
pub struct AttentionProbe {
    pub n_layers: usize,
    pub n_heads: usize,
    /// `[layer, head]`.
    pub stats: Vec<ClassStats>,
}

impl AttentionProbe {
    pub fn new(n_layers: usize, n_heads: usize) -> Self {
        AttentionProbe {
            n_layers,
            n_heads,
            stats: vec![ClassStats::default(); n_layers * n_heads],
        }
    }

    /// Adds one sequence: `patterns[l]` is its `[H, T, T]` pattern in layer `l`
    /// (only the first `n` positions are real), `topic[i]` and `word[i]` each
    /// piece's topic and word (pieces of one word, or the same word twice, share
    /// a `word`).
    pub fn add(
        &mut self,
        patterns: &[&[f64]],
        t: usize,
        n: usize,
        topic: &[usize],
        word: &[usize],
    ) {
        // One class matrix [n, n] for all heads.
        let mut classes: Vec<Option<Class>> = Vec::with_capacity(n * n);
        for i in 0..n {
            for j in 0..n {
                classes.push(class_of(topic[i], topic[j], i == j || word[i] == word[j]));
            }
        }
        for (l, pat) in patterns.iter().enumerate() {
            for h in 0..self.n_heads {
                let s = &mut self.stats[l * self.n_heads + h];
                for i in 0..n {
                    let row = &pat[(h * t + i) * t..(h * t + i) * t + n];
                    for (j, &x) in row.iter().enumerate() {
                        if let Some(c) = classes[i * n + j] {
                            s.add(c, x);
                        }
                    }
                }
            }
        }
    }

    /// Same-minus-different gap per `[layer, head]`.
    pub fn gaps(&self) -> Vec<f64> {
        self.stats.iter().map(ClassStats::gap).collect()
    }

    /// Pairs per class (the same for every head).
    pub fn counts(&self) -> [u64; 4] {
        self.stats[0].count
    }
}

/// Densities of `samples` per class on `bins` shared bins: `(centres, densities)`.
pub fn histograms(samples: &[Vec<f64>; 4], bins: usize) -> (Vec<f64>, Vec<Vec<f64>>) {
    let all = samples.iter().flatten();
    let lo = all.clone().copied().fold(f64::INFINITY, f64::min);
    let hi = all.copied().fold(f64::NEG_INFINITY, f64::max);
    let w = ((hi - lo) / bins as f64).max(1e-12);
    let centres = (0..bins).map(|b| lo + (b as f64 + 0.5) * w).collect();
    let dens = samples
        .iter()
        .map(|s| {
            let mut h = vec![0.0; bins];
            for &x in s {
                h[(((x - lo) / w) as usize).min(bins - 1)] += 1.0;
            }
            let z = s.len().max(1) as f64 * w;
            h.iter().map(|c| c / z).collect()
        })
        .collect();
    (centres, dens)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn embedding_gap_sees_topic_clusters() {
        // Two topics, rows of one topic point the same way; row 4 has no topic.
        let emb = [1.0f32, 0.1, 0.9, 0.0, 0.0, 1.0, 0.1, 0.9, 0.5, 0.5];
        let topic = [0, 0, 1, 1, NO_TOPIC];
        let p = embedding_probe(&emb, 2, &topic, 10, 100, &mut ChaCha8Rng::seed_from_u64(0));
        assert_eq!(p.dot.count[Class::SameTopic as usize], 2);
        assert_eq!(p.dot.count[Class::DifferentTopic as usize], 4);
        assert_eq!(p.dot.count[Class::NoTopic as usize], 10);
        assert!(p.dot.gap() > 0.5 && p.cos.gap() > 0.5);
    }

    #[test]
    fn attention_classes_follow_words_and_topics() {
        // T = 3 positions, one head, one layer; pieces 0 and 1 are one word.
        let mut a = AttentionProbe::new(1, 1);
        let pat = [0.2, 0.3, 0.5, 0.1, 0.1, 0.8, 0.6, 0.4, 0.0];
        a.add(&[&pat], 3, 3, &[1, 1, 2], &[0, 0, 1]);
        let s = a.stats[0];
        assert_eq!(s.count, [5, 0, 4, 0]);
        assert!((s.mean(Class::DifferentTopic) - (0.5 + 0.8 + 0.6 + 0.4) / 4.0).abs() < 1e-12);
        // Excluded pieces count nowhere.
        let mut b = AttentionProbe::new(1, 1);
        b.add(&[&pat], 3, 3, &[1, EXCLUDED, 1], &[0, 1, 2]);
        assert_eq!(b.stats[0].count, [2, 2, 0, 0]);
    }
}
