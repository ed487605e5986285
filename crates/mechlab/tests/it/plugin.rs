//! The "adding a paper" guide of `docs/architecture.md`, exercised end to end.
//!
//! A paper written outside `crates/mechlab/src/papers/` (here, in a test crate,
//! as a downstream crate would) plugs in with one [`Paper`] impl and one
//! `Registry::with` line, and then `run`, `resume`, `report`, `sweep` and
//! `reproduce` work for it unchanged, through the same CLI entry point the
//! `mechlab` binary uses. With the analysis half (`Paper::load`, a hooked
//! model, and `Paper::intervene`), `inspect::load_model` and `mechlab intervene`
//! work for it too.
//!
//! The toy paper's claim: gradient descent on the squared loss
//! `½ mean (x_i − μ)²` drives `μ` to the sample mean. Small, but it uses every
//! part a real paper does: a typed config with an enum and value checks, a
//! seeded data stream, a model with a named parameter, the generic trainer with
//! its probes, checkpoints, a figure and a verdict.

use mechlab::analysis::{
    restore, Effect, InterveneError, Interventions, LoadError, Model, Request, RunDir,
};
use mechlab::config::presets::Preset;
use mechlab::experiment::{ExperimentError, Paper, Registry, ReproduceItem};
use mechlab::rng::{stream, Stream};
use mechlab::run::summary::Summary;
use mechlab::run::{RunConfig, RunCtx};
use mechlab::train::{fit, TrainConfig, Trainable};
use mechlab_engine::hooks::{Ablation, Batch, Hook, HookError, HookPoint, HookedModel, Tensor};
use mechlab_engine::hooks::{Axes, Site};
use mechlab_engine::{param, Param, Parameters};
use mechlab_report::{Figure, Series};
use rand::Rng;
use serde::{Deserialize, Serialize};

// --- 1. the config: one serde struct, every key with its default ---

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Noise {
    #[default]
    Uniform,
    Spiky,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct MeanData {
    n: usize,
    center: f64,
    noise: Noise,
}

impl Default for MeanData {
    fn default() -> Self {
        MeanData {
            n: 64,
            center: 3.0,
            noise: Noise::Uniform,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct MeanConfig {
    experiment: String,
    description: String,
    seed: u64,
    run: RunConfig,
    train: TrainConfig,
    data: MeanData,
}

// seed, [run] and [train] are read by the run machinery from this typed config.
mechlab::common_config!(MeanConfig);

impl Default for MeanConfig {
    fn default() -> Self {
        MeanConfig {
            experiment: "mean".into(),
            description: "gradient descent finds the sample mean".into(),
            seed: 0,
            run: RunConfig {
                checkpoint_log_until: 8,
                checkpoint_every: 20,
                probe_every: 5,
                ..RunConfig::default()
            },
            train: TrainConfig {
                lr: 0.3,
                steps: 60,
                log_every: 5,
                ..TrainConfig::default()
            },
            data: MeanData::default(),
        }
    }
}

// --- 2. the model: named parameters, forward and backward in `train_step` ---

struct MeanModel {
    mu: Param<f64>,
    xs: Vec<f64>,
}

impl Parameters<f64> for MeanModel {
    mechlab_engine::parameters!(f64; mu);
}

impl Trainable<f64> for MeanModel {
    fn train_step(&mut self, _step: u64) -> f64 {
        let mu = self.mu.value()[0];
        let n = self.xs.len() as f64;
        let loss = self.xs.iter().map(|x| 0.5 * (x - mu).powi(2)).sum::<f64>() / n;
        self.mu.grad_mut()[0] += self.xs.iter().map(|x| mu - x).sum::<f64>() / n;
        loss
    }
}

// --- 2b. the model for analysis: named hook points (TransformerLens-style) ---

/// The model's prediction for each sample of a batch (the ids index the samples):
/// `μ`, at the hook point `hook_mu` `[batch, d_model]` (d_model = 1).
impl HookedModel for MeanModel {
    fn hook_points(&self) -> Vec<HookPoint> {
        vec![HookPoint::new(
            "hook_mu",
            "[batch, d_model]",
            "the prediction μ",
        )]
    }
    fn output_layout(&self) -> String {
        "[batch]".into()
    }
    fn forward_hooked(&mut self, batch: &Batch, site: &mut Site) -> Result<Tensor, HookError> {
        self.forward(batch, site)
    }
}

impl MeanModel {
    fn forward(&self, batch: &Batch, site: &mut Site<'_>) -> Result<Tensor, HookError> {
        let mut mu = Tensor::new(vec![batch.batch, 1], vec![self.mu.value()[0]; batch.batch]);
        site.visit("hook_mu", &mut mu, Axes::default())?;
        Ok(Tensor::new(vec![batch.batch], mu.data))
    }
}

/// The samples, from the seed's data stream.
fn samples(cfg: &MeanConfig, seed: u64) -> Vec<f64> {
    let mut rng = stream(seed, Stream::Data);
    (0..cfg.data.n)
        .map(|_| {
            let u: f64 = rng.random_range(-1.0..1.0);
            cfg.data.center
                + match cfg.data.noise {
                    Noise::Uniform => u,
                    Noise::Spiky => u.powi(7) * 10.0,
                }
        })
        .collect()
}

// --- 3. the paper: presets, value checks, run (data, model, probes, figure, verdict) ---

struct MeanPaper;

static PRESETS: &[Preset] = &[Preset {
    name: "mean-demo",
    text: "experiment = \"mean\"\ndescription = \"the sample mean, by gradient descent\"\n[data]\nn = 32\n",
}];

impl Paper for MeanPaper {
    type Config = MeanConfig;
    fn name(&self) -> &'static str {
        "mean"
    }
    fn citation(&self) -> &'static str {
        "A toy paper for the plugin guide"
    }
    fn presets(&self) -> &'static [Preset] {
        PRESETS
    }
    fn validate(&self, cfg: &MeanConfig) -> Result<(), String> {
        if cfg.data.n == 0 {
            return Err("data.n = 0: must be at least 1".into());
        }
        Ok(())
    }
    fn run(&self, cfg: &MeanConfig, ctx: &mut RunCtx) -> Result<Summary, ExperimentError> {
        let xs = samples(cfg, cfg.seed);
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        let mut model = MeanModel {
            mu: param("mu", "mu", &[1], vec![0.0]),
            xs,
        };
        let mut probe = |m: &mut MeanModel, step: u64, ctx: &mut RunCtx| {
            ctx.log("probe", step, &[("mu", m.mu.value()[0])])
        };
        fit(&mut model, &cfg.train, ctx, &mut probe)?;
        let recs = ctx.records()?;
        let (x, y) = mechlab::run::metrics::series(&recs, "probe", "mu");
        ctx.figure(
            &Figure::lines("mu", "μ over training", "step", "μ")
                .with_series(Series::new("μ", x, y))
                .with_hline("sample mean", mean),
        )?;
        let mu = model.mu.value()[0];
        let mut s = Summary::new("mean", cfg.seed);
        s.metric("mu", mu);
        s.verdict(
            "mean-estimate.converges",
            "gradient descent converges to the sample mean",
            &format!("μ → {mean:.4}"),
            "derivation: the squared loss's minimiser is the sample mean",
            format!("{mu:.6}"),
            (mu - mean).abs() < 1e-6,
        );
        Ok(s)
    }
    fn reproduce(&self) -> Vec<ReproduceItem> {
        // The first run is the longest, so that side by side it ends last.
        vec![
            ReproduceItem::new("mean-demo", &["train.steps=3000"]),
            ReproduceItem::new("mean-demo", &["seed=1"]),
            ReproduceItem::new("mean-demo", &["data.noise=spiky"]),
        ]
    }

    // --- 3b. the analysis half: the model at a checkpoint, and its interventions ---

    fn load(&self, cfg: &MeanConfig, run: &RunDir, step: Option<u64>) -> Result<Model, LoadError> {
        let model = MeanModel {
            mu: param("mu", "mu", &[1], vec![0.0]),
            xs: samples(cfg, cfg.seed),
        };
        restore(model, &run.read::<f64>(step)?)
    }
    fn intervene(
        &self,
        cfg: &MeanConfig,
        run: &RunDir,
        req: &Request,
    ) -> Result<Interventions, InterveneError> {
        req.fixed_suite("mean", "μ zeroed, against μ mean-ablated")?;
        let mut m = self.load(cfg, run, req.step)?;
        let xs = samples(cfg, cfg.seed);
        let batch = Batch::new((0..xs.len() as u32).collect(), xs.len(), 1);
        let loss = |y: &Tensor| {
            y.data
                .iter()
                .zip(&xs)
                .map(|(f, x)| 0.5 * (x - f).powi(2))
                .sum::<f64>()
                / xs.len() as f64
        };
        let with = |a: Ablation| Hook {
            name: "hook_mu".into(),
            ablation: a,
            heads: None,
            positions: None,
        };
        let clean = loss(&m.run_with_hooks(&batch, &[])?);
        let zero = loss(&m.run_with_hooks(&batch, &[with(Ablation::Zero)])?);
        // μ is one number for every sample, so its batch mean is itself.
        let mean = loss(&m.run_with_hooks(&batch, &[with(Ablation::Mean)])?);
        Ok(Interventions {
            data: format!("the run's {} samples", xs.len()),
            effects: vec![
                Effect::new("zero-mu", "does the fit rest on μ?", "mean squared loss")
                    .values(clean, zero, mean)
                    .labels("μ zeroed", "μ mean-ablated over the batch"),
            ],
            ..Interventions::default()
        })
    }
}

// --- 4. register it: one line ---

fn registry() -> Registry {
    mechlab::papers::registry().with(&MeanPaper)
}

fn try_cli(args: &[&str]) -> anyhow::Result<i32> {
    let mut argv = vec!["mechlab", "--quiet"];
    argv.extend_from_slice(args);
    mechlab::cli::run(registry(), argv)
}

fn cli(args: &[&str]) -> i32 {
    try_cli(args).expect("the command runs")
}

#[test]
fn a_paper_from_another_crate_runs_through_every_command() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |name: &str| tmp.path().join(name).display().to_string();

    // run: through the CLI entry, with a type-checked override.
    assert_eq!(
        cli(&[
            "run",
            "mean-demo",
            "--set",
            "data.noise=spiky",
            "--out",
            &p("a")
        ]),
        0
    );
    let summary = mechlab::run::read_summary(&tmp.path().join("a")).unwrap();
    assert!(summary.all_pass(), "{summary:?}");
    assert!(tmp.path().join("a/report.html").is_file());
    assert!(tmp.path().join("a/figures/mu.svg").is_file());
    let html = std::fs::read_to_string(tmp.path().join("a/report.html")).unwrap();
    assert!(html.contains("A toy paper for the plugin guide"));

    // Bad values are refused before any folder exists, naming the key.
    let bad = mechlab::commands::resolve(&registry(), "mean-demo", &["data.n=0".into()], None)
        .err()
        .expect("refused")
        .to_string();
    assert!(bad.contains("data.n = 0"), "{bad}");
    let bad = mechlab::commands::resolve(
        &registry(),
        "mean-demo",
        &["data.noise=gaussian".into()],
        None,
    )
    .err()
    .expect("refused")
    .to_string();
    assert!(bad.contains("gaussian"), "{bad}");
    let e = try_cli(&[
        "run",
        "mean-demo",
        "--set",
        "data.n=0",
        "--out",
        &p("never"),
    ])
    .unwrap_err();
    assert!(e.to_string().contains("data.n = 0"), "{e}");
    assert!(!tmp.path().join("never").exists());

    // resume: an interrupted run ends bit-identical to the uninterrupted one.
    let resolved =
        mechlab::commands::resolve(&registry(), "mean-demo", &["data.noise=spiky".into()], None)
            .unwrap();
    let dir = tmp.path().join("b");
    let mut ctx = RunCtx::create(&dir, resolved.table.clone(), "test", true).unwrap();
    ctx.stop_at = Some(23);
    let e = resolved.prepared.run(&mut ctx).unwrap_err().to_string();
    // the message names the command that continues this run
    let again = format!("continue with `mechlab resume {}`", dir.display());
    assert!(e.contains(&again), "{e}");
    // a report of the unfinished run says the same, rather than a missing file
    let e = mechlab::commands::report::build(&registry(), &dir)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("has not finished") && e.contains("mechlab resume"),
        "{e}"
    );
    assert_eq!(cli(&["resume", &p("b")]), 0);
    let resumed = mechlab::run::read_summary(&dir).unwrap();
    assert_eq!(resumed, summary);

    // report: rebuilt from the folder alone.
    std::fs::remove_file(tmp.path().join("a/report.html")).unwrap();
    assert_eq!(cli(&["report", &p("a")]), 0);
    assert!(tmp.path().join("a/report.html").is_file());

    // sweep: a grid over the paper's own enum, two seeds.
    assert_eq!(
        cli(&[
            "sweep",
            "mean-demo",
            "--grid",
            "data.noise=uniform,spiky",
            "--seeds",
            "0..2",
            "--jobs",
            "1",
            "--out",
            &p("sweep")
        ]),
        0
    );
    let index = std::fs::read_to_string(tmp.path().join("sweep/index.csv")).unwrap();
    assert_eq!(index.lines().count(), 1 + 4, "{index}");

    // reproduce: the paper's reproduce items, in the combined report.
    assert_eq!(
        cli(&[
            "reproduce",
            "mean",
            "--check",
            "--jobs",
            "1",
            "--out",
            &p("repro")
        ]),
        0
    );
    let combined = std::fs::read_to_string(tmp.path().join("repro/report.md")).unwrap();
    assert!(
        combined.contains("gradient descent converges to the sample mean"),
        "{combined}"
    );
    // Three runs side by side: the same results, bit for bit, in the same order,
    // though the first (the longest) ends last.
    assert_eq!(
        cli(&["reproduce", "mean", "--jobs", "3", "--out", &p("repro3")]),
        0
    );
    let combined_summary = |dir: &str| -> serde_json::Value {
        serde_json::from_str(
            &std::fs::read_to_string(tmp.path().join(dir).join("summary.json")).unwrap(),
        )
        .unwrap()
    };
    let runs = |dir: &str| -> Vec<String> {
        combined_summary(dir)["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["preset"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(combined_summary("repro")["jobs"], 1);
    assert_eq!(combined_summary("repro3")["jobs"], 3);
    let names = runs("repro");
    assert_eq!(names.len(), 3, "{names:?}");
    assert_eq!(runs("repro3"), names);
    for name in &names {
        for file in ["summary.json", "metrics.jsonl"] {
            let read = |d: &str| std::fs::read(tmp.path().join(d).join(name).join(file)).unwrap();
            assert!(read("repro") == read("repro3"), "{name}/{file} differs");
        }
    }

    // inspect and intervene: the analysis half, through the same registry.
    let mut m = mechlab::inspect::load_model(&registry(), &tmp.path().join("a"), None).unwrap();
    let (y, cache) = m
        .run_with_cache(&Batch::new(vec![0, 1], 2, 1), &["hook_mu"])
        .unwrap();
    assert_eq!(y.data[0], summary.metrics["mu"]);
    assert_eq!(cache["hook_mu"].shape, vec![2, 1]);
    assert_eq!(cli(&["intervene", &p("a")]), 0);
    let v: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(tmp.path().join("a/intervene.json")).unwrap(),
    )
    .unwrap();
    let e = &v["effects"][0];
    let (clean, zero, mean) = (
        e["clean"].as_f64().unwrap(),
        e["intervened"].as_f64().unwrap(),
        e["control"].as_f64().unwrap(),
    );
    assert!(
        zero > 2.0 * clean,
        "zeroing μ = 3 raises the loss: {clean} → {zero}"
    );
    assert_eq!(mean, clean, "the mean of a constant is itself");
    assert!(tmp
        .path()
        .join("a/figures/intervene_effects.json")
        .is_file());
    assert!(std::fs::read_to_string(tmp.path().join("a/report.md"))
        .unwrap()
        .contains("## Interventions"));
    let bad = try_cli(&["intervene", &p("a"), "--patch"])
        .unwrap_err()
        .to_string();
    assert!(bad.contains("--patch") && bad.contains("μ zeroed"), "{bad}");

    // list: the paper's preset sits beside the built-in ones.
    let rows = mechlab::commands::list(&registry());
    let names: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    assert!(names.contains(&"mean-demo") && names.contains(&"induction-simplified"));
}
