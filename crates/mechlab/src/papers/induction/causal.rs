//! Causal checks of the induction mechanism on a trained model, through its hook
//! points ([`crate::patching`]): ablating each layer-1 head, and patching the
//! heads' outputs at the query from a clean run into one whose query parents are
//! corrupted. Used by the experiment's verdicts and by `mechlab intervene`.
//!
//! - **Head ablation**: `blocks.0.attn.hook_z` of one head replaced at every
//!   position (zero; the mean over the validation batch; resampled from the next
//!   validation sequence), measured by the validation `−log max(ŷ_y, floor)`.
//! - **Patching**: the corrupted input is the clean sequence with the tokens at
//!   the query's parent positions `L − p` shifted (`t → t + 1 mod S`), so the
//!   clean and corrupted runs predict different tokens. The metric is the
//!   probability difference `ŷ[a] − ŷ[b]` (`a`, `b` the clean and the corrupted
//!   run's most likely tokens, over the sequences where they differ); the effect
//!   is `(patched − corrupted) / (clean − corrupted)`.
//!
//! ```
//! use mechlab::papers::induction::causal::corrupt_parents;
//! let (c, changed) = corrupt_parents(&[0, 1, 2, 0, 1], 5, 3, &[1, 3]);
//! assert_eq!(c, vec![0, 1, 0, 0, 2]);
//! assert_eq!(changed, vec![2, 4]);
//! ```

use super::data::{nll, predict, Baseline, MarkovData};
use crate::patching::{self, hook, mean_diff, mean_nll, Metric};
use mechlab_engine::hooks::{Ablation, Batch, HookError, HookedModel, Tensor};

/// The per-head hook point ablated and patched.
pub const HEAD_OUT: &str = "blocks.0.attn.hook_z";

/// The first `n` sequences of `data` as a batch of `L` context tokens, and targets.
pub fn batch_of(data: &MarkovData, n: usize) -> (Batch, Vec<usize>) {
    let (n, l) = (n.min(data.len()), data.seq_len);
    let tokens = (0..n)
        .flat_map(|b| data.seq(b)[..l].iter().map(|&t| t as u32))
        .collect();
    (
        Batch::new(tokens, n, l),
        (0..n).map(|b| data.target(b)).collect(),
    )
}

/// One context of length `l` with the tokens at the query's parent positions
/// `l − p` shifted by one (mod `s`), and the positions changed (ascending).
pub fn corrupt_parents(
    seq: &[u32],
    l: usize,
    s: usize,
    parents: &[usize],
) -> (Vec<u32>, Vec<usize>) {
    let mut out = seq[..l].to_vec();
    let mut changed: Vec<usize> = parents
        .iter()
        .filter(|&&p| p >= 1 && p <= l)
        .map(|&p| l - p)
        .collect();
    changed.sort_unstable();
    changed.dedup();
    for &i in &changed {
        out[i] = (out[i] + 1) % s as u32;
    }
    (out, changed)
}

/// Validation loss with each head's output ablated, per kind: `(kind, [H])`.
pub fn head_ablations(
    m: &mut dyn HookedModel,
    batch: &Batch,
    targets: &[usize],
    n_heads: usize,
    floor: f64,
) -> Result<Vec<(&'static str, Vec<f64>)>, HookError> {
    let loss = |y: &Tensor| mean_nll(y, targets, floor);
    let rolled = patching::roll_batch(batch);
    let mut out = Vec::new();
    for kind in ["zero", "mean", "resample"] {
        let mut v = Vec::with_capacity(n_heads);
        for h in 0..n_heads {
            let hk = match kind {
                "zero" => hook(HEAD_OUT, Ablation::Zero, Some(vec![h]), None),
                "mean" => {
                    patching::mean_hook(m, HEAD_OUT, batch, batch.batch, Some(vec![h]), None)?
                }
                _ => patching::resample_hook(m, HEAD_OUT, &rolled, Some(vec![h]), None)?,
            };
            v.push(loss(&m.run_with_hooks(batch, &[hk])?));
        }
        out.push((kind, v));
    }
    Ok(out)
}

/// The clean and corrupted batches of the patching experiment (only the
/// sequences whose clean and corrupted predictions differ) and the metric's
/// token pairs `(a, b)`.
pub struct PatchSetup {
    pub clean: Batch,
    pub corrupted: Batch,
    pub a: Vec<usize>,
    pub b: Vec<usize>,
}

fn argmax(row: &[f64]) -> usize {
    (0..row.len())
        .max_by(|&i, &j| row[i].total_cmp(&row[j]))
        .unwrap_or(0)
}

/// Builds the patching experiment on `batch` (see the module doc).
pub fn patch_setup(
    m: &mut dyn HookedModel,
    batch: &Batch,
    s: usize,
    parents: &[usize],
) -> Result<PatchSetup, HookError> {
    let l = batch.seq_len;
    let mut bad = Vec::with_capacity(batch.tokens.len());
    for b in 0..batch.batch {
        bad.extend(corrupt_parents(batch.seq(b), l, s, parents).0);
    }
    let corrupted = Batch::new(bad, batch.batch, l);
    let yc = m.run_with_hooks(batch, &[])?;
    let yb = m.run_with_hooks(&corrupted, &[])?;
    let (mut keep_c, mut keep_b, mut a, mut bb) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for b in 0..batch.batch {
        let (ta, tb) = (
            argmax(&yc.data[b * s..(b + 1) * s]),
            argmax(&yb.data[b * s..(b + 1) * s]),
        );
        if ta != tb {
            keep_c.extend_from_slice(batch.seq(b));
            keep_b.extend_from_slice(corrupted.seq(b));
            a.push(ta);
            bb.push(tb);
        }
    }
    let n = a.len();
    Ok(PatchSetup {
        clean: Batch::new(keep_c, n, l),
        corrupted: Batch::new(keep_b, n, l),
        a,
        b: bb,
    })
}

/// The patching effect of `heads`' outputs at the query position (`L`).
pub fn patch_heads_at_query(
    m: &mut dyn HookedModel,
    setup: &PatchSetup,
    heads: &[usize],
) -> Result<f64, HookError> {
    if setup.a.is_empty() {
        return Ok(f64::NAN);
    }
    let metric = |y: &Tensor| mean_diff(y, &setup.a, &setup.b);
    let src = patching::activation(m, &setup.clean, HEAD_OUT)?;
    let clean = metric(&m.run_with_hooks(&setup.clean, &[])?);
    let bad = metric(&m.run_with_hooks(&setup.corrupted, &[])?);
    let hk = hook(
        HEAD_OUT,
        Ablation::patch(src),
        Some(heads.to_vec()),
        Some(vec![setup.clean.seq_len]),
    );
    let v = metric(&m.run_with_hooks(&setup.corrupted, &[hk])?);
    Ok(patching::patching_effect(clean, bad, v))
}

/// The (head × position) patching grid of [`HEAD_OUT`] on the setup.
pub fn patch_grid(
    m: &mut dyn HookedModel,
    setup: &PatchSetup,
) -> Result<patching::PatchGrid, HookError> {
    let metric = |y: &Tensor| mean_diff(y, &setup.a, &setup.b);
    let metric: &Metric<'_> = &metric;
    patching::patch_by_head_pos(m, &setup.clean, &setup.corrupted, HEAD_OUT, metric)
}

/// The verdicts' ids.
pub const ABLATION: &str = "induction.causal-ablation";
pub const PATCHING: &str = "induction.causal-patching";

/// Sequences of the validation set the causal verdicts use.
pub const N_CAUSAL: usize = 300;

/// Adds the causal verdicts to `s`: ablating a parent-copier head against a
/// non-parent head, and patching the parent heads' outputs at the query against
/// patching a non-parent head. `sel_heads` are the selector's heads, `dist`
/// each head's distance, `uniform` the uniform-attention baseline (`−log ŷ_y`).
/// Without a `formed` selector (a majority on the true parents) both verdicts
/// say "not judged" and fail: there are no parent copiers to test.
#[allow(clippy::too_many_arguments)]
pub fn verdicts(
    m: &mut dyn HookedModel,
    val: &MarkovData,
    truth: &[usize],
    sel_heads: &[usize],
    dist: &[usize],
    uniform: f64,
    floor: f64,
    formed: bool,
    s: &mut crate::run::summary::Summary,
) -> Result<(), HookError> {
    let not_judged = |m: String| {
        if formed {
            m
        } else {
            format!("not judged: the selector did not form on the true parents; {m}")
        }
    };
    let h = dist.len();
    let (batch, targets) = batch_of(val, N_CAUSAL);
    let clean = mean_nll(&m.run_with_hooks(&batch, &[])?, &targets, floor);
    let abl = head_ablations(m, &batch, &targets, h, floor)?;
    let mean = &abl[1].1;
    let parent: Vec<usize> = sel_heads
        .iter()
        .copied()
        .filter(|&hd| truth.contains(&dist[hd]))
        .collect();
    let other: Vec<usize> = (0..h).filter(|hd| !sel_heads.contains(hd)).collect();
    s.metric("causal.val_nll", clean);
    for (kind, v) in &abl {
        for (hd, x) in v.iter().enumerate() {
            s.metric(&format!("causal.ablate_{kind}.h{hd}"), *x);
        }
    }
    // The prediction (docs/induction.md, "Causal verdicts"): with a parent's copier
    // mean-ablated the query keeps only what the other heads copy, so no predictor
    // of it does better than the best Bayes posterior mean over those tokens (every
    // subset of the other heads' distances: with few counts a posterior over more
    // context cells is a worse estimator, so the best is taken); the loss lands at
    // or above that, to within two standard errors of the paired per-sequence
    // difference. A head outside the winning subset is read by nothing, so its
    // ablation raises the loss less than any parent head's.
    let probe = val.slice(0, batch.batch);
    let mut p = vec![0.0; val.vocab];
    let mut bayes_of = |dists: &[usize]| -> Vec<f64> {
        (0..probe.len())
            .map(|b| {
                predict(&probe, b, &Baseline::Bayes(dists.to_vec()), &mut p);
                nll(&p, probe.target(b), floor)
            })
            .collect()
    };
    let per_seq = |y: &Tensor| -> Vec<f64> {
        let s = y.shape.get(1).copied().unwrap_or(1).max(1);
        (0..targets.len())
            .map(|b| -y.data[b * s + targets[b]].max(floor).ln())
            .collect()
    };
    let mut rows = Vec::new();
    for &hd in &parent {
        let hk = patching::mean_hook(m, HEAD_OUT, &batch, batch.batch, Some(vec![hd]), None)?;
        let ablated = per_seq(&m.run_with_hooks(&batch, &[hk])?);
        let mut seen: Vec<usize> = (0..h).filter(|&k| k != hd).map(|k| dist[k]).collect();
        seen.sort_unstable();
        seen.dedup();
        let best = subsets(&seen)
            .into_iter()
            .map(|sub| bayes_of(&sub))
            .min_by(|a, b| mean_of(a).total_cmp(&mean_of(b)))
            .unwrap_or_default();
        let (gap, se) = paired(&ablated, &best);
        s.metric(&format!("causal.bayes_floor.h{hd}"), mean_of(&best));
        rows.push(Ablated {
            head: hd,
            loss: mean_of(&ablated),
            floor: mean_of(&best),
            gap,
            se,
        });
    }
    let other_rise = other
        .iter()
        .map(|&hd| mean[hd] - clean)
        .fold(f64::NEG_INFINITY, f64::max);
    s.verdict(
        ABLATION,
        "causal: mean-ablating a parent-copier head leaves the model no better than the Bayes predictor of what the other heads still copy; a non-parent head's ablation raises the loss less",
        &format!(
            "loss(ablate parent head) ≥ that Bayes loss − 2 s.e.; Δ(ablate non-parent) < the smallest parent Δ (clean {clean:.3}, uniform {uniform:.3})"
        ),
        "derivation in docs/induction.md (\"Causal verdicts\"): the best in-context Bayes posterior mean over the tokens the other heads copy (Baseline::Bayes on every subset of their distances, exact from the chain's Dirichlet prior, the same sequences) is what a predictor without the ablated head can reach; a head outside the winning kernel subset is read by nothing",
        not_judged(format!(
            "parent heads (head: ablated vs Bayes floor ± s.e.): {}; Δ non-parent heads {other:?}: {}",
            rows.iter()
                .map(|r| format!("{}: {:.4} vs {:.4} ± {:.4}", r.head, r.loss, r.floor, r.se))
                .collect::<Vec<_>>()
                .join(", "),
            if other.is_empty() { "none".to_string() } else { format!("{other_rise:+.4}") }
        )),
        formed && ablation_holds(&rows, clean, (!other.is_empty()).then_some(other_rise)),
    )
    .scored(
        rows.iter()
            .map(|r| r.gap + 2.0 * r.se)
            .fold(f64::INFINITY, f64::min),
        Some(0.0),
    );
    let setup = patch_setup(m, &batch, val.vocab, truth)?;
    let ep = patch_heads_at_query(m, &setup, &parent)?;
    let en = patch_heads_at_query(m, &setup, &other)?;
    s.metric("causal.patch_parents", ep);
    s.metric("causal.patch_non_parent", en);
    s.metric("causal.patch_sequences", setup.a.len() as f64);
    s.verdict(
        PATCHING,
        "causal: patching the parent heads' outputs at the query from clean into parent-corrupted sequences recovers most of the probability difference; a non-parent head does not",
        "effect parents ≥ 0.5; effect non-parent ≤ 0.25",
        "Chen et al. 2024: the layer-1 heads copy the parents into the query (the copier), so their outputs carry the parents' effect on the prediction; \"most\" read as ≥ 0.5 and \"does not\" as ≤ 0.25 (our bars; measured 0.976–0.999 against 0.000)",
        not_judged(format!(
            "parents {parent:?}: {ep:.3}; non-parent {other:?}: {en:.3} (on {} sequences)",
            setup.a.len()
        )),
        formed && ep >= 0.5 && en <= 0.25,
    )
    .scored(ep, Some(0.5));
    Ok(())
}

/// The mean `−log max(ŷ_y, floor)` of the unhooked model on `batch`.
pub fn mean_nll_of(
    m: &mut dyn HookedModel,
    batch: &Batch,
    targets: &[usize],
    floor: f64,
) -> Result<f64, HookError> {
    Ok(mean_nll(&m.run_with_hooks(batch, &[])?, targets, floor))
}

fn mean_of(x: &[f64]) -> f64 {
    x.iter().sum::<f64>() / x.len().max(1) as f64
}

/// Mean of `a − b` over paired samples and its standard error.
fn paired(a: &[f64], b: &[f64]) -> (f64, f64) {
    let d: Vec<f64> = a.iter().zip(b).map(|(x, y)| x - y).collect();
    let n = d.len().max(2) as f64;
    let m = mean_of(&d);
    let var = d.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0);
    (m, (var / n).sqrt())
}

/// One parent head's mean ablation against its Bayes floor.
#[derive(Clone, Copy, Debug)]
pub struct Ablated {
    pub head: usize,
    /// Mean validation loss with the head ablated.
    pub loss: f64,
    /// Mean loss of the best Bayes predictor of what the other heads copy.
    pub floor: f64,
    /// Mean paired difference loss − floor, and its standard error.
    pub gap: f64,
    pub se: f64,
}

/// The ablation verdict: every parent head's ablated loss is at or above its
/// floor (within 2 s.e.), and the worst non-parent rise (if any) is below the
/// smallest parent rise.
pub fn ablation_holds(rows: &[Ablated], clean: f64, other_rise: Option<f64>) -> bool {
    let smallest = rows
        .iter()
        .map(|r| r.loss - clean)
        .fold(f64::INFINITY, f64::min);
    !rows.is_empty()
        && rows.iter().all(|r| r.gap >= -2.0 * r.se)
        && other_rise.is_none_or(|o| o < smallest)
}

/// Every subset of `xs` (the empty one included), each sorted.
fn subsets(xs: &[usize]) -> Vec<Vec<usize>> {
    (0..1usize << xs.len())
        .map(|mask| {
            (0..xs.len())
                .filter(|i| mask >> i & 1 == 1)
                .map(|i| xs[i])
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(loss: f64, floor: f64, se: f64) -> Ablated {
        Ablated {
            head: 0,
            loss,
            floor,
            gap: loss - floor,
            se,
        }
    }

    /// Broken on purpose: an ablation that beats the floor by more than two
    /// standard errors, or a non-parent head that matters as much as a parent,
    /// fails the verdict; the trained model's shape passes.
    #[test]
    fn the_ablation_verdict_needs_the_floor_and_the_ordering() {
        let clean = 0.2;
        assert!(ablation_holds(&[row(0.39, 0.29, 0.02)], clean, Some(0.0)));
        assert!(ablation_holds(&[row(0.28, 0.29, 0.01)], clean, None));
        assert!(!ablation_holds(&[row(0.25, 0.29, 0.01)], clean, None));
        assert!(!ablation_holds(&[row(0.39, 0.29, 0.02)], clean, Some(0.2)));
        assert!(!ablation_holds(&[], clean, Some(0.0)));
        assert_eq!(subsets(&[2, 3]).len(), 4);
        assert!(subsets(&[2, 3]).contains(&vec![]));
    }
}
