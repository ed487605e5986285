//! Real-text corpora (skeleton; the loaders land in their own commits).

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
