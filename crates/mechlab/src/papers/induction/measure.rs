//! Induction's measurements after training: the selector's winning subset, the
//! modified χ² mutual information of each parent set, the validation losses
//! against the baselines, the generalisation over `L` and `α` on fresh data,
//! and the head scores on repeated random tokens.

use super::data::{self, Baseline, MarkovData};
use super::probes::{self as probe, GenPoint, InductionModel, Selector};
use super::{bad, spec_of, InductionConfig};
use crate::experiment::ExperimentError;
use crate::rng::{stream, Stream};
use mechlab_engine::hooks::HookedModel;
use mechlab_engine::Float;

pub(super) struct Measured {
    pub sel: Selector,
    pub mi_best: Vec<usize>,
    pub mi_all: Vec<(Vec<usize>, f64)>,
    /// The true parents, ascending.
    pub truth: Vec<usize>,
    pub val_code: f64,
    pub val_nll: f64,
    /// (code, −log ŷ_y) of each baseline on the validation set.
    pub uniform: (f64, f64),
    pub bayes: (f64, f64),
    pub gih: (f64, f64),
    pub oracle: (f64, f64),
    pub a_final: f64,
    pub gen: Vec<GenPoint>,
    pub prev_scores: Vec<f64>,
    pub ind_score: f64,
}

pub(super) fn measure<T: Float, M: InductionModel<T> + HookedModel>(
    cfg: &InductionConfig,
    seed: u64,
    model: &mut M,
    train: &MarkovData,
    val: &MarkovData,
) -> Result<Measured, ExperimentError> {
    let (h, floor) = (cfg.model.n_heads, cfg.model.nll_floor);
    let nd = 2 * h - 1;
    let sel = probe::selector::<T, M>(model);
    let window = nd;
    let (mi_window, mi_size) = probe::mi_search(window, cfg.model.degree);
    let (mi_best, mi_all) = probe::mi_argmax(train, mi_window, mi_size, cfg.probe.mi_power);
    let mut truth = cfg.data.parents.clone();
    truth.sort_unstable();
    let (val_code, val_nll) = probe::model_losses(model, val, floor);
    let base = |b: Baseline| data::baseline_losses(val, &b);
    let uniform = base(Baseline::Uniform);
    let bayes = base(Baseline::Bayes(truth.clone()));
    let gih = base(Baseline::Empirical(truth.clone()));
    let oracle = base(Baseline::Oracle);
    let a_final = model.a();
    let mut grng = stream(seed, Stream::Sample);
    let mut points: Vec<(usize, f64)> = cfg
        .probe
        .gen_lengths
        .iter()
        .map(|&l| (l, cfg.data.alpha))
        .collect();
    points.extend(cfg.probe.gen_alphas.iter().map(|&a| (cfg.data.seq_len, a)));
    let gspec = spec_of(cfg, cfg.probe.gen_n);
    let gen = probe::generalisation(model, &gspec, &points, &mut grng, floor).map_err(bad)?;

    let (prev_scores, ind_score) =
        probe::head_scores::<T, M>(model, cfg.data.vocab, 20, 200, &mut grng);
    Ok(Measured {
        sel,
        mi_best,
        mi_all,
        truth,
        val_code,
        val_nll,
        uniform,
        bayes,
        gih,
        oracle,
        a_final,
        gen,
        prev_scores,
        ind_score,
    })
}
