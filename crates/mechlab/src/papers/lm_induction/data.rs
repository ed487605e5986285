//! The training text as byte tokens, the batches drawn from it, and the two
//! fixed evaluation sets (held-out windows, repeated random sequences).
//!
//! Text is read with the corpora crate's WikiText loader (articles, `@-@`
//! marks joined back), each article written as its title, a newline, its text
//! and a blank line. Tokens are bytes, numbered in byte order over the bytes
//! that occur in the training or held-out text (`Corpus::bytes`), so no id is
//! unknown; or the ids of a byte-level BPE trained on the training articles by
//! the `tokenizers` crate (a well-kept implementation of what GPT-2 uses; we
//! write no tokenizer of our own), which every byte string encodes into.

use super::config::{DataConfig, RepTokens, Source, Tokenizer};
use crate::bpe;
use mechlab_corpora::datadir::data_path;
use mechlab_corpora::wikipedia::wikitext2::load_wikitext2;
use rand::Rng;

/// The tokenised corpus: its vocabulary and both splits as ids.
#[derive(Clone, Debug)]
pub struct Corpus {
    /// Bytes: `bytes[id]` is the byte token `id` stands for; empty with BPE.
    pub bytes: Vec<u8>,
    /// The trained BPE's `tokenizer.json` (Hugging Face format), with BPE.
    pub bpe_json: Option<String>,
    /// Each BPE id's token as the tokenizer spells it (`Ġ` for a space).
    pub bpe_tokens: Vec<String>,
    pub train: Vec<u32>,
    pub heldout: Vec<u32>,
}

/// The articles of a WikiText file, each as title, newline, text, blank line.
pub(crate) fn read_docs(rel: &str, key: &str) -> Result<Vec<String>, String> {
    let path = data_path(rel).map_err(|e| format!("{key} = {rel:?}: {e}"))?;
    let arts = load_wikitext2(&path).map_err(|e| format!("{key} = {rel:?}: {e}"))?;
    Ok(arts
        .into_iter()
        .map(|a| format!("{}\n{}\n\n", a.title, a.text))
        .collect())
}

impl Corpus {
    /// Reads `data.file` and `data.heldout_file` and tokenises them.
    pub fn load(cfg: &DataConfig) -> Result<Corpus, String> {
        let train_docs = read_docs(&cfg.file, "data.file")?;
        let heldout_docs = read_docs(&cfg.heldout_file, "data.heldout_file")?;
        let c = match cfg.tokenizer {
            Tokenizer::Bytes => Self::bytes(
                &train_docs.concat().into_bytes(),
                &heldout_docs.concat().into_bytes(),
            ),
            Tokenizer::Bpe => {
                let tk = bpe::train(train_docs.iter(), cfg.bpe_vocab, "data.tokenizer = \"bpe\"")?;
                let n = tk.get_vocab_size(true) as u32;
                Corpus {
                    bytes: Vec::new(),
                    bpe_json: Some(
                        tk.to_string(false)
                            .map_err(|e| format!("data.tokenizer = \"bpe\": {e}"))?,
                    ),
                    bpe_tokens: (0..n)
                        .map(|i| tk.id_to_token(i).unwrap_or_default())
                        .collect(),
                    train: bpe::encode(&tk, &train_docs, "data.tokenizer = \"bpe\"")?,
                    heldout: bpe::encode(&tk, &heldout_docs, "data.tokenizer = \"bpe\"")?,
                }
            }
        };
        for (key, split) in [("data.file", &c.train), ("data.heldout_file", &c.heldout)] {
            if split.len() < 2 * (cfg.seq_len + 1) {
                return Err(format!(
                    "{key}: {} tokens of text, fewer than two windows of data.seq_len + 1 = {}",
                    split.len(),
                    cfg.seq_len + 1
                ));
            }
        }
        Ok(c)
    }

    /// The vocabulary size.
    pub fn vocab(&self) -> usize {
        if self.bpe_json.is_some() {
            self.bpe_tokens.len()
        } else {
            self.bytes.len()
        }
    }

    fn bytes(train: &[u8], heldout: &[u8]) -> Corpus {
        let mut seen = [false; 256];
        train
            .iter()
            .chain(heldout)
            .for_each(|&b| seen[b as usize] = true);
        let bytes: Vec<u8> = (0..=255u8).filter(|&b| seen[b as usize]).collect();
        let mut id = [0u32; 256];
        bytes
            .iter()
            .enumerate()
            .for_each(|(i, &b)| id[b as usize] = i as u32);
        let enc = |s: &[u8]| s.iter().map(|&b| id[b as usize]).collect::<Vec<u32>>();
        Corpus {
            bytes,
            bpe_json: None,
            bpe_tokens: Vec::new(),
            train: enc(train),
            heldout: enc(heldout),
        }
    }

    /// A token as text, for figure ticks (`⏎` for a newline, `·` for a space).
    pub fn show(&self, id: u32) -> String {
        if self.bpe_json.is_some() {
            return self
                .bpe_tokens
                .get(id as usize)
                .map_or(format!("#{id}"), |t| t.replace('Ġ', "·").replace('Ċ', "⏎"));
        }
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
            Data::Text { corpus, .. } => corpus.vocab(),
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

impl Data {
    /// The ids the induction probe draws from under `rule` (batch of `batch`
    /// windows of `len` tokens); every id for the repeated source.
    pub fn probe_ids(&self, rule: RepTokens, batch: usize, len: usize) -> Vec<u32> {
        let all = || (0..self.vocab() as u32).collect();
        match (self, rule) {
            (Data::Text { corpus, .. }, RepTokens::Trained) => {
                let mut count = vec![0usize; corpus.vocab()];
                corpus.train.iter().for_each(|&t| count[t as usize] += 1);
                let n = corpus.train.len();
                (0..count.len() as u32)
                    .filter(|&t| count[t as usize] * batch * len >= n)
                    .collect()
            }
            _ => all(),
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

/// [`repeated_row`] over the ids `ids` (drawn uniformly).
pub fn repeated_row_of(row: &mut [u32], n: usize, ids: &[u32], rng: &mut impl Rng) {
    for i in 0..n.min(row.len()) {
        row[i] = ids[rng.random_range(0..ids.len() as u32) as usize];
    }
    for i in n..row.len() {
        row[i] = row[i - n];
    }
}

/// `n` repeated random sequences of `2·rep_len + 1` tokens over `ids` (the
/// last continues the repeat, so every input position has a target):
/// `[n, 2·rep_len + 1]`.
pub fn repeated_set(n: usize, rep_len: usize, ids: &[u32], rng: &mut impl Rng) -> Vec<u32> {
    let mut out = vec![0; n * (2 * rep_len + 1)];
    out.chunks_exact_mut(2 * rep_len + 1)
        .for_each(|row| repeated_row_of(row, rep_len, ids, rng));
    out
}

/// `n` evenly spaced held-out windows of `len + 1` tokens, `[n, len + 1]`,
/// drawn the way [`Data::draw`] draws training windows: with probability
/// `repeat_frac` a window repeats a segment of its text (period from
/// [`period`]), so the held-out loss and the in-context learning score are
/// measured on the distribution the model trains on. The flags say which
/// windows are plain text. With `repeat_frac = 0` the windows are the plain
/// evenly spaced ones and `rng` is not used.
pub fn heldout_set(
    heldout: &[u32],
    n: usize,
    len: usize,
    repeat_frac: f64,
    rng: &mut impl Rng,
) -> (Vec<u32>, Vec<bool>) {
    let mut out = Vec::with_capacity(n * (len + 1));
    let mut plain = Vec::with_capacity(n);
    let room = heldout.len() - (len + 1);
    for i in 0..n {
        let s = room * i / n.max(1);
        let repeat = repeat_frac > 0.0 && rng.random::<f64>() < repeat_frac;
        let span = if repeat {
            period(len + 1, rng)
        } else {
            len + 1
        };
        out.extend((0..len + 1).map(|j| heldout[s + j % span]));
        plain.push(!repeat);
    }
    (out, plain)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_induction_probe_leaves_out_tokens_rarer_than_once_a_batch() {
        // 1 001 training bytes, batches of 2 × 8 = 16 tokens: an id must occur
        // at least 1001 / 16 ≈ 63 times; `z` occurs once.
        let mut train = vec![b'a'; 500];
        train.extend(vec![b'b'; 500]);
        train.push(b'z');
        let corpus = Corpus::bytes(&train, b"ab");
        let data = Data::Text {
            corpus,
            repeat_frac: 0.0,
        };
        assert_eq!(data.probe_ids(RepTokens::Trained, 2, 8), vec![0, 1]);
        assert_eq!(data.probe_ids(RepTokens::All, 2, 8), vec![0, 1, 2]);
        let rep = Data::Repeated { vocab: 5 };
        assert_eq!(rep.probe_ids(RepTokens::Trained, 2, 8), vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn heldout_windows_repeat_as_training_windows_do() {
        use rand::SeedableRng;
        let text: Vec<u32> = (0..1_000).collect();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        // no repeats: the evenly spaced plain windows, all flagged plain
        let (w, plain) = heldout_set(&text, 4, 16, 0.0, &mut rng);
        assert!(plain.iter().all(|&p| p));
        for (i, row) in w.chunks_exact(17).enumerate() {
            let s = (1_000 - 17) * i / 4;
            assert_eq!(row, &text[s..s + 17]);
        }
        // every window repeats: each is periodic with a period from `period`
        let (w, plain) = heldout_set(&text, 8, 16, 1.0, &mut rng);
        assert!(plain.iter().all(|&p| !p));
        for row in w.chunks_exact(17) {
            let p = (1..17).find(|&p| row[p] == row[0]).expect("a repeat");
            assert!((17 / 4..=9).contains(&p), "period {p}");
            assert!((p..17).all(|j| row[j] == row[j - p]));
        }
        // a mixture in between
        let (_, plain) = heldout_set(&text, 64, 16, 0.5, &mut rng);
        let n = plain.iter().filter(|&&p| p).count();
        assert!(n > 10 && n < 54, "{n} plain windows of 64");
    }
}
