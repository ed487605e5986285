//! The forward pass of one chunk, one function per stage, read top to bottom as
//! the module doc of [`super`] writes the maths: [`Work::embed`], then per layer
//! [`Work::block`] (LayerNorm and the q/k/v projections, attention, the output
//! projection, the MLP), then [`Work::unembed`].
//!
//! A forward may also *resume* at a hook point ([`Resume`]): every activation
//! before it is taken as the previous forward of the same sequences left it,
//! and only what follows is recomputed. An activation-patching sweep changes one
//! activation per forward, so a patch in the last layer reruns that layer's tail
//! and the unembedding, not the whole model; the numbers are the same bits as a
//! full forward's (`hooked::tests`).

use super::work::{visit, Kind, Visitor, Work};
use super::{ActFn, Gpt, LN_EPS};
use crate::hooks::HookError;
use crate::layers::attention::{Attention, AttnExtras};
use crate::layers::{embedding, gelu, layernorm, linear, relu};
use crate::matmul::{matmul_strided, Op};
use crate::Float;

/// A block's hook points in forward order: where a resumed forward starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Stage {
    ResidPre,
    Q,
    K,
    V,
    Pattern,
    Z,
    AttnOut,
    ResidMid,
    MlpPre,
    MlpPost,
    MlpOut,
    ResidPost,
}

/// Where a forward resumes: at `stage` of block `layer` (ordered as the
/// forward meets them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Resume {
    pub layer: usize,
    pub stage: Stage,
}

impl Resume {
    /// The resume point at hook point `name`; `None` for the embeddings (the
    /// forward then runs from the start).
    pub(crate) fn at(name: &str) -> Option<Resume> {
        let (l, leaf) = name.strip_prefix("blocks.")?.split_once('.')?;
        let stage = match leaf {
            "hook_resid_pre" => Stage::ResidPre,
            "attn.hook_q" => Stage::Q,
            "attn.hook_k" => Stage::K,
            "attn.hook_v" => Stage::V,
            "attn.hook_pattern" => Stage::Pattern,
            "attn.hook_z" => Stage::Z,
            "hook_attn_out" => Stage::AttnOut,
            "hook_resid_mid" => Stage::ResidMid,
            "mlp.hook_pre" => Stage::MlpPre,
            "mlp.hook_post" => Stage::MlpPost,
            "hook_mlp_out" => Stage::MlpOut,
            "hook_resid_post" => Stage::ResidPost,
            _ => return None,
        };
        Some(Resume {
            layer: l.parse().ok()?,
            stage,
        })
    }
}

impl Resume {
    /// The hook points a forward resumed here reads as the previous forward
    /// left them and then overwrites: this one and, for `q` or `k`, the later
    /// of `q, k, v` (computed together, so not recomputed).
    pub(crate) fn overwrites(self) -> Vec<Resume> {
        let at = |stage| Resume { stage, ..self };
        match self.stage {
            Stage::Q => vec![at(Stage::Q), at(Stage::K), at(Stage::V)],
            Stage::K => vec![at(Stage::K), at(Stage::V)],
            _ => vec![self],
        }
    }
}

/// The chunk's sizes: `rows = n·T` rows of `d` (`d_model`) or `hd = H·d_head`.
#[derive(Clone, Copy)]
pub(crate) struct Dims {
    pub n: usize,
    pub t: usize,
    pub d: usize,
    pub nh: usize,
    pub dh: usize,
    pub rows: usize,
    pub hd: usize,
}

impl Dims {
    pub(crate) fn nd(&self) -> usize {
        self.rows * self.d
    }
    pub(crate) fn nhd(&self) -> usize {
        self.rows * self.hd
    }
    /// One sequence's attention pattern, `H·T·T`.
    pub(crate) fn pat_len(&self) -> usize {
        self.nh * self.t * self.t
    }
}

impl<T: Float> Work<T> {
    pub(crate) fn dims(&self, m: &Gpt<T>) -> Dims {
        let c = &m.cfg;
        let (n, t) = (self.n, self.t);
        Dims {
            n,
            t,
            d: c.d_model,
            nh: c.n_heads,
            dh: c.d_head,
            rows: n * t,
            hd: c.n_heads * c.d_head,
        }
    }

    /// The forward pass over the loaded sequences, calling `vis` at every hook point.
    pub(crate) fn forward(
        &mut self,
        m: &Gpt<T>,
        vis: &mut Visitor<'_, T>,
    ) -> Result<(), HookError> {
        self.forward_from(m, None, vis)
    }

    /// The forward from `from` on (`None`: the whole forward); what comes
    /// before it must be the previous forward's, on the same sequences.
    pub(crate) fn forward_from(
        &mut self,
        m: &Gpt<T>,
        from: Option<Resume>,
        vis: &mut Visitor<'_, T>,
    ) -> Result<(), HookError> {
        if from.is_none() {
            self.embed(m, vis)?;
        }
        let first = from.map_or(0, |r| r.layer);
        for l in first..m.cfg.n_layers {
            let stage = from.filter(|r| r.layer == l).map(|r| r.stage);
            self.block(m, l, stage, vis)?;
        }
        self.unembed(m);
        Ok(())
    }

    /// The activation buffer of the hook point at `r` (the loaded rows):
    /// what a resumed forward reads first.
    pub(crate) fn at_mut(&mut self, m: &Gpt<T>, r: Resume) -> &mut [T] {
        let dm = self.dims(m);
        let (l, nd, nhd) = (r.layer, dm.nd(), dm.nhd());
        match r.stage {
            Stage::ResidPre => &mut self.resid[l][..nd],
            Stage::Q => &mut self.q[l][..nhd],
            Stage::K => &mut self.k[l][..nhd],
            Stage::V => &mut self.v[l][..nhd],
            Stage::Pattern => {
                // whoever loads a pattern may write any entry
                self.pattern_rest_zero[l] = false;
                &mut self.pattern[l][..dm.n * dm.pat_len()]
            }
            Stage::Z => &mut self.z[l][..nhd],
            Stage::AttnOut => &mut self.attn_out[l][..nd],
            Stage::ResidMid => &mut self.mid[l][..nd],
            Stage::MlpPre => &mut self.pre[l][..dm.rows * m.cfg.d_mlp],
            Stage::MlpPost => &mut self.post[l][..dm.rows * m.cfg.d_mlp],
            Stage::MlpOut => &mut self.mlp_out[l][..nd],
            Stage::ResidPost => &mut self.resid[l + 1][..nd],
        }
    }

    /// `resid[0] = W_E[x] (+ W_pos[pos])`.
    fn embed(&mut self, m: &Gpt<T>, vis: &mut Visitor<'_, T>) -> Result<(), HookError> {
        let dm = self.dims(m);
        let (d, nd) = (dm.d, dm.nd());
        // x0: [rows, D]
        let x0 = &mut self.resid[0][..nd];
        embedding::forward(x0, &self.ids[..dm.rows], m.value(m.ix.w_e), d);
        visit(vis, || "hook_embed".into(), Kind::Resid, x0)?;
        if let Some(wp) = m.ix.w_pos {
            let pos = &mut self.pos[..nd];
            for (r, row) in pos.chunks_exact_mut(d).enumerate() {
                let p = r % dm.t;
                row.copy_from_slice(&m.value(wp)[p * d..(p + 1) * d]);
            }
            visit(vis, || "hook_pos_embed".into(), Kind::Resid, pos)?;
            x0.iter_mut().zip(pos.iter()).for_each(|(a, &b)| *a += b);
        }
        Ok(())
    }

    /// Block `l`, from `from` on (`None`: all of it): each stage `s` with
    /// `from ≤ s` is visited and the stage that reads it computed.
    fn block(
        &mut self,
        m: &Gpt<T>,
        l: usize,
        from: Option<Stage>,
        vis: &mut Visitor<'_, T>,
    ) -> Result<(), HookError> {
        let at = |s: Stage| from.is_none_or(|f| f <= s);
        let dm = self.dims(m);
        let (nd, nhd) = (dm.nd(), dm.nhd());
        let bi = &m.ix.blocks[l];
        if at(Stage::ResidPre) {
            let x = &mut self.resid[l][..nd];
            visit(vis, || format!("blocks.{l}.hook_resid_pre"), Kind::Resid, x)?;
            self.qkv(m, l);
        }
        for (s, buf, name) in [
            (Stage::Q, &mut self.q[l], "q"),
            (Stage::K, &mut self.k[l], "k"),
            (Stage::V, &mut self.v[l], "v"),
        ] {
            if at(s) {
                let y = &mut buf[..nhd];
                visit(
                    vis,
                    || format!("blocks.{l}.attn.hook_{name}"),
                    Kind::Heads,
                    y,
                )?;
            }
        }
        if at(Stage::V) {
            self.attend(m, l);
        }
        if at(Stage::Pattern) {
            // a hook that changes the pattern: z is recomputed from what it left
            if vis.is_some() {
                // a hook may write any entry
                self.pattern_rest_zero[l] = false;
            }
            let p = &mut self.pattern[l][..dm.n * dm.pat_len()];
            let name = || format!("blocks.{l}.attn.hook_pattern");
            if visit(vis, name, Kind::Pattern, p)? {
                self.z_from_pattern(dm, l);
            }
        }
        if at(Stage::Z) {
            let z = &mut self.z[l][..nhd];
            visit(vis, || format!("blocks.{l}.attn.hook_z"), Kind::Heads, z)?;
        }
        if at(Stage::Z) {
            self.project_out(m, l);
        }
        if at(Stage::AttnOut) {
            let ao = &mut self.attn_out[l][..nd];
            visit(vis, || format!("blocks.{l}.hook_attn_out"), Kind::Resid, ao)?;
        }
        if bi.mlp.is_some() {
            self.mlp(m, l, from, vis)?;
        } else if at(Stage::AttnOut) {
            let (before, after) = self.resid.split_at_mut(l + 1);
            let ao = &self.attn_out[l][..nd];
            after[0][..nd]
                .iter_mut()
                .zip(before[l][..nd].iter().zip(ao))
                .for_each(|(o, (&a, &b))| *o = a + b);
        }
        let out = &mut self.resid[l + 1][..nd];
        visit(
            vis,
            || format!("blocks.{l}.hook_resid_post"),
            Kind::Resid,
            out,
        )?;
        Ok(())
    }

    /// Block `l`'s `attn_out = z · W_Oᵀ + b_O`: `[rows, D]`.
    fn project_out(&mut self, m: &Gpt<T>, l: usize) {
        let dm = self.dims(m);
        let bi = &m.ix.blocks[l];
        let (w_o, b_o) = (m.value(bi.w_o), m.value(bi.b_o));
        let (ao, z) = (&mut self.attn_out[l][..dm.nd()], &self.z[l][..dm.nhd()]);
        linear::forward(ao, z, w_o, Some(b_o), dm.rows, dm.hd, dm.d);
    }

    /// Block `l`'s `q, k, v = LN1(resid_pre) · W_{Q,K,V}ᵀ + b`: `[rows, H·d_head]` each.
    fn qkv(&mut self, m: &Gpt<T>, l: usize) {
        let dm = self.dims(m);
        let (rows, d, nd, nhd) = (dm.rows, dm.d, dm.nd(), dm.nhd());
        let bi = &m.ix.blocks[l];
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
        for (buf, w, b) in [
            (&mut self.q[l], bi.w_q, bi.b_q),
            (&mut self.k[l], bi.w_k, bi.b_k),
            (&mut self.v[l], bi.w_v, bi.b_v),
        ] {
            let y = &mut buf[..nhd];
            linear::forward(y, hin, m.value(w), Some(m.value(b)), rows, d, dm.hd);
        }
    }

    /// Block `l`'s causal attention, one sequence at a time: `pattern`
    /// `[n, H, T, T]` and `z` `[rows, H·d_head]`.
    fn attend(&mut self, m: &Gpt<T>, l: usize) {
        let dm = self.dims(m);
        let (t, hd, pat_len) = (dm.t, dm.hd, dm.pat_len());
        let attn = Attention::new(dm.nh, t, t, dm.dh, dm.dh)
            .with_causal(true)
            .with_rest_zeroed(self.pattern_rest_zero[l]);
        if let (Some(rpe), Some(ti)) = (&m.rpe, m.ix.blocks[l].rpe) {
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
        for s in 0..dm.n {
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
        // the zeros are all in place once every sequence's pattern was written
        if dm.n * pat_len == self.pattern[l].len() {
            self.pattern_rest_zero[l] = true;
        }
    }

    /// `z[q, h] = Σ_k pattern[h, q, k] · v[k, h]` from the (hooked) pattern.
    fn z_from_pattern(&mut self, dm: Dims, l: usize) {
        let (t, hd, dh, pat_len) = (dm.t, dm.hd, dm.dh, dm.pat_len());
        for s in 0..dm.n {
            for h in 0..dm.nh {
                let o = s * t * hd + h * dh;
                matmul_strided(
                    &mut self.z[l][o..],
                    hd,
                    &self.pattern[l][s * pat_len + h * t * t..],
                    t,
                    Op::N,
                    &self.v[l][o..],
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

    /// Block `l`'s MLP, from `from` on: `resid_mid = resid_pre + attn_out`,
    /// `resid_post = resid_mid + W_out · act(W_in · LN2(resid_mid) + b_in) + b_out`.
    fn mlp(
        &mut self,
        m: &Gpt<T>,
        l: usize,
        from: Option<Stage>,
        vis: &mut Visitor<'_, T>,
    ) -> Result<(), HookError> {
        let at = |s: Stage| from.is_none_or(|f| f <= s);
        let dm = self.dims(m);
        let (rows, d, nd, dmlp) = (dm.rows, dm.d, dm.nd(), m.cfg.d_mlp);
        let bi = &m.ix.blocks[l];
        let Some([wi, bi_, wo, bo]) = bi.mlp else {
            return Ok(());
        };
        let mid = &mut self.mid[l][..nd];
        if at(Stage::AttnOut) {
            let (r_in, ao) = (&self.resid[l][..nd], &self.attn_out[l][..nd]);
            mid.iter_mut()
                .zip(r_in.iter().zip(ao))
                .for_each(|(o, (&a, &b))| *o = a + b);
        }
        if at(Stage::ResidMid) {
            visit(
                vis,
                || format!("blocks.{l}.hook_resid_mid"),
                Kind::Resid,
                mid,
            )?;
        }
        let pre = &mut self.pre[l][..rows * dmlp];
        if at(Stage::ResidMid) {
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
            linear::forward(pre, h2, m.value(wi), Some(m.value(bi_)), rows, d, dmlp);
        }
        if at(Stage::MlpPre) {
            visit(vis, || format!("blocks.{l}.mlp.hook_pre"), Kind::Mlp, pre)?;
        }
        let post = &mut self.post[l][..rows * dmlp];
        if at(Stage::MlpPre) {
            let keep = self.keep_slopes && m.cfg.act_fn == ActFn::GeluNew;
            match m.cfg.act_fn {
                ActFn::GeluNew if keep => gelu::forward_keeping_slope(post, pre),
                ActFn::GeluNew => gelu::forward(post, pre),
                ActFn::Relu => relu::forward(post, pre),
                ActFn::Gelu => gelu::exact_forward(post, pre),
            }
            self.slope_kept[l] = keep;
        }
        if at(Stage::MlpPost) {
            visit(vis, || format!("blocks.{l}.mlp.hook_post"), Kind::Mlp, post)?;
        }
        let mo = &mut self.mlp_out[l][..nd];
        if at(Stage::MlpPost) {
            linear::forward(mo, post, m.value(wo), Some(m.value(bo)), rows, dmlp, d);
        }
        if at(Stage::MlpOut) {
            visit(vis, || format!("blocks.{l}.hook_mlp_out"), Kind::Resid, mo)?;
        }
        if at(Stage::MlpOut) {
            self.resid[l + 1][..nd]
                .iter_mut()
                .zip(self.mid[l][..nd].iter().zip(&self.mlp_out[l][..nd]))
                .for_each(|(o, (&a, &b))| *o = a + b);
        }
        Ok(())
    }

    /// `logits = LN_final(resid[L]) · W_Uᵀ + b_U`: `[rows, d_vocab]`.
    fn unembed(&mut self, m: &Gpt<T>) {
        let dm = self.dims(m);
        let (rows, d, nd) = (dm.rows, dm.d, dm.nd());
        let last = &self.resid[m.cfg.n_layers][..nd];
        let hf: &[T] = match m.ix.ln_f {
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
        let (wu, bu) = (m.value(m.ix.w_u), m.value(m.ix.b_u));
        let v = m.cfg.d_vocab;
        linear::forward(&mut self.logits[..rows * v], hf, wu, Some(bu), rows, d, v);
    }
}
