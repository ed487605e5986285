//! The markov-icl run's ending: the training history read back from the probe
//! records (phase boundaries, head scores), the figures and the notes; the
//! verdicts are in [`super::verdicts`].
//!
//! Everything here reads the probe records the trainer logged (`probe` events:
//! eval loss, `kl.<strategy>`, `prev_token.h{h}.d{r}`, `induction`) plus the final
//! evaluation, and turns them into a [`Summary`]. Every verdict states its
//! prediction and carries a control: the same measurement at initialisation,
//! where the mechanism cannot yet exist, must come out the other way.

use super::config::{MarkovConfig, ModelKind};
use super::phases::{self, PhaseTimes};
use super::probes::{self, Eval};
use crate::experiment::ExperimentError;
use crate::run::metrics;
use crate::run::summary::Summary;
use crate::run::{attention_record, LayerPattern, RunCtx};
use mechlab_report::{Figure, Series};
use serde_json::{Map, Value};

/// Eval loss over training of a run outside the trainer, with its baselines.
#[derive(Clone, Debug, Default)]
pub struct Curve {
    pub steps: Vec<f64>,
    pub loss: Vec<f64>,
    pub uniform: f64,
    pub bayes: f64,
}

impl Curve {
    /// First probe step whose loss is within a tenth of the uniform–Bayes span
    /// of Bayes: past any unigram plateau (whose loss is above that under the
    /// Dirichlet prior) and onto the n-gram solution.
    pub fn t_bayes(&self) -> Option<u64> {
        self.t_within(0.1)
    }

    /// First probe step whose loss is within `frac` of the uniform–Bayes span
    /// of Bayes (`t_bayes` is 0.1; 0.25 also counts runs that dropout keeps a
    /// little above the Bayes loss).
    pub fn t_within(&self, frac: f64) -> Option<u64> {
        let target = self.bayes + frac * (self.uniform - self.bayes);
        probes::first_step(&self.steps, |i| self.loss[i] <= target)
    }
}

/// What the run measured after training.
pub struct Finals {
    pub fitted_loss: f64,
    pub fin: Eval,
    /// Cross-entropy of each strategy of [`probes::strategies`] on the eval batch.
    pub base: Vec<f64>,
    pub control: Option<Curve>,
    /// Attention patterns of both layers on `pat_tokens` (`[H_l, T, T]`).
    pub pattern: [Vec<f64>; 2],
    pub pat_tokens: Vec<u8>,
    /// The unigram and bigram strategies' KL to the true chain at the last
    /// position of the authors' set (`None`: their metric was not measured).
    pub last_levels: Option<(f64, f64)>,
}

pub(super) fn fmt_step(s: Option<u64>) -> String {
    s.map_or("never".into(), |v| v.to_string())
}

/// The training history, read back from the probe records.
pub struct History {
    pub names: Vec<String>,
    pub recs: Vec<Map<String, Value>>,
    pub steps: Vec<f64>,
    pub loss: Vec<f64>,
    /// `kl.<strategy>` over the probe steps, one row per strategy.
    pub kls: Vec<Vec<f64>>,
    pub ind: Vec<f64>,
    /// Index of the in-context n-gram strategy (the last).
    pub ngram: usize,
    pub uniform: f64,
    pub bayes: f64,
    pub unigram: f64,
    /// First probe step at which each strategy is the nearest.
    pub t_first: Vec<Option<u64>>,
    /// The nearest strategy over training, each change once.
    pub phases: Vec<usize>,
    pub t_bayes: Option<u64>,
    pub t_quarter: Option<u64>,
    pub phase_all: PhaseTimes,
    pub phase_last: Option<PhaseTimes>,
    /// The largest layer-0 attention at each distance `1..n`, after training.
    pub best_prev: Vec<f64>,
}

impl History {
    /// The strategy nearest the model at probe `i`.
    pub fn argmin(&self, i: usize) -> usize {
        (0..self.kls.len())
            .min_by(|&a, &b| self.kls[a][i].total_cmp(&self.kls[b][i]))
            .unwrap_or(0)
    }
    pub fn phase_names(&self) -> Vec<&str> {
        self.phases
            .iter()
            .map(|&k| self.names[k].as_str())
            .collect()
    }
}

pub fn history(
    cfg: &MarkovConfig,
    ctx: &mut RunCtx,
    f: &Finals,
) -> Result<History, ExperimentError> {
    let order = cfg.data.order;
    let strats = probes::strategies(order);
    let names: Vec<String> = strats.iter().map(|s| probes::strategy_name(*s)).collect();
    let recs = ctx.records()?;
    let (steps, loss) = metrics::series(&recs, "probe", "loss");
    let kls: Vec<Vec<f64>> = names
        .iter()
        .map(|n| metrics::series(&recs, "probe", &format!("kl.{n}")).1)
        .collect();
    let (_, ind) = metrics::series(&recs, "probe", "induction");
    let argmin = |i: usize| {
        (0..strats.len())
            .min_by(|&a, &b| kls[a][i].total_cmp(&kls[b][i]))
            .unwrap_or(0)
    };
    let ngram = strats.len() - 1;
    let (uniform, bayes, unigram) = (f.base[0], f.base[ngram], f.base[1]);
    // phase boundaries: first probe step at which each strategy is the nearest
    let t_first: Vec<Option<u64>> = (0..strats.len())
        .map(|k| probes::first_step(&steps, |i| argmin(i) == k))
        .collect();
    let mut phases: Vec<usize> = Vec::new();
    for i in 0..steps.len() {
        let k = argmin(i);
        if phases.last() != Some(&k) {
            phases.push(k);
        }
    }
    let curve = Curve {
        steps: steps.clone(),
        loss: loss.clone(),
        uniform,
        bayes,
    };
    let (t_bayes, t_quarter) = (curve.t_bayes(), curve.t_within(0.25));

    // phase times on our metric (every position) and on the authors' (last position)
    let phase_all = phases::phase_times(&steps, &kls, &loss, (unigram, f.base[2.min(ngram)]));
    let phase_last = f.last_levels.map(|u| {
        let lk: Vec<Vec<f64>> = names
            .iter()
            .map(|n| metrics::series(&recs, "probe", &format!("last.kl.{n}")).1)
            .collect();
        let (ls, lt) = metrics::series(&recs, "probe", "last.kl_true");
        phases::phase_times(&ls, &lk, &lt, u)
    });
    let best_prev: Vec<f64> = (0..order - 1)
        .map(|r| f.fin.prev_token.iter().map(|ph| ph[r]).fold(0.0, f64::max))
        .collect();
    Ok(History {
        names,
        recs,
        steps,
        loss,
        kls,
        ind,
        ngram,
        uniform,
        bayes,
        unigram,
        t_first,
        phases,
        t_bayes,
        t_quarter,
        phase_all,
        phase_last,
        best_prev,
    })
}

/// The figures of a finished run.
pub fn figures(
    cfg: &MarkovConfig,
    ctx: &mut RunCtx,
    f: &Finals,
    hist: &History,
) -> Result<(), ExperimentError> {
    let order = cfg.data.order;
    let (names, recs, steps, loss, kls, ind) = (
        &hist.names,
        &hist.recs,
        &hist.steps,
        &hist.loss,
        &hist.kls,
        &hist.ind,
    );
    let x1: Vec<f64> = steps.iter().map(|s| s + 1.0).collect();
    let mut kf = Figure::lines("kl", "KL(strategy ‖ model) over training", "step + 1", "KL (nats)").log_x().log_y()
        .caption("The strategy with the smallest divergence is the one the model implements: uniform, then the in-context unigram plateau, then the in-context n-gram (Bayes).");
    for (n, k) in names.iter().zip(kls) {
        kf = kf.with_series(Series::new(
            n,
            x1.clone(),
            k.iter().map(|v| v.max(1e-6)).collect(),
        ));
    }
    ctx.figure(&kf)?;
    let mut lf = Figure::lines(
        "loss",
        "Evaluation loss against the strategies' losses",
        "step + 1",
        "cross-entropy (nats)",
    )
    .log_x()
    .caption("Dashed: each in-context strategy's loss on the same evaluation batch.")
    .with_series(Series::new("model", x1.clone(), loss.clone()));
    if let Some(c) = &f.control {
        lf = lf.with_series(Series::new(
            "model, doubly stochastic prior",
            c.steps.iter().map(|s| s + 1.0).collect(),
            c.loss.clone(),
        ));
    }
    for (n, v) in names.iter().zip(&f.base) {
        lf = lf.with_hline(n, *v);
    }
    ctx.figure(&lf)?;
    let mut hf = Figure::lines("heads", "Head scores over training", "step + 1", "attention mass").log_x()
        .caption("Layer 0: mean attention to the previous r tokens, per head. Layer 1: mass on keys that follow an earlier occurrence of the current context (statistical induction).")
        .with_series(Series::new("layer 1 induction", x1.clone(), ind.clone()))
        .with_hline("induction, uniform attention", f.fin.induction_uniform)
        .with_hline("previous token, uniform attention", f.fin.prev_token_uniform);
    for h in 0..cfg.model.n_heads {
        for r in 1..order {
            let (_, y) = metrics::series(recs, "probe", &format!("prev_token.h{h}.d{r}"));
            hf = hf.with_series(Series::new(
                &format!("layer 0 head {h}, distance {r}"),
                x1.clone(),
                y,
            ));
        }
    }
    ctx.figure(&hf)?;
    let tl = f.pat_tokens.len();
    let ticks: Vec<String> = f
        .pat_tokens
        .iter()
        .enumerate()
        .map(|(i, t)| format!("{i}:{t}"))
        .collect();
    for (l, pat) in f.pattern.iter().enumerate() {
        ctx.figure(
            &Figure::heatmap(
                &format!("pattern_l{l}"),
                &format!("blocks.{l}.attn.hook_pattern, head 0, after training"),
                "key position:token",
                "query position:token",
                tl,
                tl,
                pat[..tl * tl].to_vec(),
                false,
            )
            .with_ticks(ticks.clone(), ticks.clone())
            .caption("Attention of the trained model on the first evaluation sequence."),
        )?;
    }
    let layers: Vec<LayerPattern> = f
        .pattern
        .iter()
        .enumerate()
        .map(|(layer, pat)| LayerPattern {
            layer,
            n_heads: pat.len() / (tl * tl).max(1),
            pattern: pat[..pat.len() / (tl * tl).max(1) * tl * tl].to_vec(),
        })
        .collect();
    let tokens = f.pat_tokens.iter().map(|t| t.to_string()).collect();
    let (acts, viewer) = attention_record(
        "attention",
        "Attention on the first evaluation sequence, every head",
        tokens,
        &layers,
    );
    let caption = if cfg.model.kind == ModelKind::Minimal {
        "The minimal model's weights, each row as the share of its absolute weight on each key. Layer 0 should look one token back; layer 1 at the tokens that followed earlier copies of the current one."
    } else {
        "Layer 0's heads should look one token back (the previous-token head); layer 1 at the tokens that followed earlier copies of the current one (statistical induction)."
    };
    ctx.record_activations(&acts)?;
    ctx.figure(&viewer.caption(caption))?;
    Ok(())
}

/// Figures, verdicts and notes of a finished run.
pub fn finish(
    cfg: &MarkovConfig,
    ctx: &mut RunCtx,
    f: &Finals,
) -> Result<Summary, ExperimentError> {
    let hist = history(cfg, ctx, f)?;
    figures(cfg, ctx, f, &hist)?;
    let s = super::verdicts::summary(cfg, cfg.seed, f, &hist);
    notes(cfg, ctx, f, &hist)?;
    Ok(s)
}

/// The notes' setting and measured table.
fn notes(
    cfg: &MarkovConfig,
    ctx: &mut RunCtx,
    f: &Finals,
    hist: &History,
) -> Result<(), ExperimentError> {
    let order = cfg.data.order;
    let (names, best_prev, t_bayes) = (&hist.names, &hist.best_prev, hist.t_bayes);
    let (phase_all, phase_last, phase_names) =
        (hist.phase_all, hist.phase_last, hist.phase_names());
    let (pu, iu) = (f.fin.prev_token_uniform, f.fin.induction_uniform);
    let compare_line = f.control.as_ref().map_or(String::new(), |c| {
        format!(
            "| t_bayes, doubly stochastic prior | {} |\n",
            fmt_step(c.t_bayes())
        )
    });
    ctx.notes(&format!(
        "## Setting\n\nS = {}, n = {order} ({:?} prior, α = {}), T = {}, batch {} fresh sequences per step, \
         {}, {} steps of {:?} at lr {}{}, dtype {:?}{}.\n\n\
         ## Measured\n\n| quantity | ours |\n|---|---|\n| eval loss | {:.4} |\n| strategy losses ({}) | {} |\n\
         | nearest strategy over training | {} |\n| t_bayes (loss within 0.1·(uniform − Bayes) of Bayes) | {} |\n{compare_line}\
         | layer-0 previous-token score per distance | {:?} (uniform {pu:.3}) |\n| layer-1 induction score | {:.3} (uniform {iu:.3}) |\n\
         | phase times, every position (plateau / below unigram / half-way to bigram / bigram nearest) | {} |\n\
         | phase times, the authors' last-token metric | {} |\n\n\
         KL(strategy ‖ model) is averaged over every position of {} evaluation sequences; strategies are \
         Dirichlet-posterior means with the data's α. See `docs/markov-icl.md` for the paper's numbers.\n",
        cfg.data.vocab, cfg.data.prior, cfg.data.alpha, cfg.data.seq_len, cfg.data.batch, model_line(cfg),
        cfg.train.total_steps(), cfg.train.optimizer, cfg.train.lr, lr_scale_line(cfg), cfg.model.dtype,
        if cfg.data.shuffle { ", tokens shuffled within each sequence (control)" } else { "" },
        f.fin.loss, names.join(" / "), round3(&f.base).iter().map(|v| v.to_string()).collect::<Vec<_>>().join(" / "),
        phase_names.join(" → "), fmt_step(t_bayes), round3(best_prev), f.fin.induction,
        phase_line(Some(phase_all)), phase_line(phase_last), cfg.probe.n_eval,
    ))?;
    Ok(())
}

/// Phase times as one table cell.
fn phase_line(p: Option<PhaseTimes>) -> String {
    p.map_or("not measured (probe.n_last = 0)".into(), |p| {
        p.named()
            .iter()
            .map(|(_, t)| fmt_step(*t))
            .collect::<Vec<_>>()
            .join(" / ")
    })
}

/// The model, as the notes' setting line names it.
fn model_line(cfg: &MarkovConfig) -> String {
    match cfg.model.kind {
        ModelKind::Transformer => format!(
            "the two-layer RPE transformer with d_model {} and {} layer-0 head(s)",
            cfg.model.d_model, cfg.model.n_heads
        ),
        ModelKind::Minimal => format!(
            "the paper's minimal model (layer 1 {:?} over distance weights v, linear layer 2 through W)",
            cfg.model.layer1
        )
        .replace("Softmax", "softmax")
        .replace("Linear", "linear"),
    }
}

fn lr_scale_line(cfg: &MarkovConfig) -> String {
    cfg.train
        .lr_scale
        .iter()
        .map(|(g, x)| format!(" (× {x} for `{g}`)"))
        .collect()
}

pub(super) fn round3(v: &[f64]) -> Vec<f64> {
    v.iter().map(|x| (x * 1000.0).round() / 1000.0).collect()
}
