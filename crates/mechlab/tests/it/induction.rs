//! Induction heads (Chen et al. 2024): gradient checks and mechanism tests.

use mechlab::papers::induction::data::{generate, MarkovSpec};
use mechlab::papers::induction::simplified::{LossKind, Simplified, SimplifiedConfig};
use mechlab_engine::gradcheck::{check, DEFAULT_H};
use mechlab_engine::Parameters;

fn flat(m: &Simplified<f64>) -> Vec<f64> {
    let mut v = Vec::new();
    m.visit(&mut |p| v.extend_from_slice(p.value()));
    v
}

fn set(m: &mut Simplified<f64>, x: &[f64]) {
    let mut o = 0;
    m.visit_mut(&mut |p| {
        let n = p.numel();
        p.value_mut().copy_from_slice(&x[o..o + n]);
        o += n;
    });
}

fn gradcheck_simplified(loss: LossKind, heads: usize, degree: usize) {
    let spec = MarkovSpec {
        n_seqs: 70,
        seq_len: 12,
        ..MarkovSpec::default()
    };
    let data = generate(&spec, 11).unwrap();
    let cfg = SimplifiedConfig {
        loss,
        n_heads: heads,
        degree,
        ..SimplifiedConfig::default()
    };
    let mut m = Simplified::<f64>::new(&cfg);
    // a generic point, away from the symmetric init
    let x0: Vec<f64> = flat(&m)
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v + 0.3 * ((i as f64 * 1.7).sin()) + if i + 1 == flat(&m).len() { 1.5 } else { 0.0 }
        })
        .collect();
    set(&mut m, &x0);
    m.zero_grad();
    m.loss(&data.tokens, 12, true);
    let mut g = Vec::new();
    m.visit(&mut |p| g.extend_from_slice(p.grad()));
    let mut f = |x: &[f64]| {
        set(&mut m, x);
        m.loss(&data.tokens, 12, false)
    };
    check(&mut f, &x0, &g, DEFAULT_H)
        .assert_below(1e-6, &format!("simplified {loss:?} H={heads} D={degree}"));
}

fn gradcheck_full(loss: LossKind) {
    use mechlab::papers::induction::full::{Full, FullConfig};
    let spec = MarkovSpec {
        n_seqs: 70,
        seq_len: 12,
        ..MarkovSpec::default()
    };
    let data = generate(&spec, 13).unwrap();
    // The check's point was chosen at w+ = 1 (a milder layer-1 softmax than the
    // experiment's default 3, where 5-point differences lose digits).
    let cfg = FullConfig {
        loss,
        w_plus: 1.0,
        ..FullConfig::default()
    };
    let mut m = Full::<f64>::new(&cfg);
    let flat = |m: &Full<f64>| {
        let mut v = Vec::new();
        m.visit(&mut |p| v.extend_from_slice(p.value()));
        v
    };
    let n = flat(&m).len();
    // a generic point: QK and OV far from the identity, LN gain and bias off 1 and 0
    let x0: Vec<f64> = flat(&m)
        .iter()
        .enumerate()
        .map(|(i, v)| v + 0.4 * ((i as f64 * 1.3).sin()) + if i + 1 == n { 2.0 } else { 0.0 })
        .collect();
    let set = |m: &mut Full<f64>, x: &[f64]| {
        let mut o = 0;
        m.visit_mut(&mut |p| {
            let k = p.numel();
            p.value_mut().copy_from_slice(&x[o..o + k]);
            o += k;
        });
    };
    set(&mut m, &x0);
    m.zero_grad();
    m.loss(&data.tokens, 12, true);
    let mut g = Vec::new();
    m.visit(&mut |p| g.extend_from_slice(p.grad()));
    let mut f = |x: &[f64]| {
        set(&mut m, x);
        m.loss(&data.tokens, 12, false)
    };
    check(&mut f, &x0, &g, DEFAULT_H).assert_below(1e-6, &format!("full {loss:?}"));
}

#[test]
fn full_gradients_both_losses() {
    gradcheck_full(LossKind::Code);
    gradcheck_full(LossKind::Nll);
}

#[test]
fn simplified_gradients_code_loss() {
    gradcheck_simplified(LossKind::Code, 3, 2);
    gradcheck_simplified(LossKind::Code, 3, 3);
}

#[test]
fn simplified_gradients_true_loss() {
    gradcheck_simplified(LossKind::Nll, 3, 2);
    gradcheck_simplified(LossKind::Nll, 2, 2);
}

// ---------------------------------------------------------------------------
// Mechanism: a shortened run through the whole experiment (data, training,
// probes, figures, verdicts), and controls that break it on purpose.

struct Outcome {
    summary: mechlab::run::summary::Summary,
    dir: tempfile::TempDir,
}

fn run_short(overrides: &[&str]) -> Outcome {
    let exp = mechlab::papers::registry()
        .find("induction")
        .expect("registered");
    let mut table = exp.default_config();
    let preset = mechlab::papers::registry()
        .find_preset("induction-simplified")
        .unwrap();
    mechlab::config::overlay(
        &mut table,
        &mechlab::config::parse(preset.text, "preset").unwrap(),
        "preset",
    )
    .unwrap();
    for o in [
        "data.n_train=1500",
        "data.n_val=300",
        "train.steps=300",
        "probe.gen_n=100",
        "probe.gen_lengths=[20, 200]",
        "probe.gen_alphas=[0.05]",
        "run.checkpoints=false",
    ]
    .iter()
    .chain(overrides)
    {
        mechlab::config::apply_override(&mut table, o).unwrap();
    }
    let prepared = exp.prepare(&table, "test").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut ctx =
        mechlab::run::RunCtx::create(&dir.path().join("run"), table, "test", true).unwrap();
    let summary = prepared.run(&mut ctx).unwrap();
    ctx.finish(&summary).unwrap();
    Outcome { summary, dir }
}

fn verdict<'a>(
    s: &'a mechlab::run::summary::Summary,
    id: &str,
) -> &'a mechlab::run::summary::Verdict {
    s.verdicts
        .iter()
        .find(|v| v.id == id)
        .unwrap_or_else(|| panic!("no verdict {id}: {:?}", s.verdicts))
}

#[test]
fn selector_picks_the_true_parents_and_the_loss_falls() {
    let o = run_short(&[]);
    let s = &o.summary;
    assert!(
        verdict(s, "induction.selector-parents").pass,
        "{:?}",
        s.verdicts
    );
    assert!(s.metrics["share.{1,2}"] > 0.9, "{:?}", s.metrics);
    let uniform = s.metrics["baseline_uniform_code"];
    let bayes = s.metrics["baseline_bayes_code"];
    let loss = s.metrics["val_code_loss"];
    assert!(
        loss < uniform - 0.5 * (uniform - bayes),
        "loss {loss} uniform {uniform} bayes {bayes}"
    );
    assert!(s.metrics["a"] > 1.0);
    // the causal claim: ablating a parent head leaves the model no better than the
    // Bayes predictor without that parent; ablating the other head does not
    let ablation = s
        .verdicts
        .iter()
        .find(|v| v.id == "induction.causal-ablation");
    assert!(ablation.is_some_and(|v| v.pass), "{:?}", s.verdicts);
    // every figure the report needs was written
    for f in [
        "c_shares",
        "a",
        "W_before",
        "W_after",
        "loss",
        "gen_length",
        "gen_alpha",
    ] {
        assert!(
            o.dir.path().join(format!("run/figures/{f}.json")).exists(),
            "{f}"
        );
    }
    assert!(o.dir.path().join("run/notes.md").exists());
}

#[test]
fn control_other_parents_move_the_selector_off_1_2() {
    // the same assertion as above must fail when the data's parents change
    let o = run_short(&["data.parents=[2, 3]"]);
    let s = &o.summary;
    assert!(s.metrics["share.{1,2}"] < 0.5, "{:?}", s.metrics);
    assert!(!verdict(s, "induction.selector-parents")
        .measured
        .contains("copies [1, 2]"));
}

#[test]
fn control_without_training_the_loss_stays_at_uniform() {
    // A learning rate of 0 is refused before the run starts; 1e-12 leaves the model at init.
    let o = run_short(&["train.lr=1e-12", "train.steps=5"]);
    let s = &o.summary;
    let uniform = s.metrics["baseline_uniform_code"];
    let bayes = s.metrics["baseline_bayes_code"];
    assert!(s.metrics["val_code_loss"] > uniform - 0.1 * (uniform - bayes));
    assert!(!verdict(s, "induction.loss-toward-bayes").pass);
    // nor does the layer-2 classifier grow from its initial scale
    assert!(!verdict(s, "induction.classifier-grows").pass);
    // No selector formed: at init every subset holds 1/7 and the tie lands on the
    // initial windows {1, 2}, the parents and the χ² argmax, so a verdict without
    // the majority precondition would pass here; the causal verdicts have no
    // parent copiers to test (the ablation's floor alone held trivially).
    for id in [
        "induction.selector-parents",
        "induction.selector-mi",
        "induction.causal-ablation",
        "induction.causal-patching",
    ] {
        let v = verdict(s, id);
        assert!(!v.pass, "{v:?}");
    }
    assert!(verdict(s, "induction.selector-mi")
        .measured
        .starts_with("not judged"));
}

#[test]
fn full_model_runs_through_the_experiment_and_learns() {
    let o = run_short(&[
        "model.kind=\"full\"",
        "data.n_train=300",
        "data.n_val=100",
        "train.steps=40",
        "train.lr=0.5",
        "model.dtype=\"f32\"",
    ]);
    let s = &o.summary;
    let uniform = s.metrics["baseline_uniform_code"];
    assert!(s.metrics["val_code_loss"] < uniform, "{:?}", s.metrics);
    assert!(s.metrics["a"] > 0.01);
}
