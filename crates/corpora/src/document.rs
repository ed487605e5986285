//! A labelled review and a train/test split of them.
//!
//! Every loader returns [`LabeledDoc`]s: the raw text (markup such as `<br />` is
//! left for the tokenizer), a polarity label `+1` (positive) or `-1` (negative),
//! the star rating where the corpus has one, and the record's source
//! (`file`, `file:line` or `archive:member`) so any example can be traced back.
//!
//! ```
//! use mechlab_corpora::{LabeledDoc, Split};
//! let d = |label| LabeledDoc { text: "fine".into(), label, rating: None, source: "x".into() };
//! let split = Split { train: vec![d(1), d(-1), d(1), d(1)], test: vec![d(-1)] };
//! let c = split.counts();
//! assert_eq!((c.train_pos, c.train_neg, c.test_pos, c.test_neg), (3, 1, 0, 1));
//! let split = split.with_holdout(0.5);
//! assert_eq!((split.train.len(), split.test.len()), (2, 3));
//! ```

use serde::{Deserialize, Serialize};

/// Label of a positive review.
pub const POS: i8 = 1;
/// Label of a negative review.
pub const NEG: i8 = -1;

/// One review with its polarity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabeledDoc {
    /// The review as stored (UTF-8, never blank).
    pub text: String,
    /// `+1` positive, `-1` negative.
    pub label: i8,
    /// Star rating where the corpus has one: IMDB 1-10, Yelp 1-5.
    pub rating: Option<f32>,
    /// Where it came from: `file`, `file:line` or `archive:member`.
    pub source: String,
}

/// Which side of a split a record belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Part {
    Train,
    Test,
}

/// Training and test documents.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Split {
    pub train: Vec<LabeledDoc>,
    pub test: Vec<LabeledDoc>,
}

/// Label counts of a [`Split`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SplitCounts {
    pub train_pos: usize,
    pub train_neg: usize,
    pub test_pos: usize,
    pub test_neg: usize,
}

impl Split {
    /// Number of positive and negative documents on each side.
    pub fn counts(&self) -> SplitCounts {
        let pos = |docs: &[LabeledDoc]| docs.iter().filter(|d| d.label > 0).count();
        SplitCounts {
            train_pos: pos(&self.train),
            train_neg: self.train.len() - pos(&self.train),
            test_pos: pos(&self.test),
            test_neg: self.test.len() - pos(&self.test),
        }
    }

    /// All documents, train first.
    pub fn len(&self) -> usize {
        self.train.len() + self.test.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Moves the last `fraction` (0..=1) of `train` to the front of `test`,
    /// deterministically: for corpora shipped without a test split (Kaggle IMDB
    /// CSV, Yelp JSON lines). Shuffle `train` first if its order is not random.
    pub fn with_holdout(mut self, fraction: f64) -> Self {
        let f = fraction.clamp(0.0, 1.0);
        let n_test = (self.train.len() as f64 * f).round() as usize;
        let moved = self.train.split_off(self.train.len() - n_test);
        self.test.splice(0..0, moved);
        self
    }

    /// Appends another split's documents to this one's.
    pub fn extend(&mut self, other: Split) {
        self.train.extend(other.train);
        self.test.extend(other.test);
    }
}
