//! Topic-structure probes: same-topic vs different-topic structure in a Gram
//! matrix and in attention.
//!
//! Topics are looked up by word index (`(id − 4) / words_per_topic`, via
//! `topic_of_token`), and special tokens (PAD, MASK, START, END, marked
//! `usize::MAX`) are excluded everywhere. The authors' inspection code divides the
//! token id instead (so its blocks are shifted by the four specials) and keeps the
//! specials; we do neither. A shuffled `topic_of_token` ([`shuffled_topics`]) is
//! the control: its gaps must vanish.
//!
//! ```
//! use mechlab::papers::topic::probes::gram_gap;
//! // 2 topics × 2 words, rows = word vectors; same-topic words aligned.
//! let rows = [1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0];
//! let topics = [0, 0, 1, 1];
//! let g = gram_gap(&rows, 4, 2, &topics);
//! assert_eq!((g.same, g.diff, g.gap), (1.0, 0.0, 1.0));
//! ```

use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

/// Mean same-topic and different-topic entries, and their difference.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Gap {
    pub same: f64,
    pub diff: f64,
    pub gap: f64,
}

/// The Gram matrix `G = R Rᵀ` of `rows: [n, d]`: mean off-diagonal entry over
/// same-topic pairs, over different-topic pairs, and the gap. Rows whose topic
/// is `usize::MAX` are skipped.
pub fn gram_gap(rows: &[f64], n: usize, d: usize, topic: &[usize]) -> Gap {
    let (mut s, mut ns, mut df, mut nd) = (0.0, 0usize, 0.0, 0usize);
    let idx: Vec<usize> = (0..n).filter(|&i| topic[i] != usize::MAX).collect();
    for &i in &idx {
        for &j in &idx {
            if i == j {
                continue;
            }
            let g: f64 = (0..d).map(|k| rows[i * d + k] * rows[j * d + k]).sum();
            if topic[i] == topic[j] {
                s += g;
                ns += 1;
            } else {
                df += g;
                nd += 1;
            }
        }
    }
    gap_of(s, ns, df, nd)
}

fn gap_of(s: f64, ns: usize, d: f64, nd: usize) -> Gap {
    let same = if ns > 0 { s / ns as f64 } else { 0.0 };
    let diff = if nd > 0 { d / nd as f64 } else { 0.0 };
    Gap {
        same,
        diff,
        gap: same - diff,
    }
}

/// The full Gram matrix `R Rᵀ` restricted to the rows `ids`, for heatmaps.
pub fn gram(rows: &[f64], d: usize, ids: &[usize]) -> Vec<f64> {
    let mut g = Vec::with_capacity(ids.len() * ids.len());
    for &i in ids {
        for &j in ids {
            g.push((0..d).map(|k| rows[i * d + k] * rows[j * d + k]).sum());
        }
    }
    g
}

/// Attention statistics over documents.
#[derive(Clone, Debug, Default, Serialize)]
pub struct AttnStats {
    /// Mean attention weight from a word query to a same-topic / different-topic
    /// visible word key (keys holding the query's own word excluded), and the gap.
    pub pairs: Gap,
    /// Mean over queries of the attention mass on same-topic keys of other words,
    /// and what uniform attention over the visible keys would put there.
    pub same_mass: f64,
    pub same_mass_uniform: f64,
    /// Mean entropy of a word query's attention row (nats), and the mean of
    /// `log(visible keys)` (uniform attention's entropy).
    pub entropy: f64,
    pub entropy_uniform: f64,
    /// `[T, T]`: mean attention mass from a topic-`a` query to topic-`b` keys.
    pub topic_matrix: Vec<f64>,
}

/// One document's attention pattern `[L, L]` with its input ids and hidden keys.
pub struct DocAttention<'a> {
    pub ids: &'a [u32],
    pub hidden: &'a [bool],
    pub pattern: &'a [f64],
}

/// Accumulates [`AttnStats`] over documents. Queries are visible word positions
/// (a masked query carries no word), keys visible word positions.
pub struct AttnAccum {
    n_topics: usize,
    pair: [f64; 2],
    npair: [usize; 2],
    mass: f64,
    mass_u: f64,
    ent: f64,
    ent_u: f64,
    nq: usize,
    tm: Vec<f64>,
    tn: Vec<usize>,
}

impl AttnAccum {
    pub fn new(n_topics: usize) -> Self {
        AttnAccum {
            n_topics,
            pair: [0.0; 2],
            npair: [0; 2],
            mass: 0.0,
            mass_u: 0.0,
            ent: 0.0,
            ent_u: 0.0,
            nq: 0,
            tm: vec![0.0; n_topics * n_topics],
            tn: vec![0; n_topics],
        }
    }

    pub fn add(&mut self, doc: &DocAttention<'_>, topic: &[usize]) {
        let l = doc.ids.len();
        let t = self.n_topics;
        let word = |j: usize| {
            let tp = topic[doc.ids[j] as usize];
            (!doc.hidden[j] && tp != usize::MAX).then_some(tp)
        };
        let n_vis = doc.hidden.iter().filter(|h| !**h).count().max(1);
        for i in 0..l {
            let Some(ti) = word(i) else { continue };
            let row = &doc.pattern[i * l..(i + 1) * l];
            let (mut m, mut same_keys, mut e) = (0.0, 0usize, 0.0);
            let mut per_topic = vec![0.0; t];
            for (j, &p) in row.iter().enumerate() {
                if p > 0.0 {
                    e -= p * p.ln();
                }
                let Some(tj) = word(j) else { continue };
                per_topic[tj.min(t - 1)] += p;
                // Other occurrences of the query's own word are same-topic under
                // any labelling (the shuffled control too): leave them out.
                if doc.ids[j] == doc.ids[i] {
                    continue;
                }
                if tj == ti {
                    m += p;
                    same_keys += 1;
                }
                let k = usize::from(tj != ti);
                self.pair[k] += p;
                self.npair[k] += 1;
            }
            self.mass += m;
            self.mass_u += same_keys as f64 / n_vis as f64;
            self.ent += e;
            self.ent_u += (n_vis as f64).ln();
            self.nq += 1;
            let ti = ti.min(t - 1);
            for (b, v) in per_topic.iter().enumerate() {
                self.tm[ti * t + b] += v;
            }
            self.tn[ti] += 1;
        }
    }

    pub fn finish(&self) -> AttnStats {
        let q = self.nq.max(1) as f64;
        let t = self.n_topics;
        AttnStats {
            pairs: gap_of(self.pair[0], self.npair[0], self.pair[1], self.npair[1]),
            same_mass: self.mass / q,
            same_mass_uniform: self.mass_u / q,
            entropy: self.ent / q,
            entropy_uniform: self.ent_u / q,
            topic_matrix: (0..t * t)
                .map(|ab| self.tm[ab] / self.tn[ab / t].max(1) as f64)
                .collect(),
        }
    }
}

/// The control: the same topic sizes with words assigned to topics at random
/// (specials stay `usize::MAX`).
pub fn shuffled_topics(topic: &[usize], rng: &mut ChaCha8Rng) -> Vec<usize> {
    let mut words: Vec<usize> = topic.iter().copied().filter(|&t| t != usize::MAX).collect();
    words.shuffle(rng);
    let mut it = words.into_iter();
    topic
        .iter()
        .map(|&t| {
            if t == usize::MAX {
                t
            } else {
                it.next().expect("same count")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_aligned_attention_has_a_gap_and_the_shuffle_does_not() {
        // 4 topics × 5 words; one document of 40 words, attention only to same-topic keys.
        let topic: Vec<usize> = (0..24)
            .map(|id| if id < 4 { usize::MAX } else { (id - 4) / 5 })
            .collect();
        let ids: Vec<u32> = std::iter::once(2)
            .chain((0..40).map(|j| 4 + (j * 7 % 20) as u32))
            .collect();
        let l = ids.len();
        let hidden = vec![false; l];
        let mut pattern = vec![0.0; l * l];
        for i in 0..l {
            let same: Vec<usize> = (1..l)
                .filter(|&j| topic[ids[j] as usize] == topic[ids[i] as usize])
                .collect();
            for &j in &same {
                pattern[i * l + j] = 1.0 / same.len() as f64;
            }
            if same.is_empty() {
                pattern[i * l] = 1.0;
            }
        }
        let doc = DocAttention {
            ids: &ids,
            hidden: &hidden,
            pattern: &pattern,
        };
        let mut a = AttnAccum::new(4);
        a.add(&doc, &topic);
        let s = a.finish();
        assert!(s.pairs.gap > 0.05 && s.pairs.diff == 0.0, "{s:?}");
        assert!(s.same_mass > 0.7 && s.same_mass_uniform < 0.3, "{s:?}");
        let mut gaps = Vec::new();
        for seed in 0..20 {
            let sh = shuffled_topics(
                &topic,
                &mut crate::rng::stream(seed, crate::rng::Stream::Sample),
            );
            let mut c = AttnAccum::new(4);
            c.add(&doc, &sh);
            gaps.push(c.finish().pairs.gap);
        }
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        assert!(mean.abs() < 0.25 * s.pairs.gap, "{mean} vs {}", s.pairs.gap);
    }
}
