//! The training text as byte tokens, the batches drawn from it, and the two
//! fixed evaluation sets (held-out windows, repeated random sequences).
//!
//! Text is read with the corpora crate's WikiText loader (articles, `@-@`
//! marks joined back), each article written as its title, a newline, its text
//! and a blank line; tokens are bytes, numbered in byte order over the bytes that
//! occur in the training or held-out text (`Corpus::bytes`), so no id is unknown.

use super::config::{DataConfig, Source};
use mechlab_corpora::datadir::data_path;
use mechlab_corpora::wikipedia::wikitext2::load_wikitext2;
use rand::Rng;

/// The byte-level corpus: its vocabulary and both splits as ids.
#[derive(Clone, Debug)]
pub struct Corpus {
    /// `bytes[id]` is the byte token `id` stands for.
    pub bytes: Vec<u8>,
    pub train: Vec<u32>,
    pub heldout: Vec<u32>,
}

fn read_text(rel: &str, key: &str) -> Result<Vec<u8>, String> {
    let path = data_path(rel).map_err(|e| format!("{key} = {rel:?}: {e}"))?;
    let arts = load_wikitext2(&path).map_err(|e| format!("{key} = {rel:?}: {e}"))?;
    let mut out = Vec::new();
    for a in arts {
        out.extend_from_slice(a.title.as_bytes());
        out.push(b'\n');
        out.extend_from_slice(a.text.as_bytes());
        out.extend_from_slice(b"\n\n");
    }
    Ok(out)
}

impl Corpus {
    /// Reads `data.file` and `data.heldout_file`.
    pub fn load(cfg: &DataConfig) -> Result<Corpus, String> {
        let train = read_text(&cfg.file, "data.file")?;
        let heldout = read_text(&cfg.heldout_file, "data.heldout_file")?;
        let mut seen = [false; 256];
        train
            .iter()
            .chain(&heldout)
            .for_each(|&b| seen[b as usize] = true);
        let bytes: Vec<u8> = (0..=255u8).filter(|&b| seen[b as usize]).collect();
        let mut id = [0u32; 256];
        bytes
            .iter()
            .enumerate()
            .for_each(|(i, &b)| id[b as usize] = i as u32);
        let enc = |s: &[u8]| s.iter().map(|&b| id[b as usize]).collect::<Vec<u32>>();
        let (train, heldout) = (enc(&train), enc(&heldout));
        for (key, split) in [("data.file", &train), ("data.heldout_file", &heldout)] {
            if split.len() < 2 * (cfg.seq_len + 1) {
                return Err(format!(
                    "{key}: {} bytes of text, fewer than two windows of data.seq_len + 1 = {}",
                    split.len(),
                    cfg.seq_len + 1
                ));
            }
        }
        Ok(Corpus {
            bytes,
            train,
            heldout,
        })
    }

    /// A token as text, for figure ticks (`⏎` for a newline, `·` for a space).
    pub fn show(&self, id: u32) -> String {
        match self.bytes.get(id as usize) {
            Some(b'\n') => "⏎".into(),
            Some(b' ') => "·".into(),
            Some(&b) if b.is_ascii_graphic() => (b as char).to_string(),
            Some(b) => format!("\\x{b:02x}"),
            None => format!("#{id}"),
        }
    }
}

/// Where a run's batches come from.
pub enum Data {
    Text { corpus: Corpus, repeat_frac: f64 },
    Repeated { vocab: usize },
}

impl Data {
    pub fn new(cfg: &DataConfig) -> Result<Data, String> {
        Ok(match cfg.source {
            Source::Text => Data::Text {
                corpus: Corpus::load(cfg)?,
                repeat_frac: cfg.repeat_frac,
            },
            Source::Repeated => Data::Repeated { vocab: cfg.vocab },
        })
    }
    pub fn vocab(&self) -> usize {
        match self {
            Data::Text { corpus, .. } => corpus.bytes.len(),
            Data::Repeated { vocab } => *vocab,
        }
    }
    pub fn corpus(&self) -> Option<&Corpus> {
        match self {
            Data::Text { corpus, .. } => Some(corpus),
            Data::Repeated { .. } => None,
        }
    }

    /// Fills `out` (`[B, len]`) with a training batch.
    pub fn draw(&self, out: &mut [u32], len: usize, rng: &mut impl Rng) {
        for row in out.chunks_exact_mut(len) {
            match self {
                Data::Text {
                    corpus,
                    repeat_frac,
                } => {
                    let repeat = *repeat_frac > 0.0 && rng.random::<f64>() < *repeat_frac;
                    let span = if repeat { period(len, rng) } else { len };
                    let start = rng.random_range(0..=corpus.train.len() - span);
                    let src = &corpus.train[start..start + span];
                    for (i, x) in row.iter_mut().enumerate() {
                        *x = src[i % span];
                    }
                }
                Data::Repeated { vocab } => {
                    let n = period(len, rng);
                    repeated_row(row, n, *vocab, rng)
                }
            }
        }
    }
}

/// A repeat period drawn uniformly from `len/4 ..= len/2`: a fixed period would
/// let a head that looks a fixed distance back (absolute positions suffice)
/// solve the repeats without matching any token, which is not induction.
pub fn period(len: usize, rng: &mut impl Rng) -> usize {
    rng.random_range((len / 4).max(1)..=len.div_ceil(2).max(1))
}

/// `row` = a random segment of `n` tokens over `vocab` ids, then its repeat.
pub fn repeated_row(row: &mut [u32], n: usize, vocab: usize, rng: &mut impl Rng) {
    for i in 0..n.min(row.len()) {
        row[i] = rng.random_range(0..vocab as u32);
    }
    for i in n..row.len() {
        row[i] = row[i - n];
    }
}

/// `n` repeated random sequences of `2·rep_len + 1` tokens (the last continues
/// the repeat, so every input position has a target): `[n, 2·rep_len + 1]`.
pub fn repeated_set(n: usize, rep_len: usize, vocab: usize, rng: &mut impl Rng) -> Vec<u32> {
    let mut out = vec![0; n * (2 * rep_len + 1)];
    out.chunks_exact_mut(2 * rep_len + 1)
        .for_each(|row| repeated_row(row, rep_len, vocab, rng));
    out
}

/// `n` evenly spaced held-out windows of `len + 1` tokens: `[n, len + 1]`.
pub fn heldout_set(heldout: &[u32], n: usize, len: usize) -> Vec<u32> {
    let mut out = Vec::with_capacity(n * (len + 1));
    let room = heldout.len() - (len + 1);
    for i in 0..n {
        let s = room * i / n.max(1);
        out.extend_from_slice(&heldout[s..s + len + 1]);
    }
    out
}
