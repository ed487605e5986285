//! birth's measurements over training (read back from the probe log), its
//! figures and its notes.

use super::config::BirthConfig;
use super::probes::{Eval, Probe};
use super::Task;
use crate::experiment::ExperimentError;
use crate::run::{attention_record, metrics, LayerPattern, RunCtx};
use mechlab_engine::gpt::Workspace;
use mechlab_engine::Float;
use mechlab_report::{Figure, Series};

/// The level every probe's verdict compares with (docs/birth.md).
pub const MAJORITY: f64 = 0.5;

/// The probe keys drawn over training, with their legends.
const CURVES: [(&str, &str); 7] = [
    ("acc", "accuracy on outputs (2nd+ occurrence)"),
    ("acc2", "accuracy at the 2nd occurrence"),
    ("attn1", "layer 1 attends after an earlier occurrence"),
    ("attn0", "layer 0 attends to the previous token"),
    ("wo1", "memory W_O² (token → itself)"),
    ("wk1", "memory W_K² (trigger → its copy)"),
    ("wk0", "memory W_K¹ (position → next)"),
];

pub struct Measured {
    pub steps: Vec<f64>,
    /// One series per [`CURVES`] key, and the loss on the outputs.
    pub curves: Vec<Vec<f64>>,
    pub loss_head: Vec<f64>,
    pub init: Eval,
    pub fin: Eval,
    pub final_train_loss: f64,
    /// Per [`CURVES`] key: the first probe step at which it exceeds [`MAJORITY`].
    pub t_half: Vec<Option<u64>>,
}

pub fn measured(
    ctx: &mut RunCtx,
    init: Eval,
    fin: Eval,
    final_train_loss: f64,
) -> Result<Measured, ExperimentError> {
    let recs = ctx.records()?;
    let (steps, loss_head) = metrics::series(&recs, "probe", "loss_head");
    let curves: Vec<Vec<f64>> = CURVES
        .iter()
        .map(|(k, _)| metrics::series(&recs, "probe", k).1)
        .collect();
    let t_half = curves
        .iter()
        .map(|ys| {
            steps
                .iter()
                .zip(ys)
                .find(|(_, &y)| y > MAJORITY)
                .map(|(&s, _)| s as u64)
        })
        .collect();
    Ok(Measured {
        steps,
        curves,
        loss_head,
        init,
        fin,
        final_train_loss,
        t_half,
    })
}

pub fn figures<T: Float>(
    cfg: &BirthConfig,
    ctx: &mut RunCtx,
    task: &Task<T>,
    probe: &mut Probe<T>,
    m: &Measured,
) -> Result<(), ExperimentError> {
    let mut f = Figure::lines(
        "probes",
        "Accuracy, attention probes and memory recall over training",
        "step",
        "share",
    )
    .caption("Bietti et al.'s probes on fixed evaluation sequences (accuracy, attention) and on the weights alone (memory recall); the verdicts compare the final values with 1/2.")
    .with_hline("1/2", MAJORITY);
    for ((_, label), ys) in CURVES.iter().zip(&m.curves) {
        if ys.iter().any(|y| y.is_finite()) {
            f = f.with_series(Series::new(label, m.steps.clone(), ys.clone()));
        }
    }
    ctx.figure(&f)?;
    ctx.figure(
        &Figure::lines(
            "loss_head",
            "Loss on the outputs from their second occurrence",
            "step",
            "cross-entropy (nats)",
        )
        .caption(
            "The training objective (loss_head_only), on the evaluation sequences; ln N is chance.",
        )
        .with_hline("ln N", (task.data.bigrams.vocab() as f64).ln())
        .with_series(Series::new(
            "evaluation",
            m.steps.clone(),
            m.loss_head.clone(),
        )),
    )?;
    // the first evaluation sequence, up to 48 tokens, every layer
    let t = cfg.data.seq_len.min(48);
    let seq = probe.inputs[..t].to_vec();
    let mut ws = Workspace::new(&task.model, 1, t);
    task.model.evaluate(&mut ws, &seq, None);
    let (w, i) = ws.seq(0);
    let layers: Vec<LayerPattern> = (0..cfg.model.n_layers)
        .map(|l| LayerPattern {
            layer: l,
            n_heads: 1,
            pattern: w.pattern(l, i).iter().map(|v| v.as_f64()).collect(),
        })
        .collect();
    let tokens = seq.iter().map(|&id| task.data.bigrams.show(id)).collect();
    let (acts, viewer) = attention_record(
        "attention",
        "Attention on an evaluation sequence, both layers",
        tokens,
        &layers,
    );
    ctx.record_activations(&acts)?;
    let last = cfg.model.n_layers - 1;
    ctx.figure(&viewer.with_first_head(last).caption(
        "Layer 1 of the two-layer model: from a trigger's later occurrence to the token after its earlier one (the output); layer 0: each token to the one before it.",
    ))?;
    Ok(())
}

fn fmt(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.3}")
    } else {
        "–".into()
    }
}

pub fn notes<T: Float>(
    cfg: &BirthConfig,
    ctx: &mut RunCtx,
    task: &Task<T>,
    m: &Measured,
) -> Result<(), ExperimentError> {
    let d = &task.data.bigrams;
    let trig: Vec<String> = d.triggers.iter().map(|&q| d.show(q)).collect();
    let mut md = format!(
        "## Setting\n\n{}-layer simplified transformer (one head of width {}, W_Q = I, frozen random embeddings, positions, unembedding and value maps), context {}, vocabulary {} bytes of {}, triggers {}; {} SGD steps (lr {}, momentum {}, weight decay {}) of {} fresh sequences, loss on the outputs from their second occurrence.\n\n",
        cfg.model.n_layers,
        cfg.model.d_model,
        cfg.data.seq_len,
        d.vocab(),
        cfg.data.file,
        trig.join(" "),
        cfg.train.total_steps(),
        cfg.train.lr,
        cfg.train.momentum,
        cfg.train.weight_decay,
        cfg.data.batch,
    );
    md += "## Probes\n\n| probe | at initialisation | final | first step above 1/2 |\n|---|---|---|---|\n";
    let (i, f) = (m.init.record(), m.fin.record());
    for (c, ((key, label), t)) in CURVES.iter().zip(&m.t_half).enumerate() {
        let k = i.iter().position(|(n, _)| n == key).unwrap_or(c);
        md += &format!(
            "| {label} | {} | {} | {} |\n",
            fmt(i[k].1),
            fmt(f[k].1),
            t.map_or("–".into(), |s| s.to_string())
        );
    }
    md += &format!(
        "\nLoss on the outputs {} nats (chance ln N = {:.3}); W_K¹ recall over the first 64 positions {}.\n",
        fmt(m.fin.loss_head),
        (d.vocab() as f64).ln(),
        fmt(m.fin.wk0_64)
    );
    ctx.notes(&md)?;
    Ok(())
}
