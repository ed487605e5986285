//! The hot loops compiled for the processor's widest instruction set
//! (`mechlab_engine::simd::widest`) must compute the bits of the baseline build:
//! the same short runs at the detected level and under `MECHLAB_SIMD=baseline`
//! write byte-identical metrics and checkpoints. On a machine without AVX2 both
//! runs take the baseline path and the test shows only determinism. The same
//! holds for the engine's direct small products (AVX-512 only) against `gemm`.

use std::path::Path;
use std::process::Command;

/// The induction presets shrunk to a few seconds.
const SHORT_INDUCTION: [&str; 5] = [
    "train.steps=30",
    "run.probe_every=10",
    "data.n_train=600",
    "data.n_val=100",
    "data.seq_len=40",
];

/// `mechlab run PRESET --set …`, at the level `simd` caps to.
fn run(preset: &str, sets: &[&str], out: &Path, simd: Option<&str>) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_mechlab"));
    c.args(["--quiet", "run", preset, "--out"]).arg(out);
    for s in sets {
        c.args(["--set", s]);
    }
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
        "{what} differs between the run at the detected level and the capped one"
    );
}

#[test]
fn induction_tables_compute_the_baseline_bits() {
    let tmp = tempfile::tempdir().unwrap();
    // the simplified model and the full one (whose key windows hold the own token)
    for preset in ["induction-simplified", "induction-full"] {
        let (wide, base) = (tmp.path().join("wide"), tmp.path().join("base"));
        run(preset, &SHORT_INDUCTION, &wide, None);
        run(preset, &SHORT_INDUCTION, &base, Some("baseline"));
        same_bytes(&wide, &base, "metrics.jsonl");
        same_bytes(&wide, &base, "checkpoints/step_000030.safetensors");
        std::fs::remove_dir_all(&wide).unwrap();
        std::fs::remove_dir_all(&base).unwrap();
    }
}

#[test]
fn direct_products_compute_the_gemm_bits() {
    // topic-attention's six head products (`q·kᵀ`, `P·v` and the backward's four)
    // take the direct kernel on AVX-512; under `MECHLAB_SIMD=avx2` every product
    // is gemm's
    let tmp = tempfile::tempdir().unwrap();
    let (wide, gemm) = (tmp.path().join("wide"), tmp.path().join("gemm"));
    let sets = [
        "train.steps=120",
        "data.n_train=400",
        "data.n_dev=200",
        "run.checkpoint_every=120",
    ];
    run("topic-attention", &sets, &wide, None);
    run("topic-attention", &sets, &gemm, Some("avx2"));
    same_bytes(&wide, &gemm, "metrics.jsonl");
    same_bytes(&wide, &gemm, "summary.json");
    same_bytes(&wide, &gemm, "checkpoints/step_000120.safetensors");
}
