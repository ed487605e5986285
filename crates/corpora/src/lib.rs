//! Real-text corpora for mechlab, read in their publishers' formats.
//!
//! Reviews for the token-selection experiment (IMDB: the `aclImdb` folder, its
//! `.tar.gz`/`.tar.xz` archive read without extracting, Kaggle's CSV; Yelp: Zhang et
//! al.'s polarity CSV, the Open Dataset's JSON lines, the `Review Stars:` CSV and
//! one-sentence-per-line files), Wikipedia for the topic experiment (streamed
//! MediaWiki XML dumps, vital-articles JSON with gold topics, WikiText-2), a word
//! tokenizer, a vocabulary, and a seeded collapsed-Gibbs LDA. Every loader names the
//! file and line, archive member or byte offset of a bad record, and can skip and
//! count bad records instead.

// Review corpora (IMDB, Yelp): tokenizer, vocabulary and loaders.
pub mod archive;
pub mod datadir;
pub mod document;
pub mod error;
pub mod imdb;
pub mod load;
pub mod reviews;
pub mod strict_csv;
pub mod tokenize;
pub mod vocab;
pub mod yelp;

pub use datadir::{data_dir, data_path};
pub use document::{LabeledDoc, Part, Split, SplitCounts, NEG, POS};
pub use error::{CorpusError, Location};
pub use load::{LoadOptions, LoadStats};
pub use reviews::{detect_format, load_format, load_reviews, ReviewFormat};
pub use tokenize::{Punct, Tokenizer};
pub use vocab::{Vocab, PAD, UNK};
pub mod article;
pub mod lda;
pub mod wikipedia;
pub mod wordpiece;
