//! Cluster sweeps without a cluster: the sbatch scripts `mechlab sweep --slurm`
//! writes, what it submits (to a stand-in `sbatch` on PATH), and the shard, merge
//! and status steps run by hand. `scripts/slurm-test.sh` runs the same against a
//! real Slurm.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn mechlab_in(
    dir: &Path,
    path_prefix: Option<&Path>,
    env: &[(&str, &str)],
    args: &[&str],
) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_mechlab"));
    c.args(args).arg("--quiet").current_dir(dir);
    for k in [
        "SLURM_ARRAY_JOB_ID",
        "SLURM_ARRAY_TASK_ID",
        "SLURM_RESTART_COUNT",
    ] {
        c.env_remove(k);
    }
    if let Some(p) = path_prefix {
        let path = std::env::var("PATH").unwrap_or_default();
        c.env("PATH", format!("{}:{path}", p.display()));
    }
    c.envs(env.iter().copied());
    c.output().expect("mechlab runs")
}

fn ok(dir: &Path, args: &[&str]) -> String {
    ok_env(dir, None, &[], args)
}

fn ok_env(dir: &Path, path: Option<&Path>, env: &[(&str, &str)], args: &[&str]) -> String {
    let out = mechlab_in(dir, path, env, args);
    assert!(
        out.status.success(),
        "mechlab {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn read(p: PathBuf) -> String {
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

const SMALL: &[&str] = &[
    "--set",
    "synthetic.n_train=128",
    "--set",
    "synthetic.n_test=64",
];

/// A stand-in `sbatch` that records its arguments and answers like `--parsable`.
fn fake_sbatch(dir: &Path) -> PathBuf {
    let bin = dir.join("fakebin");
    std::fs::create_dir_all(&bin).unwrap();
    let script = bin.join("sbatch");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"$@\" >> {calls}\necho $((100 + $(wc -l < {calls})))\n",
            calls = dir.join("sbatch-calls").display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

#[test]
fn dry_run_writes_the_array_and_merge_scripts_and_submits_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let bin = fake_sbatch(d);
    let mut args = vec![
        "sweep",
        "selection-synthetic",
        "--grid",
        "model.d_model=16,32",
        "--seeds",
        "0..3",
        "--out",
        "sw",
        "--slurm",
        "--dry-run",
        "--partition",
        "short",
        "--time",
        "00:20:00",
        "--cpus-per-task",
        "2",
        "--mem",
        "2G",
        "--array-parallelism",
        "3",
        "--sbatch-arg=--account=lab",
        "--sbatch-arg",
        "--qos=low",
    ];
    args.extend_from_slice(SMALL);
    let out = ok_env(d, Some(&bin), &[], &args);
    assert!(out.contains("dry run, nothing submitted"), "{out}");
    assert!(!d.join("sbatch-calls").exists(), "--dry-run called sbatch");
    let sw = d.join("sw").canonicalize().unwrap();
    assert!(!sw.join("slurm/jobs.json").exists());
    let script = read(sw.join("slurm/array.sbatch"));
    let exe = Path::new(env!("CARGO_BIN_EXE_mechlab"))
        .canonicalize()
        .unwrap();
    let s = sw.display();
    for line in [
        "#!/bin/bash".to_string(),
        "#SBATCH --array=0-5%3".into(),
        format!("#SBATCH --output={s}/logs/%A_%a.out"),
        "#SBATCH --requeue".into(),
        "#SBATCH --open-mode=append".into(),
        "#SBATCH --cpus-per-task=2".into(),
        "#SBATCH --partition=short".into(),
        "#SBATCH --time=00:20:00".into(),
        "#SBATCH --mem=2G".into(),
        "#SBATCH --account=lab".into(),
        "#SBATCH --qos=low".into(),
        format!("MECHLAB='{}'", exe.display()),
        format!("WANT='mechlab {}'", env!("CARGO_PKG_VERSION")),
    ] {
        assert!(
            script.lines().any(|l| l == line),
            "no line `{line}` in:\n{script}"
        );
    }
    assert!(
        script.contains("--shard \"${SLURM_ARRAY_TASK_ID}/${SLURM_ARRAY_TASK_COUNT}\""),
        "{script}"
    );
    // Every #SBATCH line comes before the first command, or sbatch ignores it.
    let first_cmd = script
        .lines()
        .position(|l| !l.is_empty() && !l.starts_with('#'))
        .unwrap();
    assert!(script
        .lines()
        .skip(first_cmd)
        .all(|l| !l.starts_with("#SBATCH")));
    let merge = read(sw.join("slurm/merge.sbatch"));
    assert!(merge.contains(&format!("sweep-merge '{s}'")), "{merge}");
    assert!(merge.contains("#SBATCH --account=lab"), "{merge}");
    assert!(!merge.contains("--array"), "{merge}");

    // The plan records the runs and the shard count; the scripts run as a shell
    // would parse them.
    let plan = read(sw.join("sweep.json"));
    assert!(plan.contains("\"shards\": 6"), "{plan}");
    let syntax = Command::new("bash")
        .arg("-n")
        .arg(sw.join("slurm/array.sbatch"))
        .status()
        .unwrap();
    assert!(syntax.success());

    // --shards sets fewer tasks; a bad option names itself and leaves no folder.
    let mut a2 = args.clone();
    a2.retain(|a| *a != "--array-parallelism" && *a != "3");
    a2.extend_from_slice(&["--shards", "2"]);
    a2[7] = "sw2";
    ok_env(d, Some(&bin), &[], &a2);
    assert!(read(d.join("sw2/slurm/array.sbatch")).contains("#SBATCH --array=0-1\n"));
    let bad = mechlab_in(
        d,
        Some(&bin),
        &[],
        &[
            "sweep",
            "selection-synthetic",
            "--out",
            "sw3",
            "--slurm",
            "--time",
            "1h",
        ],
    );
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--time 1h"));
    assert!(!d.join("sw3").exists());
    let bad = mechlab_in(d, None, &[], &["sweep", "selection-synthetic", "--dry-run"]);
    assert_ne!(bad.status.code(), Some(0), "--dry-run needs --slurm");
}

#[test]
fn submit_sends_the_array_then_a_merge_that_depends_on_it() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let bin = fake_sbatch(d);
    let mut args = vec![
        "sweep",
        "selection-synthetic",
        "--grid",
        "model.d_model=16,32",
        "--seeds",
        "0..2",
        "--out",
        "sw",
        "--slurm",
    ];
    args.extend_from_slice(SMALL);
    let out = ok_env(d, Some(&bin), &[], &args);
    assert!(
        out.contains("submitted array job 101 and merge job 102"),
        "{out}"
    );
    let sw = d.join("sw").canonicalize().unwrap();
    let calls = read(d.join("sbatch-calls"));
    let calls: Vec<&str> = calls.lines().collect();
    assert_eq!(
        calls,
        [
            format!("--parsable {}/slurm/array.sbatch", sw.display()),
            format!(
                "--parsable --dependency=afterany:101 {}/slurm/merge.sbatch",
                sw.display()
            ),
        ]
    );
    let jobs = read(sw.join("slurm/jobs.json"));
    assert!(
        jobs.contains("\"array\": \"101\"") && jobs.contains("\"merge\": \"102\""),
        "{jobs}"
    );
    // Submitting the same sweep again reuses the folder; another sweep is refused.
    ok_env(d, Some(&bin), &[], &args);
    let other = mechlab_in(
        d,
        Some(&bin),
        &[],
        &[
            "sweep",
            "selection-synthetic",
            "--seeds",
            "5..6",
            "--out",
            "sw",
            "--slurm",
        ],
    );
    assert_eq!(other.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&other.stderr).contains("sweep.json"));
}

#[test]
fn shards_run_by_hand_merge_to_the_unsharded_summary_even_after_a_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let grid = [
        "selection-synthetic",
        "--grid",
        "model.d_model=16,32",
        "--seeds",
        "0..2",
    ];
    let mut full = vec!["sweep"];
    full.extend_from_slice(&grid);
    full.extend_from_slice(SMALL);
    full.extend_from_slice(&["--out", "full", "--jobs", "1"]);
    ok(d, &full);
    let mut plan = full.clone();
    plan.truncate(plan.len() - 4);
    plan.extend_from_slice(&["--out", "sw", "--slurm", "--dry-run", "--shards", "3"]);
    ok(d, &plan);
    for i in 0..3 {
        ok(d, &["sweep-shard", "sw", "--shard", &format!("{i}/3")]);
    }
    // As if a task were killed part-way through p1-s0: its result and later
    // checkpoints gone. The rerun resumes from the checkpoint that is left.
    let run = d.join("sw/runs/p1-s0");
    let cks = mechlab::run::checkpoint::list(&run.join("checkpoints"));
    assert!(cks.len() > 3, "{cks:?}");
    for (_, p) in &cks[3..] {
        std::fs::remove_file(p).unwrap();
    }
    for f in ["summary.json", "report.html", "report.md"] {
        std::fs::remove_file(run.join(f)).unwrap();
    }
    let wrong = mechlab_in(d, None, &[], &["sweep-shard", "sw", "--shard", "0/2"]);
    assert_eq!(wrong.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("plans 3 shards"));
    // Run index 2 (point 1, seed 0) belongs to shard 2 of 3.
    let rerun = mechlab_in(d, None, &[], &["sweep-shard", "sw", "--shard", "2/3"]);
    assert!(rerun.status.success());
    assert!(
        String::from_utf8_lossy(&rerun.stderr).contains("p1-s0: resumed from its checkpoints"),
        "{}",
        String::from_utf8_lossy(&rerun.stderr)
    );
    assert!(read(run.join("timing.json")).contains("\"resumed\":true"));
    let out = ok(d, &["sweep-merge", "sw"]);
    assert!(out.contains("4 of 4 runs ok, 0 failed, 0 missing"), "{out}");
    for f in ["index.csv", "summary.csv", "summary.json"] {
        assert_eq!(
            read(d.join("full").join(f)),
            read(d.join("sw").join(f)),
            "{f} differs"
        );
    }
    assert_eq!(read(d.join("sw/failed.csv")), "run,shard,status,log\n");
    let status = ok(d, &["sweep-status", "sw"]);
    assert!(
        status.contains("done     4") && status.contains("failed   0"),
        "{status}"
    );
}

#[test]
fn merge_reports_failed_and_missing_runs_with_their_logs_and_counts_them() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    // The imdb point fails at run time (no corpus there); its second run's task
    // never runs, as if killed before it started.
    let mut plan = vec![
        "sweep",
        "selection-synthetic",
        "--grid",
        "data.source=synthetic,imdb",
        "--seeds",
        "0..2",
        "--set",
        "data.path=\"/no/such/corpus\"",
        "--out",
        "sw",
        "--slurm",
        "--dry-run",
    ];
    plan.extend_from_slice(SMALL);
    ok(d, &plan);
    for i in 0..2 {
        ok(d, &["sweep-shard", "sw", "--shard", &format!("{i}/4")]);
    }
    let env = [("SLURM_ARRAY_JOB_ID", "41"), ("SLURM_ARRAY_TASK_ID", "2")];
    let failed = mechlab_in(d, None, &env, &["sweep-shard", "sw", "--shard", "2/4"]);
    assert_eq!(
        failed.status.code(),
        Some(1),
        "a task with a failed run fails"
    );

    let status = ok(d, &["sweep-status", "sw"]);
    for want in ["done     2", "pending  1", "failed   1", "failed: p1-s0"] {
        assert!(status.contains(want), "no `{want}` in:\n{status}");
    }

    let out = mechlab_in(d, None, &[], &["sweep-merge", "sw"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let sw = d.join("sw").canonicalize().unwrap();
    let log = format!("{}/logs/41_2.out", sw.display());
    assert!(
        stdout.contains("2 of 4 runs ok, 1 failed, 1 missing"),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("p1-s0") && l.contains("/no/such/corpus") && l.contains(&log)),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("p1-s1") && l.contains("missing") && l.contains("never started")),
        "{stdout}"
    );
    let failed_csv = read(sw.join("failed.csv"));
    assert_eq!(failed_csv.lines().count(), 3, "{failed_csv}");
    assert!(failed_csv.contains("p1-s0,2,error: ") && failed_csv.contains(&log));
    assert!(failed_csv.contains("p1-s1,3,missing,\n"), "{failed_csv}");

    let summary: serde_json::Value = serde_json::from_str(&read(sw.join("summary.json"))).unwrap();
    assert_eq!(
        summary["runs"],
        serde_json::json!({"planned": 4, "ok": 2, "failed": 1, "missing": 1})
    );
    let index = read(sw.join("index.csv"));
    assert!(
        index
            .lines()
            .any(|l| l.starts_with("p1-s1,1,1,imdb,missing")),
        "{index}"
    );
    let csv = read(sw.join("summary.csv"));
    assert!(
        csv.starts_with("grid:data.source,metric,n,mean,std,min,max,missing\n"),
        "{csv}"
    );
    assert!(
        csv.lines()
            .any(|l| l.starts_with("synthetic,test_acc,2,") && l.ends_with(",0")),
        "{csv}"
    );

    // Running the missing task turns it into a reported failure, not a gap.
    let late = mechlab_in(d, None, &[], &["sweep-shard", "sw", "--shard", "3/4"]);
    assert_eq!(late.status.code(), Some(1));
    let out = mechlab_in(d, None, &[], &["sweep-merge", "sw"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("2 of 4 runs ok, 2 failed, 0 missing"),
        "{stdout}"
    );
}

#[test]
fn status_uses_the_queue_to_tell_running_pending_and_failed_apart() {
    use mechlab::commands::cluster::{status, TaskState};
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let mut plan = vec![
        "sweep",
        "selection-synthetic",
        "--seeds",
        "0..4",
        "--out",
        "sw",
        "--slurm",
        "--dry-run",
    ];
    plan.extend_from_slice(SMALL);
    ok(d, &plan);
    let sw = d.join("sw");
    // Runs 0 and 1 have started (they have folders), 2 and 3 have not.
    for r in ["p0-s0", "p0-s1"] {
        std::fs::create_dir_all(sw.join("runs").join(r)).unwrap();
    }
    let alone = status(&sw, None).unwrap();
    assert_eq!(
        (alone.done, alone.running, alone.pending, alone.failed),
        (0, 2, 2, 0)
    );
    let queue = [
        (0, TaskState::Running),
        (1, TaskState::Pending),
        (3, TaskState::Pending),
    ]
    .into_iter()
    .collect();
    let s = status(&sw, Some(&queue)).unwrap();
    // Task 2 left the queue without finishing its run: that run failed.
    assert_eq!((s.done, s.running, s.pending, s.failed), (0, 1, 2, 1));
    assert_eq!(s.failures[0].0, "p0-s2");
}
