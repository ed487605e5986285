//! lm-induction's analysis half: the run's transformer at a checkpoint, with
//! every TransformerLens hook point of [`mechlab_engine::gpt`] (what
//! `mechlab inspect` and Python's `Run.model()` return; the vocabulary size is
//! read from the checkpoint's `embed.W_E`, so loading needs no corpus), and the
//! ablations of the run's end as `mechlab intervene`'s fixed suite: the
//! in-context learning score with the induction heads zero-ablated at `hook_z`,
//! against as many heads outside the circuit (`measure::circuit`).

use super::measure::circuit;
use super::{data::Data, probe_for, LmConfig};
use crate::analysis::{
    first_axis, restore, Effect, InterveneError, Interventions, LoadError, Model, Request, RunDir,
};
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
    let (m, loaded) = gpt_at::<T>(cfg, run, step)?;
    restore(m, &loaded)
}

type Loaded<T> = crate::run::checkpoint::Loaded<T>;

/// The run's transformer (initialised) and the checkpoint to restore into it.
fn gpt_at<T: Float>(
    cfg: &LmConfig,
    run: &RunDir,
    step: Option<u64>,
) -> Result<(Gpt<T>, Loaded<T>), LoadError> {
    let loaded = run.read::<T>(step)?;
    let v = first_axis(&loaded, "embed.W_E")?;
    let gcfg = cfg.model.gpt(cfg.data.seq_len, v);
    let m = Gpt::<T>::new(&gcfg, &mut stream(cfg.seed, Stream::Init))
        .map_err(|r| run.unsupported(r))?;
    Ok((m, loaded))
}

pub fn intervene(
    cfg: &LmConfig,
    run: &RunDir,
    req: &Request,
) -> Result<Interventions, InterveneError> {
    req.fixed_suite(
        "lm-induction",
        "the induction heads zero-ablated, against as many heads outside the circuit",
    )?;
    super::config::check(cfg).map_err(InterveneError::Invalid)?;
    if cfg.model.dtype.analysis_f32(run)? {
        intervene_typed::<f32>(cfg, run, req)
    } else {
        intervene_typed::<f64>(cfg, run, req)
    }
}

fn intervene_typed<T: Float>(
    cfg: &LmConfig,
    run: &RunDir,
    req: &Request,
) -> Result<Interventions, InterveneError> {
    let (mut m, loaded) = gpt_at::<T>(cfg, run, req.step)?;
    loaded.apply_params(&mut m).map_err(LoadError::from)?;
    let data = Data::new(&cfg.data).map_err(InterveneError::Invalid)?;
    let mut probe = probe_for(cfg, &data, &m);
    let fin = probe.evaluate(&m);
    let bad = |e: crate::experiment::ExperimentError| InterveneError::Invalid(e.to_string());
    let c = circuit(&mut m, &probe, &fin).map_err(bad)?;
    let name = |hs: &[(usize, usize)]| {
        hs.iter()
            .map(|(l, h)| format!("L{l}H{h}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut effects = Vec::new();
    if !c.heads.is_empty() && !c.control.is_empty() {
        let hit = probe
            .icl_ablated(&mut m, &c.heads)
            .map_err(InterveneError::Invalid)?;
        let ctl = probe
            .icl_ablated(&mut m, &c.control)
            .map_err(InterveneError::Invalid)?;
        effects.push(
            Effect::new(
                "induction-heads",
                "does the in-context learning run through the induction heads?",
                "in-context learning score (late − early held-out loss, nats)",
            )
            .values(fin.icl, hit, ctl)
            .labels(
                &format!("induction heads {} zero-ablated at hook_z", name(&c.heads)),
                &format!(
                    "as many heads outside the circuit ({}) zero-ablated",
                    name(&c.control)
                ),
            ),
        );
    }
    Ok(Interventions {
        data: format!("{} held-out sequences of {} tokens", cfg.probe.n_eval, cfg.data.seq_len),
        effects,
        notes: format!(
            "Induction heads: induction score above 1/2 ({}); partners (ablating one alone halves their score): {}.\n",
            if c.heads.is_empty() { "none".into() } else { name(&c.heads) },
            if c.partners.is_empty() { "none".into() } else { name(&c.partners) },
        ),
        ..Interventions::default()
    })
}
