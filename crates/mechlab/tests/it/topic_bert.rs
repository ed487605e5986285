//! `topic-bert` shortened, on the shared model and Wikipedia file: it finishes with
//! its verdicts and figures, the embedding gap is positive and its shuffled control
//! is not, and a model folder with an unsupported config is a data error naming
//! the file. Skips when the shared model or data is absent.

use mechlab::run::RunCtx;
use std::path::{Path, PathBuf};

use crate::support::viewer;
use viewer::viewer_matches_activations;

fn model_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/models/all-MiniLM-L6-v2")
}

fn table(overrides: &[String]) -> toml::Table {
    let exp = mechlab::papers::registry().find("topic-bert").unwrap();
    let p = mechlab::papers::registry()
        .find_preset("topic-bert")
        .unwrap();
    let mut t = exp.default_config();
    mechlab::config::overlay(
        &mut t,
        &mechlab::config::parse(p.text, "topic-bert").unwrap(),
        "topic-bert",
    )
    .unwrap();
    for o in overrides {
        mechlab::config::apply_override(&mut t, o).unwrap();
    }
    t
}

#[test]
fn shortened_run_and_a_bad_model_folder() {
    let data = mechlab_corpora::wikipedia::data_root().join("wikipedia/vital_articles_en.json");
    if !data.exists() || !model_dir().join("model.safetensors").exists() {
        eprintln!("skipped: shared model or data absent");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut o: Vec<String> = [
        "wiki.n_words=600",
        "wiki.lda_iterations=30",
        "wiki.lda_burn_in=15",
        "wiki.n_dev=300",
        "probe.docs=24",
        "probe.random_pairs=2000",
        "probe.sentences=1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    o.push(format!("model.path=\"{}\"", model_dir().display()));
    let exp = mechlab::papers::registry().find("topic-bert").unwrap();
    let dir = tmp.path().join("run");
    let prepared = exp.prepare(&table(&o), "test").unwrap();
    let mut ctx = RunCtx::create(&dir, table(&o), "test", true).unwrap();
    let s = prepared.run(&mut ctx).unwrap();
    ctx.finish(&s).unwrap();
    assert_eq!(s.verdicts.len(), 8);
    let (g, c) = (
        s.metrics["lda_embedding_dot_gap"],
        s.metrics["lda_embedding_dot_gap_control"],
    );
    assert!(g > 0.0 && c.abs() < 0.25 * g, "gap {g}, control {c}");
    assert!(s.metrics["lda_attention_gap_layer0"].is_finite());
    // The permutation tests: the embedding gap of the real labels beats every
    // relabelling; the same tests with shuffled labels, where no topic can be,
    // do not (the control on which the gap verdicts fail).
    let embedding = s
        .verdicts
        .iter()
        .find(|v| v.id == "topic-bert.lda.embedding-gap")
        .unwrap();
    assert!(embedding.pass, "{embedding:?}");
    assert!(s.metrics["lda_perm.embedding_dot_gap_p"] <= 0.05);
    // The control verdicts' rule holds on the shuffled labels and fails when the
    // "shuffle" keeps the topics (the real labels in its place).
    use mechlab::papers::topic_bert::shuffle_shows_no_gap;
    for (k, kc) in [
        ("embedding_dot_gap", "embedding_dot_gap_control"),
        ("attention_gap_mean", "attention_gap_control_mean"),
    ] {
        let (g, c) = (
            s.metrics[&format!("lda_{k}")],
            s.metrics[&format!("lda_{kc}")],
        );
        assert!(shuffle_shows_no_gap(g, c, 0.25), "{k}: {g} vs {c}");
        assert!(!shuffle_shows_no_gap(g, g, 0.25));
    }
    for src in ["lda_shuffled", "gold_shuffled"] {
        for k in ["embedding_dot_gap", "attention_gap_mean"] {
            let p = s.metrics[&format!("{src}_perm.{k}_p")];
            assert!(p > 0.05, "{src} {k}: p = {p}");
        }
    }
    // Every head of the six layers, in the viewer and in the activation file alike.
    assert_eq!(viewer_matches_activations(&dir, "attention"), 72);
    // Inspecting the run gives the pretrained encoder it read (it trains nothing: step 0 only).
    let mut loaded =
        mechlab::inspect::load_model(&mechlab::papers::registry(), &dir, None).unwrap();
    let p = mechlab::pretrained::Pretrained::load(&model_dir().display().to_string()).unwrap();
    let (batch, _) = p.encode(&["Jazz is a music genre."]).unwrap();
    let mut fresh = p.model;
    use mechlab_engine::hooks::HookedModel;
    assert_eq!(
        loaded.run_with_cache(&batch, &[]).unwrap().0.data,
        fresh.run_with_cache(&batch, &[]).unwrap().0.data
    );
    assert!(matches!(
        mechlab::inspect::load_model(&mechlab::papers::registry(), &dir, Some(3)),
        Err(mechlab::inspect::LoadError::NoStep { step: 3, .. })
    ));
    for f in [
        "attention_gap_lda",
        "attention_gap_gold_shuffled",
        "embedding_dot_gold",
        "sentence0",
    ] {
        assert!(
            dir.join("figures").join(format!("{f}.json")).exists(),
            "{f}"
        );
    }

    // Intervene: removing every layer's attention on same-topic words shrinks
    // the output's topic gap; removing as many different-topic keys does not.
    let v = mechlab::commands::intervene::run(
        &mechlab::papers::registry(),
        &dir,
        &mechlab::analysis::Request::default(),
    )
    .unwrap();
    let effects = v["effects"].as_array().unwrap();
    assert_eq!(effects.len(), 3);
    let e = effects
        .iter()
        .find(|e| e["id"] == "same-topic-attention-embedding")
        .unwrap();
    let num = |k: &str| e[k].as_f64().unwrap();
    let (drop, control) = (
        num("clean") - num("intervened"),
        num("clean") - num("control"),
    );
    assert!(drop > 0.0 && control <= 0.25 * drop, "{e}");
    assert_eq!(v["ablated"].as_array().unwrap().len(), 12);
    assert!(std::fs::read_to_string(dir.join("report.md"))
        .unwrap()
        .contains("## Interventions"));

    // A copy of the folder whose config.json asks for another activation.
    let bad = tmp.path().join("model");
    std::fs::create_dir(&bad).unwrap();
    for f in ["model.safetensors", "tokenizer.json", "vocab.txt"] {
        std::os::unix::fs::symlink(model_dir().join(f), bad.join(f)).unwrap();
    }
    let cfg = std::fs::read_to_string(model_dir().join("config.json")).unwrap();
    std::fs::write(
        bad.join("config.json"),
        cfg.replace("\"gelu\"", "\"gelu_new\""),
    )
    .unwrap();
    let mut o2 = o.clone();
    o2.push(format!("model.path=\"{}\"", bad.display()));
    let prepared = exp.prepare(&table(&o2), "test").unwrap();
    let mut ctx = RunCtx::create(&tmp.path().join("bad"), table(&o2), "test", true).unwrap();
    let e = prepared.run(&mut ctx).err().unwrap().to_string();
    assert!(
        e.contains("config.json") && e.contains("hidden_act") && !e.contains('\n'),
        "{e}"
    );
}
