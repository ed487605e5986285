//! One document of a text corpus: a titled article with an optional topic label.
//!
//! Every Wikipedia loader in this crate (MediaWiki dumps, the vital-articles JSON,
//! WikiText-2 token files) returns [`Article`]s, so experiments can switch corpora
//! without caring where the text came from. `topic` is the gold label where the
//! corpus has one (the vital articles' 12 topics) and `None` elsewhere; `source`
//! names the loader's format and the file the article was read from.
//!
//! ```
//! use mechlab_corpora::article::{topic_counts, Article};
//!
//! let a = Article::new("Lobster", "Lobsters are crustaceans.", Some("Biology"), "example");
//! let b = Article::new("Rome", "Rome is a city.", None, "example");
//! let counts = topic_counts(&[a.clone(), b]);
//! assert_eq!(counts.get("Biology"), Some(&1));
//! assert_eq!(counts.len(), 1);
//! assert_eq!(a.title, "Lobster");
//! ```

use std::collections::BTreeMap;

/// A titled document: plain text (markup already removed by the loader),
/// an optional topic label and where it came from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Article {
    /// Page title, e.g. `"Anarchism"`.
    pub title: String,
    /// Plain text: paragraphs separated by newlines.
    pub text: String,
    /// Gold topic label where the corpus provides one.
    pub topic: Option<String>,
    /// Format tag and file name, e.g. `"mediawiki:enwiki-pages-articles-sample.xml.bz2"`.
    pub source: String,
}

impl Article {
    /// Builds an article from borrowed parts.
    pub fn new(title: &str, text: &str, topic: Option<&str>, source: &str) -> Self {
        Article {
            title: title.to_string(),
            text: text.to_string(),
            topic: topic.map(str::to_string),
            source: source.to_string(),
        }
    }
}

/// Number of articles per topic label (articles without a topic are not counted),
/// in label order.
pub fn topic_counts(articles: &[Article]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for topic in articles.iter().filter_map(|a| a.topic.as_ref()) {
        *counts.entry(topic.clone()).or_insert(0) += 1;
    }
    counts
}
