//! What a markov-icl run measured: the training history read back from the probe
//! records (eval loss, `kl.<strategy>`, `prev_token.h{h}.d{r}`, `induction`, phase
//! boundaries) and the final evaluation. [`super::verdicts`] judges them and
//! [`super::report`] draws them; neither computes a measurement of its own.

use super::config::MarkovConfig;
use super::phases::{self, PhaseTimes};
use super::probes::{self, Eval};
use crate::experiment::ExperimentError;
use crate::run::metrics;
use crate::run::RunCtx;
use serde_json::{Map, Value};

/// Eval loss over training of a run outside the trainer, with its baselines.
#[derive(Clone, Debug, Default)]
pub struct Curve {
    pub steps: Vec<f64>,
    pub loss: Vec<f64>,
    pub uniform: f64,
    pub bayes: f64,
}

impl Curve {
    /// First probe step whose loss is within a tenth of the uniform–Bayes span
    /// of Bayes: past any unigram plateau (whose loss is above that under the
    /// Dirichlet prior) and onto the n-gram solution.
    pub fn t_bayes(&self) -> Option<u64> {
        self.t_within(0.1)
    }

    /// First probe step whose loss is within `frac` of the uniform–Bayes span
    /// of Bayes (`t_bayes` is 0.1; 0.25 also counts runs that dropout keeps a
    /// little above the Bayes loss).
    pub fn t_within(&self, frac: f64) -> Option<u64> {
        let target = self.bayes + frac * (self.uniform - self.bayes);
        probes::first_step(&self.steps, |i| self.loss[i] <= target)
    }
}

/// What the run measured after training.
pub struct Finals {
    pub fitted_loss: f64,
    pub fin: Eval,
    /// Cross-entropy of each strategy of [`probes::strategies`] on the eval batch.
    pub base: Vec<f64>,
    pub control: Option<Curve>,
    /// Attention patterns of both layers on `pat_tokens` (`[H_l, T, T]`).
    pub pattern: [Vec<f64>; 2],
    pub pat_tokens: Vec<u8>,
    /// The unigram and bigram strategies' KL to the true chain at the last
    /// position of the authors' set (`None`: their metric was not measured).
    pub last_levels: Option<(f64, f64)>,
}

pub(super) fn fmt_step(s: Option<u64>) -> String {
    s.map_or("never".into(), |v| v.to_string())
}

/// The training history, read back from the probe records.
pub struct History {
    pub names: Vec<String>,
    pub recs: Vec<Map<String, Value>>,
    pub steps: Vec<f64>,
    pub loss: Vec<f64>,
    /// `kl.<strategy>` over the probe steps, one row per strategy.
    pub kls: Vec<Vec<f64>>,
    pub ind: Vec<f64>,
    /// Index of the in-context n-gram strategy (the last).
    pub ngram: usize,
    pub uniform: f64,
    pub bayes: f64,
    pub unigram: f64,
    /// First probe step at which each strategy is the nearest.
    pub t_first: Vec<Option<u64>>,
    /// The nearest strategy over training, each change once.
    pub phases: Vec<usize>,
    pub t_bayes: Option<u64>,
    pub t_quarter: Option<u64>,
    pub phase_all: PhaseTimes,
    pub phase_last: Option<PhaseTimes>,
    /// The largest layer-0 attention at each distance `1..n`, after training.
    pub best_prev: Vec<f64>,
}

impl History {
    /// The strategy nearest the model at probe `i`.
    pub fn argmin(&self, i: usize) -> usize {
        (0..self.kls.len())
            .min_by(|&a, &b| self.kls[a][i].total_cmp(&self.kls[b][i]))
            .unwrap_or(0)
    }
    pub fn phase_names(&self) -> Vec<&str> {
        self.phases
            .iter()
            .map(|&k| self.names[k].as_str())
            .collect()
    }
}

pub fn history(
    cfg: &MarkovConfig,
    ctx: &mut RunCtx,
    f: &Finals,
) -> Result<History, ExperimentError> {
    let order = cfg.data.order;
    let strats = probes::strategies(order);
    let names: Vec<String> = strats.iter().map(|s| probes::strategy_name(*s)).collect();
    let recs = ctx.records()?;
    let (steps, loss) = metrics::series(&recs, "probe", "loss");
    let kls: Vec<Vec<f64>> = names
        .iter()
        .map(|n| metrics::series(&recs, "probe", &format!("kl.{n}")).1)
        .collect();
    let (_, ind) = metrics::series(&recs, "probe", "induction");
    let argmin = |i: usize| {
        (0..strats.len())
            .min_by(|&a, &b| kls[a][i].total_cmp(&kls[b][i]))
            .unwrap_or(0)
    };
    let ngram = strats.len() - 1;
    let (uniform, bayes, unigram) = (f.base[0], f.base[ngram], f.base[1]);
    // phase boundaries: first probe step at which each strategy is the nearest
    let t_first: Vec<Option<u64>> = (0..strats.len())
        .map(|k| probes::first_step(&steps, |i| argmin(i) == k))
        .collect();
    let mut phases: Vec<usize> = Vec::new();
    for i in 0..steps.len() {
        let k = argmin(i);
        if phases.last() != Some(&k) {
            phases.push(k);
        }
    }
    let curve = Curve {
        steps: steps.clone(),
        loss: loss.clone(),
        uniform,
        bayes,
    };
    let (t_bayes, t_quarter) = (curve.t_bayes(), curve.t_within(0.25));

    // phase times on our metric (every position) and on the authors' (last position)
    let phase_all = phases::phase_times(&steps, &kls, &loss, (unigram, f.base[2.min(ngram)]));
    let phase_last = f.last_levels.map(|u| {
        let lk: Vec<Vec<f64>> = names
            .iter()
            .map(|n| metrics::series(&recs, "probe", &format!("last.kl.{n}")).1)
            .collect();
        let (ls, lt) = metrics::series(&recs, "probe", "last.kl_true");
        phases::phase_times(&ls, &lk, &lt, u)
    });
    let best_prev: Vec<f64> = (0..order - 1)
        .map(|r| f.fin.prev_token.iter().map(|ph| ph[r]).fold(0.0, f64::max))
        .collect();
    Ok(History {
        names,
        recs,
        steps,
        loss,
        kls,
        ind,
        ngram,
        uniform,
        bayes,
        unigram,
        t_first,
        phases,
        t_bayes,
        t_quarter,
        phase_all,
        phase_last,
        best_prev,
    })
}

/// Values rounded to three decimals, as the notes and verdicts print them.
pub(super) fn round3(v: &[f64]) -> Vec<f64> {
    v.iter().map(|x| (x * 1000.0).round() / 1000.0).collect()
}
