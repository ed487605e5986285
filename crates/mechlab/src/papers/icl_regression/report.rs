//! Icl-regression's report: the error over training beside the reference
//! predictors, the match with GD over training, the learned preconditioner
//! beside `B*`, the risk over prompt lengths and shifts, and the notes.

use super::measure::Eval;
use super::verdicts::Measured;
use super::IclRegressionConfig;
use crate::run::{metrics, RunCtx, RunError};
use mechlab_report::{Figure, Series};

pub(super) fn figures(
    cfg: &IclRegressionConfig,
    ev: &Eval,
    m: &Measured,
    ctx: &mut RunCtx,
) -> Result<(), RunError> {
    let recs = ctx.records()?;
    let curve = |key: &str| {
        let (x, y) = metrics::series(&recs, "probe", key);
        Series::new(key, x, y)
    };
    ctx.figure(
        &Figure::lines("error", "Error on held-out prompts", "step", "mean squared error")
            .log_y()
            .with_series(curve("mse"))
            .with_hline("one GD step, best η", ev.mse_gd)
            .with_hline("one preconditioned step, B*", ev.mse_opt)
            .caption(&format!(
                "The model's error on {} held-out prompts against one step of GD with the best step size η* = {:.4} and the one-layer optimum B* (Γ⁻¹Ω).",
                ev.prompts.len(),
                ev.eta
            )),
    )?;
    ctx.figure(
        &Figure::lines("match", "Match with one GD step", "step", "value")
            .with_series(curve("cos_gd"))
            .with_series(curve("diff_gd"))
            .with_series(curve("cos_opt"))
            .with_series(curve("diff_opt"))
            .caption("von Oswald et al.'s comparison: the cosine of the sensitivities ∂ŷ/∂x_q (cos) and the relative difference of the predictions (diff), against one GD step with η* (gd) and against B* (opt)."),
    )?;
    let d = cfg.data.d;
    let idx: Vec<f64> = (0..d * d).map(|i| i as f64).collect();
    if m.last.b.is_empty() {
        // softmax attention: no layer is a preconditioned step to draw
        return risk_figures(m, ctx);
    }
    let mut fig = Figure::lines(
        "preconditioner",
        "Effective preconditioner B_l = −P_l[D, D] Q_l[x, x]ᵀ, entries",
        "entry (row-major)",
        "value",
    );
    for (l, b) in m.last.b.iter().enumerate() {
        fig = fig.with_series(Series::new(
            &format!("B_{l}"),
            idx.clone(),
            (0..d * d).map(|k| b[(k / d, k % d)]).collect(),
        ));
    }
    fig = fig.with_series(Series::new(
        "B*",
        idx,
        (0..d * d).map(|k| ev.b_star[(k / d, k % d)]).collect(),
    ));
    ctx.figure(
        &fig.caption("Each layer's effective preconditioner beside the one-layer optimum B*."),
    )?;
    risk_figures(m, ctx)
}

fn risk_figures(m: &Measured, ctx: &mut RunCtx) -> Result<(), RunError> {
    for (id, title, x, pts) in [
        ("risk_lengths", "Risk over prompt length", "M", &m.lengths),
        (
            "risk_shift",
            "Risk under covariate shift",
            "covariance scale c",
            &m.shifts,
        ),
    ] {
        if pts.is_empty() {
            continue;
        }
        let xs: Vec<f64> = pts.iter().map(|p| p.at).collect();
        ctx.figure(
            &Figure::lines(id, title, x, "E (ŷ − y)²")
                .log_y()
                .with_series(Series::new("trained model", xs.clone(), pts.iter().map(|p| p.mc).collect()))
                .with_series(Series::new("closed form at B*", xs.clone(), pts.iter().map(|p| p.formula).collect()))
                .with_series(Series::new("optimum refitted", xs, pts.iter().map(|p| p.refit).collect()))
                .caption("Monte-Carlo risk of the trained model on fresh prompts, the closed form at the training optimum B*, and the optimum for the prompts' own distribution."),
        )?;
    }
    Ok(())
}

pub(super) fn notes(
    cfg: &IclRegressionConfig,
    ev: &Eval,
    m: &Measured,
    ctx: &mut RunCtx,
) -> Result<(), RunError> {
    let (dc, p) = (&cfg.data, &m.last);
    let mut weights = String::new();
    if cfg.model.attention == super::model::Attention::Linear {
        weights += &format!(
            "| ‖B_0 − B*‖/‖B*‖ | {:.4} |\n| model against L preconditioned steps with its own B_l (relative difference) | {:.4} |\n",
            p.rel_b, p.diff_blocks
        );
    }
    for (l, (c, rel)) in p.precond.iter().enumerate() {
        weights += &format!("| B_{l} against c Σ⁻¹: c, relative distance | {c:.4}, {rel:.4} |\n");
    }
    ctx.notes(&(format!(
        "## Setting\n\nd = {}, N = {} context examples, inputs {}, covariance eigenvalues {:?}{}, w prior {}, noise {}; {} layer(s){}, init {} × {}; {} steps of {} at lr {}, batch {}.\n\n\
         ## Results\n\n| quantity | value |\n|---|---|\n\
         | error: model / one GD step (η* = {:.4}) / B* / predicting 0 | {:.5} / {:.5} / {:.5} / {:.5} |\n\
         | against one GD step: relative prediction difference, sensitivity cosine | {:.4}, {:.5} |\n\
         | against B*: relative prediction difference, sensitivity cosine | {:.4}, {:.5} |\n{weights}",
        dc.d,
        dc.n,
        crate::config::name_of(&dc.x),
        dc.cov_eigs,
        if dc.cov_rotate { " (rotated)" } else { "" },
        crate::config::name_of(&dc.w_prior),
        dc.noise,
        cfg.model.layers,
        match cfg.model.attention {
            super::model::Attention::Linear => String::new(),
            super::model::Attention::Softmax => format!(" of softmax attention, {} head(s)", cfg.model.heads),
        },
        super::init_name(&cfg.model),
        cfg.model.init_scale,
        cfg.train.steps,
        crate::config::name_of(&cfg.train.optimizer),
        cfg.train.lr,
        dc.batch,
        ev.eta,
        p.mse,
        ev.mse_gd,
        ev.mse_opt,
        ev.mse_zero,
        p.diff_gd,
        p.cos_gd,
        p.diff_opt,
        p.cos_opt,
    ) + &m.gdpp.as_ref().map_or(String::new(), |g| {
        format!(
            "| error: GD++ fitted, {} steps (γ_l; η_l) | {:.5} ({:.4?}; {:.4?}) |\n\
             | against GD++: relative prediction difference, sensitivity cosine | {:.4}, {:.5} |\n",
            g.gamma.len(),
            g.mse,
            g.gamma,
            g.eta,
            g.diff,
            g.cos
        )
    })))
}
