//! Typed errors of the corpus loaders, each naming where the problem is.
//!
//! Every error names the file, and where it is known the archive member, the line
//! (1-based) and the byte offset (0-based), so that a bad record in a 50 000-review
//! corpus can be found with `sed -n` or `tar -xOf`. Loaders never panic on bad
//! input. Record-level errors ([`CorpusError::is_record_error`]) can be skipped and
//! counted with `LoadOptions { skip_bad: true, .. }`; the others (a missing file,
//! an I/O failure, an unknown layout) always stop the load.
//!
//! ```
//! use mechlab_corpora::{CorpusError, Location};
//! let e = CorpusError::EmptyDocument { at: Location::file("reviews.csv").line(12).byte(3400) };
//! assert_eq!(e.to_string(), "reviews.csv, line 12, byte 3400: empty document");
//! assert!(e.is_record_error());
//! assert_eq!(e.kind(), "empty document");
//! ```

use std::fmt;
use std::path::{Path, PathBuf};

/// Where a record (or a problem) is: a file, optionally a member inside an
/// archive, a 1-based line and a 0-based byte offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The file on disk (the archive itself for archive members).
    pub path: PathBuf,
    /// The member inside an archive, e.g. `aclImdb/train/pos/0_9.txt`.
    pub member: Option<String>,
    /// 1-based line where the record starts.
    pub line: Option<u64>,
    /// 0-based byte offset in the file (or in the member, for archive members).
    pub byte: Option<u64>,
}

impl Location {
    /// A location naming only a file.
    pub fn file(path: impl Into<PathBuf>) -> Self {
        Location {
            path: path.into(),
            member: None,
            line: None,
            byte: None,
        }
    }

    /// A member of an archive.
    pub fn member(path: impl Into<PathBuf>, member: impl Into<String>) -> Self {
        Location {
            member: Some(member.into()),
            ..Location::file(path)
        }
    }

    /// The same location at a 1-based line.
    pub fn line(mut self, line: u64) -> Self {
        self.line = Some(line);
        self
    }

    /// The same location at a 0-based byte offset.
    pub fn byte(mut self, byte: u64) -> Self {
        self.byte = Some(byte);
        self
    }

    /// The compact form used as [`crate::LabeledDoc::source`]: `file`, `file:line`
    /// or `archive:member`.
    pub fn short(&self) -> String {
        let mut s = self.path.display().to_string();
        if let Some(m) = &self.member {
            s.push(':');
            s.push_str(m);
        }
        if let Some(l) = self.line {
            s.push(':');
            s.push_str(&l.to_string());
        }
        s
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some(m) = &self.member {
            write!(f, ", member {}", excerpt(m, VALUE_CHARS))?;
        }
        if let Some(l) = self.line {
            write!(f, ", line {l}")?;
        }
        if let Some(b) = self.byte {
            write!(f, ", byte {b}")?;
        }
        Ok(())
    }
}

/// Everything that can go wrong while loading a corpus or a vocabulary.
#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    /// A file or folder that the layout needs is not there.
    #[error("{}: not found{}", path.display(), if what.is_empty() { String::new() } else { format!(" ({what})") })]
    NotFound { path: PathBuf, what: String },
    /// Reading failed for a reason other than bad content.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A CSV row or JSON line that does not parse (unclosed quote, wrong field
    /// count, bad JSON, missing header).
    #[error("{at}: malformed record: {}", excerpt(reason, MESSAGE_CHARS))]
    MalformedRecord { at: Location, reason: String },
    /// A document whose bytes are not UTF-8; `at.byte` is the first bad byte.
    #[error("{at}: invalid UTF-8")]
    InvalidUtf8 { at: Location },
    /// A document with no text (empty or only whitespace).
    #[error("{at}: empty document")]
    EmptyDocument { at: Location },
    /// A label (or rating, or file name carrying them) that is not one of the
    /// corpus's values.
    #[error("{at}: bad label \"{}\": {reason}", excerpt(label, VALUE_CHARS))]
    BadLabel {
        at: Location,
        label: String,
        reason: &'static str,
    },
    /// A compressed archive that is truncated or corrupt; `after_member` is the
    /// last member read whole, `compressed_offset` how far the compressed stream
    /// had been read when it failed.
    #[error("{}: corrupt or truncated archive after member {} (compressed byte {compressed_offset}): {}",
        path.display(), excerpt(after_member.as_deref().unwrap_or("<none>"), VALUE_CHARS), excerpt(reason, MESSAGE_CHARS))]
    CorruptArchive {
        path: PathBuf,
        after_member: Option<String>,
        compressed_offset: u64,
        reason: String,
    },
    /// A path whose corpus layout could not be recognised (or is ambiguous).
    #[error("{}: unrecognised corpus layout: {}", path.display(), excerpt(reason, MESSAGE_CHARS))]
    UnknownFormat { path: PathBuf, reason: String },
    /// A vocabulary file that is not a valid saved [`crate::Vocab`].
    #[error("{}: corrupt vocabulary file: {}", path.display(), excerpt(reason, MESSAGE_CHARS))]
    CorruptVocab { path: PathBuf, reason: String },
}

impl CorpusError {
    /// Whether this error concerns a single record, so that a loader with
    /// `skip_bad` can skip the record and go on.
    pub fn is_record_error(&self) -> bool {
        matches!(
            self,
            CorpusError::MalformedRecord { .. }
                | CorpusError::InvalidUtf8 { .. }
                | CorpusError::EmptyDocument { .. }
                | CorpusError::BadLabel { .. }
        )
    }

    /// A short name of the error's kind, the key of [`crate::LoadStats::reasons`].
    pub fn kind(&self) -> &'static str {
        match self {
            CorpusError::NotFound { .. } => "not found",
            CorpusError::Io { .. } => "i/o error",
            CorpusError::MalformedRecord { .. } => "malformed record",
            CorpusError::InvalidUtf8 { .. } => "invalid utf-8",
            CorpusError::EmptyDocument { .. } => "empty document",
            CorpusError::BadLabel { .. } => "bad label",
            CorpusError::CorruptArchive { .. } => "corrupt archive",
            CorpusError::UnknownFormat { .. } => "unknown format",
            CorpusError::CorruptVocab { .. } => "corrupt vocabulary",
        }
    }

    /// An [`CorpusError::Io`] for `path`, or [`CorpusError::NotFound`] when the
    /// I/O error says the file is not there.
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        if source.kind() == std::io::ErrorKind::NotFound {
            CorpusError::NotFound {
                path: path.to_path_buf(),
                what: String::new(),
            }
        } else {
            CorpusError::Io {
                path: path.to_path_buf(),
                source,
            }
        }
    }
}

// The sanitiser is the engine's, one for every crate.
pub use mechlab_engine::text::{excerpt, MESSAGE_CHARS, VALUE_CHARS};

/// Checks that `bytes` are UTF-8 and not blank, naming `at` (with the first bad
/// byte added to `at.byte`) otherwise.
pub fn text_from_bytes(bytes: Vec<u8>, at: &Location) -> Result<String, CorpusError> {
    match String::from_utf8(bytes) {
        Ok(s) if s.trim().is_empty() => Err(CorpusError::EmptyDocument { at: at.clone() }),
        Ok(s) => Ok(s),
        Err(e) => {
            let bad = e.utf8_error().valid_up_to() as u64;
            Err(CorpusError::InvalidUtf8 {
                at: at.clone().byte(at.byte.unwrap_or(0) + bad),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_file_member_and_line() {
        let at = Location::member("a.tar.xz", "aclImdb/train/pos/1_9.txt").byte(7);
        let e = CorpusError::InvalidUtf8 { at };
        assert_eq!(
            e.to_string(),
            "a.tar.xz, member aclImdb/train/pos/1_9.txt, byte 7: invalid UTF-8"
        );
        let e = CorpusError::CorruptArchive {
            path: "a.tar.xz".into(),
            after_member: Some("m.txt".into()),
            compressed_offset: 10,
            reason: "unexpected end of file".into(),
        };
        assert!(e
            .to_string()
            .contains("a.tar.xz: corrupt or truncated archive after member m.txt"));
        assert!(!e.is_record_error());
        let nf = CorpusError::io(
            Path::new("x/y"),
            std::io::Error::from(std::io::ErrorKind::NotFound),
        );
        assert_eq!(nf.to_string(), "x/y: not found");
    }

    #[test]
    fn text_checks_utf8_and_blank() {
        let at = Location::file("f.txt").byte(100);
        assert_eq!(text_from_bytes(b"ok".to_vec(), &at).unwrap(), "ok");
        assert!(matches!(
            text_from_bytes(b" \n".to_vec(), &at),
            Err(CorpusError::EmptyDocument { .. })
        ));
        match text_from_bytes(b"ab\xffc".to_vec(), &at) {
            Err(CorpusError::InvalidUtf8 { at }) => assert_eq!(at.byte, Some(102)),
            other => panic!("{other:?}"),
        }
        assert_eq!(Location::file("f.csv").line(3).short(), "f.csv:3");
    }
}
