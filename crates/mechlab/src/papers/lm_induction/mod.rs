//! Induction heads in a small language model: "In-context Learning and Induction
//! Heads" (Olsson, Elhage, Nanda, Joseph, et al.; Transformer Circuits Thread,
//! 2022), on the engine's general causal transformer ([`mechlab_engine::gpt`]).
//!
//! The theory papers (the induction and markov-icl experiments) prove how a
//! two-layer transformer learns induction on synthetic in-context data; this
//! paper asks whether the same mechanism forms in an ordinary transformer
//! trained on ordinary text. A two-layer model (attention-only by default)
//! learns next-byte prediction on WikiText-2; at every probe step the run
//! measures each head's induction and previous-token scores, the held-out loss
//! and the in-context learning score; at the end it ablates the induction heads
//! (and as many other heads, the control) and measures what the in-context
//! learning score loses. The one-layer preset is the control Olsson et al. use:
//! a single layer cannot form an induction head (its keys hold no previous token).
//!
//! ```
//! let cfg = mechlab::papers::lm_induction::LmConfig::default();
//! assert_eq!((cfg.model.n_layers, cfg.data.seq_len), (2, 256));
//! ```

pub mod analysis;
pub mod config;
pub mod data;
mod measure;
pub mod ov;
pub mod probes;
mod report;
mod verdicts;
pub use verdicts::forms_none;

use crate::config::presets::Preset;
use crate::experiment::{Dtype, ExperimentError, Paper, ReproduceItem};
use crate::papers::gpt_task::{GptTask, Sampler};
use crate::rng::{stream, substream, Stream};
use crate::run::summary::Summary;
use crate::run::{RunCtx, RunError};
use crate::train::fit;
pub use config::LmConfig;
use data::Data;
use mechlab_engine::gpt::Gpt;
use mechlab_engine::Float;
use probes::Probe;
use rand_chacha::ChaCha8Rng;

/// The model with its stream of training windows: what the trainer trains.
pub type Task<T> = GptTask<T, Data>;

/// Every target of a window is scored.
impl Sampler for Data {
    fn draw(
        &mut self,
        tokens: &mut [u32],
        seq_len: usize,
        rng: &mut ChaCha8Rng,
    ) -> Option<&[bool]> {
        Data::draw(self, tokens, seq_len + 1, rng);
        None
    }
}

/// The registered experiment.
pub struct LmInduction;

/// The paper's presets.
pub const PRESETS: &[Preset] = &[
    crate::preset!("lm-induction-2l"),
    crate::preset!("lm-induction-1l"),
    crate::preset!("lm-induction-2l-short"),
    crate::preset!("lm-induction-1l-short"),
    crate::preset!("lm-induction-repeated"),
    crate::preset!("lm-induction-repeated-1l"),
];

impl Paper for LmInduction {
    type Config = LmConfig;
    fn name(&self) -> &'static str {
        "lm-induction"
    }
    fn citation(&self) -> &'static str {
        "Olsson, Elhage, Nanda, Joseph, et al. (2022). In-context Learning and Induction Heads. Transformer Circuits Thread, arXiv:2209.11895"
    }
    fn presets(&self) -> &'static [Preset] {
        PRESETS
    }
    fn validate(&self, cfg: &LmConfig) -> Result<(), String> {
        config::check(cfg)
    }
    fn data_key(&self) -> Option<&'static str> {
        Some("data.file")
    }
    fn run(&self, cfg: &LmConfig, ctx: &mut RunCtx) -> Result<Summary, ExperimentError> {
        match cfg.model.dtype {
            Dtype::F32 => run_typed::<f32>(cfg, ctx),
            Dtype::F64 => run_typed::<f64>(cfg, ctx),
            Dtype::F64x2 => Err(bad("model.dtype = \"f64x2\" is not supported here".into())),
        }
    }
    fn reproduce(&self) -> Vec<ReproduceItem> {
        vec![
            ReproduceItem::new("lm-induction-repeated", &[]),
            ReproduceItem::new("lm-induction-repeated-1l", &[]),
            ReproduceItem::new("lm-induction-2l-short", &[]),
            ReproduceItem::new("lm-induction-1l-short", &[]),
        ]
    }
    crate::analysis_half!(analysis);
}

fn bad(msg: String) -> ExperimentError {
    ExperimentError::Data(msg)
}

/// The fixed held-out windows `[n, T + 1]` (text) or repeated sequences (the
/// repeated source), from the seed's Sample stream.
/// The held-out windows `[n, T + 1]` and which of them are plain text.
fn heldout(cfg: &LmConfig, data: &Data) -> (Vec<u32>, Vec<bool>) {
    let (n, t) = (cfg.probe.n_eval, cfg.data.seq_len);
    match data {
        Data::Text {
            corpus,
            repeat_frac,
        } => data::heldout_set(
            &corpus.heldout,
            n,
            t,
            *repeat_frac,
            &mut substream(cfg.seed, Stream::Sample, 3),
        ),
        Data::Repeated { vocab } => {
            let mut out = vec![0; n * (t + 1)];
            let mut r = substream(cfg.seed, Stream::Sample, 1);
            for row in out.chunks_exact_mut(t + 1) {
                let n = data::period(t + 1, &mut r);
                data::repeated_row(row, n, *vocab, &mut r);
            }
            (out, vec![false; n])
        }
    }
}

/// The run's fixed evaluation sets (its Sample streams) and their workspaces.
pub(crate) fn probe_for<T: Float>(cfg: &LmConfig, data: &Data, model: &Gpt<T>) -> Probe<T> {
    let ids = data.probe_ids(cfg.probe.rep_tokens, cfg.data.batch, cfg.data.seq_len);
    let rep = data::repeated_set(
        cfg.probe.n_eval,
        cfg.probe.rep_len,
        &ids,
        &mut substream(cfg.seed, Stream::Sample, 2),
    );
    let (windows, plain) = heldout(cfg, data);
    Probe::new(model, &windows, plain, rep, cfg.data.seq_len, &cfg.probe)
}

/// Probe keys of an [`probes::Eval`].
fn eval_record(e: &probes::Eval) -> Vec<(String, f64)> {
    let mut rec = vec![
        ("loss".to_string(), e.loss),
        ("icl".to_string(), e.icl),
        ("rep_loss".to_string(), e.rep_loss),
    ];
    if let Some(v) = e.icl_text {
        rec.push(("icl_text".to_string(), v));
    }
    for (l, hs) in e.induction.iter().enumerate() {
        for (h, v) in hs.iter().enumerate() {
            rec.push((format!("induction.l{l}.h{h}"), *v));
            rec.push((format!("prev_token.l{l}.h{h}"), e.prev_token[l][h]));
            rec.push((format!("copying.l{l}.h{h}"), e.copying[l][h]));
        }
    }
    rec
}

fn run_typed<T: Float>(cfg: &LmConfig, ctx: &mut RunCtx) -> Result<Summary, ExperimentError> {
    let seed = cfg.seed;
    let data = Data::new(&cfg.data).map_err(bad)?;
    if let Some(json) = data.corpus().and_then(|c| c.bpe_json.as_deref()) {
        let value = serde_json::from_str(json).map_err(|e| bad(format!("tokenizer.json: {e}")))?;
        ctx.artifact("tokenizer.json", &value)?;
    }
    let (v, t) = (data.vocab(), cfg.data.seq_len);
    let model =
        Gpt::<T>::new(&cfg.model.gpt(t, v), &mut stream(seed, Stream::Init)).map_err(bad)?;
    let mut probe = probe_for(cfg, &data, &model);
    let init = probe.evaluate(&model);
    let mut task = Task::new(model, data, cfg.data.batch, t, stream(seed, Stream::Data));
    let mut probe_fn = |tk: &mut Task<T>, step: u64, ctx: &mut RunCtx| -> Result<(), RunError> {
        let e = probe.evaluate(&tk.model);
        let rec = eval_record(&e);
        let refs: Vec<(&str, f64)> = rec.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        ctx.log("probe", step, &refs)
    };
    let fitted = fit(&mut task, &cfg.train, ctx, &mut probe_fn)?;
    let fin = probe.evaluate(&task.model);
    let m = measure::measure(
        cfg,
        ctx,
        &mut task.model,
        &mut probe,
        init,
        fin,
        fitted.final_loss,
    )?;
    report::figures(cfg, ctx, &task, &probe, &m)?;
    let s = verdicts::summary(cfg, &m);
    report::notes(cfg, ctx, &task, &m)?;
    Ok(s)
}
