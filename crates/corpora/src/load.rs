//! Options every review loader takes, and the statistics it returns.
//!
//! With `skip_bad: false` (the default) the first bad record stops the load with a
//! [`CorpusError`] naming it. With `skip_bad: true` bad records are skipped and
//! counted in [`LoadStats`] by kind, and the first few messages are kept so a run
//! can log where they were. `limit` stops after that many kept documents, which
//! keeps tests on the big real files fast.
//!
//! ```
//! use mechlab_corpora::{LoadOptions, LoadStats};
//! let opts = LoadOptions { skip_bad: true, ..LoadOptions::default() }.with_limit(100);
//! assert_eq!(opts.limit, Some(100));
//! let stats = LoadStats::default();
//! assert_eq!((stats.read, stats.kept, stats.skipped), (0, 0, 0));
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::document::{LabeledDoc, Part, Split};
use crate::error::CorpusError;

/// How many error messages [`LoadStats::first_errors`] keeps.
pub const MAX_KEPT_ERRORS: usize = 10;

/// Options shared by all loaders.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Skip and count bad records instead of stopping at the first one.
    pub skip_bad: bool,
    /// Stop once this many documents have been kept (train and test together).
    pub limit: Option<usize>,
}

impl LoadOptions {
    /// Options that skip and count bad records.
    pub fn skipping() -> Self {
        LoadOptions {
            skip_bad: true,
            limit: None,
        }
    }

    /// The same options with a cap on the number of kept documents.
    pub fn with_limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }
}

/// What a load saw.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadStats {
    /// Records examined (kept + skipped + neutral).
    pub read: usize,
    /// Documents returned in the [`Split`].
    pub kept: usize,
    /// Bad records skipped (only with `skip_bad`; a truncated archive counts one).
    pub skipped: usize,
    /// Valid records dropped by the polarity convention (Yelp 3-star reviews).
    pub neutral: usize,
    /// Skipped records by [`CorpusError::kind`].
    pub reasons: BTreeMap<String, usize>,
    /// The messages of the first [`MAX_KEPT_ERRORS`] skipped records.
    pub first_errors: Vec<String>,
}

impl LoadStats {
    /// Adds another load's counts to these.
    pub fn merge(&mut self, other: LoadStats) {
        self.read += other.read;
        self.kept += other.kept;
        self.skipped += other.skipped;
        self.neutral += other.neutral;
        for (k, v) in other.reasons {
            *self.reasons.entry(k).or_default() += v;
        }
        for e in other.first_errors {
            if self.first_errors.len() < MAX_KEPT_ERRORS {
                self.first_errors.push(e);
            }
        }
    }
}

/// One parsed record: a document for a part, or a neutral review to drop.
pub(crate) enum Record {
    Doc(Part, LabeledDoc),
    Neutral,
}

/// Accumulates documents and statistics, applying `skip_bad` and `limit`.
pub(crate) struct Collector<'a> {
    opts: &'a LoadOptions,
    pub split: Split,
    pub stats: LoadStats,
}

impl<'a> Collector<'a> {
    pub fn new(opts: &'a LoadOptions) -> Self {
        Collector {
            opts,
            split: Split::default(),
            stats: LoadStats::default(),
        }
    }

    /// Whether `limit` documents have been kept.
    pub fn full(&self) -> bool {
        self.opts.limit.is_some_and(|l| self.stats.kept >= l)
    }

    /// Takes one record's outcome: keeps it, counts it, or returns the error
    /// (when it is not a record error, or `skip_bad` is off).
    pub fn take(&mut self, outcome: Result<Record, CorpusError>) -> Result<(), CorpusError> {
        match outcome {
            Ok(Record::Doc(part, doc)) => {
                self.stats.read += 1;
                self.stats.kept += 1;
                match part {
                    Part::Train => self.split.train.push(doc),
                    Part::Test => self.split.test.push(doc),
                }
                Ok(())
            }
            Ok(Record::Neutral) => {
                self.stats.read += 1;
                self.stats.neutral += 1;
                Ok(())
            }
            Err(e) if self.opts.skip_bad && e.is_record_error() => {
                self.skip(&e);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Counts `e` as a record read and skipped (also used for a truncated
    /// archive under `skip_bad`).
    pub fn skip(&mut self, e: &CorpusError) {
        self.stats.read += 1;
        self.stats.skipped += 1;
        *self.stats.reasons.entry(e.kind().to_string()).or_default() += 1;
        if self.stats.first_errors.len() < MAX_KEPT_ERRORS {
            self.stats.first_errors.push(e.to_string());
        }
    }

    pub fn skip_bad(&self) -> bool {
        self.opts.skip_bad
    }

    pub fn finish(self) -> (Split, LoadStats) {
        (self.split, self.stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Location;

    fn doc() -> LabeledDoc {
        LabeledDoc {
            text: "t".into(),
            label: 1,
            rating: None,
            source: "s".into(),
        }
    }

    #[test]
    fn collector_skips_only_record_errors_when_asked() {
        let strict = LoadOptions::default();
        let mut c = Collector::new(&strict);
        c.take(Ok(Record::Doc(Part::Train, doc()))).unwrap();
        let bad = || {
            Err(CorpusError::EmptyDocument {
                at: Location::file("f").line(2),
            })
        };
        assert!(c.take(bad()).is_err());
        let skipping = LoadOptions::skipping().with_limit(2);
        let mut c = Collector::new(&skipping);
        c.take(Ok(Record::Neutral)).unwrap();
        c.take(bad()).unwrap();
        c.take(Ok(Record::Doc(Part::Test, doc()))).unwrap();
        assert!(!c.full());
        let nf = Err(CorpusError::NotFound {
            path: "x".into(),
            what: String::new(),
        });
        assert!(c.take(nf).is_err());
        c.take(Ok(Record::Doc(Part::Train, doc()))).unwrap();
        assert!(c.full());
        let (split, stats) = c.finish();
        assert_eq!((split.train.len(), split.test.len()), (1, 1));
        assert_eq!(
            (stats.read, stats.kept, stats.skipped, stats.neutral),
            (4, 2, 1, 1)
        );
        assert_eq!(stats.reasons["empty document"], 1);
        assert_eq!(
            stats.first_errors,
            vec!["f, line 2: empty document".to_string()]
        );
    }
}
