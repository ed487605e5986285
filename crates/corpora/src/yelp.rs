//! Yelp review corpora: Zhang et al.'s polarity CSV, the Yelp Open Dataset JSON
//! lines, the `Review Stars:` CSV of Yue et al., and Shen et al.'s sentence files.
//!
//! Stars follow Zhang et al. (2015): 1-2 negative, 4-5 positive, 3 dropped and
//! counted in [`crate::LoadStats::neutral`]. Splits come from file names: `test`
//! goes to [`Split::test`], `train` to [`Split::train`], and `dev` stands in for
//! train when a folder has no train file. The Open Dataset JSON has no split (all
//! train). Given a folder, each loader reads every file of its layout in it.
//!
//! ```
//! use mechlab_corpora::{yelp, LoadOptions};
//! let dir = tempfile::tempdir().unwrap();
//! std::fs::write(dir.path().join("yelp_reviews_dev.csv"),
//!     "text,label1,label2\n\"Great, tasty\",Business Category: Food,Review Stars: 5.0\n\
//!      Meh,Business Category: Food,Review Stars: 3.0\nAwful,Business Category: Food,Review Stars: 1.0\n").unwrap();
//! let (split, stats) = yelp::load_yelp_stars_csv(dir.path(), &LoadOptions::default()).unwrap();
//! assert_eq!((split.train.len(), stats.neutral), (2, 1));
//! assert_eq!((split.train[0].label, split.train[0].rating), (1, Some(5.0)));
//! assert!(split.train[1].source.ends_with("yelp_reviews_dev.csv:4"));
//! ```

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::archive::open_decompressed;
use crate::document::{LabeledDoc, Part, Split, NEG, POS};
use crate::error::{text_from_bytes, CorpusError, Location};
use crate::load::{Collector, LoadOptions, LoadStats, Record};
use crate::strict_csv::{expect_fields, field_label, field_text, load_csv_file};

/// The part a file belongs to, from its name.
pub fn part_of(path: &Path) -> Part {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    if name.contains("test") {
        Part::Test
    } else {
        Part::Train
    }
}

/// A record for 1-5 stars: positive, negative or neutral (`written`: the stars
/// as written, for the error).
fn from_stars(
    stars: f32,
    written: &str,
    text: String,
    at: &Location,
) -> Result<Record, CorpusError> {
    let label = match stars {
        s if (1.0..=2.0).contains(&s) => NEG,
        s if (4.0..=5.0).contains(&s) => POS,
        3.0 => return Ok(Record::Neutral),
        _ => {
            let reason = "stars must be 1 to 5";
            return Err(CorpusError::BadLabel {
                at: at.clone(),
                label: written.into(),
                reason,
            });
        }
    };
    let doc = LabeledDoc {
        text,
        label,
        rating: Some(stars),
        source: at.short(),
    };
    Ok(Record::Doc(part_of(&at.path), doc))
}

/// The files of a layout: `path` itself, or those of `names` in the folder
/// `path` (with `dev` dropped when `train` is there). Errors if none exist.
fn layout_files(path: &Path, names: &[&str], what: &str) -> Result<Vec<PathBuf>, CorpusError> {
    if !path.is_dir() {
        return if path.exists() {
            Ok(vec![path.to_path_buf()])
        } else {
            Err(CorpusError::NotFound {
                path: path.to_path_buf(),
                what: what.into(),
            })
        };
    }
    let found: Vec<PathBuf> = names
        .iter()
        .map(|n| path.join(n))
        .filter(|p| p.is_file())
        .collect();
    let has_train = found.iter().any(|p| {
        p.file_name()
            .is_some_and(|n| n.to_string_lossy().contains("train"))
    });
    let found: Vec<PathBuf> = found
        .into_iter()
        .filter(|p| {
            !(has_train
                && p.file_name()
                    .is_some_and(|n| n.to_string_lossy().contains("dev")))
        })
        .collect();
    if found.is_empty() {
        return Err(CorpusError::NotFound {
            path: path.to_path_buf(),
            what: format!("{what}: none of {names:?}"),
        });
    }
    Ok(found)
}

fn load_files(
    files: &[PathBuf],
    opts: &LoadOptions,
    mut each: impl FnMut(&Path, &mut Collector) -> Result<(), CorpusError>,
) -> Result<(Split, LoadStats), CorpusError> {
    let mut coll = Collector::new(opts);
    for f in files {
        if coll.full() {
            break;
        }
        each(f, &mut coll)?;
    }
    Ok(coll.finish())
}

/// Reads the lines of `path` (compressed or not) into `coll`; `\n` and `\r\n`
/// endings are removed. Blank lines are skipped when `skip_blank`, else passed on.
fn load_lines(
    path: &Path,
    coll: &mut Collector,
    skip_blank: bool,
    mut parse: impl FnMut(Vec<u8>, Location) -> Result<Record, CorpusError>,
) -> Result<(), CorpusError> {
    let (reader, _) = open_decompressed(path)?;
    let mut reader = BufReader::with_capacity(1 << 16, reader);
    let (mut line_no, mut byte) = (0u64, 0u64);
    while !coll.full() {
        let mut line = Vec::new();
        let n = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| CorpusError::io(path, e))?;
        if n == 0 {
            break;
        }
        line_no += 1;
        let at = Location::file(path).line(line_no).byte(byte);
        byte += n as u64;
        while line.last().is_some_and(|&b| b == b'\n' || b == b'\r') {
            line.pop();
        }
        if skip_blank && line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        coll.take(parse(line, at))?;
    }
    Ok(())
}

/// File names of Zhang et al.'s `yelp_review_polarity_csv`.
pub const POLARITY_CSV_FILES: [&str; 2] = ["train.csv", "test.csv"];

/// Loads Zhang et al.'s `yelp_review_polarity_csv` (`path`: the folder, its
/// parent, or one CSV): no header, `"1"` negative / `"2"` positive, then the
/// text with newlines written as the two characters `\n`.
pub fn load_yelp_polarity_csv(
    path: &Path,
    opts: &LoadOptions,
) -> Result<(Split, LoadStats), CorpusError> {
    let nested = path.join("yelp_review_polarity_csv");
    let path = if nested.is_dir() {
        nested.as_path()
    } else {
        path
    };
    let files = layout_files(
        path,
        &POLARITY_CSV_FILES,
        "Yelp polarity CSV (train.csv, test.csv)",
    )?;
    load_files(&files, opts, |f, coll| {
        load_csv_file(f, coll, None, |rec, at| {
            expect_fields(rec, 2, &at)?;
            let label = match field_label(rec, 0).as_str() {
                "1" => NEG,
                "2" => POS,
                other => {
                    let reason = "expected \"1\" (negative) or \"2\" (positive)";
                    return Err(CorpusError::BadLabel {
                        at,
                        label: other.into(),
                        reason,
                    });
                }
            };
            let text = field_text(rec, 1, &at)?.replace("\\n", "\n");
            Ok(Record::Doc(
                part_of(f),
                LabeledDoc {
                    text,
                    label,
                    rating: None,
                    source: at.short(),
                },
            ))
        })
    })
}

/// File names of the `Review Stars:` CSV (Yue et al. 2023 processing).
pub const STARS_CSV_FILES: [&str; 3] = [
    "yelp_reviews_train.csv",
    "yelp_reviews_dev.csv",
    "yelp_reviews_test.csv",
];

/// Loads the `text,label1,label2` CSV whose `label2` is `Review Stars: 1.0`..`5.0`
/// (`path`: one file, or a folder with `yelp_reviews_{train,dev,test}.csv`).
pub fn load_yelp_stars_csv(
    path: &Path,
    opts: &LoadOptions,
) -> Result<(Split, LoadStats), CorpusError> {
    let files = layout_files(path, &STARS_CSV_FILES, "Yelp Review Stars CSV")?;
    load_files(&files, opts, |f, coll| {
        load_csv_file(f, coll, Some(&["text", "label1", "label2"]), |rec, at| {
            expect_fields(rec, 3, &at)?;
            let label = field_label(rec, 2);
            let stars = label
                .strip_prefix("Review Stars:")
                .and_then(|s| s.trim().parse::<f32>().ok());
            let Some(stars) = stars else {
                let reason = "expected \"Review Stars: <1-5>\"";
                return Err(CorpusError::BadLabel { at, label, reason });
            };
            let text = field_text(rec, 0, &at)?;
            from_stars(stars, &label, text, &at)
        })
    })
}

/// File name of the Yelp Open Dataset reviews.
pub const OPEN_DATASET_FILE: &str = "yelp_academic_dataset_review.json";

#[derive(Deserialize)]
struct JsonReview {
    stars: f32,
    text: String,
}

/// Loads Yelp Open Dataset reviews: JSON lines with `stars` and `text` (other
/// fields ignored), streamed; all go to `train`.
pub fn load_yelp_json(path: &Path, opts: &LoadOptions) -> Result<(Split, LoadStats), CorpusError> {
    let files = layout_files(path, &[OPEN_DATASET_FILE], "Yelp Open Dataset reviews")?;
    load_files(&files, opts, |f, coll| {
        load_lines(f, coll, true, |line, at| {
            let line = text_from_bytes(line, &at)?;
            let r: JsonReview =
                serde_json::from_str(&line).map_err(|e| CorpusError::MalformedRecord {
                    at: at.clone(),
                    reason: e.to_string(),
                })?;
            if r.text.trim().is_empty() {
                return Err(CorpusError::EmptyDocument { at });
            }
            match from_stars(r.stars, &r.stars.to_string(), r.text, &at)? {
                Record::Doc(_, doc) => Ok(Record::Doc(Part::Train, doc)),
                neutral => Ok(neutral),
            }
        })
    })
}

/// File names of Shen et al.'s sentence files: `sentiment.<part>.<0|1>`.
pub const SENTENCE_FILES: [&str; 6] = [
    "sentiment.train.0",
    "sentiment.train.1",
    "sentiment.dev.0",
    "sentiment.dev.1",
    "sentiment.test.0",
    "sentiment.test.1",
];

/// Whether a file name is one of [`SENTENCE_FILES`]' pattern.
pub fn is_sentence_file(name: &str) -> bool {
    let mut parts = name.split('.');
    parts.next() == Some("sentiment")
        && parts.next().is_some()
        && matches!(parts.next(), Some("0" | "1"))
        && parts.next().is_none()
}

/// Loads Shen et al.'s one-sentence-per-line files (`.0` negative, `.1`
/// positive); `path` is one file or the folder holding them. Blank lines are
/// empty documents.
pub fn load_yelp_sentences(
    path: &Path,
    opts: &LoadOptions,
) -> Result<(Split, LoadStats), CorpusError> {
    let files = layout_files(
        path,
        &SENTENCE_FILES,
        "Yelp sentence files sentiment.*.{0,1}",
    )?;
    load_files(&files, opts, |f, coll| {
        let name = f
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let label = match name.rsplit('.').next() {
            Some("0") => NEG,
            Some("1") => POS,
            _ => {
                let reason = "sentence files end in .0 (negative) or .1 (positive)";
                return Err(CorpusError::BadLabel {
                    at: Location::file(f),
                    label: name,
                    reason,
                });
            }
        };
        load_lines(f, coll, false, |line, at| {
            let text = text_from_bytes(line, &at)?;
            Ok(Record::Doc(
                part_of(f),
                LabeledDoc {
                    text,
                    label,
                    rating: None,
                    source: at.short(),
                },
            ))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polarity_csv_unescapes_newlines_and_quotes() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("yelp_review_polarity_csv");
        std::fs::create_dir(&sub).unwrap();
        std::fs::write(
            sub.join("train.csv"),
            "\"2\",\"Loved it.\\nSaid \"\"wow\"\".\"\n\"1\",\"No.\"\n",
        )
        .unwrap();
        std::fs::write(sub.join("test.csv"), "\"1\",\"Cold food\"\n").unwrap();
        let (split, stats) = load_yelp_polarity_csv(dir.path(), &LoadOptions::default()).unwrap();
        assert_eq!((split.train.len(), split.test.len(), stats.kept), (2, 1, 3));
        assert_eq!(split.train[0].text, "Loved it.\nSaid \"wow\".");
        assert_eq!(
            (
                split.train[0].label,
                split.train[1].label,
                split.test[0].label
            ),
            (POS, NEG, NEG)
        );
        std::fs::write(sub.join("test.csv"), "\"3\",\"?\"\n").unwrap();
        let e = load_yelp_polarity_csv(&sub, &LoadOptions::default()).unwrap_err();
        assert!(
            e.to_string()
                .contains("test.csv, line 1, byte 0: bad label \"3\""),
            "{e}"
        );
    }

    #[test]
    fn json_lines_drop_three_stars_and_report_bad_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(OPEN_DATASET_FILE);
        let good = "{\"review_id\":\"a\",\"stars\":5.0,\"text\":\"Yum\"}\n{\"stars\":3,\"text\":\"ok\"}\n\n{\"stars\":2,\"text\":\"meh\"}\n";
        std::fs::write(
            &path,
            format!("{good}{{\"stars\":4,\"text\n{{\"stars\":9,\"text\":\"x\"}}\n"),
        )
        .unwrap();
        let e = load_yelp_json(dir.path(), &LoadOptions::default()).unwrap_err();
        assert!(
            e.to_string()
                .contains(&format!("{OPEN_DATASET_FILE}, line 5")),
            "{e}"
        );
        let (split, stats) = load_yelp_json(&path, &LoadOptions::skipping()).unwrap();
        assert_eq!((split.train.len(), stats.neutral, stats.skipped), (2, 1, 2));
        assert_eq!(
            (
                stats.reasons["malformed record"],
                stats.reasons["bad label"]
            ),
            (1, 1)
        );
        assert_eq!((split.train[0].label, split.train[1].label), (POS, NEG));
    }

    #[test]
    fn sentence_files_and_dev_standing_in_for_train() {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in [
            ("sentiment.dev.0", "bad .\n"),
            ("sentiment.dev.1", "good !\r\n"),
            ("sentiment.test.1", "yes\n"),
        ] {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        let (split, _) = load_yelp_sentences(dir.path(), &LoadOptions::default()).unwrap();
        assert_eq!(
            (
                split.train.len(),
                split.test.len(),
                split.train[1].text.as_str()
            ),
            (2, 1, "good !")
        );
        std::fs::write(dir.path().join("sentiment.train.0"), "train only\n").unwrap();
        let (split, _) = load_yelp_sentences(dir.path(), &LoadOptions::default()).unwrap();
        assert_eq!(
            (split.train.len(), split.train[0].text.as_str()),
            (1, "train only")
        );
        assert!(is_sentence_file("sentiment.dev.0") && !is_sentence_file("sentiment.dev.2"));
        assert!(!is_sentence_file("sentiment.dev.0.bak"));
    }
}
