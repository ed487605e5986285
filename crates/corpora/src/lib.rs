//! Real-text corpora (skeleton; the loaders land in their own commits).

// Review corpora (IMDB, Yelp): tokenizer, vocabulary and loaders.
pub mod document;
pub mod error;
pub mod tokenize;
pub mod vocab;

pub use document::{LabeledDoc, Part, Split, SplitCounts, NEG, POS};
pub use error::{CorpusError, Location};
pub use tokenize::{Punct, Tokenizer};
pub use vocab::{Vocab, PAD, UNK};
