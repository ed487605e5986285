//! Phase times: when training enters the unigram plateau, when the model first
//! beats the in-context unigram strategy, when it is half-way from that strategy
//! to the bigram one, and when the bigram strategy becomes the nearest, read from
//! one metric's probe series.
//!
//! "Below unigram" comes early: on the plateau the model predicts better than
//! the add-one unigram strategy it imitates (its shrinkage is learned, not
//! fixed at α = 1), so the time marks reaching the plateau rather than leaving
//! it. "Half-way to bigram" (the model's distance to the truth below the mean of
//! the two strategies') marks leaving it.
//!
//! The same three times come from two metrics: ours (KL and loss averaged over
//! every position of the evaluation batch) and the authors' (the last position
//! of a fixed set of their size, `probes::last_token`). The authors' port in
//! `bench/markov_icl/authors_port.py` computes them the same way, so the two
//! implementations are compared time for time (`docs/markov-icl.md`).
//!
//! ```
//! use mechlab::papers::markov_icl::phases::phase_times;
//! // KL to uniform, unigram, bigram at steps 0, 10, 20, 30
//! let kls = vec![vec![0.0, 0.3, 0.5, 0.6], vec![0.1, 0.1, 0.2, 0.4], vec![0.2, 0.2, 0.1, 0.0]];
//! let t = phase_times(&[0.0, 10.0, 20.0, 30.0], &kls, &[0.7, 0.6, 0.55, 0.5], (0.56, 0.5));
//! assert_eq!((t.plateau, t.below_unigram, t.bigram_closest), (Some(10), Some(20), Some(20)));
//! assert_eq!(t.half_to_bigram, Some(30));
//! ```

use super::probes::first_step;

/// The three phase times of one metric (`None`: not reached in the run).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PhaseTimes {
    /// First probe step at which the unigram strategy is the nearest.
    pub plateau: Option<u64>,
    /// First probe step at which the model is nearer the true chain than the
    /// unigram strategy is.
    pub below_unigram: Option<u64>,
    /// First probe step at which the model's distance to the true chain is
    /// below the mean of the unigram and bigram strategies' distances.
    pub half_to_bigram: Option<u64>,
    /// First probe step at which the bigram strategy is the nearest.
    pub bigram_closest: Option<u64>,
}

impl PhaseTimes {
    /// `(name, time)` pairs, for metrics and tables.
    pub fn named(&self) -> [(&'static str, Option<u64>); 4] {
        [
            ("plateau", self.plateau),
            ("below_unigram", self.below_unigram),
            ("half_to_bigram", self.half_to_bigram),
            ("bigram_closest", self.bigram_closest),
        ]
    }
}

/// Phase times from `kls[k][i]`, KL(strategy k ‖ model) at probe `i` for the
/// strategies uniform, unigram, bigram(, ...) in that order; `to_truth[i]`, the
/// model's distance to the true chain (a loss or a KL), and `levels`, the
/// unigram and bigram strategies' distances on the same set.
pub fn phase_times(
    steps: &[f64],
    kls: &[Vec<f64>],
    to_truth: &[f64],
    levels: (f64, f64),
) -> PhaseTimes {
    let (unigram, bigram) = levels;
    let nearest = |i: usize| {
        (0..kls.len())
            .min_by(|&a, &b| kls[a][i].total_cmp(&kls[b][i]))
            .unwrap_or(0)
    };
    let n = steps.len().min(to_truth.len());
    let steps = &steps[..n];
    PhaseTimes {
        plateau: first_step(steps, |i| nearest(i) == 1),
        below_unigram: first_step(steps, |i| to_truth[i] < unigram),
        half_to_bigram: first_step(steps, |i| to_truth[i] < 0.5 * (unigram + bigram)),
        bigram_closest: first_step(steps, |i| kls.len() > 2 && nearest(i) == 2),
    }
}
