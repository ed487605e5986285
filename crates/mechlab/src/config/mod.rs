//! Configs: TOML presets and files, type-checked `--set` overrides, resolution.
//!
//! Every experiment publishes its full default config (every key it understands,
//! with its type); a preset or a user's file is laid over it, then each
//! `--set key=value`. A key the experiment does not know is an error that names the
//! closest valid key, a value of the wrong type is an error that names the key and
//! both types, so a typo never silently runs the default. The resolved table is
//! what the run saves as `config.toml`.
//!
//! ```
//! use mechlab::config::overlay;
//! let defaults: toml::Table = toml::from_str("seed = 0\n[train]\nlr = 0.1\nsteps = 10").unwrap();
//! let mut cfg = defaults.clone();
//! overlay(&mut cfg, &toml::from_str("[train]\nlr = 1").unwrap(), "preset").unwrap();
//! assert_eq!(cfg["train"]["lr"].as_float(), Some(1.0)); // an integer where a float goes is fine
//! let err = overlay(&mut cfg, &toml::from_str("[train]\nlrr = 1.0").unwrap(), "preset").unwrap_err();
//! assert!(err.to_string().contains("did you mean `train.lr`"));
//! ```

pub mod presets;

use std::path::Path;
use thiserror::Error;
use toml::{Table, Value};

/// Why a config could not be resolved. Every variant names the file or key.
#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("{file}: {}", clean(message))]
    Parse { file: String, message: String },
    #[error("{file}: unknown key `{}`{}", clean(key), did_you_mean(.suggestion))]
    UnknownKey {
        file: String,
        key: String,
        suggestion: Option<String>,
    },
    #[error("{file}: key `{}` must be {expected}, got {got}", clean(key))]
    Type {
        file: String,
        key: String,
        expected: String,
        got: String,
    },
    #[error("--set {}: expected key=value", clean(arg))]
    BadOverride { arg: String },
    #[error("no preset or config file named `{}`{}", clean(name), did_you_mean(.suggestion))]
    UnknownSource {
        name: String,
        suggestion: Option<String>,
    },
    #[error("{file}: no experiment named `{}`{}", clean(name), did_you_mean(.suggestion))]
    UnknownExperiment {
        file: String,
        name: String,
        suggestion: Option<String>,
    },
    #[error("{file}: {}", clean(message))]
    Invalid { file: String, message: String },
    #[error("{file}: {source}")]
    Io {
        file: String,
        source: std::io::Error,
    },
}

/// Text from the user's input as it may appear in a one-line message: control
/// characters escaped, long values cut (a fuzzed `--set` showed raw bytes).
fn clean(s: &str) -> String {
    mechlab_engine::text::excerpt(s, mechlab_engine::text::MESSAGE_CHARS)
}

fn did_you_mean(s: &Option<String>) -> String {
    match s {
        Some(s) => format!(" (did you mean `{s}`?)"),
        None => String::new(),
    }
}

/// The closest of `candidates` to `word`, if any is close enough to be a likely typo.
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let mut best: Option<(f64, &str)> = None;
    for c in candidates {
        let score = strsim::jaro_winkler(word, c);
        if best.is_none_or(|(b, _)| score > b) {
            best = Some((score, c));
        }
    }
    best.filter(|(s, _)| *s > 0.7).map(|(_, c)| c.to_string())
}

/// The valid key a mistyped `key` most likely meant. Keys ending in the same
/// segment come first (`lr` → `train.lr`, the right key in the wrong section),
/// the nearest of them by the whole path; otherwise the nearest key overall.
pub fn closest_key(key: &str, valid: &[String]) -> Option<String> {
    let last = |k: &str| k.rsplit('.').next().unwrap_or(k).to_string();
    let want = last(key);
    let same: Vec<&str> = valid
        .iter()
        .map(String::as_str)
        .filter(|k| last(k) == want)
        .collect();
    if let Some(best) = same
        .iter()
        .max_by(|a, b| strsim::jaro_winkler(key, a).total_cmp(&strsim::jaro_winkler(key, b)))
    {
        return Some(best.to_string());
    }
    closest(key, valid.iter().map(String::as_str))
}

/// All leaf key paths of a table (`train.lr`, ...); arrays are leaves.
pub fn leaf_paths(table: &Table) -> Vec<String> {
    fn walk(prefix: &str, t: &Table, out: &mut Vec<String>) {
        for (k, v) in t {
            let path = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            match v {
                Value::Table(sub) => walk(&path, sub, out),
                _ => out.push(path),
            }
        }
    }
    let mut out = Vec::new();
    walk("", table, &mut out);
    out
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::String(_) => "a string",
        Value::Integer(_) => "an integer",
        Value::Float(_) => "a number",
        Value::Boolean(_) => "a boolean",
        Value::Datetime(_) => "a date",
        Value::Array(_) => "an array",
        Value::Table(_) => "a table",
    }
}

/// Checks that `new` may replace `old` and returns the value to store (integers
/// are widened to floats where the default is a float).
fn coerce(old: &Value, new: &Value, key: &str, file: &str) -> Result<Value, ConfigError> {
    match (old, new) {
        (Value::Float(_), Value::Integer(i)) => Ok(Value::Float(*i as f64)),
        (Value::Float(_), Value::Float(_))
        | (Value::Integer(_), Value::Integer(_))
        | (Value::String(_), Value::String(_))
        | (Value::Boolean(_), Value::Boolean(_))
        | (Value::Array(_), Value::Array(_)) => Ok(new.clone()),
        _ => Err(ConfigError::Type {
            file: file.to_string(),
            key: key.to_string(),
            expected: type_name(old).to_string(),
            got: type_name(new).to_string(),
        }),
    }
}

/// Tables whose keys are the user's (maps such as `train.lr_scale`, keyed by
/// parameter group): any key may be added, holding a number; the experiment
/// checks the names against its model.
const OPEN_TABLES: &[&str] = &["train.lr_scale"];

/// Lays `patch` over `base`, key by key. Every key of `patch` must exist in `base`
/// with a compatible type; `file` names the source in errors.
pub fn overlay(base: &mut Table, patch: &Table, file: &str) -> Result<(), ConfigError> {
    let all = leaf_paths(base);
    overlay_at(base, patch, "", file, &all)
}

fn overlay_at(
    base: &mut Table,
    patch: &Table,
    prefix: &str,
    file: &str,
    all: &[String],
) -> Result<(), ConfigError> {
    for (k, v) in patch {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        if OPEN_TABLES.contains(&prefix) && !base.contains_key(k) {
            let num = coerce(&Value::Float(0.0), v, &path, file)?;
            base.insert(k.clone(), num);
            continue;
        }
        let Some(old) = base.get_mut(k) else {
            return Err(ConfigError::UnknownKey {
                file: file.to_string(),
                suggestion: closest_key(&path, all),
                key: path,
            });
        };
        match (old, v) {
            (Value::Table(ob), Value::Table(nb)) => overlay_at(ob, nb, &path, file, all)?,
            (old, v) => *old = coerce(old, v, &path, file)?,
        }
    }
    Ok(())
}

/// Applies one `key=value` override. The value is read as a TOML value
/// (`0.5`, `true`, `[1, 3]`, `"adam"`); a bare word is taken as a string.
pub fn apply_override(table: &mut Table, arg: &str) -> Result<(), ConfigError> {
    let Some((key, raw)) = arg.split_once('=') else {
        return Err(ConfigError::BadOverride {
            arg: arg.to_string(),
        });
    };
    let key = key.trim();
    let raw = raw.trim();
    if key.is_empty() {
        return Err(ConfigError::BadOverride {
            arg: arg.to_string(),
        });
    }
    let value = match toml::from_str::<Table>(&format!("v = {raw}")) {
        Ok(mut t) => t.remove("v").unwrap_or(Value::String(raw.to_string())),
        Err(_) => Value::String(raw.to_string()),
    };
    // Build the nested patch {a: {b: value}} for key a.b and overlay it.
    let mut patch = Table::new();
    let parts: Vec<&str> = key.split('.').collect();
    let mut cur = &mut patch;
    for p in &parts[..parts.len() - 1] {
        cur = cur
            .entry(p.to_string())
            .or_insert_with(|| Value::Table(Table::new()))
            .as_table_mut()
            .expect("just inserted a table");
    }
    cur.insert(parts[parts.len() - 1].to_string(), value);
    overlay(table, &patch, "--set")
}

/// Parses TOML text, naming `file` (and the line, as the parser reports it) on error.
pub fn parse(text: &str, file: &str) -> Result<Table, ConfigError> {
    toml::from_str::<Table>(text).map_err(|e| {
        let mut message = one_line(&e.to_string());
        // The parser's reason can be bare ("duplicate key"): name the text it
        // points at, which its source excerpt showed and `one_line` drops.
        let at = e.span().and_then(|s| text.get(s)).unwrap_or("");
        if !at.is_empty() && at.len() <= 40 && !at.contains('\n') && !message.contains(at) {
            message = format!("{message}, at `{at}`");
        }
        ConfigError::Parse {
            file: file.to_string(),
            message,
        }
    })
}

/// The parser's message on one line: its position line and its last line (the
/// reason), without the source excerpt it draws between them.
pub(crate) fn one_line(msg: &str) -> String {
    let lines: Vec<&str> = msg
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    match (lines.first(), lines.last()) {
        (Some(first), Some(last)) if lines.len() > 1 => format!("{first}: {last}"),
        (Some(first), _) => first.to_string(),
        _ => String::new(),
    }
}

/// Reads and parses a TOML file.
pub fn read_file(path: &Path) -> Result<Table, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
        file: path.display().to_string(),
        source,
    })?;
    parse(&text, &path.display().to_string())
}

/// Deserialises a resolved table into an experiment's typed config.
pub fn typed<C: serde::de::DeserializeOwned>(table: &Table, file: &str) -> Result<C, ConfigError> {
    Value::Table(table.clone())
        .try_into()
        .map_err(|e: toml::de::Error| ConfigError::Invalid {
            file: file.to_string(),
            message: one_line(&e.to_string()),
        })
}

/// The config name of an enum value (`Dtype::F32` → `f32`), for notes and reports.
pub fn name_of<T: serde::Serialize>(value: &T) -> String {
    match Value::try_from(value) {
        Ok(Value::String(s)) => s,
        Ok(v) => v.to_string(),
        Err(_) => String::new(),
    }
}

/// Serialises an experiment's default typed config into the table of every valid key.
pub fn table_of<C: serde::Serialize>(cfg: &C) -> Table {
    Table::try_from(cfg).expect("experiment configs serialise to TOML tables")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> Table {
        parse(
            "seed = 0\nname = \"x\"\n[train]\nlr = 0.1\nsteps = 10\nadam = false\nparents = [1, 2]\n",
            "defaults",
        )
        .unwrap()
    }

    #[test]
    fn overrides_are_type_checked() {
        let mut t = defaults();
        apply_override(&mut t, "train.lr=2").unwrap();
        assert_eq!(t["train"]["lr"].as_float(), Some(2.0));
        apply_override(&mut t, "train.parents=[1,3]").unwrap();
        assert_eq!(t["train"]["parents"].as_array().unwrap().len(), 2);
        apply_override(&mut t, "name=hello").unwrap();
        assert_eq!(t["name"].as_str(), Some("hello"));
        let e = apply_override(&mut t, "train.steps=0.5")
            .unwrap_err()
            .to_string();
        assert!(e.contains("train.steps") && e.contains("integer"), "{e}");
        let e = apply_override(&mut t, "train.adam=yes")
            .unwrap_err()
            .to_string();
        assert!(e.contains("train.adam") && e.contains("boolean"), "{e}");
    }

    #[test]
    fn unknown_key_names_the_closest() {
        let mut t = defaults();
        let e = apply_override(&mut t, "train.step=3")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown key `train.step`"), "{e}");
        assert!(e.contains("did you mean `train.steps`"), "{e}");
        let e = apply_override(&mut t, "nonsense").unwrap_err().to_string();
        assert!(e.contains("expected key=value"), "{e}");
        // an open map takes new keys (numbers only), from a file or from --set
        let mut t = parse("[train]\nlr = 0.1\n[train.lr_scale]\n", "d.toml").unwrap();
        overlay(
            &mut t,
            &parse("[train.lr_scale]\nv = 100\n", "p.toml").unwrap(),
            "p.toml",
        )
        .unwrap();
        apply_override(&mut t, "train.lr_scale.W=0.5").unwrap();
        assert_eq!(t["train"]["lr_scale"]["v"].as_float(), Some(100.0));
        assert_eq!(t["train"]["lr_scale"]["W"].as_float(), Some(0.5));
        let e = apply_override(&mut t, "train.lr_scale.W=\"x\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("train.lr_scale.W"), "{e}");
    }

    #[test]
    fn a_key_in_the_wrong_section_is_found_by_its_last_segment() {
        let mut t = defaults();
        // Full-path similarity alone picked a longer key sharing the `lr`-less prefix.
        t.insert(
            "model".into(),
            Value::Table(parse("proj_init = 1.0", "m").unwrap()),
        );
        let e = apply_override(&mut t, "lr=0.5").unwrap_err().to_string();
        assert!(e.contains("did you mean `train.lr`"), "{e}");
        let e = apply_override(&mut t, "model.lr=0.5")
            .unwrap_err()
            .to_string();
        assert!(e.contains("did you mean `train.lr`"), "{e}");
        // No key ends in `stepz`: the nearest overall still wins.
        let e = apply_override(&mut t, "train.stepz=1")
            .unwrap_err()
            .to_string();
        assert!(e.contains("did you mean `train.steps`"), "{e}");
    }

    #[test]
    fn raw_bytes_in_keys_and_arguments_are_escaped() {
        // Found by the `config` fuzz target: these reached the terminal raw.
        let mut t = defaults();
        for arg in ["\u{1}lr=1", "train\rlr=2", "x\n"] {
            let e = apply_override(&mut t, arg).unwrap_err().to_string();
            assert!(!e.chars().any(char::is_control), "{e:?}");
            assert!(e.contains('\\'), "{e:?}");
        }
    }

    #[test]
    fn malformed_toml_names_file_and_line() {
        let e = parse("seed = 0\n[train\nlr = 1", "my.toml")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("my.toml:"), "{e}");
        assert!(e.contains("line 2"), "{e}");
    }

    #[test]
    fn a_duplicate_key_is_named() {
        // The parser says only "duplicate key"; the message adds the key it points at.
        let e = parse("seed = 0\n[train]\nlr = 1\nlr = 2\n", "my.toml")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("my.toml:"), "{e}");
        assert!(
            e.contains("line 4") && e.contains("duplicate key, at `lr`"),
            "{e}"
        );
    }
}
