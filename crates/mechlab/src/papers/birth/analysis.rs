//! birth's analysis half: the run's transformer at a checkpoint with every
//! TransformerLens hook point (`mechlab inspect`, Python's `Run.model()`; the
//! vocabulary size comes from the checkpoint, so no text is read), and
//! `mechlab intervene`'s fixed question: does the prediction at a trigger's
//! second occurrence read layer 0's copy of the trigger at the output token
//! (the key the induction head matches, W_K² on W_O¹ W_V¹ w_E)? Layer 0's head
//! is zero-ablated (`blocks.0.attn.hook_z`) at the positions right after each
//! trigger occurrence; the control ablates it at as many other positions of the
//! same sequence (two after a trigger first, then the earliest free ones).

use super::data::Bigrams;
use super::probes::argmax;
use super::{model, probe_for, BirthConfig};
use crate::analysis::{
    first_axis, restore, Effect, InterveneError, Interventions, LoadError, Model, Request, RunDir,
};
use crate::rng::{stream, Stream};
use mechlab_engine::gpt::Gpt;
use mechlab_engine::hooks::{Ablation, Batch, Hook, HookedModel};
use mechlab_engine::Float;

pub fn load(cfg: &BirthConfig, run: &RunDir, step: Option<u64>) -> Result<Model, LoadError> {
    super::config::check(cfg).map_err(|r| run.unsupported(r))?;
    if cfg.model.dtype.analysis_f32(run)? {
        let (m, loaded) = gpt_at::<f32>(cfg, run, step)?;
        restore(m, &loaded)
    } else {
        let (m, loaded) = gpt_at::<f64>(cfg, run, step)?;
        restore(m, &loaded)
    }
}

type Loaded<T> = crate::run::checkpoint::Loaded<T>;

fn gpt_at<T: Float>(
    cfg: &BirthConfig,
    run: &RunDir,
    step: Option<u64>,
) -> Result<(Gpt<T>, Loaded<T>), LoadError> {
    let loaded = run.read::<T>(step)?;
    let v = first_axis(&loaded, "embed.W_E")?;
    let m = model::build::<T>(cfg, v, &mut stream(cfg.seed, Stream::Init))
        .map_err(|r| run.unsupported(r))?;
    Ok((m, loaded))
}

pub fn intervene(
    cfg: &BirthConfig,
    run: &RunDir,
    req: &Request,
) -> Result<Interventions, InterveneError> {
    req.fixed_suite(
        "birth",
        "layer 0 ablated at the output tokens, against as many other positions",
    )?;
    super::config::check(cfg).map_err(InterveneError::Invalid)?;
    if cfg.model.n_layers != 2 {
        return Ok(Interventions {
            notes: "A one-layer run has no previous-token copy to ablate.\n".into(),
            ..Interventions::default()
        });
    }
    if cfg.model.dtype.analysis_f32(run)? {
        intervene_typed::<f32>(cfg, run, req)
    } else {
        intervene_typed::<f64>(cfg, run, req)
    }
}

/// Positions right after each trigger occurrence of one sequence (`occ`), and
/// as many others for the control.
fn sites(occ: &[u32]) -> (Vec<usize>, Vec<usize>) {
    let t = occ.len();
    let outs: Vec<usize> = (0..t - 1).filter(|&p| occ[p] >= 1).map(|p| p + 1).collect();
    let free = |p: usize, c: &[usize]| !outs.contains(&p) && occ[p] == 0 && !c.contains(&p);
    let mut ctl = Vec::new();
    for &p in &outs {
        if p + 1 < t && free(p + 1, &ctl) {
            ctl.push(p + 1);
        }
    }
    for p in 0..t {
        if ctl.len() >= outs.len() {
            break;
        }
        if free(p, &ctl) {
            ctl.push(p);
        }
    }
    ctl.truncate(outs.len());
    ctl.sort_unstable();
    (outs, ctl)
}

fn intervene_typed<T: Float>(
    cfg: &BirthConfig,
    run: &RunDir,
    req: &Request,
) -> Result<Interventions, InterveneError> {
    let (mut m, loaded) = gpt_at::<T>(cfg, run, req.step)?;
    loaded.apply_params(&mut m).map_err(LoadError::from)?;
    let data = Bigrams::load(&cfg.data.file, cfg.data.k).map_err(InterveneError::Invalid)?;
    let probe = probe_for(cfg, &data, &m);
    let (n, t, v) = (cfg.probe.n_eval, cfg.data.seq_len, m.cfg.d_vocab);
    // accuracy at the second occurrence: clean, ablated at the outputs, control
    let mut hits = [0usize; 3];
    let mut total = 0;
    for s in 0..n {
        let (x, occ) = (
            &probe.inputs[s * t..(s + 1) * t],
            &probe.occ[s * t..(s + 1) * t],
        );
        let at: Vec<usize> = (0..t).filter(|&p| occ[p] == 2).collect();
        if at.is_empty() {
            continue;
        }
        total += at.len();
        let (outs, ctl) = sites(occ);
        let hook = |pos: Vec<usize>| Hook {
            name: "blocks.0.attn.hook_z".into(),
            ablation: Ablation::Zero,
            heads: None,
            positions: Some(pos),
        };
        let batch = Batch::new(x.to_vec(), 1, t);
        for (k, hooks) in [vec![], vec![hook(outs)], vec![hook(ctl)]]
            .into_iter()
            .enumerate()
        {
            let logits = m
                .run_with_hooks(&batch, &hooks)
                .map_err(|e| InterveneError::Invalid(e.to_string()))?;
            for &p in &at {
                let row = &logits.data[p * v..(p + 1) * v];
                hits[k] +=
                    usize::from(argmax(row.iter().copied()) == probe.targets[s * t + p] as usize);
            }
        }
    }
    let acc = |k: usize| hits[k] as f64 / total.max(1) as f64;
    Ok(Interventions {
        data: format!("{n} evaluation sequences of {t} tokens ({total} second occurrences)"),
        effects: vec![Effect::new(
            "previous-token-copy",
            "does the prediction at a trigger's second occurrence read layer 0's copy of the trigger at the output token?",
            "accuracy at the trigger's second occurrence",
        )
        .values(acc(0), acc(1), acc(2))
        .labels(
            "layer 0 zero-ablated (hook_z) at the token after each trigger occurrence",
            "layer 0 zero-ablated at as many other positions of the same sequence",
        )],
        notes: "The induction head matches the trigger at its query with W_K² applied to layer 0's copy W_O¹ W_V¹ w_E(trigger) at the output token; without that copy the output is found only by its frequency in the context.\n".into(),
        ..Interventions::default()
    })
}
