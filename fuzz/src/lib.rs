//! Fuzz targets for every mechlab parser that reads user input.
//!
//! Each target is a plain function from bytes to nothing: it feeds the bytes to one
//! parser (written to a scratch file where the parser reads files) and panics only
//! when the parser breaks a promise: a panic inside the parser, or a valid input
//! that does not read back the same after a round trip. AFL runs them through the
//! `mechlab-fuzz` binary (`fuzz/run.sh TARGET MINUTES`), which also catches hangs
//! (its per-input time limit) and unbounded allocation (its memory limit); the
//! minimised corpora in `fuzz/corpus/<target>/` are replayed through the same
//! functions by `cargo test` (`tests/replay.rs`), so every past finding is
//! rechecked in CI without AFL installed.

mod bert;
mod corpora;
mod lab;
mod scratch;

pub use bert::{bert_model, bert_tokenizer};
pub use corpora::{
    archives, imdb_archive, imdb_dir, mediawiki, reviews_csv, vital, wikitext, yelp_json,
};
pub use lab::{checkpoint, config};

/// A fuzz target: it must return for every input, panicking only on a bug.
pub type Target = fn(&[u8]);

/// Every target by name, the most complex parsers first (the order `run.sh all`
/// spends its time in).
pub const TARGETS: &[(&str, Target)] = &[
    ("mediawiki", mediawiki),
    ("reviews_csv", reviews_csv),
    ("config", config),
    ("checkpoint", checkpoint),
    ("imdb_archive", imdb_archive),
    ("wikitext", wikitext),
    ("archives", archives),
    ("yelp_json", yelp_json),
    ("vital", vital),
    ("imdb_dir", imdb_dir),
    ("bert_model", bert_model),
    ("bert_tokenizer", bert_tokenizer),
];

/// The target called `name`.
pub fn target(name: &str) -> Option<Target> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}
