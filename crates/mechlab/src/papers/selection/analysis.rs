//! Selection's analysis half: the run's model at a checkpoint, and the causal
//! question its mechanism raises, on the run's own test reviews.
//!
//! The model is built without the training data: the vocabulary size is the
//! first axis of the checkpoint's `embed.W_E` `[d_vocab, d_model]`, and the model
//! gets an empty dataset (its training buffers are then empty; the analysis
//! forward does not need them). The intervention ([`super::causal`]): remove
//! each test review's top-scoring token (its embedding zeroed at `hook_embed`)
//! and count the predictions that flip; the control removes a random other token
//! of the same review.

use super::data::{generate, SeqData};
use super::model::SelectionModel;
use super::reviews::{self, Source};
use super::{causal, SelectionConfig};
use crate::analysis::{
    first_axis, restore, Effect, InterveneError, Interventions, LoadError, Model, Request, RunDir,
};
use crate::rng::{stream, Stream};
use mechlab_engine::Float;
use std::sync::Arc;

/// Test reviews the intervention reads at most.
const N_TEST: usize = 2000;

pub fn load(cfg: &SelectionConfig, run: &RunDir, step: Option<u64>) -> Result<Model, LoadError> {
    if cfg.model.dtype.analysis_f32(run)? {
        load_typed::<f32>(cfg, run, step)
    } else {
        load_typed::<f64>(cfg, run, step)
    }
}

fn load_typed<T: Float>(
    cfg: &SelectionConfig,
    run: &RunDir,
    step: Option<u64>,
) -> Result<Model, LoadError> {
    let loaded = run.read::<T>(step)?;
    let d_vocab = first_axis(&loaded, "embed.W_E")?;
    let data = Arc::new(SeqData {
        n: 0,
        n_ctx: 1,
        d_vocab,
        ids: Vec::new(),
        lens: Vec::new(),
        y: Vec::new(),
        signal: Vec::new(),
    });
    restore(
        SelectionModel::<T>::new(&cfg.model, data, cfg.seed),
        &loaded,
    )
}

/// The run's test set, drawn from the data stream exactly as training drew it.
fn test_set(cfg: &SelectionConfig) -> Result<SeqData, InterveneError> {
    let mut rng = stream(cfg.seed, Stream::Data);
    match cfg.data.source {
        Source::Synthetic => {
            let s = &cfg.synthetic;
            generate(s, s.n_train, &mut rng).map_err(InterveneError::Invalid)?;
            generate(s, s.n_test.max(1), &mut rng).map_err(InterveneError::Invalid)
        }
        source => {
            let name = crate::config::name_of(&source);
            Ok(reviews::load(&name, &cfg.data, &mut rng)
                .map_err(InterveneError::Invalid)?
                .test)
        }
    }
}

pub fn intervene(
    cfg: &SelectionConfig,
    run: &RunDir,
    req: &Request,
) -> Result<Interventions, InterveneError> {
    req.fixed_suite(
        "selection",
        "remove each test review's top-scoring token, against a random other token",
    )?;
    let mut model = load(cfg, run, req.step)?;
    let test = test_set(cfg)?;
    let fl = causal::token_ablation(model.as_mut(), &test, N_TEST)?;
    let (n, top, rnd) = (fl.reviews, fl.top, fl.random);
    let share = |k: usize| k as f64 / n.max(1) as f64;
    Ok(Interventions {
        data: format!("{n} test reviews with at least two tokens"),
        effects: vec![Effect::new(
            "remove-top-token",
            "does the prediction rest on the token ⟨cls⟩ selects?",
            "share of predictions that flip",
        )
        .values(0.0, share(top), share(rnd))
        .labels(
            "zero the top-scoring token's embedding",
            "zero a random other token's embedding",
        )],
        notes: format!(
            "Removing the top-scoring token flips {top} of {n} predictions; removing a random \
             other token flips {rnd}.\n"
        ),
        ..Interventions::default()
    })
}
