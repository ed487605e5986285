//! What the general experiment measures, afterwards and from outside:
//! `measure` on any checkpoint, the attention viewer's checkpoint slider, and
//! detection patterns computed by a function of each held-out window (Python's
//! `patterns={name: fn}`), stored with the run and read back on resume.

use crate::support;
use mechlab::papers::transformer::source::{Handover, PatternFn};
use mechlab::run::summary::Summary;
use std::path::Path;

/// `mechlab measure` on a checkpoint gives the record the probe logged at that
/// step, bit for bit; a paper without the hook says so.
#[test]
fn measure_recomputes_the_probe_record_of_any_checkpoint() {
    let (_, dir) = support::run_kept(
        "transformer",
        "transformer",
        &[
            "train.steps=40",
            "run.probe_every=8",
            "run.checkpoint_every=8",
        ],
    );
    let run = dir.path().join("run");
    let reg = mechlab::papers::registry();
    let recs: Vec<serde_json::Value> = std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|r: &serde_json::Value| r["event"] == "probe")
        .collect();
    for step in [8u64, 40] {
        let v = mechlab::commands::intervene::measure(&reg, &run, Some(step)).unwrap();
        let logged = recs.iter().find(|r| r["step"] == step).unwrap();
        let values = v["values"].as_object().unwrap();
        assert!(values.len() > 40);
        for (k, x) in values {
            assert_eq!(
                x.as_f64().unwrap().to_bits(),
                logged[k].as_f64().unwrap().to_bits(),
                "step {step}: {k}"
            );
        }
    }
    let latest = mechlab::commands::intervene::measure(&reg, &run, None).unwrap();
    assert_eq!(latest["step"], 40);

    // The attention viewer's slider: earlier checkpoints, each the weights of
    // the model at that step on the viewer's window.
    let text = std::fs::read_to_string(run.join("figures/attention.json")).unwrap();
    let fig: mechlab_report::Figure = serde_json::from_str(&text).unwrap();
    let mechlab_report::Plot::Attention {
        tokens,
        history,
        step,
        pattern,
        ..
    } = fig.plot
    else {
        panic!("not a viewer")
    };
    assert_eq!(step, Some(40));
    let steps: Vec<u64> = history.iter().map(|c| c.step).collect();
    assert_eq!(steps, [0, 1, 2, 4, 8, 16, 24, 32]);
    assert_eq!(
        support::viewer::viewer_matches_activations(&run, "attention"),
        8
    );
    let t = tokens.len();
    let window: Vec<u32> = {
        // the viewer's window, read back from its token labels
        let cfg = std::fs::read_to_string(run.join("config.toml")).unwrap();
        assert!(cfg.contains("task = \"repeated\""), "{cfg}");
        tokens.iter().map(|s| s.parse().unwrap()).collect()
    };
    for (c, at) in history
        .iter()
        .map(|c| (c, Some(c.step)))
        .chain(std::iter::once((
            &mechlab_report::AttentionCheckpoint {
                step: 40,
                pattern: pattern.clone(),
            },
            None,
        )))
    {
        let mut m = mechlab::inspect::load_model(&reg, &run, at).unwrap();
        let names = ["blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern"];
        let (_, cache) = m
            .run_with_cache(
                &mechlab_engine::hooks::Batch::new(window.clone(), 1, t),
                &names,
            )
            .unwrap();
        let want: Vec<f64> = names.iter().flat_map(|n| cache[*n].data.clone()).collect();
        assert_eq!(c.pattern, want, "step {}", c.step);
    }
}

/// The previous-token pattern, as a function of the window would give it.
struct PrevToken {
    calls: usize,
}

impl PatternFn for PrevToken {
    fn call(&mut self, x: &[u32], n: usize, t: usize) -> Result<Vec<(String, Vec<f64>)>, String> {
        self.calls += 1;
        assert_eq!(x.len(), n * t);
        let mut p = vec![0.0; n * t * t];
        for s in 0..n {
            for q in 1..t {
                p[(s * t + q) * t + q - 1] = 1.0;
            }
        }
        Ok(vec![("prev".into(), p)])
    }
}

fn run_with(
    dir: &Path,
    fns: Option<Box<dyn PatternFn>>,
    stop: Option<u64>,
) -> Result<Summary, String> {
    let reg = mechlab::papers::registry();
    let sets: Vec<String> = [
        "train.steps=40",
        "run.probe_every=10",
        "run.checkpoint_every=10",
        "probe.pattern_fns=[\"prev\"]",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let r =
        mechlab::commands::resolve(&reg, "transformer", &sets, None).map_err(|e| e.to_string())?;
    let mut ctx = mechlab::run::RunCtx::create(dir, r.table.clone(), "test", true).unwrap();
    ctx.stop_at = stop;
    ctx.set_input(Box::new(Handover {
        generator: None,
        patterns: fns,
    }));
    r.prepared
        .run(&mut ctx)
        .inspect(|s| ctx.finish(s).unwrap())
        .map_err(|e| e.to_string())
}

fn probes(run: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|r: &serde_json::Value| r["event"] == "probe")
        .collect()
}

/// A pattern function that gives the previous-token pattern scores every head
/// as the built-in previous-token detector does, at every probe step; it is
/// stored with the run, so a resumed run and `measure` read it back.
#[test]
fn a_pattern_function_is_scored_at_every_probe_step_and_kept_with_the_run() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a");
    let whole = run_with(&a, Some(Box::new(PrevToken { calls: 0 })), None).unwrap();
    let recs = probes(&a);
    assert!(recs.len() >= 5, "{}", recs.len());
    for r in &recs {
        for l in 0..2 {
            for h in 0..4 {
                let (mine, theirs) = (
                    r[format!("custom_prev.l{l}.h{h}")].as_f64().unwrap(),
                    r[format!("previous_token.l{l}.h{h}")].as_f64().unwrap(),
                );
                assert!(
                    (mine - theirs).abs() < 1e-12,
                    "step {}: {mine} vs {theirs}",
                    r["step"]
                );
            }
        }
    }
    assert!(a.join("figures/heads_custom_prev.json").exists());
    assert!(whole.metrics.contains_key("best_custom_prev"));

    // stopped, then resumed without the function: the stored patterns are read
    let b = tmp.path().join("b");
    assert!(run_with(&b, Some(Box::new(PrevToken { calls: 0 })), Some(25)).is_err());
    let reg = mechlab::papers::registry();
    let resumed = mechlab::commands::resume(&reg, &b, true).unwrap();
    assert_eq!(resumed, whole);
    let rec = mechlab::commands::intervene::measure(&reg, &a, Some(20)).unwrap();
    let logged = recs.iter().find(|r| r["step"] == 20).unwrap();
    assert_eq!(
        rec["values"]["custom_prev.l0.h1"],
        logged["custom_prev.l0.h1"]
    );

    // without the function and without stored patterns: an error naming both
    let e = run_with(&tmp.path().join("c"), None, None).unwrap_err();
    assert!(
        e.contains("probe.pattern_fns names \"prev\"") && e.contains("patterns="),
        "{e}"
    );
}
