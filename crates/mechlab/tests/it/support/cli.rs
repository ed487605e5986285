//! Running the `mechlab` binary from integration tests.

use std::path::Path;
use std::process::{Command, Output};

/// `mechlab ARGS --quiet` in `dir`.
pub fn mechlab(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mechlab"))
        .args(args)
        .arg("--quiet")
        .current_dir(dir)
        .output()
        .expect("mechlab runs")
}

/// Its stdout; panics with both streams when it fails.
pub fn ok(dir: &Path, args: &[&str]) -> String {
    let out = mechlab(dir, args);
    assert!(
        out.status.success(),
        "mechlab {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
