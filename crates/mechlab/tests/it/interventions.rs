//! Training-time interventions (`[[interventions]]`) and `mechlab intervene`,
//! driven through the binary on a small induction run.

use mechlab::inspect::load_model;
use mechlab_engine::hooks::{Ablation, Batch, Hook};
use std::path::Path;

use crate::support::cli as support;
use support::{mechlab, ok};

const BASE: &str = "experiment = \"induction\"\n\
[data]\nn_train = 64\nn_val = 40\nseq_len = 20\n\
[train]\nsteps = 8\noptimizer = \"adamw\"\nlr = 0.05\nweight_decay = 0.1\n\
[probe]\ngen_lengths = [10]\ngen_alphas = [0.1]\ngen_n = 16\n";

fn config(dir: &Path, name: &str, interventions: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, format!("{BASE}{interventions}")).unwrap();
    path.display().to_string()
}

/// Layer 1's pattern (a function of W only) and layer 2's scores (W, C and a).
fn layers(run: &Path, step: u64) -> (Vec<f64>, Vec<f64>) {
    let mut m = load_model(&mechlab::papers::registry(), run, Some(step)).unwrap();
    let batch = Batch::new((0..20).map(|i| (i * 7 % 3) as u32).collect(), 1, 20);
    let names = [
        "blocks.0.attn.hook_pattern",
        "blocks.1.attn.hook_attn_scores",
    ];
    let (_, c) = m.run_with_cache(&batch, &names).unwrap();
    (c[names[0]].data.clone(), c[names[1]].data.clone())
}

#[test]
fn a_frozen_group_does_not_move_and_the_others_do() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let freeze =
        "[[interventions]]\nkind = \"freeze\"\nparams = \"layer1\"\nfrom_step = 0\nto_step = 4\n";
    let cfg = config(d, "frozen.toml", freeze);
    ok(d, &["run", &cfg, "--out", "frozen"]);
    let run = d.join("frozen");
    let (p0, s0) = layers(&run, 0);
    let (p4, s4) = layers(&run, 4);
    let (p8, _) = layers(&run, 8);
    assert_eq!(
        p0, p4,
        "W frozen for updates 1..=4 (AdamW with weight decay)"
    );
    assert_ne!(s0, s4, "C and a train meanwhile");
    assert_ne!(p4, p8, "W moves once the freeze ends");
    // the same run without the intervention moves W at once
    let cfg = config(d, "free.toml", "");
    ok(d, &["run", &cfg, "--out", "free"]);
    let (q0, _) = layers(&d.join("free"), 0);
    let (q4, _) = layers(&d.join("free"), 4);
    assert_eq!(q0, p0);
    assert_ne!(q0, q4);
}

#[test]
fn bad_interventions_are_refused_before_the_folder_exists() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    for (body, expect) in [
        (
            "params = \"QK\"\n",
            "interventions[0].params = \"QK\": allowed",
        ),
        (
            "params = \"W\"\nfrom_step = 5\nto_step = 5\n",
            "interventions[0].to_step = 5",
        ),
        ("params = \"W\"\nhead = 1\n", "head"),
    ] {
        let cfg = config(
            d,
            "bad.toml",
            &format!("[[interventions]]\nkind = \"freeze\"\n{body}"),
        );
        let out = mechlab(d, &["run", &cfg, "--out", "bad"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(expect), "{expect:?} not in {err}");
        assert!(!d.join("bad").exists(), "no folder for a refused config");
    }
    let cfg = config(
        d,
        "kind.toml",
        "[[interventions]]\nkind = \"melt\"\nparams = \"W\"\n",
    );
    let err =
        String::from_utf8_lossy(&mechlab(d, &["run", &cfg, "--out", "bad"]).stderr).to_string();
    assert!(err.contains("melt") && err.contains("freeze"), "{err}");
}

#[test]
fn intervene_writes_json_figures_and_a_report_section() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let cfg = config(d, "run.toml", "");
    ok(
        d,
        &[
            "run",
            &cfg,
            "--out",
            "r",
            "--set",
            "train.steps=30",
            "--set",
            "train.lr=0.2",
        ],
    );
    let run = d.join("r");
    ok(
        d,
        &[
            "intervene",
            "r",
            "--ablate",
            "zero",
            "--ablate",
            "mean",
            "--patch",
        ],
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("intervene.json")).unwrap())
            .unwrap();
    let clean = v["val_nll"].as_f64().unwrap();
    let zero = v["ablation"]["zero"].as_array().unwrap();
    assert_eq!(zero.len(), 3);
    assert!(
        v["ablation"].get("resample").is_none(),
        "only the kinds asked for"
    );
    assert!(
        zero.iter().any(|x| x.as_f64().unwrap() != clean),
        "an ablation changes the loss"
    );
    // The copiers of the true parents, mean-ablated together, against as many
    // heads on other distances.
    let e = &v["effects"][0];
    assert_eq!(e["id"], "ablate-parent-copiers");
    let num = |k: &str| e[k].as_f64().unwrap();
    let (hit, control) = (
        num("intervened") - num("clean"),
        num("control") - num("clean"),
    );
    assert!(hit > 0.0 && control <= 0.25 * hit, "{e}");
    let eff = v["patching"]["effect"].as_array().unwrap();
    assert_eq!((eff.len(), eff[0].as_array().unwrap().len()), (3, 21));
    for f in ["intervene_ablation", "intervene_patching"] {
        assert!(
            run.join("figures").join(format!("{f}.json")).is_file(),
            "{f}"
        );
    }
    let notes = std::fs::read_to_string(run.join("notes.md")).unwrap();
    assert_eq!(notes.matches("## Interventions").count(), 1);
    assert!(std::fs::read_to_string(run.join("report.md"))
        .unwrap()
        .contains("Interventions"));
    // a second call replaces the section instead of adding one
    ok(d, &["intervene", "r", "--step", "0"]);
    let notes = std::fs::read_to_string(run.join("notes.md")).unwrap();
    assert_eq!(notes.matches("## Interventions").count(), 1);
    // bad requests are one-line errors
    let out = mechlab(d, &["intervene", "r", "--ablate", "melt"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("allowed: zero, mean, resample"));
}

/// `kind = "ablate"` runs on the direct path (chosen by `model.path = "auto"`):
/// the ablated head's layer-1 pattern never moves (no gradient, no weight decay
/// here) while the other heads' do, and the final loss differs from the same run
/// without the ablation. A table path or a head out of range is refused.
#[test]
fn an_ablated_head_gets_no_gradient_and_changes_the_run() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let no_decay = ["--set", "train.weight_decay=0.0"];
    let cfg = config(
        d,
        "ablate.toml",
        "[[interventions]]\nkind = \"ablate\"\nhead = 0\n",
    );
    ok(
        d,
        &[&["run", &cfg, "--out", "ablated"][..], &no_decay].concat(),
    );
    let free = config(d, "free.toml", "");
    ok(
        d,
        &[&["run", &free, "--out", "free"][..], &no_decay].concat(),
    );
    // hook_pattern [batch, head, query_pos, key_pos]: 20 × 20 per head
    let head = |p: &[f64], h: usize| p[h * 400..(h + 1) * 400].to_vec();
    let (p0, _) = layers(&d.join("ablated"), 0);
    let (p8, _) = layers(&d.join("ablated"), 8);
    assert_eq!(
        head(&p0, 0),
        head(&p8, 0),
        "the ablated head's pattern stays"
    );
    assert_ne!(head(&p0, 1), head(&p8, 1), "the others train");
    let summary = |r: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(d.join(r).join("summary.json")).unwrap())
            .unwrap()
    };
    let (a, f) = (summary("ablated"), summary("free"));
    assert_ne!(a["metrics"]["val_code_loss"], f["metrics"]["val_code_loss"]);
    // Loading the run gives the model it trained: the ablation is in force again,
    // so zero-ablating the head's output once more changes nothing, while on the
    // free run it changes the logits (the check fails if load drops the ablation).
    let batch = Batch::new((0..20).map(|i| (i * 7 % 3) as u32).collect(), 1, 20);
    let zero_head0 = [Hook {
        name: "blocks.0.attn.hook_z_unit".into(),
        ablation: Ablation::Zero,
        heads: Some(vec![0]),
        positions: None,
    }];
    for (run, ablated) in [("ablated", true), ("free", false)] {
        let mut m = load_model(&mechlab::papers::registry(), &d.join(run), None).unwrap();
        let (own, _) = m.run_with_cache(&batch, &[]).unwrap();
        let zeroed = m.run_with_hooks(&batch, &zero_head0).unwrap();
        let diff = own
            .data
            .iter()
            .zip(&zeroed.data)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        assert_eq!(diff < 1e-12, ablated, "{run}: max |Δ logit| {diff:e}");
    }
    let far = config(
        d,
        "far.toml",
        "[[interventions]]\nkind = \"ablate\"\nhead = 3\n",
    );
    for (file, set, expect) in [
        (&cfg, "model.path=\"table\"", "needs the direct path"),
        (
            &far,
            "seed=0",
            "interventions[0].head = 3: must be below model.n_heads = 3",
        ),
    ] {
        let out = mechlab(d, &["run", file, "--out", "bad", "--set", set]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(expect), "{expect:?} not in {err}");
        assert!(!d.join("bad").exists());
    }
}

/// With layer 1 frozen for the whole run and a parent outside every head's
/// initial window, the run judges the frozen-copier claim instead of the
/// formation claims; frozen for part of the run, it judges the formation claims.
/// (The claim itself, with its free control, is the `induction-copier` pair in
/// `mechlab reproduce`: about 14 s each, too long for a test.)
#[test]
fn a_copier_frozen_throughout_is_judged_by_the_causal_claim() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let verdicts = |name: &str, body: &str| -> Vec<String> {
        let cfg = config(d, &format!("{name}.toml"), body);
        ok(
            d,
            &["run", &cfg, "--out", name, "--set", "data.parents=[1, 4]"],
        );
        let s: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(d.join(name).join("summary.json")).unwrap(),
        )
        .unwrap();
        s["verdicts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["claim"].as_str().unwrap().to_string())
            .collect()
    };
    let frozen = verdicts(
        "frozen",
        "[[interventions]]\nkind = \"freeze\"\nparams = \"W\"\n",
    );
    assert!(
        frozen
            .iter()
            .any(|c| c.starts_with("causal: with the layer-1 copier frozen")),
        "{frozen:?}"
    );
    assert!(
        !frozen.iter().any(|c| c.starts_with("selector")),
        "{frozen:?}"
    );
    let part = verdicts(
        "part",
        "[[interventions]]\nkind = \"freeze\"\nparams = \"W\"\nto_step = 4\n",
    );
    assert!(
        part.iter().any(|c| c.starts_with("selector: the winning")),
        "{part:?}"
    );
    assert!(
        !part.iter().any(|c| c.contains("copier frozen")),
        "{part:?}"
    );
}

/// `kind = "clamp"`: the head's probed pattern stays at its value from the state
/// the window opens to the state it closes while the other heads move, and a run
/// resumed from a checkpoint inside the window (the head's W has moved under
/// Adam's momentum by then) ends bit-identical to the uninterrupted one. The full
/// model and the table path are refused.
#[test]
fn a_clamped_pattern_holds_and_resumes_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let clamp = "[[interventions]]\nkind = \"clamp\"\nhead = 0\nfrom_step = 2\nto_step = 6\n";
    let cfg = config(d, "clamp.toml", clamp);
    let every = [
        "--set",
        "run.checkpoint_every=2",
        "--set",
        "run.probe_every=1",
    ];
    ok(d, &[&["run", &cfg, "--out", "a"][..], &every].concat());
    let rows: Vec<serde_json::Value> = std::fs::read_to_string(d.join("a/metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|r: &serde_json::Value| r.get("pattern.h0.d1").is_some())
        .collect();
    let at = |step: u64, key: &str| {
        rows.iter()
            .find(|r| r["step"] == step)
            .map(|r| r[key].as_f64().unwrap())
            .unwrap_or_else(|| panic!("no probe at {step}"))
    };
    for st in 3..=6 {
        assert_eq!(
            at(st, "pattern.h0.d1"),
            at(2, "pattern.h0.d1"),
            "state {st}"
        );
    }
    assert_ne!(
        at(6, "pattern.h1.d2"),
        at(2, "pattern.h1.d2"),
        "head 1 trains"
    );
    assert_ne!(
        at(8, "pattern.h0.d1"),
        at(6, "pattern.h0.d1"),
        "free again after 6"
    );
    // resume from state 4, inside the window
    ok(d, &[&["run", &cfg, "--out", "b"][..], &every].concat());
    for st in ["step_000006", "step_000008"] {
        std::fs::remove_file(d.join(format!("b/checkpoints/{st}.safetensors"))).unwrap();
    }
    std::fs::remove_file(d.join("b/summary.json")).unwrap();
    ok(d, &["resume", "b"]);
    let read = |r: &str, f: &str| std::fs::read_to_string(d.join(r).join(f)).unwrap();
    assert_eq!(read("a", "metrics.jsonl"), read("b", "metrics.jsonl"));
    let metrics = |r: &str| {
        serde_json::from_str::<serde_json::Value>(&read(r, "summary.json")).unwrap()["metrics"]
            .clone()
    };
    assert_eq!(metrics("a"), metrics("b"));
    for (set, expect) in [
        ("model.kind=\"full\"", "needs model.kind = \"simplified\""),
        ("model.path=\"table\"", "needs the direct path"),
    ] {
        let out = mechlab(d, &["run", &cfg, "--out", "bad", "--set", set]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(expect), "{expect:?} not in {err}");
    }
}
