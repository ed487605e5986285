//! Icl-regression's analysis half: the run's LSA at a checkpoint as a hooked
//! model ([`super::hooked::HookedLsa`], its table the run's held-out prompts),
//! and the causal question of the mechanism on them.
//!
//! The question: does the prediction rest on the pairing of each context input
//! with its label, as a gradient step on the in-context loss must (`h = (1/m)
//! Σ y_i x_i`)? The intervention moves every context label one example on
//! (`y_i ← y_{i+1 mod m}`: the same labels, wrongly paired); the control moves
//! every whole example one place on (the same pairs in another order, which a
//! gradient step does not see). The metric is the mean squared error.

use super::data::Task;
use super::hooked::HookedLsa;
use super::measure::Eval;
use super::model::Lsa;
use super::IclRegressionConfig;
use crate::analysis::{Effect, InterveneError, Interventions, LoadError, Model, Request, RunDir};
use mechlab_engine::hooks::{Batch, HookedModel};

/// Held-out prompts the analysis uses (the first of the run's evaluation set).
const PROMPTS: usize = 1000;

pub fn load(
    cfg: &IclRegressionConfig,
    run: &RunDir,
    step: Option<u64>,
) -> Result<Model, LoadError> {
    Ok(Box::new(hooked(cfg, run, step)?.0))
}

fn hooked(
    cfg: &IclRegressionConfig,
    run: &RunDir,
    step: Option<u64>,
) -> Result<(HookedLsa, Vec<f64>), LoadError> {
    let task = Task::new(&cfg.data, cfg.seed);
    let count = cfg.data.eval_prompts.min(PROMPTS);
    let ev = Eval::new(&task, cfg.seed, count);
    let mut m = Lsa::new(&cfg.model, task, 1, cfg.seed);
    run.read::<f64>(step)?.apply_params(&mut m)?;
    let layers = m
        .blocks
        .iter()
        .map(|b| (b.p.value().to_vec(), b.q.value().to_vec()))
        .collect();
    Ok((
        HookedLsa {
            layers,
            softmax_heads: m.softmax_heads(),
            dd: m.dd,
            table: ev.prompts.z.clone(),
            per_prompt: cfg.data.n + 1,
        },
        ev.prompts.y,
    ))
}

pub fn intervene(
    cfg: &IclRegressionConfig,
    run: &RunDir,
    req: &Request,
) -> Result<Interventions, InterveneError> {
    req.fixed_suite(
        "icl-regression",
        "the context labels moved one example on, against the whole examples moved one place on",
    )?;
    let (mut m, y) = hooked(cfg, run, req.step)?;
    let (count, n, dd) = (y.len(), cfg.data.n, m.dd);
    let rows = n + 1;
    let clean: Vec<u32> = (0..count).flat_map(|p| m.prompt(p)).collect();
    let mut relabel = clean.clone();
    let mut reorder = clean.clone();
    for p in 0..count {
        let ids = m.prompt(p);
        for i in 0..n {
            let mut tok = m.token(ids[i]).to_vec();
            tok[dd - 1] = m.token(ids[(i + 1) % n])[dd - 1];
            relabel[p * rows + i] = m.push_token(&tok);
            reorder[p * rows + i] = ids[(i + 1) % n];
        }
    }
    let mse = |m: &mut HookedLsa, tokens: Vec<u32>| -> Result<f64, InterveneError> {
        let f = m.run_with_hooks(&Batch::new(tokens, count, rows), &[])?;
        Ok(f.data
            .iter()
            .zip(&y)
            .map(|(a, b)| (a - b).powi(2))
            .sum::<f64>()
            / count as f64)
    };
    let base = mse(&mut m, clean)?;
    let hit = mse(&mut m, relabel)?;
    let ctl = mse(&mut m, reorder)?;
    let zero = y.iter().map(|v| v * v).sum::<f64>() / count as f64;
    Ok(Interventions {
        data: format!("the run's first {count} held-out prompts of {n} examples"),
        effects: vec![Effect::new(
            "relabel-context",
            "does the prediction rest on each context input's pairing with its label?",
            "mean squared error",
        )
        .values(base, hit, ctl)
        .labels(
            "labels moved one example on",
            "whole examples moved one place on",
        )],
        notes: format!("Predicting 0 everywhere has error {zero:.4} on these prompts.\n"),
        ..Interventions::default()
    })
}
