//! The transformer experiment's analysis half: the run's model at a checkpoint
//! (`Run.model()`, `mechlab intervene`; the vocabulary is read from the
//! checkpoint's `embed.W_E`, so loading needs no data), the detectors on any
//! checkpoint, and its interventions: the strongest head of each detector
//! zero-ablated at `hook_z`, against the weakest head of the same detector;
//! then every head ablated in turn beside attribution patching's estimate.

use super::config::{Inputs, TransformerConfig};
use super::probe_for;
use super::probes::{Eval, DETECTORS};
use super::source::Data;
use crate::analysis::{
    first_axis, restore, Effect, InterveneError, Interventions, LoadError, Model, Request, RunDir,
};
use crate::rng::{stream, Stream};
use mechlab_engine::gpt::Gpt;
use mechlab_engine::hooks::{Ablation, Batch, Hook, HookedModel};
use mechlab_engine::Float;
use mechlab_report::Figure;

/// A `[T, T]` detection pattern from a `.npy` file.
pub fn read_pattern(path: &str, t: usize) -> Result<Vec<f64>, String> {
    read_npy_f64(path, &[t, t], "probe.pattern_file = ", "[T, T]")
}

/// A `.npy` array of shape `want` (named `what` in errors, which start with
/// `key` and the path) as `f64`.
pub(crate) fn read_npy_f64(
    path: &str,
    want: &[usize],
    key: &str,
    what: &str,
) -> Result<Vec<f64>, String> {
    let bad = |e: String| format!("{key}{path:?}: {e}");
    let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let npy = npyz::NpyFile::new(&bytes[..]).map_err(|e| bad(format!("not a .npy file ({e})")))?;
    let shape: Vec<u64> = npy.shape().to_vec();
    if !shape.iter().map(|&d| d as usize).eq(want.iter().copied()) {
        return Err(bad(format!(
            "shape {shape:?}: a detection pattern is {what} = {want:?}"
        )));
    }
    let descr = npy.dtype().descr();
    let io = |e: std::io::Error| bad(e.to_string());
    match descr.trim_matches('\'').trim_start_matches(['<', '|', '=']) {
        "f8" => npy.into_vec::<f64>().map_err(io),
        "f4" => Ok(npy
            .into_vec::<f32>()
            .map_err(io)?
            .into_iter()
            .map(f64::from)
            .collect()),
        "b1" => Ok(npy
            .into_vec::<bool>()
            .map_err(io)?
            .into_iter()
            .map(|b| f64::from(u8::from(b)))
            .collect()),
        "i8" => Ok(npy
            .into_vec::<i64>()
            .map_err(io)?
            .into_iter()
            .map(|x| x as f64)
            .collect()),
        other => Err(bad(format!("dtype {other}: use float, int64 or bool"))),
    }
}

pub fn load(cfg: &TransformerConfig, run: &RunDir, step: Option<u64>) -> Result<Model, LoadError> {
    super::config::check(cfg).map_err(|r| run.unsupported(r))?;
    if cfg.model.dtype.analysis_f32(run)? {
        let (m, l) = gpt_at::<f32>(cfg, run, step)?;
        restore(m, &l)
    } else {
        let (m, l) = gpt_at::<f64>(cfg, run, step)?;
        restore(m, &l)
    }
}

/// The run's transformer (initialised) and the checkpoint to restore into it.
fn gpt_at<T: Float>(
    cfg: &TransformerConfig,
    run: &RunDir,
    step: Option<u64>,
) -> Result<(Gpt<T>, crate::run::checkpoint::Loaded<T>), LoadError> {
    let loaded = run.read::<T>(step)?;
    let v = first_axis(&loaded, "embed.W_E")?;
    // n_ctx from the position table (or the RPE table's distances), so a run
    // whose n_ctx came from its data loads without it
    let n_ctx = match (
        loaded.tensors.get("pos_embed.W_pos"),
        loaded.tensors.get("blocks.0.attn.rpe"),
    ) {
        (Some((shape, _)), _) => shape[0],
        (None, Some((shape, _))) => shape[1],
        (None, None) => cfg.model.n_ctx.max(2),
    };
    let mut m = cfg.model.clone();
    m.n_ctx = n_ctx;
    m.d_vocab = v;
    let gcfg = m.gpt(n_ctx.saturating_sub(1).max(1), v);
    let g = Gpt::<T>::new(&gcfg, &mut stream(cfg.seed, Stream::Init))
        .map_err(|r| run.unsupported(r))?;
    Ok((g, loaded))
}

/// A generator run's held-out windows come from a Python function the run
/// folder cannot call: `what` is refused, pointing to `run.model()`.
fn needs_config_data(
    cfg: &TransformerConfig,
    run: &RunDir,
    what: &str,
) -> Result<(), InterveneError> {
    if cfg.data.inputs == Inputs::Generator {
        return Err(InterveneError::Invalid(format!(
            "{}: data.inputs = \"generator\": the held-out windows come from a Python function; {what} from Python on run.model()",
            run.file
        )));
    }
    Ok(())
}

/// The probe record of checkpoint `step` (every key `metrics.jsonl` logs at a
/// probe step), on the run's own held-out windows.
pub fn measure(
    cfg: &TransformerConfig,
    run: &RunDir,
    step: Option<u64>,
) -> Result<serde_json::Map<String, serde_json::Value>, InterveneError> {
    super::config::check(cfg).map_err(InterveneError::Invalid)?;
    needs_config_data(cfg, run, "measure")?;
    let rec = if cfg.model.dtype.analysis_f32(run)? {
        measure_typed::<f32>(cfg, run, step)?
    } else {
        measure_typed::<f64>(cfg, run, step)?
    };
    Ok(rec
        .into_iter()
        .map(|(k, v)| (k, serde_json::json!(v)))
        .collect())
}

fn measure_typed<T: Float>(
    cfg: &TransformerConfig,
    run: &RunDir,
    step: Option<u64>,
) -> Result<Vec<(String, f64)>, InterveneError> {
    let (mut m, loaded) = gpt_at::<T>(cfg, run, step)?;
    loaded.apply_params(&mut m).map_err(LoadError::from)?;
    let data = Data::new(cfg, &run.dir, None).map_err(InterveneError::Invalid)?;
    let mut probe = probe_for(cfg, &run.dir, &data, &m, None)
        .map_err(|e| InterveneError::Invalid(e.to_string()))?;
    Ok(super::eval_record(&probe.evaluate(&m), data.bayes))
}

pub fn intervene(
    cfg: &TransformerConfig,
    run: &RunDir,
    req: &Request,
) -> Result<Interventions, InterveneError> {
    req.fixed_suite(
        "transformer",
        "each detector's strongest head zero-ablated, against its weakest",
    )?;
    super::config::check(cfg).map_err(InterveneError::Invalid)?;
    needs_config_data(cfg, run, "intervene")?;
    if cfg.model.dtype.analysis_f32(run)? {
        intervene_typed::<f32>(cfg, run, req)
    } else {
        intervene_typed::<f64>(cfg, run, req)
    }
}

fn intervene_typed<T: Float>(
    cfg: &TransformerConfig,
    run: &RunDir,
    req: &Request,
) -> Result<Interventions, InterveneError> {
    let (mut m, loaded) = gpt_at::<T>(cfg, run, req.step)?;
    loaded.apply_params(&mut m).map_err(LoadError::from)?;
    let data = Data::new(cfg, &run.dir, None).map_err(InterveneError::Invalid)?;
    let mut probe = probe_for(cfg, &run.dir, &data, &m, None)
        .map_err(|e| InterveneError::Invalid(e.to_string()))?;
    let fin: Eval = probe.evaluate(&m);
    let t = data.t;
    let n = probe.x.len() / t;
    let batch = Batch::new(probe.x.clone(), n, t);
    let loss_with = |m: &mut Gpt<T>, head: (usize, usize)| -> Result<f64, InterveneError> {
        let hook = Hook {
            name: format!("blocks.{}.attn.hook_z", head.0),
            ablation: Ablation::Zero,
            heads: Some(vec![head.1]),
            positions: None,
        };
        let logits = m.run_with_hooks(&batch, &[hook])?;
        Ok(masked_loss(&logits.data, &probe.y, &probe.m, m.cfg.d_vocab))
    };
    let mut effects = Vec::new();
    for (d, name) in DETECTORS.iter().enumerate() {
        let table = &fin.detectors[d];
        let mut heads: Vec<(usize, usize, f64)> = table
            .iter()
            .enumerate()
            .flat_map(|(l, hs)| hs.iter().enumerate().map(move |(h, &v)| (l, h, v)))
            .collect();
        heads.sort_by(|a, b| b.2.total_cmp(&a.2));
        if heads.len() < 2 {
            continue;
        }
        let (top, low) = (heads[0], heads[heads.len() - 1]);
        let hit = loss_with(&mut m, (top.0, top.1))?;
        let ctl = loss_with(&mut m, (low.0, low.1))?;
        effects.push(
            Effect::new(
                &format!("top-{}", name.replace('_', "-")),
                &format!(
                    "does the strongest {} head matter for the held-out loss?",
                    name.replace('_', " ")
                ),
                "held-out loss over the targets (nats)",
            )
            .values(fin.loss, hit, ctl)
            .labels(
                &format!(
                    "L{}H{} (score {:.3}) zero-ablated at hook_z",
                    top.0, top.1, top.2
                ),
                &format!(
                    "L{}H{} (score {:.3}, the weakest) zero-ablated",
                    low.0, low.1, low.2
                ),
            ),
        );
    }
    let mut out = Interventions {
        data: format!("{n} held-out windows of {} tokens", t + 1),
        effects,
        ..Interventions::default()
    };
    every_head(&mut m, &batch, (&probe.y, &probe.m), fin.loss, &mut out)?;
    Ok(out)
}

/// Every head zero-ablated at `hook_z` in turn (the forwards run in parallel,
/// each resumed at its layer), beside attribution patching's first-order
/// estimate of the same ablations from one backward, `Σ (0 − z) · ∂loss/∂z`
/// per head: the loss change of each, their correlation, and a figure.
fn every_head<T: Float>(
    m: &mut Gpt<T>,
    batch: &Batch,
    (y, mask): (&[u32], &[bool]),
    loss: f64,
    out: &mut Interventions,
) -> Result<(), InterveneError> {
    let (nl, nh, v) = (m.cfg.n_layers, m.cfg.n_heads, m.cfg.d_vocab);
    let names: Vec<String> = (0..nl).map(|l| format!("blocks.{l}.attn.hook_z")).collect();
    let jobs: Vec<(&Batch, Vec<Hook>)> = (0..nl * nh)
        .map(|i| {
            let hook = Hook {
                name: names[i / nh].clone(),
                ablation: Ablation::Zero,
                heads: Some(vec![i % nh]),
                positions: None,
            };
            (batch, vec![hook])
        })
        .collect();
    let losses = std::sync::Mutex::new(vec![Ok(f64::NAN); jobs.len()]);
    m.run_many_each(&jobs, &|i, out| {
        let l = out.map(|o| masked_loss(&o.data, y, mask, v));
        losses.lock().expect("head losses")[i] = l;
    });
    let ablated = losses
        .into_inner()
        .expect("head losses")
        .into_iter()
        .collect::<Result<Vec<f64>, _>>()?;
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let (_, acts, grads) = m.run_with_grads(batch, &refs, &mut |o| {
        Ok(masked_loss_grad(&o.data, y, mask, v, o.shape.clone()))
    })?;
    let mut estimate = vec![0.0; nl * nh];
    for (l, name) in names.iter().enumerate() {
        let (z, g) = (&acts[name], &grads[name]);
        let dh = z.shape[3];
        // z, g: [batch, pos, head, d_head]
        for (i, (a, b)) in z.data.iter().zip(&g.data).enumerate() {
            estimate[l * nh + (i / dh) % nh] -= a * b;
        }
    }
    let change: Vec<f64> = ablated.iter().map(|a| a - loss).collect();
    let r = crate::patching::pearson(&change, &estimate);
    out.extra.insert(
        "every_head".into(),
        serde_json::json!({
            "ablation": "zero at hook_z",
            "loss_change": change,
            "attribution_estimate": estimate,
            "correlation": r,
            "layout": "[layer, head], row-major",
        }),
    );
    let fig = Figure::heatmap(
        "intervene_every_head",
        "held-out loss change when each head is zero-ablated",
        "head",
        "layer",
        nl,
        nh,
        change,
        true,
    );
    out.notes = format!(
        "Every head zero-ablated in turn (`every_head` in `intervene.json`, figure \
         `intervene_every_head`); attribution patching's estimate of the same \
         ablations from one backward correlates with them at r = {r:.3} over the \
         {} heads.\n",
        nl * nh
    );
    out.figures.push(fig);
    Ok(())
}

/// The gradient of [`masked_loss`] with respect to the logits (`shape`).
fn masked_loss_grad(
    logits: &[f64],
    y: &[u32],
    mask: &[bool],
    v: usize,
    shape: Vec<usize>,
) -> mechlab_engine::hooks::Tensor {
    let cnt = mask.iter().filter(|&&k| k).count().max(1) as f64;
    let mut g = vec![0.0; logits.len()];
    for (r, _) in mask.iter().enumerate().filter(|(_, &k)| k) {
        let row = &logits[r * v..(r + 1) * v];
        let mx = row.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b));
        let z: f64 = row.iter().map(|x| (x - mx).exp()).sum();
        let out = &mut g[r * v..(r + 1) * v];
        for (o, x) in out.iter_mut().zip(row) {
            *o = (x - mx).exp() / z / cnt;
        }
        out[y[r] as usize] -= 1.0 / cnt;
    }
    mechlab_engine::hooks::Tensor::new(shape, g)
}

/// Mean cross-entropy of `[n·T, V]` logits over the targets where `mask` is true.
pub fn masked_loss(logits: &[f64], y: &[u32], mask: &[bool], v: usize) -> f64 {
    let (mut sum, mut cnt) = (0.0, 0.0f64);
    for (r, &k) in mask.iter().enumerate() {
        if !k {
            continue;
        }
        let row = &logits[r * v..(r + 1) * v];
        let mx = row.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b));
        let lse = mx + row.iter().map(|z| (z - mx).exp()).sum::<f64>().ln();
        sum += lse - row[y[r] as usize];
        cnt += 1.0;
    }
    sum / cnt.max(1.0)
}
