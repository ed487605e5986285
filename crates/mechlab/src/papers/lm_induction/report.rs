//! lm-induction's figures and notes, drawn from [`super::measure`].

use super::config::LmConfig;
use super::data;
use super::measure::{Measured, INDUCTION_THRESHOLD};
use super::probes::Probe;
use super::Task;
use crate::experiment::ExperimentError;
use crate::run::{attention_record, LayerPattern, RunCtx};
use mechlab_engine::gpt::Workspace;
use mechlab_engine::Float;
use mechlab_report::{Figure, Series};

fn vline(name: &str, x: f64, lo: f64, hi: f64) -> Series {
    Series::new(name, vec![x, x], vec![lo, hi]).dashed()
}

/// One series per head (`L{l}H{h}`) of a `[layer][head]` series over the probe steps.
fn per_head(mut f: Figure, steps: &[f64], ys: &[Vec<Vec<f64>>]) -> Figure {
    for (l, hs) in ys.iter().enumerate() {
        for (h, y) in hs.iter().enumerate() {
            f = f.with_series(Series::new(&format!("L{l}H{h}"), steps.to_vec(), y.clone()));
        }
    }
    f
}

pub fn figures<T: Float>(
    cfg: &LmConfig,
    ctx: &mut RunCtx,
    task: &Task<T>,
    probe: &Probe<T>,
    m: &Measured,
) -> Result<(), ExperimentError> {
    let mut f = Figure::lines("induction", "Induction score per head over training", "step", "attention to the token after the earlier occurrence")
        .caption("Repeated random sequences; a head above 1/2 puts more attention on the induction target than on all other keys together.")
        .with_hline("threshold 1/2", INDUCTION_THRESHOLD)
        .with_hline("uniform attention", m.uniform_induction);
    f = per_head(f, &m.steps, &m.induction);
    if let Some((a, b)) = m.rise {
        f = f
            .with_series(vline("rise starts", a as f64, 0.0, 1.0))
            .with_series(vline("rise ends", b as f64, 0.0, 1.0));
    }
    ctx.figure(&f)?;
    let mut pf = Figure::lines("prev_token", "Previous-token score per head over training", "step", "attention to the previous token")
        .caption("Held-out sequences; the induction heads of layer 1 read what previous-token heads of layer 0 write.")
        .with_hline("uniform attention", m.uniform_prev);
    pf = per_head(pf, &m.steps, &m.prev_token);
    ctx.figure(&pf)?;
    let mut cf = Figure::lines("copying", "Copying score of each head's OV circuit over training", "step", "Σλ / Σ|λ| of W_U W_O W_V W_E")
        .caption("1: attending to a token raises its logit (a copier); −1: lowers it; the two horizontal lines are ± the largest |score| of any head at initialisation.")
        .with_hline("init max", m.copying_init)
        .with_hline("init min", -m.copying_init);
    cf = per_head(cf, &m.steps, &m.copying);
    ctx.figure(&cf)?;
    let (lo, hi) = m
        .icl
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| {
            (a.min(v), b.max(v))
        });
    let mut g = Figure::lines("icl", "In-context learning score over training", "step", "late loss − early loss (nats)")
        .caption("Mean held-out loss near the last position minus near the early one; the dashed lines bound the induction head's rise.")
        .with_series(Series::new("ICL score", m.steps.clone(), m.icl.clone()));
    if let Some((a, b)) = m.rise {
        g = g
            .with_series(vline("rise starts", a as f64, lo, hi))
            .with_series(vline("rise ends", b as f64, lo, hi));
    }
    ctx.figure(&g)?;
    ctx.figure(
        &Figure::lines(
            "loss",
            "Held-out loss over training",
            "step",
            "cross-entropy (nats per byte)",
        )
        .with_series(Series::new("held-out", m.steps.clone(), m.loss.clone())),
    )?;
    ctx.figure(
        &Figure::lines(
            "loss_by_position",
            "Held-out loss by position, trained model",
            "position",
            "cross-entropy (nats)",
        )
        .caption("The in-context learning score compares the two ends of this curve.")
        .with_series(Series::new(
            "trained",
            (0..m.fin.per_pos.len()).map(|p| p as f64).collect(),
            m.fin.per_pos.clone(),
        ))
        .with_series(
            Series::new(
                "at initialisation",
                (0..m.init.per_pos.len()).map(|p| p as f64).collect(),
                m.init.per_pos.clone(),
            )
            .dashed(),
        ),
    )?;
    // every head on one short repeated sequence
    let rl = cfg.probe.rep_len.min(12);
    let mut seq = vec![0u32; 2 * rl];
    let ids = task
        .data
        .probe_ids(cfg.probe.rep_tokens, cfg.data.batch, cfg.data.seq_len);
    data::repeated_row_of(
        &mut seq,
        rl,
        &ids,
        &mut crate::rng::substream(cfg.seed, crate::rng::Stream::Sample, 3),
    );
    let mut ws = Workspace::new(&task.model, 1, seq.len());
    task.model.evaluate(&mut ws, &seq, None);
    let (w, i) = ws.seq(0);
    let layers: Vec<LayerPattern> = (0..cfg.model.n_layers)
        .map(|l| LayerPattern {
            layer: l,
            n_heads: cfg.model.n_heads,
            pattern: w.pattern(l, i).iter().map(|v| v.as_f64()).collect(),
        })
        .collect();
    let show = |t: u32| task.data.corpus().map_or(t.to_string(), |c| c.show(t));
    let tokens = seq.iter().map(|&t| show(t)).collect();
    let (acts, viewer) = attention_record(
        "attention",
        "Attention on a repeated random sequence, every head",
        tokens,
        &layers,
    );
    ctx.record_activations(&acts)?;
    let (bl, bh, _) = m.fin.best_induction();
    ctx.figure(&viewer.with_first_head(bl * cfg.model.n_heads + bh).caption(
        "An induction head attends from each token of the second copy to the token after its earlier occurrence (the diagonal offset by the segment length, minus one); a previous-token head in layer 0 to the token just before.",
    ))?;
    let _ = probe;
    Ok(())
}

pub fn notes<T: Float>(
    cfg: &LmConfig,
    ctx: &mut RunCtx,
    task: &Task<T>,
    m: &Measured,
) -> Result<(), ExperimentError> {
    let c = &task.model.cfg;
    let mut md = format!(
        "## Setting\n\n{}-layer {} transformer, d_model {}, {} heads of {}, context {}, vocabulary {} ({}), {} parameters; {} steps of {} sequences.\n\n",
        c.n_layers,
        if c.d_mlp == 0 { "attention-only" } else { "MLP" },
        c.d_model,
        c.n_heads,
        c.d_head,
        c.n_ctx,
        c.d_vocab,
        match task.data.corpus() {
            Some(c) if c.bpe_json.is_some() => "BPE tokens of the text, tokenizer.json",
            Some(_) => "bytes of the text",
            None => "random tokens",
        },
        mechlab_engine::Parameters::num_params(&task.model),
        cfg.train.total_steps(),
        cfg.data.batch,
    );
    md += "## Heads at the end\n\n| head | induction | previous token |\n|---|---|---|\n";
    for (l, hs) in m.fin.induction.iter().enumerate() {
        for (h, v) in hs.iter().enumerate() {
            md += &format!("| L{l}H{h} | {v:.3} | {:.3} |\n", m.fin.prev_token[l][h]);
        }
    }
    md += &format!(
        "\nUniform attention scores {:.3} (induction) and {:.3} (previous token). ICL score {:.3} nats (at initialisation {:.3}); loss on the repeated copy {:.3} nats.\n",
        m.uniform_induction, m.uniform_prev, m.fin.icl, m.init.icl, m.fin.rep_loss
    );
    ctx.notes(&md)?;
    Ok(())
}
