//! A per-thread scratch folder for the parsers that read files, not bytes.
//!
//! AFL runs a target thousands of times a second in one process, so the folder is
//! made once (in `/dev/shm` when there is one, to spare the disk) and reused; test
//! threads each get their own and remove it when they end.

use std::cell::RefCell;
use std::path::{Path, PathBuf};

thread_local! {
    static DIR: RefCell<Option<tempfile::TempDir>> = const { RefCell::new(None) };
}

/// The scratch folder of this thread.
pub fn dir() -> PathBuf {
    DIR.with(|d| {
        let mut d = d.borrow_mut();
        if d.is_none() {
            let shm = Path::new("/dev/shm");
            let made = if shm.is_dir() {
                tempfile::Builder::new()
                    .prefix("mechlab-fuzz")
                    .tempdir_in(shm)
            } else {
                tempfile::Builder::new().prefix("mechlab-fuzz").tempdir()
            };
            *d = Some(made.expect("a scratch folder can be made"));
        }
        d.as_ref().expect("made above").path().to_path_buf()
    })
}

/// Writes `bytes` to `name` in the scratch folder and returns its path.
pub fn file(name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir().join(name);
    std::fs::write(&path, bytes).expect("the scratch folder is writable");
    path
}

/// An empty folder `name` in the scratch folder (emptied if it was there).
pub fn fresh_dir(name: &str) -> PathBuf {
    let path = dir().join(name);
    if path.exists() {
        std::fs::remove_dir_all(&path).expect("the scratch folder is writable");
    }
    std::fs::create_dir_all(&path).expect("the scratch folder is writable");
    path
}
