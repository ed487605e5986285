//! Token-selection data: padded id sequences with ±1 labels, and a seeded
//! synthetic generator whose important tokens are known.
//!
//! The vocabulary of the synthetic task is split into three classes: `n_pos`
//! positive tokens (ids `0..n_pos`), `n_neg` negative tokens (the next `n_neg`
//! ids) and `n_neutral` neutral tokens (the rest). A sequence of label `y = +1`
//! holds `n_signal` copies of one positive token drawn by a Zipf law over the
//! positive tokens, and neutral tokens elsewhere (Zipf over the neutral ones); a
//! `y = −1` sequence likewise with a negative token. Lengths are uniform in
//! `[t_min, t_max]`; shorter sequences are padded (id 0, masked by `lens`).
//! So the label-predictive token of every sequence (its "selected" token) is known.
//!
//! ```
//! use mechlab::papers::selection::data::{generate, SynthConfig, TokenClass};
//! let cfg = SynthConfig { n_train: 8, ..SynthConfig::default() };
//! let mut rng = mechlab::rng::stream(0, mechlab::rng::Stream::Data);
//! let d = generate(&cfg, cfg.n_train, &mut rng).unwrap();
//! assert_eq!(d.n, 8);
//! let k = 3;
//! let s = d.signal[k] as usize;
//! assert!(d.tokens(k).contains(&(s as u32)));
//! let want = if d.y[k] > 0.0 { TokenClass::Positive } else { TokenClass::Negative };
//! assert_eq!(cfg.class_of(s), want);
//! ```

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// A labelled set of padded sequences: `ids: [n, n_ctx]` row-major, `lens[k]`
/// valid tokens in row `k` (the rest is padding), `y[k] ∈ {−1, +1}`.
#[derive(Clone, Debug, Default)]
pub struct SeqData {
    pub n: usize,
    pub n_ctx: usize,
    pub d_vocab: usize,
    pub ids: Vec<u32>,
    pub lens: Vec<u32>,
    pub y: Vec<f64>,
    /// Ground-truth selected token of each sequence (synthetic data only; empty otherwise).
    pub signal: Vec<u32>,
}

impl SeqData {
    /// The valid tokens of sequence `k`.
    pub fn tokens(&self, k: usize) -> &[u32] {
        &self.ids[k * self.n_ctx..k * self.n_ctx + self.lens[k] as usize]
    }

    /// Checks the shape contracts and ranges; a message names the broken one.
    pub fn check(&self) -> Result<(), String> {
        if self.ids.len() != self.n * self.n_ctx
            || self.lens.len() != self.n
            || self.y.len() != self.n
        {
            return Err(format!(
                "sequence data: ids {} (want {}·{}), lens {}, labels {} (want {})",
                self.ids.len(),
                self.n,
                self.n_ctx,
                self.lens.len(),
                self.y.len(),
                self.n
            ));
        }
        for k in 0..self.n {
            let l = self.lens[k] as usize;
            if l == 0 || l > self.n_ctx {
                return Err(format!(
                    "sequence {k}: length {l} not in 1..={}",
                    self.n_ctx
                ));
            }
            if self.y[k] != 1.0 && self.y[k] != -1.0 {
                return Err(format!("sequence {k}: label {} is not ±1", self.y[k]));
            }
            if let Some(&t) = self.tokens(k).iter().find(|&&t| t as usize >= self.d_vocab) {
                return Err(format!(
                    "sequence {k}: token {t} ≥ vocabulary size {}",
                    self.d_vocab
                ));
            }
        }
        Ok(())
    }

    /// The first `m` sequences (or all), as a new set.
    pub fn head(&self, m: usize) -> SeqData {
        let m = m.min(self.n);
        SeqData {
            n: m,
            n_ctx: self.n_ctx,
            d_vocab: self.d_vocab,
            ids: self.ids[..m * self.n_ctx].to_vec(),
            lens: self.lens[..m].to_vec(),
            y: self.y[..m].to_vec(),
            signal: self.signal.iter().take(m).copied().collect(),
        }
    }
}

/// Which class a synthetic token belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenClass {
    Positive,
    Negative,
    Neutral,
}

/// The `[data]` knobs of the synthetic task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SynthConfig {
    pub n_pos: usize,
    pub n_neg: usize,
    pub n_neutral: usize,
    pub n_train: usize,
    pub n_test: usize,
    pub t_min: usize,
    pub t_max: usize,
    /// Copies of the (single) signal token in each sequence.
    pub n_signal: usize,
    /// Zipf exponent of the signal tokens' frequencies within their class (0: uniform).
    pub zipf_signal: f64,
    /// Zipf exponent of the neutral tokens' frequencies (0: uniform).
    pub zipf_neutral: f64,
    /// Draw sequences in mirrored pairs: the second of a pair has the opposite label,
    /// the same neutral context, and the signal token of the same rank in the other
    /// class (requires `n_pos = n_neg`). Neutral tokens are then exactly
    /// label-independent (`α = 0`), so each sequence's best token is unambiguous.
    pub balanced: bool,
}

impl Default for SynthConfig {
    fn default() -> Self {
        SynthConfig {
            n_pos: 4,
            n_neg: 4,
            n_neutral: 24,
            n_train: 512,
            n_test: 512,
            t_min: 8,
            t_max: 16,
            n_signal: 1,
            zipf_signal: 1.0,
            zipf_neutral: 0.5,
            balanced: true,
        }
    }
}

impl SynthConfig {
    pub fn d_vocab(&self) -> usize {
        self.n_pos + self.n_neg + self.n_neutral
    }

    pub fn class_of(&self, s: usize) -> TokenClass {
        if s < self.n_pos {
            TokenClass::Positive
        } else if s < self.n_pos + self.n_neg {
            TokenClass::Negative
        } else {
            TokenClass::Neutral
        }
    }

    /// Checks the knobs, naming the bad key.
    pub fn check(&self) -> Result<(), String> {
        let bad = |k: &str, why: &str| Err(format!("data.{k}: {why}"));
        if self.n_pos == 0 || self.n_neg == 0 {
            return bad("n_pos / n_neg", "each class needs at least one token");
        }
        if self.n_neutral == 0 {
            return bad("n_neutral", "must be at least 1");
        }
        if self.t_min == 0 || self.t_min > self.t_max {
            return bad("t_min", "must satisfy 1 ≤ t_min ≤ t_max");
        }
        if self.n_signal == 0 || self.n_signal >= self.t_min {
            return bad(
                "n_signal",
                "must satisfy 1 ≤ n_signal < t_min (a sequence needs a neutral token)",
            );
        }
        if self.balanced && self.n_pos != self.n_neg {
            return bad("balanced", "mirrored pairs need n_pos = n_neg");
        }
        if self.n_train == 0 {
            return bad("n_train", "must be at least 1");
        }
        if !(self.zipf_signal >= 0.0 && self.zipf_neutral >= 0.0) {
            return bad("zipf_signal / zipf_neutral", "must be ≥ 0");
        }
        Ok(())
    }
}

/// Cumulative Zipf weights `∝ 1/(r+1)^a` over `m` ranks.
fn zipf_cdf(m: usize, a: f64) -> Vec<f64> {
    let mut c: Vec<f64> = (0..m).map(|r| 1.0 / ((r + 1) as f64).powf(a)).collect();
    let mut acc = 0.0;
    for w in c.iter_mut() {
        acc += *w;
        *w = acc;
    }
    c.iter_mut().for_each(|w| *w /= acc);
    c
}

fn draw(cdf: &[f64], rng: &mut ChaCha8Rng) -> usize {
    let u: f64 = rng.random();
    cdf.partition_point(|&c| c <= u).min(cdf.len() - 1)
}

/// `n` sequences of the synthetic task, drawn from `rng`.
pub fn generate(cfg: &SynthConfig, n: usize, rng: &mut ChaCha8Rng) -> Result<SeqData, String> {
    cfg.check()?;
    let (t_max, v) = (cfg.t_max, cfg.d_vocab());
    let pos = zipf_cdf(cfg.n_pos, cfg.zipf_signal);
    let neg = zipf_cdf(cfg.n_neg, cfg.zipf_signal);
    let neu = zipf_cdf(cfg.n_neutral, cfg.zipf_neutral);
    let mut d = SeqData {
        n,
        n_ctx: t_max,
        d_vocab: v,
        ids: vec![0; n * t_max],
        lens: vec![0; n],
        y: vec![0.0; n],
        signal: vec![0; n],
    };
    let mut slots: Vec<usize> = Vec::with_capacity(t_max);
    for k in 0..n {
        if cfg.balanced && k % 2 == 1 {
            // The mirror of sequence k − 1.
            let (prev, row) = d.ids.split_at_mut(k * t_max);
            let src = &prev[(k - 1) * t_max..];
            let s_prev = d.signal[k - 1] as usize;
            let s = if s_prev < cfg.n_pos {
                s_prev + cfg.n_pos
            } else {
                s_prev - cfg.n_pos
            };
            for (dst, &x) in row[..t_max].iter_mut().zip(src) {
                *dst = if x as usize == s_prev { s as u32 } else { x };
            }
            d.lens[k] = d.lens[k - 1];
            d.y[k] = -d.y[k - 1];
            d.signal[k] = s as u32;
            continue;
        }
        let y = if rng.random::<bool>() { 1.0 } else { -1.0 };
        let len = rng.random_range(cfg.t_min..=cfg.t_max);
        let s = if y > 0.0 {
            draw(&pos, rng)
        } else {
            cfg.n_pos + draw(&neg, rng)
        };
        let row = &mut d.ids[k * t_max..k * t_max + len];
        for t in row.iter_mut() {
            *t = (cfg.n_pos + cfg.n_neg + draw(&neu, rng)) as u32;
        }
        // n_signal distinct positions for the signal token (partial Fisher-Yates).
        slots.clear();
        slots.extend(0..len);
        for j in 0..cfg.n_signal {
            let r = rng.random_range(j..len);
            slots.swap(j, r);
            row[slots[j]] = s as u32;
        }
        d.lens[k] = len as u32;
        d.y[k] = y;
        d.signal[k] = s as u32;
    }
    Ok(d)
}
