//! The hot loops compiled for the processor's widest instruction set
//! (`mechlab_engine::simd::widest`) must compute the bits of the baseline build:
//! the same short runs at the detected level and under `MECHLAB_SIMD=baseline`
//! write byte-identical metrics and checkpoints. On a machine without AVX2 both
//! runs take the baseline path and the test shows only determinism.

use std::path::Path;
use std::process::Command;

/// `mechlab run PRESET` shrunk to a few seconds, at the level `simd` caps to.
fn run(preset: &str, out: &Path, simd: Option<&str>) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_mechlab"));
    c.args(["--quiet", "run", preset, "--out"])
        .arg(out)
        .args(["--set", "train.steps=30", "--set", "run.probe_every=10"])
        .args(["--set", "data.n_train=600", "--set", "data.n_val=100"])
        .args(["--set", "data.seq_len=40"]);
    match simd {
        Some(v) => c.env("MECHLAB_SIMD", v),
        None => c.env_remove("MECHLAB_SIMD"),
    };
    let o = c.output().expect("mechlab runs");
    assert!(
        o.status.success(),
        "{preset} ({simd:?}) failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn same_bytes(a: &Path, b: &Path, what: &str) {
    let (x, y) = (std::fs::read(a.join(what)), std::fs::read(b.join(what)));
    let (x, y) = (
        x.expect("first run wrote it"),
        y.expect("second run wrote it"),
    );
    assert!(
        x == y,
        "{what} differs between the wide and the baseline run"
    );
}

#[test]
fn induction_tables_compute_the_baseline_bits() {
    let tmp = tempfile::tempdir().unwrap();
    // the simplified model and the full one (whose key windows hold the own token)
    for preset in ["induction-simplified", "induction-full"] {
        let (wide, base) = (tmp.path().join("wide"), tmp.path().join("base"));
        run(preset, &wide, None);
        run(preset, &base, Some("baseline"));
        same_bytes(&wide, &base, "metrics.jsonl");
        same_bytes(&wide, &base, "checkpoints/step_000030.safetensors");
        std::fs::remove_dir_all(&wide).unwrap();
        std::fs::remove_dir_all(&base).unwrap();
    }
}
