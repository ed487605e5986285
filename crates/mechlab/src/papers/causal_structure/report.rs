//! Causal-structure's report: the loss over training against the Bayes line,
//! parent attention and induction over training, and for a fixed graph the
//! graph beside the learned position block, the χ²-MI and the theory's start
//! gradient; then the notes.

use super::measure::Eval;
use super::model::CatFormer;
use super::verdicts::Measured;
use super::CausalConfig;
use crate::run::{metrics, RunCtx, RunError};
use mechlab_engine::layers::softmax;
use mechlab_report::{Figure, Series};

pub(super) fn figures(
    cfg: &CausalConfig,
    ev: &Eval,
    model: &CatFormer,
    m: &Measured,
    ctx: &mut RunCtx,
) -> Result<(), RunError> {
    let recs = ctx.records()?;
    let curve = |key: &str| {
        let (x, y) = metrics::series(&recs, "probe", key);
        Series::new(key, x, y)
    };
    ctx.figure(
        &Figure::lines("loss", "Held-out loss", "step", "soft-label cross-entropy")
            .with_series(curve("loss"))
            .with_hline("uniform", ev.uniform)
            .with_hline("Bayes (posterior mean)", ev.bayes)
            .with_hline("floor (entropy of the target)", ev.entropy)
            .caption(&format!(
                "The model's loss on {} held-out sequences against the uniform prediction, the Bayes predictor (α + N_s)/(Sα + N) and the target's entropy.",
                cfg.probe.n_probe.min(ev.seqs.n)
            )),
    )?;
    ctx.figure(
        &Figure::lines("mechanism", "Parent attention and induction", "step", "attention mass")
            .with_series(curve("parent_attn"))
            .with_series(curve("induction"))
            .with_hline("parent, uniform attention", m.last.parent_chance)
            .with_hline("induction, uniform attention", m.last.induction_uniform)
            .caption("Layer 1's attention from each position to its parent, and the query's layer-2 attention on the keys whose parent's token is the query token."),
    )?;
    let Some(mi) = &m.mi else {
        return Ok(());
    };
    let task = model.task();
    let n = task.seq_len - 1;
    let d = model.dims;
    let graph: Vec<f64> = (0..n * n)
        .map(|k| (task.dag[k / n] == (k % n) as i64) as u8 as f64)
        .collect();
    let a1 = model.a1.value();
    let mut pos = vec![0.0; n * n];
    for i in 0..n {
        let row = &mut pos[i * n..i * n + i + 1];
        for (j, v) in row.iter_mut().enumerate() {
            *v = a1[(d.s + i) * d.d0 + d.s + j];
        }
        softmax::row_in_place(row, |_| true);
    }
    let lower = |v: &[f64]| -> Vec<f64> {
        (0..n * n)
            .map(|k| if k % n < k / n { v[k] } else { 0.0 })
            .collect()
    };
    for (id, title, values, caption) in [
        ("graph", "The latent graph (child × parent)", graph, "1 where the column is the row's parent."),
        ("a1_positions", "Layer 1's position block, masked softmax", pos, "softmax over j ≤ i of A1[S + i, S + j] (head 0): the authors' many_graphs.ipynb reading of the learned graph."),
        ("mi", "χ²-mutual information between positions (estimated)", lower(&mi.chi2), "Within one transition matrix, averaged over matrices; row i, column j < i."),
        ("start_gradient", "−∂L/∂A1 at the theory's start (position block)", lower(&mi.grad), "A1 = 0, A2 = β on the match block, W the copy; row i, column j < i."),
    ] {
        ctx.figure(
            &Figure::heatmap(id, title, "key position", "query position", n, n, values, false)
                .caption(caption),
        )?;
    }
    Ok(())
}

pub(super) fn notes(
    cfg: &CausalConfig,
    ev: &Eval,
    model: &CatFormer,
    m: &Measured,
    ctx: &mut RunCtx,
) -> Result<(), RunError> {
    let (dc, p) = (&cfg.data, &m.last);
    let mut mi = String::new();
    if let Some(x) = &m.mi {
        mi = format!(
            "| χ²-MI peaks at the parent / start gradient peaks at the parent / their row correlation | {:.3} / {:.3} / {:.3} |\n",
            x.mi_argmax, x.grad_argmax, x.grad_mi_corr
        );
    }
    ctx.notes(&format!(
        "## Setting\n\nS = {}, T = {}, α = {}, graph {} (parents {:?}), control {}; heads {:?}; {} steps of {} at lr {} ({}), batch {}; {} held-out sequences.\n\n\
         ## Results\n\n| quantity | value |\n|---|---|\n\
         | loss: model / Bayes / the authors' Bayes count / uniform / floor | {:.4} / {:.4} / {:.4} / {:.4} / {:.4} |\n\
         | share of the gap from uniform to Bayes closed | {:.4} |\n\
         | layer-1 attention on the parent (uniform causal attention) | {:.4} ({:.4}) |\n\
         | mean row peaks at the parent / A1's position block alone on the parent | {:.3} / {:.4} |\n\
         | induction mass (uniform) | {:.4} ({:.4}) |\n\
         | A2 match block, W copy block: diagonal − off-diagonal | {:.3}, {:.3} |\n{mi}",
        dc.vocab,
        dc.seq_len,
        dc.alpha,
        crate::config::name_of(&dc.graph),
        model.task().dag,
        crate::config::name_of(&dc.control),
        cfg.model.heads,
        cfg.train.steps,
        crate::config::name_of(&cfg.train.optimizer),
        cfg.train.lr,
        crate::config::name_of(&cfg.train.schedule),
        dc.batch,
        ev.seqs.n,
        m.eval_loss,
        ev.bayes,
        ev.bayes_theirs,
        ev.uniform,
        ev.entropy,
        ev.gap_closed(m.eval_loss),
        p.parent_attn,
        p.parent_chance,
        p.parent_argmax,
        p.parent_attn_pos,
        p.induction,
        p.induction_uniform,
        p.a2_match,
        p.w_copy,
    ))
}
