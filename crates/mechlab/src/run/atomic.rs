//! Atomic file writes: a crash or Ctrl-C never leaves a half-written file.
//!
//! Data goes to a temporary file in the same folder, is flushed to disk, then
//! renamed over the target (rename is atomic within a file system).
//!
//! ```
//! let dir = tempfile::tempdir().unwrap();
//! let p = dir.path().join("summary.json");
//! mechlab::run::atomic::write(&p, b"{}").unwrap();
//! assert_eq!(std::fs::read(&p).unwrap(), b"{}");
//! ```

use std::io::Write;
use std::path::Path;

/// Writes `bytes` to `path` atomically.
pub fn write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}
