//! The loop's contracts, on a small regression model with a streamed data RNG:
//! resume is bit-identical (also past a corrupt newest checkpoint), a seed gives
//! identical logs, a NaN names its step, group and the last good checkpoint.

use super::config::{OptimizerKind, StageConfig, TrainConfig};
use super::trainer::{fit, TrainError, Trainable};
use crate::rng::{self, stream, Stream};
use crate::run::RunCtx;
use mechlab_engine::{param, Param, Parameters};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// y = w·x + b on fresh minibatches drawn from the data stream every step.
struct Regress {
    w: Param<f64>,
    b: Param<f64>,
    data: ChaCha8Rng,
    nan_at: Option<u64>,
}

impl Parameters<f64> for Regress {
    fn visit(&self, f: &mut dyn FnMut(&Param<f64>)) {
        f(&self.w);
        f(&self.b);
    }
    fn visit_mut(&mut self, f: &mut dyn FnMut(&mut Param<f64>)) {
        f(&mut self.w);
        f(&mut self.b);
    }
}

const TRUE_W: [f64; 3] = [1.0, -2.0, 0.5];

impl Trainable<f64> for Regress {
    fn train_step(&mut self, step: u64) -> f64 {
        let mut loss = 0.0;
        let n = 8;
        for _ in 0..n {
            let x: [f64; 3] = [self.data.random(), self.data.random(), self.data.random()];
            let y: f64 = x.iter().zip(TRUE_W).map(|(a, b)| a * b).sum::<f64>() + 0.3;
            let pred: f64 = x
                .iter()
                .zip(self.w.value())
                .map(|(a, b)| a * b)
                .sum::<f64>()
                + self.b.value()[0];
            let r = pred - y;
            loss += r * r / n as f64;
            for (g, xi) in self.w.grad_mut().iter_mut().zip(x) {
                *g += 2.0 * r * xi / n as f64;
            }
            self.b.grad_mut()[0] += 2.0 * r / n as f64;
        }
        if self.nan_at == Some(step) {
            self.b.grad_mut()[0] = f64::NAN;
        }
        loss
    }
    fn save_state(&self) -> serde_json::Value {
        serde_json::to_value(rng::save(&self.data)).unwrap()
    }
    fn load_state(&mut self, v: &serde_json::Value) -> Result<(), String> {
        let st: rng::RngState = serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
        self.data = rng::restore(&st)?;
        Ok(())
    }
}

fn model(seed: u64) -> Regress {
    let mut init = stream(seed, Stream::Init);
    Regress {
        w: param(
            "w",
            "weights",
            &[3],
            (0..3).map(|_| init.random::<f64>()).collect(),
        ),
        b: param("b", "bias", &[1], vec![0.0]),
        data: stream(seed, Stream::Data),
        nan_at: None,
    }
}

fn cfg() -> TrainConfig {
    TrainConfig {
        optimizer: OptimizerKind::Adam,
        lr: 0.05,
        log_every: 1,
        stages: vec![
            StageConfig {
                name: "w".into(),
                groups: vec!["weights".into()],
                steps: 30,
                lr: 0.2,
                optimizer: None,
            },
            StageConfig {
                name: "all".into(),
                groups: vec![],
                steps: 30,
                lr: 0.3,
                optimizer: Some(OptimizerKind::Sgd),
            },
        ],
        ..Default::default()
    }
}

fn table(seed: u64) -> toml::Table {
    toml::from_str(&format!(
        "experiment = \"test\"\nseed = {seed}\n[run]\ncheckpoint_every = 10\ncheckpoint_log_until = 8\n"
    ))
    .unwrap()
}

/// The `[run]` schedule of [`table`], as `Prepared::run` would set it from a
/// typed config (these tests drive the trainer without a paper).
fn schedule(ctx: &mut RunCtx) {
    ctx.set_run_config(crate::run::RunConfig {
        checkpoint_every: 10,
        checkpoint_log_until: 8,
        ..Default::default()
    });
}

fn no_probe() -> impl FnMut(&mut Regress, u64, &mut RunCtx) -> Result<(), crate::run::RunError> {
    |_, _, _| Ok(())
}

fn train_fresh(
    dir: &std::path::Path,
    stop_at: Option<u64>,
) -> (Regress, Result<super::Fitted, TrainError>) {
    let mut ctx = RunCtx::create(dir, table(4), "test", true).unwrap();
    schedule(&mut ctx);
    ctx.stop_at = stop_at;
    let mut m = model(4);
    let r = fit(&mut m, &cfg(), &mut ctx, &mut no_probe());
    (m, r)
}

#[test]
fn interrupted_and_resumed_run_is_bit_identical() {
    let tmp = tempfile::tempdir().unwrap();
    let (full, r) = train_fresh(&tmp.path().join("full"), None);
    r.unwrap();
    for stop in [1u64, 13, 30, 47] {
        let dir = tmp.path().join(format!("cut{stop}"));
        let (_, r) = train_fresh(&dir, Some(stop));
        let e = r.unwrap_err();
        assert!(
            matches!(e, TrainError::Interrupted { step, .. } if step == stop),
            "{e}"
        );
        let (mut ctx, at) = RunCtx::resume(&dir, true).unwrap();
        schedule(&mut ctx);
        assert_eq!(at, stop);
        let mut m = model(4);
        fit(&mut m, &cfg(), &mut ctx, &mut no_probe()).unwrap();
        assert_eq!(m.w.value(), full.w.value(), "stopped at {stop}");
        assert_eq!(m.b.value(), full.b.value(), "stopped at {stop}");
        let a = std::fs::read_to_string(tmp.path().join("full/metrics.jsonl")).unwrap();
        let b = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap();
        assert_eq!(a, b, "metrics after resuming at {stop}");
    }
    // The training actually learned something (the test would pass vacuously otherwise).
    assert!(
        (full.w.value()[1] - TRUE_W[1]).abs() < 0.5,
        "{:?}",
        full.w.value()
    );
}

#[test]
fn same_seed_gives_identical_metrics_and_different_seed_does_not() {
    let tmp = tempfile::tempdir().unwrap();
    train_fresh(&tmp.path().join("a"), None).1.unwrap();
    train_fresh(&tmp.path().join("b"), None).1.unwrap();
    let a = std::fs::read(tmp.path().join("a/metrics.jsonl")).unwrap();
    let b = std::fs::read(tmp.path().join("b/metrics.jsonl")).unwrap();
    assert_eq!(a, b);
    let mut ctx = RunCtx::create(&tmp.path().join("c"), table(5), "test", true).unwrap();
    schedule(&mut ctx);
    let mut m = model(5);
    fit(&mut m, &cfg(), &mut ctx, &mut no_probe()).unwrap();
    let c = std::fs::read(tmp.path().join("c/metrics.jsonl")).unwrap();
    assert_ne!(a, c);
}

#[test]
fn log_spaced_checkpoints_are_written() {
    let tmp = tempfile::tempdir().unwrap();
    train_fresh(&tmp.path().join("r"), None).1.unwrap();
    let steps: Vec<u64> = crate::run::checkpoint::list(&tmp.path().join("r/checkpoints"))
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    assert_eq!(steps, vec![0, 1, 2, 4, 8, 10, 20, 30, 40, 50, 60]);
}

#[test]
fn nan_gradient_names_step_and_group_and_keeps_a_good_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("nan");
    let mut ctx = RunCtx::create(&dir, table(4), "test", true).unwrap();
    schedule(&mut ctx);
    let mut m = model(4);
    m.nan_at = Some(35);
    let e = fit(&mut m, &cfg(), &mut ctx, &mut no_probe()).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("step 35") && msg.contains("`bias`"), "{msg}");
    let ck = dir.join("checkpoints/step_000035.safetensors");
    assert!(msg.contains(&ck.display().to_string()), "{msg}");
    let loaded = crate::run::checkpoint::load::<f64>(&ck).unwrap();
    assert!(loaded.tensors["b"].1.iter().all(|x| x.is_finite()));
}

/// Resumes `dir` and trains to the end; the parameters and metrics must equal
/// those of the uninterrupted run in `full`. Returns the step resumed from.
fn resume_matches(dir: &std::path::Path, full: &Regress, full_dir: &std::path::Path) -> u64 {
    let (mut ctx, at) = RunCtx::resume(dir, true).unwrap();
    schedule(&mut ctx);
    let mut m = model(4);
    fit(&mut m, &cfg(), &mut ctx, &mut no_probe()).unwrap();
    assert_eq!(m.w.value(), full.w.value(), "{}", dir.display());
    assert_eq!(m.b.value(), full.b.value(), "{}", dir.display());
    let a = std::fs::read_to_string(full_dir.join("metrics.jsonl")).unwrap();
    let b = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap();
    assert_eq!(a, b, "metrics of {}", dir.display());
    at
}

#[test]
fn a_corrupt_newest_checkpoint_falls_back_to_the_one_before() {
    let tmp = tempfile::tempdir().unwrap();
    let full_dir = tmp.path().join("full");
    let (full, r) = train_fresh(&full_dir, None);
    r.unwrap();
    // One byte anywhere in the file, changed to any other value (seeded).
    let mut pick = crate::rng::stream(14, Stream::Data);
    for case in 0..24 {
        let dir = tmp.path().join(format!("c{case}"));
        train_fresh(&dir, Some(13)).1.unwrap_err();
        let ck = dir.join("checkpoints/step_000013.safetensors");
        let mut bytes = std::fs::read(&ck).unwrap();
        let at = pick.random_range(0..bytes.len());
        bytes[at] ^= pick.random_range(1..=255u8);
        std::fs::write(&ck, &bytes).unwrap();
        let from = resume_matches(&dir, &full, &full_dir);
        // Step 10 is the checkpoint before 13 on this schedule, unless the change
        // was one the file cannot tell (a JSON space turned into another blank).
        let intact =
            crate::run::checkpoint::verify(&dir.join("checkpoints/step_000013.safetensors"));
        assert!(
            from == 10 || (from == 13 && intact.is_ok()),
            "byte {at}: resumed from {from}"
        );
        if from == 10 {
            assert!(
                dir.join("checkpoints/step_000013.safetensors.corrupt")
                    .exists()
                    || intact.is_ok()
            );
        }
    }
    // Cut in half (a copy that died half-way): the same fallback.
    let dir = tmp.path().join("half");
    train_fresh(&dir, Some(13)).1.unwrap_err();
    let ck = dir.join("checkpoints/step_000013.safetensors");
    let bytes = std::fs::read(&ck).unwrap();
    std::fs::write(&ck, &bytes[..bytes.len() / 2]).unwrap();
    assert_eq!(resume_matches(&dir, &full, &full_dir), 10);
    let e =
        crate::run::checkpoint::verify(&dir.join("checkpoints/step_000013.safetensors.corrupt"))
            .unwrap_err()
            .to_string();
    assert!(
        e.contains("step_000013") && e.contains("truncated") && e.lines().count() == 1,
        "{e}"
    );
}

#[test]
fn with_no_checkpoint_left_a_resume_starts_over_identically() {
    let tmp = tempfile::tempdir().unwrap();
    let full_dir = tmp.path().join("full");
    let (full, r) = train_fresh(&full_dir, None);
    r.unwrap();
    let dir = tmp.path().join("m");
    train_fresh(&dir, Some(3)).1.unwrap_err();
    for (_, p) in crate::run::checkpoint::list(&dir.join("checkpoints")) {
        std::fs::remove_file(p).unwrap();
    }
    assert_eq!(resume_matches(&dir, &full, &full_dir), 0);
}

#[test]
fn a_nan_after_the_update_names_the_last_checkpoint_written() {
    use mechlab_engine::Parameters as _;
    // A learning rate so large that the update overflows: state s is lost.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("big");
    let mut ctx = RunCtx::create(&dir, table(4), "test", true).unwrap();
    schedule(&mut ctx);
    let mut m = model(4);
    m.visit_mut(&mut |p| p.value_mut().iter_mut().for_each(|x| *x = 1e300));
    let c = TrainConfig {
        stages: vec![],
        optimizer: OptimizerKind::Sgd,
        lr: 1e300,
        steps: 5,
        ..cfg()
    };
    let msg = fit(&mut m, &c, &mut ctx, &mut no_probe())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("step_000000.safetensors"), "{msg}");
    assert!(!msg.contains("previous checkpoint"), "{msg}");
}

/// A model that asks to stop once its loss drops below a threshold.
struct Stopper(Regress, f64, bool);
impl Parameters<f64> for Stopper {
    fn visit(&self, f: &mut dyn FnMut(&Param<f64>)) {
        self.0.visit(f)
    }
    fn visit_mut(&mut self, f: &mut dyn FnMut(&mut Param<f64>)) {
        self.0.visit_mut(f)
    }
}
impl Trainable<f64> for Stopper {
    fn train_step(&mut self, step: u64) -> f64 {
        let l = self.0.train_step(step);
        self.2 = l < self.1;
        l
    }
    fn stop_requested(&self) -> bool {
        self.2
    }
}

#[test]
fn stop_requested_ends_training_early_with_a_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("stop");
    let mut ctx = RunCtx::create(&dir, table(4), "test", true).unwrap();
    schedule(&mut ctx);
    let mut m = Stopper(model(4), 0.5, false);
    let mut probe = |_: &mut Stopper, _: u64, _: &mut RunCtx| Ok(());
    let f = fit(&mut m, &cfg(), &mut ctx, &mut probe).unwrap();
    assert!(f.steps > 0 && f.steps < cfg().total_steps(), "{}", f.steps);
    let last = crate::run::checkpoint::latest(&ctx.checkpoint_dir()).unwrap();
    assert!(
        last.display()
            .to_string()
            .contains(&format!("{:06}", f.steps)),
        "{}",
        last.display()
    );
    // Never asking to stop runs to the end.
    let mut ctx = RunCtx::create(&tmp.path().join("full"), table(4), "test", true).unwrap();
    schedule(&mut ctx);
    let mut m = Stopper(model(4), -1.0, false);
    assert_eq!(
        fit(&mut m, &cfg(), &mut ctx, &mut probe).unwrap().steps,
        cfg().total_steps()
    );
}
