//! Attention-svm's analysis half: the run's head at a checkpoint as a hooked
//! model ([`super::hooked::HookedSvm`], its inputs the run's vectors by id), and
//! the causal question of token selection on the run's own sequences.
//!
//! The question: does the output rest on the token the head selects? In every
//! sequence the token of largest attention is replaced by the sequence's
//! lowest-score token (`γ = y vᵀ x`, the worst the head could read); the
//! control replaces another token (neither the selected nor the worst, picked by
//! a fixed hash) by the same worst token. The metric is the mean margin `y f`.

use super::data::{dot, generate};
use super::hooked::HookedSvm;
use super::model::{Output, SvmModel};
use super::AttentionSvmConfig;
use crate::analysis::{Effect, InterveneError, Interventions, LoadError, Model, Request, RunDir};
use crate::patching;
use mechlab_engine::hooks::{Batch, HookedModel};
use mechlab_engine::Float;
use std::sync::Arc;

pub fn load(cfg: &AttentionSvmConfig, run: &RunDir, step: Option<u64>) -> Result<Model, LoadError> {
    Ok(Box::new(hooked(cfg, run, step)?))
}

fn hooked(
    cfg: &AttentionSvmConfig,
    run: &RunDir,
    step: Option<u64>,
) -> Result<HookedSvm, LoadError> {
    if cfg.model.output != Output::Cls {
        return Err(run.unsupported(
            "model.output = \"sequence\": the hooked attention-svm model serves the ⟨cls⟩-query \
             form (model.output = \"cls\") only",
        ));
    }
    if cfg.model.dtype.analysis_f32(run)? {
        hooked_typed::<f32>(cfg, run, step)
    } else {
        hooked_typed::<f64>(cfg, run, step)
    }
}

fn hooked_typed<T: Float>(
    cfg: &AttentionSvmConfig,
    run: &RunDir,
    step: Option<u64>,
) -> Result<HookedSvm, LoadError> {
    let (data, v) = generate(&cfg.data, cfg.seed);
    let loaded = run.read::<T>(step)?;
    let mut m = SvmModel::<T>::new(&cfg.model, Arc::new(data.clone()), v.clone(), cfg.seed);
    loaded.apply_params(&mut m)?;
    let mut table = data.x.clone();
    table.extend_from_slice(&data.z);
    Ok(HookedSvm {
        w: m.w_eff(),
        v,
        table,
        n: data.n,
        t: data.t,
        d: data.d,
    })
}

pub fn intervene(
    cfg: &AttentionSvmConfig,
    run: &RunDir,
    req: &Request,
) -> Result<Interventions, InterveneError> {
    req.fixed_suite(
        "attention-svm",
        "the selected token replaced by the sequence's worst, against another token replaced",
    )?;
    let mut m = hooked(cfg, run, req.step)?;
    let (data, v) = generate(&cfg.data, cfg.seed);
    let (n, t) = (m.n, m.t);
    let batch = m.all_sequences();
    let pat = patching::activation(&mut m, &batch, "blocks.0.attn.hook_pattern")?;
    let margin = |m: &mut HookedSvm, b: &Batch| -> Result<f64, InterveneError> {
        let f = m.run_with_hooks(b, &[])?;
        Ok(f.data.iter().zip(&data.y).map(|(f, y)| f * y).sum::<f64>() / n as f64)
    };
    let clean = margin(&mut m, &batch)?;
    let (mut hit, mut ctl) = (batch.clone(), batch.clone());
    let mut flips = [0usize; 2];
    for i in 0..n {
        let row = &pat.data[i * (t + 1) + 1..(i + 1) * (t + 1)];
        let sel = (0..t)
            .max_by(|&a, &b| row[a].total_cmp(&row[b]))
            .unwrap_or(0);
        let gamma = |k: usize| data.y[i] * dot(&v, data.token(i, k));
        let worst = (0..t)
            .filter(|&k| k != sel)
            .min_by(|&a, &b| gamma(a).total_cmp(&gamma(b)))
            .unwrap_or(sel);
        let worst_id = (i * t + worst) as u32;
        hit.tokens[i * (t + 1) + 1 + sel] = worst_id;
        let others: Vec<usize> = (0..t).filter(|&k| k != sel && k != worst).collect();
        if let Some(&k) = patching::control_keys(others, 1, i).first() {
            ctl.tokens[i * (t + 1) + 1 + k] = worst_id;
        }
    }
    let (m_hit, m_ctl) = (margin(&mut m, &hit)?, margin(&mut m, &ctl)?);
    let clean_f = m.run_with_hooks(&batch, &[])?;
    for (k, b) in [&hit, &ctl].into_iter().enumerate() {
        let f = m.run_with_hooks(b, &[])?;
        flips[k] = f
            .data
            .iter()
            .zip(&clean_f.data)
            .filter(|(a, c)| (**a > 0.0) != (**c > 0.0))
            .count();
    }
    Ok(Interventions {
        data: format!("the run's {n} sequences of {t} tokens"),
        effects: vec![Effect::new(
            "replace-selected",
            "does the output rest on the token the head selects?",
            "mean margin y f",
        )
        .values(clean, m_hit, m_ctl)
        .labels(
            "selected token replaced by the sequence's worst",
            "another token replaced by the worst",
        )],
        notes: format!(
            "Predictions that change sign: {} of {n} with the selected token replaced, {} with \
             the control.\n",
            flips[0], flips[1]
        ),
        ..Interventions::default()
    })
}
