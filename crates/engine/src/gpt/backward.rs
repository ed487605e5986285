//! The backward pass of one chunk, the forward's stages in reverse, one
//! function each: [`Work::unembed_backward`], then per layer from the last
//! [`Work::mlp_backward`], [`Work::attn_out_backward`],
//! [`Work::attention_backward`] and [`Work::qkv_backward`], then
//! [`Work::embed_backward`]. `dres` carries dL/d(residual stream) down.
//!
//! For analysis the backward hands the gradient at each hook point asked for
//! to a [`GradSink`], and stops once it has passed the deepest of them, with
//! parameter gradients left to the caller (a frozen parameter gets none).

use super::forward::{Dims, Resume, Stage};
use super::work::{Kind, Work};
use super::{ActFn, Gpt};
use crate::layers::attention::Attention;
use crate::layers::{embedding, gelu, layernorm, linear, relu};
use crate::matmul::{matmul_strided, Op};
use crate::Float;

/// Where the analysis backward hands the gradient at the hook points `names`:
/// `f(name, kind, dL/d activation)` as the backward reaches each.
pub(crate) struct GradSink<'v, T> {
    pub f: &'v mut dyn FnMut(&str, Kind, &[T]),
    pub names: &'v [&'v str],
}

impl<T> GradSink<'_, T> {
    fn wants(&self, name: &str) -> bool {
        self.names.contains(&name)
    }

    /// The earliest of `names` in forward order (`None`: an embedding, the
    /// backward runs to the end).
    fn deepest(&self) -> Option<Resume> {
        let mut points = self.names.iter().map(|n| Resume::at(n));
        let first = points.next()??;
        points.try_fold(first, |a, r| r.map(|r| a.min(r)))
    }
}

/// `f(name, …)` when the sink wants `name`.
fn grad_at<T>(g: &mut Option<GradSink<'_, T>>, name: impl FnOnce() -> String, kind: Kind, x: &[T]) {
    if let Some(s) = g {
        let name = name();
        if s.wants(&name) {
            (s.f)(&name, kind, x);
        }
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

/// Where a linear layer's backward puts its input gradient `dy·W`.
enum Dx<'a, T> {
    /// Added into what the buffer holds.
    Add(&'a mut [T]),
    /// Written over it: the same bits as adding into zeros, without zeroing.
    Set(&'a mut [T]),
}

/// A linear layer's backward into `g`: the input gradient as `dx` says, and
/// the weight and the bias gradient each written unless it is frozen (a
/// chunk's backward forms each once; [`Work::zero_grads_for`] leaves them).
#[allow(clippy::too_many_arguments)]
fn linear_backward<T: Float>(
    m: &Gpt<T>,
    g: &mut [Vec<T>],
    dx: Dx<'_, T>,
    (w, b): (usize, usize),
    dy: &[T],
    x: &[T],
    rows: usize,
    d_in: usize,
    d_out: usize,
) {
    match dx {
        Dx::Add(dx) => linear::backward_input(dx, dy, m.value(w), rows, d_in, d_out),
        Dx::Set(dx) => linear::backward_input_set(dx, dy, m.value(w), rows, d_in, d_out),
    }
    if m.frozen[w] && m.frozen[b] {
        return;
    }
    let (gw, gb) = two(g, w, b);
    let gw = (!m.frozen[w]).then_some(gw);
    let gb = (!m.frozen[b]).then_some(gb);
    linear::backward_params_set(gw, gb, dy, x, rows, d_in, d_out);
}

/// `dx += ` the input gradient of an optional LayerNorm (its parameters' indices
/// and saved `mean`, `rstd`; `None`: the identity), and its `dγ`, `dβ` into `g`
/// unless frozen.
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
            let gw = (!m.frozen[w]).then_some(gw);
            let gb = (!m.frozen[b]).then_some(gb);
            let gamma = m.value(w);
            layernorm::backward(dx, gw, gb, dy, x, mean, rstd, gamma, rows, d);
        }
        None => dx.iter_mut().zip(dy).for_each(|(a, &b)| *a += b),
    }
}

fn zero<T: Float>(x: &mut [T]) {
    x.iter_mut().for_each(|v| *v = T::zero());
}

impl<T: Float> Work<T> {
    /// The backward pass from `dlogits` into [`Work::grads`] (zeroed by `load`).
    pub(crate) fn backward(&mut self, m: &Gpt<T>) {
        self.backward_visit(m, &mut None);
    }

    /// [`Work::backward`], handing the gradient at the sink's hook points to
    /// it as the backward reaches each, and stopping past the deepest.
    pub(crate) fn backward_visit(&mut self, m: &Gpt<T>, gv: &mut Option<GradSink<'_, T>>) {
        let nd = self.dims(m).nd();
        let deepest = gv.as_ref().and_then(|s| s.deepest());
        // the backward stops once every point asked for is at or after `r`
        let done = |r: Resume| deepest.is_some_and(|d| d >= r);
        self.unembed_backward(m);
        for l in (0..m.cfg.n_layers).rev() {
            // dres: dL/d resid_post of layer l
            grad_at(
                gv,
                || format!("blocks.{l}.hook_resid_post"),
                Kind::Resid,
                &self.dres[..nd],
            );
            self.mlp_backward(m, l, gv);
            // dres: dL/d resid_mid (= d attn_out)
            if m.ix.blocks[l].mlp.is_some() {
                grad_at(
                    gv,
                    || format!("blocks.{l}.hook_resid_mid"),
                    Kind::Resid,
                    &self.dres[..nd],
                );
            }
            grad_at(
                gv,
                || format!("blocks.{l}.hook_attn_out"),
                Kind::Resid,
                &self.dres[..nd],
            );
            let stage = |stage| Resume { layer: l, stage };
            if done(stage(Stage::AttnOut)) {
                return;
            }
            self.attn_out_backward(m, l, gv);
            if done(stage(Stage::Pattern)) {
                return;
            }
            self.attention_backward(m, l, gv);
            if done(stage(Stage::Q)) {
                return;
            }
            self.qkv_backward(m, l);
            // dres: dL/d resid_pre of layer l
            grad_at(
                gv,
                || format!("blocks.{l}.hook_resid_pre"),
                Kind::Resid,
                &self.dres[..nd],
            );
            if done(stage(Stage::ResidPre)) {
                return;
            }
        }
        grad_at(gv, || "hook_embed".into(), Kind::Resid, &self.dres[..nd]);
        if m.ix.w_pos.is_some() {
            grad_at(
                gv,
                || "hook_pos_embed".into(),
                Kind::Resid,
                &self.dres[..nd],
            );
        }
        self.embed_backward(m);
    }

    /// `dres = d resid[L]` through `W_U` and the final LayerNorm.
    fn unembed_backward(&mut self, m: &Gpt<T>) {
        let dm = self.dims(m);
        let (rows, d, nd, v) = (dm.rows, dm.d, dm.nd(), m.cfg.d_vocab);
        let ix = &m.ix;
        let g = &mut self.grads;
        let (dres, dh) = (&mut self.dres[..nd], &mut self.dh[..nd]);
        let last = &self.resid[m.cfg.n_layers][..nd];
        let hf = if ix.ln_f.is_some() {
            &self.lnf[..nd]
        } else {
            last
        };
        let dlogits = &self.dlogits[..rows * v];
        linear_backward(m, g, Dx::Set(dh), (ix.w_u, ix.b_u), dlogits, hf, rows, d, v);
        zero(dres);
        let stats = ix
            .ln_f
            .map(|(w, b)| (w, b, &self.meanf[..rows], &self.rstdf[..rows]));
        norm_backward(m, g, stats, dres, dh, last, rows, d);
    }

    /// Block `l`'s MLP (if any): `dres` from d resid_post to d resid_mid.
    fn mlp_backward(&mut self, m: &Gpt<T>, l: usize, gv: &mut Option<GradSink<'_, T>>) {
        let bi = &m.ix.blocks[l];
        let Some([wi, bi_, wo, bo]) = bi.mlp else {
            return;
        };
        let dm = self.dims(m);
        let (rows, d, nd, dmlp) = (dm.rows, dm.d, dm.nd(), m.cfg.d_mlp);
        let g = &mut self.grads;
        let (dres, dh) = (&mut self.dres[..nd], &mut self.dh[..nd]);
        grad_at(gv, || format!("blocks.{l}.hook_mlp_out"), Kind::Resid, dres);
        let (dpost, dpre) = (
            &mut self.dpost[..rows * dmlp],
            &mut self.dpre[..rows * dmlp],
        );
        let post = &self.post[l][..rows * dmlp];
        linear_backward(m, g, Dx::Set(dpost), (wo, bo), dres, post, rows, dmlp, d);
        grad_at(gv, || format!("blocks.{l}.mlp.hook_post"), Kind::Mlp, dpost);
        let dpre: &[T] = if self.slope_kept[l] {
            // a training step: pre holds gelu_new'(pre), and dpost turns into dpre
            gelu::backward_by_slope(dpost, &self.pre[l][..rows * dmlp]);
            dpost
        } else {
            zero(dpre);
            let pre = &self.pre[l][..rows * dmlp];
            match m.cfg.act_fn {
                ActFn::GeluNew => gelu::backward(dpre, dpost, pre),
                ActFn::Relu => relu::backward(dpre, dpost, pre),
                ActFn::Gelu => gelu::exact_backward(dpre, dpost, pre),
            }
            dpre
        };
        grad_at(gv, || format!("blocks.{l}.mlp.hook_pre"), Kind::Mlp, dpre);
        let mid = &self.mid[l][..nd];
        let h2 = if bi.ln2.is_some() {
            &self.ln2[l][..nd]
        } else {
            mid
        };
        linear_backward(m, g, Dx::Set(dh), (wi, bi_), dpre, h2, rows, d, dmlp);
        let stats = bi
            .ln2
            .map(|(w, b)| (w, b, &self.mean2[l][..rows], &self.rstd2[l][..rows]));
        norm_backward(m, g, stats, dres, dh, mid, rows, d);
    }

    /// `dz = d attn_out · W_O` of block `l`; the pattern's gradient
    /// `dz · vᵀ` is formed only for a sink that asks for it.
    fn attn_out_backward(&mut self, m: &Gpt<T>, l: usize, gv: &mut Option<GradSink<'_, T>>) {
        let dm = self.dims(m);
        let (t, hd, dh, pat_len) = (dm.t, dm.hd, dm.dh, dm.pat_len());
        let bi = &m.ix.blocks[l];
        let dz = &mut self.dz[..dm.nhd()];
        let (dres, z) = (&self.dres[..dm.nd()], &self.z[l][..dm.nhd()]);
        linear_backward(
            m,
            &mut self.grads,
            Dx::Set(&mut *dz),
            (bi.w_o, bi.b_o),
            dres,
            z,
            dm.rows,
            hd,
            dm.d,
        );
        grad_at(gv, || format!("blocks.{l}.attn.hook_z"), Kind::Heads, dz);
        let name = format!("blocks.{l}.attn.hook_pattern");
        if !gv.as_ref().is_some_and(|s| s.wants(&name)) {
            return;
        }
        // d pattern[h, q, k] = Σ_c dz[q, h, c] · v[k, h, c]
        let mut dp = vec![T::zero(); dm.n * pat_len];
        for s in 0..dm.n {
            for h in 0..dm.nh {
                let o = s * t * hd + h * dh;
                let out = &mut dp[s * pat_len + h * t * t..];
                let v = &self.v[l][o..];
                matmul_strided(out, t, &dz[o..], hd, Op::N, v, hd, Op::T, t, dh, t, false);
            }
        }
        grad_at(gv, || name, Kind::Pattern, &dp);
    }

    /// Block `l`'s attention backward, one sequence at a time: `dq, dk, dv`
    /// from `dz` (and the RPE table's gradient).
    fn attention_backward(&mut self, m: &Gpt<T>, l: usize, gv: &mut Option<GradSink<'_, T>>) {
        let dm = self.dims(m);
        let (t, hd, nhd, pat_len) = (dm.t, dm.hd, dm.nhd(), dm.pat_len());
        // each sequence's dq, dk, dv are written, not zeroed and added into
        let attn = Attention::new(dm.nh, t, t, dm.dh, dm.dh)
            .with_causal(true)
            .with_grads_written(true);
        let (dq, dk, dv) = (
            &mut self.dq[..nhd],
            &mut self.dk[..nhd],
            &mut self.dv[..nhd],
        );
        zero(&mut self.d_bias);
        let rpe_on = m.rpe.is_some();
        for s in 0..dm.n {
            let sq = s * t * hd..(s + 1) * t * hd;
            let d_bias = rpe_on.then_some(&mut self.d_bias[..]);
            attn.backward(
                &mut dq[sq.clone()],
                &mut dk[sq.clone()],
                &mut dv[sq.clone()],
                d_bias,
                &mut self.scratch,
                &self.dz[sq.clone()],
                &self.pattern[l][s * pat_len..(s + 1) * pat_len],
                &self.q[l][sq.clone()],
                &self.k[l][sq.clone()],
                &self.v[l][sq],
            );
        }
        if let (Some(rpe), Some(ti)) = (&m.rpe, m.ix.blocks[l].rpe) {
            if !m.frozen[ti] {
                rpe.backward(&mut self.grads[ti], &self.d_bias, t);
            }
        }
        for (name, dy) in [("q", &*dq), ("k", &*dk), ("v", &*dv)] {
            grad_at(
                gv,
                || format!("blocks.{l}.attn.hook_{name}"),
                Kind::Heads,
                dy,
            );
        }
    }

    /// `dres += ` d resid_pre of block `l` through `W_{Q,K,V}` and LN1.
    fn qkv_backward(&mut self, m: &Gpt<T>, l: usize) {
        let dm = self.dims(m);
        let (rows, d, nd, nhd) = (dm.rows, dm.d, dm.nd(), dm.nhd());
        let bi = &m.ix.blocks[l];
        let g = &mut self.grads;
        let r_in = &self.resid[l][..nd];
        let hin = if bi.ln1.is_some() {
            &self.ln1[l][..nd]
        } else {
            r_in
        };
        let dh = &mut self.dh[..nd];
        for (i, (dy, w, b)) in [
            (&self.dq[..nhd], bi.w_q, bi.b_q),
            (&self.dk[..nhd], bi.w_k, bi.b_k),
            (&self.dv[..nhd], bi.w_v, bi.b_v),
        ]
        .into_iter()
        .enumerate()
        {
            // the first writes dh, the others add into it
            let dx = if i == 0 {
                Dx::Set(&mut *dh)
            } else {
                Dx::Add(&mut *dh)
            };
            linear_backward(m, g, dx, (w, b), dy, hin, rows, d, dm.hd);
        }
        let stats = bi
            .ln1
            .map(|(w, b)| (w, b, &self.mean1[l][..rows], &self.rstd1[l][..rows]));
        norm_backward(m, g, stats, &mut self.dres[..nd], dh, r_in, rows, d);
    }

    /// The embeddings' gradients from `dres` (d resid_pre of layer 0).
    fn embed_backward(&mut self, m: &Gpt<T>) {
        let dm: Dims = self.dims(m);
        let (d, t, nd) = (dm.d, dm.t, dm.nd());
        let ix = &m.ix;
        let dres = &self.dres[..nd];
        if !m.frozen[ix.w_e] {
            embedding::backward(&mut self.grads[ix.w_e], &self.ids[..dm.rows], dres, d);
        }
        if let Some(wp) = ix.w_pos.filter(|&wp| !m.frozen[wp]) {
            let gp = &mut self.grads[wp];
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
