//! Real reviews (IMDB, Yelp) as token-selection data: the corpus loaded by
//! [`mechlab_corpora`], shuffled with the run's data stream, tokenized, a
//! vocabulary built on the training part, and every review encoded to at most
//! `n_ctx` ids (truncated, padded with `<pad>` = 0, which the model masks).
//!
//! The vocabulary is returned with the data so a run saves it next to its
//! checkpoints and reads the embeddings back with their words.

use super::data::SeqData;
use mechlab_corpora::{load_reviews, LabeledDoc, LoadOptions, Tokenizer, Vocab};
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The default of `data.path`: the shared data folder beside the repository.
pub const DEFAULT_PATH: &str = "../shared/data";

/// Where the reviews come from (`data.source`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// The `[synthetic]` generator.
    #[default]
    Synthetic,
    Imdb,
    Yelp,
}

/// The real-text knobs of the `[data]` section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReviewsConfig {
    /// `synthetic` (the `[synthetic]` generator), `imdb` or `yelp`.
    pub source: Source,
    /// A corpus file or folder, or the data folder holding `imdb/` and `yelp/`.
    /// The default resolves through `MECHLAB_DATA` and the shared folder.
    pub path: String,
    /// Tokens kept per review (truncation).
    pub n_ctx: usize,
    pub min_count: u64,
    /// Vocabulary size including `<pad>` and `<unk>`.
    pub max_vocab: usize,
    /// Use at most this many training / test reviews (0: all), after shuffling.
    pub max_train: usize,
    pub max_test: usize,
    /// Fraction held out as test when the corpus has no test split.
    pub holdout: f64,
    /// Skip and count malformed records instead of stopping.
    pub skip_bad: bool,
}

impl Default for ReviewsConfig {
    fn default() -> Self {
        ReviewsConfig {
            source: Source::Synthetic,
            path: DEFAULT_PATH.into(),
            n_ctx: 256,
            min_count: 5,
            max_vocab: 20_000,
            max_train: 0,
            max_test: 0,
            holdout: 0.2,
            skip_bad: false,
        }
    }
}

/// An encoded corpus.
pub struct Reviews {
    pub train: SeqData,
    pub test: SeqData,
    pub vocab: Vocab,
    /// The file or folder actually read.
    pub source: PathBuf,
    /// Reviews skipped as malformed, and reviews with no token.
    pub skipped: usize,
    pub empty: usize,
}

/// Where `corpus` (`"imdb"` or `"yelp"`) lives for the configured `path`.
pub fn resolve(path: &str, corpus: &str) -> Result<PathBuf, String> {
    let base = if path.is_empty() || path == DEFAULT_PATH {
        mechlab_corpora::data_dir().map_err(|e| format!("data.path: {e}"))?
    } else {
        PathBuf::from(path)
    };
    let sub = base.join(corpus);
    Ok(if sub.is_dir() { sub } else { base })
}

fn encode(docs: &[LabeledDoc], tok: &Tokenizer, vocab: &Vocab, n_ctx: usize) -> (SeqData, usize) {
    let mut d = SeqData {
        n_ctx,
        d_vocab: vocab.len(),
        ..SeqData::default()
    };
    let mut empty = 0;
    let mut words = Vec::new();
    for doc in docs {
        words.clear();
        tok.tokenize_into(&doc.text, &mut words);
        let (ids, len) = vocab.encode(&words, n_ctx);
        if len == 0 {
            empty += 1;
            continue;
        }
        d.ids.extend_from_slice(&ids);
        d.lens.push(len as u32);
        d.y.push(if doc.label > 0 { 1.0 } else { -1.0 });
        d.n += 1;
    }
    (d, empty)
}

/// Loads, shuffles, tokenizes and encodes `corpus` from `cfg.path`.
pub fn load(corpus: &str, cfg: &ReviewsConfig, rng: &mut ChaCha8Rng) -> Result<Reviews, String> {
    if cfg.n_ctx == 0 || cfg.max_vocab < 3 {
        return Err("data: n_ctx must be ≥ 1 and max_vocab ≥ 3".into());
    }
    let source = resolve(&cfg.path, corpus)?;
    let opts = if cfg.skip_bad {
        LoadOptions::skipping()
    } else {
        LoadOptions::default()
    };
    let (mut split, stats) = load_reviews(Path::new(&source), &opts).map_err(|e| e.to_string())?;
    split.train.shuffle(rng);
    if split.test.is_empty() {
        split = split.with_holdout(cfg.holdout);
    }
    split.test.shuffle(rng);
    if cfg.max_train > 0 {
        split.train.truncate(cfg.max_train);
    }
    if cfg.max_test > 0 {
        split.test.truncate(cfg.max_test);
    }
    if split.train.is_empty() || split.test.is_empty() {
        return Err(format!(
            "{}: {} training and {} test reviews; need at least one of each",
            source.display(),
            split.train.len(),
            split.test.len()
        ));
    }
    let tok = Tokenizer::default();
    let counts = Vocab::count_tokens(split.train.iter().map(|d| tok.tokenize(&d.text)));
    let vocab = Vocab::build(&counts, cfg.min_count, Some(cfg.max_vocab));
    let (train, e1) = encode(&split.train, &tok, &vocab, cfg.n_ctx);
    let (test, e2) = encode(&split.test, &tok, &vocab, cfg.n_ctx);
    Ok(Reviews {
        train,
        test,
        vocab,
        source,
        skipped: stats.skipped,
        empty: e1 + e2,
    })
}
