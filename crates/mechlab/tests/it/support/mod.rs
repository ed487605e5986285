//! Helpers the integration tests share: a preset run in a temporary folder, the
//! `mechlab` binary, the f64 / double-double comparisons and the viewer check.

pub mod cli;
pub mod precision;
pub mod viewer;

use mechlab::run::summary::Summary;

/// Runs `preset` of `paper` with `overrides` (`key=value`) in a temporary run
/// folder, which is returned with the summary so the caller can read it.
pub fn run_kept(paper: &str, preset: &str, overrides: &[&str]) -> (Summary, tempfile::TempDir) {
    let reg = mechlab::papers::registry();
    let exp = reg.find(paper).expect("registered");
    let mut table = exp.default_config();
    let p = reg.find_preset(preset).unwrap();
    mechlab::config::overlay(
        &mut table,
        &mechlab::config::parse(p.text, "preset").unwrap(),
        "preset",
    )
    .unwrap();
    for o in overrides {
        mechlab::config::apply_override(&mut table, o).unwrap();
    }
    let prepared = exp.prepare(&table, "test").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut ctx =
        mechlab::run::RunCtx::create(&dir.path().join("run"), table, "test", true).unwrap();
    let summary = prepared.run(&mut ctx).unwrap();
    ctx.finish(&summary).unwrap();
    (summary, dir)
}

/// Whether verdict `id` of `s` passed (panics if the run has no such verdict).
pub fn verdict(s: &Summary, id: &str) -> bool {
    s.verdicts
        .iter()
        .find(|v| v.id == id)
        .unwrap_or_else(|| panic!("no verdict {id}"))
        .pass
}

/// `mechlab intervene` on a finished run: its first effect (the paper's causal
/// question with its control) as JSON.
pub fn first_effect(run: &std::path::Path) -> serde_json::Value {
    let v = mechlab::commands::intervene::run(
        &mechlab::papers::registry(),
        run,
        &mechlab::analysis::Request::default(),
    )
    .unwrap();
    v["effects"][0].clone()
}

/// Runs `preset` of `paper` with `sets` twice and asserts the summaries are
/// bit-identical; then interrupts a third run at step `stop`, resumes it with
/// `mechlab resume` and asserts it ends at the same summary. Returns the resumed
/// run's folder (in `dir`) for checks of its checkpoint.
pub fn assert_deterministic_and_resumable(
    paper: &str,
    preset: &str,
    sets: &[&str],
    stop: u64,
    dir: &std::path::Path,
) -> std::path::PathBuf {
    let (a, b) = (
        run_kept(paper, preset, sets).0,
        run_kept(paper, preset, sets).0,
    );
    assert_eq!(a, b);
    let overrides: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let resolved =
        mechlab::commands::resolve(&mechlab::papers::registry(), preset, &overrides, None).unwrap();
    let run = dir.join("c");
    let mut ctx = mechlab::run::RunCtx::create(&run, resolved.table.clone(), "test", true).unwrap();
    ctx.stop_at = Some(stop);
    assert!(resolved.prepared.run(&mut ctx).is_err());
    let c = run.display().to_string();
    assert_eq!(
        mechlab::cli::run(
            mechlab::papers::registry(),
            vec!["mechlab", "--quiet", "resume", &c]
        )
        .unwrap(),
        0
    );
    assert_eq!(mechlab::run::read_summary(&run).unwrap(), a);
    run
}
