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
    #[error("interrupted at step {step}; checkpoint {} written, continue with `mechlab resume`", checkpoint.display())]
    Interrupted { step: u64, checkpoint: PathBuf },
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("train config: {0}")]
    Config(String),
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
pub fn fit<T: Float, M: Trainable<T>>(
    model: &mut M,
    cfg: &TrainConfig,
    ctx: &mut RunCtx,
    probe: &mut Probe<'_, M>,
) -> Result<Fitted, TrainError> {
    let stages = cfg.resolved_stages().map_err(TrainError::Config)?;
    let ends: Vec<u64> = stages
        .iter()
        .scan(0u64, |acc, s| {
            *acc += s.steps;
            Some(*acc)
        })
        .collect();
    let total = ends.last().copied().unwrap_or(0);
    let hyper = Hyper::from_config(cfg);
    let experiment = ctx.experiment().to_string();

    // Per-group gradient-norm bookkeeping, built once.
    let mut groups: Vec<String> = Vec::new();
    model.visit(&mut |p| {
        if !groups.iter().any(|g| g == p.group()) {
            groups.push(p.group().to_string());
        }
    });
    let norm_keys: Vec<String> = groups.iter().map(|g| format!("grad_norm.{g}")).collect();
    let mut norms = vec![0.0f64; groups.len()];
    let mut record: Vec<(&str, f64)> = Vec::with_capacity(groups.len() + 3);

    let mut s = 0u64;
    let mut pending: Option<PendingOptimizer<T>> = None;
    let mut saved_at: Option<u64> = None;
    let mut resumed_loss: Option<f64> = None;
    if let Some(path) = ctx.resume_from().map(|p| p.to_path_buf()) {
        let ck = checkpoint::load::<T>(&path)?;
        ck.apply_params(model)?;
        model
            .load_state(&ck.meta.model_state)
            .map_err(|reason| CheckpointError::Mismatch {
                path: path.display().to_string(),
                reason,
            })?;
        let (m, v) = ck.optimizer_state(model);
        pending = Some((ck.meta.stage, ck.meta.optimizer_updates, m, v));
        s = ck.meta.step;
        saved_at = Some(s);
        resumed_loss = ck.meta.last_loss_bits.map(f64::from_bits);
    }

    let bar = if ctx.quiet() {
        ProgressBar::hidden()
    } else {
        let b = ProgressBar::new(total);
        b.set_style(
            ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg} ({eta})")
                .expect("valid template")
                .progress_chars("=> "),
        );
        b.set_prefix(experiment.clone());
        b
    };
    bar.set_position(s);
    if let Some(p) = &ctx.progress {
        // Position first: a watcher never sees the total with a resumed run at 0.
        p.set_done(s);
        p.set_total(total);
    }
    ctx.set_phase(Phase::Training);

    let mut opt: Option<(usize, Optimizer<T>)> = None;
    // Groups frozen by a training-time intervention at the current update, and the
    // groups the update then trains (rebuilt only when either changes).
    let mut frozen = vec![false; groups.len()];
    let mut active: Vec<String> = Vec::new();
    let mut none_active = false;
    let mut last_loss = resumed_loss.unwrap_or(f64::NAN);
    loop {
        // --- state s: probes, checkpoints, stop requests ---
        if ctx.run_config().probe_at(s, total) {
            probe(model, s, ctx)?;
        }
        let save = |model: &M, opt: &Option<(usize, Optimizer<T>)>, ctx: &RunCtx| {
            let path = ctx.checkpoint_dir().join(checkpoint::file_name(s));
            let (stage, updates, state) = match opt {
                Some((si, o)) => {
                    let (t, m, v) = o.state();
                    (Some(*si), t, Some((m, v)))
                }
                None => (None, 0, None),
            };
            let meta = CheckpointMeta {
                experiment: experiment.clone(),
                dtype: T::DTYPE.to_string(),
                step: s,
                stage,
                optimizer_updates: updates,
                model_state: model.save_state(),
                last_loss_bits: last_loss.is_finite().then(|| last_loss.to_bits()),
            };
            checkpoint::save(&path, model, state, &meta).map(|_| path)
        };
        if saved_at != Some(s) && ctx.run_config().checkpoint_at(s, total) {
            save(model, &opt, ctx)?;
            saved_at = Some(s);
        }
        if s >= total {
            break;
        }
        if model.stop_requested() {
            if ctx.run_config().checkpoints && saved_at != Some(s) {
                save(model, &opt, ctx)?;
            }
            break;
        }
        if INTERRUPTED.load(Ordering::SeqCst) || ctx.stop_at == Some(s) {
            let path = save(model, &opt, ctx)?;
            bar.abandon();
            return Err(TrainError::Interrupted {
                step: s,
                checkpoint: path,
            });
        }

        // --- update s + 1 ---
        let si = ends.iter().position(|&e| s < e).expect("s < total");
        let stage: &Stage = &stages[si];
        let opt_changed = opt.as_ref().map(|(i, _)| *i) != Some(si);
        if opt_changed {
            tracing::info!(stage = %stage.name, step = s, optimizer = ?stage.optimizer, lr = stage.lr, "stage started");
            let mut o = Optimizer::new(stage.optimizer, hyper, model)
                .with_lr_scale(&cfg.lr_scale, model)
                .and_then(|o| o.with_decay_on(&cfg.weight_decay_on, model))
                .map_err(TrainError::Config)?;
            if let Some((pst, t, m, v)) = pending.take() {
                if pst == Some(si) {
                    o.restore(t, m, v).map_err(TrainError::Config)?;
                }
            }
            opt = Some((si, o));
        }
        let mut changed = false;
        for (gi, g) in groups.iter().enumerate() {
            let f = model.frozen(s, g);
            changed |= f != frozen[gi];
            frozen[gi] = f;
        }
        if changed || opt_changed {
            if frozen.iter().any(|&f| f) {
                active = groups
                    .iter()
                    .zip(&frozen)
                    .filter(|(g, &f)| !f && trains(&stage.groups, g))
                    .map(|(g, _)| g.clone())
                    .collect();
                none_active = active.is_empty();
            } else {
                active = stage.groups.clone();
                none_active = false;
            }
            if none_active {
                // Every group frozen: gradients are not needed, but "no group"
                // would read as "every group" — tell the model the first group.
                model.set_trainable(&groups[..1]);
            } else {
                model.set_trainable(&active);
            }
        }
        let stage_start = if si == 0 { 0 } else { ends[si - 1] };
        let stage_step = s - stage_start;

        model.zero_grad();
        let loss = model.train_step(s).as_f64();
        let bad_step = |group: &str, what: &'static str, value: f64, ck: Option<PathBuf>| {
            TrainError::NonFinite {
                step: s,
                group: group.to_string(),
                what,
                value,
                checkpoint: ck,
            }
        };
        norms.iter_mut().for_each(|n| *n = 0.0);
        model.visit(&mut |p| {
            if !none_active && trains(&active, p.group()) {
                let gi = groups
                    .iter()
                    .position(|g| g == p.group())
                    .expect("known group");
                norms[gi] += p.grad_norm_sq();
            }
        });
        let bad_group = groups
            .iter()
            .zip(&norms)
            .find(|(_, n)| !n.is_finite())
            .map(|(g, n)| (g.clone(), *n));
        if !loss.is_finite() || bad_group.is_some() {
            // The parameters are still those of state s, which are finite: keep them.
            let ck = if saved_at == Some(s) {
                Some(ctx.checkpoint_dir().join(checkpoint::file_name(s)))
            } else {
                Some(save(model, &opt, ctx)?)
            };
            bar.abandon();
            return Err(match bad_group {
                Some((g, n)) => bad_step(&g, "the gradient norm", n, ck),
                None => bad_step("(loss)", "the loss", loss, ck),
            });
        }
        let lr = lr_at(cfg, stage.lr, stage_step, stage.steps);
        let (_, o) = opt.as_mut().expect("optimizer set above");
        if !none_active {
            o.step(model, lr, &active);
        }
        let mut bad_param: Option<(String, f64)> = None;
        model.visit(&mut |p| {
            if bad_param.is_none() && !none_active && trains(&active, p.group()) {
                if let Some(x) = p.value().iter().find(|x| !x.is_finite()) {
                    bad_param = Some((p.group().to_string(), x.as_f64()));
                }
            }
        });
        if let Some((g, x)) = bad_param {
            bar.abandon();
            // State s is gone (the update overwrote it): point at the last one saved.
            let ck = saved_at.map(|st| ctx.checkpoint_dir().join(checkpoint::file_name(st)));
            return Err(bad_step(&g, "a parameter", x, ck));
        }

        last_loss = loss;
        if cfg.log_every > 0 && s.is_multiple_of(cfg.log_every) {
            record.clear();
            record.push(("loss", loss));
            record.push(("lr", lr));
            record.push(("stage", si as f64));
            for (k, n) in norm_keys.iter().zip(&norms) {
                if !none_active && trains(&active, &k["grad_norm.".len()..]) {
                    record.push((k.as_str(), n.sqrt()));
                }
            }
            ctx.metrics()
                .log("train", s, &record)
                .map_err(|e| RunError::Io {
                    path: "metrics.jsonl".into(),
                    source: e,
                })?;
            bar.set_message(format!("loss {loss:.4}"));
        }
        s += 1;
        bar.inc(1);
        if let Some(p) = &ctx.progress {
            p.set_done(s);
        }
    }
    bar.finish_and_clear();
    // What follows training in every paper: final probes, verdicts.
    ctx.set_phase(Phase::Measuring);
    Ok(Fitted {
        steps: s,
        final_loss: last_loss,
    })
}
