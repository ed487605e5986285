//! Markov-icl's analysis half: the run's transformer at a checkpoint, and the
//! causal questions of its two heads on the run's evaluation sequences.
//!
//! Each intervention moves attention off chosen keys at
//! `blocks.{l}.attn.hook_pattern` (the weight removed, the row renormalised,
//! [`crate::patching::drop_keys`]) and measures the next-token loss:
//! - **previous-token head** (layer 0): the weight on the keys `i − 1 … i − (n − 1)`
//!   (the tokens the n-gram context is made of) removed; the control removes as
//!   many other earlier keys.
//! - **induction head** (layer 1): the weight on the keys that follow an earlier
//!   occurrence of the query's last `n − 1` tokens (what statistical induction
//!   reads, [`super::probes`]) removed; the control removes as many other keys.
//!
//! Rows where no such key exists are left alone in both.

use super::config::ModelKind;
use super::model::RpeTransformer;
use super::{dims, eval_batch, MarkovConfig};
use crate::analysis::{
    restore, Effect, InterveneError, Interventions, LoadError, Model, Request, RunDir,
};
use crate::patching::{self, control_keys, drop_keys, hook};
use crate::rng::{stream, Stream};
use mechlab_engine::hooks::{Ablation, Batch, Tensor};
use mechlab_engine::Float;

pub fn load(cfg: &MarkovConfig, run: &RunDir, step: Option<u64>) -> Result<Model, LoadError> {
    super::config::check(cfg).map_err(|r| run.unsupported(r))?;
    if cfg.model.kind == ModelKind::Minimal {
        return Err(run.unsupported(
            "model.kind = \"minimal\": the minimal model has no hook points yet; inspect and \
             intervene read model.kind = \"transformer\" runs",
        ));
    }
    if cfg.model.dtype.analysis_f32(run)? {
        load_typed::<f32>(cfg, run, step)
    } else {
        load_typed::<f64>(cfg, run, step)
    }
}

fn load_typed<T: Float>(
    cfg: &MarkovConfig,
    run: &RunDir,
    step: Option<u64>,
) -> Result<Model, LoadError> {
    let mut rng = stream(cfg.seed, Stream::Init);
    let m = RpeTransformer::<T>::new(&dims(cfg), &mut rng).map_err(|r| run.unsupported(r))?;
    restore(m, &run.read::<T>(step)?)
}

/// Mean next-token `−log softmax` of `[batch, pos, d_vocab]` logits.
fn loss(y: &Tensor, batch: &Batch, next: &[u32]) -> f64 {
    let (t, s) = (batch.seq_len, y.shape[2]);
    let mut total = 0.0;
    for (r, z) in y.data.chunks(s).enumerate() {
        let mx = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let lse = z.iter().map(|v| (v - mx).exp()).sum::<f64>().ln() + mx;
        total += lse - z[next[(r / t) * t + r % t] as usize];
    }
    total / (batch.batch * t).max(1) as f64
}

pub fn intervene(
    cfg: &MarkovConfig,
    run: &RunDir,
    req: &Request,
) -> Result<Interventions, InterveneError> {
    req.fixed_suite(
        "markov-icl",
        "the previous-token keys (layer 0) and the induction keys (layer 1) removed, each \
         against as many other keys",
    )?;
    let mut model = load(cfg, run, req.step)?;
    let m = model.as_mut();
    let eval =
        eval_batch(&cfg.data, cfg.probe.n_eval, cfg.seed).map_err(InterveneError::Invalid)?;
    let t = eval.len - 1;
    let (mut tokens, mut next) = (Vec::new(), Vec::new());
    for seq in eval.tokens.chunks_exact(eval.len) {
        tokens.extend(seq[..t].iter().map(|&x| x as u32));
        next.extend(seq[1..].iter().map(|&x| x as u32));
    }
    let batch = Batch::new(tokens, eval.n, t);
    let n1 = cfg.data.order.saturating_sub(1).max(1);
    let clean = loss(&m.run_with_hooks(&batch, &[])?, &batch, &next);
    let seq = |b: usize| batch.seq(b);
    // Layer 0: the n − 1 keys before the query; layer 1: the keys after an
    // earlier occurrence of the query's last n − 1 tokens.
    let prev = |_: usize, q: usize| -> Vec<usize> { (q.saturating_sub(n1)..q).collect() };
    let induct = |b: usize, q: usize| -> Vec<usize> {
        let s = seq(b);
        if q + 1 < n1 {
            return Vec::new();
        }
        let ctx = &s[q + 1 - n1..=q];
        (n1..=q).filter(|&j| &s[j - n1..j] == ctx).collect()
    };
    let mut effects = Vec::new();
    for (layer, id, question, keys) in [
        (0, "previous-token-keys", "does the model read the previous tokens through layer 0?", &prev as &dyn Fn(usize, usize) -> Vec<usize>),
        (1, "induction-keys", "does the model read the tokens that followed earlier copies of its context through layer 1?", &induct),
    ] {
        let name = format!("blocks.{layer}.attn.hook_pattern");
        let own = patching::activation(m, &batch, &name)?;
        let others = |b: usize, q: usize| -> Vec<usize> {
            let hit = keys(b, q);
            let rest: Vec<usize> = (0..=q).filter(|j| !hit.contains(j)).collect();
            control_keys(rest, hit.len(), b * t + q)
        };
        let mut run_with = |p: Tensor| -> Result<f64, InterveneError> {
            let y = m.run_with_hooks(&batch, &[hook(&name, Ablation::patch(p), None, None)])?;
            Ok(loss(&y, &batch, &next))
        };
        let hit = run_with(drop_keys(&own, keys))?;
        let ctl = run_with(drop_keys(&own, others))?;
        effects.push(
            Effect::new(id, question, "evaluation next-token loss")
                .values(clean, hit, ctl)
                .labels(
                    &format!("layer-{layer} attention on those keys removed"),
                    "as many other earlier keys removed",
                ),
        );
    }
    Ok(Interventions {
        data: format!("{} evaluation sequences of {t} tokens", eval.n),
        effects,
        notes: format!(
            "Keys are removed in every head's query rows and each row renormalised over the \
             keys left; n − 1 = {n1}.\n"
        ),
        ..Interventions::default()
    })
}
