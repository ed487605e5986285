//! Ablations and activation patching on any [`HookedModel`], as TransformerLens's
//! `patching` module defines them.
//!
//! The intervention kinds, each a [`Hook`] on a named activation, optionally
//! restricted to some heads and some positions:
//!
//! - **zero**: [`Ablation::Zero`];
//! - **mean** over a reference batch: [`mean_hook`] (the mean of the activation
//!   over the reference batch, broadcast over the batch it is applied to;
//!   [`Ablation::Mean`] is the mean over the batch itself);
//! - **resample** from another input: [`resample_hook`] (the activation of the
//!   same point on another batch of the same shape; [`roll_batch`] makes
//!   "another input" the next sequence of the same batch);
//! - **patch** from a clean run: [`Ablation::Patch`] of the clean activation.
//!
//! Activation patching runs the corrupted input with one clean activation
//! patched in and reports the *patching effect* of TransformerLens's
//! `patching` tutorials, `(patched − corrupted) / (clean − corrupted)` on a
//! metric of the output ([`patching_effect`]): 0 when the patch restores
//! nothing, 1 when it restores the clean metric. [`patch_by_head_pos`] does it
//! for every (head, position) of a per-head point
//! (`get_act_patch_attn_head_out_by_pos` for `hook_z`), [`patch_by_pos`] for
//! every position of any point with a position axis
//! (`get_act_patch_resid_pre` for the residual stream).
//!
//! ```
//! use mechlab::papers::induction::simplified::{Simplified, SimplifiedConfig};
//! use mechlab::patching::{self, mean_nll};
//! use mechlab_engine::hooks::{Ablation, Batch, HookedModel};
//! let mut m = Simplified::<f64>::new(&SimplifiedConfig::default());
//! m.a.value_mut()[0] = 5.0;
//! let clean = Batch::new(vec![0, 1, 2, 0, 1, 2, 0, 1, 2, 0], 1, 10);
//! let corrupted = Batch::new(vec![0, 1, 2, 0, 1, 2, 0, 1, 0, 1], 1, 10);
//! let loss = |y: &mechlab_engine::hooks::Tensor| mean_nll(y, &[1], 1e-12);
//! // zero-ablate head 0's output everywhere
//! let z = patching::hook("blocks.0.attn.hook_z", Ablation::Zero, Some(vec![0]), None);
//! let y = m.run_with_hooks(&clean, &[z])?;
//! assert_ne!(y, m.run_with_hooks(&clean, &[])?);
//! // patch every position of the embedding: the clean loss, effect 1
//! let (v, base, effect) = patching::patch_positions(&mut m, &clean, &corrupted, "hook_embed", None, &loss)?;
//! assert_eq!((v, effect), (base.clean, 1.0));
//! // the head × position grid of hook_z
//! let g = patching::patch_by_head_pos(&mut m, &clean, &corrupted, "blocks.0.attn.hook_z", &loss)?;
//! assert_eq!((g.rows, g.cols), (3, 11));
//! # Ok::<(), mechlab_engine::hooks::HookError>(())
//! ```
//!
//! ```
//! use mechlab::patching::patching_effect;
//! assert_eq!(patching_effect(2.0, 0.0, 1.5), 0.75);
//! assert!(patching_effect(1.0, 1.0, 1.0).is_nan(), "no clean/corrupted gap: undefined");
//! ```

use mechlab_engine::hooks::{Ablation, Batch, Hook, HookError, HookedModel, Tensor};

/// `(patched − corrupted) / (clean − corrupted)`: the share of the clean−corrupted
/// gap in a metric that a patch restores (NaN when there is no gap).
pub fn patching_effect(clean: f64, corrupted: f64, patched: f64) -> f64 {
    let gap = clean - corrupted;
    if gap == 0.0 {
        f64::NAN
    } else {
        (patched - corrupted) / gap
    }
}

/// A hook on `name` restricted to `heads` and `positions` (`None`: all).
pub fn hook(
    name: &str,
    ablation: Ablation,
    heads: Option<Vec<usize>>,
    positions: Option<Vec<usize>>,
) -> Hook {
    Hook {
        name: name.to_string(),
        ablation,
        heads,
        positions,
    }
}

/// The axis names of a layout string, e.g. `[batch, head, query_pos, key_pos]`.
pub fn axes_of(layout: &str) -> Vec<String> {
    layout
        .split(']')
        .next()
        .unwrap_or("")
        .trim_start_matches('[')
        .split(',')
        .map(|a| a.trim().to_string())
        .collect()
}

/// The point's layout: `(head axis, position axis)` indices, or an error naming it.
fn point_axes(
    m: &dyn HookedModel,
    name: &str,
) -> Result<(Option<usize>, Option<usize>), HookError> {
    let points = m.hook_points();
    let p = points
        .iter()
        .find(|p| p.name == name)
        .ok_or_else(|| HookError::Unknown {
            name: name.to_string(),
            available: points.iter().map(|p| p.name.clone()).collect(),
        })?;
    let axes = axes_of(&p.layout);
    let head = axes.iter().position(|a| a == "head");
    let pos = axes
        .iter()
        .position(|a| a == "pos" || a == "query_pos" || a == "key_pos");
    Ok((head, pos))
}

/// The activation `name` on `batch` (one clean forward).
pub fn activation(m: &mut dyn HookedModel, batch: &Batch, name: &str) -> Result<Tensor, HookError> {
    let (_, mut cache) = m.run_with_cache(batch, &[name])?;
    cache.remove(name).ok_or_else(|| HookError::Invalid {
        name: name.to_string(),
        reason: "the model returned no activation for this point".into(),
    })
}

/// Mean ablation over a reference batch: a patch of `name` whose every batch row
/// (of `batch_size`) is the mean of the activation over `reference`'s rows.
pub fn mean_hook(
    m: &mut dyn HookedModel,
    name: &str,
    reference: &Batch,
    batch_size: usize,
    heads: Option<Vec<usize>>,
    positions: Option<Vec<usize>>,
) -> Result<Hook, HookError> {
    let t = activation(m, reference, name)?;
    let nb = t.shape.first().copied().unwrap_or(0);
    if nb == 0 {
        return Err(HookError::Input("the reference batch is empty".into()));
    }
    let per = t.numel() / nb;
    let mut mean = vec![0.0; per];
    for row in t.data.chunks(per) {
        for (m, v) in mean.iter_mut().zip(row) {
            *m += v;
        }
    }
    mean.iter_mut().for_each(|v| *v /= nb as f64);
    let mut shape = t.shape.clone();
    shape[0] = batch_size;
    let data = (0..batch_size).flat_map(|_| mean.iter().copied()).collect();
    Ok(hook(
        name,
        Ablation::patch(Tensor::new(shape, data)),
        heads,
        positions,
    ))
}

/// Resample ablation: a patch of `name` with its activation on `source`, another
/// input of the same batch size and length as the one it will be applied to.
pub fn resample_hook(
    m: &mut dyn HookedModel,
    name: &str,
    source: &Batch,
    heads: Option<Vec<usize>>,
    positions: Option<Vec<usize>>,
) -> Result<Hook, HookError> {
    let t = activation(m, source, name)?;
    Ok(hook(name, Ablation::patch(t), heads, positions))
}

/// `batch` with its sequences rotated by one (row `b` becomes row `b + 1`'s
/// tokens and targets): "another input" for [`resample_hook`] within one batch.
pub fn roll_batch(batch: &Batch) -> Batch {
    let n = batch.batch;
    let mut tokens = Vec::with_capacity(batch.tokens.len());
    for b in 0..n {
        tokens.extend_from_slice(batch.seq((b + 1) % n));
    }
    let per = batch.targets.len().checked_div(n).unwrap_or(0);
    let mut targets = Vec::with_capacity(batch.targets.len());
    for b in 0..n {
        let s = ((b + 1) % n) * per;
        targets.extend_from_slice(&batch.targets[s..s + per]);
    }
    Batch {
        tokens,
        batch: n,
        seq_len: batch.seq_len,
        targets,
    }
}

/// A metric of a model output (a loss, a logit difference), higher or lower better.
pub type Metric<'a> = dyn Fn(&Tensor) -> f64 + Sync + 'a;

/// The three reference values of a patching experiment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Baselines {
    pub clean: f64,
    pub corrupted: f64,
}

/// One activation-patching result: the effect of patching each cell, row-major
/// `[rows, cols]` (head × position, or position only with one row).
#[derive(Clone, Debug, PartialEq)]
pub struct PatchGrid {
    pub name: String,
    pub rows: usize,
    pub cols: usize,
    /// The metric of each patched run.
    pub patched: Vec<f64>,
    /// `(patched − corrupted) / (clean − corrupted)` per cell.
    pub effect: Vec<f64>,
    pub baselines: Baselines,
}

fn check_pair(clean: &Batch, corrupted: &Batch) -> Result<(), HookError> {
    if clean.batch != corrupted.batch || clean.seq_len != corrupted.seq_len {
        return Err(HookError::Input(format!(
            "clean batch is {} × {}, corrupted {} × {}: patching needs the same shape",
            clean.batch, clean.seq_len, corrupted.batch, corrupted.seq_len
        )));
    }
    Ok(())
}

fn grid(
    m: &mut dyn HookedModel,
    clean: &Batch,
    corrupted: &Batch,
    name: &str,
    metric: &Metric<'_>,
    by_head: bool,
) -> Result<PatchGrid, HookError> {
    check_pair(clean, corrupted)?;
    let (head_axis, pos_axis) = point_axes(m, name)?;
    let invalid = |reason: &str| HookError::Invalid {
        name: name.to_string(),
        reason: reason.to_string(),
    };
    let pos_axis = pos_axis.ok_or_else(|| invalid("this point has no position axis"))?;
    let (yc, cache) = m.run_with_cache(clean, &[name])?;
    let src = cache
        .get(name)
        .cloned()
        .ok_or_else(|| invalid("the model returned no activation for this point"))?;
    let y_bad = m.run_with_hooks(corrupted, &[])?;
    let baselines = Baselines {
        clean: metric(&yc),
        corrupted: metric(&y_bad),
    };
    let (rows, head_axis) = if by_head {
        let a = head_axis.ok_or_else(|| invalid("this point has no head axis"))?;
        (src.shape[a], Some(a))
    } else {
        (1, None)
    };
    let cols = src.shape[pos_axis];
    // every cell's forward at once, in parallel where the model can, each
    // output reduced to its metric as it comes
    let src = Ablation::patch(src);
    let jobs: Vec<(&Batch, Vec<Hook>)> = (0..rows * cols)
        .map(|i| {
            let (r, p) = (i / cols, i % cols);
            let h = hook(name, src.clone(), head_axis.map(|_| vec![r]), Some(vec![p]));
            (corrupted, vec![h])
        })
        .collect();
    let values = std::sync::Mutex::new(vec![Ok(f64::NAN); jobs.len()]);
    m.run_many_each(&jobs, &|i, y| {
        values.lock().expect("patching values")[i] = y.map(|y| metric(&y));
    });
    let patched = values
        .into_inner()
        .expect("patching values")
        .into_iter()
        .collect::<Result<Vec<f64>, HookError>>()?;
    let effect = patched
        .iter()
        .map(|&v| patching_effect(baselines.clean, baselines.corrupted, v))
        .collect();
    Ok(PatchGrid {
        name: name.to_string(),
        rows,
        cols,
        patched,
        effect,
        baselines,
    })
}

/// Patches the clean activation of `name` into the corrupted run one (head,
/// position) at a time; rows are heads, columns positions (the point's `pos` or
/// `query_pos` axis).
pub fn patch_by_head_pos(
    m: &mut dyn HookedModel,
    clean: &Batch,
    corrupted: &Batch,
    name: &str,
    metric: &Metric<'_>,
) -> Result<PatchGrid, HookError> {
    grid(m, clean, corrupted, name, metric, true)
}

/// Patches the clean activation of `name` into the corrupted run one position at
/// a time (every head together): one row.
pub fn patch_by_pos(
    m: &mut dyn HookedModel,
    clean: &Batch,
    corrupted: &Batch,
    name: &str,
    metric: &Metric<'_>,
) -> Result<PatchGrid, HookError> {
    grid(m, clean, corrupted, name, metric, false)
}

/// The metric with `positions` of `name` (every head) patched from the clean run
/// into the corrupted one, and its patching effect.
pub fn patch_positions(
    m: &mut dyn HookedModel,
    clean: &Batch,
    corrupted: &Batch,
    name: &str,
    positions: Option<Vec<usize>>,
    metric: &Metric<'_>,
) -> Result<(f64, Baselines, f64), HookError> {
    check_pair(clean, corrupted)?;
    let (yc, cache) = m.run_with_cache(clean, &[name])?;
    let src = cache.get(name).cloned().ok_or_else(|| HookError::Invalid {
        name: name.to_string(),
        reason: "the model returned no activation for this point".into(),
    })?;
    let y_bad = m.run_with_hooks(corrupted, &[])?;
    let b = Baselines {
        clean: metric(&yc),
        corrupted: metric(&y_bad),
    };
    let y = m.run_with_hooks(
        corrupted,
        &[hook(name, Ablation::patch(src), None, positions)],
    )?;
    let v = metric(&y);
    Ok((v, b, patching_effect(b.clean, b.corrupted, v)))
}

/// The metric with each head of `name` ablated in turn (every position), as
/// `make(head)` builds the hook: `[n_heads]` values.
pub fn ablate_each_head(
    m: &mut dyn HookedModel,
    batch: &Batch,
    n_heads: usize,
    make: &mut dyn FnMut(&mut dyn HookedModel, usize) -> Result<Hook, HookError>,
    metric: &Metric<'_>,
) -> Result<Vec<f64>, HookError> {
    let mut out = Vec::with_capacity(n_heads);
    for h in 0..n_heads {
        let hk = make(m, h)?;
        out.push(metric(&m.run_with_hooks(batch, &[hk])?));
    }
    Ok(out)
}

/// Mean `−log max(ŷ_y, floor)` of a `[batch, d_vocab]` probability output against
/// one target per row: the loss metric of the induction models.
pub fn mean_nll(y: &Tensor, targets: &[usize], floor: f64) -> f64 {
    let s = y.shape.get(1).copied().unwrap_or(1).max(1);
    let n = targets.len().max(1) as f64;
    targets
        .iter()
        .enumerate()
        .map(|(b, &t)| -y.data[b * s + t].max(floor).ln())
        .sum::<f64>()
        / n
}

/// Mean `out[correct] − out[wrong]` over the rows of a `[batch, d]` output: the
/// logit (or probability) difference metric.
pub fn mean_diff(y: &Tensor, correct: &[usize], wrong: &[usize]) -> f64 {
    let s = y.shape.get(1).copied().unwrap_or(1).max(1);
    let n = correct.len().max(1) as f64;
    correct
        .iter()
        .zip(wrong)
        .enumerate()
        .map(|(b, (&c, &w))| y.data[b * s + c] - y.data[b * s + w])
        .sum::<f64>()
        / n
}

/// `pattern` (`[batch, head, query_pos, key_pos]`) with, in every row, the
/// weights on the keys `drop(b, q)` set to zero and the row renormalised over the
/// keys left: attention moved off chosen keys, the rest of its profile kept. A
/// row with no weight left keeps its weights.
pub fn drop_keys(pattern: &Tensor, drop: impl Fn(usize, usize) -> Vec<usize>) -> Tensor {
    let (h, q, k) = (pattern.shape[1], pattern.shape[2], pattern.shape[3]);
    let mut out = pattern.clone();
    for (r, row) in out.data.chunks_mut(k).enumerate() {
        let keys = drop(r / (h * q), r % q);
        let removed: f64 = keys.iter().map(|&j| row[j]).sum();
        let left = row.iter().sum::<f64>() - removed;
        if keys.is_empty() || left <= 0.0 {
            continue;
        }
        for &j in &keys {
            row[j] = 0.0;
        }
        row.iter_mut().for_each(|x| *x /= left);
    }
    out
}

/// `n` of `candidates` picked by a fixed hash of `(salt, key)` (deterministic,
/// no random stream consumed): the control keys of a [`drop_keys`] intervention.
pub fn control_keys(mut candidates: Vec<usize>, n: usize, salt: usize) -> Vec<usize> {
    let hash = |j: usize| ((salt * 7919 + j) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    candidates.sort_by_key(|&j| hash(j));
    candidates.truncate(n);
    candidates
}

/// Attribution patching's estimate at one hook point, per position and head:
/// `Σ (clean − corrupted) · ∂metric/∂activation` over the batch and the last
/// axis, `[pos, head]` row-major (one "head" for a point without heads; the
/// query position for a pattern `[batch, head, query_pos, key_pos]`).
/// Returns `(positions, heads, cells)`.
pub fn attribution_cells(
    name: &str,
    clean: &Tensor,
    corrupted: &Tensor,
    grad: &Tensor,
) -> (usize, usize, Vec<f64>) {
    let s = &clean.shape;
    let last = *s.last().unwrap_or(&1);
    let pattern = name.ends_with("hook_pattern") && s.len() == 4;
    let (t, heads) = match s.len() {
        4 if pattern => (s[2], s[1]),
        4 => (s[1], s[2]),
        _ => (s.get(1).copied().unwrap_or(1), 1),
    };
    let mut cells = vec![0.0; t * heads];
    let rows = clean.data.chunks_exact(last.max(1));
    let rows = rows.zip(corrupted.data.chunks_exact(last.max(1)));
    for (r, ((c, x), g)) in rows.zip(grad.data.chunks_exact(last.max(1))).enumerate() {
        let (p, h) = match (s.len(), pattern) {
            (4, true) => (r % t, (r / t) % heads),
            (4, false) => ((r / heads) % t, r % heads),
            _ => (r % t, 0),
        };
        let dot: f64 = c.iter().zip(x).zip(g).map(|((c, x), g)| (c - x) * g).sum();
        cells[p * heads + h] += dot;
    }
    (t, heads, cells)
}

/// Pearson's correlation of two series (attribution against patching).
pub fn pearson(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len() as f64;
    let (ma, mb) = (a.iter().sum::<f64>() / n, b.iter().sum::<f64>() / n);
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for (x, y) in a.iter().zip(b) {
        sab += (x - ma) * (y - mb);
        saa += (x - ma).powi(2);
        sbb += (y - mb).powi(2);
    }
    sab / (saa * sbb).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_and_roll() {
        assert_eq!(
            axes_of("[batch, pos, head, d_head]"),
            vec!["batch", "pos", "head", "d_head"]
        );
        let b = Batch::new(vec![1, 2, 3, 4, 5, 6], 3, 2).with_targets(vec![7, 8, 9]);
        let r = roll_batch(&b);
        assert_eq!(r.tokens, vec![3, 4, 5, 6, 1, 2]);
        assert_eq!(r.targets, vec![8, 9, 7]);
    }

    #[test]
    fn metrics() {
        let y = Tensor::new(vec![2, 2], vec![0.25, 0.75, 0.5, 0.5]);
        assert!(
            (mean_nll(&y, &[1, 0], 1e-8) - (-(0.75f64.ln()) - 0.5f64.ln()) / 2.0).abs() < 1e-15
        );
        assert_eq!(mean_diff(&y, &[1, 0], &[0, 1]), 0.25);
    }

    #[test]
    fn dropped_keys_leave_the_rest_renormalised() {
        // [1, 1, 2, 3]: row 0 drops key 1, row 1 drops every key (kept as is).
        let p = Tensor::new(vec![1, 1, 2, 3], vec![0.5, 0.25, 0.25, 0.2, 0.3, 0.5]);
        let out = super::drop_keys(&p, |_, q| if q == 0 { vec![1] } else { vec![0, 1, 2] });
        assert_eq!(out.data[..3], [0.5 / 0.75, 0.0, 0.25 / 0.75]);
        assert_eq!(out.data[3..], p.data[3..]);
        let c = super::control_keys(vec![4, 5, 6, 7], 2, 3);
        assert_eq!(c.len(), 2);
        assert_eq!(c, super::control_keys(vec![7, 6, 5, 4], 2, 3), "order-free");
    }
}
