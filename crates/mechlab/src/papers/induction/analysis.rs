//! Induction's analysis half: the run's model at a checkpoint, and its
//! interventions on the run's own validation sequences.
//!
//! The causal question: does the prediction at the query go through the
//! layer-1 heads that copy the true parents? Each head's distance is read off
//! its attention at the query (the key it weights most), the heads on a true
//! parent are mean-ablated together, and the control mean-ablates as many heads
//! on other distances. Beside it, `--ablate` gives each head's ablation table
//! (zero, mean, resample) and `--patch` the (head × position) patching grid of
//! [`super::causal`].

use super::causal::{self, HEAD_OUT, N_CAUSAL};
use super::direct::Direct;
use super::full::Full;
use super::interventions::HeadInterventions;
use super::simplified::Simplified;
use super::task::{clamp_state_of, CLAMP_MISFIT};
use super::{data, spec_of, InductionConfig, ModelKind};
use crate::analysis::{
    restore, Effect, InterveneError, Interventions, LoadError, Model, Request, RunDir,
};
use crate::patching::{self, mean_nll};
use crate::run::checkpoint::CheckpointError;
use mechlab_engine::hooks::{Batch, HookError, HookedModel};
use mechlab_engine::Float;
use mechlab_report::Figure;
use serde_json::json;

/// The run's model at `step`: the table model it trained (simplified or full),
/// or the general path's model with the run's training-time interventions.
pub fn load(cfg: &InductionConfig, run: &RunDir, step: Option<u64>) -> Result<Model, LoadError> {
    let m = &cfg.model;
    let (s, h) = (cfg.data.vocab, m.n_heads);
    let f32 = m.dtype.analysis_f32(run)?;
    if m.degree == 0 || m.degree > h {
        return Err(run.unsupported(format!(
            "model.degree = {}: must be in 1..=n_heads",
            m.degree
        )));
    }
    if !super::config::uses_table(cfg) {
        // The run trained on the general path: the same parameters, no table.
        return if f32 {
            direct::<f32>(cfg, run, step)
        } else {
            direct::<f64>(cfg, run, step)
        };
    }
    match m.kind {
        ModelKind::Simplified => {
            Simplified::<f64>::check_size(s, h).map_err(|r| run.unsupported(r))?;
            let c = super::simplified_config(cfg);
            if f32 {
                restore(Simplified::<f32>::new(&c), &run.read::<f32>(step)?)
            } else {
                restore(Simplified::<f64>::new(&c), &run.read::<f64>(step)?)
            }
        }
        ModelKind::Full => {
            Full::<f64>::check_size(s, h).map_err(|r| run.unsupported(r))?;
            let c = super::full_config(cfg);
            if f32 {
                restore(Full::<f32>::new(&c), &run.read::<f32>(step)?)
            } else {
                restore(Full::<f64>::new(&c), &run.read::<f64>(step)?)
            }
        }
    }
}

/// A direct-path model as it stood at the checkpoint: its parameters, and the
/// training-time head ablations and clamps of the run's `[[interventions]]` in
/// force for its last update (with the clamp's copied logits from the
/// checkpoint), so what is measured is the model the run trained and judged.
fn direct<T: Float>(
    cfg: &InductionConfig,
    run: &RunDir,
    step: Option<u64>,
) -> Result<Model, LoadError> {
    let loaded = run.read::<T>(step)?;
    let mut m = Direct::<T>::new(&super::direct_config(cfg));
    loaded.apply_params(&mut m)?;
    let heads = HeadInterventions::new(&cfg.interventions, cfg.model.n_heads)
        .map_err(|r| run.unsupported(r))?;
    let step = loaded.meta.step;
    if !heads.is_empty() && step > 0 {
        let state = &loaded.meta.model_state;
        if !state.is_null() {
            let fits = clamp_state_of(state).is_some_and(|(mask, w)| m.load_clamp_state(mask, &w));
            if !fits {
                return Err(LoadError::Checkpoint(CheckpointError::Mismatch {
                    path: loaded.path.display().to_string(),
                    reason: CLAMP_MISFIT.into(),
                }));
            }
        }
        heads.apply(&mut m, step - 1);
    }
    Ok(Box::new(m))
}

/// Each layer-1 head's distance: the offset `d` whose key `L − d` it weights
/// most at the query (position `L`), averaged over the batch.
fn head_distances(m: &mut dyn HookedModel, batch: &Batch) -> Result<Vec<usize>, HookError> {
    let p = patching::activation(m, batch, "blocks.0.attn.hook_pattern")?;
    let (nb, h, q, k) = (p.shape[0], p.shape[1], p.shape[2], p.shape[3]);
    let query = q - 1;
    Ok((0..h)
        .map(|hd| {
            let w = |key: usize| -> f64 {
                (0..nb)
                    .map(|b| p.data[((b * h + hd) * q + query) * k + key])
                    .sum()
            };
            let best = (0..query)
                .max_by(|&a, &b| w(a).total_cmp(&w(b)))
                .unwrap_or(0);
            query - best
        })
        .collect())
}

/// The interventions on the run's validation sequences (see the module doc).
pub fn intervene(
    cfg: &InductionConfig,
    run: &RunDir,
    req: &Request,
) -> Result<Interventions, InterveneError> {
    for k in &req.ablate {
        if !["zero", "mean", "resample"].contains(&k.as_str()) {
            return Err(InterveneError::Invalid(format!(
                "--ablate {k}: allowed: zero, mean, resample"
            )));
        }
    }
    let mut model = load(cfg, run, req.step)?;
    let m = model.as_mut();
    let all = data::generate(&spec_of(cfg, cfg.data.n_train + cfg.data.n_val), cfg.seed)
        .map_err(InterveneError::Invalid)?;
    let val = all.slice(cfg.data.n_train, all.len());
    let (batch, targets) = causal::batch_of(&val, N_CAUSAL);
    let floor = cfg.model.nll_floor;
    let h = cfg.model.n_heads;
    let loss = |y: &mechlab_engine::hooks::Tensor| mean_nll(y, &targets, floor);
    let clean = loss(&m.run_with_hooks(&batch, &[])?);
    let uniform = data::baseline_losses(&val, &data::Baseline::Uniform).1;
    let mut out = Interventions {
        data: format!("{} validation sequences", batch.batch),
        ..Interventions::default()
    };
    out.extra.insert("hook".into(), json!(HEAD_OUT));
    out.extra.insert("val_nll".into(), json!(clean));
    out.extra.insert("uniform_nll".into(), json!(uniform));
    out.notes = format!("Clean −log ŷ_y {clean:.4}, uniform attention {uniform:.4}.\n\n");

    // The parent copiers against as many other heads, mean-ablated together.
    let dist = head_distances(m, &batch)?;
    out.extra.insert("head_distance".into(), json!(dist));
    let parents: Vec<usize> = (0..h)
        .filter(|&hd| cfg.data.parents.contains(&dist[hd]))
        .collect();
    let others: Vec<usize> = (0..h).filter(|hd| !parents.contains(hd)).collect();
    let n = parents.len().min(others.len());
    if n == 0 {
        out.notes.push_str(&format!(
            "No copier/control pair: the heads' distances are {dist:?} and the parents {:?}.\n\n",
            cfg.data.parents
        ));
    } else {
        let mut ablate = |heads: &[usize]| -> Result<f64, HookError> {
            let hk =
                patching::mean_hook(m, HEAD_OUT, &batch, batch.batch, Some(heads.to_vec()), None)?;
            Ok(loss(&m.run_with_hooks(&batch, &[hk])?))
        };
        let (hit, ctl) = (ablate(&parents[..n])?, ablate(&others[..n])?);
        out.effects.push(
            Effect::new(
                "ablate-parent-copiers",
                "does the query's prediction need the heads that copy its true parents?",
                "validation −log ŷ_y",
            )
            .values(clean, hit, ctl)
            .labels(
                &format!("mean-ablate heads {:?} (on parents)", &parents[..n]),
                &format!("mean-ablate heads {:?} (other distances)", &others[..n]),
            ),
        );
    }
    let kinds: Vec<String> = if req.ablate.is_empty() && !req.patch {
        vec!["zero".into(), "mean".into(), "resample".into()]
    } else {
        req.ablate.clone()
    };
    if !kinds.is_empty() {
        ablation_table(m, &batch, &targets, cfg, clean, &kinds, &mut out)?;
    }
    if req.patch {
        patch_grid(m, &batch, cfg, &mut out)?;
    }
    Ok(out)
}

fn ablation_table(
    m: &mut dyn HookedModel,
    batch: &Batch,
    targets: &[usize],
    cfg: &InductionConfig,
    clean: f64,
    kinds: &[String],
    out: &mut Interventions,
) -> Result<(), InterveneError> {
    let h = cfg.model.n_heads;
    let abl: Vec<_> = causal::head_ablations(m, batch, targets, h, cfg.model.nll_floor)?
        .into_iter()
        .filter(|(k, _)| kinds.iter().any(|x| x == k))
        .collect();
    let notes = &mut out.notes;
    notes.push_str("| ablation of `blocks.0.attn.hook_z` |");
    notes.push_str(&(0..h).map(|hd| format!(" head {hd} |")).collect::<String>());
    notes.push_str(&format!("\n|---|{}\n", "---|".repeat(h)));
    let mut vals = Vec::new();
    let mut map = serde_json::Map::new();
    for (k, v) in &abl {
        notes.push_str(&format!(
            "| {k} |{}\n",
            v.iter().map(|x| format!(" {x:.4} |")).collect::<String>()
        ));
        vals.extend(v.iter().map(|x| x - clean));
        map.insert(k.to_string(), json!(v));
    }
    out.extra
        .insert("ablation".into(), serde_json::Value::Object(map));
    out.figures.push(
        Figure::heatmap(
            "intervene_ablation",
            "Head ablation: rise of the validation loss",
            "layer-1 head",
            "ablation",
            abl.len(),
            h,
            vals,
            false,
        )
        .with_ticks(
            abl.iter().map(|(k, _)| k.to_string()).collect(),
            (0..h).map(|hd| format!("head {hd}")).collect(),
        )
        .caption("Validation −log ŷ_y with one head's output ablated at every position, minus the clean loss."),
    );
    Ok(())
}

fn patch_grid(
    m: &mut dyn HookedModel,
    batch: &Batch,
    cfg: &InductionConfig,
    out: &mut Interventions,
) -> Result<(), InterveneError> {
    let setup = causal::patch_setup(m, batch, cfg.data.vocab, &cfg.data.parents)?;
    if setup.a.is_empty() {
        return Err(InterveneError::Invalid(
            "--patch: corrupting the query's parents changes no prediction of this model".into(),
        ));
    }
    let g = causal::patch_grid(m, &setup)?;
    out.extra.insert(
        "patching".into(),
        json!({
            "sequences": setup.a.len(),
            "metric": "mean ŷ[clean argmax] − ŷ[corrupted argmax]",
            "clean": g.baselines.clean,
            "corrupted": g.baselines.corrupted,
            "rows": "head", "cols": "position",
            "effect": g.effect.chunks(g.cols).map(|r| r.to_vec()).collect::<Vec<_>>(),
        }),
    );
    let best = (0..g.effect.len())
        .max_by(|&a, &b| g.effect[a].total_cmp(&g.effect[b]))
        .unwrap_or(0);
    out.notes.push_str(&format!(
        "\nActivation patching of `blocks.0.attn.hook_z` from clean into parent-corrupted \
         sequences ({} sequences): the largest effect, {:.3}, is head {} at position {}.\n",
        setup.a.len(),
        g.effect[best],
        best / g.cols,
        best % g.cols
    ));
    out.figures.push(
        Figure::heatmap(
            "intervene_patching",
            "Activation patching: effect per head and position",
            "position",
            "layer-1 head",
            g.rows,
            g.cols,
            g.effect.clone(),
            true,
        )
        .caption("(patched − corrupted) / (clean − corrupted) of ŷ[a] − ŷ[b], patching one head's output at one position from the clean run."),
    );
    Ok(())
}
