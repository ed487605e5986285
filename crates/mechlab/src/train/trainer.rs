//! The generic training loop.
//!
//! It knows nothing of any model: a model implements [`Trainable`] (forward and
//! backward for one update, plus any data-stream state a resume needs), and the
//! experiment passes a probe closure that measures the mechanism at scheduled steps.
//! The loop runs the stages in order, logs the loss, learning rate and per-group
//! gradient norms, writes checkpoints on the run's schedule, stops on Ctrl-C with a
//! checkpoint, and stops on a NaN or Inf naming the step and the parameter group.
//!
//! Step numbering: "state `s`" is the model after `s` updates. Probes and
//! checkpoints at `s` see that state; the update that follows is update `s + 1` and
//! is computed by `train_step(s)`.

use super::config::{Stage, TrainConfig};
use super::optim::{trains, Hyper, Optimizer};
use super::schedule::lr_at;
use crate::run::checkpoint::{self, CheckpointError, CheckpointMeta};
use crate::run::progress::Phase;
use crate::run::{RunCtx, RunError};
use indicatif::{ProgressBar, ProgressStyle};
use mechlab_engine::{Float, Parameters};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use thiserror::Error;

/// Set by the binary's Ctrl-C handler; the loop checkpoints and stops when it sees it.
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// A model the trainer can train.
pub trait Trainable<T: Float>: Parameters<T> {
    /// Forward and backward for update `step + 1` (on the batch that update uses).
    /// Gradients are zero on entry; accumulate into the parameters' gradients and
    /// return the loss.
    fn train_step(&mut self, step: u64) -> T;

    /// Told at the start of every stage which groups it trains (empty: all), so a
    /// model may skip the gradients of frozen groups.
    fn set_trainable(&mut self, _groups: &[String]) {}

    /// A training-time intervention: `true` holds `group` fixed for update
    /// `step + 1` on top of the stage's groups (its values and optimiser state do
    /// not move, and the model is told through [`Trainable::set_trainable`], so
    /// it may skip the group's gradient). Asked once per group per update; the
    /// default freezes nothing and costs a call.
    fn frozen(&self, _step: u64, _group: &str) -> bool {
        false
    }

    /// Asked after the probe at every state: `true` ends training there (early
    /// stopping decided by the probe, e.g. on a dev loss), with a checkpoint when
    /// checkpoints are on. The model's [`Trainable::save_state`] must carry
    /// whatever the decision depends on, so a resumed run stops at the same step.
    fn stop_requested(&self) -> bool {
        false
    }

    /// Extra state a resume needs (a data stream's position, an epoch counter).
    fn save_state(&self) -> serde_json::Value {
        serde_json::Value::Null
    }

    /// Restores what [`Trainable::save_state`] returned.
    fn load_state(&mut self, _state: &serde_json::Value) -> Result<(), String> {
        Ok(())
    }
}

/// Why training stopped early.
#[derive(Debug, Error)]
pub enum TrainError {
    #[error(
        "step {step}: {what} became {value} in parameter group `{group}`; {}",
        last_good(checkpoint)
    )]
    NonFinite {
        step: u64,
        group: String,
        what: &'static str,
        value: f64,
        checkpoint: Option<PathBuf>,
    },
    #[error(
        "interrupted at step {step}; checkpoint {} written, continue with `mechlab resume {}`",
        checkpoint.display(),
        run_of(checkpoint).display()
    )]
    Interrupted { step: u64, checkpoint: PathBuf },
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("train config: {0}")]
    Config(String),
}

/// The run folder a checkpoint belongs to (`<run>/checkpoints/step_N.safetensors`).
fn run_of(checkpoint: &std::path::Path) -> &std::path::Path {
    checkpoint
        .parent()
        .and_then(|d| d.parent())
        .unwrap_or(std::path::Path::new("<run>"))
}

fn last_good(checkpoint: &Option<PathBuf>) -> String {
    match checkpoint {
        Some(p) => format!("the last good state is {}", p.display()),
        None => "no checkpoint was written before it".to_string(),
    }
}

/// What a finished fit reports.
#[derive(Clone, Debug)]
pub struct Fitted {
    /// The last state reached: the total, or where [`Trainable::stop_requested`] stopped.
    pub steps: u64,
    pub final_loss: f64,
}

/// A probe: measures the model at state `step` and logs what it finds into the run.
pub type Probe<'a, M> = dyn FnMut(&mut M, u64, &mut RunCtx) -> Result<(), RunError> + 'a;

/// Optimiser state read from a checkpoint, waiting for its stage to start:
/// (stage, update count, first moments, second moments).
type PendingOptimizer<T> = (Option<usize>, u64, Vec<Vec<T>>, Vec<Vec<T>>);

/// Trains `model` through the stages of `cfg`, resuming from the run's latest
/// checkpoint when the run is being resumed.
///
/// Each state `s` is visited by `Loop::at_state` (probe, checkpoint, stop),
/// then update `s + 1` is `Loop::enter_stage` (optimiser and freezes, when they
/// change), `Loop::update` (forward, backward, checks, optimiser step) and
/// `Loop::log`.
pub fn fit<T: Float, M: Trainable<T>>(
    model: &mut M,
    cfg: &TrainConfig,
    ctx: &mut RunCtx,
    probe: &mut Probe<'_, M>,
) -> Result<Fitted, TrainError> {
    let mut lp = Loop::new(model, cfg, ctx)?;
    // The metrics record's keys and buffer, built once (it borrows the keys).
    let norm_keys: Vec<String> = lp.groups.iter().map(|g| format!("grad_norm.{g}")).collect();
    let mut record: Vec<(&str, f64)> = Vec::with_capacity(norm_keys.len() + 3);
    lp.resume(model, ctx)?;
    lp.start_progress(ctx);
    loop {
        if lp.at_state(model, ctx, probe)? == Next::Stop {
            break;
        }
        let si = lp.enter_stage(model, cfg)?;
        let (loss, lr) = lp.update(model, cfg, ctx, si)?;
        lp.log(cfg, ctx, si, (loss, lr), &norm_keys, &mut record)?;
        lp.s += 1;
        lp.bar.inc(1);
        if let Some(p) = &ctx.progress {
            p.set_done(lp.s);
        }
    }
    lp.bar.finish_and_clear();
    // What follows training in every paper: final probes, verdicts.
    ctx.set_phase(Phase::Measuring);
    Ok(Fitted {
        steps: lp.s,
        final_loss: lp.last_loss,
    })
}

/// Whether the loop goes on to the next update.
#[derive(PartialEq)]
enum Next {
    Update,
    Stop,
}

/// The training loop's state between updates; every buffer a step uses is here,
/// allocated once.
struct Loop<T: Float> {
    stages: Vec<Stage>,
    /// Cumulative step at the end of each stage.
    ends: Vec<u64>,
    total: u64,
    hyper: Hyper,
    experiment: String,
    /// Parameter groups in visit order and their gradient norms.
    groups: Vec<String>,
    norms: Vec<f64>,
    /// The current state (updates done).
    s: u64,
    pending: Option<PendingOptimizer<T>>,
    saved_at: Option<u64>,
    last_loss: f64,
    opt: Option<(usize, Optimizer<T>)>,
    /// Groups frozen by a training-time intervention at the current update, and
    /// the groups the update then trains (rebuilt only when either changes).
    frozen: Vec<bool>,
    active: Vec<String>,
    none_active: bool,
    bar: ProgressBar,
}

impl<T: Float> Loop<T> {
    fn new<M: Trainable<T>>(
        model: &M,
        cfg: &TrainConfig,
        ctx: &RunCtx,
    ) -> Result<Self, TrainError> {
        let stages = cfg.resolved_stages().map_err(TrainError::Config)?;
        let ends: Vec<u64> = stages
            .iter()
            .scan(0u64, |acc, s| {
                *acc += s.steps;
                Some(*acc)
            })
            .collect();
        let mut groups: Vec<String> = Vec::new();
        model.visit(&mut |p| {
            if !groups.iter().any(|g| g == p.group()) {
                groups.push(p.group().to_string());
            }
        });
        Ok(Loop {
            total: ends.last().copied().unwrap_or(0),
            stages,
            ends,
            hyper: Hyper::from_config(cfg),
            experiment: ctx.experiment().to_string(),
            norms: vec![0.0; groups.len()],
            frozen: vec![false; groups.len()],
            groups,
            s: 0,
            pending: None,
            saved_at: None,
            last_loss: f64::NAN,
            opt: None,
            active: Vec::new(),
            none_active: false,
            bar: ProgressBar::hidden(),
        })
    }

    /// Parameters, model state and optimiser state of the checkpoint a resumed
    /// run continues from.
    fn resume<M: Trainable<T>>(&mut self, model: &mut M, ctx: &RunCtx) -> Result<(), TrainError> {
        let Some(path) = ctx.resume_from().map(|p| p.to_path_buf()) else {
            return Ok(());
        };
        let ck = checkpoint::load::<T>(&path)?;
        ck.apply_params(model)?;
        model
            .load_state(&ck.meta.model_state)
            .map_err(|reason| CheckpointError::Mismatch {
                path: path.display().to_string(),
                reason,
            })?;
        let (m, v) = ck.optimizer_state(model);
        self.pending = Some((ck.meta.stage, ck.meta.optimizer_updates, m, v));
        self.s = ck.meta.step;
        self.saved_at = Some(self.s);
        if let Some(bits) = ck.meta.last_loss_bits {
            self.last_loss = f64::from_bits(bits);
        }
        Ok(())
    }

    /// The terminal bar (hidden when quiet) and the embedder's progress.
    fn start_progress(&mut self, ctx: &RunCtx) {
        if !ctx.quiet() {
            let b = ProgressBar::new(self.total);
            b.set_style(
                ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg} ({eta})")
                    .expect("valid template")
                    .progress_chars("=> "),
            );
            b.set_prefix(self.experiment.clone());
            self.bar = b;
        }
        self.bar.set_position(self.s);
        if let Some(p) = &ctx.progress {
            // Position first: a watcher never sees the total with a resumed run at 0.
            p.set_done(self.s);
            p.set_total(self.total);
        }
        ctx.set_phase(Phase::Training);
    }

    /// Writes the checkpoint of state `s`.
    fn save<M: Trainable<T>>(&self, model: &M, ctx: &RunCtx) -> Result<PathBuf, CheckpointError> {
        let path = ctx.checkpoint_dir().join(checkpoint::file_name(self.s));
        let (stage, updates, state) = match &self.opt {
            Some((si, o)) => {
                let (t, m, v) = o.state();
                (Some(*si), t, Some((m, v)))
            }
            None => (None, 0, None),
        };
        let meta = CheckpointMeta {
            experiment: self.experiment.clone(),
            dtype: T::DTYPE.to_string(),
            step: self.s,
            stage,
            optimizer_updates: updates,
            model_state: model.save_state(),
            last_loss_bits: self.last_loss.is_finite().then(|| self.last_loss.to_bits()),
        };
        checkpoint::save(&path, model, state, &meta).map(|_| path)
    }

    /// State `s`: probes, checkpoints, the end, a stop request, Ctrl-C.
    fn at_state<M: Trainable<T>>(
        &mut self,
        model: &mut M,
        ctx: &mut RunCtx,
        probe: &mut Probe<'_, M>,
    ) -> Result<Next, TrainError> {
        let (s, total) = (self.s, self.total);
        if ctx.run_config().probe_at(s, total) {
            probe(model, s, ctx)?;
        }
        if self.saved_at != Some(s) && ctx.run_config().checkpoint_at(s, total) {
            self.save(model, ctx)?;
            self.saved_at = Some(s);
        }
        if s >= total {
            return Ok(Next::Stop);
        }
        if model.stop_requested() {
            if ctx.run_config().checkpoints && self.saved_at != Some(s) {
                self.save(model, ctx)?;
            }
            return Ok(Next::Stop);
        }
        if INTERRUPTED.load(Ordering::SeqCst) || ctx.stop_at == Some(s) {
            let path = self.save(model, ctx)?;
            self.bar.abandon();
            return Err(TrainError::Interrupted {
                step: s,
                checkpoint: path,
            });
        }
        Ok(Next::Update)
    }

    /// The stage update `s + 1` belongs to: a new optimiser when the stage
    /// changes (restored from a resumed checkpoint of the same stage), and the
    /// trained groups when a freeze or the stage changes. Returns the stage.
    fn enter_stage<M: Trainable<T>>(
        &mut self,
        model: &mut M,
        cfg: &TrainConfig,
    ) -> Result<usize, TrainError> {
        let s = self.s;
        let si = self.ends.iter().position(|&e| s < e).expect("s < total");
        let stage: &Stage = &self.stages[si];
        let opt_changed = self.opt.as_ref().map(|(i, _)| *i) != Some(si);
        if opt_changed {
            tracing::info!(stage = %stage.name, step = s, optimizer = ?stage.optimizer, lr = stage.lr, "stage started");
            let mut o = Optimizer::new(stage.optimizer, self.hyper, model)
                .with_lr_scale(&cfg.lr_scale, model)
                .and_then(|o| o.with_decay_on(&cfg.weight_decay_on, model))
                .map_err(TrainError::Config)?;
            if let Some((pst, t, m, v)) = self.pending.take() {
                if pst == Some(si) {
                    o.restore(t, m, v).map_err(TrainError::Config)?;
                }
            }
            self.opt = Some((si, o));
        }
        let mut changed = false;
        for (gi, g) in self.groups.iter().enumerate() {
            let f = model.frozen(s, g);
            changed |= f != self.frozen[gi];
            self.frozen[gi] = f;
        }
        if changed || opt_changed {
            if self.frozen.iter().any(|&f| f) {
                self.active = self
                    .groups
                    .iter()
                    .zip(&self.frozen)
                    .filter(|(g, &f)| !f && trains(&stage.groups, g))
                    .map(|(g, _)| g.clone())
                    .collect();
                self.none_active = self.active.is_empty();
            } else {
                self.active = stage.groups.clone();
                self.none_active = false;
            }
            if self.none_active {
                // Every group frozen: gradients are not needed, but "no group"
                // would read as "every group" — tell the model the first group.
                model.set_trainable(&self.groups[..1]);
            } else {
                model.set_trainable(&self.active);
            }
        }
        Ok(si)
    }

    /// Whether parameter group `group` is trained by this update.
    fn trained(&self, group: &str) -> bool {
        !self.none_active && trains(&self.active, group)
    }

    /// Update `s + 1` in stage `si`: loss and gradients, their check, the
    /// optimiser step, the parameters' check. Returns the loss and learning rate.
    fn update<M: Trainable<T>>(
        &mut self,
        model: &mut M,
        cfg: &TrainConfig,
        ctx: &RunCtx,
        si: usize,
    ) -> Result<(f64, f64), TrainError> {
        let s = self.s;
        model.zero_grad();
        let loss = model.train_step(s).as_f64();
        self.norms.iter_mut().for_each(|n| *n = 0.0);
        let (groups, norms) = (&self.groups, &mut self.norms);
        let (active, none_active) = (&self.active, self.none_active);
        model.visit(&mut |p| {
            if !none_active && trains(active, p.group()) {
                let gi = groups
                    .iter()
                    .position(|g| g == p.group())
                    .expect("known group");
                norms[gi] += p.grad_norm_sq();
            }
        });
        let bad_group = self
            .groups
            .iter()
            .zip(&self.norms)
            .find(|(_, n)| !n.is_finite())
            .map(|(g, n)| (g.clone(), *n));
        if !loss.is_finite() || bad_group.is_some() {
            // The parameters are still those of state s, which are finite: keep them.
            let ck = if self.saved_at == Some(s) {
                Some(ctx.checkpoint_dir().join(checkpoint::file_name(s)))
            } else {
                Some(self.save(model, ctx)?)
            };
            self.bar.abandon();
            return Err(match bad_group {
                Some((g, n)) => non_finite(s, &g, "the gradient norm", n, ck),
                None => non_finite(s, "(loss)", "the loss", loss, ck),
            });
        }
        let stage = &self.stages[si];
        let stage_start = if si == 0 { 0 } else { self.ends[si - 1] };
        let lr = lr_at(cfg, stage.lr, s - stage_start, stage.steps);
        let (_, o) = self.opt.as_mut().expect("optimizer set by enter_stage");
        if !self.none_active {
            o.step(model, lr, &self.active);
        }
        let mut bad_param: Option<(String, f64)> = None;
        model.visit(&mut |p| {
            if bad_param.is_none() && self.trained(p.group()) {
                if let Some(x) = p.value().iter().find(|x| !x.is_finite()) {
                    bad_param = Some((p.group().to_string(), x.as_f64()));
                }
            }
        });
        if let Some((g, x)) = bad_param {
            self.bar.abandon();
            // State s is gone (the update overwrote it): point at the last one saved.
            let ck = self
                .saved_at
                .map(|st| ctx.checkpoint_dir().join(checkpoint::file_name(st)));
            return Err(non_finite(s, &g, "a parameter", x, ck));
        }
        self.last_loss = loss;
        Ok((loss, lr))
    }

    /// The `train` metrics record of update `s + 1` (every `log_every` steps),
    /// written through `record` (`grad_norm.<group>` keys in `norm_keys`).
    fn log<'k>(
        &self,
        cfg: &TrainConfig,
        ctx: &mut RunCtx,
        si: usize,
        (loss, lr): (f64, f64),
        norm_keys: &'k [String],
        record: &mut Vec<(&'k str, f64)>,
    ) -> Result<(), TrainError> {
        let s = self.s;
        if cfg.log_every == 0 || !s.is_multiple_of(cfg.log_every) {
            return Ok(());
        }
        record.clear();
        record.push(("loss", loss));
        record.push(("lr", lr));
        record.push(("stage", si as f64));
        for (k, n) in norm_keys.iter().zip(&self.norms) {
            if self.trained(&k["grad_norm.".len()..]) {
                record.push((k.as_str(), n.sqrt()));
            }
        }
        ctx.metrics()
            .log("train", s, record)
            .map_err(|e| RunError::Io {
                path: "metrics.jsonl".into(),
                source: e,
            })?;
        self.bar.set_message(format!("loss {loss:.4}"));
        Ok(())
    }
}

fn non_finite(
    step: u64,
    group: &str,
    what: &'static str,
    value: f64,
    checkpoint: Option<PathBuf>,
) -> TrainError {
    TrainError::NonFinite {
        step,
        group: group.to_string(),
        what,
        value,
        checkpoint,
    }
}
