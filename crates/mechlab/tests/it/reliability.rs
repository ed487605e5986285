//! What a user's bad luck does to a run: SIGKILL at any moment (training, a
//! checkpoint write, the report), a corrupt newest checkpoint, a config with a
//! NaN learning rate or a key in the wrong section, an output folder that cannot
//! be written. Every case must end in a one-line error or in results bit-identical
//! to an uninterrupted run, never in a half-written file under its final name.
//! Runs the induction preset shrunk to 40 steps (under a second a run).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const TINY: &[&str] = &[
    "induction-simplified",
    "--set",
    "train.steps=40",
    "--set",
    "run.checkpoint_every=5",
    "--set",
    "run.checkpoint_log_until=4",
    "--set",
    "data.n_train=20",
    "--set",
    "data.n_val=10",
    "--set",
    "data.seq_len=12",
];

fn cmd(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_mechlab"));
    c.arg("--quiet").args(args);
    c
}

fn run_args(out: &Path) -> Vec<String> {
    let mut a = vec!["run".to_string()];
    a.extend(TINY.iter().map(|s| s.to_string()));
    a.extend(["--out".to_string(), out.display().to_string()]);
    a
}

fn output(args: &[String]) -> Output {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    cmd(&args).output().expect("mechlab runs")
}

fn ok(args: &[String]) -> Output {
    let out = output(args);
    assert!(
        out.status.success(),
        "mechlab {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A failing command's stderr: exit code 1, one line, no panic.
fn fails(args: &[String]) -> String {
    let out = output(args);
    let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
    assert_eq!(out.status.code(), Some(1), "mechlab {args:?}: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err.lines().count(), 1, "one-line error expected: {err}");
    err
}

fn resume(dir: &Path) -> Output {
    ok(&["resume".to_string(), dir.display().to_string()])
}

/// The files that must come out bit-identical: metrics, summary, every
/// checkpoint, the figures' data. (`config.toml` names the folder in its header
/// and `timing.json` holds wall-clock time, so they differ by design.)
fn results(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for name in ["metrics.jsonl", "summary.json"] {
        out.push((name.to_string(), std::fs::read(dir.join(name)).unwrap()));
    }
    for sub in ["checkpoints", "figures"] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join(sub))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                let n = p.file_name().unwrap().to_string_lossy();
                n.ends_with(".safetensors") || n.ends_with(".json")
            })
            .collect();
        files.sort();
        for f in files {
            let name = format!("{sub}/{}", f.file_name().unwrap().to_string_lossy());
            out.push((name, std::fs::read(&f).unwrap()));
        }
    }
    out
}

fn assert_same(reference: &[(String, Vec<u8>)], dir: &Path, what: &str) {
    let got = results(dir);
    let names = |v: &[(String, Vec<u8>)]| v.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&got), names(reference), "{what}: files differ");
    for ((name, a), (_, b)) in reference.iter().zip(&got) {
        assert!(a == b, "{what}: {name} differs from the uninterrupted run");
    }
}

/// Every file under its final name is whole: it parses as what its name says.
/// Temporary files (`.name.PID.tmp`) and set-aside checkpoints may be anything.
fn assert_nothing_torn(dir: &Path, what: &str) {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if name.starts_with('.') && name.ends_with(".tmp") {
                continue;
            }
            let bytes = std::fs::read(&p).unwrap();
            let text = || String::from_utf8(bytes.clone()).expect("text file is UTF-8");
            let whole = match p.extension().and_then(|x| x.to_str()).unwrap_or("") {
                "toml" => toml::from_str::<toml::Table>(&text()).is_ok(),
                "json" => serde_json::from_slice::<serde_json::Value>(&bytes).is_ok(),
                "jsonl" => text()
                    .lines()
                    .all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok()),
                "safetensors" if name.starts_with("step_") => {
                    mechlab::run::checkpoint::verify(&p).is_ok()
                }
                "safetensors" => safetensors::SafeTensors::deserialize(&bytes).is_ok(),
                "svg" => text().trim_end().ends_with("</svg>"),
                "png" => bytes.starts_with(b"\x89PNG") && bytes.ends_with(b"IEND\xaeB`\x82"),
                "html" => text().trim_end().ends_with("</html>"),
                "md" => !bytes.is_empty(),
                _ => true,
            };
            assert!(whole, "{what}: {} is half-written", p.display());
        }
    }
}

/// Starts `args`, SIGKILLs it after `after` (unless it ended first).
fn kill_after(args: &[String], after: Duration) {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut child = cmd(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("mechlab starts");
    std::thread::sleep(after);
    let _ = child.kill(); // SIGKILL on Unix: no handler, no last checkpoint
    child.wait().expect("the child is reaped");
}

#[test]
fn sigkill_anywhere_then_resume_is_bit_identical() {
    let tmp = tempfile::tempdir().unwrap();
    let reference = tmp.path().join("ref");
    let t0 = Instant::now();
    ok(&run_args(&reference));
    let full = t0.elapsed();
    let expected = results(&reference);
    let mut rng = ChaCha8Rng::seed_from_u64(2024);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut cases = 0;
    // Kill points spread over the whole run (start-up, training, checkpoint
    // writes, summary, report) and a little past it; every other case also kills
    // the resume, which must then resume again.
    while cases < 12 && (cases < 4 || Instant::now() < deadline) {
        let dir = tmp.path().join(format!("k{cases}"));
        let at = full.mul_f64(rng.random_range(0.0..1.15));
        kill_after(&run_args(&dir), at);
        let what = format!("killed at {at:?} of {full:?}");
        assert_nothing_torn(&dir, &what);
        if !dir.join("config.toml").exists() {
            // Killed before the run existed: running it again is the recovery.
            ok(&run_args(&dir));
        } else {
            if cases % 2 == 1 {
                let again = full.mul_f64(rng.random_range(0.0..1.0));
                kill_after(&["resume".to_string(), dir.display().to_string()], again);
                assert_nothing_torn(&dir, &format!("{what}, resume killed at {again:?}"));
            }
            resume(&dir);
        }
        assert_nothing_torn(&dir, &what);
        assert_same(&expected, &dir, &what);
        cases += 1;
    }
}

#[test]
fn resume_passes_over_a_corrupt_newest_checkpoint_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let reference = tmp.path().join("ref");
    ok(&run_args(&reference));
    let expected = results(&reference);
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for case in 0..3 {
        let dir = tmp.path().join(format!("c{case}"));
        ok(&run_args(&dir));
        let newest = dir.join("checkpoints/step_000040.safetensors");
        let mut bytes = std::fs::read(&newest).unwrap();
        // Past the 8-byte length and the header's opening: in the metadata, a
        // name, a shape or the data (a blank in the JSON header may change
        // without harm, so the header's padding is avoided).
        let at = rng.random_range(bytes.len() - 64..bytes.len());
        bytes[at] ^= rng.random_range(1..=255u8);
        std::fs::write(&newest, &bytes).unwrap();
        std::fs::remove_file(dir.join("summary.json")).unwrap();
        let out = resume(&dir);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("step_000040.safetensors") && err.contains("unreadable"),
            "{err}"
        );
        assert!(
            err.contains("resuming from") && err.contains("step_000035"),
            "{err}"
        );
        assert!(!err.chars().any(|c| c.is_control() && c != '\n'), "{err:?}");
        assert!(dir
            .join("checkpoints/step_000040.safetensors.corrupt")
            .exists());
        assert_same(&expected, &dir, &format!("byte {at} changed"));
    }
}

#[test]
fn bad_train_values_are_refused_before_the_folder_exists() {
    let tmp = tempfile::tempdir().unwrap();
    for (set, key, allowed) in [
        ("train.lr=nan", "train.lr", "> 0"),
        ("train.lr=0", "train.lr", "> 0"),
        ("train.lr=-1", "train.lr", "> 0"),
        ("train.lr=inf", "train.lr", "> 0"),
        ("train.beta2=1", "train.beta2", "[0, 1)"),
        ("train.eps=0", "train.eps", "> 0"),
        ("train.grad_clip=-0.5", "train.grad_clip", ">= 0"),
        ("train.weight_decay=nan", "train.weight_decay", ">= 0"),
    ] {
        let out = tmp.path().join("never");
        let mut args = run_args(&out);
        args.extend(["--set".to_string(), set.to_string()]);
        let err = fails(&args);
        let value = set.split('=').nth(1).unwrap();
        assert!(err.contains(key) && err.contains(allowed), "{set}: {err}");
        assert!(err.to_lowercase().contains(value), "{set}: {err}");
        assert!(!out.exists(), "{set}: the run folder was made");
    }
    // A key in the wrong section is named with the section it belongs to.
    let file = tmp.path().join("mine.toml");
    std::fs::write(&file, "experiment = \"induction\"\nlr = 0.5\n").unwrap();
    let err = fails(&[
        "run".to_string(),
        file.display().to_string(),
        "--out".to_string(),
        tmp.path().join("never").display().to_string(),
    ]);
    assert!(
        err.contains("unknown key `lr`") && err.contains("did you mean `train.lr`"),
        "{err}"
    );
}

#[test]
fn an_unwritable_output_folder_is_a_one_line_error_and_keeps_what_was_there() {
    let tmp = tempfile::tempdir().unwrap();
    // A folder that cannot be made: its parent is a file (stops root as well).
    let blocker = tmp.path().join("a-file");
    std::fs::write(&blocker, "x").unwrap();
    let err = fails(&run_args(&blocker.join("run")));
    assert!(err.contains("a-file"), "{err}");

    // A finished run whose report cannot be rebuilt keeps its old report.
    let dir = tmp.path().join("done");
    ok(&run_args(&dir));
    let before = std::fs::read(dir.join("report.html")).unwrap();
    let report = ["report".to_string(), dir.display().to_string()];
    if writes_despite_read_only(tmp.path()) {
        // Root ignores permission bits: make the figures folder a file instead.
        eprintln!("running as root: chmod cannot stop writes, using a file in the way");
        std::fs::rename(dir.join("figures"), tmp.path().join("figures-moved")).unwrap();
        std::fs::write(dir.join("figures"), "not a folder").unwrap();
        let err = fails(&report);
        assert!(err.contains("figures"), "{err}");
    } else {
        set_read_only(&dir, true);
        let err = fails(&report);
        set_read_only(&dir, false);
        assert!(err.contains("ermission denied"), "{err}");
    }
    assert_eq!(std::fs::read(dir.join("report.html")).unwrap(), before);
    assert_nothing_torn(&dir, "failed report");
}

fn set_read_only(dir: &Path, on: bool) {
    use std::os::unix::fs::PermissionsExt;
    for d in [dir.to_path_buf(), dir.join("figures")] {
        let mode = if on { 0o555 } else { 0o755 };
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode)).unwrap();
    }
}

/// Whether this process can write into a folder it made read-only (root can).
fn writes_despite_read_only(base: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let d = base.join("probe-ro");
    std::fs::create_dir(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o555)).unwrap();
    let wrote = std::fs::write(d.join("x"), "x").is_ok();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    wrote
}
