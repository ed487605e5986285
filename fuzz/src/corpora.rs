//! Targets for the corpus loaders: IMDB (folder, archives), the review CSVs and
//! sentence files, Yelp JSON lines, MediaWiki dumps (plain and bzip2), WikiText,
//! the vital-articles JSON, and the gzip/xz/tar readers under them.

use std::io::{Cursor, Read, Write};

use mechlab_corpora::archive::open_decompressed;
use mechlab_corpora::strict_csv::StrictCsv;
use mechlab_corpora::wikipedia::mediawiki::DumpReader;
use mechlab_corpora::wikipedia::{vital, wikitext, wikitext2};
use mechlab_corpora::{imdb, yelp, CorpusError, LoadOptions};

use crate::scratch;

/// Decoded bytes a target reads at most: enough for every parser's state, and a
/// cap that keeps a small decompression bomb from being reported as a crash.
const MAX_DECODED: u64 = 16 << 20;

/// Runs a review loader both ways, stopping at the first bad record and skipping
/// them, and checks that the two agree on what a clean input holds.
fn both_ways(
    load: impl Fn(
        &LoadOptions,
    ) -> Result<(mechlab_corpora::Split, mechlab_corpora::LoadStats), CorpusError>,
) {
    let strict = load(&LoadOptions::default());
    let skipping = load(&LoadOptions::skipping());
    if let (Ok((a, _)), Ok((b, stats))) = (&strict, &skipping) {
        assert_eq!(stats.skipped, 0, "a clean load skipped records");
        assert_eq!(a, b, "skipping changed a clean load");
    }
    for e in [strict.err(), skipping.err()].into_iter().flatten() {
        assert_one_line(&e.to_string());
    }
}

/// Error messages are one line without raw control characters.
pub(crate) fn assert_one_line(msg: &str) {
    assert!(
        !msg.chars().any(|c| c.is_control()),
        "error message holds a control character: {msg:?}"
    );
}

/// The IMDB archive loader (`.tar`, `.tar.gz`, `.tar.xz`, told by magic bytes).
pub fn imdb_archive(data: &[u8]) {
    let path = scratch::file("aclImdb_v1.tar.gz", data);
    both_ways(|o| imdb::load_imdb_archive(&path, o));
}

/// The `aclImdb` folder loader, on a folder built from the input: records split at
/// NUL bytes, each a relative path line then the file's contents.
pub fn imdb_dir(data: &[u8]) {
    let root = scratch::fresh_dir("imdb");
    for chunk in data.split(|&b| b == 0).take(64) {
        let (name, body) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (&chunk[..i], &chunk[i + 1..]),
            None => (chunk, &[][..]),
        };
        // Only tame path characters, and no `..`: the folder must stay inside scratch.
        let name: String = String::from_utf8_lossy(name)
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || "_./-".contains(*c))
            .collect();
        let name = name.trim_start_matches('/').replace("..", "");
        if name.is_empty() {
            continue;
        }
        let path = root.join(&name);
        if let Some(parent) = path.parent() {
            if std::fs::create_dir_all(parent).is_err() {
                continue; // a file already stands where a folder would go
            }
        }
        if path.is_dir() {
            continue;
        }
        let _ = std::fs::write(&path, body);
    }
    both_ways(|o| imdb::load_imdb_dir(&root, o));
}

/// The review CSVs and sentence files, by the first byte: the Kaggle IMDB CSV,
/// Zhang et al.'s polarity CSV, the `Review Stars:` CSV, a sentence file; and the
/// strict CSV reader itself, whose records must read back the same once re-quoted.
pub fn reviews_csv(data: &[u8]) {
    let Some((&sel, body)) = data.split_first() else {
        return;
    };
    match sel % 4 {
        0 => {
            let p = scratch::file("IMDB Dataset.csv", body);
            both_ways(|o| imdb::load_imdb_kaggle_csv(&p, o));
        }
        1 => {
            let p = scratch::file("train.csv", body);
            both_ways(|o| yelp::load_yelp_polarity_csv(&p, o));
        }
        2 => {
            let p = scratch::file(yelp::STARS_CSV_FILES[0], body);
            both_ways(|o| yelp::load_yelp_stars_csv(&p, o));
        }
        _ => {
            let p = scratch::file(yelp::SENTENCE_FILES[0], body);
            both_ways(|o| yelp::load_yelp_sentences(&p, o));
        }
    }
    csv_round_trip(body);
}

fn csv_round_trip(body: &[u8]) {
    let mut reader = StrictCsv::new(body);
    let mut rows = Vec::new();
    while let Some(rec) = reader.next_record() {
        match rec {
            Ok(r) => rows.push(r.fields),
            Err(_) => return, // the loaders above have had their say on it
        }
    }
    let mut text = Vec::new();
    for row in &rows {
        for (i, field) in row.iter().enumerate() {
            if i > 0 {
                text.push(b',');
            }
            text.push(b'"');
            for &b in field {
                if b == b'"' {
                    text.push(b'"');
                }
                text.push(b);
            }
            text.push(b'"');
        }
        text.push(b'\n');
    }
    let mut again = StrictCsv::new(&text[..]);
    let mut back = Vec::new();
    while let Some(rec) = again.next_record() {
        back.push(rec.expect("a re-quoted record parses").fields);
    }
    // Blank lines are skipped, so a row of one empty field may vanish; nothing else.
    let keep = |rows: &[Vec<Vec<u8>>]| -> Vec<Vec<Vec<u8>>> {
        rows.iter()
            .filter(|r| !(r.len() == 1 && r[0].is_empty()))
            .cloned()
            .collect()
    };
    assert_eq!(
        keep(&rows),
        keep(&back),
        "CSV records changed on a round trip"
    );
}

/// The Yelp Open Dataset JSON lines loader.
pub fn yelp_json(data: &[u8]) {
    let p = scratch::file(yelp::OPEN_DATASET_FILE, data);
    both_ways(|o| yelp::load_yelp_json(&p, o));
}

/// The MediaWiki XML dump reader. Input starting with `BZh` goes through the
/// bzip2 path as it is; any other input is read plain and, when it is small, also
/// compressed with bzip2 and read back, which must give the same articles.
pub fn mediawiki(data: &[u8]) {
    if data.starts_with(b"BZh") {
        let p = scratch::file("dump.xml.bz2", data);
        if let Ok(reader) = DumpReader::open(&p) {
            for r in reader.take(10_000) {
                if let Err(e) = r {
                    assert_one_line(&e.to_string());
                }
            }
        }
        return;
    }
    let plain: Result<Vec<_>, _> =
        DumpReader::from_reader(Cursor::new(data.to_vec()), "dump.xml").collect();
    if let Err(e) = &plain {
        assert_one_line(&e.to_string());
    }
    let _ = DumpReader::from_reader(Cursor::new(data.to_vec()), "dump.xml")
        .keep_markup(true)
        .count();
    if data.len() > 4096 {
        return;
    }
    let mut enc = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::fast());
    enc.write_all(data).expect("compressing into memory");
    let p = scratch::file(
        "dump.xml.bz2",
        &enc.finish().expect("compressing into memory"),
    );
    let packed: Result<Vec<_>, _> = DumpReader::open(&p)
        .expect("the scratch file opens")
        .collect();
    match (plain, packed) {
        (Ok(a), Ok(b)) => {
            let strip = |v: Vec<mechlab_corpora::article::Article>| -> Vec<(String, String)> {
                v.into_iter().map(|a| (a.title, a.text)).collect()
            };
            assert_eq!(strip(a), strip(b), "bzip2 changed the articles");
        }
        (Err(_), Err(_)) => {}
        (a, b) => panic!(
            "plain and bzip2 reads disagree: {:?} vs {:?}",
            a.err(),
            b.err()
        ),
    }
}

/// The wikitext markup stripper, entity decoder and WikiText-2 reader.
pub fn wikitext(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let _ = wikitext::strip_wikitext(&text);
    let _ = wikitext::decode_entities(&text);
    for a in wikitext2::parse_wikitext2(&text, "fuzz.tokens") {
        assert!(!a.title.is_empty() || !a.text.is_empty());
    }
    for line in text.lines().take(256) {
        let _ = wikitext2::detokenize(line);
    }
    let p = scratch::file("wiki.test.tokens", data);
    if let Err(e) = wikitext2::load_wikitext2(&p) {
        assert_one_line(&e.to_string());
    }
}

/// The vital-articles JSON reader; what it reads must read back the same once
/// written out again.
pub fn vital(data: &[u8]) {
    let path = std::path::Path::new("vital.json");
    let articles = match vital::parse_vital(data, path) {
        Ok(a) => a,
        Err(e) => return assert_one_line(&e.to_string()),
    };
    let mut out = serde_json::Map::new();
    for (i, a) in articles.iter().enumerate() {
        // A title falls back to its key, so the one article that can have an
        // empty title (key "", no title) keeps the key "" (finding-empty-key-title);
        // "" sorts first, as it did in the input.
        let key = if a.title.is_empty() {
            String::new()
        } else {
            format!("{i:08}")
        };
        out.insert(
            key,
            serde_json::json!({"title": a.title, "extract": a.text, "topic": a.topic}),
        );
    }
    let text = serde_json::to_vec(&out).expect("JSON serialises");
    let back = vital::parse_vital(&text, path).expect("written vital JSON parses");
    let key = |v: &[mechlab_corpora::article::Article]| -> Vec<(String, String, Option<String>)> {
        v.iter()
            .map(|a| (a.title.clone(), a.text.clone(), a.topic.clone()))
            .collect()
    };
    assert_eq!(
        key(&articles),
        key(&back),
        "vital JSON changed on a round trip"
    );
}

/// The gzip/xz/plain stream under every review loader, by the first byte: the rest
/// is read as a file as it is (must not panic), then compressed with that codec
/// (or wrapped in a tar under an IMDB review name) and read back (must be equal).
pub fn archives(data: &[u8]) {
    let Some((&sel, body)) = data.split_first() else {
        return;
    };
    let raw = scratch::file("stream", body);
    if let Ok((reader, _)) = open_decompressed(&raw) {
        let _ = reader.take(MAX_DECODED).read_to_end(&mut Vec::new());
    }
    let packed: Vec<u8> = match sel % 3 {
        0 => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(body).expect("compressing into memory");
            e.finish().expect("compressing into memory")
        }
        1 => {
            let mut e = xz2::write::XzEncoder::new(Vec::new(), 0);
            e.write_all(body).expect("compressing into memory");
            e.finish().expect("compressing into memory")
        }
        _ => return tar_round_trip(body),
    };
    let p = scratch::file("stream.z", &packed);
    let (mut reader, _) = open_decompressed(&p).expect("the scratch file opens");
    let mut back = Vec::new();
    reader
        .read_to_end(&mut back)
        .expect("a fresh stream decodes");
    assert_eq!(back, body, "the stream changed on a round trip");
}

/// A tar holding the input as the one review `aclImdb/train/pos/0_9.txt` (and an
/// empty `test/` folder) loads as that review exactly when it is non-blank UTF-8.
fn tar_round_trip(body: &[u8]) {
    let mut b = tar::Builder::new(Vec::new());
    let mut dir = tar::Header::new_gnu();
    dir.set_entry_type(tar::EntryType::Directory);
    dir.set_size(0);
    dir.set_mode(0o755);
    dir.set_cksum();
    b.append_data(&mut dir.clone(), "aclImdb/test/", &[][..])
        .expect("building a tar in memory");
    let mut h = tar::Header::new_gnu();
    h.set_size(body.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    b.append_data(&mut h, "aclImdb/train/pos/0_9.txt", body)
        .expect("building a tar in memory");
    let p = scratch::file(
        "one.tar",
        &b.into_inner().expect("building a tar in memory"),
    );
    let loaded = imdb::load_imdb_archive(&p, &LoadOptions::default());
    match std::str::from_utf8(body) {
        Ok(s) if !s.trim().is_empty() => {
            let (split, _) = loaded.expect("a one-review archive loads");
            assert_eq!(split.train.len(), 1);
            assert_eq!(split.train[0].text, s, "the review changed on a round trip");
        }
        _ => assert!(loaded.is_err(), "a blank or non-UTF-8 review was accepted"),
    }
}
