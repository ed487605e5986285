//! Wikipedia corpora: MediaWiki XML dumps, the vital-articles JSON and WikiText-2.
//!
//! [`load_articles`] looks at a file, decides which of the three formats it holds
//! ([`detect_format`]) and returns its articles as plain text. The format readers
//! live in the submodules: [`mediawiki`] streams `pages-articles` dumps (`.xml` or
//! `.xml.bz2`) and strips their markup with [`wikitext`], [`vital`] reads the
//! `{title: {title, extract, description, topic}}` JSON, and [`wikitext2`] splits
//! WikiText-2 token files into articles. Every failure is a [`WikiError`] naming
//! the file and the byte offset (or line) where reading stopped; nothing panics on
//! bad input.
//!
//! ```
//! use mechlab_corpora::wikipedia::{detect_format, load_articles, WikiFormat};
//!
//! let dir = std::env::temp_dir().join(format!("mechlab-wiki-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! let path = dir.join("tiny.tokens");
//! std::fs::write(&path, " = Lobster = \n\n A red @-@ blue <unk> .\n").unwrap();
//! assert_eq!(detect_format(&path).unwrap(), WikiFormat::WikiText);
//! let articles = load_articles(&path).unwrap();
//! assert_eq!(articles[0].title, "Lobster");
//! assert_eq!(articles[0].text, "A red-blue <unk> .");
//! std::fs::remove_dir_all(&dir).unwrap();
//! ```

pub mod mediawiki;
pub mod vital;
pub mod wikitext;
pub mod wikitext2;

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::article::Article;
use crate::error::{excerpt, MESSAGE_CHARS, VALUE_CHARS};

/// Everything that can go wrong reading a Wikipedia file.
#[derive(Debug, thiserror::Error)]
pub enum WikiError {
    /// The file could not be opened or read.
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The bzip2 stream is cut short or corrupt.
    #[error(
        "{}: corrupt or truncated bzip2 stream at compressed byte {compressed_offset} \
         (decompressed byte {offset}){}: {}",
        path.display(), in_page(title), excerpt(message, MESSAGE_CHARS)
    )]
    Bzip2 {
        path: PathBuf,
        compressed_offset: u64,
        offset: u64,
        title: Option<String>,
        message: String,
    },
    /// The dump is not well-formed XML or not a MediaWiki dump.
    #[error("{}: malformed dump XML at byte {offset}{}: {}", path.display(), in_page(title), excerpt(message, MESSAGE_CHARS))]
    Xml {
        path: PathBuf,
        offset: u64,
        title: Option<String>,
        message: String,
    },
    /// The JSON file does not parse or does not have the expected shape.
    #[error("{}: invalid JSON at line {line}, column {column} (byte {offset}): {}", path.display(), excerpt(message, MESSAGE_CHARS))]
    Json {
        path: PathBuf,
        line: usize,
        column: usize,
        offset: u64,
        message: String,
    },
    /// A text file is not valid UTF-8.
    #[error("{}: invalid UTF-8 at byte {offset} (line {line})", path.display())]
    Utf8 {
        path: PathBuf,
        offset: u64,
        line: usize,
    },
    /// The file's format could not be recognised.
    #[error("{}: {}", path.display(), excerpt(message, MESSAGE_CHARS))]
    Format { path: PathBuf, message: String },
}

fn in_page(title: &Option<String>) -> String {
    match title {
        Some(t) => format!(" in page \"{}\"", excerpt(t, VALUE_CHARS)),
        None => String::new(),
    }
}

impl WikiError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        WikiError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// Invalid UTF-8 in `bytes` (read from `path`) at `offset`, with the 1-based line.
    pub(crate) fn utf8(path: &Path, bytes: &[u8], offset: usize) -> Self {
        let line = 1 + bytes[..offset.min(bytes.len())]
            .iter()
            .filter(|&&b| b == b'\n')
            .count();
        WikiError::Utf8 {
            path: path.to_path_buf(),
            offset: offset as u64,
            line,
        }
    }
}

/// The file formats [`load_articles`] understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WikiFormat {
    /// MediaWiki `pages-articles` XML dump, uncompressed.
    MediaWikiXml,
    /// MediaWiki XML dump compressed with bzip2 (single- or multi-stream).
    MediaWikiXmlBz2,
    /// `{title: {title, extract, description, topic}}` JSON (vital articles).
    VitalJson,
    /// WikiText-2/103 tokens or raw file (` = Title = ` headings).
    WikiText,
}

/// Decides a file's format from its first bytes (bzip2 magic `BZh`, `<`, `{`, `=`),
/// falling back to the extension (`.bz2`, `.xml`, `.json`, `.tokens`, `.raw`).
pub fn detect_format(path: &Path) -> Result<WikiFormat, WikiError> {
    let mut head = Vec::with_capacity(512);
    File::open(path)
        .and_then(|f| f.take(512).read_to_end(&mut head))
        .map_err(|e| WikiError::io(path, e))?;
    if head.starts_with(b"BZh") {
        return Ok(WikiFormat::MediaWikiXmlBz2);
    }
    let body = head.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&head);
    match body.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'<') => return Ok(WikiFormat::MediaWikiXml),
        Some(b'{') => return Ok(WikiFormat::VitalJson),
        Some(b'=') => return Ok(WikiFormat::WikiText),
        _ => {}
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    if name.ends_with(".bz2") {
        Ok(WikiFormat::MediaWikiXmlBz2)
    } else if name.ends_with(".xml") {
        Ok(WikiFormat::MediaWikiXml)
    } else if name.ends_with(".json") {
        Ok(WikiFormat::VitalJson)
    } else if name.ends_with(".tokens") || name.ends_with(".raw") {
        Ok(WikiFormat::WikiText)
    } else {
        Err(WikiError::Format {
            path: path.to_path_buf(),
            message: "not a MediaWiki dump, vital-articles JSON or WikiText file".to_string(),
        })
    }
}

/// Loads every article of a Wikipedia file, whatever its format (see [`detect_format`]).
/// Dump pages come back with their markup stripped; redirects and pages outside
/// the main namespace are skipped.
pub fn load_articles(path: &Path) -> Result<Vec<Article>, WikiError> {
    match detect_format(path)? {
        WikiFormat::MediaWikiXml | WikiFormat::MediaWikiXmlBz2 => {
            mediawiki::DumpReader::open(path)?.collect()
        }
        WikiFormat::VitalJson => vital::load_vital(path),
        WikiFormat::WikiText => wikitext2::load_wikitext2(path),
    }
}

/// `"<format>:<file name>"`, the [`Article::source`] of articles read from `path`.
pub(crate) fn source_tag(format: &str, path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    format!("{format}:{name}")
}

/// The shared data root: `$MECHLAB_DATA` if set, else `shared/data` next to the
/// repository. Wikipedia files are under its `wikipedia/` folder.
pub fn data_root() -> PathBuf {
    match std::env::var_os("MECHLAB_DATA") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data")),
    }
}
