//! The review loaders on the real shared files (`../shared/data`, or
//! `$MECHLAB_DATA`): counts against the publishers' numbers, plus timings.

use std::path::PathBuf;
use std::time::Instant;

use mechlab_corpora::{
    data_dir, detect_format, imdb, load_reviews, yelp, LoadOptions, Part, ReviewFormat, Tokenizer,
    Vocab, PAD,
};

fn data(rel: &str) -> PathBuf {
    let dir = data_dir().expect("the shared data folder (../shared/data or $MECHLAB_DATA)");
    dir.join(rel)
}

#[test]
fn imdb_archive_has_25k_train_and_25k_test_balanced() {
    let t = Instant::now();
    let (split, stats) = load_reviews(data("imdb"), &LoadOptions::default()).unwrap();
    eprintln!("IMDB archive: {} docs in {:.2?}", stats.kept, t.elapsed());
    let c = split.counts();
    assert_eq!(
        (c.train_pos, c.train_neg, c.test_pos, c.test_neg),
        (12_500, 12_500, 12_500, 12_500)
    );
    assert_eq!(
        (stats.read, stats.kept, stats.skipped, stats.neutral),
        (50_000, 50_000, 0, 0)
    );
    // val/ belongs to train: 2 500 + 2 500 of them.
    assert_eq!(
        split
            .train
            .iter()
            .filter(|d| d.source.contains("aclImdb/val/"))
            .count(),
        5_000
    );
    assert!(split
        .test
        .iter()
        .all(|d| d.source.contains("aclImdb/test/")));
    for d in split.train.iter().chain(&split.test) {
        let r = d.rating.unwrap();
        assert!(
            if d.label > 0 {
                (7.0..=10.0).contains(&r)
            } else {
                (1.0..=4.0).contains(&r)
            },
            "{}",
            d.source
        );
    }
    // Sorted by (subset, label, id): train/neg/0_3.txt is the first review.
    assert!(
        split.train[0].source.ends_with("aclImdb/train/neg/0_3.txt"),
        "{}",
        split.train[0].source
    );
    assert!(
        split.train.iter().any(|d| d.text.contains("<br />")),
        "markup is left for the tokenizer"
    );
}

#[test]
fn imdb_bounded_read_feeds_tokenizer_and_vocab() {
    let path = data("imdb/aclImdb_text.tar.xz");
    assert_eq!(detect_format(&path).unwrap().0, ReviewFormat::ImdbArchive);
    let (split, stats) =
        imdb::load_imdb_archive(&path, &LoadOptions::default().with_limit(2_000)).unwrap();
    assert_eq!(stats.kept, 2_000);
    let tok = Tokenizer::default();
    let docs: Vec<Vec<String>> = split
        .train
        .iter()
        .chain(&split.test)
        .map(|d| tok.tokenize(&d.text))
        .collect();
    assert!(docs
        .iter()
        .flatten()
        .all(|t| t != "br" && t != "<" && !t.chars().any(char::is_uppercase)));
    let counts = Vocab::count_tokens(&docs);
    let v = Vocab::build(&counts, 2, Some(5_000));
    assert_eq!(v.len(), 5_000);
    assert_eq!(&v.words()[2..5], [".", "the", ","]);
    assert_eq!(
        v,
        Vocab::build(&counts, 2, Some(5_000)),
        "same counts, same ids"
    );
    let (ids, len) = v.encode(&docs[0], 512);
    assert_eq!((ids.len(), len), (512, docs[0].len().min(512)));
    assert!(ids[len..].iter().all(|&i| i == PAD));
}

#[test]
fn yelp_stars_csv_counts_match_the_readme() {
    let t = Instant::now();
    let (split, stats) = load_reviews(data("yelp"), &LoadOptions::default()).unwrap();
    eprintln!("Yelp stars CSV: {} docs in {:.2?}", stats.kept, t.elapsed());
    let c = split.counts();
    // README: 2,326 neg / 6,613 pos of 10,000; dev is train, test is test.
    assert_eq!(
        (c.train_neg + c.test_neg, c.train_pos + c.test_pos),
        (2_326, 6_613)
    );
    assert_eq!(
        (c.train_neg, c.train_pos, c.test_neg, c.test_pos),
        (1_185, 3_299, 1_141, 3_314)
    );
    assert_eq!(
        (stats.read, stats.neutral, stats.skipped),
        (10_000, 1_061, 0)
    );
    let ratings: Vec<f32> = split.train.iter().map(|d| d.rating.unwrap()).collect();
    assert!(ratings.iter().all(|r| [1.0, 2.0, 4.0, 5.0].contains(r)));
    assert_eq!(
        detect_format(&data("yelp/yelp_reviews_test.csv"))
            .unwrap()
            .0,
        ReviewFormat::YelpStarsCsv
    );
}

#[test]
fn yelp_sentence_files_have_190153_lines() {
    let t = Instant::now();
    let (split, stats) = yelp::load_yelp_sentences(&data("yelp"), &LoadOptions::default()).unwrap();
    eprintln!("Yelp sentences: {} docs in {:.2?}", stats.kept, t.elapsed());
    let c = split.counts();
    assert_eq!(stats.kept, 190_153);
    assert_eq!(
        (c.train_neg, c.train_pos, c.test_neg, c.test_pos),
        (25_278, 38_205, 50_278, 76_392)
    );
    let (one, _) = load_reviews(data("yelp/sentiment.test.0"), &LoadOptions::default()).unwrap();
    assert_eq!((one.train.len(), one.test.len()), (0, 50_278));
    assert_eq!(yelp::part_of(&data("yelp/sentiment.dev.1")), Part::Train);
}

#[test]
fn the_data_root_is_not_one_corpus() {
    let e = load_reviews(data_dir().unwrap(), &LoadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("try its subfolder imdb or yelp"), "{e}");
}
