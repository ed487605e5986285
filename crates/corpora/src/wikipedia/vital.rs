//! Loader for the vital-articles JSON: lead sections with a topic label.
//!
//! The file is one JSON object mapping each title to
//! `{"title", "extract", "description", "topic"}`; [`load_vital`] turns every entry
//! into an [`Article`] whose text is `extract` and whose topic is `topic` (the
//! shared copy has 10 033 Level-4 vital articles under 12 topic labels). Articles
//! come back sorted by title, whatever the key order in the file. A file that is
//! not valid JSON, not valid UTF-8, or whose entries lack `extract` gives a
//! [`WikiError::Json`] with the line, column and byte offset.
//!
//! ```
//! use mechlab_corpora::wikipedia::vital::parse_vital;
//!
//! let json = br#"{"Rome": {"title": "Rome", "extract": "Rome is a city.",
//!                  "description": "Capital of Italy", "topic": "Geography"}}"#;
//! let articles = parse_vital(json, "inline.json".as_ref()).unwrap();
//! assert_eq!(articles[0].title, "Rome");
//! assert_eq!(articles[0].topic.as_deref(), Some("Geography"));
//!
//! let err = parse_vital(b"{\n  \"Rome\": {\"extract\": 3}\n}", "bad.json".as_ref()).unwrap_err();
//! assert!(err.to_string().starts_with("bad.json: invalid JSON at line 2"));
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::{source_tag, WikiError};
use crate::article::Article;

/// One entry of the JSON object.
#[derive(Debug, Deserialize)]
struct VitalEntry {
    #[serde(default)]
    title: Option<String>,
    extract: String,
    #[serde(default)]
    topic: Option<String>,
}

/// Reads the vital-articles JSON file at `path`.
pub fn load_vital(path: &Path) -> Result<Vec<Article>, WikiError> {
    let bytes = std::fs::read(path).map_err(|e| WikiError::io(path, e))?;
    parse_vital(&bytes, path)
}

/// Parses vital-articles JSON held in memory; `path` names it in errors.
pub fn parse_vital(bytes: &[u8], path: &Path) -> Result<Vec<Article>, WikiError> {
    let body = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let entries: BTreeMap<String, VitalEntry> =
        serde_json::from_slice(body).map_err(|e| json_error(path, body, &e))?;
    let source = source_tag("vital", path);
    Ok(entries
        .into_iter()
        .map(|(key, entry)| Article {
            title: entry.title.filter(|t| !t.is_empty()).unwrap_or(key),
            text: entry.extract.trim().to_string(),
            topic: entry.topic.filter(|t| !t.is_empty()),
            source: source.clone(),
        })
        .collect())
}

/// A JSON error with its line and column turned into a byte offset too.
fn json_error(path: &Path, bytes: &[u8], err: &serde_json::Error) -> WikiError {
    let (line, column) = (err.line(), err.column());
    let line_start: usize = bytes
        .split_inclusive(|&b| b == b'\n')
        .take(line.saturating_sub(1))
        .map(<[u8]>::len)
        .sum();
    WikiError::Json {
        path: path.to_path_buf(),
        line,
        column,
        offset: (line_start + column.saturating_sub(1)) as u64,
        message: message_without_position(err),
    }
}

/// serde_json's message without the " at line L column C" it appends.
fn message_without_position(err: &serde_json::Error) -> String {
    let full = err.to_string();
    let suffix = format!(" at line {} column {}", err.line(), err.column());
    full.strip_suffix(&suffix).unwrap_or(&full).to_string()
}
