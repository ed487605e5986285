//! The transformer experiment's figures, summary and notes: the mechanisms
//! over training read back from `metrics.jsonl` (so a resumed run draws its
//! whole history), heads × steps.

use super::config::TransformerConfig;
use super::probes::{Eval, Probe};
use super::Learner;
use crate::experiment::ExperimentError;
use crate::run::checkpoint;
use crate::run::metrics;
use crate::run::summary::Summary;
use crate::run::{attention_record, LayerPattern, RunCtx};
use mechlab_engine::gpt::Gpt;
use mechlab_engine::hooks::{Batch, HookedModel};
use mechlab_engine::Float;
use mechlab_report::{AttentionCheckpoint, Figure, Series};

type Records = Vec<serde_json::Map<String, serde_json::Value>>;

fn head_names(nl: usize, nh: usize) -> Vec<String> {
    (0..nl)
        .flat_map(|l| (0..nh).map(move |h| format!("L{l}H{h}")))
        .collect()
}

/// A heads × probe steps heatmap of the per-head key `key` (`{key}.l{l}.h{h}`).
fn heads_by_steps(
    recs: &Records,
    key: &str,
    (nl, nh): (usize, usize),
    title: &str,
    caption: &str,
) -> Option<Figure> {
    let (steps, _) = metrics::series(recs, "probe", &format!("{key}.l0.h0"));
    if steps.is_empty() {
        return None;
    }
    let mut values = Vec::with_capacity(nl * nh * steps.len());
    for l in 0..nl {
        for h in 0..nh {
            values.extend(metrics::series(recs, "probe", &format!("{key}.l{l}.h{h}")).1);
        }
    }
    let cols: Vec<String> = steps.iter().map(|s| format!("{s}")).collect();
    Some(
        Figure::heatmap(
            &format!("heads_{key}"),
            title,
            "step",
            "head",
            nl * nh,
            steps.len(),
            values,
            false,
        )
        .with_ticks(head_names(nl, nh), cols)
        .caption(caption),
    )
}

pub fn figures<T: Float>(
    cfg: &TransformerConfig,
    ctx: &mut RunCtx,
    learner: &mut Learner<T>,
    probe: &Probe<T>,
    fin: &Eval,
) -> Result<(), ExperimentError> {
    let recs = ctx.records()?;
    let step = cfg.train.steps;
    let dims = (cfg.model.n_layers, cfg.model.n_heads);
    let (ps, loss) = metrics::series(&recs, "probe", "loss");
    let (ts, tl) = metrics::series(&recs, "train", "loss");
    let mut f = Figure::lines("loss", "Loss over training", "step", "cross-entropy over the targets (nats)")
        .caption("The held-out loss at each probe step and the training batches' loss; the dashed line is the task's Bayes-optimal loss on the held-out windows, where it has a closed form.")
        .with_series(Series::new("held-out", ps.clone(), loss))
        .with_series(Series::new("train", ts, tl));
    if let Some(b) = probe.bayes {
        f = f.with_hline("Bayes loss", b);
    }
    ctx.figure(&f)?;
    let (_, acc) = metrics::series(&recs, "probe", "accuracy");
    ctx.figure(
        &Figure::lines(
            "accuracy",
            "Held-out accuracy",
            "step",
            "share of targets predicted (argmax)",
        )
        .with_series(Series::new("held-out", ps.clone(), acc)),
    )?;
    let (is, icl) = metrics::series(&recs, "probe", "icl");
    if !is.is_empty() {
        ctx.figure(
            &Figure::lines("icl", "In-context learning score", "step", "late − early held-out loss (nats)")
                .caption("Negative: later tokens are predicted better thanks to the context (Olsson et al. 2022).")
                .with_series(Series::new("icl", is, icl)),
        )?;
    }
    let mut lens = Figure::lines(
        "logit_lens",
        "Logit lens: the loss read off each layer's residual stream",
        "step",
        "held-out loss through ln_final and W_U (nats)",
    );
    for l in 0..=cfg.model.n_layers {
        let (s, y) = metrics::series(&recs, "probe", &format!("lens.{l}"));
        let name = if l == cfg.model.n_layers {
            "final".to_string()
        } else {
            format!("into block {l}")
        };
        lens = lens.with_series(Series::new(&name, s, y));
    }
    ctx.figure(&lens)?;
    let detectors: Vec<(&str, &str, &str)> = vec![
        ("previous_token", "Previous-token detector per head", "TransformerLens's detect_head score: attention mass on the previous token."),
        ("duplicate_token", "Duplicate-token detector per head", "Attention mass on earlier copies of the query's token."),
        ("induction", "Induction detector per head", "Attention mass on the token after an earlier copy of the query's token, on the held-out windows."),
        ("custom", "Your detection pattern per head", "probe.pattern_file, scored as TransformerLens scores its own patterns."),
        ("rep_induction", "Induction score on repeated random tokens per head", "Olsson et al.'s score: attention from the repeat to the token after the earlier occurrence; uniform attention scores about 1/T."),
        ("copying", "OV copying score per head", "Σλ/Σ|λ| of each head's full OV circuit: 1 copies the attended token into the logits, −1 suppresses it."),
        ("dla", "Direct logit attribution per head", "What each head's output adds to the target token's logit, through the final LayerNorm at its frozen scale and the unembedding, averaged over the held-out targets (nats of logit)."),
    ];
    for (key, title, cap) in detectors {
        if let Some(fig) = heads_by_steps(&recs, key, dims, title, cap) {
            ctx.figure(&fig)?;
        }
    }
    for name in &cfg.probe.pattern_fns {
        let title = format!("Your detection pattern `{name}` per head");
        let cap = format!("The pattern mechlab.train's patterns[{name:?}] gave for each held-out window, scored as TransformerLens scores its own patterns.");
        if let Some(fig) = heads_by_steps(&recs, &format!("custom_{name}"), dims, &title, &cap) {
            ctx.figure(&fig)?;
        }
    }
    // composition over training: every pair of heads in consecutive layers × steps
    let (nl, nh) = dims;
    for name in ["q", "k", "v"] {
        let pairs: Vec<(String, String)> = (1..nl)
            .flat_map(|l| {
                (0..nh).flat_map(move |a| {
                    (0..nh).map(move |b| {
                        (
                            format!("comp_{name}.l{}h{a}.l{l}h{b}", l - 1),
                            format!("L{}H{a}→L{l}H{b}", l - 1),
                        )
                    })
                })
            })
            .collect();
        let Some((steps, _)) = pairs
            .first()
            .map(|(k, _)| metrics::series(&recs, "probe", k))
        else {
            continue;
        };
        let values: Vec<f64> = pairs
            .iter()
            .flat_map(|(k, _)| metrics::series(&recs, "probe", k).1)
            .collect();
        let cols: Vec<String> = steps.iter().map(|s| format!("{s}")).collect();
        let upper = name.to_uppercase();
        ctx.figure(
            &Figure::heatmap(
                &format!("pairs_comp_{name}"),
                &format!("{upper}-composition of every pair of heads over training"),
                "step",
                "earlier head → later head",
                pairs.len(),
                steps.len(),
                values,
                false,
            )
            .with_ticks(pairs.into_iter().map(|p| p.1).collect(), cols)
            .caption("Elhage et al.'s composition score of each pair in consecutive layers at every probe step."),
        )?;
    }
    // final composition scores, one heatmap per mode: rows the heads of layer
    // l − 1, columns the heads of layer l, layer pairs stacked
    for (mode, name) in ["Q", "K", "V"].iter().enumerate() {
        let grids = &fin.composition[mode];
        if grids.is_empty() {
            continue;
        }
        let values: Vec<f64> = grids.iter().flatten().flatten().copied().collect();
        let rows: Vec<String> = (0..grids.len())
            .flat_map(|l| (0..nh).map(move |h| format!("L{l}H{h}")))
            .collect();
        let cols: Vec<String> = (0..nh).map(|h| format!("H{h}")).collect();
        ctx.figure(
            &Figure::heatmap(
                &format!("composition_{}", name.to_lowercase()),
                &format!("{name}-composition at the end (Elhage et al. 2021)"),
                "head of the next layer",
                "head writing",
                rows.len(),
                nh,
                values,
                false,
            )
            .with_ticks(rows, cols)
            .caption("‖OV·QK‖_F/(‖OV‖_F‖QK‖_F) (Q), with QKᵀ (K) or the next head's OV (V); random matrices of these shapes score about 1/√d_head."),
        )?;
    }
    // the attention viewer on the first held-out window, with a slider over
    // the checkpoints
    let t = learner.data.t;
    let x = probe.x[..t].to_vec();
    let layers: Vec<LayerPattern> = patterns(&mut learner.model, &x)?
        .into_iter()
        .enumerate()
        .map(|(l, pattern)| LayerPattern {
            layer: l,
            n_heads: nh,
            pattern,
        })
        .collect();
    let history = earlier_patterns(ctx, &learner.model, &x, step)?;
    let tokens: Vec<String> = x.iter().map(|&i| learner.data.show(i)).collect();
    let (acts, fig) = attention_record(
        "attention",
        "Attention of every head on a held-out window over training",
        tokens,
        &layers,
    );
    ctx.record_activations(&acts)?;
    ctx.figure(&fig.with_history(history, step))?;
    Ok(())
}

/// At most this many earlier checkpoints in the attention viewer's slider,
/// and at most this many weights in all (the report is one HTML file).
const SLIDER_CHECKPOINTS: usize = 8;
const SLIDER_WEIGHTS: usize = 150_000;

/// Every layer's `[n_heads, T, T]` pattern of `model` on one window `x`.
fn patterns<T: Float>(model: &mut Gpt<T>, x: &[u32]) -> Result<Vec<Vec<f64>>, ExperimentError> {
    let names: Vec<String> = (0..model.cfg.n_layers)
        .map(|l| format!("blocks.{l}.attn.hook_pattern"))
        .collect();
    let refs: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
    let (_, mut cache) = model
        .run_with_cache(&Batch::new(x.to_vec(), 1, x.len()), &refs)
        .map_err(|e| ExperimentError::Data(e.to_string()))?;
    Ok(names
        .iter()
        .map(|n| cache.remove(n).map(|a| a.data).unwrap_or_default())
        .collect())
}

/// The viewer's window under the run's checkpoints before `last`: up to
/// [`SLIDER_CHECKPOINTS`] of them, spread evenly over the list from the first
/// to the last, fewer when the window is long.
fn earlier_patterns<T: Float>(
    ctx: &RunCtx,
    model: &Gpt<T>,
    x: &[u32],
    last: u64,
) -> Result<Vec<AttentionCheckpoint>, ExperimentError> {
    let all: Vec<_> = checkpoint::list(&ctx.checkpoint_dir())
        .into_iter()
        .filter(|(s, _)| *s < last)
        .collect();
    let per = model.cfg.n_layers * model.cfg.n_heads * x.len() * x.len();
    let n = SLIDER_CHECKPOINTS
        .min(SLIDER_WEIGHTS / per.max(1))
        .min(all.len());
    if n == 0 {
        return Ok(Vec::new());
    }
    let mut picked: Vec<usize> = (0..n)
        .map(|i| {
            if n == 1 {
                0
            } else {
                i * (all.len() - 1) / (n - 1)
            }
        })
        .collect();
    picked.dedup();
    let mut m = model.clone();
    let mut out = Vec::with_capacity(picked.len());
    for i in picked {
        let (step, path) = &all[i];
        let read = |e: checkpoint::CheckpointError| {
            ExperimentError::Data(format!("{}: {e}", path.display()))
        };
        checkpoint::load::<T>(path)
            .map_err(read)?
            .apply_params(&mut m)
            .map_err(read)?;
        out.push(AttentionCheckpoint {
            step: *step,
            pattern: patterns(&mut m, x)?.concat(),
        });
    }
    Ok(out)
}

/// The best head `(name, score)` of a `[layer][head]` table.
fn best(x: &[Vec<f64>]) -> (String, f64) {
    let mut b = (String::new(), f64::NEG_INFINITY);
    for (l, hs) in x.iter().enumerate() {
        for (h, &v) in hs.iter().enumerate() {
            if v > b.1 {
                b = (format!("L{l}H{h}"), v);
            }
        }
    }
    b
}

pub fn summary<T: Float>(
    cfg: &TransformerConfig,
    learner: &Learner<T>,
    fin: &Eval,
    train_loss: f64,
) -> Summary {
    let mut s = Summary::new("transformer", cfg.seed);
    s.metric("heldout_loss", fin.loss);
    s.metric("heldout_accuracy", fin.accuracy);
    if train_loss.is_finite() {
        // (no update, no training loss: a run of 0 steps measures an imported model)
        s.metric("train_loss", train_loss);
    }
    s.measurement(
        "heldout-loss",
        "held-out loss over the target tokens (nats)",
        format!("{:.4}", fin.loss),
        &learner.data.what,
    );
    s.measurement(
        "heldout-accuracy",
        "held-out accuracy (argmax)",
        format!("{:.4}", fin.accuracy),
        "",
    );
    if let Some(b) = learner.data.bayes {
        s.metric("bayes_loss", b);
        s.metric("bayes_gap", fin.loss - b);
        s.measurement(
            "bayes-gap",
            "held-out loss minus the task's Bayes loss (nats)",
            format!("{:.4}", fin.loss - b),
            &format!("Bayes loss {b:.4} on the same windows"),
        );
    }
    if let Some(v) = fin.icl {
        s.metric("icl", v);
    }
    let mut tables: Vec<(&str, &Vec<Vec<f64>>)> = fin
        .detector_names
        .iter()
        .map(|n| n.as_str())
        .zip(&fin.detectors)
        .collect();
    tables.push(("rep_induction", &fin.rep_induction));
    for (name, table) in tables {
        let (head, v) = best(table);
        s.metric(&format!("best_{name}"), v);
        s.measurement(
            &format!("best-{}", name.replace('_', "-")),
            &format!("the strongest head by the {} score", name.replace('_', " ")),
            format!("{head} {v:.3}"),
            "",
        );
    }
    s
}

pub fn notes<T: Float>(
    cfg: &TransformerConfig,
    ctx: &RunCtx,
    learner: &Learner<T>,
    fin: &Eval,
) -> Result<(), ExperimentError> {
    let m = &learner.model.cfg;
    let mut md = String::new();
    md.push_str(&format!(
        "Trained on {}.\n\nModel: {} layers, d_model {}, {} heads of d_head {}, {}, normalization {:?}, positions {:?}, n_ctx {}, d_vocab {}, {:?}.\n\n",
        learner.data.what,
        m.n_layers,
        m.d_model,
        m.n_heads,
        m.d_head,
        if m.attn_only { "attention only".to_string() } else { format!("MLPs of {} ({:?})", m.d_mlp, m.act_fn) },
        m.normalization,
        m.positional_embedding_type,
        m.n_ctx,
        m.d_vocab,
        cfg.model.dtype,
    ));
    md.push_str("| layer input | logit-lens loss (nats) |\n|---|---|\n");
    for (l, v) in fin.lens.iter().enumerate() {
        let name = if l + 1 == fin.lens.len() {
            "final".to_string()
        } else {
            format!("block {l}")
        };
        md.push_str(&format!("| {name} | {v:.4} |\n"));
    }
    md.push_str(
        "\nThe detector figures are heads × probe steps: each column is the model at that step. \
         Every number is also in `metrics.jsonl` (event `probe`), under keys such as \
         `induction.l1.h0`, `comp_k.l0h2.l1h0` and `lens.2`.\n",
    );
    ctx.notes(&md)?;
    Ok(())
}
