//! The markov-icl run's figures and notes, drawn from what [`super::measure`]
//! read back; the verdicts are in [`super::verdicts`]. [`finish`] runs the
//! three stages in order.

use super::config::{MarkovConfig, ModelKind};
use super::measure::{fmt_step, history, round3, Finals, History};
use super::phases::PhaseTimes;
use crate::experiment::ExperimentError;
use crate::run::metrics;
use crate::run::summary::Summary;
use crate::run::{attention_record, LayerPattern, RunCtx};
use mechlab_report::{Figure, Series};

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
