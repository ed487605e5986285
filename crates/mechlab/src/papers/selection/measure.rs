//! Selection's measurements: the one-step check of claim 1 (on a fresh copy of
//! the model, before training), and after training the accuracies, the ⟨cls⟩
//! attention on the test set, the U-shape of the scores in the label posterior
//! and the most-selected words.

use super::model::SelectionModel;
use super::probes::{self as pr, one_step_check, vals, OneStep, UPoint};
use super::{DataSets, SelectionConfig};
use crate::experiment::ExperimentError;
use crate::train::config::Stage;
use crate::train::OptimizerKind;
use mechlab_engine::Float;

/// Claim 1's check, with the stages it read its step size from.
pub(super) fn one_step<T: Float>(
    cfg: &SelectionConfig,
    train: &std::sync::Arc<super::data::SeqData>,
    seed: u64,
) -> Result<(OneStep, Vec<Stage>), ExperimentError> {
    let data_err = ExperimentError::Data;
    let stages = cfg
        .train
        .resolved_stages()
        .map_err(|m| data_err(format!("train: {m}")))?;
    let eta = match stages.first() {
        Some(s) if s.steps == 1 && s.groups == ["embed"] && s.optimizer == OptimizerKind::Sgd => {
            s.lr
        }
        _ => cfg.probe.one_step_lr,
    };
    let one = one_step_check::<T>(&cfg.model, train.clone(), seed, eta);
    Ok((one, stages))
}

/// After training.
pub(super) struct Measured {
    pub train_loss: f64,
    pub train_acc: f64,
    pub test_loss: f64,
    pub test_acc: f64,
    /// ⟨cls⟩ attention on the test set, `[n, n_ctx]`.
    pub pattern: Vec<f64>,
    pub points: Vec<UPoint>,
    /// Mean score at the negative end, the middle and the positive end.
    pub left: f64,
    pub middle: f64,
    pub right: f64,
    /// Most-selected words (test set, argmax attention), negative then positive.
    pub top: [Vec<(u32, usize)>; 2],
}

pub(super) fn measure<T: Float>(
    cfg: &SelectionConfig,
    model: &mut SelectionModel<T>,
    sets: &DataSets,
) -> Measured {
    let (train, test, d) = (&sets.train, &sets.test, cfg.model.d_model);
    let (train_loss, train_acc) = model.evaluate(train);
    let (test_loss, test_acc) = model.evaluate(test);
    let e = vals(model.w_e.value());
    let ep = pr::project(&e, d, &vals(model.p.value()));
    let (pattern, _) = model.attend(test);
    let pattern = vals(&pattern);
    let points = pr::u_shape(train, &ep, cfg.probe.min_count);
    let (left, middle, right) = pr::u_ends(&points, cfg.probe.edge, cfg.probe.middle);
    let top = pr::most_selected(test, &pattern, cfg.probe.top_words);
    Measured {
        train_loss,
        train_acc,
        test_loss,
        test_acc,
        pattern,
        points,
        left,
        middle,
        right,
        top,
    }
}
