//! Causal-structure's analysis half: the run's CatFormer at a checkpoint as a
//! hooked model ([`super::hooked::HookedCat`]), and the causal questions of
//! its two layers on the run's held-out sequences.
//!
//! Each intervention moves attention off chosen keys at
//! `blocks.{l}.attn.hook_pattern` (the weight removed, the row renormalised,
//! [`crate::patching::drop_keys`]) and measures the loss of the last position
//! against the soft label:
//! - **parents** (layer 0): every position's weight on its own parent removed;
//!   the control removes one other earlier key per row.
//! - **induction keys** (layer 1): the query's weight on the keys whose
//!   parent's token is the query token removed; the control removes as many
//!   other keys.
//!
//! Rows without such a key are left alone in both.

use super::data::Seqs;
use super::hooked::{last_loss, HookedCat};
use super::measure::Eval;
use super::model::{CatFormer, Dims};
use super::CausalConfig;
use crate::analysis::{Effect, InterveneError, Interventions, LoadError, Model, Request, RunDir};
use crate::patching::{self, control_keys, drop_keys, hook};
use mechlab_engine::hooks::{Ablation, Batch, HookedModel, Tensor};

/// Held-out sequences the analysis uses (the first of the run's evaluation set).
const SEQS: usize = 1000;

pub fn load(cfg: &CausalConfig, run: &RunDir, step: Option<u64>) -> Result<Model, LoadError> {
    Ok(Box::new(hooked(cfg, run, step)?))
}

fn hooked(cfg: &CausalConfig, run: &RunDir, step: Option<u64>) -> Result<HookedCat, LoadError> {
    let task = super::data::Task::new(&cfg.data, cfg.seed);
    let mut m = CatFormer::new(&cfg.model, task, 1, cfg.seed);
    run.read::<f64>(step)?.apply_params(&mut m)?;
    let Dims { s, t, .. } = m.dims;
    Ok(HookedCat {
        s,
        t,
        heads: cfg.model.heads,
        a: [m.a1.value().to_vec(), m.a2.value().to_vec()],
        w: m.w.value().to_vec(),
    })
}

pub fn intervene(
    cfg: &CausalConfig,
    run: &RunDir,
    req: &Request,
) -> Result<Interventions, InterveneError> {
    req.fixed_suite(
        "causal-structure",
        "each position's parent removed from layer 0 and the induction keys from layer 1, each against as many other keys",
    )?;
    let mut m = hooked(cfg, run, req.step)?;
    let task = super::data::Task::new(&cfg.data, cfg.seed);
    let ev = Eval::new(&task, cfg.seed, cfg.data.eval_seqs.min(SEQS));
    let Seqs { n, x, y, par } = &ev.seqs;
    let (n, t) = (*n, task.seq_len);
    let batch = Batch::new(x.iter().map(|&v| v as u32).collect(), n, t);
    let clean = last_loss(&m.run_with_hooks(&batch, &[])?, y);
    let parent = |b: usize, i: usize| -> Vec<usize> {
        match par.get(b * (t - 1) + i) {
            Some(&p) if i < t - 1 && p >= 0 && (p as usize) < i => vec![p as usize],
            _ => Vec::new(),
        }
    };
    let induct = |b: usize, i: usize| -> Vec<usize> {
        if i != t - 1 {
            return Vec::new();
        }
        let xs = &x[b * t..(b + 1) * t];
        let ps = &par[b * (t - 1)..(b + 1) * (t - 1)];
        (0..t - 1)
            .filter(|&j| ps[j] >= 0 && (ps[j] as usize) < j && xs[ps[j] as usize] == xs[t - 1])
            .collect()
    };
    let mut effects = Vec::new();
    for (layer, id, question, keys) in [
        (0, "parent-keys", "does the prediction rest on layer 0 reading each position's parent?", &parent as &dyn Fn(usize, usize) -> Vec<usize>),
        (1, "induction-keys", "does the prediction rest on layer 1 reading the positions whose parent matches the query?", &induct),
    ] {
        let name = format!("blocks.{layer}.attn.hook_pattern");
        let own = patching::activation(&mut m, &batch, &name)?;
        let others = |b: usize, q: usize| -> Vec<usize> {
            let hit = keys(b, q);
            let rest: Vec<usize> = (0..=q).filter(|j| !hit.contains(j)).collect();
            control_keys(rest, hit.len(), b * t + q)
        };
        let mut run_with = |p: Tensor| -> Result<f64, InterveneError> {
            let out = m.run_with_hooks(&batch, &[hook(&name, Ablation::patch(p), None, None)])?;
            Ok(last_loss(&out, y))
        };
        let hit = run_with(drop_keys(&own, keys))?;
        let ctl = run_with(drop_keys(&own, others))?;
        effects.push(
            Effect::new(id, question, "held-out soft-label cross-entropy at the query")
                .values(clean, hit, ctl)
                .labels(
                    &format!("layer-{layer} attention on those keys removed"),
                    "as many other keys removed",
                ),
        );
    }
    Ok(Interventions {
        data: format!("the run's first {n} held-out sequences of {t} tokens"),
        effects,
        notes: format!(
            "Keys are removed in every head's rows and each row renormalised over the keys left. On these sequences the Bayes predictor's loss is {:.4} and the uniform prediction's {:.4}.\n",
            ev.bayes, ev.uniform
        ),
        ..Interventions::default()
    })
}
