//! Bietti et al.'s data: a character-level bigram language model in which `K`
//! trigger tokens are followed, within each sequence, by an output token drawn
//! for that sequence.
//!
//! The unigram and bigram counts are taken over the bytes of a real text (the
//! authors use tiny Shakespeare's 65 characters; we use WikiText-2, read as
//! lm-induction reads it), ids numbered in byte order over the bytes that occur.
//! A sequence starts with a unigram draw; after a trigger comes that trigger's
//! output for this sequence (uniform over the vocabulary, drawn once per
//! sequence), after any other token a draw from the bigram row of that token.
//! The triggers are the `K` most frequent tokens (the authors'
//! `fixed_special_toks`; ties broken by id). Draws are by inverse CDF over
//! cumulative tables built once, so a sequence costs one uniform number per
//! token.

use crate::papers::lm_induction::data::read_docs;
use rand::Rng;
use serde_json::json;

/// The text's token tables and the triggers.
#[derive(Clone, Debug)]
pub struct Bigrams {
    /// `bytes[id]`: the byte token `id` stands for.
    pub bytes: Vec<u8>,
    /// Unigram counts `[N]` and bigram counts `[N, N]` (row: previous token).
    pub unigram: Vec<u64>,
    pub bigram: Vec<u64>,
    /// The `K` triggers, most frequent first.
    pub triggers: Vec<u32>,
    /// Cumulative unigram distribution `[N]` and bigram rows `[N, N]`.
    cum_uni: Vec<f64>,
    cum_big: Vec<f64>,
    /// `trigger_of[id]`: the trigger's index, or `usize::MAX`.
    trigger_of: Vec<usize>,
}

fn cumulative(counts: &[u64]) -> Vec<f64> {
    let total: u64 = counts.iter().sum();
    let mut acc = 0u64;
    counts
        .iter()
        .map(|&c| {
            acc += c;
            acc as f64 / total as f64
        })
        .collect()
}

/// The first index whose cumulative probability exceeds `u` (the last on rounding).
fn draw(cum: &[f64], u: f64) -> u32 {
    cum.partition_point(|&c| c <= u).min(cum.len() - 1) as u32
}

impl Bigrams {
    /// Tables from the text `data.file`, with the `k` most frequent tokens as triggers.
    pub fn load(file: &str, k: usize) -> Result<Bigrams, String> {
        let docs = read_docs(file, "data.file")?;
        Bigrams::from_bytes(docs.concat().as_bytes(), k)
            .map_err(|e| format!("data.file = {file:?}: {e}"))
    }

    pub fn from_bytes(text: &[u8], k: usize) -> Result<Bigrams, String> {
        let mut seen = [false; 256];
        text.iter().for_each(|&b| seen[b as usize] = true);
        let bytes: Vec<u8> = (0..=255u8).filter(|&b| seen[b as usize]).collect();
        let n = bytes.len();
        if n <= k {
            return Err(format!(
                "{n} distinct bytes: need more than data.k = {k} tokens"
            ));
        }
        let mut id = [0usize; 256];
        bytes
            .iter()
            .enumerate()
            .for_each(|(i, &b)| id[b as usize] = i);
        let mut unigram = vec![0u64; n];
        let mut bigram = vec![0u64; n * n];
        for w in text.windows(2) {
            bigram[id[w[0] as usize] * n + id[w[1] as usize]] += 1;
        }
        text.iter().for_each(|&b| unigram[id[b as usize]] += 1);
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&i| (std::cmp::Reverse(unigram[i]), i));
        let triggers: Vec<u32> = order[..k].iter().map(|&i| i as u32).collect();
        let cum_uni = cumulative(&unigram);
        let mut cum_big = Vec::with_capacity(n * n);
        for row in bigram.chunks(n) {
            // a byte only ever last in the text has no successor: its row is the unigram's
            if row.iter().all(|&c| c == 0) {
                cum_big.extend_from_slice(&cum_uni);
            } else {
                cum_big.extend(cumulative(row));
            }
        }
        let mut trigger_of = vec![usize::MAX; n];
        triggers
            .iter()
            .enumerate()
            .for_each(|(j, &q)| trigger_of[q as usize] = j);
        Ok(Bigrams {
            bytes,
            unigram,
            bigram,
            triggers,
            cum_uni,
            cum_big,
            trigger_of,
        })
    }

    /// The vocabulary size `N`.
    pub fn vocab(&self) -> usize {
        self.bytes.len()
    }

    /// The trigger index of token `id`, if it is one.
    pub fn trigger(&self, id: u32) -> Option<usize> {
        let j = self.trigger_of[id as usize];
        (j != usize::MAX).then_some(j)
    }

    /// One sequence into `row` (`T + 1` tokens) and the occurrence count of each
    /// position's trigger into `occ` (`T`: `occ[p] = c ≥ 1` when `row[p]` is the
    /// `c`-th occurrence of a trigger, so `row[p + 1]` is its output; else 0).
    /// `outs` is scratch of `K` entries.
    pub fn sequence(
        &self,
        row: &mut [u32],
        occ: &mut [u32],
        outs: &mut [(u32, u32)],
        rng: &mut impl Rng,
    ) {
        let n = self.vocab();
        for o in outs.iter_mut() {
            *o = (rng.random_range(0..n as u32), 0);
        }
        row[0] = draw(&self.cum_uni, rng.random::<f64>());
        for p in 0..row.len() - 1 {
            let last = row[p];
            if let Some(j) = self.trigger(last) {
                outs[j].1 += 1;
                occ[p] = outs[j].1;
                row[p + 1] = outs[j].0;
            } else {
                occ[p] = 0;
                let r = last as usize * n..(last as usize + 1) * n;
                row[p + 1] = draw(&self.cum_big[r], rng.random::<f64>());
            }
        }
    }

    /// Sequences of `T + 1` tokens into `tokens` (`[B, T + 1]`) and their
    /// occurrences into `occ` (`[B, T]`); `outs`: `K` entries of scratch.
    pub fn batch(
        &self,
        tokens: &mut [u32],
        occ: &mut [u32],
        outs: &mut [(u32, u32)],
        rng: &mut impl Rng,
    ) {
        let len = tokens.len() - occ.len(); // = B, since each row is one longer
        let t = occ.len() / len;
        for s in 0..len {
            self.sequence(
                &mut tokens[s * (t + 1)..(s + 1) * (t + 1)],
                &mut occ[s * t..(s + 1) * t],
                outs,
                rng,
            );
        }
    }

    /// The tables as JSON (`bigram.json`, what `bench/birth` samples from).
    pub fn json(&self) -> serde_json::Value {
        let n = self.vocab();
        json!({
            "bytes": self.bytes,
            "unigram": self.unigram,
            "bigram": self.bigram.chunks(n).collect::<Vec<_>>(),
            "triggers": self.triggers,
        })
    }

    /// A token as text, for figure ticks (`⏎` for a newline, `·` for a space).
    pub fn show(&self, id: u32) -> String {
        match self.bytes.get(id as usize) {
            Some(b' ') => "·".into(),
            Some(b'\n') => "⏎".into(),
            Some(&b) if b.is_ascii_graphic() => (b as char).to_string(),
            Some(b) => format!("\\x{b:02x}"),
            None => format!("#{id}"),
        }
    }
}
