//! A strict RFC 4180 CSV reader that reports where a row goes wrong and resyncs.
//!
//! The `csv` crate is lenient: an unclosed quote silently swallows the following
//! rows until the next `"` and yields one merged row with the right number of
//! fields and the wrong label. This reader refuses that: a `"` inside an unquoted
//! field, a character after a closing quote, or end of input inside quotes is an
//! error naming the line (1-based) and byte (0-based) where the record started.
//! After an error it resumes at the line after the bad record's first line, so a
//! loader skipping bad records loses only that one. Fields are bytes (the caller
//! checks UTF-8 and can name the byte); `""` inside quotes is one `"`; records end
//! at `\n`, `\r\n` or `\r`; blank lines are skipped.
//!
//! ```
//! use mechlab_corpora::strict_csv::StrictCsv;
//! // two rows, the second with an unclosed quote:
//! let mut r = StrictCsv::new(&b"a,\"b\"\n\"c,d\n"[..]);
//! assert_eq!(r.next_record().unwrap().unwrap().fields, vec![b"a".to_vec(), b"b".to_vec()]);
//! assert!(r.next_record().unwrap().is_err());
//! assert!(r.next_record().is_none());
//! ```

use std::io::{self, Read};
use std::path::Path;

use crate::archive::open_decompressed;
use crate::error::{text_from_bytes, CorpusError, Location};
use crate::load::{Collector, Record};

/// One parsed row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsvRecord {
    pub fields: Vec<Vec<u8>>,
    /// Absolute byte offset of each field's first content byte.
    pub field_bytes: Vec<u64>,
    /// 1-based line where the record starts.
    pub line: u64,
    /// 0-based byte offset where the record starts.
    pub byte: u64,
}

/// Why a row could not be read.
#[derive(Debug)]
pub enum CsvError {
    Io(io::Error),
    /// A syntax error in the record starting at `line`/`byte`.
    Syntax {
        line: u64,
        byte: u64,
        reason: String,
    },
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    StartField,
    Unquoted,
    Quoted,
    QuoteInQuoted,
}

pub struct StrictCsv<R> {
    input: R,
    buf: Vec<u8>,
    pos: usize,
    eof: bool,
    /// Next line number (1-based) and byte offset of `buf[pos]`.
    line: u64,
    byte: u64,
    /// Bytes of the current record, kept for resyncing after an error.
    raw: Vec<u8>,
}

const CHUNK: usize = 1 << 16;

impl<R: Read> StrictCsv<R> {
    pub fn new(input: R) -> Self {
        StrictCsv {
            input,
            buf: Vec::new(),
            pos: 0,
            eof: false,
            line: 1,
            byte: 0,
            raw: Vec::new(),
        }
    }

    fn fill(&mut self) -> io::Result<bool> {
        if self.pos < self.buf.len() {
            return Ok(true);
        }
        if self.eof {
            return Ok(false);
        }
        self.buf.resize(CHUNK, 0);
        self.pos = 0;
        loop {
            match self.input.read(&mut self.buf) {
                Ok(0) => {
                    self.buf.clear();
                    self.eof = true;
                    return Ok(false);
                }
                Ok(n) => {
                    self.buf.truncate(n);
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    fn peek(&mut self) -> io::Result<Option<u8>> {
        Ok(if self.fill()? {
            Some(self.buf[self.pos])
        } else {
            None
        })
    }

    fn bump(&mut self) -> io::Result<Option<u8>> {
        let b = self.peek()?;
        if let Some(b) = b {
            self.pos += 1;
            self.byte += 1;
            if b == b'\n' {
                self.line += 1;
            }
            self.raw.push(b);
        }
        Ok(b)
    }

    /// Consumes the `\n` of a `\r\n` pair.
    fn eat_lf_after_cr(&mut self) -> io::Result<()> {
        if self.peek()? == Some(b'\n') {
            self.bump()?;
        }
        Ok(())
    }

    /// Resumes after a syntax error at the line following the record's first line.
    fn resync(&mut self, start_line: u64, start_byte: u64) -> io::Result<()> {
        let raw = std::mem::take(&mut self.raw);
        if let Some(i) = raw.iter().position(|&b| b == b'\n') {
            let mut rest = raw[i + 1..].to_vec();
            rest.extend_from_slice(&self.buf[self.pos..]);
            self.buf = rest;
            self.pos = 0;
            self.line = start_line + 1;
            self.byte = start_byte + i as u64 + 1;
        } else {
            // The error is on the record's first line: drop the rest of that line.
            while let Some(b) = self.bump()? {
                if b == b'\n' || b == b'\r' {
                    if b == b'\r' {
                        self.eat_lf_after_cr()?;
                    }
                    break;
                }
            }
        }
        self.raw.clear();
        Ok(())
    }

    /// The next record, `None` at end of input.
    pub fn next_record(&mut self) -> Option<Result<CsvRecord, CsvError>> {
        match self.read_record() {
            Ok(r) => r.map(Ok),
            Err(e) => Some(Err(e)),
        }
    }

    fn read_record(&mut self) -> Result<Option<CsvRecord>, CsvError> {
        // Skip blank lines.
        loop {
            match self.peek().map_err(CsvError::Io)? {
                None => return Ok(None),
                Some(b'\n') | Some(b'\r') => {
                    let b = self.bump().map_err(CsvError::Io)?;
                    if b == Some(b'\r') {
                        self.eat_lf_after_cr().map_err(CsvError::Io)?;
                    }
                }
                Some(_) => break,
            }
        }
        self.raw.clear();
        let (line, byte) = (self.line, self.byte);
        let mut rec = CsvRecord {
            fields: Vec::new(),
            field_bytes: Vec::new(),
            line,
            byte,
        };
        let mut field = Vec::new();
        let mut field_byte = byte;
        let mut state = State::StartField;
        let syntax = |this: &Self, what: &str| CsvError::Syntax {
            line,
            byte,
            reason: format!(
                "{what} (line {}, byte {})",
                this.line,
                this.byte.saturating_sub(1)
            ),
        };
        loop {
            let b = self.bump().map_err(CsvError::Io)?;
            let end_field = |rec: &mut CsvRecord, field: &mut Vec<u8>, at: u64| {
                rec.fields.push(std::mem::take(field));
                rec.field_bytes.push(at);
            };
            match (state, b) {
                (State::Quoted, None) => {
                    let e = CsvError::Syntax {
                        line,
                        byte,
                        reason: format!("unclosed quote: end of input inside the quoted field opened at byte {}", field_byte - 1),
                    };
                    self.resync(line, byte).map_err(CsvError::Io)?;
                    return Err(e);
                }
                (_, None) => {
                    end_field(&mut rec, &mut field, field_byte);
                    return Ok(Some(rec));
                }
                (State::Quoted, Some(b'"')) => state = State::QuoteInQuoted,
                (State::Quoted, Some(c)) => field.push(c),
                (State::QuoteInQuoted, Some(b'"')) => {
                    field.push(b'"');
                    state = State::Quoted;
                }
                (State::StartField, Some(b'"')) => {
                    field_byte = self.byte;
                    state = State::Quoted;
                }
                (_, Some(b',')) => {
                    end_field(&mut rec, &mut field, field_byte);
                    field_byte = self.byte;
                    state = State::StartField;
                }
                (_, Some(c @ (b'\n' | b'\r'))) => {
                    if c == b'\r' {
                        self.eat_lf_after_cr().map_err(CsvError::Io)?;
                    }
                    end_field(&mut rec, &mut field, field_byte);
                    return Ok(Some(rec));
                }
                (State::QuoteInQuoted, Some(c)) => {
                    let e = syntax(
                        self,
                        &format!(
                            "unclosed quote or stray {:?} after a closing quote",
                            c as char
                        ),
                    );
                    self.resync(line, byte).map_err(CsvError::Io)?;
                    return Err(e);
                }
                (State::Unquoted, Some(b'"')) => {
                    let e = syntax(self, "quote inside an unquoted field");
                    self.resync(line, byte).map_err(CsvError::Io)?;
                    return Err(e);
                }
                (State::StartField | State::Unquoted, Some(c)) => {
                    if state == State::StartField {
                        field_byte = self.byte - 1;
                    }
                    field.push(c);
                    state = State::Unquoted;
                }
            }
        }
    }
}

/// Reads every record of the CSV file `path` (compressed or not) into `coll`,
/// checking the header first when `header` is given: `parse` turns a record into
/// a document; syntax errors become [`CorpusError::MalformedRecord`] records.
pub(crate) fn load_csv_file(
    path: &Path,
    coll: &mut Collector,
    header: Option<&[&str]>,
    mut parse: impl FnMut(&CsvRecord, Location) -> Result<Record, CorpusError>,
) -> Result<(), CorpusError> {
    let (reader, _) = open_decompressed(path)?;
    let mut csv = StrictCsv::new(reader);
    if let Some(want) = header {
        let got = match csv.next_record() {
            Some(Ok(rec)) => rec
                .fields
                .iter()
                .map(|f| {
                    String::from_utf8_lossy(f)
                        .trim_start_matches('\u{feff}')
                        .to_string()
                })
                .collect(),
            Some(Err(CsvError::Io(e))) => return Err(CorpusError::io(path, e)),
            _ => Vec::new(),
        };
        if got != want {
            return Err(CorpusError::MalformedRecord {
                at: Location::file(path).line(1),
                reason: format!("header {got:?}, expected {want:?}"),
            });
        }
    }
    while !coll.full() {
        let outcome = match csv.next_record() {
            None => break,
            Some(Ok(rec)) => {
                let at = Location::file(path).line(rec.line).byte(rec.byte);
                parse(&rec, at)
            }
            Some(Err(CsvError::Io(e))) => return Err(CorpusError::io(path, e)),
            Some(Err(CsvError::Syntax { line, byte, reason })) => {
                Err(CorpusError::MalformedRecord {
                    at: Location::file(path).line(line).byte(byte),
                    reason,
                })
            }
        };
        coll.take(outcome)?;
    }
    Ok(())
}

/// Checks that `rec` has `n` fields.
pub(crate) fn expect_fields(rec: &CsvRecord, n: usize, at: &Location) -> Result<(), CorpusError> {
    if rec.fields.len() == n {
        Ok(())
    } else {
        Err(CorpusError::MalformedRecord {
            at: at.clone(),
            reason: format!("{} fields, expected {n}", rec.fields.len()),
        })
    }
}

/// Field `i` of `rec` as text (UTF-8 and not blank), naming its byte otherwise.
pub(crate) fn field_text(rec: &CsvRecord, i: usize, at: &Location) -> Result<String, CorpusError> {
    text_from_bytes(rec.fields[i].clone(), &at.clone().byte(rec.field_bytes[i]))
}

/// Field `i` of `rec` as a label string (lossy: a bad label is reported as such).
pub(crate) fn field_label(rec: &CsvRecord, i: usize) -> String {
    String::from_utf8_lossy(&rec.fields[i]).trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(input: &[u8]) -> Vec<Result<(u64, Vec<String>), String>> {
        let mut r = StrictCsv::new(input);
        let mut out = Vec::new();
        while let Some(rec) = r.next_record() {
            out.push(match rec {
                Ok(rec) => Ok((
                    rec.line,
                    rec.fields
                        .iter()
                        .map(|f| String::from_utf8_lossy(f).into_owned())
                        .collect(),
                )),
                Err(CsvError::Syntax { line, reason, .. }) => Err(format!("{line}: {reason}")),
                Err(CsvError::Io(e)) => Err(e.to_string()),
            });
        }
        out
    }

    #[test]
    fn parses_quotes_escapes_newlines_and_crlf() {
        let got = all(b"h1,h2\r\n\"a, \"\"q\"\"\nnext\",2\r\n\nplain,\"\"\n");
        let want: Vec<Result<(u64, Vec<String>), String>> = vec![
            Ok((1, vec!["h1".into(), "h2".into()])),
            Ok((2, vec!["a, \"q\"\nnext".into(), "2".into()])),
            Ok((5, vec!["plain".into(), "".into()])),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn unclosed_quote_mid_file_is_an_error_and_the_next_row_survives() {
        let got = all(b"a,1\n\"broken,2\n\"next\",3\nlast,4\n");
        assert_eq!(got[0], Ok((1, vec!["a".into(), "1".into()])));
        let e = got[1].clone().unwrap_err();
        assert!(e.starts_with("2: unclosed quote"), "{e}");
        assert_eq!(got[2], Ok((3, vec!["next".into(), "3".into()])));
        assert_eq!(got[3], Ok((4, vec!["last".into(), "4".into()])));
        assert_eq!(got.len(), 4);
    }

    #[test]
    fn unclosed_quote_at_end_and_stray_quotes() {
        let got = all(b"a,1\n\"never closed,2\nx,3\n");
        assert_eq!(got[0], Ok((1, vec!["a".into(), "1".into()])));
        assert!(got[1].clone().unwrap_err().contains("end of input"));
        // resynced at line 3
        assert_eq!(got[2], Ok((3, vec!["x".into(), "3".into()])));
        let got = all(b"ab\"c,1\nok,2\n");
        assert!(got[0]
            .clone()
            .unwrap_err()
            .starts_with("1: quote inside an unquoted field"));
        assert_eq!(got[1], Ok((2, vec!["ok".into(), "2".into()])));
    }

    #[test]
    fn field_offsets_point_at_content() {
        let mut r = StrictCsv::new(&b"x,\"yz\",w\n"[..]);
        let rec = r.next_record().unwrap().unwrap();
        assert_eq!(rec.field_bytes, vec![0, 3, 7]);
    }
}
