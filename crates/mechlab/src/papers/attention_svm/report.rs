//! Attention-svm's report: the figures (direction against the SVMs, the norm,
//! the singular values, the regularisation path) and the notes' setting and
//! results table, from the training's last probe and the measurements.

use super::measure::Measured;
use super::model::Param2;
use super::train::Trained;
use super::AttentionSvmConfig;
use crate::run::{metrics, RunCtx, RunError};
use mechlab_report::{Figure, Series};

pub(super) fn figures(
    cfg: &AttentionSvmConfig,
    m: &Measured,
    ctx: &mut RunCtx,
) -> Result<(), RunError> {
    let (d, sv, rank_w, rank_mm, rank_nuc) = (m.d, &m.sv, m.rank_w, m.rank_mm, m.rank_nuc);
    let (mm_sv, nuc_sv) = (&m.mm_sv, &m.nuc_sv);
    let recs = ctx.records()?;
    let curve = |key: &str| {
        let (x, y) = metrics::series(&recs, "probe", key);
        let (x, y): (Vec<f64>, Vec<f64>) = x.into_iter().zip(y).filter(|(s, _)| *s > 0.0).unzip();
        Series::new(key, x, y)
    };
    ctx.figure(&Figure::lines("correlation", "Direction of W(t) against attention-SVM solutions", "step", "correlation")
        .log_x()
        .with_series(curve("corr_sel"))
        .with_series(curve("corr_opt"))
        .with_series(curve("corr_ctrl"))
        .with_series(curve("corr_nuc"))
        .with_hline("threshold", cfg.probe.corr_threshold)
        .caption("⟨W, W^mm⟩/(‖W‖‖W^mm‖) for W^mm of the tokens the attention selects (corr_sel), of the highest-score tokens (corr_opt), and of a wrong selection, each sequence's next token (corr_ctrl, the control); for W = K Qᵀ also against the nuclear-norm SVM of the selected tokens (corr_nuc)."))?;
    ctx.figure(&Figure::lines("norm", "‖W(t)‖_F", "step", "‖W‖_F")
        .log_x()
        .with_series(curve("w_norm"))
        .with_series(curve("attn_max"))
        .caption("The norm grows without bound (linearly under normalised GD) while the attention on the selected token (attn_max, mean over sequences) goes to 1."))?;
    let idx: Vec<f64> = (1..=d).map(|i| i as f64).collect();
    let norm_sv = |s: &[f64]| s.iter().map(|x| x / s[0].max(1e-300)).collect::<Vec<f64>>();
    let mut fig = Figure::lines(
        "singular_values",
        "Singular values of the final W (normalised)",
        "index",
        "σ_i / σ_1",
    )
    .log_y()
    .with_series(Series::new(
        "W(T)",
        idx.clone(),
        norm_sv(sv).iter().map(|x| x.max(1e-16)).collect(),
    ));
    if let Some(s) = &mm_sv {
        fig = fig.with_series(Series::new(
            "W^mm (Frobenius)",
            idx,
            norm_sv(s).iter().map(|x| x.max(1e-16)).collect(),
        ));
    }
    if let Some(s) = &nuc_sv {
        fig = fig.with_series(Series::new(
            "W^mm_* (nuclear)",
            (1..=d).map(|i| i as f64).collect(),
            norm_sv(s).iter().map(|x| x.max(1e-16)).collect(),
        ));
    }
    ctx.figure(&fig.caption(&format!(
        "Numerical rank (σ_i > {} σ_1): W(T) {rank_w}, W^mm {}{}.",
        cfg.probe.rank_tol,
        rank_mm.map_or("n/a".into(), |r| r.to_string()),
        rank_nuc.map_or(String::new(), |r| format!(", W^mm_* {r}"))
    )))?;
    if let Some(r) = &m.reg {
        ctx.figure(&Figure::lines("regularisation_path", "Direction of the norm-constrained minimiser against the SVM", "radius R", "correlation")
            .log_x()
            .with_series(Series::new("corr(W̄_R, W^mm)", r.radii.clone(), r.corr.clone()))
            .with_series(Series::new("control: wrong selection", r.radii.clone(), r.corr_ctrl.clone()))
            .with_hline("threshold", cfg.probe.corr_threshold)
            .caption(&format!("W̄_R = argmin of the loss over the ball of radius R ({}), against the {} SVM of the tokens W̄_R selects at the largest R, and of a wrong selection (each sequence's next token).", match cfg.model.param {
                Param2::W => "‖W‖_F ≤ R",
                Param2::Kq => "‖K‖²_F + ‖Q‖²_F ≤ 2R",
            }, r.norm)))?;
    }
    Ok(())
}

pub(super) fn notes(
    cfg: &AttentionSvmConfig,
    t: usize,
    tr: &Trained,
    m: &Measured,
    ctx: &mut RunCtx,
) -> Result<(), RunError> {
    let (last, d, rank_w, rank_mm, reg) = (&tr.last, m.d, m.rank_w, m.rank_mm, &m.reg);
    let corr_nuc = last.corr_nuc;
    let f = |c: Option<f64>| c.map_or("not solved".to_string(), |c| format!("{c:.4}"));
    // Whether GD selects the highest-score tokens is reported in the notes
    // (`selected = highest score`), not judged: the theory allows either.
    ctx.notes(&format!(
        "## Setting\n\nn = {}, T = {}, d = {}, tokens and queries on the unit sphere, unit v, {} output, parameterisation {}, init sd {}, {} steps of normalised GD, lr {}.\n\n\
         ## Results\n\n| quantity | theory | ours |\n|---|---|---|\n\
         | corr(W, W^mm of the selected tokens) | → 1 (W), < 1 (K, Q) | {} |\n| corr(W, W^mm of the highest-score tokens) | → 1 when they are selected | {} |\n\
         | corr(W, W^mm of a wrong selection) (control) | < 1 | {} |\n| ‖W‖_F | → ∞ | {:.3} |\n| selected = highest score | | {:.3} |\n| rank W(T) / W^mm_F (σ > {} σ_1) | low for (K, Q) | {rank_w} / {} |\n\
         | corr(W, W^mm_*), the nuclear-norm SVM (K, Q only) | → 1 (K, Q) | {} |\n\
         | regularisation path: corr(W̄_R, W^mm) from the smallest to the largest R | → 1 | {} |\n",
        cfg.data.n, t, d, crate::config::name_of(&cfg.model.output), crate::config::name_of(&cfg.model.param), cfg.model.init, cfg.train.steps, cfg.train.lr,
        f(last.corr_sel), f(last.corr_opt), f(last.corr_ctrl), last.w_norm, last.sel_is_opt, cfg.probe.rank_tol,
        rank_mm.map_or("n/a".into(), |r| r.to_string()),
        match cfg.model.param {
            Param2::W => "not computed".to_string(),
            Param2::Kq => f(corr_nuc),
        },
        reg.as_ref().map_or("not computed".to_string(), |r| format!(
            "{:.4} → {:.4} (R = {} → {}, {} SVM)",
            r.corr[0],
            r.corr.last().unwrap_or(&f64::NAN),
            r.radii[0],
            r.radii.last().unwrap_or(&0.0),
            r.norm
        ))
    ))?;
    Ok(())
}
