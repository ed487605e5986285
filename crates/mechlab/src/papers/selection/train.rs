//! Selection's training stage: the `[[train.stages]]` with a probe that measures
//! cos(p, p_mm) against the attention-SVM (max-margin) solution of the selected
//! tokens (solved again only when the embeddings change), the attention mass on
//! them, the margin, ‖p‖ and the accuracies.

use super::data::SeqData;
use super::model::SelectionModel;
use super::probes::{self as pr, vals};
use super::{DataSets, SelectionConfig};
use crate::experiment::ExperimentError;
use crate::run::{RunCtx, RunError};
use crate::train::{fit, Fitted};
use mechlab_engine::Float;
use std::sync::Arc;

/// The selection the probes measure against: the best token of each sequence, or
/// (the control) its worst.
fn selection(data: &SeqData, ev: &[f64], swap: bool) -> Vec<u32> {
    if !swap {
        return pr::selected_tokens(data, ev);
    }
    let flipped = SeqData {
        y: data.y.iter().map(|y| -y).collect(),
        ..data.clone()
    };
    pr::selected_tokens(&flipped, ev)
}

/// The embeddings a max-margin solution was computed for, its constraint pairs and
/// the solution (`None` when not solved).
type MmCache = (Vec<f64>, Vec<(u32, u32)>, Option<Vec<f64>>);

/// What the last probe saw.
#[derive(Default)]
pub(super) struct Last {
    pub cos: f64,
    pub mass: f64,
    pub margin: f64,
    pub p_norm: f64,
    pub mm_norm: f64,
    pub solved: bool,
    /// Why the max-margin problem has no solution, when it has none.
    pub mm_error: String,
}

/// The trained model and what its last probe saw.
pub(super) struct Trained<T: Float> {
    pub model: SelectionModel<T>,
    pub fitted: Fitted,
    pub last: Last,
}

pub(super) fn train<T: Float>(
    cfg: &SelectionConfig,
    sets: &DataSets,
    seed: u64,
    ctx: &mut RunCtx,
) -> Result<Trained<T>, ExperimentError> {
    let (train, test, d) = (&sets.train, &sets.test, cfg.model.d_model);
    let mut model = SelectionModel::<T>::new(&cfg.model, train.clone(), seed);
    let eval = Arc::new(if cfg.probe.eval_max > 0 {
        train.head(cfg.probe.eval_max)
    } else {
        (**train).clone()
    });
    let mut cache: Option<MmCache> = None;
    let mut last = Last::default();
    let pc = cfg.probe.clone();
    let test_ref = test;
    let mut probe =
        |m: &mut SelectionModel<T>, step: u64, ctx: &mut RunCtx| -> Result<(), RunError> {
            let e = vals(m.w_e.value());
            let p = vals(m.p.value());
            let ev = pr::project(&e, d, &vals(m.v.value()));
            let ep = pr::project(&e, d, &p);
            let sel = selection(&eval, &ev, pc.swap_selected);
            if cache.as_ref().is_none_or(|(e0, _, _)| *e0 != e) {
                let pairs = pr::constraint_pairs(&eval, &sel);
                let mm = if !pc.max_margin {
                    None
                } else if pairs.len() > pc.max_pairs {
                    last.mm_error = format!("{} constraints > probe.max_pairs", pairs.len());
                    None
                } else {
                    pr::max_margin(&e, d, &pairs)
                        .map_err(|m| last.mm_error = m)
                        .ok()
                };
                cache = Some((e.clone(), pairs, mm));
            }
            let (_, pairs, mm) = cache.as_ref().expect("filled above");
            let (pattern, _) = m.attend(&eval);
            let p_norm = p.iter().map(|x| x * x).sum::<f64>().sqrt();
            last.mass = pr::attention_mass(&eval, &vals(&pattern), &sel);
            last.p_norm = p_norm;
            last.margin = if p_norm > 0.0 {
                pr::margin(&ep, pairs) / p_norm
            } else {
                0.0
            };
            let (train_loss, train_acc) = m.evaluate(&eval);
            let (_, test_acc) = m.evaluate(test_ref);
            let mut rec = vec![
                ("attn_mass", last.mass),
                ("p_norm", p_norm),
                ("margin", last.margin),
                ("train_loss", train_loss),
                ("train_acc", train_acc),
                ("test_acc", test_acc),
            ];
            if let Some(mm) = mm {
                last.cos = pr::cosine(&p, mm);
                last.mm_norm = mm.iter().map(|x| x * x).sum::<f64>().sqrt();
                last.solved = true;
                rec.push(("cos_mm", last.cos));
            } else {
                last.solved = false;
            }
            ctx.log("probe", step, &rec)
        };
    let fitted = fit(&mut model, &cfg.train, ctx, &mut probe)?;
    Ok(Trained {
        model,
        fitted,
        last,
    })
}
