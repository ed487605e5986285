//! Wikipedia loaders on the real shared files and on deliberately broken copies.
//!
//! The data root is `shared/data` beside the repository (or `$MECHLAB_DATA`).

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use mechlab_corpora::article::topic_counts;
use mechlab_corpora::wikipedia::mediawiki::{DumpReader, DumpStats};
use mechlab_corpora::wikipedia::{data_root, detect_format, load_articles, WikiError, WikiFormat};

fn wiki(name: &str) -> PathBuf {
    let path = data_root().join("wikipedia").join(name);
    assert!(
        path.exists(),
        "shared data file {} is missing",
        path.display()
    );
    path
}

const DUMP: &str = "enwiki-pages-articles-sample.xml.bz2";

fn dump_xml() -> Vec<u8> {
    let file = std::fs::File::open(wiki(DUMP)).unwrap();
    let mut xml = Vec::new();
    bzip2::read::MultiBzDecoder::new(file)
        .read_to_end(&mut xml)
        .unwrap();
    xml
}

fn find(hay: &[u8], needle: &[u8], from: usize) -> usize {
    from + hay[from..]
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap()
}

/// Reads a dump to its end: the articles before the error, and the error.
fn read_until_error(path: &Path) -> (usize, WikiError) {
    let mut count = 0;
    for item in DumpReader::open(path).unwrap() {
        match item {
            Ok(_) => count += 1,
            Err(e) => return (count, e),
        }
    }
    panic!("{} read without error", path.display());
}

#[test]
fn real_dump_counts_articles_and_skips_redirects() {
    let mut dump = DumpReader::open(&wiki(DUMP)).unwrap();
    let articles: Vec<_> = dump.by_ref().collect::<Result<_, _>>().unwrap();
    let stats = dump.stats();
    assert_eq!(
        stats,
        DumpStats {
            pages: 206,
            articles: 106,
            redirects: 100,
            other_namespaces: 0,
        }
    );
    assert_eq!(articles.len(), 106);
    assert_eq!(articles[0].title, "Anarchism");
    assert!(articles[0]
        .text
        .starts_with("Anarchism is a political philosophy"));
    let titles: BTreeSet<&str> = articles.iter().map(|a| a.title.as_str()).collect();
    assert_eq!(titles.len(), 106);
    assert!(!titles.contains("AccessibleComputing")); // a redirect
    for a in &articles {
        assert_eq!(a.source, format!("mediawiki:{DUMP}"));
        assert!(a.topic.is_none());
        assert!(a.text.len() > 200, "{} is nearly empty", a.title);
        for markup in ["{{", "[[", "]]", "<ref", "'''", "{|", "[http"] {
            assert!(!a.text.contains(markup), "{:?} left in {}", markup, a.title);
        }
    }
    // load_articles detects the format and gives the same articles.
    assert_eq!(
        detect_format(&wiki(DUMP)).unwrap(),
        WikiFormat::MediaWikiXmlBz2
    );
    assert_eq!(load_articles(&wiki(DUMP)).unwrap(), articles);
}

#[test]
fn real_dump_keeps_markup_on_request() {
    let first = DumpReader::open(&wiki(DUMP))
        .unwrap()
        .keep_markup(true)
        .next()
        .unwrap()
        .unwrap();
    assert_eq!(first.title, "Anarchism");
    assert!(first.text.contains("[[political philosophy]]"));
    assert!(first.text.contains("<ref"));
}

#[test]
fn real_vital_articles_have_twelve_topics() {
    let path = wiki("vital_articles_en.json");
    assert_eq!(detect_format(&path).unwrap(), WikiFormat::VitalJson);
    let articles = load_articles(&path).unwrap();
    assert_eq!(articles.len(), 10_033);
    let counts = topic_counts(&articles);
    let expected = [
        ("Arts", 668),
        ("Biology and health sciences", 1358),
        ("Everyday life", 424),
        ("Geography", 1109),
        ("History", 615),
        ("Mathematics", 256),
        ("People", 1828),
        ("Philosophy and religion", 388),
        ("Physical sciences", 974),
        ("Society and social sciences", 785),
        ("Technology", 628),
        ("Uncategorized", 1000),
    ];
    let counts: Vec<(&str, usize)> = counts.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(counts, expected);
    assert!(articles
        .iter()
        .all(|a| !a.text.is_empty() && a.topic.is_some()));
    let odyssey = articles
        .iter()
        .find(|a| a.title == "2001: A Space Odyssey")
        .unwrap();
    assert!(odyssey
        .text
        .starts_with("2001: A Space Odyssey is a 1968 epic science fiction film"));
    assert_eq!(odyssey.topic.as_deref(), Some("Arts"));
}

#[test]
fn real_wikitext2_splits_at_titles_only() {
    let valid = load_articles(&wiki("wikitext-2/wiki.valid.tokens")).unwrap();
    let test = load_articles(&wiki("wikitext-2/wiki.test.tokens")).unwrap();
    assert_eq!((valid.len(), test.len()), (60, 62));
    assert_eq!(valid[0].title, "Homarus gammarus");
    assert_eq!(test[0].title, "Robert <unk>");
    for a in valid.iter().chain(&test) {
        assert!(!a.title.is_empty() && !a.title.contains('='));
        assert!(!a.text.contains(" @-@ ") && !a.text.contains(" @,@ "));
        assert!(!a.text.contains(" @.@ "));
        // No heading markup is left (two test-split lines of text do start with "= ").
        assert!(a
            .text
            .lines()
            .all(|l| !(l.starts_with('=') && l.ends_with('='))));
        assert!(a.source.starts_with("wikitext:wiki."));
    }
    let lobster = &valid[0].text;
    assert!(lobster.contains("0.7 – 2.2 kg"));
    assert!(lobster.contains("red-tipped"));
    assert!(lobster.contains("<unk>"));
    assert!(lobster.lines().any(|l| l == "Description")); // a sub-heading's words
    let path = wiki("wikitext-2/wiki.test.tokens");
    assert_eq!(detect_format(&path).unwrap(), WikiFormat::WikiText);
}

#[test]
fn truncated_bz2_names_file_and_compressed_offset() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(wiki(DUMP)).unwrap();
    let path = dir.path().join("cut.xml.bz2");
    let cut = bytes.len() / 2;
    std::fs::write(&path, &bytes[..cut]).unwrap();
    let (before, err) = read_until_error(&path);
    assert!(
        before > 10 && before < 106,
        "{before} articles before the cut"
    );
    let msg = err.to_string();
    assert!(msg.starts_with(&path.display().to_string()), "{msg}");
    match err {
        WikiError::Bzip2 {
            compressed_offset,
            offset,
            ..
        } => {
            assert!(
                compressed_offset > 0 && compressed_offset <= cut as u64,
                "{msg}"
            );
            assert!(offset > 1_000_000, "{msg}");
        }
        other => panic!("expected a bzip2 error, got {other}"),
    }
    assert!(msg.contains("compressed byte"), "{msg}");
}

#[test]
fn corrupt_bz2_block_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = std::fs::read(wiki(DUMP)).unwrap();
    let mid = bytes.len() / 3;
    for b in &mut bytes[mid..mid + 64] {
        *b ^= 0x5A;
    }
    let path = dir.path().join("corrupt.xml.bz2");
    std::fs::write(&path, &bytes).unwrap();
    let (before, err) = read_until_error(&path);
    assert!(before < 106);
    assert!(matches!(err, WikiError::Bzip2 { .. }), "{err}");
    assert!(err.to_string().contains("corrupt.xml.bz2"));
}

#[test]
fn xml_cut_mid_page_names_offset_and_title() {
    let dir = tempfile::tempdir().unwrap();
    let xml = dump_xml();
    let page = find(&xml, b"<title>Alabama</title>", 0);
    let cut = page + 5_000;
    let path = dir.path().join("cut.xml");
    std::fs::write(&path, &xml[..cut]).unwrap();
    let (before, err) = read_until_error(&path);
    assert!(before > 0);
    let msg = err.to_string();
    match &err {
        WikiError::Xml { offset, title, .. } => {
            assert_eq!(*offset, cut as u64, "{msg}");
            assert_eq!(title.as_deref(), Some("Alabama"));
        }
        other => panic!("expected an XML error, got {other}"),
    }
    assert!(
        msg.contains("cut.xml") && msg.contains("unclosed <mediawiki> <page>"),
        "{msg}"
    );

    // The same cut, well compressed: the XML, not bzip2, is at fault.
    let bz_path = dir.path().join("cut-ok.xml.bz2");
    let mut enc = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::fast());
    enc.write_all(&xml[..cut]).unwrap();
    std::fs::write(&bz_path, enc.finish().unwrap()).unwrap();
    let (before_bz, err_bz) = read_until_error(&bz_path);
    assert_eq!(before_bz, before);
    assert!(
        matches!(err_bz, WikiError::Xml { offset, .. } if offset == cut as u64),
        "{err_bz}"
    );
}

/// A dump with the real header and first pages, then `tail`.
fn dump_with_tail(tail: &str) -> Vec<u8> {
    let xml = dump_xml();
    let second_page = find(&xml, b"<page>", find(&xml, b"<page>", 0) + 1);
    let mut out = xml[..second_page].to_vec();
    out.extend_from_slice(tail.as_bytes());
    out
}

#[test]
fn page_with_unclosed_tag_names_page_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = dump_with_tail(
        "<page><title>Broken page</title><ns>0</ns><id>1</id><revision>\
         <text xml:space=\"preserve\">Some text</revision></page></mediawiki>",
    );
    let at = find(&bytes, b"</revision></page></mediawiki>", 0);
    let path = dir.path().join("unclosed.xml");
    std::fs::write(&path, &bytes).unwrap();
    let (_, err) = read_until_error(&path);
    let msg = err.to_string();
    match &err {
        WikiError::Xml { offset, title, .. } => {
            assert_eq!(title.as_deref(), Some("Broken page"), "{msg}");
            assert!(
                *offset >= at as u64 - 1 && *offset <= at as u64 + 11,
                "{msg} (tag at {at})"
            );
        }
        other => panic!("expected an XML error, got {other}"),
    }
    assert!(
        msg.contains("unclosed.xml") && msg.contains("text"),
        "{msg}"
    );
}

#[test]
fn bad_entity_and_bad_utf8_in_dump() {
    let dir = tempfile::tempdir().unwrap();
    let entity = dump_with_tail(
        "<page><title>Entity</title><ns>0</ns><revision><text>a &bogus; b</text>\
         </revision></page></mediawiki>",
    );
    let path = dir.path().join("entity.xml");
    std::fs::write(&path, &entity).unwrap();
    let (_, err) = read_until_error(&path);
    assert!(
        matches!(&err, WikiError::Xml { title: Some(t), .. } if t == "Entity"),
        "{err}"
    );
    assert!(err.to_string().contains("bogus"), "{err}");

    let mut utf8 = dump_with_tail(
        "<page><title>Bytes</title><ns>0</ns><revision><text>a XX b</text>\
         </revision></page></mediawiki>",
    );
    let at = find(&utf8, b"XX", 0);
    utf8[at] = 0xFF;
    utf8[at + 1] = 0xFE;
    let path = dir.path().join("bytes.xml");
    std::fs::write(&path, &utf8).unwrap();
    let (_, err) = read_until_error(&path);
    let msg = err.to_string();
    assert!(
        matches!(&err, WikiError::Xml { title: Some(t), .. } if t == "Bytes"),
        "{msg}"
    );
    assert!(msg.contains("bytes.xml"), "{msg}");
}

#[test]
fn not_a_dump_or_empty_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.xml");
    std::fs::write(&path, "<html><body>hi</body></html>").unwrap();
    let err = load_articles(&path).unwrap_err();
    assert!(err.to_string().contains("not <mediawiki>"), "{err}");
    let path = dir.path().join("empty.xml");
    std::fs::write(&path, "").unwrap();
    let err = DumpReader::open(&path)
        .unwrap()
        .next()
        .unwrap()
        .unwrap_err();
    assert!(err.to_string().contains("no <mediawiki> root"), "{err}");
    let path = dir.path().join("notes.txt");
    std::fs::write(&path, "hello").unwrap();
    assert!(matches!(
        detect_format(&path),
        Err(WikiError::Format { .. })
    ));
    let missing = dir.path().join("missing.json");
    let err = load_articles(&missing).unwrap_err();
    assert!(matches!(err, WikiError::Io { .. }) && err.to_string().contains("missing.json"));
}

#[test]
fn invalid_json_names_line_column_and_byte() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(wiki("vital_articles_en.json")).unwrap();
    let path = dir.path().join("cut.json");
    std::fs::write(&path, &bytes[..100_000]).unwrap();
    let err = load_articles(&path).unwrap_err();
    let msg = err.to_string();
    assert!(msg.starts_with(&path.display().to_string()), "{msg}");
    match err {
        WikiError::Json { line, offset, .. } => {
            assert!(line > 100, "{msg}");
            assert!(offset > 90_000 && offset <= 100_000, "{msg}");
        }
        other => panic!("expected a JSON error, got {other}"),
    }

    let path = dir.path().join("shape.json");
    std::fs::write(
        &path,
        "{\n \"A\": {\"extract\": \"x\"},\n \"B\": {\"topic\": \"y\"}\n}",
    )
    .unwrap();
    let err = load_articles(&path).unwrap_err();
    assert!(matches!(err, WikiError::Json { line: 3, .. }), "{err}");
    assert!(err.to_string().contains("extract"), "{err}");

    let path = dir.path().join("utf8.json");
    let mut bad = b"{\n \"A\": {\"extract\": \"ab\"}\n}".to_vec();
    let at = find(&bad, b"ab", 0);
    bad[at] = 0xC3; // a lead byte without its continuation
    std::fs::write(&path, &bad).unwrap();
    let err = load_articles(&path).unwrap_err();
    assert!(matches!(err, WikiError::Json { line: 2, .. }), "{err}");
}

#[test]
fn invalid_utf8_in_wikitext_names_byte_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = std::fs::read(wiki("wikitext-2/wiki.valid.tokens")).unwrap();
    let at = (500_000..).find(|&i| bytes[i].is_ascii()).unwrap();
    let line = 1 + bytes[..at].iter().filter(|&&b| b == b'\n').count();
    bytes[at] = 0xFF;
    let path = dir.path().join("wiki.bad.tokens");
    std::fs::write(&path, &bytes).unwrap();
    let err = load_articles(&path).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("wiki.bad.tokens") && msg.contains(&format!("byte {at}")),
        "{msg}"
    );
    assert!(
        matches!(err, WikiError::Utf8 { line: l, .. } if l == line),
        "{msg}"
    );
}
