//! One chunk's buffers: its activations (the cache the backward reads) and
//! gradients, every one allocated once, in [`Work::new`] (llm.c style). The
//! forward over them is `forward.rs`, the backward `backward.rs`.
//!
//! A chunk holds `n ≤ per` sequences of `T` positions as `rows = n·T` rows; every
//! `[rows, ·]` buffer below is the chunk's sequences one after another, so sequence
//! `s` is rows `s·T .. (s+1)·T` (TransformerLens's `[batch, pos, ·]` flattened).

use super::Gpt;
use crate::hooks::HookError;
use crate::layers::loss::cross_entropy_rows;
use crate::Float;
use std::ops::Range;

/// The layout of an activation handed to a visitor (for `n` sequences of `T`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `[n, T, d_model]`
    Resid,
    /// `[n, T, H, d_head]`
    Heads,
    /// `[n, H, T, T]`
    Pattern,
    /// `[n, T, d_mlp]`
    Mlp,
}

/// What the analysis forward calls at each hook point (`None` when training):
/// `Ok(true)` when it may have changed the activation.
pub(crate) type Visitor<'v, T> =
    Option<&'v mut dyn FnMut(&str, Kind, &mut [T]) -> Result<bool, HookError>>;

/// Hands `data` to the visitor: whether it may have changed it.
pub(super) fn visit<T>(
    v: &mut Visitor<'_, T>,
    name: impl FnOnce() -> String,
    kind: Kind,
    data: &mut [T],
) -> Result<bool, HookError> {
    match v {
        Some(f) => f(&name(), kind, data),
        None => Ok(false),
    }
}

fn zero<T: Float>(x: &mut [T]) {
    x.iter_mut().for_each(|v| *v = T::zero());
}

/// A chunk's activations for up to `per` sequences, and its gradient buffers.
#[derive(Clone)]
pub struct Work<T> {
    pub(super) per: usize,
    pub(super) t: usize,
    /// Sequences loaded now.
    pub(super) n: usize,
    // ids / labels: [rows]
    pub(super) ids: Vec<usize>,
    pub(super) labels: Vec<Option<usize>>,
    // pos: [rows, D], the positional embeddings added at layer 0 (standard only)
    pub(super) pos: Vec<T>,
    // resid[l]: [rows, D], l = 0..=L (resid[l] = blocks.l.hook_resid_pre)
    pub(super) resid: Vec<Vec<T>>,
    // per layer, with MLPs: resid_mid, ln2 [rows, D], mean2/rstd2 [rows],
    // pre/post [rows, d_mlp], mlp_out [rows, D]
    pub(super) mid: Vec<Vec<T>>,
    pub(super) ln2: Vec<Vec<T>>,
    pub(super) mean2: Vec<Vec<T>>,
    pub(super) rstd2: Vec<Vec<T>>,
    pub(super) pre: Vec<Vec<T>>,
    pub(super) post: Vec<Vec<T>>,
    pub(super) mlp_out: Vec<Vec<T>>,
    // slope_kept[l]: pre[l] holds gelu_new'(pre) instead of pre, as the forward
    // of a training step leaves it (`keep_slopes`), so that its backward needs
    // no second `exp`
    pub(super) slope_kept: Vec<bool>,
    pub(super) keep_slopes: bool,
    // per layer: ln1 [rows, D], mean1/rstd1 [rows] (with LN); q/k/v/z [rows, H·dh];
    // pattern [n, H, T, T]; attn_out [rows, D]; rpe bias [H, T, T] and mask
    pub(super) ln1: Vec<Vec<T>>,
    pub(super) mean1: Vec<Vec<T>>,
    pub(super) rstd1: Vec<Vec<T>>,
    pub(super) q: Vec<Vec<T>>,
    pub(super) k: Vec<Vec<T>>,
    pub(super) v: Vec<Vec<T>>,
    pub(super) z: Vec<Vec<T>>,
    pub(super) pattern: Vec<Vec<T>>,
    /// Per layer: `pattern` holds zeros past each causal block's keys, as the
    /// buffer is allocated and as the attention forward leaves it; cleared when
    /// a hook or a resumed forward is handed the pattern to write
    /// (`Attention::rest_zeroed`).
    pub(super) pattern_rest_zero: Vec<bool>,
    pub(super) attn_out: Vec<Vec<T>>,
    pub(super) bias: Vec<Vec<T>>,
    pub(super) mask: Vec<Vec<bool>>,
    // final: ln_final [rows, D], mean/rstd [rows]; logits and dlogits [rows, V]
    pub(super) lnf: Vec<T>,
    pub(super) meanf: Vec<T>,
    pub(super) rstdf: Vec<T>,
    pub(super) logits: Vec<T>,
    pub(super) dlogits: Vec<T>,
    /// Next-token loss of every row (nats).
    pub(super) tok_loss: Vec<f64>,
    pub(crate) loss_sum: f64,
    // backward scratch: dres/dh [rows, D], dq/dk/dv/dz [rows, H·dh],
    // dpre/dpost [rows, d_mlp], one [T, T] attention block, d_bias [H, T, T]
    pub(super) dres: Vec<T>,
    pub(super) dh: Vec<T>,
    pub(super) dq: Vec<T>,
    pub(super) dk: Vec<T>,
    pub(super) dv: Vec<T>,
    pub(super) dz: Vec<T>,
    pub(super) dpre: Vec<T>,
    pub(super) dpost: Vec<T>,
    pub(super) scratch: Vec<T>,
    pub(super) d_bias: Vec<T>,
    /// Gradients of every parameter, in visit order.
    pub(crate) grads: Vec<Vec<T>>,
}

impl<T: Float> Work<T> {
    pub(crate) fn new(m: &Gpt<T>, per: usize, t: usize) -> Self {
        let c = &m.cfg;
        let (l, rows, d) = (c.n_layers, per * t, c.d_model);
        let (hd, mlp) = (c.n_heads * c.d_head, c.d_mlp);
        let z = |n: usize| vec![T::zero(); n];
        let each = |n: usize, on: bool| if on { vec![z(n); l] } else { Vec::new() };
        let ln = m.ix.ln_f.is_some();
        let has_mlp = mlp > 0;
        let rpe = m.rpe.is_some();
        Work {
            per,
            t,
            n: 0,
            ids: vec![0; rows],
            labels: vec![None; rows],
            pos: z(rows * d),
            resid: vec![z(rows * d); l + 1],
            mid: each(rows * d, has_mlp),
            ln2: each(rows * d, has_mlp && ln),
            mean2: each(rows, has_mlp && ln),
            rstd2: each(rows, has_mlp && ln),
            pre: each(rows * mlp, has_mlp),
            post: each(rows * mlp, has_mlp),
            mlp_out: each(rows * d, has_mlp),
            slope_kept: vec![false; l],
            keep_slopes: false,
            ln1: each(rows * d, ln),
            mean1: each(rows, ln),
            rstd1: each(rows, ln),
            q: each(rows * hd, true),
            k: each(rows * hd, true),
            v: each(rows * hd, true),
            z: each(rows * hd, true),
            pattern: each(per * c.n_heads * t * t, true),
            pattern_rest_zero: vec![true; l],
            attn_out: each(rows * d, true),
            bias: each(c.n_heads * t * t, rpe),
            mask: if rpe {
                vec![vec![false; c.n_heads * t * t]; l]
            } else {
                Vec::new()
            },
            lnf: if ln { z(rows * d) } else { Vec::new() },
            meanf: if ln { z(rows) } else { Vec::new() },
            rstdf: if ln { z(rows) } else { Vec::new() },
            logits: z(rows * c.d_vocab),
            dlogits: z(rows * c.d_vocab),
            tok_loss: vec![0.0; rows],
            loss_sum: 0.0,
            dres: z(rows * d),
            dh: z(rows * d),
            dq: z(rows * hd),
            dk: z(rows * hd),
            dv: z(rows * hd),
            dz: z(rows * hd),
            dpre: z(rows * mlp),
            dpost: z(rows * mlp),
            scratch: z(t * t),
            d_bias: if rpe {
                z(c.n_heads * t * t)
            } else {
                Vec::new()
            },
            grads: m.params.iter().map(|p| z(p.numel())).collect(),
        }
    }

    /// Loads the sequences `items` of a `[B, stride]` token array: ids are each
    /// row's first `T`, labels the next `T` when `stride = T + 1` (training).
    pub(crate) fn load(&mut self, tokens: &[u32], items: Range<usize>, stride: usize) {
        let t = self.t;
        self.n = items.len();
        assert!(
            self.n <= self.per,
            "gpt: chunk of {} > {}",
            self.n,
            self.per
        );
        for (s, b) in items.enumerate() {
            let row = &tokens[b * stride..(b + 1) * stride];
            for p in 0..t {
                self.ids[s * t + p] = row[p] as usize;
                self.labels[s * t + p] = (stride > t).then(|| row[p + 1] as usize);
            }
        }
    }

    /// Zeroes the parameter gradients that `m`'s backward adds into, before a
    /// training step's: all but the linear maps' weights and biases that are
    /// not frozen, which the backward writes (the same bits as adding into
    /// zeros, without this pass over them).
    pub(crate) fn zero_grads_for(&mut self, m: &Gpt<T>) {
        for (i, g) in self.grads.iter_mut().enumerate() {
            let written = !m.frozen[i] && m.ix.linear_pairs().any(|(w, b)| i == w || i == b);
            if !written {
                zero(g);
            }
        }
    }

    /// Drops the labels of the loaded sequences `items` where `mask` (`[B, T]`)
    /// is false: those rows add no loss and no gradient.
    pub(crate) fn mask_labels(&mut self, mask: &[bool], items: Range<usize>) {
        let t = self.t;
        for (s, b) in items.enumerate() {
            for p in 0..t {
                if !mask[b * t + p] {
                    self.labels[s * t + p] = None;
                }
            }
        }
    }

    /// Loads inputs `[B, T]` and optional targets `[B, T]` for `items`.
    pub(crate) fn load_pair(
        &mut self,
        inputs: &[u32],
        targets: Option<&[u32]>,
        items: Range<usize>,
    ) {
        let t = self.t;
        self.load(inputs, items.clone(), t);
        if let Some(y) = targets {
            for (s, b) in items.enumerate() {
                for p in 0..t {
                    self.labels[s * t + p] = Some(y[b * t + p] as usize);
                }
            }
        }
    }

    /// Sequences loaded.
    pub fn n_seqs(&self) -> usize {
        self.n
    }
    /// Layer `l`'s attention pattern of sequence `s`: `[H, T, T]`.
    pub fn pattern(&self, l: usize, s: usize) -> &[T] {
        let n = self.pattern[l].len() / self.per;
        &self.pattern[l][s * n..(s + 1) * n]
    }
    /// Logits of sequence `s`: `[T, d_vocab]`.
    pub fn logits(&self, s: usize) -> &[T] {
        let n = self.logits.len() / self.per;
        &self.logits[s * n..(s + 1) * n]
    }
    /// Next-token loss at every position of sequence `s` (after an evaluation with targets).
    pub fn token_losses(&self, s: usize) -> &[f64] {
        &self.tok_loss[s * self.t..(s + 1) * self.t]
    }
    /// Layer `l`'s head outputs before `W_O` (`hook_z`), sequence `s`: `[T, H·d_head]`.
    pub fn z(&self, l: usize, s: usize) -> &[T] {
        let n = self.z[l].len() / self.per;
        &self.z[l][s * n..(s + 1) * n]
    }
    /// Residual stream into layer `l` (`l = n_layers`: after the last), sequence `s`: `[T, D]`.
    pub fn resid(&self, l: usize, s: usize) -> &[T] {
        let n = self.resid[l].len() / self.per;
        &self.resid[l][s * n..(s + 1) * n]
    }

    /// Per-row next-token losses, and `dlogits` scaled by `scale` (the batch mean's weight).
    pub(crate) fn loss_and_dlogits(&mut self, scale: f64) {
        let v = self.dlogits.len() / (self.per * self.t);
        let rows = self.n * self.t;
        let s = T::of(scale);
        let (tok_loss, loss_sum) = (&mut self.tok_loss, &mut self.loss_sum);
        *loss_sum = 0.0;
        cross_entropy_rows(
            &mut self.dlogits[..rows * v],
            &self.logits[..rows * v],
            &self.labels[..rows],
            v,
            1.0,
            |r, loss| {
                tok_loss[r] = loss;
                *loss_sum += loss;
            },
        );
        self.dlogits[..rows * v].iter_mut().for_each(|g| *g *= s);
    }

    /// Per-row losses only (evaluation).
    pub(crate) fn losses_only(&mut self) {
        self.loss_and_dlogits(1.0);
    }

    /// The analysis forward's logits gradient: `d` is `[n, T, d_vocab]`.
    pub(crate) fn set_dlogits(&mut self, d: &[f64]) {
        self.dlogits[..d.len()]
            .iter_mut()
            .zip(d)
            .for_each(|(a, &b)| *a = T::of(b));
    }
}
