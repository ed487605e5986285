//! `mechlab encode`: the shared pretrained encoder's activations on texts, from
//! the command line, equal Hugging Face's (the golden file `bench/bert/compare.py`
//! took from `transformers.BertModel`), written where asked, and shown in the
//! attention viewer. Skips with a message when the shared model is absent.

use safetensors::SafeTensors;
use std::path::{Path, PathBuf};

use crate::support::cli as support;
use support::{mechlab, ok};

fn model_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/models/all-MiniLM-L6-v2");
    if dir.join("model.safetensors").is_file() {
        Some(dir)
    } else {
        // CI has ../shared beside its clone: a missing model there is a failure,
        // not a skip. Elsewhere the terminal says the test did not run.
        assert!(
            std::env::var_os("CI").is_none(),
            "{} is absent (CI is set)",
            dir.display()
        );
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "NOT RUN: {} is absent", dir.display());
        None
    }
}

fn golden() -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../engine/tests/data/bert_minilm_golden.safetensors"),
    )
    .unwrap()
}

fn values(st: &SafeTensors, name: &str) -> (Vec<usize>, Vec<f64>) {
    let t = st.tensor(name).unwrap();
    let v = match t.dtype() {
        safetensors::Dtype::F64 => t
            .data()
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
            .collect(),
        safetensors::Dtype::F32 => t
            .data()
            .chunks_exact(4)
            .map(|b| f64::from(f32::from_le_bytes(b.try_into().unwrap())))
            .collect(),
        safetensors::Dtype::I64 => t
            .data()
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap()) as f64)
            .collect(),
        d => panic!("{name}: unexpected dtype {d:?}"),
    };
    (t.shape().to_vec(), v)
}

#[test]
fn encode_writes_hugging_faces_activations_and_a_viewer() {
    let Some(dir) = model_dir() else { return };
    let gbytes = golden();
    let (_, meta) = SafeTensors::read_metadata(&gbytes).unwrap();
    let texts: Vec<String> =
        serde_json::from_str(&meta.metadata().clone().unwrap()["texts"]).unwrap();
    let g = SafeTensors::deserialize(&gbytes).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let model = dir.display().to_string();
    let mut args = vec!["encode", model.as_str()];
    for t in &texts {
        args.extend(["--text", t.as_str()]);
    }
    args.extend([
        "--hook",
        "blocks.0.attn.hook_pattern",
        "--hook",
        "blocks.5.attn.hook_pattern",
        "--hook",
        "blocks.2.hook_normalized_resid_post",
        "--out",
        "acts.safetensors",
        "--html",
        "attention.html",
    ]);
    let out = ok(tmp.path(), &args);
    assert!(
        out.contains("text 2 (") && out.contains("[CLS] jazz is a music genre . [SEP]"),
        "{out}"
    );
    assert!(
        out.contains("blocks.5.attn.hook_pattern [3, 12, 15, 15]"),
        "{out}"
    );

    let bytes = std::fs::read(tmp.path().join("acts.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    // The tokenizer gives Hugging Face's ids, padded the same way.
    assert_eq!(values(&st, "input_ids"), values(&g, "ids"));
    let (_, ids) = values(&g, "ids");
    let t = 15;
    let real = |b: usize, p: usize| ids[b * t + p] != 0.0;
    // Attention of layers 0 and 5 and block 2's output (hidden_states[3]).
    let (ashape, ga) = values(&g, "attn");
    let h = ashape[2];
    let mut worst = 0.0f64;
    for (k, l) in [0, 5].into_iter().enumerate() {
        let (_, got) = values(&st, &format!("blocks.{l}.attn.hook_pattern"));
        for b in 0..3 {
            for q in (0..t).filter(|&q| real(b, q)) {
                for hd in 0..h {
                    for j in 0..t {
                        let at = ((b * h + hd) * t + q) * t + j;
                        worst = worst.max((got[at] - ga[k * 3 * h * t * t + at]).abs());
                    }
                }
            }
        }
    }
    assert!(worst < 1e-5, "attention differs by {worst:e}");
    let (hshape, gh) = values(&g, "hidden");
    let d = hshape[3];
    let (_, got) = values(&st, "blocks.2.hook_normalized_resid_post");
    let mut worst_h = 0.0f64;
    for b in 0..3 {
        for p in (0..t).filter(|&p| real(b, p)) {
            for i in 0..d {
                let at = (b * t + p) * d + i;
                worst_h = worst_h.max((got[at] - gh[3 * t * d + at]).abs());
            }
        }
    }
    assert!(worst_h < 1e-4, "block 2's output differs by {worst_h:e}");

    // One viewer per text, every head of every layer, citing the file beside it.
    let html = std::fs::read_to_string(tmp.path().join("attention.html")).unwrap();
    assert_eq!(html.matches("<figure id=\"fig-text").count(), 3);
    assert!(html.contains("every head (L0H0, L0H1"), "heads named");
    assert!(html.contains("<code>acts.safetensors</code> (sequence 2)"));
}

#[test]
fn encode_errors_name_the_model_and_the_hook() {
    let tmp = tempfile::tempdir().unwrap();
    let out = mechlab(tmp.path(), &["encode", "nowhere/at-all", "--text", "x"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("model: `nowhere/at-all` is not a folder"),
        "{err}"
    );
    let Some(dir) = model_dir() else { return };
    let model = dir.display().to_string();
    let out = mechlab(
        tmp.path(),
        &[
            "encode",
            &model,
            "--text",
            "x",
            "--hook",
            "blocks.0.attn.hook_patern",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--hook") && err.contains("blocks.0.attn.hook_pattern"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}
