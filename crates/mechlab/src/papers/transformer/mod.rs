//! `transformer`: the general experiment, for a researcher's own question.
//!
//! Not a paper: the engine's general causal transformer ([`mechlab_engine::gpt`],
//! every TransformerLens config key it has) trained on a built-in synthetic
//! task ([`tasks`]), on token windows from a file ([`windows`]), or on arrays
//! or a generator handed over from Python ([`source`]), with a loss on every
//! token or only where a loss mask says. At every probe step it measures the
//! mechanisms the field tracks ([`probes`]: held-out loss and accuracy beside
//! the task's Bayes loss, TransformerLens's head detectors, the induction score,
//! composition scores, OV copying scores, the logit lens, the in-context
//! learning score) into `metrics.jsonl`, and its report draws them over training
//! (heads × steps). It claims nothing, so its summary holds measurements and no
//! verdicts. Runs, resume, sweeps, Slurm, the report, `intervene` and
//! `Run.model()` work on it as on every paper.
//!
//! ```
//! let cfg = mechlab::papers::transformer::config::TransformerConfig::default();
//! assert_eq!((cfg.model.n_layers, cfg.data.batch), (2, 32));
//! ```

pub mod analysis;
mod bayes;
pub mod config;
pub mod probes;
mod report;
pub mod source;
pub mod tasks;
pub mod windows;

use crate::config::presets::Preset;
use crate::experiment::{Dtype, ExperimentError, Paper};
use crate::rng::{stream, substream, Stream};
use crate::run::summary::Summary;
use crate::run::{RunCtx, RunError};
use crate::train::{fit, TrainError, Trainable};
use config::TransformerConfig;
use mechlab_engine::gpt::{Gpt, Workspace};
use mechlab_engine::{Float, Parameters};
use probes::{CustomPattern, Eval, Probe};
use rand::Rng;
use source::{Data, Handover, PatternFn};
use std::path::{Path, PathBuf};

/// The model with its feed of training batches: what the trainer trains.
pub struct Learner<T: Float> {
    pub model: Gpt<T>,
    ws: Workspace<T>,
    pub data: Data,
    shuffle: bool,
    /// The step's windows and mask `[B, T + 1]`, and the model's inputs,
    /// targets and target mask `[B, T]`, reused.
    tokens: Vec<u32>,
    mask: Vec<bool>,
    x: Vec<u32>,
    y: Vec<u32>,
    m: Vec<bool>,
    /// Why the feed failed (a generator that raised), reported instead of the NaN.
    error: Option<String>,
}

impl<T: Float> Parameters<T> for Learner<T> {
    mechlab_engine::parameters!(T; model);
}

impl<T: Float> Learner<T> {
    fn new(model: Gpt<T>, data: Data, batch: usize, shuffle: bool) -> Self {
        let t = data.t;
        Learner {
            ws: Workspace::new(&model, batch, t),
            model,
            data,
            shuffle,
            tokens: vec![0; batch * (t + 1)],
            mask: vec![false; batch * (t + 1)],
            x: vec![0; batch * t],
            y: vec![0; batch * t],
            m: vec![false; batch * t],
            error: None,
        }
    }
}

impl<T: Float> Trainable<T> for Learner<T> {
    fn train_step(&mut self, step: u64) -> T {
        if let Err(e) = self.data.fill(step, &mut self.tokens, &mut self.mask) {
            // the trainer stops on the NaN with a checkpoint of the state before
            self.error = Some(e);
            return T::of(f64::NAN);
        }
        let t = self.data.t;
        let b = self.x.len() / t;
        for s in 0..b {
            // shuffled targets: each sequence's targets (and their mask) are the next one's
            let src = if self.shuffle { (s + 1) % b } else { s };
            let (row, rsrc) = (&self.tokens[s * (t + 1)..], &self.tokens[src * (t + 1)..]);
            self.x[s * t..(s + 1) * t].copy_from_slice(&row[..t]);
            self.y[s * t..(s + 1) * t].copy_from_slice(&rsrc[1..t + 1]);
            self.m[s * t..(s + 1) * t]
                .copy_from_slice(&self.mask[src * (t + 1) + 1..(src + 1) * (t + 1)]);
        }
        T::of(
            self.model
                .train_step_pairs(&mut self.ws, &self.x, &self.y, Some(&self.m)),
        )
    }
    fn save_state(&self) -> serde_json::Value {
        self.data.save_state()
    }
    fn load_state(&mut self, state: &serde_json::Value) -> Result<(), String> {
        self.data.load_state(state)
    }
}

/// The registered experiment.
pub struct Transformer;

pub const PRESETS: &[Preset] = &[
    crate::preset!("transformer"),
    crate::preset!("transformer-assoc"),
];

impl Paper for Transformer {
    type Config = TransformerConfig;
    fn name(&self) -> &'static str {
        "transformer"
    }
    fn citation(&self) -> &'static str {
        "mechlab's general causal transformer (TransformerLens config names; detectors after TransformerLens's head_detector and Elhage et al. 2021, A Mathematical Framework for Transformer Circuits)"
    }
    fn presets(&self) -> &'static [Preset] {
        PRESETS
    }
    fn validate(&self, cfg: &TransformerConfig) -> Result<(), String> {
        config::check(cfg)
    }
    fn data_key(&self) -> Option<&'static str> {
        Some("data.file")
    }
    fn run(&self, cfg: &TransformerConfig, ctx: &mut RunCtx) -> Result<Summary, ExperimentError> {
        match cfg.model.dtype {
            Dtype::F32 => run_typed::<f32>(cfg, ctx),
            Dtype::F64 => run_typed::<f64>(cfg, ctx),
            Dtype::F64x2 => Err(ExperimentError::Data(
                "model.dtype = \"f64x2\" is not supported here".into(),
            )),
        }
    }
    crate::analysis_half!(analysis, measure);
}

fn bad(msg: String) -> ExperimentError {
    ExperimentError::Data(msg)
}

/// The repeated-random-token probe's sequences, `[n, 2·rep_len + 1]`, over `ids`.
fn repeated_probe(cfg: &TransformerConfig, t: usize, ids: &[u32]) -> (Vec<u32>, usize) {
    let rep_len = match cfg.probe.rep_len {
        0 => t / 2,
        r => r.min(t / 2),
    };
    let n = cfg.probe.n_eval.min(64);
    let mut r = substream(cfg.seed, Stream::Sample, 2);
    let mut out = vec![0; n * (2 * rep_len + 1)];
    if ids.is_empty() || rep_len == 0 {
        return (Vec::new(), rep_len);
    }
    for row in out.chunks_exact_mut(2 * rep_len + 1) {
        for i in 0..row.len() {
            row[i] = if i < rep_len {
                ids[r.random_range(0..ids.len())]
            } else {
                row[i - rep_len]
            };
        }
    }
    (out, rep_len)
}

/// The run's probe: held-out windows, the repeated-token sequences and the
/// custom patterns (`fns` computes those of `probe.pattern_fns` on a fresh run;
/// afterwards they are read from the run folder `dir`).
pub(crate) fn probe_for<T: Float>(
    cfg: &TransformerConfig,
    dir: &Path,
    data: &Data,
    model: &Gpt<T>,
    fns: Option<Box<dyn PatternFn>>,
) -> Result<Probe<T>, ExperimentError> {
    let t = data.t;
    let mut custom = Vec::new();
    if !cfg.probe.pattern_file.is_empty() {
        custom.push(CustomPattern {
            key: "custom".into(),
            pattern: analysis::read_pattern(&cfg.probe.pattern_file, t).map_err(bad)?,
        });
    }
    custom.extend(pattern_fns(cfg, dir, data, fns).map_err(bad)?);
    let (rep, rep_len) = repeated_probe(cfg, t, &data.ids());
    Ok(Probe::new(
        model,
        &data.heldout,
        &data.heldout_mask,
        t,
        rep,
        rep_len,
        custom,
        data.bayes,
        &cfg.probe,
    ))
}

/// The file that holds pattern `name` of `probe.pattern_fns`.
fn pattern_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(source::INPUTS).join(format!("pattern_{name}.npy"))
}

/// The patterns of `probe.pattern_fns`, one `[T, T]` per held-out window:
/// `fns` evaluates them on the held-out inputs and they are stored in the run
/// folder (so resume, `measure` and `intervene` read the same numbers without
/// Python); without `fns` they are read back.
fn pattern_fns(
    cfg: &TransformerConfig,
    dir: &Path,
    data: &Data,
    fns: Option<Box<dyn PatternFn>>,
) -> Result<Vec<CustomPattern>, String> {
    let names = &cfg.probe.pattern_fns;
    let (t, w) = (data.t, data.t + 1);
    let n = data.heldout.len() / w;
    if let (Some(mut f), false) = (fns, names.is_empty()) {
        let x: Vec<u32> = data
            .heldout
            .chunks_exact(w)
            .flat_map(|r| r[..t].iter().copied())
            .collect();
        let got = f.call(&x, n, t)?;
        for name in names {
            let Some((_, p)) = got.iter().find(|(k, _)| k == name) else {
                return Err(format!(
                    "probe.pattern_fns names {name:?}, which the patterns handed over lack"
                ));
            };
            if p.len() != n * t * t || p.iter().any(|v| !v.is_finite()) {
                return Err(format!(
                    "pattern {name:?}: {} values (finite: {}), expected [n, T, T] = [{n}, {t}, {t}] finite values",
                    p.len(),
                    p.iter().all(|v| v.is_finite())
                ));
            }
            let path = pattern_path(dir, name);
            let mut bytes = Vec::new();
            {
                use npyz::WriterBuilder;
                let mut wr = npyz::WriteOptions::<f64>::new()
                    .default_dtype()
                    .shape(&[n as u64, t as u64, t as u64])
                    .writer(&mut bytes)
                    .begin_nd()
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                wr.extend(p.iter().copied())
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                wr.finish()
                    .map_err(|e| format!("{}: {e}", path.display()))?;
            }
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| format!("{}: {e}", parent.display()))?;
            }
            crate::run::atomic::write(&path, &bytes)
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    names
        .iter()
        .map(|name| {
            let path = pattern_path(dir, name);
            if !path.exists() {
                return Err(format!(
                    "probe.pattern_fns names {name:?}, whose patterns are not in {}: pass patterns={{{name:?}: fn}} to mechlab.train",
                    path.display()
                ));
            }
            Ok(CustomPattern {
                key: format!("custom_{name}"),
                pattern: analysis::read_npy_f64(
                    &path.display().to_string(),
                    &[n, t, t],
                    &format!("probe.pattern_fns {name:?}: "),
                    "[n_eval, T, T]",
                )?,
            })
        })
        .collect()
}

/// The metrics record of one probe (`metrics.jsonl`, event `probe`).
pub(crate) fn eval_record(e: &Eval, bayes: Option<f64>) -> Vec<(String, f64)> {
    let mut rec = vec![
        ("loss".to_string(), e.loss),
        ("accuracy".to_string(), e.accuracy),
    ];
    if let Some(b) = bayes {
        rec.push(("bayes_gap".into(), e.loss - b));
    }
    if let Some(v) = e.icl {
        rec.push(("icl".into(), v));
    }
    let names = &e.detector_names;
    for (d, dl) in e.detectors.iter().enumerate() {
        for (l, hs) in dl.iter().enumerate() {
            for (h, v) in hs.iter().enumerate() {
                rec.push((format!("{}.l{l}.h{h}", names[d]), *v));
            }
        }
    }
    for (l, hs) in e.rep_induction.iter().enumerate() {
        for (h, v) in hs.iter().enumerate() {
            rec.push((format!("rep_induction.l{l}.h{h}"), *v));
            rec.push((format!("copying.l{l}.h{h}"), e.copying[l][h]));
            rec.push((format!("dla.l{l}.h{h}"), e.dla[l][h]));
        }
    }
    for (mode, name) in ["q", "k", "v"].iter().enumerate() {
        for (li, grid) in e.composition[mode].iter().enumerate() {
            for (h1, row) in grid.iter().enumerate() {
                for (h2, v) in row.iter().enumerate() {
                    rec.push((format!("comp_{name}.l{li}h{h1}.l{}h{h2}", li + 1), *v));
                }
            }
        }
    }
    for (l, v) in e.lens.iter().enumerate() {
        rec.push((format!("lens.{l}"), *v));
    }
    rec
}

fn run_typed<T: Float>(
    cfg: &TransformerConfig,
    ctx: &mut RunCtx,
) -> Result<Summary, ExperimentError> {
    let given = ctx
        .take_input()
        .and_then(|b| b.downcast::<Handover>().ok())
        .map(|b| *b)
        .unwrap_or_default();
    let data = Data::new(cfg, ctx.dir(), given.generator).map_err(bad)?;
    let gcfg = cfg.model.gpt(data.t, data.d_vocab);
    if gcfg.n_ctx < data.t {
        return Err(bad(format!(
            "model.n_ctx = {}: the windows have {} tokens, so the model reads {} positions (set model.n_ctx ≥ {} or 0)",
            gcfg.n_ctx,
            data.t + 1,
            data.t,
            data.t
        )));
    }
    let mut model = if cfg.model.init_from.is_empty() {
        Gpt::<T>::new(&gcfg, &mut stream(cfg.seed, Stream::Init))
            .map_err(|e| bad(format!("model.{e}")))?
    } else {
        imported::<T>(cfg, &gcfg).map_err(bad)?
    };
    if !cfg.model.unembed_bias {
        // no gradient, so every optimiser leaves it at its zero
        model.set_frozen("unembed.b_U", true).map_err(bad)?;
        model
            .param_mut("unembed.b_U")
            .expect("every Gpt has b_U")
            .value_mut()
            .iter_mut()
            .for_each(|x| *x = T::zero());
    }
    let mut probe = probe_for(cfg, ctx.dir(), &data, &model, given.patterns)?;
    let mut learner = Learner::new(model, data, cfg.data.batch, cfg.data.shuffle_targets);
    let bayes = learner.data.bayes;
    let mut probe_fn = |l: &mut Learner<T>, step: u64, ctx: &mut RunCtx| -> Result<(), RunError> {
        let e = probe.evaluate(&l.model);
        let rec = eval_record(&e, bayes);
        let refs: Vec<(&str, f64)> = rec.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        ctx.log("probe", step, &refs)
    };
    let fitted = match fit(&mut learner, &cfg.train, ctx, &mut probe_fn) {
        Ok(f) => f,
        Err(e @ TrainError::NonFinite { .. }) => {
            return Err(match learner.error.take() {
                Some(msg) => bad(msg),
                None => e.into(),
            })
        }
        Err(e) => return Err(e.into()),
    };
    let fin = probe.evaluate(&learner.model);
    report::figures(cfg, ctx, &mut learner, &probe, &fin)?;
    let s = report::summary(cfg, &learner, &fin, fitted.final_loss);
    report::notes(cfg, ctx, &learner, &fin)?;
    Ok(s)
}

/// The model of `model.init_from` (a TransformerLens export), which must be
/// the model the config describes (`want`), so that the run's `config.toml`
/// says what it trained.
fn imported<T: Float>(
    cfg: &TransformerConfig,
    want: &mechlab_engine::gpt::GptConfig,
) -> Result<Gpt<T>, String> {
    let from = &cfg.model.init_from;
    let (json, tensors) = crate::interop::read::<T>(std::path::Path::new(from))
        .map_err(|e| format!("model.init_from: {e}"))?;
    let m = crate::interop::from_export::<T>(&json, &tensors)
        .map_err(|e| format!("model.init_from = {from:?}: {e}"))?;
    let g = &m.cfg;
    let checks: [(&str, String, String); 9] = [
        (
            "n_layers",
            g.n_layers.to_string(),
            want.n_layers.to_string(),
        ),
        ("d_model", g.d_model.to_string(), want.d_model.to_string()),
        ("n_heads", g.n_heads.to_string(), want.n_heads.to_string()),
        ("d_head", g.d_head.to_string(), want.d_head.to_string()),
        ("d_mlp", g.d_mlp.to_string(), want.d_mlp.to_string()),
        (
            "act_fn",
            format!("{:?}", g.act_fn),
            format!("{:?}", want.act_fn),
        ),
        (
            "normalization",
            format!("{:?}", g.normalization),
            format!("{:?}", want.normalization),
        ),
        ("n_ctx", g.n_ctx.to_string(), want.n_ctx.to_string()),
        ("d_vocab", g.d_vocab.to_string(), want.d_vocab.to_string()),
    ];
    for (key, theirs, ours) in checks {
        if theirs != ours {
            return Err(format!(
                "model.init_from = {from:?} holds a model with {key} = {theirs}, the config says {ours}: set model.{key} to match"
            ));
        }
    }
    if want.tied_embeddings != g.tied_embeddings {
        return Err(format!(
            "model.init_from = {from:?} holds a model with tied_embeddings = {}, the config says {}: set model.tied_embeddings to match",
            g.tied_embeddings, want.tied_embeddings
        ));
    }
    Ok(m)
}
