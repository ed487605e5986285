//! One chunk's activations (the cache) and gradients, and the forward and
//! backward over them (llm.c style: every buffer allocated once, in [`Work::new`]).
//! (One file past 600 lines: the forward, the backward and the buffers they
//! share are read side by side, as in the papers' hand-written models; the
//! backward also hands analysis the gradient at each hook point.)
//!
//! A chunk holds `n ≤ per` sequences of `T` positions as `rows = n·T` rows; every
//! `[rows, ·]` buffer below is the chunk's sequences one after another, so sequence
//! `s` is rows `s·T .. (s+1)·T` (TransformerLens's `[batch, pos, ·]` flattened).

use super::ActFn;
use super::{Gpt, LN_EPS};
use crate::hooks::HookError;
use crate::layers::attention::{Attention, AttnExtras};
use crate::layers::loss::cross_entropy_rows;
use crate::layers::{embedding, gelu, layernorm, linear, relu};
use crate::matmul::{matmul_strided, Op};
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

/// What the analysis forward calls at each hook point (`None` when training).
pub(crate) type Visitor<'v, T> =
    Option<&'v mut dyn FnMut(&str, Kind, &mut [T]) -> Result<(), HookError>>;

fn visit<T>(
    v: &mut Visitor<'_, T>,
    name: impl FnOnce() -> String,
    kind: Kind,
    data: &mut [T],
) -> Result<(), HookError> {
    match v {
        Some(f) => f(&name(), kind, data),
        None => Ok(()),
    }
}

/// What the analysis backward calls with the gradient at each hook point
/// (`None` when training): the loss's gradient w.r.t. that activation.
pub(crate) type GradVisitor<'v, T> = Option<&'v mut dyn FnMut(&str, Kind, &[T])>;

fn grad_at<T>(g: &mut GradVisitor<'_, T>, name: impl FnOnce() -> String, kind: Kind, data: &[T]) {
    if let Some(f) = g {
        f(&name(), kind, data);
    }
}

/// Two distinct gradient buffers at once.
fn two<T>(g: &mut [Vec<T>], a: usize, b: usize) -> (&mut [T], &mut [T]) {
    assert_ne!(a, b, "gpt: one buffer asked for twice");
    if a < b {
        let (lo, hi) = g.split_at_mut(b);
        (&mut lo[a], &mut hi[0])
    } else {
        let (lo, hi) = g.split_at_mut(a);
        (&mut hi[0], &mut lo[b])
    }
}

/// A linear layer's backward into `g`: `dx += dy·W` when asked, and the
/// weight and the bias gradient each unless it is frozen.
#[allow(clippy::too_many_arguments)]
fn linear_backward<T: Float>(
    m: &Gpt<T>,
    g: &mut [Vec<T>],
    dx: Option<&mut [T]>,
    (w, b): (usize, usize),
    dy: &[T],
    x: &[T],
    rows: usize,
    d_in: usize,
    d_out: usize,
) {
    if m.frozen[w] {
        if let Some(dx) = dx {
            linear::backward_input(dx, dy, m.value(w), rows, d_in, d_out);
        }
        if !m.frozen[b] {
            // the bias alone: the column sums of dy
            for row in dy.chunks_exact(d_out) {
                g[b].iter_mut().zip(row).for_each(|(a, &v)| *a += v);
            }
        }
        return;
    }
    let (gw, gb) = two(g, w, b);
    let gb = (!m.frozen[b]).then_some(gb);
    linear::backward(dx, gw, gb, dy, x, m.value(w), rows, d_in, d_out);
}

/// `dx += ` the input gradient of an optional LayerNorm (its parameters' indices
/// and saved `mean`, `rstd`; `None`: the identity), and its `dγ`, `dβ` into `g`.
#[allow(clippy::too_many_arguments)]
fn norm_backward<T: Float>(
    m: &Gpt<T>,
    g: &mut [Vec<T>],
    ln: Option<(usize, usize, &[T], &[T])>,
    dx: &mut [T],
    dy: &[T],
    x: &[T],
    rows: usize,
    d: usize,
) {
    // dy, x: [rows, D], mean/rstd: [rows] -> dx: [rows, D] (+=)
    match ln {
        Some((w, b, mean, rstd)) => {
            let (gw, gb) = two(g, w, b);
            layernorm::backward(
                dx,
                Some(gw),
                Some(gb),
                dy,
                x,
                mean,
                rstd,
                m.value(w),
                rows,
                d,
            );
        }
        None => dx.iter_mut().zip(dy).for_each(|(a, &b)| *a += b),
    }
}

fn zero<T: Float>(x: &mut [T]) {
    x.iter_mut().for_each(|v| *v = T::zero());
}

/// A chunk's activations for up to `per` sequences, and its gradient buffers.
#[derive(Clone)]
pub struct Work<T> {
    per: usize,
    t: usize,
    /// Sequences loaded now.
    n: usize,
    // ids / labels: [rows]
    ids: Vec<usize>,
    labels: Vec<Option<usize>>,
    // pos: [rows, D], the positional embeddings added at layer 0 (standard only)
    pos: Vec<T>,
    // resid[l]: [rows, D], l = 0..=L (resid[l] = blocks.l.hook_resid_pre)
    resid: Vec<Vec<T>>,
    // per layer, with MLPs: resid_mid, ln2 [rows, D], mean2/rstd2 [rows],
    // pre/post [rows, d_mlp], mlp_out [rows, D]
    mid: Vec<Vec<T>>,
    ln2: Vec<Vec<T>>,
    mean2: Vec<Vec<T>>,
    rstd2: Vec<Vec<T>>,
    pre: Vec<Vec<T>>,
    post: Vec<Vec<T>>,
    mlp_out: Vec<Vec<T>>,
    // per layer: ln1 [rows, D], mean1/rstd1 [rows] (with LN); q/k/v/z [rows, H·dh];
    // pattern [n, H, T, T]; attn_out [rows, D]; rpe bias [H, T, T] and mask
    ln1: Vec<Vec<T>>,
    mean1: Vec<Vec<T>>,
    rstd1: Vec<Vec<T>>,
    q: Vec<Vec<T>>,
    k: Vec<Vec<T>>,
    v: Vec<Vec<T>>,
    z: Vec<Vec<T>>,
    pattern: Vec<Vec<T>>,
    attn_out: Vec<Vec<T>>,
    bias: Vec<Vec<T>>,
    mask: Vec<Vec<bool>>,
    // final: ln_final [rows, D], mean/rstd [rows]; logits and dlogits [rows, V]
    lnf: Vec<T>,
    meanf: Vec<T>,
    rstdf: Vec<T>,
    logits: Vec<T>,
    dlogits: Vec<T>,
    /// Next-token loss of every row (nats).
    tok_loss: Vec<f64>,
    pub(crate) loss_sum: f64,
    // backward scratch: dres/dh [rows, D], dq/dk/dv/dz [rows, H·dh],
    // dpre/dpost [rows, d_mlp], one [T, T] attention block, d_bias [H, T, T]
    dres: Vec<T>,
    dh: Vec<T>,
    dq: Vec<T>,
    dk: Vec<T>,
    dv: Vec<T>,
    dz: Vec<T>,
    dpre: Vec<T>,
    dpost: Vec<T>,
    scratch: Vec<T>,
    d_bias: Vec<T>,
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
            ln1: each(rows * d, ln),
            mean1: each(rows, ln),
            rstd1: each(rows, ln),
            q: each(rows * hd, true),
            k: each(rows * hd, true),
            v: each(rows * hd, true),
            z: each(rows * hd, true),
            pattern: each(per * c.n_heads * t * t, true),
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
    pub(crate) fn load(&mut self, tokens: &[u32], items: Range<usize>, stride: usize, train: bool) {
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
        if train {
            self.zero_grads();
        }
    }

    /// Zeroes every parameter gradient of the chunk (before a backward).
    pub(crate) fn zero_grads(&mut self) {
        self.grads.iter_mut().for_each(|g| zero(g));
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
        self.load(inputs, items.clone(), t, false);
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

    /// The forward pass over the loaded sequences, calling `vis` at every hook point.
    pub(crate) fn forward(
        &mut self,
        m: &Gpt<T>,
        vis: &mut Visitor<'_, T>,
    ) -> Result<(), HookError> {
        let c = &m.cfg;
        let (n, t, d, nh, dh) = (self.n, self.t, c.d_model, c.n_heads, c.d_head);
        let (rows, hd) = (n * t, nh * dh);
        let (nd, nhd) = (rows * d, rows * hd);
        let ix = &m.ix;
        // embeddings
        let x0 = &mut self.resid[0][..nd];
        embedding::forward(x0, &self.ids[..rows], m.value(ix.w_e), d);
        visit(vis, || "hook_embed".into(), Kind::Resid, x0)?;
        if let Some(wp) = ix.w_pos {
            let pos = &mut self.pos[..nd];
            for (r, row) in pos.chunks_exact_mut(d).enumerate() {
                let p = r % t;
                row.copy_from_slice(&m.value(wp)[p * d..(p + 1) * d]);
            }
            visit(vis, || "hook_pos_embed".into(), Kind::Resid, pos)?;
            x0.iter_mut().zip(pos.iter()).for_each(|(a, &b)| *a += b);
        }
        let attn = Attention::new(nh, t, t, dh, dh).with_causal(true);
        let pat_len = nh * t * t;
        for (l, bi) in ix.blocks.iter().enumerate() {
            visit(
                vis,
                || format!("blocks.{l}.hook_resid_pre"),
                Kind::Resid,
                &mut self.resid[l][..nd],
            )?;
            let hin: &[T] = match bi.ln1 {
                Some((w, b)) => {
                    layernorm::forward(
                        &mut self.ln1[l][..nd],
                        &mut self.mean1[l][..rows],
                        &mut self.rstd1[l][..rows],
                        &self.resid[l][..nd],
                        m.value(w),
                        m.value(b),
                        rows,
                        d,
                        LN_EPS,
                    );
                    &self.ln1[l][..nd]
                }
                None => &self.resid[l][..nd],
            };
            for (buf, w, b, name) in [
                (&mut self.q[l], bi.w_q, bi.b_q, "q"),
                (&mut self.k[l], bi.w_k, bi.b_k, "k"),
                (&mut self.v[l], bi.w_v, bi.b_v, "v"),
            ] {
                let y = &mut buf[..nhd];
                linear::forward(y, hin, m.value(w), Some(m.value(b)), rows, d, hd);
                visit(
                    vis,
                    || format!("blocks.{l}.attn.hook_{name}"),
                    Kind::Heads,
                    y,
                )?;
            }
            if let (Some(rpe), Some(ti)) = (&m.rpe, bi.rpe) {
                rpe.forward(&mut self.bias[l], &mut self.mask[l], m.value(ti), t);
            }
            let ex = match m.rpe {
                Some(_) => AttnExtras {
                    bias: Some(&self.bias[l][..]),
                    mask: Some(&self.mask[l][..]),
                    key_mask: None,
                },
                None => AttnExtras::default(),
            };
            let (q, k, v) = (&self.q[l], &self.k[l], &self.v[l]);
            for s in 0..n {
                let (sq, sp) = (s * t * hd..(s + 1) * t * hd, s * pat_len..(s + 1) * pat_len);
                attn.forward(
                    &mut self.z[l][sq.clone()],
                    &mut self.pattern[l][sp],
                    &q[sq.clone()],
                    &k[sq.clone()],
                    &v[sq],
                    &ex,
                );
            }
            if vis.is_some() {
                // a hook may change the pattern: z is recomputed from what it left
                visit(
                    vis,
                    || format!("blocks.{l}.attn.hook_pattern"),
                    Kind::Pattern,
                    &mut self.pattern[l][..n * pat_len],
                )?;
                for s in 0..n {
                    for h in 0..nh {
                        let o = s * t * hd + h * dh;
                        matmul_strided(
                            &mut self.z[l][o..],
                            hd,
                            &self.pattern[l][s * pat_len + h * t * t..],
                            t,
                            Op::N,
                            &v[o..],
                            hd,
                            Op::N,
                            t,
                            t,
                            dh,
                            false,
                        );
                    }
                }
            }
            let zl = &mut self.z[l][..nhd];
            visit(vis, || format!("blocks.{l}.attn.hook_z"), Kind::Heads, zl)?;
            let ao = &mut self.attn_out[l][..nd];
            linear::forward(ao, zl, m.value(bi.w_o), Some(m.value(bi.b_o)), rows, hd, d);
            visit(vis, || format!("blocks.{l}.hook_attn_out"), Kind::Resid, ao)?;
            let (before, after) = self.resid.split_at_mut(l + 1);
            let (r_in, r_out) = (&before[l][..nd], &mut after[0][..nd]);
            match bi.mlp {
                None => {
                    r_out
                        .iter_mut()
                        .zip(r_in.iter().zip(ao.iter()))
                        .for_each(|(o, (&a, &b))| *o = a + b);
                }
                Some([wi, bi_, wo, bo]) => {
                    let mid = &mut self.mid[l][..nd];
                    mid.iter_mut()
                        .zip(r_in.iter().zip(ao.iter()))
                        .for_each(|(o, (&a, &b))| *o = a + b);
                    visit(
                        vis,
                        || format!("blocks.{l}.hook_resid_mid"),
                        Kind::Resid,
                        mid,
                    )?;
                    let h2: &[T] = match bi.ln2 {
                        Some((w, b)) => {
                            layernorm::forward(
                                &mut self.ln2[l][..nd],
                                &mut self.mean2[l][..rows],
                                &mut self.rstd2[l][..rows],
                                mid,
                                m.value(w),
                                m.value(b),
                                rows,
                                d,
                                LN_EPS,
                            );
                            &self.ln2[l][..nd]
                        }
                        None => mid,
                    };
                    let dm = c.d_mlp;
                    let pre = &mut self.pre[l][..rows * dm];
                    linear::forward(pre, h2, m.value(wi), Some(m.value(bi_)), rows, d, dm);
                    visit(vis, || format!("blocks.{l}.mlp.hook_pre"), Kind::Mlp, pre)?;
                    let post = &mut self.post[l][..rows * dm];
                    match c.act_fn {
                        ActFn::GeluNew => gelu::forward(post, pre),
                        ActFn::Relu => relu::forward(post, pre),
                        ActFn::Gelu => gelu::exact_forward(post, pre),
                    }
                    visit(vis, || format!("blocks.{l}.mlp.hook_post"), Kind::Mlp, post)?;
                    let mo = &mut self.mlp_out[l][..nd];
                    linear::forward(mo, post, m.value(wo), Some(m.value(bo)), rows, dm, d);
                    visit(vis, || format!("blocks.{l}.hook_mlp_out"), Kind::Resid, mo)?;
                    let mid = &self.mid[l][..nd];
                    r_out
                        .iter_mut()
                        .zip(mid.iter().zip(mo.iter()))
                        .for_each(|(o, (&a, &b))| *o = a + b);
                }
            }
            visit(
                vis,
                || format!("blocks.{l}.hook_resid_post"),
                Kind::Resid,
                r_out,
            )?;
        }
        let last = &self.resid[c.n_layers][..nd];
        let hf: &[T] = match ix.ln_f {
            Some((w, b)) => {
                layernorm::forward(
                    &mut self.lnf[..nd],
                    &mut self.meanf[..rows],
                    &mut self.rstdf[..rows],
                    last,
                    m.value(w),
                    m.value(b),
                    rows,
                    d,
                    LN_EPS,
                );
                &self.lnf[..nd]
            }
            None => last,
        };
        let v = c.d_vocab;
        linear::forward(
            &mut self.logits[..rows * v],
            hf,
            m.value(ix.w_u),
            Some(m.value(ix.b_u)),
            rows,
            d,
            v,
        );
        Ok(())
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

    /// The backward pass from `dlogits` into [`Work::grads`] (zeroed by `load`).
    pub(crate) fn backward(&mut self, m: &Gpt<T>) {
        self.backward_visit(m, &mut None);
    }

    /// The analysis forward's logits gradient: `d` is `[n, T, d_vocab]`.
    pub(crate) fn set_dlogits(&mut self, d: &[f64]) {
        self.dlogits[..d.len()]
            .iter_mut()
            .zip(d)
            .for_each(|(a, &b)| *a = T::of(b));
    }

    /// [`Work::backward`], handing the gradient at every hook point to `gv`
    /// as the backward reaches it (`hook_pattern`'s is `dz · vᵀ`, formed only
    /// for a visitor).
    pub(crate) fn backward_visit(&mut self, m: &Gpt<T>, gv: &mut GradVisitor<'_, T>) {
        let c = &m.cfg;
        let (n, t, d, nh, dh) = (self.n, self.t, c.d_model, c.n_heads, c.d_head);
        let (rows, hd, v) = (n * t, nh * dh, c.d_vocab);
        let (nd, nhd) = (rows * d, rows * hd);
        let ix = &m.ix;
        let g = &mut self.grads;
        let (dres, dh_) = (&mut self.dres[..nd], &mut self.dh[..nd]);
        // unembedding and final norm
        let last = &self.resid[c.n_layers][..nd];
        let hf = if ix.ln_f.is_some() {
            &self.lnf[..nd]
        } else {
            last
        };
        zero(dh_);
        linear_backward(
            m,
            g,
            Some(dh_),
            (ix.w_u, ix.b_u),
            &self.dlogits[..rows * v],
            hf,
            rows,
            d,
            v,
        );
        zero(dres);
        let stats = ix
            .ln_f
            .map(|(w, b)| (w, b, &self.meanf[..rows], &self.rstdf[..rows]));
        norm_backward(m, g, stats, dres, dh_, last, rows, d);
        let attn = Attention::new(nh, t, t, dh, dh).with_causal(true);
        let pat_len = nh * t * t;
        for (l, bi) in ix.blocks.iter().enumerate().rev() {
            // dres: dL/d resid_post of layer l
            grad_at(
                gv,
                || format!("blocks.{l}.hook_resid_post"),
                Kind::Resid,
                dres,
            );
            if bi.mlp.is_some() {
                grad_at(gv, || format!("blocks.{l}.hook_mlp_out"), Kind::Resid, dres);
            }
            if let Some([wi, bi_, wo, bo]) = bi.mlp {
                let dm = c.d_mlp;
                let (dpost, dpre) = (&mut self.dpost[..rows * dm], &mut self.dpre[..rows * dm]);
                zero(dpost);
                linear_backward(
                    m,
                    g,
                    Some(dpost),
                    (wo, bo),
                    dres,
                    &self.post[l][..rows * dm],
                    rows,
                    dm,
                    d,
                );
                grad_at(gv, || format!("blocks.{l}.mlp.hook_post"), Kind::Mlp, dpost);
                zero(dpre);
                let pre = &self.pre[l][..rows * dm];
                match c.act_fn {
                    ActFn::GeluNew => gelu::backward(dpre, dpost, pre),
                    ActFn::Relu => relu::backward(dpre, dpost, pre),
                    ActFn::Gelu => gelu::exact_backward(dpre, dpost, pre),
                }
                grad_at(gv, || format!("blocks.{l}.mlp.hook_pre"), Kind::Mlp, dpre);
                let mid = &self.mid[l][..nd];
                let h2 = if bi.ln2.is_some() {
                    &self.ln2[l][..nd]
                } else {
                    mid
                };
                zero(dh_);
                linear_backward(m, g, Some(dh_), (wi, bi_), dpre, h2, rows, d, dm);
                let stats = bi
                    .ln2
                    .map(|(w, b)| (w, b, &self.mean2[l][..rows], &self.rstd2[l][..rows]));
                norm_backward(m, g, stats, dres, dh_, mid, rows, d);
            }
            // dres: dL/d resid_mid (= d attn_out)
            if bi.mlp.is_some() {
                grad_at(
                    gv,
                    || format!("blocks.{l}.hook_resid_mid"),
                    Kind::Resid,
                    dres,
                );
            }
            grad_at(
                gv,
                || format!("blocks.{l}.hook_attn_out"),
                Kind::Resid,
                dres,
            );
            let dz = &mut self.dz[..nhd];
            zero(dz);
            linear_backward(
                m,
                g,
                Some(dz),
                (bi.w_o, bi.b_o),
                dres,
                &self.z[l][..nhd],
                rows,
                hd,
                d,
            );
            grad_at(gv, || format!("blocks.{l}.attn.hook_z"), Kind::Heads, dz);
            if gv.is_some() {
                // d pattern[h, q, k] = Σ_c dz[q, h, c] · v[k, h, c]
                let mut dp = vec![T::zero(); n * pat_len];
                for s in 0..n {
                    for h in 0..nh {
                        let o = s * t * hd + h * dh;
                        matmul_strided(
                            &mut dp[s * pat_len + h * t * t..],
                            t,
                            &dz[o..],
                            hd,
                            Op::N,
                            &self.v[l][o..],
                            hd,
                            Op::T,
                            t,
                            dh,
                            t,
                            false,
                        );
                    }
                }
                grad_at(
                    gv,
                    || format!("blocks.{l}.attn.hook_pattern"),
                    Kind::Pattern,
                    &dp,
                );
            }
            let (dq, dk, dv) = (
                &mut self.dq[..nhd],
                &mut self.dk[..nhd],
                &mut self.dv[..nhd],
            );
            zero(dq);
            zero(dk);
            zero(dv);
            zero(&mut self.d_bias);
            let rpe_on = m.rpe.is_some();
            for s in 0..n {
                let sq = s * t * hd..(s + 1) * t * hd;
                let d_bias = if rpe_on {
                    Some(&mut self.d_bias[..])
                } else {
                    None
                };
                attn.backward(
                    &mut dq[sq.clone()],
                    &mut dk[sq.clone()],
                    &mut dv[sq.clone()],
                    d_bias,
                    &mut self.scratch,
                    &dz[sq.clone()],
                    &self.pattern[l][s * pat_len..(s + 1) * pat_len],
                    &self.q[l][sq.clone()],
                    &self.k[l][sq.clone()],
                    &self.v[l][sq],
                );
            }
            if let (Some(rpe), Some(ti)) = (&m.rpe, bi.rpe) {
                rpe.backward(&mut g[ti], &self.d_bias, t);
            }
            for (name, dy) in [("q", &*dq), ("k", &*dk), ("v", &*dv)] {
                grad_at(
                    gv,
                    || format!("blocks.{l}.attn.hook_{name}"),
                    Kind::Heads,
                    dy,
                );
            }
            let r_in = &self.resid[l][..nd];
            let hin = if bi.ln1.is_some() {
                &self.ln1[l][..nd]
            } else {
                r_in
            };
            zero(dh_);
            for (dy, w, b) in [
                (&*dq, bi.w_q, bi.b_q),
                (&*dk, bi.w_k, bi.b_k),
                (&*dv, bi.w_v, bi.b_v),
            ] {
                linear_backward(m, g, Some(&mut *dh_), (w, b), dy, hin, rows, d, hd);
            }
            let stats = bi
                .ln1
                .map(|(w, b)| (w, b, &self.mean1[l][..rows], &self.rstd1[l][..rows]));
            norm_backward(m, g, stats, dres, dh_, r_in, rows, d);
            // dres: dL/d resid_pre of layer l
            grad_at(
                gv,
                || format!("blocks.{l}.hook_resid_pre"),
                Kind::Resid,
                dres,
            );
        }
        grad_at(gv, || "hook_embed".into(), Kind::Resid, dres);
        if ix.w_pos.is_some() {
            grad_at(gv, || "hook_pos_embed".into(), Kind::Resid, dres);
        }
        if !m.frozen[ix.w_e] {
            embedding::backward(&mut g[ix.w_e], &self.ids[..rows], dres, d);
        }
        if let Some(wp) = ix.w_pos.filter(|&wp| !m.frozen[wp]) {
            let gp = &mut g[wp];
            for (r, row) in dres.chunks_exact(d).enumerate() {
                let p = r % t;
                gp[p * d..(p + 1) * d]
                    .iter_mut()
                    .zip(row)
                    .for_each(|(a, &b)| *a += b);
            }
        }
    }
}
