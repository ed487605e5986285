//! `metrics.jsonl`: one JSON object per log event, appended as training goes.
//!
//! Each line is a flat object with an `event` (`train`, `probe`, `eval`, ...) and a
//! `step`; everything else is a named number. Lines are flushed as they are written,
//! so an interrupted run keeps its history, and on resume the lines at or after the
//! checkpoint's step are dropped (they will be written again, identically).
//!
//! ```
//! use mechlab::run::metrics::{MetricsLog, read, series};
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("metrics.jsonl");
//! let mut log = MetricsLog::create(&path).unwrap();
//! log.log("train", 0, &[("loss", 1.0)]).unwrap();
//! log.log("train", 1, &[("loss", 0.5)]).unwrap();
//! let recs = read(&path).unwrap();
//! assert_eq!(series(&recs, "train", "loss"), (vec![0.0, 1.0], vec![1.0, 0.5]));
//! ```

use serde_json::{Map, Value};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

/// Appends records to a run's `metrics.jsonl`.
pub struct MetricsLog {
    path: PathBuf,
    out: BufWriter<File>,
    line: Vec<u8>,
}

impl MetricsLog {
    /// Creates (or truncates) the log.
    pub fn create(path: &Path) -> std::io::Result<Self> {
        let f = File::create(path)?;
        Ok(MetricsLog {
            path: path.to_path_buf(),
            out: BufWriter::new(f),
            line: Vec::with_capacity(256),
        })
    }

    /// Opens an existing log for a resumed run, keeping only records with
    /// `step < keep_below` (and records without a step); a torn last line is dropped.
    pub fn resume(path: &Path, keep_below: u64) -> std::io::Result<Self> {
        let kept: Vec<String> = if path.exists() {
            BufReader::new(File::open(path)?)
                .lines()
                .collect::<Result<Vec<_>, _>>()?
                .into_iter()
                .filter(|l| match serde_json::from_str::<Value>(l) {
                    Ok(Value::Object(m)) => m
                        .get("step")
                        .and_then(|s| s.as_u64())
                        .is_none_or(|s| s < keep_below),
                    // A line cut short by a kill mid-write: it is rewritten whole.
                    _ => false,
                })
                .collect()
        } else {
            Vec::new()
        };
        let mut text = kept.join("\n");
        if !text.is_empty() {
            text.push('\n');
        }
        super::atomic::write(path, text.as_bytes())?;
        let f = OpenOptions::new().append(true).open(path)?;
        Ok(MetricsLog {
            path: path.to_path_buf(),
            out: BufWriter::new(f),
            line: Vec::with_capacity(256),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `{"event": event, "step": step, name: value, ...}`.
    pub fn log(&mut self, event: &str, step: u64, values: &[(&str, f64)]) -> std::io::Result<()> {
        // Written by hand into a reused buffer: this runs inside the training loop.
        self.line.clear();
        self.line.extend_from_slice(b"{\"event\":");
        push_json_str(&mut self.line, event);
        write!(self.line, ",\"step\":{step}")?;
        for (k, v) in values {
            self.line.push(b',');
            push_json_str(&mut self.line, k);
            self.line.push(b':');
            if v.is_finite() {
                write!(self.line, "{v:?}")?;
            } else {
                self.line.extend_from_slice(b"null");
            }
        }
        self.line.extend_from_slice(b"}\n");
        self.out.write_all(&self.line)?;
        self.out.flush()
    }

    /// Writes an arbitrary JSON object (for records that are not flat numbers).
    pub fn log_json(&mut self, record: &Value) -> std::io::Result<()> {
        serde_json::to_writer(&mut self.out, record)?;
        self.out.write_all(b"\n")?;
        self.out.flush()
    }
}

/// Appends `s` as a JSON string literal, escaping in place (no allocation).
fn push_json_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    for ch in s.chars() {
        match ch {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out.push(b'"');
}

/// One logged event: `event`, `step` and the values, as JSON.
pub type Record = Map<String, Value>;

/// Reads every record of a `metrics.jsonl`. A malformed line is an error naming the
/// file and line.
pub fn read(path: &Path) -> Result<Vec<Record>, String> {
    let f = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in BufReader::new(f).lines().enumerate() {
        let line = line.map_err(|e| format!("{}: line {}: {e}", path.display(), i + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(&line) {
            Ok(Value::Object(m)) => out.push(m),
            _ => {
                return Err(format!(
                    "{}: line {}: not a JSON object",
                    path.display(),
                    i + 1
                ))
            }
        }
    }
    Ok(out)
}

/// `(steps, values)` of `key` over the records of `event` that have it.
pub fn series(records: &[Map<String, Value>], event: &str, key: &str) -> (Vec<f64>, Vec<f64>) {
    let mut xs = Vec::new();
    let mut ys = Vec::new();
    for r in records {
        if r.get("event").and_then(|e| e.as_str()) != Some(event) {
            continue;
        }
        if let (Some(s), Some(v)) = (r.get("step").and_then(|s| s.as_f64()), r.get(key)) {
            xs.push(s);
            ys.push(v.as_f64().unwrap_or(f64::NAN));
        }
    }
    (xs, ys)
}

#[cfg(test)]
mod tests {
    #[test]
    fn resume_drops_later_steps_and_a_torn_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metrics.jsonl");
        std::fs::write(
            &path,
            "{\"event\":\"train\",\"step\":0}\n{\"event\":\"meta\"}\n{\"event\":\"train\",\"step\":4}\n{\"event\":\"tr",
        )
        .unwrap();
        drop(super::MetricsLog::resume(&path, 2).unwrap());
        let recs = super::read(&path).unwrap();
        assert_eq!(recs.len(), 2, "{recs:?}");
        assert_eq!(recs[1]["event"], "meta");
    }

    #[test]
    fn keys_are_escaped_as_json() {
        let mut out = Vec::new();
        super::push_json_str(&mut out, "a\"b\\c\nd·é");
        let back: String = serde_json::from_slice(&out).unwrap();
        assert_eq!(back, "a\"b\\c\nd·é");
    }
}
