//! Attention-SVM (Tarzanagh et al. 2023): the trained W turns towards the
//! attention-SVM of the tokens it selects and away from a wrong selection (the
//! control), (K, Q) training leaves that direction for the nuclear-norm SVM's, and a
//! run is bit-identical for one seed.

use mechlab::experiment::ExperimentError;
use mechlab::run::summary::Summary;
use mechlab::run::RunCtx;
use std::path::Path;

fn run_preset(preset: &str, overrides: &[&str], dir: &Path) -> Result<Summary, ExperimentError> {
    let exp = mechlab::papers::registry().find("attention-svm").unwrap();
    let mut table = exp.default_config();
    let text = mechlab::papers::registry()
        .find_preset(preset)
        .unwrap()
        .text;
    mechlab::config::overlay(&mut table, &mechlab::config::parse(text, preset)?, preset)?;
    for o in overrides {
        mechlab::config::apply_override(&mut table, o)?;
    }
    let prepared = exp.prepare(&table, preset)?;
    let mut ctx = RunCtx::create(dir, table, "test", true)?;
    let summary = prepared.run(&mut ctx)?;
    ctx.finish(&summary)?;
    Ok(summary)
}

#[test]
fn w_turns_to_the_svm_of_its_selection_and_a_wrong_selection_does_not_fit() {
    let tmp = tempfile::tempdir().unwrap();
    let s = run_preset("attention-svm-w", &[], &tmp.path().join("ok")).unwrap();
    // With the authors' algorithm and a backward that does not cancel, the verdict's
    // 0.99 is reached in their 2 000 steps (docs/attention-svm.md).
    let w = s
        .verdicts
        .iter()
        .find(|v| v.id == "attention-svm.w-direction");
    assert!(w.is_some_and(|v| v.pass), "{s:?}");
    assert!(s.metrics["corr_sel"] > 0.99, "{s:?}");
    assert!(s.metrics["corr_ctrl"] < 0.5, "{s:?}");
    assert!(s.metrics["w_norm"] > 100.0, "{s:?}");
    assert!(s.metrics["attn_max"] > 0.99, "{s:?}");
    // The regularisation path turns to the same SVM as the radius grows.
    assert!(s.metrics["reg_corr"] > 0.95, "{s:?}");
    assert!(
        s.metrics["reg_corr"] > s.metrics["reg_corr_first"] + 0.3,
        "{s:?}"
    );
    assert!(s.metrics["reg_corr_ctrl"] < 0.5, "{s:?}");
    // ... reported as a measurement: the theorems give only the limit R → ∞.
    assert!(
        s.measurements
            .iter()
            .any(|m| m.id == "attention-svm.regularisation-path"),
        "{s:?}"
    );
    for f in ["correlation", "norm", "singular_values"] {
        assert!(
            tmp.path().join(format!("ok/figures/{f}.json")).exists(),
            "{f}"
        );
    }
    // Broken on purpose: measured against the wrong selection.
    let bad = run_preset(
        "attention-svm-w",
        &["probe.swap_selected=true"],
        &tmp.path().join("swap"),
    )
    .unwrap();
    assert!(bad.metrics["corr_sel"] < 0.5, "{bad:?}");
    assert!(bad.metrics["reg_corr"] < 0.5, "{bad:?}");
    assert!(bad.verdicts.iter().all(|v| !v.pass), "{bad:?}");
}

/// Claim (c): in d = 3 with 24 sequences the highest-score tokens cannot be
/// separated; GD (seed 0) selects another set, which passes the papers'
/// local-optimality test, and turns to its SVM. Measured against the wrong
/// selection instead, the verdict fails.
#[test]
fn inseparable_best_tokens_leave_gd_on_a_locally_optimal_set() {
    let tmp = tempfile::tempdir().unwrap();
    let verdict = |s: &Summary| {
        s.verdicts
            .iter()
            .find(|v| v.id == "attention-svm.local-optimality")
            .cloned()
    };
    let s = run_preset("attention-svm-local", &[], &tmp.path().join("ok")).unwrap();
    assert!(verdict(&s).is_some_and(|v| v.pass), "{s:?}");
    assert!(s.metrics["sel_is_opt"] < 1.0, "{s:?}");
    assert_eq!(s.metrics["sel_locally_optimal"], 1.0, "{s:?}");
    assert!(s.metrics["corr_sel"] > 0.99, "{s:?}");
    let bad = run_preset(
        "attention-svm-local",
        &["probe.swap_selected=true"],
        &tmp.path().join("swap"),
    )
    .unwrap();
    assert!(verdict(&bad).is_some_and(|v| !v.pass), "{bad:?}");
    // The separable setting does not judge claim (c).
    let w = run_preset(
        "attention-svm-w",
        &["train.steps=100"],
        &tmp.path().join("w"),
    )
    .unwrap();
    assert!(verdict(&w).is_none(), "{w:?}");
}

/// The sequence output (every token a query, output their mean): on seed 0 W turns
/// to the SVM of the (sequence, query) selection, one constraint set per query;
/// measured against the wrong selection it does not.
#[test]
fn the_sequence_output_turns_to_the_svm_of_every_querys_selection() {
    let tmp = tempfile::tempdir().unwrap();
    let set = ["model.output=sequence", "probe.reg_radii=[]"];
    let s = run_preset("attention-svm-w", &set, &tmp.path().join("ok")).unwrap();
    assert!(s.metrics["corr_sel"] > 0.99, "{s:?}");
    assert!(s.metrics["corr_ctrl"] < 0.5, "{s:?}");
    assert!(s.metrics["w_norm"] > 100.0, "{s:?}");
    let swap = [&set[..], &["probe.swap_selected=true"]].concat();
    let bad = run_preset("attention-svm-w", &swap, &tmp.path().join("swap")).unwrap();
    assert!(bad.metrics["corr_sel"] < 0.5, "{bad:?}");
}

/// (K, Q) leaves the Frobenius direction at low rank; the control is GD on W
/// itself (no factorisation, so no nuclear-norm bias) on the same data: the same
/// rule, read on that run, fails.
#[test]
fn kq_training_leaves_the_frobenius_direction() {
    use mechlab::papers::attention_svm::verdicts::kq_low_rank;
    let tmp = tempfile::tempdir().unwrap();
    let s = run_preset("attention-svm-kq", &[], &tmp.path().join("kq")).unwrap();
    assert!(s.metrics["corr_sel"] < 0.9, "{s:?}");
    assert!(s.metrics["w_norm"] > 10.0, "{s:?}");
    let v = s
        .verdicts
        .iter()
        .find(|v| v.id == "attention-svm.kq-low-rank")
        .expect("emitted");
    assert!(v.pass, "{v:?}");
    let rule = |s: &mechlab::run::summary::Summary| {
        kq_low_rank(
            s.metrics.get("corr_sel").copied(),
            s.metrics["rank_w"] as usize,
            s.metrics.get("rank_mm").map(|r| *r as usize),
            0.99,
        )
    };
    assert!(rule(&s));
    let w = run_preset("attention-svm-w", &[], &tmp.path().join("w")).unwrap();
    assert!(!rule(&w), "{w:?}");
    assert!(w.metrics["rank_w"] >= w.metrics["rank_mm"], "{w:?}");
}

/// With the authors' algorithm, W = K Qᵀ turns to the nuclear-norm SVM of its
/// selection (the verdict's 0.99 within their 2 000 steps), well away from the
/// Frobenius one; measured against a wrong selection it does not.
#[test]
fn kq_turns_to_the_nuclear_norm_svm() {
    let tmp = tempfile::tempdir().unwrap();
    let set = ["seed=2"];
    let s = run_preset("attention-svm-kq", &set, &tmp.path().join("ok")).unwrap();
    let (nuc, fro) = (s.metrics["corr_nuc"], s.metrics["corr_sel"]);
    assert!(nuc > 0.99 && nuc > fro + 0.1, "{s:?}");
    let v = s
        .verdicts
        .iter()
        .find(|v| v.id == "attention-svm.kq-nuclear-direction");
    assert!(v.is_some_and(|v| v.pass), "{s:?}");
    assert!(s.metrics["rank_nuc"] < s.metrics["rank_mm"], "{s:?}");
    let swap = [&set[..], &["probe.swap_selected=true"]].concat();
    let bad = run_preset("attention-svm-kq", &swap, &tmp.path().join("swap")).unwrap();
    assert!(bad.metrics["corr_nuc"] < 0.5, "{bad:?}");
    // and the nuclear-direction claim, judged against the wrong selection, fails
    // (kq-low-rank says what GD does *not* turn to, so a wrong selection cannot
    // break it)
    let v = bad
        .verdicts
        .iter()
        .find(|v| v.id == "attention-svm.kq-nuclear-direction")
        .expect("emitted");
    assert!(!v.pass, "{v:?}");
    // The nuclear-norm regularisation path, against the right and a wrong selection.
    assert!(
        s.metrics["reg_corr"] > 0.9 && s.metrics["reg_corr_ctrl"] < 0.5,
        "{s:?}"
    );
    assert!(bad.metrics["reg_corr"] < 0.5, "{bad:?}");
}

#[test]
fn one_seed_gives_bit_identical_runs() {
    let tmp = tempfile::tempdir().unwrap();
    for p in ["attention-svm-w", "attention-svm-kq"] {
        let a = run_preset(p, &["train.steps=300"], &tmp.path().join(format!("{p}-a"))).unwrap();
        let b = run_preset(p, &["train.steps=300"], &tmp.path().join(format!("{p}-b"))).unwrap();
        assert_eq!(format!("{:?}", a.metrics), format!("{:?}", b.metrics));
        let m =
            |d: &str| std::fs::read_to_string(tmp.path().join(d).join("metrics.jsonl")).unwrap();
        assert_eq!(m(&format!("{p}-a")), m(&format!("{p}-b")));
        // and the seed is what they share: another gives another run
        let c = run_preset(
            p,
            &["train.steps=300", "seed=2"],
            &tmp.path().join(format!("{p}-c")),
        )
        .unwrap();
        assert_ne!(format!("{:?}", a.metrics), format!("{:?}", c.metrics));
    }
}

#[test]
fn bad_settings_are_errors_that_name_the_key() {
    let tmp = tempfile::tempdir().unwrap();
    for (o, key) in [
        ("data.t=1", "data.t"),
        ("data.d=0", "data.d"),
        ("probe.corr_threshold=2.0", "probe.corr_threshold"),
        ("probe.reg_radii=[4.0, 2.0]", "probe.reg_radii"),
        ("probe.reg_steps=0", "probe.reg_steps"),
    ] {
        let e = run_preset("attention-svm-w", &[o], &tmp.path().join("x")).unwrap_err();
        assert!(e.to_string().contains(key), "{o}: {e}");
    }
    // The sequence output holds n·t items of t tokens: capped.
    let big = ["model.output=sequence", "data.n=2000", "data.t=100"];
    let e = run_preset("attention-svm-w", &big, &tmp.path().join("y")).unwrap_err();
    assert!(e.to_string().contains("model.output"), "{e}");
}
