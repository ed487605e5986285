//! all-MiniLM-L6-v2 from `../shared/models` against the golden activations that
//! `bench/bert/compare.py` took from `transformers.BertModel` (no PyTorch needed
//! here), and one-line errors naming the file for broken copies of the folder.
//! Skips with a message when the shared model folder is absent.

use mechlab_corpora::wordpiece::PretrainedTokenizer;
use mechlab_engine::bert::Bert;
use mechlab_engine::hooks::{Batch, HookedModel};
use safetensors::SafeTensors;
use std::path::{Path, PathBuf};

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

fn f32s(st: &SafeTensors, name: &str) -> (Vec<usize>, Vec<f32>) {
    let t = st.tensor(name).unwrap();
    let v = t
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    (t.shape().to_vec(), v)
}

#[test]
fn matches_transformers_golden_activations() {
    let Some(dir) = model_dir() else { return };
    let bytes = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/bert_minilm_golden.safetensors"),
    )
    .unwrap();
    let (_, meta) = SafeTensors::read_metadata(&bytes).unwrap();
    let meta = meta.metadata().clone().unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let ids_view = st.tensor("ids").unwrap();
    let (nb, t) = (ids_view.shape()[0], ids_view.shape()[1]);
    let ids: Vec<u32> = ids_view
        .data()
        .chunks_exact(8)
        .map(|b| i64::from_le_bytes(b.try_into().unwrap()) as u32)
        .collect();

    // The tokenizer gives Hugging Face's ids.
    let texts: Vec<String> = serde_json::from_str(&meta["texts"]).unwrap();
    let tok = PretrainedTokenizer::from_dir(&dir).unwrap();
    for (b, text) in texts.iter().enumerate() {
        let e = tok.encode(text, 512).unwrap();
        let want: Vec<u32> = ids[b * t..(b + 1) * t]
            .iter()
            .copied()
            .filter(|&i| i != 0)
            .collect();
        assert_eq!(e.ids, want, "{text}");
    }

    let mut bert = Bert::load(&dir).unwrap();
    let hidden_layers: Vec<usize> = serde_json::from_str(&meta["hidden_layers"]).unwrap();
    let attn_layers: Vec<usize> = serde_json::from_str(&meta["attn_layers"]).unwrap();
    // Hugging Face's hidden_states[0] is the embedding output, [l] block l-1's output.
    let hname = |l: usize| match l {
        0 => "hook_full_embed".to_string(),
        l => format!("blocks.{}.hook_normalized_resid_post", l - 1),
    };
    let mut names: Vec<String> = hidden_layers.iter().map(|&l| hname(l)).collect();
    names.extend(
        attn_layers
            .iter()
            .map(|l| format!("blocks.{l}.attn.hook_pattern")),
    );
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let (out, cache) = bert
        .run_with_cache(&Batch::new(ids.clone(), nb, t), &refs)
        .unwrap();
    let real = |b: usize, p: usize| ids[b * t + p] != 0;

    let (hs, hv) = f32s(&st, "hidden");
    let d = hs[3];
    let mut worst_h = 0.0f64;
    for (k, &l) in hidden_layers.iter().enumerate() {
        let got = &cache[&hname(l)].data;
        for b in 0..nb {
            for p in (0..t).filter(|&p| real(b, p)) {
                for i in 0..d {
                    let want = hv[((k * nb + b) * t + p) * d + i] as f64;
                    worst_h = worst_h.max((got[(b * t + p) * d + i] - want).abs());
                }
            }
        }
    }
    let last = hidden_layers.len() - 1;
    assert_eq!(out.data, cache[&hname(hidden_layers[last])].data);
    let (as_, av) = f32s(&st, "attn");
    let h = as_[2];
    let mut worst_a = 0.0f64;
    for (k, &l) in attn_layers.iter().enumerate() {
        let got = &cache[&format!("blocks.{l}.attn.hook_pattern")].data;
        for b in 0..nb {
            for hd in 0..h {
                for q in (0..t).filter(|&q| real(b, q)) {
                    for j in 0..t {
                        let at = ((b * h + hd) * t + q) * t + j;
                        worst_a = worst_a.max((got[at] - av[k * nb * h * t * t + at] as f64).abs());
                    }
                }
            }
        }
    }
    eprintln!("max |hidden diff| {worst_h:.2e}, max |attention diff| {worst_a:.2e}");
    assert!(worst_h < 1e-4, "hidden states differ by {worst_h:e}");
    assert!(worst_a < 1e-5, "attention differs by {worst_a:e}");
}

/// A temp folder with links to the real files, except `replace` (name, contents)
/// and `omit`.
fn broken_copy(dir: &Path, replace: &[(&str, &[u8])], omit: &[&str]) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for f in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "vocab.txt",
    ] {
        if omit.contains(&f) || replace.iter().any(|(n, _)| *n == f) {
            continue;
        }
        std::os::unix::fs::symlink(dir.join(f), tmp.path().join(f)).unwrap();
    }
    for (n, bytes) in replace {
        std::fs::write(tmp.path().join(n), bytes).unwrap();
    }
    tmp
}

fn one_line_naming(msg: &str, file: &str) {
    assert!(!msg.contains('\n'), "not one line: {msg}");
    assert!(msg.contains(file), "does not name {file}: {msg}");
}

#[test]
fn broken_folders_give_one_line_errors_naming_the_file() {
    let Some(dir) = model_dir() else { return };
    // A truncated model.safetensors (the first 1 MB of the real one).
    let head = {
        use std::io::Read;
        let mut b = vec![0u8; 1 << 20];
        std::fs::File::open(dir.join("model.safetensors"))
            .unwrap()
            .read_exact(&mut b)
            .unwrap();
        b
    };
    let tmp = broken_copy(&dir, &[("model.safetensors", &head)], &[]);
    let e = Bert::load(tmp.path()).err().unwrap().to_string();
    one_line_naming(&e, "model.safetensors");
    eprintln!("{e}");
    // Garbage instead of a safetensors header.
    let tmp = broken_copy(
        &dir,
        &[("model.safetensors", b"\xff\xff\xff\xff\xff\xff\xff\x7fjunk")],
        &[],
    );
    one_line_naming(
        &Bert::load(tmp.path()).err().unwrap().to_string(),
        "model.safetensors",
    );
    // An unsupported activation.
    let cfg = std::fs::read_to_string(dir.join("config.json"))
        .unwrap()
        .replace("\"gelu\"", "\"relu\"");
    let tmp = broken_copy(&dir, &[("config.json", cfg.as_bytes())], &[]);
    let e = Bert::load(tmp.path()).err().unwrap().to_string();
    one_line_naming(&e, "config.json");
    assert!(e.contains("hidden_act") && e.contains("relu"), "{e}");
    eprintln!("{e}");
    // No tokenizer.json: the vocab.txt fallback gives the same ids...
    let tmp = broken_copy(&dir, &[], &["tokenizer.json"]);
    let text = "Photosynthesis converts light energy, e.g. sunlight.";
    let fallback = PretrainedTokenizer::from_dir(tmp.path()).unwrap();
    let real = PretrainedTokenizer::from_dir(&dir).unwrap();
    assert_eq!(
        fallback.encode(text, 64).unwrap(),
        real.encode(text, 64).unwrap()
    );
    // ...and neither file is an error naming tokenizer.json (and vocab.txt).
    let tmp = broken_copy(&dir, &[], &["tokenizer.json", "vocab.txt"]);
    let e = PretrainedTokenizer::from_dir(tmp.path())
        .err()
        .unwrap()
        .to_string();
    one_line_naming(&e, "tokenizer.json");
    one_line_naming(&e, "vocab.txt");
    eprintln!("{e}");
    // A corrupt tokenizer.json, and an empty vocab.txt without one.
    let tmp = broken_copy(&dir, &[("tokenizer.json", b"{\"model\": 3")], &[]);
    one_line_naming(
        &PretrainedTokenizer::from_dir(tmp.path())
            .err()
            .unwrap()
            .to_string(),
        "tokenizer.json",
    );
    let tmp = broken_copy(&dir, &[("vocab.txt", b"")], &["tokenizer.json"]);
    one_line_naming(
        &PretrainedTokenizer::from_dir(tmp.path())
            .err()
            .unwrap()
            .to_string(),
        "vocab.txt",
    );
}
