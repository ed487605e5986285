//! The markov-icl run's ending: phase boundaries, verdicts, figures and notes.
//!
//! Everything here reads the probe records the trainer logged (`probe` events:
//! eval loss, `kl.<strategy>`, `prev_token.h{h}.d{r}`, `induction`) plus the final
//! evaluation, and turns them into a [`Summary`]. Every verdict states its
//! prediction and carries a control: the same measurement at initialisation,
//! where the mechanism cannot yet exist, must come out the other way.

use super::config::{MarkovConfig, ModelKind};
use super::data::Prior;
use super::phases::{self, PhaseTimes};
use super::probes::{self, Eval};
use crate::experiment::ExperimentError;
use crate::run::metrics;
use crate::run::summary::Summary;
use crate::run::{attention_record, LayerPattern, RunCtx};
use mechlab_report::{Figure, Series};

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

fn fmt_step(s: Option<u64>) -> String {
    s.map_or("never".into(), |v| v.to_string())
}

/// Figures, verdicts and notes of a finished run.
pub fn finish(
    cfg: &MarkovConfig,
    ctx: &mut RunCtx,
    f: &Finals,
) -> Result<Summary, ExperimentError> {
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
    let n_probe = steps.len();
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
    for i in 0..n_probe {
        let k = argmin(i);
        if phases.last() != Some(&k) {
            phases.push(k);
        }
    }
    let phase_names: Vec<&str> = phases.iter().map(|&k| names[k].as_str()).collect();
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

    // --- figures ---
    let x1: Vec<f64> = steps.iter().map(|s| s + 1.0).collect();
    let mut kf = Figure::lines("kl", "KL(strategy ‖ model) over training", "step + 1", "KL (nats)").log_x().log_y()
        .caption("The strategy with the smallest divergence is the one the model implements: uniform, then the in-context unigram plateau, then the in-context n-gram (Bayes).");
    for (n, k) in names.iter().zip(&kls) {
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
            let (_, y) = metrics::series(&recs, "probe", &format!("prev_token.h{h}.d{r}"));
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

    // --- verdicts ---
    let mut s = Summary::new("markov-icl", ctx.seed());
    s.metric("final_train_loss", f.fitted_loss);
    s.metric("eval_loss", f.fin.loss);
    for (n, v) in names.iter().zip(&f.base) {
        s.metric(&format!("strategy_loss.{n}"), *v);
    }
    for (n, v) in names.iter().zip(&f.fin.kl) {
        s.metric(&format!("kl.{n}"), *v);
    }
    for (n, t) in names.iter().zip(&t_first) {
        if let Some(t) = t {
            s.metric(&format!("phase_start.{n}"), *t as f64);
        }
    }
    if let Some(t) = t_bayes {
        s.metric("t_bayes", t as f64);
    }
    if let Some(t) = t_quarter {
        s.metric("t_quarter", t as f64);
    }
    for (metric, pt) in [("all", Some(phase_all)), ("last", phase_last)] {
        for (n, t) in pt.iter().flat_map(|p| p.named()) {
            if let Some(t) = t {
                s.metric(&format!("phase.{metric}.{n}"), t as f64);
            }
        }
    }
    s.metric("induction", f.fin.induction);
    s.metric("induction_uniform", f.fin.induction_uniform);
    s.metric("prev_token_uniform", f.fin.prev_token_uniform);
    for (h, ph) in f.fin.prev_token.iter().enumerate() {
        for (r, v) in ph.iter().enumerate() {
            s.metric(&format!("prev_token.h{h}.d{}", r + 1), *v);
        }
    }
    let span = uniform - bayes;
    let gap0 = loss.first().copied().unwrap_or(f64::NAN) - bayes;
    let gap = f.fin.loss - bayes;
    let loss_line = format!("gap {gap:.4} (init {gap0:.4}); loss {:.4}, Bayes {bayes:.4}, unigram {unigram:.4}, uniform {uniform:.4}", f.fin.loss);
    if cfg.model.kind == ModelKind::Minimal {
        // Its logits are linear in the context's transition counts, so it cannot
        // reach the Bayes loss; the paper gives no level for it (docs/markov-icl.md).
        s.measurement(
            ids::LOSS,
            "the minimal model's final gap to the Bayes-optimal in-context n-gram",
            loss_line,
            "not judged: the paper reports no loss for this model, and a count-linear read-out cannot reach Bayes (docs/markov-icl.md, \"The paper's minimal model\")",
        );
    } else {
        s.verdict(
            ids::LOSS,
            "the final loss approaches the Bayes-optimal in-context n-gram (control: at init it is nearer uniform than Bayes)",
            &format!("loss − Bayes < 0.2·(uniform − Bayes) = {:.4}; at init > 0.5·that span (nearer uniform than Bayes)", 0.2 * span),
            "Edelman et al. 2024: the model approaches the Bayes-optimal in-context predictor (abstract, Fig. 1); the 0.2 of the span is our bar, not the paper's (docs/markov-icl.md, \"Verdicts\": the authors' algorithm, bench/markov_icl/authors_port.py, ends 0.022–0.037 above the bigram strategy on the seeds that leave the plateau at T = 50)",
            loss_line,
            gap < 0.2 * span && gap0 > 0.5 * span,
        );
    }
    let last = n_probe.saturating_sub(1);
    s.verdict(
        ids::NEAREST,
        "the model ends nearest the in-context n-gram strategy (control: at init, nearest uniform)",
        &format!("argmin KL: {} at the end, uniform at step 0", names[ngram]),
        "Edelman et al. 2024: training ends at the in-context n-gram strategy (Fig. 1–2, the KL to each strategy over training); at init the prediction is uniform (derived: small init gives near-constant logits)",
        format!(
            "{} at the end, {} at step 0",
            names[argmin(last)],
            names[argmin(0)]
        ),
        n_probe > 0 && argmin(last) == ngram && argmin(0) == 0,
    );
    if cfg.data.prior == Prior::Dirichlet {
        let uni_before = phases
            .iter()
            .position(|&k| k == 1)
            .is_some_and(|p| phases[p + 1..].contains(&ngram));
        s.verdict(
            ids::PHASES,
            "phases: uniform → in-context unigram plateau → in-context n-gram",
            "the unigram strategy is nearest for a while before the n-gram",
            "Edelman et al. 2024, the phases uniform → unigram → bigram (abstract; Fig. 1–2)",
            format!(
                "nearest strategy over training: {} (unigram from step {}, {} from step {})",
                phase_names.join(" → "),
                fmt_step(t_first[1]),
                names[ngram],
                fmt_step(t_first[ngram])
            ),
            uni_before && argmin(last) == ngram,
        );
    }
    let pu = f.fin.prev_token_uniform;
    let init_prev: Vec<f64> = (1..order)
        .map(|r| {
            (0..cfg.model.n_heads)
                .map(|h| {
                    metrics::series(&recs, "probe", &format!("prev_token.h{h}.d{r}"))
                        .1
                        .first()
                        .copied()
                        .unwrap_or(f64::NAN)
                })
                .fold(0.0, f64::max)
        })
        .collect();
    let best_prev: Vec<f64> = (0..order - 1)
        .map(|r| f.fin.prev_token.iter().map(|ph| ph[r]).fold(0.0, f64::max))
        .collect();
    // the distance each head attends to most after training
    let peaks: Vec<usize> = f
        .fin
        .profile
        .iter()
        .map(|p| probes::peak_distance(p))
        .collect();
    // distance r is some head's peak, with at least twice uniform attention's
    // share there (the same boundary the control at init stays below)
    let covered = (1..order).all(|r| {
        peaks
            .iter()
            .zip(&f.fin.prev_token)
            .any(|(&pk, ph)| pk == r && ph[r - 1] > 2.0 * pu)
    });
    s.verdict(
        ids::PREV,
        "layer 0 forms a previous-token head for every parent distance (control: at init, uniform)",
        &format!("for each distance r = 1..n−1, some head attends to r more than to any other distance, with more than 2 × uniform {pu:.3} there; at init below 2 × uniform (near-uniform attention ties distances 0 and 1, so the peak alone says nothing there)"),
        "Edelman et al. 2024: the first layer attends to the previous token (Sec. 3, Fig. 3), read as \"the most attended distance\"; the 2 × uniform floor is ours, the boundary the control at init is held to (docs/markov-icl.md, \"Verdicts\")",
        format!(
            "most attended distance per head {:?}; attention at distance 1..{}: {:?} (init {:?}, uniform {pu:.3})",
            peaks,
            order - 1,
            round3(&best_prev),
            round3(&init_prev)
        ),
        covered && init_prev.iter().all(|&v| v < 2.0 * pu),
    );
    let iu = f.fin.induction_uniform;
    let ind0 = ind.first().copied().unwrap_or(f64::NAN);
    if cfg.data.prior == Prior::DoublyStochastic && cfg.data.vocab == 2 {
        // At S = 2 a doubly stochastic chain is [[p, 1−p], [1−p, p]]: the
        // Bayes-optimal prediction counts stays over all transitions and needs no
        // attention to the keys that follow the current token, so the paper's head
        // (shown for Dirichlet chains) is not a prediction here (docs/markov-icl.md).
        s.measurement(
            ids::INDUCTION,
            "layer 1's mass on keys that follow the current token (doubly stochastic prior, S = 2)",
            format!("{:.3} (init {ind0:.3}, uniform {iu:.3})", f.fin.induction),
            "not judged: at S = 2 the Bayes predictor of this prior counts stays and needs no induction head (docs/markov-icl.md, \"Verdicts\")",
        );
    } else {
        s.verdict(
        ids::INDUCTION,
        "layer 1 forms a statistical induction head (control: at init, uniform)",
        &format!("mass on matching keys > uniform {iu:.3} + ½(1 − uniform); at init < uniform + 0.1(1 − uniform)"),
        "Edelman et al. 2024: the second layer attends to the tokens that followed earlier occurrences of the current token (Fig. 3); the half-way bar is ours (docs/markov-icl.md; the authors' algorithm scores 0.77–0.93 on the runs that leave the plateau)",
        format!("{:.3} (init {ind0:.3})", f.fin.induction),
        f.fin.induction > iu + 0.5 * (1.0 - iu) && ind0 < iu + 0.1 * (1.0 - iu),
    );
    }
    let mut compare_line = String::new();
    if let Some(c) = &f.control {
        let td = c.t_bayes();
        if let Some(t) = td {
            s.metric("t_bayes.doubly_stochastic", t as f64);
        }
        if let Some(t) = c.t_within(0.25) {
            s.metric("t_quarter.doubly_stochastic", t as f64);
        }
        s.verdict(
            ids::DOUBLY,
            "a doubly stochastic prior (unigrams useless) shortens the plateau",
            "t_bayes (loss within 0.1·(uniform − Bayes) of Bayes) earlier than with the Dirichlet prior",
            "the authors' README, finding 3: \"removing the usefulness of unigrams leads to faster convergence\"; t_bayes is our measure of convergence. Evidence (docs/markov-icl.md, \"Findings\"): at S = 2 the doubly stochastic runs split, early or stuck, in mechlab and in the authors' algorithm with a correct sampler alike; at S = 3 in the authors' setting it is faster in 3 of 3 seeds",
            format!("doubly stochastic {}, Dirichlet {}", fmt_step(td), fmt_step(t_bayes)),
            match (td, t_bayes) {
                (Some(a), Some(b)) => a < b,
                (Some(_), None) => true,
                _ => false,
            },
        );
        compare_line = format!("| t_bayes, doubly stochastic prior | {} |\n", fmt_step(td));
    }

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
        phase_names.join(" → "), fmt_step(t_bayes), round3(&best_prev), f.fin.induction,
        phase_line(Some(phase_all)), phase_line(phase_last), cfg.probe.n_eval,
    ))?;
    Ok(s)
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

fn round3(v: &[f64]) -> Vec<f64> {
    v.iter().map(|x| (x * 1000.0).round() / 1000.0).collect()
}

/// The verdicts' stable ids.
pub mod ids {
    pub const LOSS: &str = "markov-icl.loss-near-bayes";
    pub const NEAREST: &str = "markov-icl.ends-at-ngram";
    pub const PHASES: &str = "markov-icl.phases";
    pub const PREV: &str = "markov-icl.previous-token-head";
    pub const INDUCTION: &str = "markov-icl.induction-head";
    pub const DOUBLY: &str = "markov-icl.doubly-stochastic-faster";
}
