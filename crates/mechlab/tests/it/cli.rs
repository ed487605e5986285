//! The command line as a user drives it: run folders, report rebuilds, errors,
//! sweeps with shards, export. Uses the cheapest preset (synthetic token selection).

use std::path::{Path, PathBuf};

use crate::support::cli as support;
use support::{mechlab, ok};

/// A failing command's stderr: one line, no panic, exit code 1.
fn fails(dir: &Path, args: &[&str]) -> String {
    let out = mechlab(dir, args);
    let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
    assert_eq!(out.status.code(), Some(1), "mechlab {args:?}: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err.lines().count(), 1, "one-line error expected: {err}");
    err
}

const SMALL: &[&str] = &[
    "--set",
    "synthetic.n_train=128",
    "--set",
    "synthetic.n_test=64",
];

fn run_small(dir: &Path, out: &str, extra: &[&str]) -> PathBuf {
    let mut args = vec!["run", "selection-synthetic", "--out", out];
    args.extend_from_slice(SMALL);
    args.extend_from_slice(extra);
    ok(dir, &args);
    dir.join(out)
}

#[test]
fn list_shows_every_preset_with_a_description() {
    let tmp = tempfile::tempdir().unwrap();
    let out = ok(tmp.path(), &["list"]);
    for p in mechlab::papers::registry().presets() {
        let line = out
            .lines()
            .find(|l| l.starts_with(p.name))
            .unwrap_or_else(|| panic!("{} not listed", p.name));
        assert!(line.len() > p.name.len() + 20, "no description: {line}");
    }
}

#[test]
fn run_writes_the_run_folder_and_report_rebuilds_from_it() {
    let tmp = tempfile::tempdir().unwrap();
    let run = run_small(tmp.path(), "r", &[]);
    for f in [
        "config.toml",
        "run.json",
        "metrics.jsonl",
        "summary.json",
        "report.html",
        "report.md",
        "timing.json",
    ] {
        assert!(run.join(f).is_file(), "{f} missing");
    }
    let cfg = std::fs::read_to_string(run.join("config.toml")).unwrap();
    // The command line is data in run.json, not a comment in the config.
    assert!(!cfg.starts_with('#'), "{cfg}");
    let origin = mechlab::run::read_origin(&run).expect("run.json");
    assert!(
        origin
            .command
            .join(" ")
            .contains("selection-synthetic --out r"),
        "{origin:?}"
    );
    assert_eq!(origin.version, env!("CARGO_PKG_VERSION"));
    assert!(cfg.contains("n_train = 128"));
    // Log-spaced checkpoints from step 0.
    for s in [0, 1, 2, 4, 512] {
        assert!(
            run.join(format!("checkpoints/step_{s:06}.safetensors"))
                .is_file(),
            "checkpoint {s}"
        );
    }
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap();
    let keys: Vec<&String> = summary.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["experiment", "measurements", "metrics", "seed", "verdicts"]
    );
    assert!(!summary["verdicts"].as_array().unwrap().is_empty());
    for v in summary["verdicts"].as_array().unwrap() {
        for k in ["id", "claim", "prediction", "source", "measured", "pass"] {
            assert!(v.get(k).is_some(), "verdict lacks {k}");
        }
        for k in ["id", "source"] {
            assert!(
                !v[k].as_str().unwrap_or_default().is_empty(),
                "verdict {} has no {k}",
                v["claim"]
            );
        }
    }
    let figs: Vec<PathBuf> = std::fs::read_dir(run.join("figures"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    assert!(!figs.is_empty());

    // Remove every rendered file; `report` must rebuild them from the folder alone.
    let html_before = std::fs::read_to_string(run.join("report.html")).unwrap();
    std::fs::remove_file(run.join("report.html")).unwrap();
    std::fs::remove_file(run.join("report.md")).unwrap();
    for f in &figs {
        std::fs::remove_file(f.with_extension("svg")).unwrap();
        std::fs::remove_file(f.with_extension("png")).unwrap();
    }
    ok(tmp.path(), &["report", "r"]);
    let html = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert_eq!(html, html_before);
    for f in &figs {
        assert!(f.with_extension("svg").is_file() && f.with_extension("png").is_file());
    }
    assert!(!html.contains("src=\"http"), "report must work offline");
}

#[test]
fn same_seed_gives_identical_results_and_another_seed_does_not() {
    let tmp = tempfile::tempdir().unwrap();
    let a = run_small(tmp.path(), "a", &["--seed", "3"]);
    let b = run_small(tmp.path(), "b", &["--seed", "3"]);
    let c = run_small(tmp.path(), "c", &["--seed", "4"]);
    let read = |d: &Path, f: &str| std::fs::read(d.join(f)).unwrap();
    assert_eq!(read(&a, "summary.json"), read(&b, "summary.json"));
    assert_eq!(read(&a, "metrics.jsonl"), read(&b, "metrics.jsonl"));
    assert_eq!(
        read(&a, "checkpoints/step_002001.safetensors"),
        read(&b, "checkpoints/step_002001.safetensors")
    );
    assert_ne!(read(&a, "metrics.jsonl"), read(&c, "metrics.jsonl"));
}

#[test]
fn bad_input_gives_one_line_errors_naming_the_file_or_key() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let e = fails(d, &["run", "selection-synthetic", "--set", "train.lrr=1"]);
    assert!(
        e.contains("`train.lrr`") && e.contains("did you mean `train.lr`"),
        "{e}"
    );
    let e = fails(
        d,
        &["run", "selection-synthetic", "--set", "model.d_model=wide"],
    );
    assert!(e.contains("model.d_model") && e.contains("integer"), "{e}");
    std::fs::write(d.join("bad.toml"), "experiment = \"selection\"\nseed = [\n").unwrap();
    let e = fails(d, &["run", "bad.toml"]);
    assert!(e.contains("bad.toml") && e.contains("line 2"), "{e}");
    std::fs::write(
        d.join("typo.toml"),
        "experiment = \"selection\"\n[modle]\nd_model = 4\n",
    )
    .unwrap();
    let e = fails(d, &["run", "typo.toml"]);
    assert!(e.contains("typo.toml") && e.contains("`modle"), "{e}");
    // --data sets each experiment's own data key; a missing corpus is named.
    let e = fails(d, &["run", "selection-imdb", "--data", "no/such/imdb"]);
    assert!(e.contains("no/such/imdb"), "{e}");
    let e = fails(
        d,
        &["run", "topic-wikipedia", "--data", "no/such/wiki.json"],
    );
    assert!(e.contains("no/such/wiki.json"), "{e}");
    let e = fails(d, &["run", "selection-synthetik"]);
    assert!(e.contains("did you mean `selection-synthetic`"), "{e}");

    // A truncated newest checkpoint is named and passed over for the one before;
    // with none left the run starts over. Both resumes succeed.
    let run = run_small(d, "r", &[]);
    let cks = mechlab::run::checkpoint::list(&run.join("checkpoints"));
    let (_, last) = cks.last().unwrap();
    let bytes = std::fs::read(last).unwrap();
    std::fs::write(last, &bytes[..bytes.len() / 3]).unwrap();
    let out = mechlab(d, &["resume", "r"]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{e}");
    let name = last.file_name().unwrap().to_string_lossy().into_owned();
    assert!(e.contains(&name) && e.contains("truncated"), "{e}");
    assert!(e.contains("resuming from"), "{e}");
    for (_, p) in mechlab::run::checkpoint::list(&run.join("checkpoints")) {
        std::fs::remove_file(p).unwrap();
    }
    let out = mechlab(d, &["resume", "r"]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{e}");
    assert!(e.contains("starts over"), "{e}");
    let e = fails(d, &["resume", "nowhere"]);
    assert!(e.contains("nowhere"), "{e}");
}

#[test]
fn sweep_writes_index_and_summary_and_shards_merge_to_the_same_summary() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let base = [
        "sweep",
        "selection-synthetic",
        "--grid",
        "model.d_model=16,32",
        "--seeds",
        "0..2",
    ];
    let with = |extra: &[&str]| {
        let mut a: Vec<&str> = base.to_vec();
        a.extend_from_slice(SMALL);
        a.extend_from_slice(extra);
        a.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let call = |extra: &[&str]| {
        let a = with(extra);
        ok(d, &a.iter().map(|s| s.as_str()).collect::<Vec<_>>());
    };
    call(&["--out", "full"]);
    call(&["--out", "s0", "--shard", "0/2"]);
    call(&["--out", "s1", "--shard", "1/2"]);
    ok(d, &["merge", "s0", "s1", "--out", "merged"]);
    let index = std::fs::read_to_string(d.join("full/index.csv")).unwrap();
    assert_eq!(index.lines().count(), 5, "{index}");
    assert!(index.starts_with("run,point,seed,grid:model.d_model,status,"));
    let summary = std::fs::read_to_string(d.join("full/summary.csv")).unwrap();
    assert!(summary.starts_with("grid:model.d_model,metric,n,mean,std,min,max"));
    assert!(
        summary.lines().any(|l| l.starts_with("16,test_acc,2,")),
        "{summary}"
    );
    assert_eq!(
        summary,
        std::fs::read_to_string(d.join("merged/summary.csv")).unwrap()
    );
    assert_eq!(
        index,
        std::fs::read_to_string(d.join("merged/index.csv")).unwrap()
    );
    let s0 = std::fs::read_to_string(d.join("s0/index.csv")).unwrap();
    assert_eq!(s0.lines().count(), 3);
}

#[test]
fn export_writes_npy_files_numpy_can_read() {
    let tmp = tempfile::tempdir().unwrap();
    let run = run_small(tmp.path(), "r", &[]);
    let out = ok(tmp.path(), &["export", "r", "--npy"]);
    assert!(out.lines().count() >= 3, "{out}");
    let npy = std::fs::read(run.join("export/embed.W_E.npy")).unwrap();
    assert_eq!(&npy[..6], b"\x93NUMPY");
    let hlen = u16::from_le_bytes([npy[8], npy[9]]) as usize;
    let header = std::str::from_utf8(&npy[10..10 + hlen]).unwrap();
    assert!(
        header.contains("'descr': '<f8'") && header.contains("'shape': ("),
        "{header}"
    );
    let shape: Vec<usize> = header
        .split("'shape': (")
        .nth(1)
        .unwrap()
        .split(')')
        .next()
        .unwrap()
        .split(',')
        .filter_map(|x| x.trim().parse().ok())
        .collect();
    assert_eq!(npy.len() - 10 - hlen, shape.iter().product::<usize>() * 8);
    // The recorded activations come out under their TransformerLens hook names.
    let pat = std::fs::read(run.join("export/blocks.0.attn.hook_pattern.npy")).unwrap();
    let hlen = u16::from_le_bytes([pat[8], pat[9]]) as usize;
    let header = std::str::from_utf8(&pat[10..10 + hlen]).unwrap();
    assert!(header.contains("'shape': (64, 1, 1, "), "{header}");
}

#[test]
fn a_sweep_folder_continues_the_same_sweep_and_refuses_another() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let sweep = |extra: &[&str]| {
        let mut a = vec!["sweep", "selection-synthetic", "--out", "sw"];
        a.extend_from_slice(SMALL);
        a.extend_from_slice(extra);
        a.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    fn strs(a: &[String]) -> Vec<&str> {
        a.iter().map(|s| s.as_str()).collect()
    }
    let first = sweep(&["--seeds", "0..2"]);
    ok(d, &strs(&first));
    let sw = d.join("sw");
    let index = std::fs::read_to_string(sw.join("index.csv")).unwrap();
    let done = sw.join("runs/p0-s0/metrics.jsonl");
    let (log, stamp) = (
        std::fs::read(&done).unwrap(),
        std::fs::metadata(&done).unwrap().modified().unwrap(),
    );
    std::fs::write(sw.join("runs/p0-s0/mine.txt"), "a user's note").unwrap();
    std::fs::write(sw.join("mine.txt"), "a user's note").unwrap();
    // A run cut short before its summary: the same sweep again finishes it, the
    // finished run is read, not rerun, and nothing a user wrote is lost.
    std::fs::remove_file(sw.join("runs/p0-s1/summary.json")).unwrap();
    ok(d, &strs(&first));
    assert_eq!(
        std::fs::read_to_string(sw.join("index.csv")).unwrap(),
        index
    );
    assert_eq!(std::fs::read(&done).unwrap(), log);
    assert_eq!(std::fs::metadata(&done).unwrap().modified().unwrap(), stamp);
    assert!(sw.join("runs/p0-s1/summary.json").is_file());
    assert!(sw.join("runs/p0-s0/mine.txt").is_file());

    // Another sweep into the folder is refused, each difference named, and the
    // folder is left as it was.
    let other = sweep(&["--seeds", "0..3", "--set", "train.steps=5"]);
    let e = fails(d, &strs(&other));
    assert!(e.contains("sweep.json"), "{e}");
    assert!(e.contains("--seeds was [0, 1], now [0, 1, 2]"), "{e}");
    assert!(e.contains("--set was"), "{e}");
    assert!(e.contains("--replace"), "{e}");
    assert_eq!(
        std::fs::read_to_string(sw.join("index.csv")).unwrap(),
        index
    );
    assert!(!sw.join("runs/p0-s2").exists());

    // --replace starts over, deleting the sweep's results and nothing else.
    let mut replace = sweep(&["--seeds", "0..3"]);
    replace.push("--replace".into());
    ok(d, &strs(&replace));
    let index3 = std::fs::read_to_string(sw.join("index.csv")).unwrap();
    assert_eq!(index3.lines().count(), 4, "{index3}");
    assert!(sw.join("mine.txt").is_file());
    assert!(!sw.join("runs/p0-s0/mine.txt").exists());

    // Results without a sweep.json (an older mechlab's) are not taken over.
    std::fs::remove_file(sw.join("sweep.json")).unwrap();
    let e = fails(d, &strs(&sweep(&["--seeds", "0..3"])));
    assert!(e.contains("no sweep.json"), "{e}");
    // The index lists the planned runs only, whatever else is under runs/.
    std::fs::create_dir_all(sw.join("runs/p9-s9")).unwrap();
    ok(d, &strs(&sweep(&["--seeds", "1", "--replace"])));
    let index1 = std::fs::read_to_string(sw.join("index.csv")).unwrap();
    assert_eq!(index1.lines().count(), 2, "{index1}");
}
