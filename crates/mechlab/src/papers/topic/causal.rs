//! Causal check of the trained attention (attention presets): the dev MLM loss
//! through the hook points ([`super::hooks`]) with `blocks.0.attn.hook_pattern`
//! patched ([`Ablation::Patch`]).
//!
//! - **trained**: no hook (checked against the fused [`TopicMlm::loss`] on the
//!   same documents, the loss the dev curve logs);
//! - **uniform**: every query row uniform over the visible keys (masked keys 0,
//!   as the model hides them): what frozen uniform attention computes;
//! - **own** (identity check): the model's own pattern written back, which must
//!   leave the loss bit for bit unchanged;
//! - **permuted** (control): each query row's weights on the visible keys
//!   permuted at random (a fixed `Sample` sub-stream, no shared stream consumed):
//!   the same weight profile (entropy, peak) on other keys. If the trained
//!   attention helps through *where* it looks, this must lose about as much as
//!   uniform; if it helped only by being sharp or by its profile, it would not.
//!
//! The loss is the dev loss's: mean over chunks of `batch` documents of the
//! chunk's mean loss over its labelled positions, on the first [`N_DOCS`] dev
//! documents with their fixed dev masks.
//!
//! Prediction: `uniform > trained` and `permuted > trained` (the paper says the
//! trained attention looks at same-topic words and that this helps; it gives no
//! size, so the size is reported as a measurement, not judged), each by more than
//! [`Z_95`] standard errors of the paired per-document rise, so that attention
//! that learned nothing (a rise of 1e-6 nats on `topic-attention` without kept
//! tokens) does not pass; `own − trained = 0` exactly and
//! `|trained − fused| ≤ 1e-4 · fused` (engineering identities).

use super::data::MlmSet;
use super::model::{LossKind, TopicMlm};
use crate::patching::hook;
use crate::rng::{substream, Stream};
use mechlab_engine::hooks::{Ablation, Batch, HookError, HookedModel, Tensor};
use mechlab_engine::Float;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

/// The patched point.
pub const PATTERN: &str = "blocks.0.attn.hook_pattern";

/// Dev documents the check reads.
pub const N_DOCS: usize = 200;

/// `Sample` sub-stream index of the permutation control.
pub const PERMUTE_STREAM: u64 = 40;

/// The standard normal's 95th percentile: a rise must exceed this many
/// standard errors (a one-sided test at 5 %).
pub const Z_95: f64 = 1.645;

/// What replaces the pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatternPatch {
    /// No hook.
    None,
    /// Uniform over the visible keys.
    Uniform,
    /// The model's own pattern (the identity).
    Own,
    /// The model's own pattern with each query row's visible-key weights permuted.
    Permuted,
}

/// The dev losses of the four runs and the fused model's on the same documents.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct UniformAttention {
    pub docs: usize,
    pub fused: f64,
    pub trained: f64,
    pub uniform: f64,
    pub own: f64,
    pub permuted: f64,
    /// Standard errors of the uniform and permuted rises: the spread over
    /// documents of each document's paired rise (its mean loss patched minus
    /// clean), over √docs.
    pub se_uniform: f64,
    pub se_permuted: f64,
}

impl UniformAttention {
    pub fn delta_uniform(&self) -> f64 {
        self.uniform - self.trained
    }
    pub fn delta_permuted(&self) -> f64 {
        self.permuted - self.trained
    }
    pub fn delta_own(&self) -> f64 {
        self.own - self.trained
    }
    /// The prediction of the module doc: both rises above zero by more than
    /// [`Z_95`] standard errors (one-sided, 5 %), so a rise that documents'
    /// noise could give does not count.
    pub fn holds(&self) -> bool {
        (self.trained - self.fused).abs() <= 1e-4 * self.fused.abs()
            && self.delta_own() == 0.0
            && self.delta_uniform() > Z_95 * self.se_uniform
            && self.delta_permuted() > Z_95 * self.se_permuted
    }
}

/// Document `i` of `set` as a `[1, L]` batch with `[1, L]` targets (label or -1).
pub fn doc_batch(set: &MlmSet, i: usize) -> Batch {
    let r = set.range(i);
    let targets = r
        .clone()
        .map(|j| {
            if set.hidden[j] {
                set.label[j] as i64
            } else {
                -1
            }
        })
        .collect();
    Batch::new(set.input[r.clone()].to_vec(), 1, r.len()).with_targets(targets)
}

/// Sum over the labelled positions of the per-position loss (the model's loss
/// kind) of `[1, L, V]` logits.
fn doc_loss_sum(logits: &Tensor, targets: &[i64], kind: LossKind) -> f64 {
    let v = logits.shape[2];
    let mut total = 0.0;
    for (i, &t) in targets.iter().enumerate() {
        if t < 0 {
            continue;
        }
        let row = &logits.data[i * v..(i + 1) * v];
        let lab = t as usize;
        total += match kind {
            LossKind::CrossEntropy => {
                let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let lse = m + row.iter().map(|x| (x - m).exp()).sum::<f64>().ln();
                lse - row[lab]
            }
            LossKind::Mse => {
                row.iter()
                    .enumerate()
                    .map(|(k, x)| {
                        let d = x - if k == lab { 1.0 } else { 0.0 };
                        d * d
                    })
                    .sum::<f64>()
                    / v as f64
            }
        };
    }
    total
}

/// Uniform attention over the visible keys of `batch`, `[1, 1, L, L]`.
pub fn uniform_pattern(batch: &Batch) -> Tensor {
    let l = batch.seq_len;
    let vis: Vec<bool> = (0..l)
        .map(|j| batch.targets.get(j).is_none_or(|&t| t < 0))
        .collect();
    let u = 1.0 / vis.iter().filter(|v| **v).count().max(1) as f64;
    let mut data = vec![0.0; l * l];
    for (ij, x) in data.iter_mut().enumerate() {
        *x = if vis[ij % l] { u } else { 0.0 };
    }
    Tensor::new(vec![1, 1, l, l], data)
}

/// `pattern` `[1, 1, L, L]` with each row's weights on the visible keys permuted.
pub fn permute_rows(pattern: &Tensor, batch: &Batch, rng: &mut ChaCha8Rng) -> Tensor {
    let l = batch.seq_len;
    let vis: Vec<usize> = (0..l)
        .filter(|&j| batch.targets.get(j).is_none_or(|&t| t < 0))
        .collect();
    let mut out = pattern.clone();
    let mut perm: Vec<usize> = (0..vis.len()).collect();
    for i in 0..l {
        perm.shuffle(rng);
        let row = &pattern.data[i * l..(i + 1) * l];
        let dst = &mut out.data[i * l..(i + 1) * l];
        for (k, &j) in vis.iter().enumerate() {
            dst[j] = row[vis[perm[k]]];
        }
    }
    out
}

/// The dev loss of `m` on the first `n` documents of `set` through
/// `run_with_hooks`, the pattern replaced as `patch` says; `batch` documents per
/// chunk as in [`super::training::dev_loss`].
pub fn hooked_dev_loss<T: Float>(
    m: &mut TopicMlm<T>,
    set: &MlmSet,
    n: usize,
    batch: usize,
    patch: PatternPatch,
    seed: u64,
) -> Result<f64, HookError> {
    Ok(hooked_dev_losses(m, set, n, batch, &[patch], seed)?[0])
}

/// [`hooked_dev_loss`] for several patches in one pass over the documents (one
/// clean forward per document; the permutation stream is drawn in document order
/// either way).
pub fn hooked_dev_losses<T: Float>(
    m: &mut TopicMlm<T>,
    set: &MlmSet,
    n: usize,
    batch: usize,
    patches: &[PatternPatch],
    seed: u64,
) -> Result<Vec<f64>, HookError> {
    let docs = hooked_doc_losses(m, set, n, patches, seed)?;
    Ok(dev_mean(&docs, batch, patches.len()))
}

/// Every document's losses under each of `patches` (see [`hooked_dev_losses`]).
fn hooked_doc_losses<T: Float>(
    m: &mut TopicMlm<T>,
    set: &MlmSet,
    n: usize,
    patches: &[PatternPatch],
    seed: u64,
) -> Result<Vec<DocLoss>, HookError> {
    let mut rng = substream(seed, Stream::Sample, PERMUTE_STREAM);
    let mut patcher = |k: usize, own: &Tensor, b: &Batch, _: usize| match patches[k] {
        PatternPatch::None => None,
        PatternPatch::Uniform => Some(uniform_pattern(b)),
        PatternPatch::Own => Some(own.clone()),
        PatternPatch::Permuted => Some(permute_rows(own, b, &mut rng)),
    };
    patched_doc_losses(m, set, n, patches.len(), &mut patcher)
}

/// Builds the pattern of patch `k` from the model's own pattern on document `i`
/// (its `[1, L]` batch); `None` runs the document clean.
pub type Patcher<'a> = dyn FnMut(usize, &Tensor, &Batch, usize) -> Option<Tensor> + 'a;

/// The dev loss (as [`hooked_dev_loss`] computes it) under each of `n_patches`
/// patterns that `patcher` builds, document by document, patch by patch.
pub fn patched_dev_losses<T: Float>(
    m: &mut TopicMlm<T>,
    set: &MlmSet,
    n: usize,
    batch: usize,
    n_patches: usize,
    patcher: &mut Patcher<'_>,
) -> Result<Vec<f64>, HookError> {
    let docs = patched_doc_losses(m, set, n, n_patches, patcher)?;
    Ok(dev_mean(&docs, batch, n_patches))
}

/// One document's summed loss under each patch and its labelled positions.
#[derive(Clone, Debug)]
pub struct DocLoss {
    pub sums: Vec<f64>,
    pub labels: usize,
}

/// Every document's losses under each of `n_patches` patterns (see
/// [`patched_dev_losses`]).
pub fn patched_doc_losses<T: Float>(
    m: &mut TopicMlm<T>,
    set: &MlmSet,
    n: usize,
    n_patches: usize,
    patcher: &mut Patcher<'_>,
) -> Result<Vec<DocLoss>, HookError> {
    let kind = m.cfg.loss;
    let mut out = Vec::with_capacity(n.min(set.len()));
    for i in 0..n.min(set.len()) {
        let b = doc_batch(set, i);
        let labels = b.targets.iter().filter(|&&t| t >= 0).count();
        let (clean, mut cache) = m.run_with_cache(&b, &[PATTERN])?;
        let own = cache.remove(PATTERN).ok_or_else(|| HookError::Invalid {
            name: PATTERN.into(),
            reason: "the model returned no pattern".into(),
        })?;
        let mut sums = vec![0.0; n_patches];
        for (k, s) in sums.iter_mut().enumerate() {
            let logits = match patcher(k, &own, &b, i) {
                None => clean.clone(),
                Some(t) => {
                    m.run_with_hooks(&b, &[hook(PATTERN, Ablation::patch(t), None, None)])?
                }
            };
            *s = doc_loss_sum(&logits, &b.targets, kind);
        }
        out.push(DocLoss { sums, labels });
    }
    Ok(out)
}

/// The dev loss's reduction: the mean over chunks of `batch` documents of the
/// chunk's summed loss over its labelled positions.
fn dev_mean(docs: &[DocLoss], batch: usize, n_patches: usize) -> Vec<f64> {
    let chunks: Vec<&[DocLoss]> = docs.chunks(batch.max(1)).collect();
    let mut total = vec![0.0; n_patches];
    for c in &chunks {
        let mut sum = vec![0.0; n_patches];
        for d in c.iter() {
            for (s, x) in sum.iter_mut().zip(&d.sums) {
                *s += x;
            }
        }
        let n_lab: usize = c.iter().map(|d| d.labels).sum();
        if n_lab > 0 {
            for (t, s) in total.iter_mut().zip(&sum) {
                *t += s / n_lab as f64;
            }
        }
    }
    let nc = chunks.len().max(1) as f64;
    total.into_iter().map(|t| t / nc).collect()
}

/// The standard error of the mean per-document rise of patch `k` over patch 0
/// (each document's rise in mean loss per labelled position).
fn rise_se(docs: &[DocLoss], k: usize) -> f64 {
    let d: Vec<f64> = docs
        .iter()
        .filter(|d| d.labels > 0)
        .map(|d| (d.sums[k] - d.sums[0]) / d.labels as f64)
        .collect();
    let n = d.len() as f64;
    if n < 2.0 {
        return f64::INFINITY;
    }
    let mean = d.iter().sum::<f64>() / n;
    let var = d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (var / n).sqrt()
}

/// The four runs and the fused loss on the first [`N_DOCS`] documents of `dev`.
pub fn uniform_attention<T: Float>(
    m: &mut TopicMlm<T>,
    dev: &MlmSet,
    batch: usize,
    seed: u64,
) -> Result<UniformAttention, HookError> {
    let n = N_DOCS.min(dev.len());
    let ids: Vec<u32> = (0..n as u32).collect();
    let chunks: Vec<&[u32]> = ids.chunks(batch.max(1)).collect();
    let fused = chunks.iter().map(|c| m.loss(dev, c)).sum::<f64>() / chunks.len().max(1) as f64;
    let all = [
        PatternPatch::None,
        PatternPatch::Uniform,
        PatternPatch::Own,
        PatternPatch::Permuted,
    ];
    let docs = hooked_doc_losses(m, dev, n, &all, seed)?;
    let l = dev_mean(&docs, batch, all.len());
    Ok(UniformAttention {
        docs: n,
        fused,
        trained: l[0],
        uniform: l[1],
        own: l[2],
        permuted: l[3],
        se_uniform: rise_se(&docs, 1),
        se_permuted: rise_se(&docs, 3),
    })
}

/// Adds the verdict and its metrics to `s`.
pub fn verdict(r: &UniformAttention, s: &mut crate::run::summary::Summary) {
    for (k, v) in [
        ("causal.uniform_attention.docs", r.docs as f64),
        ("causal.uniform_attention.fused", r.fused),
        ("causal.uniform_attention.trained", r.trained),
        ("causal.uniform_attention.uniform", r.uniform),
        ("causal.uniform_attention.own", r.own),
        ("causal.uniform_attention.permuted", r.permuted),
        ("causal.uniform_attention.se_uniform", r.se_uniform),
        ("causal.uniform_attention.se_permuted", r.se_permuted),
    ] {
        s.metric(k, v);
    }
    s.verdict(
        "topic.causal-uniform-attention",
        "causal: replacing the trained attention pattern by uniform attention over the visible keys raises the dev loss; the same weights on shuffled keys raise it too (the gain is where attention looks), the model's own pattern changes nothing",
        "Δ uniform > 1.645 s.e.; Δ permuted > 1.645 s.e.; Δ own = 0 exactly; hooked = fused loss to 1e-4",
        "Li, Li, Risteski 2023: trained attention weights same-topic words, which lowers the MLM loss (the direction is the prediction; the paper gives no size, reported below as a measurement); a rise counts when it exceeds the documents' noise, one-sided at 5 % over the paired per-document rises; Δ own and hooked = fused are identities of the hook code",
        format!(
            "trained {:.4} (fused {:.4}), Δ uniform {:+.4} ± {:.4} ({:+.2} %), Δ permuted {:+.4} ± {:.4}, Δ own {:+e}, on {} dev documents",
            r.trained,
            r.fused,
            r.delta_uniform(),
            r.se_uniform,
            100.0 * r.delta_uniform() / r.trained,
            r.delta_permuted(),
            r.se_permuted,
            r.delta_own(),
            r.docs
        ),
        r.holds(),
    )
    .scored(r.delta_uniform(), Some(Z_95 * r.se_uniform));
    s.measurement(
        "topic.causal-uniform-attention.size",
        "rise of the dev loss under uniform attention, relative to the trained loss",
        format!("{:+.2} %", 100.0 * r.delta_uniform() / r.trained),
        "the paper predicts a rise, not its size (docs/topic.md, \"Causal check\")",
    );
}
