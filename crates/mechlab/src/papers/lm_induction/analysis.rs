//! lm-induction's analysis half: the run's transformer at a checkpoint, with
//! every TransformerLens hook point of [`mechlab_engine::gpt`] (what
//! `mechlab inspect` and Python's `Run.model()` return). The vocabulary size is
//! read from the checkpoint's `embed.W_E`, so loading needs no corpus.

use super::LmConfig;
use crate::analysis::{first_axis, restore, LoadError, Model, RunDir};
use crate::rng::{stream, Stream};
use mechlab_engine::gpt::Gpt;
use mechlab_engine::Float;

pub fn load(cfg: &LmConfig, run: &RunDir, step: Option<u64>) -> Result<Model, LoadError> {
    super::config::check(cfg).map_err(|r| run.unsupported(r))?;
    if cfg.model.dtype.analysis_f32(run)? {
        load_typed::<f32>(cfg, run, step)
    } else {
        load_typed::<f64>(cfg, run, step)
    }
}

fn load_typed<T: Float>(
    cfg: &LmConfig,
    run: &RunDir,
    step: Option<u64>,
) -> Result<Model, LoadError> {
    let loaded = run.read::<T>(step)?;
    let v = first_axis(&loaded, "embed.W_E")?;
    let gcfg = cfg.model.gpt(cfg.data.seq_len, v);
    let m = Gpt::<T>::new(&gcfg, &mut stream(cfg.seed, Stream::Init))
        .map_err(|r| run.unsupported(r))?;
    restore(m, &loaded)
}
