//! What an lm-induction run measured: the probe history read back from the run's
//! records, the phase-change window, the in-context learning score's largest
//! drop, and the ablations. [`super::verdicts`] judges these and
//! [`super::report`] draws them; neither measures anything itself.

use super::config::LmConfig;
use super::probes::{self, Eval, Probe};
use crate::experiment::ExperimentError;
use crate::run::metrics;
use crate::run::RunCtx;
use mechlab_engine::gpt::Gpt;
use mechlab_engine::Float;

/// A head counts as an induction head when its induction score is above 1/2:
/// then the key after the earlier occurrence gets more attention than every
/// other key together, so it is the head's top key on every query on average
/// (docs/lm-induction.md, "Thresholds").
pub const INDUCTION_THRESHOLD: f64 = 0.5;

pub struct Measured {
    pub init: Eval,
    pub fin: Eval,
    pub final_train_loss: f64,
    pub steps: Vec<f64>,
    pub loss: Vec<f64>,
    pub icl: Vec<f64>,
    /// `[layer][head]` series over the probe steps.
    pub induction: Vec<Vec<Vec<f64>>>,
    pub prev_token: Vec<Vec<Vec<f64>>>,
    pub copying: Vec<Vec<Vec<f64>>>,
    /// The largest |copying score| of any head at initialisation: what an
    /// untrained (random) OV circuit reads.
    pub copying_init: f64,
    /// Heads above [`INDUCTION_THRESHOLD`] at the end.
    pub heads: Vec<(usize, usize)>,
    /// First probe step at which some head passed the threshold.
    pub t_form: Option<u64>,
    /// The strongest final head's rise: first probe steps past 10 % and 90 % of
    /// its change from initialisation to the end.
    pub rise: Option<(u64, u64)>,
    /// The probe interval the window is widened by on each side.
    pub probe_gap: u64,
    /// `(from, to, drop)`: the consecutive probes with the largest fall of the ICL score.
    pub icl_drop: Option<(u64, u64, f64)>,
    /// ICL score with the induction heads ablated, and with as many other heads.
    pub icl_ablated: Option<f64>,
    pub icl_control: Option<f64>,
    pub control_heads: Vec<(usize, usize)>,
    /// Heads whose ablation alone halves the induction heads' score.
    pub partners: Vec<(usize, usize)>,
    pub uniform_induction: f64,
    pub uniform_prev: f64,
}

fn first(steps: &[f64], ys: &[f64], pred: impl Fn(f64) -> bool) -> Option<u64> {
    steps
        .iter()
        .zip(ys)
        .find(|(_, &y)| pred(y))
        .map(|(&s, _)| s as u64)
}

#[allow(clippy::too_many_arguments)]
pub fn measure<T: Float>(
    cfg: &LmConfig,
    ctx: &mut RunCtx,
    model: &mut Gpt<T>,
    probe: &mut Probe<T>,
    init: Eval,
    fin: Eval,
    final_train_loss: f64,
) -> Result<Measured, ExperimentError> {
    let recs = ctx.records()?;
    let (steps, loss) = metrics::series(&recs, "probe", "loss");
    let (_, icl) = metrics::series(&recs, "probe", "icl");
    let (nl, nh) = (cfg.model.n_layers, cfg.model.n_heads);
    let per_head = |key: &str| -> Vec<Vec<Vec<f64>>> {
        (0..nl)
            .map(|l| {
                (0..nh)
                    .map(|h| metrics::series(&recs, "probe", &format!("{key}.l{l}.h{h}")).1)
                    .collect()
            })
            .collect()
    };
    let (induction, prev_token) = (per_head("induction"), per_head("prev_token"));
    let copying = per_head("copying");
    let copying_init = init
        .copying
        .iter()
        .flatten()
        .fold(0.0, |a: f64, &b| a.max(b.abs()));
    let Circuit {
        heads,
        partners,
        control: control_heads,
    } = circuit(model, probe, &fin)?;
    let best_series: Vec<f64> = (0..steps.len())
        .map(|i| {
            induction
                .iter()
                .flatten()
                .map(|s| s[i])
                .fold(f64::NEG_INFINITY, f64::max)
        })
        .collect();
    let t_form = first(&steps, &best_series, |y| y > INDUCTION_THRESHOLD);
    let (bl, bh, _) = fin.best_induction();
    let rise = {
        let s = &induction[bl][bh];
        let (a, b) = (init.induction[bl][bh], fin.induction[bl][bh]);
        let at = |f: f64| first(&steps, s, |y| y >= a + f * (b - a));
        (b > a).then(|| at(0.1).zip(at(0.9))).flatten()
    };
    let icl_drop = (1..icl.len())
        .map(|i| (steps[i - 1] as u64, steps[i] as u64, icl[i - 1] - icl[i]))
        .max_by(|x, y| x.2.total_cmp(&y.2));
    let (icl_ablated, icl_control) = if heads.is_empty() || control_heads.is_empty() {
        (None, None)
    } else {
        (
            Some(
                probe
                    .icl_ablated(model, &heads)
                    .map_err(ExperimentError::Data)?,
            ),
            Some(
                probe
                    .icl_ablated(model, &control_heads)
                    .map_err(ExperimentError::Data)?,
            ),
        )
    };
    Ok(Measured {
        probe_gap: cfg.run.probe_every.max(1),
        uniform_induction: probes::uniform_induction(cfg.probe.rep_len),
        uniform_prev: probes::uniform_prev(cfg.data.seq_len),
        init,
        fin,
        final_train_loss,
        steps,
        loss,
        icl,
        induction,
        prev_token,
        copying,
        copying_init,
        heads,
        t_form,
        rise,
        icl_drop,
        icl_ablated,
        icl_control,
        control_heads,
        partners,
    })
}

/// The induction heads of a trained model, their partners and the control heads.
pub struct Circuit {
    /// Heads above [`INDUCTION_THRESHOLD`].
    pub heads: Vec<(usize, usize)>,
    /// Heads whose ablation alone halves the induction heads' mean score.
    pub partners: Vec<(usize, usize)>,
    /// As many heads outside the circuit (fewer when there are fewer).
    pub control: Vec<(usize, usize)>,
}

/// Finds the [`Circuit`] of the model `fin` was measured on.
pub fn circuit<T: Float>(
    model: &mut Gpt<T>,
    probe: &Probe<T>,
    fin: &Eval,
) -> Result<Circuit, ExperimentError> {
    let mut heads = Vec::new();
    let mut others: Vec<(f64, (usize, usize))> = Vec::new();
    for (l, hs) in fin.induction.iter().enumerate() {
        for (h, &s) in hs.iter().enumerate() {
            if s > INDUCTION_THRESHOLD {
                heads.push((l, h));
            } else {
                others.push((s, (l, h)));
            }
        }
    }
    // Heads the induction heads depend on (their previous-token partners, Olsson
    // et al.'s K-composition) are part of the circuit, not a control: a head is
    // one when zero-ablating it alone takes the induction heads' mean score to
    // less than half of what it is (the same majority rule as the threshold).
    let base = if heads.is_empty() {
        0.0
    } else {
        heads.iter().map(|&(l, h)| fin.induction[l][h]).sum::<f64>() / heads.len() as f64
    };
    let mut partners = Vec::new();
    if !heads.is_empty() {
        for &(_, lh) in &others {
            let without = probes::induction_without(model, &probe.rep, probe.rep_len, &heads, lh)
                .map_err(ExperimentError::Data)?;
            if without < base / 2.0 {
                partners.push(lh);
            }
        }
    }
    others.retain(|(_, lh)| !partners.contains(lh));
    // the control: as many heads outside the circuit (neither induction heads
    // nor their partners), those least like its first half first (lowest
    // previous-token score: layer 0's previous-token heads often share the work,
    // so that ablating one alone does not halve the induction score, yet
    // ablating several does); fewer when the model has fewer such heads
    others
        .sort_by(|a, b| fin.prev_token[a.1 .0][a.1 .1].total_cmp(&fin.prev_token[b.1 .0][b.1 .1]));
    let control: Vec<(usize, usize)> = others.iter().take(heads.len()).map(|x| x.1).collect();
    Ok(Circuit {
        heads,
        partners,
        control,
    })
}
