//! Replays every file of `fuzz/corpus/<target>/` (the minimised AFL corpora and
//! every past finding) through its target function, so CI rechecks them all
//! without AFL.

use std::path::Path;

#[test]
fn every_corpus_file_passes_its_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let mut total = 0;
    for (name, target) in mechlab_fuzz::TARGETS {
        let dir = root.join(name);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("a corpus entry").path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{}: an empty corpus", dir.display());
        for f in &files {
            let data = std::fs::read(f).expect("a corpus file reads");
            // A panic here names the file: rerun it with `fuzz/run.sh --replay FILE`.
            eprintln!("{}", f.display());
            target(&data);
        }
        total += files.len();
    }
    eprintln!("{total} corpus files replayed");
}
