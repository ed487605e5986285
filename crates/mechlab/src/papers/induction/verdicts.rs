//! Induction's verdicts, one per claim, built from the measurements: the
//! selector's parents and its mutual-information argmax, the loss towards Bayes,
//! the causal verdicts of [`super::causal`], the classifier's growth, or (with the
//! copier frozen and a parent out of reach) the frozen-copier verdict instead.

use super::data::MarkovData;
use super::measure::Measured;
use super::probes::{self as probe, InductionModel};
use super::simplified::LossKind;
use super::train::Trained;
use super::{bad, causal, InductionConfig};
use crate::experiment::ExperimentError;
use crate::run::summary::Summary;
use mechlab_engine::hooks::HookedModel;
use mechlab_engine::Float;

pub(super) fn summary<T: Float, M: InductionModel<T> + HookedModel>(
    cfg: &InductionConfig,
    seed: u64,
    tr: &mut Trained<M>,
    m: &Measured,
    val: &MarkovData,
) -> Result<Summary, ExperimentError> {
    let code = cfg.model.loss == LossKind::Code;
    let pick = |p: (f64, f64)| if code { p.0 } else { p.1 };
    let (h, floor) = (cfg.model.n_heads, cfg.model.nll_floor);
    let nd = 2 * h - 1;
    let (fitted, names, keys) = (&tr.fitted, &tr.names, &tr.keys);
    let (sel, truth, mi_best) = (&m.sel, &m.truth, &m.mi_best);
    let (val_code, val_nll, a_final) = (m.val_code, m.val_nll, m.a_final);
    let (uniform, bayes, gih, oracle) = (m.uniform, m.bayes, m.gih, m.oracle);
    let (gen, prev_scores, ind_score) = (&m.gen, &m.prev_scores, m.ind_score);
    let task = &mut tr.task;
    let model = &mut task.model;
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
    for g in gen {
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
            sel.distances != *truth,
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
            sel.distances == *truth && sel.share > 0.5,
        )
        .scored(sel.share, Some(0.5));
        // A selector with no majority has converged to nothing: at initialisation
        // every subset holds the same share and the tie goes to the initial
        // windows, which are the chain's parents in the default setting.
        let converged = sel.share > 0.5;
        s.verdict(
            "induction.selector-mi",
            "selector = argmax of the modified χ² mutual information (|P| ≤ D)",
            &format!("{mi_best:?}, held by a majority of the selector (share > 0.5)"),
            "Chen et al. 2024: the selector converges to the parent set maximising the modified χ² mutual information over |P| ≤ D (their main theorem); a winner without a majority has not converged",
            if converged {
                format!("{:?} (share {:.3})", sel.distances, sel.share)
            } else {
                format!(
                    "not judged: no subset holds a majority (winner {:?}, share {:.3})",
                    sel.distances, sel.share
                )
            },
            converged && sel.distances == *mi_best,
        )
        .scored(sel.share, Some(0.5));
        let (pu, pb) = (pick(uniform), pick(bayes));
        let vloss = if code { val_code } else { val_nll };
        s.verdict(
            "induction.loss-toward-bayes",
            "the loss falls well below the uniform-attention baseline, towards Bayes",
            &format!("< uniform {pu:.3} − ½(uniform − Bayes {pb:.3})"),
            "Chen et al. 2024: validation code loss 0.900 → 0.652 in the paper's run (their training curve), nearly at Bayes; the half-way bar is ours and far short of that",
            format!("{vloss:.4}"),
            vloss < pu - 0.5 * (pu - pb),
        )
        .scored(vloss, Some(pu - 0.5 * (pu - pb)));
        let dist = probe::head_distances::<T, M>(model);
        // The causal claims are about the parent copiers the selector reads; with
        // no selector formed there are none to ablate or patch.
        let formed = converged && sel.distances == *truth;
        causal::verdicts(
            model, val, truth, &sel.heads, &dist, uniform.1, floor, formed, &mut s,
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
    )
    .scored(a_final, Some(10.0 * cfg.model.a_init.abs().max(0.01)));
    Ok(s)
}
