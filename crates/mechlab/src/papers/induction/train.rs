//! Induction's training stage: the task (the model, the training tokens and the
//! run's training-time interventions), trained with a probe that logs the three
//! parts as they form: the selector's c² share of each kernel subset, the
//! classifier's scale `a`, the copier's attention per distance, and the
//! validation losses.

use super::data::MarkovData;
use super::probes::{self as probe, InductionModel};
use super::simplified::subset_name;
use super::{bad, interventions, InductionConfig, Task};
use crate::experiment::ExperimentError;
use crate::run::{RunCtx, RunError};
use crate::train::{fit, Fitted};
use mechlab_engine::hooks::HookedModel;
use mechlab_engine::Float;

/// The trained task, with what the report needs from training.
pub(super) struct Trained<M> {
    pub task: Task<M>,
    pub fitted: Fitted,
    /// The copier's attention per distance at initialisation, `[H, 2H − 1]`.
    pub init_pattern: Vec<f64>,
    /// Each kernel subset's name and its probe key (`share.<name>`).
    pub names: Vec<String>,
    pub keys: Vec<String>,
}

pub(super) fn train<T: Float, M: InductionModel<T> + HookedModel>(
    cfg: &InductionConfig,
    ctx: &mut RunCtx,
    model: M,
    train: &MarkovData,
    val: &MarkovData,
) -> Result<Trained<M>, ExperimentError> {
    let h = cfg.model.n_heads;
    let nd = 2 * h - 1;
    let mut task = Task {
        model,
        tokens: train.tokens.clone(),
        seq_len: cfg.data.seq_len,
        freezes: interventions::Freezes::new(&cfg.interventions, cfg.model.kind).map_err(bad)?,
        heads: interventions::HeadInterventions::new(&cfg.interventions, h).map_err(bad)?,
    };
    // Probes before the first update see the state of update 1.
    if !task.model.set_ablated(task.heads.ablated(0))
        || !task.model.set_clamped(task.heads.clamped(0))
    {
        return Err(bad(
            "a kind = \"ablate\" or \"clamp\" intervention needs the direct path (model.path = \"auto\" or \"direct\"; clamp: model.kind = \"simplified\")".into(),
        ));
    }
    let init_pattern = task.model.interior_pattern();
    let names: Vec<String> = task
        .model
        .subsets()
        .iter()
        .map(|m| subset_name(*m, h))
        .collect();
    let keys: Vec<String> = names.iter().map(|n| format!("share.{n}")).collect();
    let floor = cfg.model.nll_floor;
    let mut probe_fn = |t: &mut Task<M>, step: u64, ctx: &mut RunCtx| -> Result<(), RunError> {
        let shares = t.model.c_shares();
        let (vc, vt) = probe::model_losses(&mut t.model, val, floor);
        let pat = t.model.interior_pattern();
        let mut rec: Vec<(String, f64)> = vec![
            ("a".into(), t.model.a()),
            ("val_code_loss".into(), vc),
            ("val_nll".into(), vt),
        ];
        for (i, m) in t.model.subsets().iter().enumerate() {
            if m & 1 == 0 {
                rec.push((keys[i].clone(), shares[i]));
            }
        }
        for hd in 0..h {
            for r in 0..nd {
                rec.push((format!("pattern.h{hd}.d{}", r + 1), pat[hd * nd + r]));
            }
        }
        let refs: Vec<(&str, f64)> = rec.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        ctx.log("probe", step, &refs)
    };
    let fitted = fit(&mut task, &cfg.train, ctx, &mut probe_fn)?;
    // The final measurements see the model as training left it: an ablation
    // that lasts to the end holds, one whose window closed does not.
    task.model.set_ablated(task.heads.ablated(cfg.train.steps));
    task.model.set_clamped(task.heads.clamped(cfg.train.steps));
    Ok(Trained {
        task,
        fitted,
        init_pattern,
        names,
        keys,
    })
}
