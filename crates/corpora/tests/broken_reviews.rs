//! Deliberately broken copies of the corpora, made in a temp dir at test time:
//! each error must name the file and the line or member, and `skip_bad` must
//! count the bad record instead.

use std::io::Write;
use std::path::{Path, PathBuf};

use mechlab_corpora::strict_csv::StrictCsv;
use mechlab_corpora::{data_dir, imdb, load_reviews, yelp, CorpusError, LoadOptions};

fn strict() -> LoadOptions {
    LoadOptions::default()
}

fn real(rel: &str) -> PathBuf {
    data_dir().expect("the shared data folder").join(rel)
}

/// A tar of `members` (name, bytes), compressed as the extension says.
fn make_archive(path: &Path, members: &[(&str, &[u8])]) {
    let mut tar = tar::Builder::new(Vec::new());
    for (name, bytes) in members {
        let mut h = tar::Header::new_gnu();
        h.set_size(bytes.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        tar.append_data(&mut h, name, *bytes).unwrap();
    }
    let tar = tar.into_inner().unwrap();
    let file = std::fs::File::create(path).unwrap();
    if path.to_string_lossy().ends_with(".gz") {
        let mut gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
        gz.write_all(&tar).unwrap();
        gz.finish().unwrap();
    } else {
        let mut xz = xz2::write::XzEncoder::new(file, 6);
        xz.write_all(&tar).unwrap();
        xz.finish().unwrap();
    }
}

#[test]
fn truncated_real_tar_xz_names_the_last_member_and_skip_keeps_what_was_read() {
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("aclImdb_text.tar.xz");
    let bytes = std::fs::read(real("imdb/aclImdb_text.tar.xz")).unwrap();
    std::fs::write(&cut, &bytes[..1 << 20]).unwrap();
    let e = imdb::load_imdb_archive(&cut, &strict()).unwrap_err();
    let msg = e.to_string();
    eprintln!("{msg}");
    assert!(matches!(e, CorpusError::CorruptArchive { .. }), "{msg}");
    assert!(
        msg.contains(
            "aclImdb_text.tar.xz: corrupt or truncated archive after member aclImdb/test/neg/"
        ),
        "{msg}"
    );
    let (split, stats) = load_reviews(&cut, &LoadOptions::skipping()).unwrap();
    assert!(
        split.len() > 500 && split.train.is_empty(),
        "{}",
        split.len()
    );
    assert_eq!((stats.skipped, stats.reasons["corrupt archive"]), (1, 1));
    assert_eq!(stats.read, stats.kept + 1);
    assert!(stats.first_errors[0].contains("after member aclImdb/test/neg/"));
}

#[test]
fn bad_members_of_a_tar_gz_are_named_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("aclImdb_v1.tar.gz");
    let members: [(&str, &[u8]); 7] = [
        ("aclImdb/README", b"readme"),
        ("aclImdb/train/pos/1_9.txt", b"Loved it.<br /><br />Yes."),
        ("aclImdb/train/neg/2_1.txt", b"Bad \xff\xfe bytes"),
        ("aclImdb/train/neg/3_2.txt", b"  \n "),
        ("aclImdb/test/pos/4_2.txt", b"rating 2 in pos/"),
        ("aclImdb/test/neg/five.txt", b"no id"),
        ("aclImdb/test/neg/6_4.txt", b"Fine."),
    ];
    make_archive(&path, &members);
    let e = load_reviews(dir.path(), &strict()).unwrap_err().to_string();
    assert_eq!(
        e,
        format!(
            "{}, member aclImdb/train/neg/2_1.txt, byte 4: invalid UTF-8",
            path.display()
        )
    );
    let (split, stats) = load_reviews(&path, &LoadOptions::skipping()).unwrap();
    assert_eq!((split.train.len(), split.test.len()), (1, 1));
    assert_eq!((stats.read, stats.kept, stats.skipped), (6, 2, 4));
    let reasons: Vec<(&str, usize)> = stats
        .reasons
        .iter()
        .map(|(k, v)| (k.as_str(), *v))
        .collect();
    assert_eq!(
        reasons,
        [
            ("bad label", 2),
            ("empty document", 1),
            ("invalid utf-8", 1)
        ]
    );
    assert!(stats.first_errors[1].contains("member aclImdb/train/neg/3_2.txt: empty document"));
    assert!(stats.first_errors[2].contains(
        "member aclImdb/test/pos/4_2.txt: bad label \"4_2.txt\": rating does not match its folder"
    ));
}

#[test]
fn truncated_synthetic_archives_both_compressions() {
    let dir = tempfile::tempdir().unwrap();
    let text = "A long enough review that compresses poorly: ".repeat(50);
    let names: Vec<String> = (0..40)
        .map(|i| format!("aclImdb/train/pos/{i}_8.txt"))
        .collect();
    let members: Vec<(&str, &[u8])> = names
        .iter()
        .map(|n| (n.as_str(), text.as_bytes()))
        .collect();
    for ext in ["tar.gz", "tar.xz"] {
        let path = dir.path().join(format!("a.{ext}"));
        make_archive(&path, &members);
        let (whole, _) = imdb::load_imdb_archive(&path, &strict()).unwrap();
        assert_eq!(whole.train.len(), 40);
        let bytes = std::fs::read(&path).unwrap();
        // Cut off only the stream trailer: all members decode, the end check fails.
        std::fs::write(&path, &bytes[..bytes.len() - 4]).unwrap();
        let msg = imdb::load_imdb_archive(&path, &strict())
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains(&format!(
                "a.{ext}: corrupt or truncated archive after member aclImdb/"
            )),
            "{msg}"
        );
    }
}

#[test]
fn missing_imdb_folder_and_bad_file_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("aclImdb");
    for sub in ["train/pos", "train/neg", "test/pos"] {
        std::fs::create_dir_all(root.join(sub)).unwrap();
    }
    std::fs::write(root.join("train/pos/0_10.txt"), "Great.").unwrap();
    let e = load_reviews(dir.path(), &LoadOptions::skipping()).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{}: not found (IMDB review folder)",
            root.join("test/neg").display()
        )
    );
    std::fs::create_dir_all(root.join("test/neg")).unwrap();
    std::fs::write(root.join("test/neg/1_3.txt"), b"ok \xc3").unwrap();
    let e = imdb::load_imdb_dir(dir.path(), &strict()).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{}, byte 3: invalid UTF-8",
            root.join("test/neg/1_3.txt").display()
        )
    );
    let (split, stats) = imdb::load_imdb_dir(&root, &LoadOptions::skipping()).unwrap();
    assert_eq!((split.len(), stats.skipped), (1, 1));
    let gone = dir.path().join("nothing-here");
    assert!(matches!(
        load_reviews(&gone, &strict()),
        Err(CorpusError::NotFound { .. })
    ));
}

/// The first `n` records of the real Yelp CSV with their byte ranges.
fn real_yelp_rows(n: usize) -> (Vec<u8>, Vec<(u64, Vec<u64>)>) {
    let bytes = std::fs::read(real("yelp/yelp_reviews_dev.csv")).unwrap();
    let mut csv = StrictCsv::new(&bytes[..]);
    let rows: Vec<(u64, Vec<u64>)> = (0..=n)
        .map(|_| csv.next_record().unwrap().unwrap())
        .map(|r| (r.byte, r.field_bytes))
        .collect();
    let end = rows[n].0 as usize;
    (bytes[..end].to_vec(), rows[..n].to_vec())
}

#[test]
fn broken_copies_of_the_real_yelp_csv() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("yelp_reviews_dev.csv");
    let (good, rows) = real_yelp_rows(30);
    let line_of = |byte: u64| {
        1 + good[..byte as usize]
            .iter()
            .filter(|&&b| b == b'\n')
            .count() as u64
    };
    // Row 5's text field is quoted: its closing quote sits just before field 2.
    let (start5, fields5) = &rows[5];
    assert_eq!(good[fields5[0] as usize - 1], b'"');
    let close = fields5[1] as usize - 2;
    assert_eq!(good[close], b'"');
    let (whole, _) = yelp::load_yelp_stars_csv(&write(&path, good.clone()), &strict()).unwrap();

    // 1. Unclosed quote: drop row 5's closing quote.
    let mut bad = good.clone();
    bad.remove(close);
    let e = load_reviews(write(&path, bad), &strict())
        .unwrap_err()
        .to_string();
    eprintln!("{e}");
    let want = format!(
        "{}, line {}, byte {start5}: malformed record: unclosed quote",
        path.display(),
        line_of(*start5)
    );
    assert!(e.starts_with(&want), "{e}\nwanted {want}");
    let (split, stats) = load_reviews(&path, &LoadOptions::skipping()).unwrap();
    assert_eq!((stats.skipped, stats.reasons["malformed record"]), (1, 1));
    assert_eq!(
        split.len(),
        whole.len() - usize::from(!rows_is_neutral(&good, &rows[5].1))
    );

    // 2. Invalid UTF-8 in row 7's text, 3 bytes into it.
    let (start7, fields7) = &rows[7];
    let mut bad = good.clone();
    bad[fields7[0] as usize + 3] = 0xff;
    let e = load_reviews(write(&path, bad), &strict())
        .unwrap_err()
        .to_string();
    let at = fields7[0] + 3;
    assert_eq!(
        e,
        format!(
            "{}, line {}, byte {at}: invalid UTF-8",
            path.display(),
            line_of(*start7)
        )
    );
    let (_, stats) = load_reviews(&path, &LoadOptions::skipping()).unwrap();
    assert_eq!(stats.reasons["invalid utf-8"], 1);

    // 3. Empty review and 4. bad label, in one copy: both counted under skip_bad.
    let (start2, fields2) = &rows[2];
    let mut bad = good[..*start2 as usize].to_vec();
    bad.extend_from_slice(b"\"  \",Business Category: X,Review Stars: 5.0\n");
    bad.extend_from_slice(&good[rows[3].0 as usize..fields5[2] as usize]);
    bad.extend_from_slice(b"Review Stars: 6.0");
    let rest = &good[fields5[2] as usize..];
    bad.extend_from_slice(&rest[rest.iter().position(|&b| b == b'\r' || b == b'\n').unwrap()..]);
    let e = load_reviews(write(&path, bad), &strict())
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        format!(
            "{}, line {}, byte {}: empty document",
            path.display(),
            line_of(*start2),
            fields2[0]
        )
    );
    let (_, stats) = load_reviews(&path, &LoadOptions::skipping()).unwrap();
    assert_eq!(
        (
            stats.reasons["empty document"],
            stats.reasons["bad label"],
            stats.skipped
        ),
        (1, 1, 2)
    );
    assert!(
        stats.first_errors[1].contains("bad label \"Review Stars: 6.0\""),
        "{:?}",
        stats.first_errors
    );
}

fn rows_is_neutral(bytes: &[u8], fields: &[u64]) -> bool {
    bytes[fields[2] as usize..].starts_with(b"Review Stars: 3.0")
}

fn write(path: &Path, bytes: Vec<u8>) -> PathBuf {
    std::fs::write(path, bytes).unwrap();
    path.to_path_buf()
}

#[test]
fn broken_sentence_file_names_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sentiment.test.1");
    let real_lines = std::fs::read(real("yelp/sentiment.test.1")).unwrap();
    let mut bytes: Vec<u8> = real_lines
        .split(|&b| b == b'\n')
        .take(10)
        .flat_map(|l| [l, b"\n"].concat())
        .collect();
    bytes.extend_from_slice(b"\nbad \x80 byte\nlast good line .\n");
    std::fs::write(&path, bytes).unwrap();
    let e = load_reviews(&path, &strict()).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("{}, line 11, byte ", path.display()))
            && e.ends_with("empty document"),
        "{e}"
    );
    let (split, stats) = load_reviews(&path, &LoadOptions::skipping()).unwrap();
    assert_eq!((split.test.len(), stats.skipped), (11, 2));
    assert!(
        stats.first_errors[1].contains("line 12, byte"),
        "{:?}",
        stats.first_errors
    );
}
