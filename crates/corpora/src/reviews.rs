//! One entry point for review corpora: [`load_reviews`] detects IMDB or Yelp,
//! and which of their layouts, from a folder or a file.
//!
//! A file is told by its first bytes and header: a tar archive (gzip, xz or
//! plain) is IMDB, a CSV by its header (`review,sentiment`: Kaggle IMDB;
//! `text,label1,label2`: Yelp stars; a first field `1`/`2` and no header: Zhang
//! Yelp polarity), `sentiment.*.{0,1}` are Yelp sentences and a file starting
//! with `{` is Yelp Open Dataset JSON lines. A folder is searched for the known
//! file and folder names; when it holds layouts of both corpora (such as the
//! data root, with `imdb/` and `yelp/` below it, which is not searched) it is
//! an error, and when it holds several Yelp layouts the full reviews win over
//! the sentence files (in the order of [`ReviewFormat`]).
//!
//! ```
//! use mechlab_corpora::{detect_format, load_reviews, LoadOptions, ReviewFormat};
//! let dir = tempfile::tempdir().unwrap();
//! let csv = dir.path().join("IMDB Dataset.csv");
//! std::fs::write(&csv, "review,sentiment\nA fine film.,positive\n").unwrap();
//! assert_eq!(detect_format(dir.path()).unwrap(), (ReviewFormat::ImdbKaggleCsv, csv.clone()));
//! let (split, stats) = load_reviews(dir.path(), &LoadOptions::default()).unwrap();
//! assert_eq!((split.train.len(), stats.kept), (1, 1));
//! ```

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::archive::open_decompressed;
use crate::document::Split;
use crate::error::CorpusError;
use crate::imdb::{imdb_root, load_imdb_archive, load_imdb_dir, load_imdb_kaggle_csv};
use crate::load::{LoadOptions, LoadStats};
use crate::yelp::{
    is_sentence_file, load_yelp_json, load_yelp_polarity_csv, load_yelp_sentences,
    load_yelp_stars_csv, OPEN_DATASET_FILE, POLARITY_CSV_FILES, STARS_CSV_FILES,
};

/// The review layouts [`load_reviews`] knows, IMDB first, then Yelp full
/// reviews before sentences (the order a folder holding several is resolved in).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ReviewFormat {
    /// The extracted `aclImdb` folder.
    ImdbDir,
    /// `aclImdb_v1.tar.gz` or a `.tar.xz` / `.tar` of the same layout.
    ImdbArchive,
    /// Kaggle `IMDB Dataset.csv`.
    ImdbKaggleCsv,
    /// Zhang et al. `yelp_review_polarity_csv`.
    YelpPolarityCsv,
    /// The `text,label1,label2` CSV with `Review Stars:`.
    YelpStarsCsv,
    /// Yelp Open Dataset JSON lines.
    YelpJson,
    /// Shen et al. `sentiment.*.{0,1}` sentence files.
    YelpSentences,
}

impl ReviewFormat {
    /// Whether this is an IMDB layout (else Yelp).
    pub fn is_imdb(self) -> bool {
        self <= ReviewFormat::ImdbKaggleCsv
    }
}

impl fmt::Display for ReviewFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            ReviewFormat::ImdbDir => "IMDB aclImdb folder",
            ReviewFormat::ImdbArchive => "IMDB archive",
            ReviewFormat::ImdbKaggleCsv => "IMDB Kaggle CSV",
            ReviewFormat::YelpPolarityCsv => "Yelp polarity CSV (Zhang et al.)",
            ReviewFormat::YelpStarsCsv => "Yelp Review Stars CSV",
            ReviewFormat::YelpJson => "Yelp Open Dataset JSON lines",
            ReviewFormat::YelpSentences => "Yelp sentence files (Shen et al.)",
        };
        f.write_str(s)
    }
}

/// The first (up to 1 KiB) decompressed bytes of a file.
fn head(path: &Path) -> Result<Vec<u8>, CorpusError> {
    let (reader, _) = open_decompressed(path)?;
    let mut buf = Vec::with_capacity(1024);
    reader
        .take(1024)
        .read_to_end(&mut buf)
        .map_err(|e| CorpusError::io(path, e))?;
    Ok(buf)
}

/// Detects the layout of one file.
fn detect_file(path: &Path) -> Result<ReviewFormat, CorpusError> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if is_sentence_file(&name) {
        return Ok(ReviewFormat::YelpSentences);
    }
    let head = head(path)?;
    if head.len() >= 262 && &head[257..262] == b"ustar" {
        return Ok(ReviewFormat::ImdbArchive);
    }
    let text = String::from_utf8_lossy(&head);
    let first = text
        .trim_start_matches('\u{feff}')
        .lines()
        .next()
        .unwrap_or("")
        .trim_end();
    let fields: Vec<&str> = first.split(',').map(|f| f.trim_matches('"')).collect();
    Ok(match fields.as_slice() {
        ["review", "sentiment"] => ReviewFormat::ImdbKaggleCsv,
        ["text", "label1", "label2"] => ReviewFormat::YelpStarsCsv,
        ["1" | "2", ..] => ReviewFormat::YelpPolarityCsv,
        _ if first.starts_with('{') => ReviewFormat::YelpJson,
        _ => {
            let reason = format!(
                "not a known review file (first line {:?})",
                first.chars().take(80).collect::<String>()
            );
            return Err(CorpusError::UnknownFormat {
                path: path.to_path_buf(),
                reason,
            });
        }
    })
}

/// The layouts found in a folder, each with the path to load it from.
fn detect_dir(dir: &Path) -> Result<Vec<(ReviewFormat, PathBuf)>, CorpusError> {
    let mut found = Vec::new();
    if imdb_root(dir).is_some() {
        found.push((ReviewFormat::ImdbDir, dir.to_path_buf()));
    }
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| CorpusError::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    names.sort();
    let is_tar = |n: &str| {
        [".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar"]
            .iter()
            .any(|s| n.ends_with(s))
    };
    if let Some(a) = names.iter().find(|n| n.starts_with("aclImdb") && is_tar(n)) {
        found.push((ReviewFormat::ImdbArchive, dir.join(a)));
    }
    if names.iter().any(|n| n == "IMDB Dataset.csv") {
        found.push((ReviewFormat::ImdbKaggleCsv, dir.join("IMDB Dataset.csv")));
    }
    let polarity_dir = dir.join("yelp_review_polarity_csv");
    if polarity_dir.is_dir() {
        found.push((ReviewFormat::YelpPolarityCsv, polarity_dir));
    } else if POLARITY_CSV_FILES
        .iter()
        .any(|f| names.iter().any(|n| n == f))
        && POLARITY_CSV_FILES.iter().all(|f| {
            !dir.join(f).is_file()
                || detect_file(&dir.join(f)).ok() == Some(ReviewFormat::YelpPolarityCsv)
        })
    {
        found.push((ReviewFormat::YelpPolarityCsv, dir.to_path_buf()));
    }
    if STARS_CSV_FILES.iter().any(|f| names.iter().any(|n| n == f)) {
        found.push((ReviewFormat::YelpStarsCsv, dir.to_path_buf()));
    }
    if names.iter().any(|n| n == OPEN_DATASET_FILE) {
        found.push((ReviewFormat::YelpJson, dir.join(OPEN_DATASET_FILE)));
    }
    if names.iter().any(|n| is_sentence_file(n)) {
        found.push((ReviewFormat::YelpSentences, dir.to_path_buf()));
    }
    Ok(found)
}

/// Detects the review layout at `path` (a file or folder) and the path its
/// loader should be given.
pub fn detect_format(path: &Path) -> Result<(ReviewFormat, PathBuf), CorpusError> {
    if !path.exists() {
        return Err(CorpusError::NotFound {
            path: path.to_path_buf(),
            what: "review corpus".into(),
        });
    }
    if !path.is_dir() {
        return Ok((detect_file(path)?, path.to_path_buf()));
    }
    let found = detect_dir(path)?;
    let (imdb, yelp): (Vec<_>, Vec<_>) = found.iter().partition(|(f, _)| f.is_imdb());
    if !imdb.is_empty() && !yelp.is_empty() {
        let reason = format!(
            "holds both IMDB ({}) and Yelp ({}) layouts; pass one",
            imdb[0].0, yelp[0].0
        );
        return Err(CorpusError::UnknownFormat {
            path: path.to_path_buf(),
            reason,
        });
    }
    found.into_iter().min_by_key(|(f, _)| *f).ok_or_else(|| {
        let sub: Vec<String> = ["imdb", "yelp"]
            .iter()
            .filter(|s| path.join(s).is_dir())
            .map(|s| s.to_string())
            .collect();
        let hint = if sub.is_empty() {
            String::new()
        } else {
            format!("; try its subfolder {}", sub.join(" or "))
        };
        CorpusError::UnknownFormat {
            path: path.to_path_buf(),
            reason: format!("no IMDB or Yelp review layout found{hint}"),
        }
    })
}

/// Loads the review layout `format` from `path`.
pub fn load_format(
    format: ReviewFormat,
    path: &Path,
    opts: &LoadOptions,
) -> Result<(Split, LoadStats), CorpusError> {
    match format {
        ReviewFormat::ImdbDir => load_imdb_dir(path, opts),
        ReviewFormat::ImdbArchive => load_imdb_archive(path, opts),
        ReviewFormat::ImdbKaggleCsv => load_imdb_kaggle_csv(path, opts),
        ReviewFormat::YelpPolarityCsv => load_yelp_polarity_csv(path, opts),
        ReviewFormat::YelpStarsCsv => load_yelp_stars_csv(path, opts),
        ReviewFormat::YelpJson => load_yelp_json(path, opts),
        ReviewFormat::YelpSentences => load_yelp_sentences(path, opts),
    }
}

/// Detects the layout at `path` ([`detect_format`]) and loads it.
pub fn load_reviews(
    path: impl AsRef<Path>,
    opts: &LoadOptions,
) -> Result<(Split, LoadStats), CorpusError> {
    let (format, path) = detect_format(path.as_ref())?;
    load_format(format, &path, opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_told_by_name_and_header() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let cases = [
            (
                write("a.csv", "\u{feff}review,sentiment\n"),
                ReviewFormat::ImdbKaggleCsv,
            ),
            (
                write("b.csv", "text,label1,label2\r\n"),
                ReviewFormat::YelpStarsCsv,
            ),
            (
                write("train.csv", "\"2\",\"x\"\n"),
                ReviewFormat::YelpPolarityCsv,
            ),
            (write("r.json", "{\"stars\":1}\n"), ReviewFormat::YelpJson),
            (
                write("sentiment.test.1", "review,sentiment\n"),
                ReviewFormat::YelpSentences,
            ),
        ];
        for (p, want) in cases {
            assert_eq!(detect_format(&p).unwrap().0, want, "{}", p.display());
        }
        let e = detect_format(&write("x.txt", "hello")).unwrap_err();
        assert!(
            e.to_string().contains("x.txt: unrecognised corpus layout"),
            "{e}"
        );
        assert!(matches!(
            detect_format(&dir.path().join("missing")),
            Err(CorpusError::NotFound { .. })
        ));
    }

    #[test]
    fn folders_prefer_full_reviews_and_refuse_mixed_corpora() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("sentiment.dev.0"), "bad\n").unwrap();
        assert_eq!(
            detect_format(dir.path()).unwrap().0,
            ReviewFormat::YelpSentences
        );
        std::fs::write(
            dir.path().join("yelp_reviews_test.csv"),
            "text,label1,label2\n",
        )
        .unwrap();
        assert_eq!(
            detect_format(dir.path()).unwrap().0,
            ReviewFormat::YelpStarsCsv
        );
        std::fs::write(dir.path().join("IMDB Dataset.csv"), "review,sentiment\n").unwrap();
        let e = detect_format(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("both IMDB (IMDB Kaggle CSV) and Yelp (Yelp Review Stars CSV)"),
            "{e}"
        );
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("imdb")).unwrap();
        let e = detect_format(root.path()).unwrap_err().to_string();
        assert!(e.contains("try its subfolder imdb"), "{e}");
    }
}
