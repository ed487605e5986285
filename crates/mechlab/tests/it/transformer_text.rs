//! The general experiment on a text file: by bytes (shown as characters) and
//! by a BPE trained on the file and kept in the run folder, which a resumed
//! run and the analysis read back rather than retrain.

use std::path::Path;

/// Sentences over a small vocabulary, so a 300-token BPE finds words.
fn write_text(path: &Path) {
    let words = [
        "the", "cat", "sat", "on", "mat", "a", "dog", "ran", "to", "hat",
    ];
    let mut rng = mechlab::rng::stream(3, mechlab::rng::Stream::Data);
    let mut s = String::new();
    while s.len() < 40_000 {
        for _ in 0..6 {
            s.push_str(words[rand::Rng::random_range(&mut rng, 0..words.len())]);
            s.push(' ');
        }
        s.push_str(".\n");
    }
    std::fs::write(path, s).unwrap();
}

fn sets(file: &Path, extra: &[&str]) -> Vec<String> {
    let mut v = vec![
        format!("data.file={:?}", file.display().to_string()),
        "data.seq_len=24".into(),
        "train.steps=40".into(),
        "run.probe_every=20".into(),
        "run.checkpoint_every=20".into(),
    ];
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn go(
    dir: &Path,
    sets: &[String],
    stop: Option<u64>,
) -> Result<mechlab::run::summary::Summary, String> {
    let reg = mechlab::papers::registry();
    let r =
        mechlab::commands::resolve(&reg, "transformer", sets, None).map_err(|e| e.to_string())?;
    let mut ctx = mechlab::run::RunCtx::create(dir, r.table.clone(), "test", true).unwrap();
    ctx.stop_at = stop;
    r.prepared
        .run(&mut ctx)
        .inspect(|s| ctx.finish(s).unwrap())
        .map_err(|e| e.to_string())
}

fn viewer_tokens(run: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(run.join("figures/attention.json")).unwrap();
    let fig: mechlab_report::Figure = serde_json::from_str(&text).unwrap();
    match fig.plot {
        mechlab_report::Plot::Attention { tokens, .. } => tokens,
        _ => panic!("not a viewer"),
    }
}

#[test]
fn a_text_file_trains_by_bytes_and_by_a_bpe_kept_with_the_run() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("text.txt");
    write_text(&file);
    let reg = mechlab::papers::registry();

    // bytes: the viewer shows characters
    let bytes = tmp.path().join("bytes");
    go(&bytes, &sets(&file, &[]), None).unwrap();
    let toks = viewer_tokens(&bytes);
    assert!(
        toks.iter().any(|t| t == "c") && toks.iter().any(|t| t == " "),
        "{toks:?}"
    );
    assert!(!bytes.join("tokenizer.json").exists());

    // a BPE of 300 tokens: trained once, kept, the same for the same file
    let bpe = sets(&file, &["data.tokenizer=\"bpe\"", "data.bpe_vocab=300"]);
    let whole = go(&tmp.path().join("a"), &bpe, None).unwrap();
    let kept = std::fs::read(tmp.path().join("a/tokenizer.json")).unwrap();
    let tk = tokenizers::Tokenizer::from_bytes(&kept).unwrap();
    // (the words' merges run out before 300 tokens)
    let v = tk.get_vocab_size(true);
    assert!((257..=300).contains(&v), "{v}");
    let toks = viewer_tokens(&tmp.path().join("a"));
    assert!(toks.iter().any(|t| t == "Ġcat"), "BPE tokens: {toks:?}");
    // the checkpoint's embedding has the tokenizer's vocabulary
    let ck = mechlab::run::checkpoint::load::<f32>(
        &mechlab::run::checkpoint::latest(&tmp.path().join("a/checkpoints")).unwrap(),
    )
    .unwrap();
    assert_eq!(ck.tensors["embed.W_E"].0, vec![v, 64]);

    // a resumed run reads the kept tokenizer back: the tokenizer file is
    // written once (its bytes and time unchanged) and the numbers are the same
    assert!(go(&tmp.path().join("b"), &bpe, Some(25)).is_err());
    let before = std::fs::metadata(tmp.path().join("b/tokenizer.json"))
        .unwrap()
        .modified()
        .unwrap();
    let resumed = mechlab::commands::resume(&reg, &tmp.path().join("b"), true).unwrap();
    assert_eq!(resumed, whole);
    let after = std::fs::metadata(tmp.path().join("b/tokenizer.json"))
        .unwrap()
        .modified()
        .unwrap();
    assert_eq!(before, after);
    assert_eq!(
        std::fs::read(tmp.path().join("b/tokenizer.json")).unwrap(),
        kept
    );
    // and so does the analysis, on the run's held-out windows
    let rec = mechlab::commands::intervene::measure(&reg, &tmp.path().join("a"), Some(20)).unwrap();
    assert!(rec["values"]["loss"].as_f64().unwrap().is_finite());

    let e = go(
        &tmp.path().join("bad"),
        &sets(&file, &["data.tokenizer=\"bpe\"", "data.bpe_vocab=100"]),
        None,
    )
    .unwrap_err();
    assert!(e.contains("data.bpe_vocab = 100"), "{e}");
}
