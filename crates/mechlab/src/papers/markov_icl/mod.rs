//! Statistical induction heads: "The Evolution of Statistical Induction Heads:
//! In-Context Learning Markov Chains" (Edelman, Tsilivis, Edelman, Malach, Goel;
//! NeurIPS 2024, arXiv:2402.11004).
//!
//! Each training sequence comes from its own random Markov chain (ICL-MC), so
//! next-token prediction can only be done by estimating the chain in context.
//! A two-layer attention-only transformer with relative positions goes through
//! phases: it first predicts uniformly, then plateaus at the in-context
//! *unigram* strategy, then abruptly switches to the in-context *bigram*
//! (n-gram) strategy, the Bayes-optimal one, by forming a previous-token head in
//! layer 0 and a statistical induction head in layer 1. This experiment trains
//! the authors' model on fresh batches, tracks the KL divergence from each
//! strategy to the model, finds the phase boundaries, scores both heads, and,
//! with `probe.compare_prior`, trains the same model on the doubly stochastic
//! prior (where unigrams carry no information) to compare the plateaus.
//!
//! ```
//! let cfg = mechlab::papers::markov_icl::MarkovConfig::default();
//! assert_eq!((cfg.data.vocab, cfg.data.seq_len, cfg.model.d_model), (2, 100, 16));
//! ```

pub mod analysis;
pub mod config;
pub mod data;
pub mod hooks;
mod measure;
pub mod minimal;
pub mod model;
mod pairs;
pub mod phases;
pub mod probes;
mod report;
mod verdicts;

use crate::claims::Claim;
use crate::config::presets::Preset;
use crate::experiment::{Dtype, ExperimentError, Paper, ReproduceItem};
use crate::rng::{self, stream, substream, Stream};
use crate::run::summary::Summary;
use crate::run::{RunCtx, RunError};
use crate::train::optim::{Hyper, Optimizer};
use crate::train::schedule::lr_at;
use crate::train::{fit, Trainable};
use config::ModelKind;
pub use config::{DataConfig, MarkovConfig, ModelConfig, ProbeConfig};
use data::{Batch, ChainSpec, Prior};
use mechlab_engine::{F64x2, Float, Parameters};
use minimal::MinimalModel;
use model::{Dims, RpeTransformer};
use rand_chacha::ChaCha8Rng;
use rand_distr::Gamma;

/// What the trainer, the probes and the report need of a markov-icl model: the
/// authors' transformer and the paper's minimal model both provide it.
pub trait IclModel<T: Float>: Parameters<T> + Sized {
    /// The model a config asks for, initialised from the seed's Init stream.
    fn build(cfg: &MarkovConfig, seed: u64) -> Result<Self, String>;
    /// Mean next-token cross-entropy over `tokens` (`[B, T + 1]`), accumulating
    /// gradients with `grad`.
    fn loss(&mut self, tokens: &[u8], len: usize, grad: bool) -> T;
    /// Logits (`[T, S]`) of one input (`[T]`) and both layers' attention as
    /// distributions over the keys (`[H_l, T, T]`), which the head scores read.
    fn run_one(&mut self, input: &[u8]) -> (Vec<T>, [Vec<T>; 2]);
    /// The training step the next `loss` calls are for (dropout masks), or
    /// `None` for evaluation; models without dropout ignore it.
    fn set_train_step(&mut self, _step: Option<u64>) {}
    /// Logits at the last input position of every sequence of `tokens`
    /// (`[B, T + 1]`, inputs the first `T`): `[B, S]`, for the authors' metric.
    fn last_logits(&mut self, tokens: &[u8], len: usize) -> Vec<f64> {
        let s = self.vocab();
        let mut out = Vec::with_capacity(tokens.len() / len * s);
        for seq in tokens.chunks_exact(len) {
            let (logits, _) = self.run_one(&seq[..len - 1]);
            out.extend(logits[(len - 2) * s..].iter().map(|v| v.as_f64()));
        }
        out
    }
    /// Heads of layer 0.
    fn layer0_heads(&self) -> usize;
    fn vocab(&self) -> usize;
}

impl<T: Float> IclModel<T> for RpeTransformer<T> {
    fn build(cfg: &MarkovConfig, seed: u64) -> Result<Self, String> {
        Ok(
            RpeTransformer::new(&dims(cfg), &mut stream(seed, Stream::Init))?
                .with_dropout_seed(seed),
        )
    }
    fn set_train_step(&mut self, step: Option<u64>) {
        RpeTransformer::set_train_step(self, step)
    }
    fn last_logits(&mut self, tokens: &[u8], len: usize) -> Vec<f64> {
        RpeTransformer::last_logits(self, tokens, len)
    }
    fn loss(&mut self, tokens: &[u8], len: usize, grad: bool) -> T {
        RpeTransformer::loss(self, tokens, len, grad)
    }
    fn run_one(&mut self, input: &[u8]) -> (Vec<T>, [Vec<T>; 2]) {
        RpeTransformer::run_one(self, input)
    }
    fn layer0_heads(&self) -> usize {
        self.dims.n_heads
    }
    fn vocab(&self) -> usize {
        self.dims.vocab
    }
}

impl<T: Float> IclModel<T> for MinimalModel<T> {
    /// The authors' init is deterministic (`v = 0`, `W = 0.01`): no draw from the seed.
    fn build(cfg: &MarkovConfig, _seed: u64) -> Result<Self, String> {
        Ok(MinimalModel::new(
            cfg.data.vocab,
            cfg.data.seq_len,
            cfg.model.layer1,
        ))
    }
    fn loss(&mut self, tokens: &[u8], len: usize, grad: bool) -> T {
        MinimalModel::loss(self, tokens, len, grad)
    }
    /// Its patterns are weights, not distributions: each row is read as the
    /// share of its total absolute weight on each key.
    fn run_one(&mut self, input: &[u8]) -> (Vec<T>, [Vec<T>; 2]) {
        let (logits, mut pats) = MinimalModel::run_one(self, input);
        pats.iter_mut()
            .for_each(|p| minimal::row_shares(p, input.len()));
        (logits, pats)
    }
    fn layer0_heads(&self) -> usize {
        1
    }
    fn vocab(&self) -> usize {
        self.vocab
    }
}

/// The model with its stream of fresh batches: what the trainer trains.
pub struct Task<T: Float, M: IclModel<T> = RpeTransformer<T>> {
    pub model: M,
    _t: std::marker::PhantomData<T>,
    spec: ChainSpec,
    gamma: Gamma<f64>,
    batch: usize,
    shuffle: bool,
    rng: ChaCha8Rng,
}

impl<T: Float, M: IclModel<T>> Task<T, M> {
    /// A task drawing its batches from `rng`; `Err` names a bad data setting.
    pub fn new(model: M, cfg: &DataConfig, rng: ChaCha8Rng) -> Result<Self, String> {
        let spec = cfg.spec();
        spec.check()?;
        Ok(Task {
            gamma: data::gamma_of(&spec)?,
            model,
            _t: std::marker::PhantomData,
            spec,
            batch: cfg.batch,
            shuffle: cfg.shuffle,
            rng,
        })
    }
}

impl<T: Float, M: IclModel<T>> Parameters<T> for Task<T, M> {
    mechlab_engine::parameters!(T; model);
}

impl<T: Float, M: IclModel<T>> Trainable<T> for Task<T, M> {
    fn train_step(&mut self, step: u64) -> T {
        let mut b = data::draw(&self.spec, &self.gamma, self.batch, &mut self.rng);
        if self.shuffle {
            data::shuffle(&mut b, &mut self.rng);
        }
        self.model.set_train_step(Some(step));
        let loss = self.model.loss(&b.tokens, b.len, true);
        self.model.set_train_step(None);
        loss
    }
    fn save_state(&self) -> serde_json::Value {
        rng::save_json(&self.rng)
    }
    fn load_state(&mut self, state: &serde_json::Value) -> Result<(), String> {
        self.rng = rng::restore_json(state)?;
        Ok(())
    }
}

/// The registered experiment.
pub struct MarkovIcl;

/// The paper's presets.
pub const PRESETS: &[Preset] = &[
    crate::preset!("markov-icl"),
    crate::preset!("markov-icl-bigram"),
    crate::preset!("markov-icl-doubly-stochastic"),
    crate::preset!("markov-icl-trigram"),
    crate::preset!("markov-icl-minimal"),
    crate::preset!("markov-icl-s3"),
];

impl Paper for MarkovIcl {
    type Config = MarkovConfig;
    fn name(&self) -> &'static str {
        "markov-icl"
    }
    fn citation(&self) -> &'static str {
        "Edelman, Tsilivis, Edelman, Malach, Goel (2024). The Evolution of Statistical Induction Heads: In-Context Learning Markov Chains. NeurIPS 2024, arXiv:2402.11004"
    }
    fn presets(&self) -> &'static [Preset] {
        PRESETS
    }
    fn validate(&self, cfg: &MarkovConfig) -> Result<(), String> {
        config::check(cfg)
    }
    fn run(&self, cfg: &MarkovConfig, ctx: &mut RunCtx) -> Result<Summary, ExperimentError> {
        match (cfg.model.dtype, cfg.model.kind) {
            (Dtype::F32, ModelKind::Transformer) => run_typed::<f32, RpeTransformer<f32>>(cfg, ctx),
            (Dtype::F64, ModelKind::Transformer) => run_typed::<f64, RpeTransformer<f64>>(cfg, ctx),
            (Dtype::F32, ModelKind::Minimal) => run_typed::<f32, MinimalModel<f32>>(cfg, ctx),
            (Dtype::F64, ModelKind::Minimal) => run_typed::<f64, MinimalModel<f64>>(cfg, ctx),
            (Dtype::F64x2, ModelKind::Transformer) => {
                run_typed::<F64x2, RpeTransformer<F64x2>>(cfg, ctx)
            }
            (Dtype::F64x2, ModelKind::Minimal) => run_typed::<F64x2, MinimalModel<F64x2>>(cfg, ctx),
        }
    }
    fn reproduce(&self) -> Vec<ReproduceItem> {
        vec![
            // Bigrams at S = 2, without the doubly stochastic comparison: at S = 2
            // that prior shortens the plateau in about half the seeds, in our runs
            // and in the authors' algorithm alike (docs/markov-icl.md, "Findings"),
            // so the claim is judged where the authors make it, at S = 3 below.
            ReproduceItem::new("markov-icl-bigram", &["probe.compare_prior=false"]).with_seeds(3),
            ReproduceItem::new("markov-icl-doubly-stochastic", REPRODUCE_SHORT).with_seeds(3),
            // The paper's minimal model, at 10× the authors' 200 steps (at 200 it
            // is still on the unigram plateau: docs/markov-icl.md, "Minimal model").
            ReproduceItem::new("markov-icl-minimal", REPRODUCE_SHORT).with_seeds(3),
            // The doubly stochastic claim in the authors' setting at S = 3: about a
            // minute a seed, so one here; seeds 1–3 in docs/markov-icl.md.
            ReproduceItem::new("markov-icl-s3", &[]),
        ]
    }
    fn claims(&self, cfg: &MarkovConfig) -> &'static [Claim] {
        // Under the doubly stochastic prior at S = 2 some runs stay on the uniform
        // plateau for the whole run, with no previous-token head: 2 of seeds 1–3
        // of the authors' algorithm in this setting (bench/markov_icl/authors_port.py
        // --seq-len 50 --batch 32 --steps 1500 --dropout 0 --prior doubly_stochastic),
        // and as many at their own sizes (docs/markov-icl.md, "Findings").
        static DOUBLY_S2: &[Claim] = &[
            Claim::authors(verdicts::ids::LOSS, 1, 3, "docs/markov-icl.md"),
            Claim::authors(verdicts::ids::PREV, 1, 3, "docs/markov-icl.md"),
        ];
        if cfg.data.prior == Prior::DoublyStochastic && cfg.data.vocab == 2 {
            DOUBLY_S2
        } else {
            &[]
        }
    }
    crate::analysis_half!(analysis);
}

/// What `mechlab reproduce markov-icl` changes in the presets: nothing, they are
/// sized for it (T = 50, batch 32, 1 500 steps; see `docs/markov-icl.md`). The
/// trigram preset is left out: in this budget it stops at the bigram strategy.
pub const REPRODUCE_SHORT: &[&str] = &[];

fn bad(msg: String) -> ExperimentError {
    ExperimentError::Data(msg)
}

/// The model sizes a config asks for.
pub fn dims(cfg: &MarkovConfig) -> Dims {
    Dims {
        vocab: cfg.data.vocab,
        max_len: cfg.data.seq_len,
        d_model: cfg.model.d_model,
        n_heads: cfg.model.n_heads,
        init_std: cfg.model.init_std,
        proj_std: cfg.model.proj_std,
        dropout: cfg.model.dropout,
    }
}

/// The fixed evaluation batch of a data setting (its own Sample sub-stream).
pub fn eval_batch(cfg: &DataConfig, n: usize, seed: u64) -> Result<Batch, String> {
    let mut r = substream(seed, Stream::Sample, 1);
    let mut b = data::sample(&cfg.spec(), n, &mut r)?;
    if cfg.shuffle {
        data::shuffle(&mut b, &mut r);
    }
    Ok(b)
}

/// Probe keys of an [`probes::Eval`].
fn eval_record(e: &probes::Eval, order: usize) -> Vec<(String, f64)> {
    let mut rec = vec![("loss".to_string(), e.loss)];
    for (st, v) in probes::strategies(order).iter().zip(&e.kl) {
        rec.push((format!("kl.{}", probes::strategy_name(*st)), *v));
    }
    for (h, ph) in e.prev_token.iter().enumerate() {
        for (r, v) in ph.iter().enumerate() {
            rec.push((format!("prev_token.h{h}.d{}", r + 1), *v));
        }
    }
    for (h, pf) in e.profile.iter().enumerate() {
        rec.push((
            format!("peak_distance.h{h}"),
            probes::peak_distance(pf) as f64,
        ));
    }
    rec.push(("induction".into(), e.induction));
    rec
}

fn run_typed<T: Float, M: IclModel<T>>(
    cfg: &MarkovConfig,
    ctx: &mut RunCtx,
) -> Result<Summary, ExperimentError> {
    let seed = cfg.seed;
    let (order, alpha) = (cfg.data.order, cfg.data.alpha);
    let eval = eval_batch(&cfg.data, cfg.probe.n_eval, seed).map_err(bad)?;
    // The authors' metric's fixed set (its own Sample sub-stream), when asked for.
    let last = (cfg.probe.n_last > 0)
        .then(|| {
            let b = data::sample(
                &cfg.data.spec(),
                cfg.probe.n_last,
                &mut substream(seed, Stream::Sample, 2),
            )?;
            let targets = probes::last_targets(&b, cfg.data.vocab, alpha, order);
            Ok::<_, String>((b, targets))
        })
        .transpose()
        .map_err(bad)?;
    let model = M::build(cfg, seed).map_err(bad)?;
    let mut task = Task::new(model, &cfg.data, stream(seed, Stream::Data)).map_err(bad)?;
    let mut probe_fn = |t: &mut Task<T, M>, step: u64, ctx: &mut RunCtx| -> Result<(), RunError> {
        let e = probes::evaluate(&mut t.model, &eval, alpha, order);
        let mut rec = eval_record(&e, order);
        if let Some((b, targets)) = &last {
            let lt = probes::last_token(&mut t.model, b, targets);
            rec.push(("last.kl_true".into(), lt.kl_true));
            for (st, v) in probes::strategies(order).iter().zip(&lt.kl) {
                rec.push((format!("last.kl.{}", probes::strategy_name(*st)), *v));
            }
        }
        let refs: Vec<(&str, f64)> = rec.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        ctx.log("probe", step, &refs)
    };
    let fitted = fit(&mut task, &cfg.train, ctx, &mut probe_fn)?;
    let fin = probes::evaluate(&mut task.model, &eval, alpha, order);
    let base = probes::strategy_losses(&eval, cfg.data.vocab, alpha, order);

    // The comparison: the same model, init and schedule on the doubly stochastic prior.
    let control = if cfg.probe.compare_prior {
        let mut c = cfg.clone();
        c.data.prior = Prior::DoublyStochastic;
        Some(train_plain::<T, M>(&c, seed, ctx)?)
    } else {
        None
    };
    let (pattern, pat_tokens) = {
        let input = &eval.tokens[..cfg.data.seq_len.min(24)];
        let (_, pats) = task.model.run_one(input);
        (pats, input.to_vec())
    };
    report::finish(
        cfg,
        ctx,
        &measure::Finals {
            fitted_loss: fitted.final_loss,
            fin,
            base,
            control,
            pattern: [
                pattern[0].iter().map(|v| v.as_f64()).collect(),
                pattern[1].iter().map(|v| v.as_f64()).collect(),
            ],
            pat_tokens,
            // KL(true ‖ unigram / bigram strategy) at the last position of the authors' set
            last_levels: last.as_ref().map(|(_, (truth, per))| {
                let to_truth = |k: usize| {
                    let logq: Vec<f64> = per[k].iter().map(|p| p.ln()).collect();
                    probes::mean_kl(truth, &logq, cfg.data.vocab)
                };
                (to_truth(1), to_truth(2.min(per.len() - 1)))
            }),
        },
    )
}

/// A training run outside the trainer (for the prior comparison): the same
/// optimiser, schedule and probe steps; returns `(step, eval loss)` pairs and
/// the Bayes and uniform losses of its evaluation batch.
fn train_plain<T: Float, M: IclModel<T>>(
    cfg: &MarkovConfig,
    seed: u64,
    ctx: &mut RunCtx,
) -> Result<measure::Curve, ExperimentError> {
    let eval = eval_batch(&cfg.data, cfg.probe.n_eval, seed).map_err(bad)?;
    let model = M::build(cfg, seed).map_err(bad)?;
    let mut task = Task::new(model, &cfg.data, substream(seed, Stream::Data, 2)).map_err(bad)?;
    let mut opt = Optimizer::new(cfg.train.optimizer, Hyper::from_config(&cfg.train), &task)
        .with_lr_scale(&cfg.train.lr_scale, &task)
        .and_then(|o| o.with_decay_on(&cfg.train.weight_decay_on, &task))
        .map_err(bad)?;
    let total = cfg.train.total_steps();
    let mut curve = measure::Curve::default();
    let base = probes::strategy_losses(&eval, cfg.data.vocab, cfg.data.alpha, 2);
    (curve.uniform, curve.bayes) = (base[0], base[2]);
    for step in 0..=total {
        if ctx.run_config().probe_at(step, total) {
            let e = probes::evaluate(&mut task.model, &eval, cfg.data.alpha, 2);
            curve.steps.push(step as f64);
            curve.loss.push(e.loss);
            ctx.log(
                "compare",
                step,
                &[
                    ("loss", e.loss),
                    ("induction", e.induction),
                    ("prev_token", e.prev_token[0][0]),
                ],
            )?;
        }
        if step == total {
            break;
        }
        task.zero_grad();
        let loss = task.train_step(step);
        if !loss.as_f64().is_finite() {
            return Err(bad(format!(
                "the doubly stochastic comparison diverged at step {step}"
            )));
        }
        opt.step(&mut task, lr_at(&cfg.train, cfg.train.lr, step, total), &[]);
    }
    Ok(curve)
}
