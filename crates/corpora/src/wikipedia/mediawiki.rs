//! Streaming reader for MediaWiki `pages-articles` XML dumps (`.xml` or `.xml.bz2`).
//!
//! [`DumpReader`] pulls one `<page>` at a time through `quick-xml`'s event reader
//! (never a DOM), so memory stays at one page whatever the dump's size; bzip2
//! input, single- or multi-stream as Wikimedia publishes it, is decompressed on
//! the fly. Redirects (a `<redirect/>` element or text starting `#REDIRECT`) and
//! pages outside the main namespace (`<ns>` other than 0) are skipped and counted
//! in [`DumpStats`]; the other pages come out as [`Article`]s whose text is the
//! last revision's wikitext with its markup stripped ([`strip_wikitext`]), or kept
//! with [`DumpReader::keep_markup`]. A truncated or corrupt bzip2 stream, bad XML,
//! mismatched or missing closing tags end the iteration with a [`WikiError`] that
//! names the file, the byte offset (in the decompressed XML, plus the compressed
//! offset for `.bz2`) and the page title when one was read.
//!
//! ```
//! use mechlab_corpora::wikipedia::mediawiki::DumpReader;
//!
//! let xml = r#"<mediawiki><siteinfo><sitename>W</sitename></siteinfo>
//!   <page><title>Lobster</title><ns>0</ns><revision>
//!     <text xml:space="preserve">'''Lobsters''' are [[crustacean]]s &amp; food.</text>
//!   </revision></page>
//!   <page><title>Lobsters</title><ns>0</ns><redirect title="Lobster" />
//!     <revision><text>#REDIRECT [[Lobster]]</text></revision></page>
//!   <page><title>Talk:Lobster</title><ns>1</ns><revision><text>hi</text></revision></page>
//! </mediawiki>"#;
//! let mut dump = DumpReader::from_reader(xml.as_bytes(), "inline.xml");
//! let articles: Vec<_> = dump.by_ref().collect::<Result<_, _>>().unwrap();
//! assert_eq!(articles.len(), 1);
//! assert_eq!(articles[0].text, "Lobsters are crustaceans & food.");
//! let stats = dump.stats();
//! assert_eq!((stats.pages, stats.redirects, stats.other_namespaces), (3, 1, 1));
//! ```

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use quick_xml::events::Event;
use quick_xml::Reader;

use super::wikitext::strip_wikitext;
use super::{source_tag, WikiError};
use crate::article::Article;

/// What a [`DumpReader`] has seen so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DumpStats {
    /// `<page>` elements read to their end.
    pub pages: usize,
    /// Pages returned as articles.
    pub articles: usize,
    /// Redirect pages skipped (whatever their namespace).
    pub redirects: usize,
    /// Non-redirect pages skipped because `<ns>` was not 0.
    pub other_namespaces: usize,
}

/// Which text-bearing child of `<page>` is being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    None,
    Title,
    Ns,
    Text,
}

/// Outcome of one XML event.
enum Step {
    Continue,
    Article(Article),
    Eof,
}

/// The page being read.
#[derive(Debug, Default)]
struct PageState {
    title: String,
    ns: String,
    redirect: bool,
    text: String,
}

/// Counts the bytes a `BufRead` hands on (consumes), i.e. the compressed offset
/// the bzip2 decoder has reached.
struct CountingBufRead<R> {
    inner: R,
    consumed: Arc<AtomicU64>,
}

impl<R: BufRead> Read for CountingBufRead<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.consumed.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

impl<R: BufRead> BufRead for CountingBufRead<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.inner.fill_buf()
    }
    fn consume(&mut self, amt: usize) {
        self.consumed.fetch_add(amt as u64, Ordering::Relaxed);
        self.inner.consume(amt);
    }
}

/// Iterator over the main-namespace, non-redirect pages of a MediaWiki XML dump.
/// After the first error it yields nothing more.
pub struct DumpReader {
    path: PathBuf,
    source: String,
    xml: Reader<Box<dyn BufRead + Send>>,
    /// Compressed bytes consumed, for `.bz2` input.
    compressed: Option<Arc<AtomicU64>>,
    buf: Vec<u8>,
    /// Names of the open elements, outermost first.
    stack: Vec<Vec<u8>>,
    page: Option<PageState>,
    field: Field,
    stats: DumpStats,
    keep_markup: bool,
    seen_root: bool,
    done: bool,
}

impl DumpReader {
    /// Opens a dump; input starting with the bzip2 magic `BZh` is decompressed.
    pub fn open(path: &Path) -> Result<Self, WikiError> {
        let file = File::open(path).map_err(|e| WikiError::io(path, e))?;
        let mut raw = BufReader::with_capacity(1 << 16, file);
        let bz2 = raw
            .fill_buf()
            .map_err(|e| WikiError::io(path, e))?
            .starts_with(b"BZh");
        let mut reader = if bz2 {
            let consumed = Arc::new(AtomicU64::new(0));
            let counting = CountingBufRead {
                inner: raw,
                consumed: Arc::clone(&consumed),
            };
            let decoder = bzip2::bufread::MultiBzDecoder::new(counting);
            let mut r = Self::from_reader(BufReader::with_capacity(1 << 16, decoder), "");
            r.compressed = Some(consumed);
            r
        } else {
            Self::from_reader(raw, "")
        };
        reader.path = path.to_path_buf();
        reader.source = source_tag("mediawiki", path);
        Ok(reader)
    }

    /// Reads an uncompressed dump from any buffered reader; `name` stands for the
    /// file in errors and in [`Article::source`].
    pub fn from_reader<R: BufRead + Send + 'static>(reader: R, name: &str) -> Self {
        let mut xml = Reader::from_reader(Box::new(reader) as Box<dyn BufRead + Send>);
        let config = xml.config_mut();
        config.check_end_names = true;
        config.expand_empty_elements = false;
        DumpReader {
            path: PathBuf::from(name),
            source: format!("mediawiki:{name}"),
            xml,
            compressed: None,
            buf: Vec::with_capacity(1 << 16),
            stack: Vec::new(),
            page: None,
            field: Field::None,
            stats: DumpStats::default(),
            keep_markup: false,
            seen_root: false,
            done: false,
        }
    }

    /// Keep the raw wikitext instead of stripping its markup.
    pub fn keep_markup(mut self, keep: bool) -> Self {
        self.keep_markup = keep;
        self
    }

    /// Counts of pages read, returned and skipped so far.
    pub fn stats(&self) -> DumpStats {
        self.stats
    }

    fn current_title(&self) -> Option<String> {
        self.page
            .as_ref()
            .filter(|p| !p.title.is_empty())
            .map(|p| p.title.clone())
    }

    fn xml_error(&self, offset: u64, message: String) -> WikiError {
        WikiError::Xml {
            path: self.path.clone(),
            offset,
            title: self.current_title(),
            message,
        }
    }

    /// Turns a `quick-xml` error into a [`WikiError`]; read errors of a `.bz2`
    /// input come from the decompressor.
    fn convert_error(&self, err: quick_xml::Error) -> WikiError {
        match (err, &self.compressed) {
            (quick_xml::Error::Io(io_err), Some(consumed)) => WikiError::Bzip2 {
                path: self.path.clone(),
                compressed_offset: consumed.load(Ordering::Relaxed),
                offset: self.xml.buffer_position(),
                title: self.current_title(),
                message: io_err.to_string(),
            },
            (quick_xml::Error::Io(io_err), None) => WikiError::Io {
                path: self.path.clone(),
                source: io::Error::new(io_err.kind(), io_err.to_string()),
            },
            (other, _) => self.xml_error(self.xml.error_position(), other.to_string()),
        }
    }

    /// Path of element names below the root, e.g. `[b"page", b"revision"]`.
    fn inside(&self, path: &[&[u8]]) -> bool {
        self.stack.len() == path.len() + 1 && self.stack[1..].iter().zip(path).all(|(a, b)| a == b)
    }

    fn append(&mut self, s: &str) {
        if let Some(page) = self.page.as_mut() {
            match self.field {
                Field::Title => page.title.push_str(s),
                Field::Ns => page.ns.push_str(s),
                Field::Text => page.text.push_str(s),
                Field::None => {}
            }
        }
    }

    /// Handles an opening tag (or an empty element when `empty`).
    fn open_element(&mut self, name: &[u8], empty: bool) -> Result<(), WikiError> {
        if !self.seen_root {
            if name != b"mediawiki" {
                let msg = format!(
                    "root element is <{}>, not <mediawiki>",
                    String::from_utf8_lossy(name)
                );
                return Err(self.xml_error(self.xml.buffer_position(), msg));
            }
            self.seen_root = true;
        } else if self.stack.len() == 1 && name == b"page" {
            self.page = Some(PageState::default());
        } else if self.page.is_some() {
            if self.inside(&[b"page"]) && name == b"redirect" {
                if let Some(p) = self.page.as_mut() {
                    p.redirect = true;
                }
            } else if self.inside(&[b"page"]) && name == b"title" {
                self.field = Field::Title;
            } else if self.inside(&[b"page"]) && name == b"ns" {
                self.field = Field::Ns;
            } else if self.inside(&[b"page", b"revision"]) && name == b"text" {
                // Full-history dumps hold several revisions: keep the last.
                if let Some(p) = self.page.as_mut() {
                    p.text.clear();
                }
                self.field = Field::Text;
            }
        }
        if empty {
            self.field = Field::None;
        } else {
            self.stack.push(name.to_vec());
        }
        Ok(())
    }

    /// Handles a closing tag; returns the finished page's article if it is kept.
    fn close_element(&mut self) -> Result<Option<Article>, WikiError> {
        let name = self.stack.pop().unwrap_or_default();
        self.field = Field::None;
        if name != b"page" || self.stack.len() != 1 {
            return Ok(None);
        }
        let Some(page) = self.page.take() else {
            return Ok(None);
        };
        self.stats.pages += 1;
        let ns = page.ns.trim();
        let ns: i64 = if ns.is_empty() {
            0
        } else {
            ns.parse().map_err(|_| WikiError::Xml {
                path: self.path.clone(),
                offset: self.xml.buffer_position(),
                title: Some(page.title.clone()),
                message: format!("<ns> is {ns:?}, not an integer"),
            })?
        };
        let head = page.text.trim_start();
        let redirect_text = head
            .as_bytes()
            .get(..9)
            .is_some_and(|h| h.eq_ignore_ascii_case(b"#redirect"));
        if page.redirect || redirect_text {
            self.stats.redirects += 1;
            return Ok(None);
        }
        if ns != 0 {
            self.stats.other_namespaces += 1;
            return Ok(None);
        }
        self.stats.articles += 1;
        let text = if self.keep_markup {
            page.text
        } else {
            strip_wikitext(&page.text)
        };
        Ok(Some(Article {
            title: page.title,
            text,
            topic: None,
            source: self.source.clone(),
        }))
    }

    /// Reads events until the next kept page ends (`Some`) or the dump ends (`None`).
    fn next_article(&mut self) -> Result<Option<Article>, WikiError> {
        loop {
            // The event borrows the buffer, the handlers borrow `self`.
            let mut buf = std::mem::take(&mut self.buf);
            buf.clear();
            let step = match self.xml.read_event_into(&mut buf) {
                Ok(Event::Eof) => self.finish().map(|()| Step::Eof),
                Ok(event) => self.handle(event),
                Err(e) => Err(self.convert_error(e)),
            };
            self.buf = buf;
            match step? {
                Step::Article(article) => return Ok(Some(article)),
                Step::Eof => return Ok(None),
                Step::Continue => {}
            }
        }
    }

    fn handle(&mut self, event: Event<'_>) -> Result<Step, WikiError> {
        match event {
            Event::Start(e) => self.open_element(e.local_name().as_ref(), false)?,
            Event::Empty(e) => self.open_element(e.local_name().as_ref(), true)?,
            Event::End(_) => {
                if let Some(article) = self.close_element()? {
                    return Ok(Step::Article(article));
                }
            }
            Event::Text(t) if self.field != Field::None => {
                let text = t.xml10_content().map_err(|e| {
                    self.xml_error(self.xml.buffer_position(), format!("bad text: {e}"))
                })?;
                self.append(&text);
            }
            Event::CData(t) if self.field != Field::None => {
                let text = t.decode().map_err(|e| {
                    self.xml_error(self.xml.buffer_position(), format!("bad CDATA: {e}"))
                })?;
                self.append(&text);
            }
            Event::GeneralRef(r) if self.field != Field::None => {
                let resolved = match r.resolve_char_ref() {
                    Ok(Some(c)) => Some(c),
                    Ok(None) => match r.as_ref() {
                        b"lt" => Some('<'),
                        b"gt" => Some('>'),
                        b"amp" => Some('&'),
                        b"quot" => Some('"'),
                        b"apos" => Some('\''),
                        _ => None,
                    },
                    Err(_) => None,
                };
                let Some(c) = resolved else {
                    let msg = format!("unknown entity &{};", String::from_utf8_lossy(&r));
                    return Err(self.xml_error(self.xml.buffer_position(), msg));
                };
                let mut tmp = [0u8; 4];
                self.append(c.encode_utf8(&mut tmp));
            }
            _ => {}
        }
        Ok(Step::Continue)
    }

    /// At the end of input: every element must have been closed.
    fn finish(&mut self) -> Result<(), WikiError> {
        let offset = self.xml.buffer_position();
        if !self.seen_root {
            return Err(self.xml_error(offset, "no <mediawiki> root element".to_string()));
        }
        if !self.stack.is_empty() {
            let open: Vec<String> = self
                .stack
                .iter()
                .map(|n| format!("<{}>", String::from_utf8_lossy(n)))
                .collect();
            let msg = format!(
                "unexpected end of input (truncated dump?) with unclosed {}",
                open.join(" ")
            );
            return Err(self.xml_error(offset, msg));
        }
        Ok(())
    }
}

impl Iterator for DumpReader {
    type Item = Result<Article, WikiError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.next_article() {
            Ok(Some(article)) => Some(Ok(article)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}
