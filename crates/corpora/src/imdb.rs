//! IMDB Large Movie Review Dataset (Maas et al. 2011): the `aclImdb` folder, its
//! archive read without extracting, and the Kaggle `IMDB Dataset.csv`.
//!
//! Reviews are `<subset>/<pos|neg>/<id>_<rating>.txt`: the label comes from the
//! folder, the rating (1-4 negative, 7-10 positive, checked) from the file name.
//! `train/` and the non-standard `val/` (official train reviews held out by some
//! redistributions) go to [`Split::train`], `test/` to [`Split::test`]; `unsup/`,
//! `urls_*.txt`, `imdb.vocab` and the rest are ignored. Documents are sorted by
//! (subset, label, id), so the folder and the archive give the same order. The
//! archive (`.tar.gz`, `.tar.xz` or `.tar`, told by magic bytes) is streamed once
//! and its compressed stream checked to the end, so truncation is always caught.
//! The Kaggle CSV (`review,sentiment`, `positive`/`negative`) has no split: all
//! reviews go to `train` (see [`Split::with_holdout`]).
//!
//! ```
//! use mechlab_corpora::{imdb, LoadOptions};
//! let dir = tempfile::tempdir().unwrap();
//! for (sub, pol, name, text) in [("train", "pos", "3_9.txt", "Great!"), ("val", "neg", "1_2.txt", "Dull."),
//!                                ("test", "neg", "8_4.txt", "Meh<br />no."), ("test", "pos", "2_10.txt", "Yes")] {
//!     let d = dir.path().join("aclImdb").join(sub).join(pol);
//!     std::fs::create_dir_all(&d).unwrap();
//!     std::fs::write(d.join(name), text).unwrap();
//! }
//! std::fs::create_dir_all(dir.path().join("aclImdb/train/neg")).unwrap();
//! let (split, stats) = imdb::load_imdb_dir(dir.path(), &LoadOptions::default()).unwrap();
//! assert_eq!((split.train.len(), split.test.len(), stats.kept), (2, 2, 4));
//! assert_eq!((split.train[1].label, split.train[1].rating), (-1, Some(2.0))); // val/ is train
//! ```

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::archive::open_decompressed;
use crate::document::{LabeledDoc, Part, Split, NEG, POS};
use crate::error::{text_from_bytes, CorpusError, Location};
use crate::load::{Collector, LoadOptions, LoadStats, Record};
use crate::strict_csv::{expect_fields, field_label, field_text, load_csv_file};

/// Subsets in the order documents are sorted; `val` belongs to train.
const SUBSETS: [(&str, Part); 3] = [
    ("train", Part::Train),
    ("val", Part::Train),
    ("test", Part::Test),
];
const POLARITIES: [(&str, i8); 2] = [("neg", NEG), ("pos", POS)];

/// What a review's path says: `<subset>/<pos|neg>/<id>_<rating>.txt`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ReviewName {
    subset: usize,
    label: i8,
    id: u64,
    rating: u8,
}

impl ReviewName {
    fn part(&self) -> Part {
        SUBSETS[self.subset].1
    }

    fn sort_key(&self) -> (usize, i8, u64, u8) {
        (self.subset, self.label, self.id, self.rating)
    }
}

/// `None` if `path` is not a labelled review; `Some(Err)` if it sits in a review
/// folder but its name or rating is wrong.
fn classify(path: &str) -> Option<Result<ReviewName, (String, &'static str)>> {
    let mut parts = path.trim_end_matches('/').rsplit('/');
    let (file, pol, subset) = (parts.next()?, parts.next()?, parts.next()?);
    let subset = SUBSETS.iter().position(|(s, _)| *s == subset)?;
    let label = POLARITIES.iter().find(|(p, _)| *p == pol)?.1;
    let stem = file.strip_suffix(".txt")?;
    let parsed = stem
        .split_once('_')
        .and_then(|(id, r)| Some((id.parse::<u64>().ok()?, r.parse::<u8>().ok()?)));
    let Some((id, rating)) = parsed else {
        return Some(Err((
            file.to_string(),
            "file name is not <id>_<rating>.txt",
        )));
    };
    let consistent = if label == POS {
        (7..=10).contains(&rating)
    } else {
        (1..=4).contains(&rating)
    };
    if !consistent {
        return Some(Err((
            file.to_string(),
            "rating does not match its folder (neg/ 1-4, pos/ 7-10)",
        )));
    }
    Some(Ok(ReviewName {
        subset,
        label,
        id,
        rating,
    }))
}

/// Turns a review's bytes into a record.
fn review(
    name: Result<ReviewName, (String, &'static str)>,
    bytes: Vec<u8>,
    at: Location,
) -> Result<Record, CorpusError> {
    let name = name.map_err(|(label, reason)| CorpusError::BadLabel {
        at: at.clone(),
        label,
        reason,
    })?;
    let text = text_from_bytes(bytes, &at)?;
    let doc = LabeledDoc {
        text,
        label: name.label,
        rating: Some(name.rating as f32),
        source: at.short(),
    };
    Ok(Record::Doc(name.part(), doc))
}

/// Sorts both sides by (subset, label, id), read back from each `source`.
fn sort_split(split: &mut Split) {
    let key = |d: &LabeledDoc| {
        classify(&d.source)
            .and_then(Result::ok)
            .map(|n| n.sort_key())
    };
    split.train.sort_by_cached_key(key);
    split.test.sort_by_cached_key(key);
}

/// The folder holding `train/` and `test/`: `path` itself or `path/aclImdb`.
pub fn imdb_root(path: &Path) -> Option<PathBuf> {
    [path.to_path_buf(), path.join("aclImdb")]
        .into_iter()
        .find(|p| p.join("train").is_dir() && p.join("test").is_dir())
}

/// Loads the extracted `aclImdb` folder (`path` is it or its parent).
pub fn load_imdb_dir(path: &Path, opts: &LoadOptions) -> Result<(Split, LoadStats), CorpusError> {
    let root = imdb_root(path).ok_or_else(|| CorpusError::NotFound {
        path: path.to_path_buf(),
        what: "an IMDB folder with train/ and test/ (or aclImdb/train, aclImdb/test)".into(),
    })?;
    let mut coll = Collector::new(opts);
    'outer: for (subset, _) in SUBSETS {
        for (pol, _) in POLARITIES {
            let dir = root.join(subset).join(pol);
            if !dir.is_dir() {
                if subset == "val" {
                    continue;
                }
                return Err(CorpusError::NotFound {
                    path: dir,
                    what: "IMDB review folder".into(),
                });
            }
            let mut names: Vec<String> = std::fs::read_dir(&dir)
                .map_err(|e| CorpusError::io(&dir, e))?
                .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
                .collect::<Result<_, _>>()
                .map_err(|e| CorpusError::io(&dir, e))?;
            names.sort();
            for name in names {
                if coll.full() {
                    break 'outer;
                }
                let Some(class) = classify(&format!("{subset}/{pol}/{name}")) else {
                    continue;
                };
                let file = dir.join(&name);
                let bytes = std::fs::read(&file).map_err(|e| CorpusError::io(&file, e))?;
                coll.take(review(class, bytes, Location::file(&file)))?;
            }
        }
    }
    let (mut split, stats) = coll.finish();
    sort_split(&mut split);
    Ok((split, stats))
}

/// Loads `aclImdb_v1.tar.gz` (or a `.tar.xz` / `.tar` of the same layout)
/// without extracting it. With `skip_bad`, a truncated or corrupt archive keeps
/// the reviews read before the damage and counts one skipped record.
pub fn load_imdb_archive(
    path: &Path,
    opts: &LoadOptions,
) -> Result<(Split, LoadStats), CorpusError> {
    let (reader, info) = open_decompressed(path)?;
    let mut coll = Collector::new(opts);
    let mut last: Option<String> = None;
    let corrupt = |last: &Option<String>, e: std::io::Error| CorpusError::CorruptArchive {
        path: path.to_path_buf(),
        after_member: last.clone(),
        compressed_offset: info.offset(),
        reason: e.to_string(),
    };
    let mut archive = tar::Archive::new(reader);
    let result = (|| {
        let mut stopped_early = false;
        for entry in archive.entries().map_err(|e| corrupt(&last, e))? {
            if coll.full() {
                stopped_early = true;
                break;
            }
            let mut entry = entry.map_err(|e| corrupt(&last, e))?;
            let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
            let is_file = entry.header().entry_type().is_file();
            if let Some(class) = classify(&name).filter(|_| is_file) {
                // The header's size is a claim, not a fact: a damaged one said
                // 3 EB and aborted the process (found by the imdb_archive fuzz
                // target). Reserve at most 1 MiB up front; the read grows as data comes.
                let mut bytes = Vec::with_capacity(entry.size().min(1 << 20) as usize);
                entry.read_to_end(&mut bytes).map_err(|e| {
                    let reading =
                        std::io::Error::new(e.kind(), format!("reading member {name}: {e}"));
                    corrupt(&last, reading)
                })?;
                coll.take(review(class, bytes, Location::member(path, &name)))?;
            }
            last = Some(name);
        }
        if !stopped_early {
            // Read the rest (tar padding) so the compression trailer is checked.
            std::io::copy(&mut archive.into_inner(), &mut std::io::sink())
                .map_err(|e| corrupt(&last, e))?;
        }
        Ok(())
    })();
    match result {
        Err(e @ CorpusError::CorruptArchive { .. }) if coll.skip_bad() => coll.skip(&e),
        Err(e) => return Err(e),
        Ok(()) => {}
    }
    let (mut split, stats) = coll.finish();
    sort_split(&mut split);
    Ok((split, stats))
}

/// Loads the Kaggle `IMDB Dataset.csv` (`review,sentiment` header). All reviews
/// go to `train`; ratings are not known.
pub fn load_imdb_kaggle_csv(
    path: &Path,
    opts: &LoadOptions,
) -> Result<(Split, LoadStats), CorpusError> {
    let mut coll = Collector::new(opts);
    load_csv_file(
        path,
        &mut coll,
        Some(&["review", "sentiment"]),
        |rec, at| {
            expect_fields(rec, 2, &at)?;
            let label = match field_label(rec, 1).as_str() {
                "positive" => POS,
                "negative" => NEG,
                other => {
                    let reason = "expected positive or negative";
                    return Err(CorpusError::BadLabel {
                        at,
                        label: other.into(),
                        reason,
                    });
                }
            };
            let text = field_text(rec, 0, &at)?;
            Ok(Record::Doc(
                Part::Train,
                LabeledDoc {
                    text,
                    label,
                    rating: None,
                    source: at.short(),
                },
            ))
        },
    )?;
    Ok(coll.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_claiming_exabytes_is_a_corrupt_archive_not_an_abort() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.tar");
        let mut h = tar::Header::new_gnu();
        h.set_path("aclImdb/train/pos/0_9.txt").unwrap();
        h.set_size(3 << 60);
        h.set_mode(0o644);
        h.set_cksum();
        let mut bytes = h.as_bytes().to_vec();
        bytes.extend_from_slice(b"Great film.");
        std::fs::write(&path, &bytes).unwrap();
        let e = load_imdb_archive(&path, &LoadOptions::default()).unwrap_err();
        assert!(matches!(e, CorpusError::CorruptArchive { .. }), "{e}");
    }

    #[test]
    fn classify_paths() {
        let ok = |p: &str| classify(p).unwrap().unwrap();
        assert_eq!(
            ok("aclImdb/train/pos/12_9.txt"),
            ReviewName {
                subset: 0,
                label: POS,
                id: 12,
                rating: 9
            }
        );
        assert_eq!(ok("./x/val/neg/3_1.txt").part(), Part::Train);
        assert_eq!(ok("/a/b/test/neg/0_4.txt").part(), Part::Test);
        for ignored in [
            "aclImdb/train/urls_pos.txt",
            "aclImdb/train/unsup/1_0.txt",
            "aclImdb/imdb.vocab",
            "aclImdb/README",
            "train/pos/",
        ] {
            assert!(classify(ignored).is_none(), "{ignored}");
        }
        assert!(classify("aclImdb/train/pos/12.txt").unwrap().is_err());
        let (_, why) = classify("aclImdb/test/pos/5_3.txt").unwrap().unwrap_err();
        assert_eq!(
            why,
            "rating does not match its folder (neg/ 1-4, pos/ 7-10)"
        );
    }

    #[test]
    fn kaggle_csv_reads_quoted_reviews() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("IMDB Dataset.csv");
        std::fs::write(&path, "review,sentiment\n\"Good, \"\"really\"\"<br /><br />\nyes\",positive\nBad film.,negative\n").unwrap();
        let (split, stats) = load_imdb_kaggle_csv(&path, &LoadOptions::default()).unwrap();
        assert_eq!(stats.kept, 2);
        assert_eq!(split.train[0].text, "Good, \"really\"<br /><br />\nyes");
        assert_eq!(
            (
                split.train[1].label,
                split.train[1].source.ends_with(".csv:4")
            ),
            (NEG, true)
        );
        std::fs::write(&path, "text,label\nx,positive\n").unwrap();
        let e = load_imdb_kaggle_csv(&path, &LoadOptions::skipping()).unwrap_err();
        assert!(
            e.to_string()
                .contains("IMDB Dataset.csv, line 1: malformed record: header"),
            "{e}"
        );
    }
}
