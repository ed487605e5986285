//! Induction heads: "Unveiling Induction Heads: Provable Training Dynamics and
//! Feature Learning in Transformers" (Chen, Sheen, Wang, Yang; NeurIPS 2024).
//!
//! A two-layer RPE transformer trained by full-batch gradient descent on in-context
//! n-gram data becomes a *copier* (layer-1 heads each copy one parent distance), a
//! *selector* (the FFN's kernel keeps the subset of heads that matches the true
//! parents, the one maximising the modified χ² mutual information) and a
//! *classifier* (layer 2's scale `a` grows, sharpening the induction head). This
//! experiment trains the simplified model, logs the three probes over training,
//! compares the loss with the uniform, Bayes, induction-head and oracle baselines,
//! and tests the trained parameters on other lengths and priors.
//!
//! ```
//! use mechlab::papers::induction::InductionConfig;
//! let cfg = InductionConfig::default();
//! assert_eq!(cfg.data.parents, vec![1, 2]);
//! ```

pub mod analysis;
pub mod causal;
mod chi2;
pub mod config;
pub mod data;
pub mod direct;
mod direct_l1;
pub mod full;
pub mod hooks;
pub mod interventions;
mod layer2;
pub mod probes;
pub mod simplified;
pub(crate) mod task;
mod viewer;

use crate::config::presets::Preset;
use crate::experiment::{Dtype, ExperimentError, Paper, ReproduceItem};
use crate::papers::induction::direct::{Direct, DirectConfig};
use crate::papers::induction::full::{Full, FullConfig};
use crate::papers::induction::probes::{self as probe, InductionModel};
use crate::papers::induction::simplified::{subset_name, LossKind, Simplified, SimplifiedConfig};
use crate::rng::{stream, Stream};
use crate::run::metrics;
use crate::run::summary::Summary;
use crate::run::{RunCtx, RunError};
use crate::train::fit;
use data::{Baseline, MarkovSpec};
use mechlab_engine::{F64x2, Float};
use mechlab_report::{Figure, Series};
pub use task::Task;

fn bad(msg: String) -> ExperimentError {
    ExperimentError::Data(msg)
}

use config::check;
pub use config::{DataConfig, InductionConfig, ModelConfig, ModelKind, ModelPath, ProbeConfig};

/// The registered experiment.
pub struct Induction;

/// The paper's presets.
pub const PRESETS: &[Preset] = &[
    crate::preset!("induction-simplified"),
    crate::preset!("induction-staged"),
    crate::preset!("induction-full"),
    crate::preset!("induction-bigram"),
    crate::preset!("induction-noncontiguous"),
    crate::preset!("induction-vocab10"),
    crate::preset!("induction-copier"),
    crate::preset!("induction-copier-frozen"),
];

impl Paper for Induction {
    type Config = InductionConfig;
    fn name(&self) -> &'static str {
        "induction"
    }
    fn citation(&self) -> &'static str {
        "Chen, Sheen, Wang, Yang (2024). Unveiling Induction Heads: Provable Training Dynamics and Feature Learning in Transformers. NeurIPS 2024, arXiv:2409.10559"
    }
    fn presets(&self) -> &'static [Preset] {
        PRESETS
    }
    fn validate(&self, cfg: &InductionConfig) -> Result<(), String> {
        check(cfg)
    }
    fn run(&self, cfg: &InductionConfig, ctx: &mut RunCtx) -> Result<Summary, ExperimentError> {
        let m = &cfg.model;
        let (simple, full) = (simplified_config(cfg), full_config(cfg));
        if !config::uses_table(cfg) {
            let dc = direct_config(cfg);
            return match m.dtype {
                Dtype::F32 => run_typed(cfg, ctx, Direct::<f32>::new(&dc)),
                Dtype::F64 => run_typed(cfg, ctx, Direct::<f64>::new(&dc)),
                Dtype::F64x2 => run_typed(cfg, ctx, Direct::<F64x2>::new(&dc)),
            };
        }
        match (m.kind, m.dtype) {
            (ModelKind::Full, Dtype::F32) => run_typed(cfg, ctx, Full::<f32>::new(&full)),
            (ModelKind::Full, Dtype::F64) => run_typed(cfg, ctx, Full::<f64>::new(&full)),
            (ModelKind::Full, Dtype::F64x2) => run_typed(cfg, ctx, Full::<F64x2>::new(&full)),
            (ModelKind::Simplified, Dtype::F32) => {
                run_typed(cfg, ctx, Simplified::<f32>::new(&simple))
            }
            (ModelKind::Simplified, Dtype::F64) => {
                run_typed(cfg, ctx, Simplified::<f64>::new(&simple))
            }
            (ModelKind::Simplified, Dtype::F64x2) => {
                run_typed(cfg, ctx, Simplified::<F64x2>::new(&simple))
            }
        }
    }
    fn reproduce(&self) -> Vec<ReproduceItem> {
        vec![
            ReproduceItem::new("induction-simplified", REPRODUCE_OVERRIDES),
            ReproduceItem::new("induction-noncontiguous", REPRODUCE_SHORT),
            ReproduceItem::new("induction-bigram", REPRODUCE_SHORT),
            ReproduceItem::new("induction-vocab10", REPRODUCE_GENERAL),
            // The frozen-copier verdict and its control (docs/interventions.md).
            ReproduceItem::new("induction-copier", REPRODUCE_COPIER),
            ReproduceItem::new("induction-copier-frozen", REPRODUCE_COPIER),
        ]
    }
    fn load(
        &self,
        cfg: &InductionConfig,
        run: &crate::analysis::RunDir,
        step: Option<u64>,
    ) -> Result<crate::analysis::Model, crate::analysis::LoadError> {
        analysis::load(cfg, run, step)
    }
    fn intervene(
        &self,
        cfg: &InductionConfig,
        run: &crate::analysis::RunDir,
        req: &crate::analysis::Request,
    ) -> Result<crate::analysis::Interventions, crate::analysis::InterveneError> {
        analysis::intervene(cfg, run, req)
    }
}

/// The simplified model's settings from a run's config (the table path).
pub fn simplified_config(cfg: &InductionConfig) -> SimplifiedConfig {
    let m = &cfg.model;
    SimplifiedConfig {
        d_vocab: cfg.data.vocab,
        n_heads: m.n_heads,
        degree: m.degree,
        w_plus: m.w_plus,
        w_minus: m.w_minus,
        c_init: m.c_init,
        a_init: m.a_init,
        loss: m.loss,
        nll_floor: m.nll_floor,
    }
}

/// The full model's settings from a run's config (the table path).
pub fn full_config(cfg: &InductionConfig) -> FullConfig {
    let m = &cfg.model;
    FullConfig {
        d_vocab: cfg.data.vocab,
        n_heads: m.n_heads,
        degree: m.degree,
        w_plus: m.w_plus,
        w_minus: m.w_minus,
        c_init: m.c_init,
        a_init: m.a_init,
        proj_init: m.proj_init,
        loss: m.loss,
        nll_floor: m.nll_floor,
    }
}

/// Either model's settings for the general (direct) path.
pub fn direct_config(cfg: &InductionConfig) -> DirectConfig {
    let f = full_config(cfg);
    DirectConfig {
        kind: cfg.model.kind,
        d_vocab: f.d_vocab,
        n_heads: f.n_heads,
        degree: f.degree,
        w_plus: f.w_plus,
        w_minus: f.w_minus,
        c_init: f.c_init,
        a_init: f.a_init,
        proj_init: f.proj_init,
        loss: f.loss,
        nll_floor: f.nll_floor,
    }
}

/// The shortened schedule `mechlab reproduce induction` runs for the paper's setting
/// (1 500 of the paper's 50 000 epochs; see `docs/induction.md`).
pub const REPRODUCE_OVERRIDES: &[&str] = &["train.steps=1500", "probe.gen_n=500"];
/// The S = 10 preset's schedule under `mechlab reproduce induction` (the direct
/// path; see `docs/induction.md`).
pub const REPRODUCE_GENERAL: &[&str] = &["train.steps=300", "probe.gen_n=200"];
/// The copier pair's schedule under `mechlab reproduce induction`: head 2 moves
/// onto distance 4 between epochs 600 and 1 000 when free (seed 2024).
pub const REPRODUCE_COPIER: &[&str] = &["train.steps=1200", "probe.gen_n=300"];
/// The variants' shortened schedule under `mechlab reproduce induction`.
pub const REPRODUCE_SHORT: &[&str] = &["train.steps=600", "probe.gen_n=300"];

pub(crate) fn spec_of(cfg: &InductionConfig, n: usize) -> MarkovSpec {
    MarkovSpec {
        vocab: cfg.data.vocab,
        seq_len: cfg.data.seq_len,
        parents: cfg.data.parents.clone(),
        alpha: cfg.data.alpha,
        n_seqs: n,
        variant: cfg.data.variant,
    }
}

fn run_typed<T: Float, M: InductionModel<T> + mechlab_engine::hooks::HookedModel>(
    cfg: &InductionConfig,
    ctx: &mut RunCtx,
    model: M,
) -> Result<Summary, ExperimentError> {
    let seed = ctx.seed();
    let spec = spec_of(cfg, cfg.data.n_train + cfg.data.n_val);
    let all = data::generate(&spec, seed).map_err(bad)?;
    let train = all.slice(0, cfg.data.n_train);
    let val = all.slice(cfg.data.n_train, all.len());
    let code = cfg.model.loss == LossKind::Code;
    let h = cfg.model.n_heads;
    let nd = 2 * h - 1;
    let mut task = Task {
        model,
        tokens: train.tokens.clone(),
        seq_len: cfg.data.seq_len,
        freezes: interventions::Freezes::new(&cfg.interventions, cfg.model.kind).map_err(bad)?,
        heads: interventions::HeadInterventions::new(&cfg.interventions, h).map_err(bad)?,
    };
    // Probes before the first update see the state of update 1.
    if !task.model.set_ablated(task.heads.ablated(0))
        || !task.model.set_clamped(task.heads.clamped(0))
    {
        return Err(bad(
            "a kind = \"ablate\" or \"clamp\" intervention needs the direct path (model.path = \"auto\" or \"direct\"; clamp: model.kind = \"simplified\")".into(),
        ));
    }
    let init_pattern = task.model.interior_pattern();
    let names: Vec<String> = task
        .model
        .subsets()
        .iter()
        .map(|m| subset_name(*m, h))
        .collect();
    let keys: Vec<String> = names.iter().map(|n| format!("share.{n}")).collect();
    let floor = cfg.model.nll_floor;

    // --- train, probing the three parts as they form ---
    let mut probe_fn = |t: &mut Task<M>, step: u64, ctx: &mut RunCtx| -> Result<(), RunError> {
        let shares = t.model.c_shares();
        let (vc, vt) = probe::model_losses(&mut t.model, &val, floor);
        let pat = t.model.interior_pattern();
        let mut rec: Vec<(String, f64)> = vec![
            ("a".into(), t.model.a()),
            ("val_code_loss".into(), vc),
            ("val_nll".into(), vt),
        ];
        for (i, m) in t.model.subsets().iter().enumerate() {
            if m & 1 == 0 {
                rec.push((keys[i].clone(), shares[i]));
            }
        }
        for hd in 0..h {
            for r in 0..nd {
                rec.push((format!("pattern.h{hd}.d{}", r + 1), pat[hd * nd + r]));
            }
        }
        let refs: Vec<(&str, f64)> = rec.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        ctx.log("probe", step, &refs)
    };
    let fitted = fit(&mut task, &cfg.train, ctx, &mut probe_fn)?;
    // The final measurements see the model as training left it: an ablation
    // that lasts to the end holds, one whose window closed does not.
    task.model.set_ablated(task.heads.ablated(cfg.train.steps));
    task.model.set_clamped(task.heads.clamped(cfg.train.steps));

    // --- final measurements ---
    let model = &mut task.model;
    let sel = probe::selector::<T, M>(model);
    let window = nd;
    let (mi_window, mi_size) = probe::mi_search(window, cfg.model.degree);
    let (mi_best, mi_all) = probe::mi_argmax(&train, mi_window, mi_size, cfg.probe.mi_power);
    let mut truth = cfg.data.parents.clone();
    truth.sort_unstable();
    let (val_code, val_nll) = probe::model_losses(model, &val, floor);
    let base = |b: Baseline| data::baseline_losses(&val, &b);
    let uniform = base(Baseline::Uniform);
    let bayes = base(Baseline::Bayes(truth.clone()));
    let gih = base(Baseline::Empirical(truth.clone()));
    let oracle = base(Baseline::Oracle);
    let a_final = model.a();
    let mut grng = stream(seed, Stream::Sample);
    let mut points: Vec<(usize, f64)> = cfg
        .probe
        .gen_lengths
        .iter()
        .map(|&l| (l, cfg.data.alpha))
        .collect();
    points.extend(cfg.probe.gen_alphas.iter().map(|&a| (cfg.data.seq_len, a)));
    let gspec = spec_of(cfg, cfg.probe.gen_n);
    let gen = probe::generalisation(model, &gspec, &points, &mut grng, floor).map_err(bad)?;

    let (prev_scores, ind_score) =
        probe::head_scores::<T, M>(model, cfg.data.vocab, 20, 200, &mut grng);

    // --- figures ---
    let (acts, viewers) = viewer::attention_viewers(model, &val)
        .map_err(|e| bad(format!("attention viewer: {e}")))?;
    ctx.record_activations(&acts)?;
    for v in &viewers {
        ctx.figure(v)?;
    }
    let recs = ctx.records()?;
    let mut fig = Figure::lines("c_shares", "Selector: c² share of each kernel subset", "epoch", "c_δ² / Σ c²").log_x()
        .caption("Normalised c_δ² of the subsets without the raw token; the subset of heads copying the true parents should take the whole share.");
    for (i, m) in model.subsets().iter().enumerate() {
        if m & 1 == 0 {
            let (x, y) = metrics::series(&recs, "probe", &keys[i]);
            fig = fig.with_series(Series::new(
                &names[i],
                x.iter().map(|s| s + 1.0).collect(),
                y,
            ));
        }
    }
    ctx.figure(&fig)?;
    let (ax, ay) = metrics::series(&recs, "probe", "a");
    ctx.figure(&Figure::lines("a", "Classifier: the layer-2 scale a(t)", "epoch + 1", "a").log_x()
        .caption("a grows without bound under gradient flow: the induction head sharpens towards the empirical n-gram.")
        .with_series(Series::new("a", ax.iter().map(|s| s + 1.0).collect(), ay)))?;
    let dticks: Vec<String> = (1..=nd).map(|r| format!("d={r}")).collect();
    let hticks: Vec<String> = (0..h).map(|r| format!("head {r}")).collect();
    for (id, title, vals) in [
        (
            "W_before",
            "Copier: layer-1 attention per distance, at init",
            init_pattern.clone(),
        ),
        (
            "W_after",
            "Copier: layer-1 attention per distance, after training",
            model.interior_pattern(),
        ),
    ] {
        ctx.figure(&Figure::heatmap(id, title, "relative distance", "head", h, nd, vals, false)
            .with_ticks(hticks.clone(), dticks.clone())
            .caption("softmax(W[:, h]) over head h's window h+1..h+H, at a position where every distance exists."))?;
    }
    let (lx, ly) = metrics::series(&recs, "probe", "val_code_loss");
    let (tx, ty) = metrics::series(&recs, "train", "loss");
    let mut lf = Figure::lines("loss", "Loss against the baselines", "epoch + 1", if code { "code loss" } else { "−log ŷ_y" }).log_x()
        .caption("Training and validation loss; dashed lines: the baselines on the validation set under the same loss.");
    if code {
        lf = lf.with_series(Series::new(
            "validation",
            lx.iter().map(|s| s + 1.0).collect(),
            ly,
        ));
    } else {
        let (nx, ny) = metrics::series(&recs, "probe", "val_nll");
        lf = lf.with_series(Series::new(
            "validation",
            nx.iter().map(|s| s + 1.0).collect(),
            ny,
        ));
    }
    lf = lf.with_series(Series::new(
        "train",
        tx.iter().map(|s| s + 1.0).collect(),
        ty,
    ));
    let pick = |p: (f64, f64)| if code { p.0 } else { p.1 };
    for (n, v) in [
        ("uniform attention", uniform),
        ("Bayes", bayes),
        ("induction head (empirical n-gram)", gih),
        ("oracle π", oracle),
    ] {
        lf = lf.with_hline(n, pick(v));
    }
    if code {
        let s = cfg.data.vocab as f64;
        lf = lf.with_hline(
            "code-loss floor",
            -(1f64.exp() / (1f64.exp() + s - 1.0)).ln(),
        );
    }
    ctx.figure(&lf)?;
    for (id, title, xl, pts) in [
        (
            "gen_length",
            "Generalisation over L (trained parameters, fresh data)",
            "L",
            gen.iter()
                .filter(|g| g.alpha == cfg.data.alpha && cfg.probe.gen_lengths.contains(&g.seq_len))
                .collect::<Vec<_>>(),
        ),
        (
            "gen_alpha",
            "Generalisation over α (trained parameters, fresh data)",
            "α",
            gen.iter()
                .skip(cfg.probe.gen_lengths.len())
                .collect::<Vec<_>>(),
        ),
    ] {
        let xs: Vec<f64> = pts
            .iter()
            .map(|g| {
                if id == "gen_length" {
                    g.seq_len as f64
                } else {
                    g.alpha
                }
            })
            .collect();
        let col = |f: &dyn Fn(&probe::GenPoint) -> (f64, f64)| {
            pts.iter().map(|g| pick(f(g))).collect::<Vec<f64>>()
        };
        ctx.figure(&Figure::lines(id, title, xl, if code { "code loss" } else { "−log ŷ_y" }).log_x()
            .caption("The model's loss beside the Bayes, induction-head and uniform baselines on the same fresh sequences.")
            .with_series(Series::new("model", xs.clone(), col(&|g| g.model)))
            .with_series(Series::new("Bayes", xs.clone(), col(&|g| g.bayes)).dashed())
            .with_series(Series::new("induction head", xs.clone(), col(&|g| g.induction)).dashed())
            .with_series(Series::new("uniform attention", xs.clone(), col(&|g| g.uniform)).dashed()))?;
    }

    // --- summary and verdicts ---
    let mut s = Summary::new("induction", seed);
    s.metric("final_train_loss", fitted.final_loss);
    s.metric("val_code_loss", val_code);
    s.metric("val_nll", val_nll);
    s.metric("a", a_final);
    s.metric("selector_share", sel.share);
    s.metric("induction_score", ind_score);
    for (hd, v) in prev_scores.iter().enumerate() {
        s.metric(&format!("prev_token_score.h{hd}"), *v);
    }
    for (n, v) in [
        ("uniform", uniform),
        ("bayes", bayes),
        ("induction", gih),
        ("oracle", oracle),
    ] {
        s.metric(&format!("baseline_{n}_code"), v.0);
        s.metric(&format!("baseline_{n}_nll"), v.1);
    }
    let final_shares = model.c_shares();
    for (i, m) in model.subsets().iter().enumerate() {
        if m & 1 == 0 {
            s.metric(&keys[i], final_shares[i]);
        }
    }
    for g in &gen {
        s.metric(
            &format!(
                "gen.L{}.alpha{}.{}",
                g.seq_len,
                g.alpha,
                if code { "code" } else { "nll" }
            ),
            pick(g.model),
        );
    }
    // With the copier frozen from the start and a parent outside every head's
    // initial window (head k starts on distance k + 1), the paper's mechanism
    // cannot form: the run judges that instead of the formation claims.
    let unreachable: Vec<usize> = truth.iter().copied().filter(|&p| p > h).collect();
    if task.freezes.always("W") && !unreachable.is_empty() {
        let final_pat = model.interior_pattern();
        let reach: Vec<f64> = unreachable
            .iter()
            .map(|&p| {
                (0..h)
                    .map(|hd| final_pat[hd * nd + p - 1])
                    .fold(0.0, f64::max)
            })
            .collect();
        s.verdict(
            "induction.frozen-copier",
            "causal: with the layer-1 copier frozen at initialisation, no head reaches a parent outside the initial windows and the selector misses the true parents",
            &format!(
                "the winning subset does not copy {truth:?}; control: the same run without the freeze (induction-copier) does"
            ),
            "derivation in docs/interventions.md: a frozen copier keeps head k on its initial window, which excludes the parent, so no subset can copy it; the control run shows it is reached when W trains",
            format!(
                "{} (share {:.3}) copies {:?}; largest attention on distance {unreachable:?}: {reach:.3?}",
                names[model.subsets().iter().position(|m| *m == sel.mask).unwrap_or(0)],
                sel.share,
                sel.distances
            ),
            sel.distances != truth,
        );
    } else {
        s.verdict(
            "induction.selector-parents",
            "selector: the winning kernel subset's heads copy the true parents",
            &format!("distances {truth:?}"),
            "Chen et al. 2024: the FFN selector concentrates on the parent set (its selector result; share 1.000 on {1, 2} in the paper's run); share > 0.5 says the winner holds the majority",
            format!(
                "{} (share {:.3}) copies {:?}",
                names[model
                    .subsets()
                    .iter()
                    .position(|m| *m == sel.mask)
                    .unwrap_or(0)],
                sel.share,
                sel.distances
            ),
            sel.distances == truth && sel.share > 0.5,
        );
        s.verdict(
            "induction.selector-mi",
            "selector = argmax of the modified χ² mutual information (|P| ≤ D)",
            &format!("{mi_best:?}"),
            "Chen et al. 2024: the selector converges to the parent set maximising the modified χ² mutual information over |P| ≤ D (their main theorem)",
            format!("{:?}", sel.distances),
            sel.distances == mi_best,
        );
        let (pu, pb) = (pick(uniform), pick(bayes));
        let vloss = if code { val_code } else { val_nll };
        s.verdict(
            "induction.loss-toward-bayes",
            "the loss falls well below the uniform-attention baseline, towards Bayes",
            &format!("< uniform {pu:.3} − ½(uniform − Bayes {pb:.3})"),
            "Chen et al. 2024: validation code loss 0.900 → 0.652 in the paper's run (their training curve), nearly at Bayes; the half-way bar is ours and far short of that",
            format!("{vloss:.4}"),
            vloss < pu - 0.5 * (pu - pb),
        );
        let dist = probe::head_distances::<T, M>(model);
        causal::verdicts(
            model, &val, &truth, &sel.heads, &dist, uniform.1, floor, &mut s,
        )
        .map_err(|e| bad(e.to_string()))?;
    }

    s.verdict(
        "induction.classifier-grows",
        "classifier: a grows",
        &format!("a ≫ a_init = {}", cfg.model.a_init),
        "Chen et al. 2024: a = 0.70 / 4.28 / 7.28 at epochs 10 / 100 / 1 000 in the paper's run; ≫ read as 10 × a_init, far below those",
        format!("{a_final:.3}"),
        a_final > 10.0 * cfg.model.a_init.abs().max(0.01),
    );

    let mi_table: String = mi_all
        .iter()
        .map(|(p, v)| format!("| {p:?} | {v:.4} |\n"))
        .collect();
    ctx.notes(&format!(
        "## Setting\n\nS = {}, L = {}, parents {:?}, α = {}, {} train / {} validation sequences ({}), \
         H = {h}, D = {}, w+ = {}, w- = {}, c_init = {}, a_init = {}, loss = {}, {} epochs of full-batch \
         gradient descent (the stand-in for gradient flow), dtype {}.\n\n\
         ## Paper vs ours\n\nThe authors' committed run (S = 3, L = 100, α = 0.1, H = 3, D = 2, lr 1, \
         joint, 50 000 epochs): share of {{1,2}} → 1.000; a: 0.01 → 0.70 (epoch 10) → 4.28 (100) → 7.28 (1 000) → 11.35 (50 000); \
         validation code loss 0.900 → 0.652; perfect induction head ≈ 0.648, Bayes ≈ 0.652 (code loss).\n\n\
         | quantity | ours |\n|---|---|\n| selector share | {:.3} on {:?} |\n| a | {:.3} |\n| validation code loss | {:.4} |\n\
         | validation −log ŷ_y | {:.4} |\n| uniform / Bayes / induction head / oracle (code) | {:.4} / {:.4} / {:.4} / {:.4} |\n\n\
         a over training: {}\n\n\
         Head scores on repeated random tokens (T = 20, repeated; uniform = 1/40 = 0.025): \
         previous-token score per layer-1 head {:?}; layer-2 induction score {:.3}.\n\n\
         ## Modified χ² mutual information of each parent set (training data, power {})\n\n| set | Ĩ |\n|---|---|\n{mi_table}\n\
         The code loss is the authors' (cross-entropy of the probability vector as logits); its floor is \
         −log(e/(e+S−1)) ≈ 0.551 for S = 3. Generalisation uses fresh data from the Sample stream.\n",
        cfg.data.vocab, cfg.data.seq_len, cfg.data.parents, cfg.data.alpha, cfg.data.n_train, cfg.data.n_val,
        crate::config::name_of(&cfg.data.variant), cfg.model.degree, cfg.model.w_plus, cfg.model.w_minus, cfg.model.c_init, cfg.model.a_init,
        crate::config::name_of(&cfg.model.loss), cfg.train.total_steps(), crate::config::name_of(&cfg.model.dtype),
        sel.share, sel.distances, a_final, val_code, val_nll, uniform.0, bayes.0, gih.0, oracle.0,
        a_at(&recs, &[10, 100, 1000, 10000, 50000]),
        prev_scores.iter().map(|v| (v * 1000.0).round() / 1000.0).collect::<Vec<_>>(),
        ind_score,
        cfg.probe.mi_power,
    ))?;
    Ok(s)
}

fn a_at(recs: &[serde_json::Map<String, serde_json::Value>], steps: &[u64]) -> String {
    let (x, y) = metrics::series(recs, "probe", "a");
    steps
        .iter()
        .filter_map(|&st| {
            x.iter()
                .position(|&s| s as u64 == st)
                .map(|i| format!("epoch {st}: {:.2}", y[i]))
        })
        .collect::<Vec<_>>()
        .join(", ")
}
