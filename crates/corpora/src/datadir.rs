//! Where the shared real-text data lives: `$MECHLAB_DATA`, else `shared/data`
//! beside the repository.
//!
//! The corpora are never copied into the repository; they sit in `shared/data`
//! next to it (`../shared/data` from the repository root). [`data_dir`] returns,
//! in order: the `MECHLAB_DATA` environment variable if set (it must exist); the
//! `shared/data` beside the checkout this crate was built from; the first
//! `shared/data` found beside the current directory or one of its ancestors.
//!
//! ```
//! use mechlab_corpora::datadir::data_dir_from;
//! let dir = tempfile::tempdir().unwrap();
//! let data = dir.path().join("shared/data");
//! std::fs::create_dir_all(&data).unwrap();
//! let repo = dir.path().join("repo/crates/x");
//! std::fs::create_dir_all(&repo).unwrap();
//! assert_eq!(data_dir_from(None, &[], &repo).unwrap(), data);
//! assert!(data_dir_from(Some(dir.path().join("nope").into()), &[], &repo).is_err());
//! ```

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::error::CorpusError;

/// The environment variable that overrides the data folder.
pub const DATA_ENV: &str = "MECHLAB_DATA";

/// `shared/data` beside the checkout this crate was compiled in.
pub fn built_in_data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data")
}

/// The shared data folder: `$MECHLAB_DATA`, else the one beside this crate's
/// checkout, else `shared/data` beside the current directory or an ancestor.
pub fn data_dir() -> Result<PathBuf, CorpusError> {
    let cwd = std::env::current_dir().unwrap_or_default();
    data_dir_from(std::env::var_os(DATA_ENV), &[built_in_data_dir()], &cwd)
}

/// [`data_dir`] with its inputs given: the override, fixed candidates, and the
/// folder whose ancestors are searched.
pub fn data_dir_from(
    env: Option<OsString>,
    candidates: &[PathBuf],
    start: &Path,
) -> Result<PathBuf, CorpusError> {
    if let Some(p) = env.filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_dir() {
            Ok(p)
        } else {
            Err(CorpusError::NotFound {
                path: p,
                what: format!("data folder named by {DATA_ENV}"),
            })
        };
    }
    let ancestors = start.ancestors().map(|a| a.join("shared/data"));
    candidates
        .iter()
        .cloned()
        .chain(ancestors)
        .find(|p| p.is_dir())
        .ok_or_else(|| CorpusError::NotFound {
            path: start.join("../shared/data"),
            what: format!("shared data folder (set {DATA_ENV})"),
        })
}

/// `data_dir()/rel`, checked to exist.
pub fn data_path(rel: impl AsRef<Path>) -> Result<PathBuf, CorpusError> {
    let p = data_dir()?.join(rel);
    if p.exists() {
        Ok(p)
    } else {
        Err(CorpusError::NotFound {
            path: p,
            what: String::new(),
        })
    }
}
