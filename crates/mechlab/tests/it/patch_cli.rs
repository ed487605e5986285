//! `mechlab patch`: the sweep's cells are the patched forwards they say, the
//! attribution estimate comes beside them, and bad inputs get one-line errors.

use crate::support;
use mechlab_engine::hooks::{Ablation, Batch, Hook};
use std::path::Path;

fn cli(args: &[&str]) -> anyhow::Result<i32> {
    let mut v = vec!["mechlab", "--quiet"];
    v.extend_from_slice(args);
    mechlab::cli::run(mechlab::papers::registry(), v)
}

fn save(path: &Path, ids: &[u32], shape: [u64; 2]) {
    use npyz::WriterBuilder;
    let mut w = npyz::WriteOptions::new()
        .default_dtype()
        .shape(&shape)
        .writer(std::fs::File::create(path).unwrap())
        .begin_nd()
        .unwrap();
    w.extend(ids.iter().map(|&x| i64::from(x))).unwrap();
    w.finish().unwrap();
}

#[test]
fn patch_writes_the_sweep_and_its_attribution() {
    let (_, dir) = support::run_kept(
        "transformer",
        "transformer",
        &["train.steps=60", "run.probe_every=30"],
    );
    let run = dir.path().join("run");
    let (b, t) = (4usize, 16usize);
    let clean: Vec<u32> = (0..b * t).map(|i| ((i * 7 + i / t) % 32) as u32).collect();
    let mut corrupted = clean.clone();
    for s in 0..b {
        for p in (0..t / 2).step_by(2) {
            corrupted[s * t + p] = (corrupted[s * t + p] + 5) % 32;
        }
    }
    let (cp, xp) = (dir.path().join("clean.npy"), dir.path().join("corr.npy"));
    save(&cp, &clean, [b as u64, t as u64]);
    save(&xp, &corrupted, [b as u64, t as u64]);
    let out = dir.path().join("patching");
    let args = [
        "patch",
        run.to_str().unwrap(),
        "--clean",
        cp.to_str().unwrap(),
        "--corrupted",
        xp.to_str().unwrap(),
        "--metric",
        "logit-diff:3,4@15",
        "--kind",
        "head_out",
        "--kind",
        "resid_pre",
        "--out",
        out.to_str().unwrap(),
    ];
    assert_eq!(cli(&args).unwrap(), 0);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("patching.json")).unwrap()).unwrap();
    assert!(out.join("patching.html").exists());
    let heads = &json["sweeps"][0];
    assert_eq!(heads["kind"], "head_out");
    assert_eq!(heads["shape"], serde_json::json!([2, 4]));
    assert!(heads["correlation"].as_f64().unwrap().is_finite());
    // cell (1, 2): head 2 of layer 1's clean output patched into the corrupted run
    let reg = mechlab::papers::registry();
    let mut m = mechlab::inspect::load_model(&reg, &run, None).unwrap();
    let (cb, xb) = (Batch::new(clean, b, t), Batch::new(corrupted, b, t));
    let (_, cache) = m.run_with_cache(&cb, &["blocks.1.attn.hook_z"]).unwrap();
    let diff = |y: &mechlab_engine::hooks::Tensor| -> f64 {
        (0..b)
            .map(|s| {
                let at = (s * t + 15) * y.shape[2];
                y.data[at + 3] - y.data[at + 4]
            })
            .sum::<f64>()
            / b as f64
    };
    let hook = Hook {
        name: "blocks.1.attn.hook_z".into(),
        ablation: Ablation::patch(cache["blocks.1.attn.hook_z"].clone()),
        heads: Some(vec![2]),
        positions: None,
    };
    let patched = diff(&m.run_with_hooks(&xb, &[hook]).unwrap());
    let (c, x) = (
        heads["clean"].as_f64().unwrap(),
        heads["corrupted"].as_f64().unwrap(),
    );
    assert_eq!(c, diff(&m.run_with_cache(&cb, &[]).unwrap().0));
    let want = (patched - x) / (c - x);
    let got = heads["patching"][6].as_f64().unwrap();
    assert!((got - want).abs() < 1e-12, "{got} vs {want}");
    assert_eq!(json["sweeps"][1]["shape"], serde_json::json!([2, 16]));
    for s in json["sweeps"].as_array().unwrap() {
        let n = |k: &str| s[k].as_array().unwrap().len();
        assert_eq!(
            n("attribution"),
            n("patching"),
            "{}: one estimate per cell",
            s["kind"]
        );
    }
    let report = || std::fs::read_to_string(run.join("report.html")).unwrap_or_default();
    assert!(
        !report().contains("mechlab patch</code> with"),
        "--out elsewhere leaves the run's report"
    );

    // into the run's folder: its report gains the section, once, and keeps
    // it when rebuilt
    assert_eq!(cli(&args[..args.len() - 2]).unwrap(), 0);
    assert!(run.join("patching").join("patching.json").exists());
    assert!(run.join("figures").join("patching_head_out.svg").exists());
    let count = |html: &str| html.matches("id=\"fig-patching_head_out\"").count();
    assert_eq!(count(&report()), 1, "one heatmap per figure");
    assert!(report().contains("mechlab patch</code> with"));
    assert_eq!(cli(&["report", run.to_str().unwrap()]).unwrap(), 0);
    assert_eq!(count(&report()), 1, "rebuilt, still once");

    // intervene: every head ablated (in parallel, resumed at its layer) gives
    // the same loss as the top head's ablation run on its own
    assert_eq!(cli(&["intervene", run.to_str().unwrap()]).unwrap(), 0);
    let iv: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("intervene.json")).unwrap())
            .unwrap();
    let every = &iv["every_head"];
    let change: Vec<f64> = serde_json::from_value(every["loss_change"].clone()).unwrap();
    assert_eq!(change.len(), 8);
    assert!(every["correlation"].as_f64().unwrap().is_finite());
    let top = &iv["effects"][0];
    let label = top["intervention"].as_str().unwrap();
    let (l, h) = label[1..].split_once('H').unwrap();
    let (l, h): (usize, usize) = (l.parse().unwrap(), h[..1].parse().unwrap());
    let (clean_loss, hit) = (
        top["clean"].as_f64().unwrap(),
        top["intervened"].as_f64().unwrap(),
    );
    assert!(
        (clean_loss + change[l * 4 + h] - hit).abs() < 1e-9,
        "{label}: {hit} vs {clean_loss} + {}",
        change[l * 4 + h]
    );
    assert!(run
        .join("figures")
        .join("intervene_every_head.svg")
        .exists());

    // errors name what is wrong
    let short = dir.path().join("short.npy");
    save(&short, &[1, 2, 3], [1, 3]);
    let mut bad = args;
    bad[5] = short.to_str().unwrap();
    let e = format!("{:#}", cli(&bad).unwrap_err());
    assert!(
        e.contains("is [4, 16]") && e.contains("is [1, 3]: a patch needs one shape"),
        "{e}"
    );
    let mut bad = args;
    bad[7] = "logit-diff:3,4@40";
    let e = format!("{:#}", cli(&bad).unwrap_err());
    assert!(e.contains("position 40 is past the sequence of 16"), "{e}");
    let mut bad = args;
    bad[11] = "mlp_out";
    let e = format!("{:#}", cli(&bad).unwrap_err());
    assert!(e.contains("blocks.0.hook_mlp_out"), "{e}");
    let mut bad = args;
    bad[7] = "accuracy";
    let e = format!("{:#}", cli(&bad).unwrap_err());
    assert!(e.contains("--metric \"accuracy\""), "{e}");
}

/// The pretrained encoder from the shared models folder: its heads patched and
/// attributed from the command line, a metric on two entries of its output.
#[test]
fn patch_runs_on_the_pretrained_encoder() {
    let model =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/models/all-MiniLM-L6-v2");
    assert!(
        model.join("model.safetensors").is_file(),
        "{} is absent",
        model.display()
    );
    let dir = tempfile::tempdir().unwrap();
    // [CLS] a few word pieces [SEP]; the corrupted swaps two of them
    let clean: Vec<u32> = vec![101, 1996, 4937, 2938, 2006, 1996, 13523, 102];
    let mut corrupted = clean.clone();
    corrupted[3] = 2743;
    corrupted[6] = 3899;
    let (cp, xp) = (dir.path().join("clean.npy"), dir.path().join("corr.npy"));
    save(&cp, &clean, [1, 8]);
    save(&xp, &corrupted, [1, 8]);
    let out = dir.path().join("out");
    let mut args = vec![
        "patch",
        model.to_str().unwrap(),
        "--clean",
        cp.to_str().unwrap(),
        "--corrupted",
        xp.to_str().unwrap(),
        "--metric",
        "logit-diff:0,1@0",
        "--out",
        out.to_str().unwrap(),
    ];
    assert_eq!(cli(&args).unwrap(), 0);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("patching.json")).unwrap()).unwrap();
    let heads = &json["sweeps"][0];
    assert_eq!(heads["shape"], serde_json::json!([6, 12]));
    // the heatmaps name the clean tokens by their pieces
    assert_eq!(heads["positions"][0], "0 [CLS]");
    assert_eq!(heads["positions"][7], "7 [SEP]");
    let (p, a) = (
        heads["patching"].as_array().unwrap(),
        heads["attribution"].as_array().unwrap(),
    );
    assert_eq!(p.len(), a.len());
    assert!(p.iter().chain(a).all(|v| v.as_f64().unwrap().is_finite()));
    args[7] = "loss";
    let e = format!("{:#}", cli(&args).unwrap_err());
    assert!(
        e.contains("--metric loss") && e.contains("hidden states"),
        "{e}"
    );
}
