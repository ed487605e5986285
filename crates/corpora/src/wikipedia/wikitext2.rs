//! Loader for WikiText-2/103 files: one article per ` = Title = ` heading.
//!
//! WikiText files (Merity et al. 2016) are the concatenated articles of a split,
//! one paragraph per line, each article opened by a level-1 heading ` = Title = `
//! and divided by sub-headings ` = = Section = = ` (or deeper). The tokenised
//! `.tokens` files replace rare words by `<unk>` and mark in-number and in-word
//! punctuation as ` @-@ `, ` @,@ `, ` @.@ `. [`parse_wikitext2`] starts a new
//! article at each level-1 heading only, keeps a sub-heading's words as a line of
//! the text, joins the `@x@` tokens back (`red @-@ blue` becomes `red-blue`,
//! `1 @,@ 000` becomes `1,000`) and keeps `<unk>` as a token; the remaining
//! tokenisation (spaces around punctuation) is left as it is. Lines before the
//! first heading, if any, form an article with an empty title. Invalid UTF-8 is a
//! [`WikiError::Utf8`] naming the byte offset and line.
//!
//! ```
//! use mechlab_corpora::wikipedia::wikitext2::parse_wikitext2;
//!
//! let text = " = Lobster = \n\n It is 1 @,@ 000 g .\n\n = = Diet = = \n\n It eats <unk> .\n = Rome = \n\n A city .\n";
//! let articles = parse_wikitext2(text, "wikitext:inline");
//! assert_eq!(articles.len(), 2);
//! assert_eq!(articles[0].title, "Lobster");
//! assert_eq!(articles[0].text, "It is 1,000 g .\nDiet\nIt eats <unk> .");
//! assert_eq!(articles[1].text, "A city .");
//! ```

use std::path::Path;

use super::{source_tag, WikiError};
use crate::article::Article;

/// Reads a WikiText tokens (or raw) file and splits it into articles.
pub fn load_wikitext2(path: &Path) -> Result<Vec<Article>, WikiError> {
    let bytes = std::fs::read(path).map_err(|e| WikiError::io(path, e))?;
    let text =
        std::str::from_utf8(&bytes).map_err(|e| WikiError::utf8(path, &bytes, e.valid_up_to()))?;
    Ok(parse_wikitext2(text, &source_tag("wikitext", path)))
}

/// Splits WikiText content into articles; `source` becomes [`Article::source`].
pub fn parse_wikitext2(text: &str, source: &str) -> Vec<Article> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut articles = Vec::new();
    let mut current: Option<Article> = None;
    for line in text.lines() {
        if let Some(title) = heading(line, 1) {
            articles.extend(current.take());
            current = Some(Article::new(&detokenize(title), "", None, source));
            continue;
        }
        let line = (2..=6)
            .find_map(|level| heading(line, level))
            .unwrap_or(line.trim());
        let line = detokenize(line);
        if line.is_empty() {
            continue;
        }
        let article = current.get_or_insert_with(|| Article::new("", "", None, source));
        if !article.text.is_empty() {
            article.text.push('\n');
        }
        article.text.push_str(&line);
    }
    articles.extend(current);
    articles
}

/// The title of a heading of exactly `level` (`= = x = =` is level 2).
fn heading(line: &str, level: usize) -> Option<&str> {
    let mut rest = line.trim();
    for _ in 0..level {
        rest = rest.strip_prefix('=')?.strip_suffix('=')?.trim();
    }
    if rest.is_empty() || rest.starts_with('=') || rest.ends_with('=') {
        return None;
    }
    Some(rest)
}

/// Joins ` @-@ `, ` @,@ ` and ` @.@ ` back into `-`, `,` and `.`.
pub fn detokenize(line: &str) -> String {
    line.replace(" @-@ ", "-")
        .replace(" @,@ ", ",")
        .replace(" @.@ ", ".")
}
