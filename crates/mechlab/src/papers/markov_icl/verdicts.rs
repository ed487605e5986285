//! Markov-icl's verdicts, one per claim, each with its control (the same
//! measurement at initialisation, where the mechanism cannot yet exist), built
//! from the training history and the final evaluation.

use super::config::{MarkovConfig, ModelKind};
use super::data::Prior;
use super::measure::{fmt_step, round3, Finals, History};
use super::probes;
use crate::run::metrics;
use crate::run::summary::Summary;

pub fn summary(cfg: &MarkovConfig, seed: u64, f: &Finals, hist: &History) -> Summary {
    let mut s = Summary::new("markov-icl", seed);
    metrics(&mut s, f, hist);
    strategy_verdicts(&mut s, cfg, f, hist);
    head_verdicts(&mut s, cfg, f, hist);
    prior_verdict(&mut s, f, hist);
    s
}

/// The final and per-phase numbers.
fn metrics(s: &mut Summary, f: &Finals, hist: &History) {
    let names = &hist.names;
    let (t_first, t_bayes, t_quarter) = (&hist.t_first, hist.t_bayes, hist.t_quarter);
    let (phase_all, phase_last) = (hist.phase_all, hist.phase_last);
    s.metric("final_train_loss", f.fitted_loss);
    s.metric("eval_loss", f.fin.loss);
    for (n, v) in names.iter().zip(&f.base) {
        s.metric(&format!("strategy_loss.{n}"), *v);
    }
    for (n, v) in names.iter().zip(&f.fin.kl) {
        s.metric(&format!("kl.{n}"), *v);
    }
    for (n, t) in names.iter().zip(t_first) {
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
}

/// The loss against Bayes, the nearest strategy at the end, and the phases.
fn strategy_verdicts(s: &mut Summary, cfg: &MarkovConfig, f: &Finals, hist: &History) {
    let (names, loss, phases) = (&hist.names, &hist.loss, &hist.phases);
    let (uniform, bayes, unigram, ngram) = (hist.uniform, hist.bayes, hist.unigram, hist.ngram);
    let t_first = &hist.t_first;
    let phase_names = hist.phase_names();
    let n_probe = hist.steps.len();
    let argmin = |i: usize| hist.argmin(i);
    let span = uniform - bayes;
    let gap0 = loss.first().copied().unwrap_or(f64::NAN) - bayes;
    let gap = f.fin.loss - bayes;
    // KL(Bayes ‖ model): the expected excess loss where the n-gram predictor is
    // Bayes, and still a distance between predictions where it is not (on
    // shuffled sequences the model beats the n-gram "Bayes" loss with unigram
    // predictions, so the loss alone passed there).
    let kl_bayes = f.fin.kl.get(ngram).copied().unwrap_or(f64::NAN);
    let loss_line = format!("gap {gap:.4} (init {gap0:.4}), KL to the Bayes predictor {kl_bayes:.4}; loss {:.4}, Bayes {bayes:.4}, unigram {unigram:.4}, uniform {uniform:.4}", f.fin.loss);
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
            "the final loss approaches the Bayes-optimal in-context n-gram, and so do its predictions (control: at init it is nearer uniform than Bayes)",
            &format!("loss − Bayes and KL(Bayes ‖ model) < 0.2·(uniform − Bayes) = {:.4}; at init loss − Bayes > 0.5·that span (nearer uniform than Bayes)", 0.2 * span),
            "Edelman et al. 2024: the model approaches the Bayes-optimal in-context predictor (abstract, Fig. 1); the 0.2 of the span is our bar, not the paper's (docs/markov-icl.md, \"Verdicts\": the authors' algorithm, bench/markov_icl/authors_port.py, ends 0.022–0.037 above the bigram strategy on the seeds that leave the plateau at T = 50)",
            loss_line,
            gap < 0.2 * span && kl_bayes < 0.2 * span && gap0 > 0.5 * span,
        )
        .scored(gap.max(kl_bayes), Some(0.2 * span));
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
            "uniform nearest at step 0, then the unigram strategy for a while before the n-gram, which is nearest at the end",
            if cfg.model.kind == ModelKind::Minimal {
                "Edelman et al. 2024, the phases uniform → unigram → bigram (abstract; Fig. 1–2). In the minimal model the first transition is its init's (the authors': logits 0.01 × the context's counts, nearest the unigram from step 1), so only uniform at step 0 and unigram before the bigram carry evidence; the plateau's length has no bar (docs/markov-icl.md)"
            } else {
                "Edelman et al. 2024, the phases uniform → unigram → bigram (abstract; Fig. 1–2)"
            },
            format!(
                "nearest strategy over training: {} (unigram from step {}, {} from step {})",
                phase_names.join(" → "),
                fmt_step(t_first[1]),
                names[ngram],
                fmt_step(t_first[ngram])
            ),
            n_probe > 0 && argmin(0) == 0 && uni_before && argmin(last) == ngram,
        );
    }
}

/// Layer 0's previous-token head and layer 1's statistical induction head.
fn head_verdicts(s: &mut Summary, cfg: &MarkovConfig, f: &Finals, hist: &History) {
    let order = cfg.data.order;
    let (recs, ind, best_prev) = (&hist.recs, &hist.ind, &hist.best_prev);
    let pu = f.fin.prev_token_uniform;
    let init_prev: Vec<f64> = (1..order)
        .map(|r| {
            (0..cfg.model.n_heads)
                .map(|h| {
                    metrics::series(recs, "probe", &format!("prev_token.h{h}.d{r}"))
                        .1
                        .first()
                        .copied()
                        .unwrap_or(f64::NAN)
                })
                .fold(0.0, f64::max)
        })
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
            round3(best_prev),
            round3(&init_prev)
        ),
        covered && init_prev.iter().all(|&v| v < 2.0 * pu),
    )
    .scored(
        best_prev.iter().copied().fold(f64::INFINITY, f64::min),
        Some(2.0 * pu),
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
        )
        .scored(f.fin.induction, Some(iu + 0.5 * (1.0 - iu)));
    }
}

/// The doubly stochastic prior's plateau against the Dirichlet one's.
fn prior_verdict(s: &mut Summary, f: &Finals, hist: &History) {
    let t_bayes = hist.t_bayes;
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
        )
        .scored(
            td.map_or(f64::NAN, |t| t as f64),
            t_bayes.map(|t| t as f64),
        );
    }
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
