//! The full model computed directly, position by position and sequence by
//! sequence (the first implementation, kept as the tests' reference for the
//! table-based `mechlab::papers::induction::full`).

#![allow(clippy::needless_range_loop, dead_code)]

use mechlab::papers::induction::simplified::{subsets, LossKind};
use mechlab_engine::{param, Float, Param, Parameters};
use rayon::prelude::*;

/// Sequences per work chunk (fixed: the summation order never depends on threads).
pub const CHUNK: usize = 64;
/// LayerNorm ε (PyTorch's default).
pub const LN_EPS: f64 = 1e-5;
/// The fixed logit of distance 0 (the authors' code).
pub const SELF_LOGIT: f64 = 1e-6;

/// Shape and initialisation.
#[derive(Clone, Debug)]
pub struct FullConfigDirect {
    pub d_vocab: usize,
    pub n_heads: usize,
    pub degree: usize,
    pub w_plus: f64,
    pub w_minus: f64,
    pub c_init: f64,
    pub a_init: f64,
    /// `W_Q = W_K = W_OV = proj_init · I` at init.
    pub proj_init: f64,
    pub loss: LossKind,
    pub nll_floor: f64,
}

impl Default for FullConfigDirect {
    fn default() -> Self {
        FullConfigDirect {
            d_vocab: 3,
            n_heads: 3,
            degree: 2,
            w_plus: 1.0,
            w_minus: 0.01,
            c_init: 0.01,
            a_init: 0.01,
            proj_init: 0.01,
            loss: LossKind::Code,
            nll_floor: 1e-8,
        }
    }
}

/// Per-chunk scratch (one sequence at a time) and gradient partials.
struct Work<T> {
    p1: Vec<T>,    // [L+1, H, H+1]: layer-1 pattern over (self, distances h+1..)
    pre: Vec<T>,   // [L+1, H, S]: value before LayerNorm
    xhat: Vec<T>,  // [L+1, H, S]: normalised
    rstd: Vec<T>,  // [L+1, H]
    v: Vec<T>,     // [L+1, H, S]: LayerNorm output
    dv: Vec<T>,    // [L+1, H, S]
    ip: Vec<T>,    // [L, H]
    num: Vec<T>,   // [L]
    p2: Vec<T>,    // [L]
    dm: Vec<T>,    // [H, S, S]: gradient of W_Q W_Kᵀ for one sequence
    grads: Vec<T>, // every parameter's gradient, in visit order
    loss: T,
}

/// The model.
pub struct Full<T: Float> {
    pub cfg: FullConfigDirect,
    /// `blocks.0.attn.W_pos` `[2H-1, H]`.
    pub w: Param<T>,
    /// `blocks.0.attn.W_Q` `[H, S, S]`.
    pub wq: Param<T>,
    /// `blocks.0.attn.W_K` `[H, S, S]`.
    pub wk: Param<T>,
    /// `blocks.0.attn.W_OV` `[H, S, S]`.
    pub wov: Param<T>,
    /// `blocks.0.ln.w`, `blocks.0.ln.b` `[S]`.
    pub ln_w: Param<T>,
    pub ln_b: Param<T>,
    /// `blocks.1.ffn.C` `[n_subsets]`, `blocks.1.attn.a` `[1]`.
    pub c: Param<T>,
    pub a: Param<T>,
    pub subsets: Vec<u32>,
    qk: Vec<T>, // [H, S, S]: W_Q W_Kᵀ
    l: usize,
    work: Vec<Work<T>>,
}

impl<T: Float> Full<T> {
    pub fn new(cfg: &FullConfigDirect) -> Self {
        let (h, s) = (cfg.n_heads, cfg.d_vocab);
        let nd = 2 * h - 1;
        let mut w = vec![T::of(cfg.w_minus); nd * h];
        for k in 0..h {
            w[k * h + k] = T::of(cfg.w_plus);
        }
        let mut eye = vec![T::zero(); h * s * s];
        for hd in 0..h {
            for k in 0..s {
                eye[(hd * s + k) * s + k] = T::of(cfg.proj_init);
            }
        }
        let subsets = subsets(h, cfg.degree);
        let n_sub = subsets.len();
        Full {
            cfg: cfg.clone(),
            w: param("blocks.0.attn.W_pos", "W", &[nd, h], w),
            wq: param("blocks.0.attn.W_Q", "QK", &[h, s, s], eye.clone()),
            wk: param("blocks.0.attn.W_K", "QK", &[h, s, s], eye.clone()),
            wov: param("blocks.0.attn.W_OV", "OV", &[h, s, s], eye),
            ln_w: param("blocks.0.ln.w", "LN", &[s], vec![T::one(); s]),
            ln_b: param("blocks.0.ln.b", "LN", &[s], vec![T::zero(); s]),
            c: param(
                "blocks.1.ffn.C",
                "C",
                &[n_sub],
                vec![T::of(cfg.c_init); n_sub],
            ),
            a: param("blocks.1.attn.a", "a", &[1], vec![T::of(cfg.a_init)]),
            subsets,
            qk: vec![T::zero(); h * s * s],
            l: 0,
            work: Vec::new(),
        }
    }

    fn reserve(&mut self, n: usize, l: usize) {
        let (h, s) = (self.cfg.n_heads, self.cfg.d_vocab);
        if self.l != l {
            self.work.clear();
            self.l = l;
        }
        let np = self.num_params();
        let z = |k: usize| vec![T::zero(); k];
        while self.work.len() < n.div_ceil(CHUNK) {
            self.work.push(Work {
                p1: z((l + 1) * h * (h + 1)),
                pre: z((l + 1) * h * s),
                xhat: z((l + 1) * h * s),
                rstd: z((l + 1) * h),
                v: z((l + 1) * h * s),
                dv: z((l + 1) * h * s),
                ip: z(l * h),
                num: z(l),
                p2: z(l),
                dm: z(h * s * s),
                grads: z(np),
                loss: T::zero(),
            });
        }
    }

    /// Mean loss over `tokens` (`[n, l+1]`, target last); with `grad`, accumulates
    /// the mean's gradient into every parameter.
    pub fn loss(&mut self, tokens: &[u8], l: usize, grad: bool) -> T {
        self.run(tokens, l, grad, None)
    }

    /// Predicted distributions `[n, S]` (no gradient); returns the loss.
    pub fn predict(&mut self, tokens: &[u8], l: usize, out: &mut [T]) -> T {
        self.run(tokens, l, false, Some(out))
    }

    /// The attention patterns of one sequence `[l + 1]` (target last):
    /// `blocks.0.attn.hook_pattern` as `[query_pos (0..=L), head, distance (0..2H)]`
    /// and `blocks.1.attn.hook_pattern` of the query as `[L]`.
    pub fn patterns(&mut self, seq: &[u8], l: usize) -> (Vec<f64>, Vec<f64>) {
        self.run(seq, l, false, None);
        let h = self.cfg.n_heads;
        let (k1, nd) = (h + 1, 2 * h);
        let wk = &self.work[0];
        let mut p1 = vec![0.0; (l + 1) * h * nd];
        for i in 0..=l {
            for hd in 0..h {
                for kk in 0..k1 {
                    let r = if kk == 0 { 0 } else { hd + kk };
                    if r <= i {
                        p1[(i * h + hd) * nd + r] = wk.p1[(i * h + hd) * k1 + kk].as_f64();
                    }
                }
            }
        }
        (p1, wk.p2[..l].iter().map(|v| v.as_f64()).collect())
    }

    fn run(&mut self, tokens: &[u8], l: usize, grad: bool, out: Option<&mut [T]>) -> T {
        let n = tokens.len() / (l + 1);
        let (h, s) = (self.cfg.n_heads, self.cfg.d_vocab);
        self.reserve(n, l);
        // M_h = W_Q^h (W_K^h)ᵀ
        for hd in 0..h {
            for i in 0..s {
                for k in 0..s {
                    self.qk[(hd * s + i) * s + k] = (0..s)
                        .map(|j| {
                            self.wq.value()[(hd * s + i) * s + j]
                                * self.wk.value()[(hd * s + k) * s + j]
                        })
                        .sum();
                }
            }
        }
        let scale = T::one() / T::of_usize(n.max(1));
        let chunks = n.div_ceil(CHUNK);
        let mut work = std::mem::take(&mut self.work);
        {
            let me = &*self;
            let per =
                |ci: usize| &tokens[ci * CHUNK * (l + 1)..((ci + 1) * CHUNK).min(n) * (l + 1)];
            match out {
                Some(o) => {
                    let mut outs: Vec<&mut [T]> = o.chunks_mut(CHUNK * s).collect();
                    work[..chunks]
                        .par_iter_mut()
                        .zip(outs.par_iter_mut())
                        .enumerate()
                        .for_each(|(ci, (wk, o))| me.chunk(wk, per(ci), l, scale, grad, Some(o)));
                }
                None => work[..chunks]
                    .par_iter_mut()
                    .enumerate()
                    .for_each(|(ci, wk)| me.chunk(wk, per(ci), l, scale, grad, None)),
            }
        }
        let mut loss = T::zero();
        for wk in &work[..chunks] {
            loss += wk.loss;
        }
        if grad {
            let mut off = 0;
            let work_ref = &work;
            self.visit_mut(&mut |p| {
                let g = p.grad_mut();
                let len = g.len();
                for wk in &work_ref[..chunks] {
                    for (acc, v) in g.iter_mut().zip(&wk.grads[off..off + len]) {
                        *acc += *v;
                    }
                }
                off += g.len();
            });
        }
        self.work = work;
        loss * scale
    }

    /// Gradient offsets of each parameter inside `Work::grads`, in visit order.
    fn offsets(&self) -> [usize; 9] {
        let mut o = [0usize; 9];
        let mut k = 0;
        let mut i = 0;
        self.visit(&mut |p| {
            o[i] = k;
            k += p.numel();
            i += 1;
        });
        o[8] = k;
        o
    }

    #[allow(clippy::too_many_arguments)]
    fn chunk(
        &self,
        wk: &mut Work<T>,
        tokens: &[u8],
        l: usize,
        scale: T,
        grad: bool,
        mut out: Option<&mut &mut [T]>,
    ) {
        let (h, s) = (self.cfg.n_heads, self.cfg.d_vocab);
        let k1 = h + 1; // keys per head: self, then distances h+1..h+H
        let [o_w, o_q, o_k, o_ov, o_lw, o_lb, o_c, o_a, _] = self.offsets();
        let w = self.w.value();
        let ov = self.wov.value();
        let (lw, lb) = (self.ln_w.value(), self.ln_b.value());
        let c = self.c.value();
        let a = self.a.value()[0];
        let z: T = self
            .subsets
            .iter()
            .zip(c)
            .filter(|(m, _)| *m & 1 == 0)
            .map(|(_, v)| *v * *v)
            .sum();
        let az = a / z;
        let eps = T::of(LN_EPS);
        wk.loss = T::zero();
        if grad {
            wk.grads.iter_mut().for_each(|g| *g = T::zero());
        }
        let tok = |x: &[u8], i: usize| -> usize {
            if i < l {
                x[i] as usize
            } else {
                usize::MAX
            }
        };
        let mut yhat = [T::zero(); 64];
        let mut g = [T::zero(); 64];
        let mut o = [T::zero(); 64];
        for (b, seq) in tokens.chunks_exact(l + 1).enumerate() {
            let x = &seq[..l];
            let y = seq[l] as usize;
            // --- layer 1: per position and head, attention over ≤ H+1 keys ---
            for i in 0..=l {
                let xi = tok(x, i);
                for hd in 0..h {
                    let pr = &mut wk.p1[(i * h + hd) * k1..(i * h + hd + 1) * k1];
                    let mut mx = T::neg_infinity();
                    for kk in 0..k1 {
                        let r = if kk == 0 { 0 } else { hd + kk };
                        if r > i {
                            pr[kk] = T::neg_infinity();
                            continue;
                        }
                        let xj = tok(x, i - r);
                        let qk = if xi == usize::MAX || xj == usize::MAX {
                            T::zero()
                        } else {
                            self.qk[(hd * s + xi) * s + xj]
                        };
                        let bias = if r == 0 {
                            T::of(SELF_LOGIT)
                        } else {
                            w[(r - 1) * h + hd]
                        };
                        pr[kk] = qk + bias;
                        mx = mx.max(pr[kk]);
                    }
                    let mut sum = T::zero();
                    for v in pr.iter_mut() {
                        *v = if *v == T::neg_infinity() {
                            T::zero()
                        } else {
                            (*v - mx).exp()
                        };
                        sum += *v;
                    }
                    pr.iter_mut().for_each(|v| *v /= sum);
                    // o = Σ_r p_r x_{i-r}; pre = o W_OV; LayerNorm
                    o[..s].iter_mut().for_each(|v| *v = T::zero());
                    for kk in 0..k1 {
                        let r = if kk == 0 { 0 } else { hd + kk };
                        if r <= i {
                            let xj = tok(x, i - r);
                            if xj != usize::MAX {
                                o[xj] += pr[kk];
                            }
                        }
                    }
                    let base = (i * h + hd) * s;
                    let mut mean = T::zero();
                    for k in 0..s {
                        let v: T = (0..s).map(|j| o[j] * ov[(hd * s + j) * s + k]).sum();
                        wk.pre[base + k] = v;
                        mean += v;
                    }
                    mean /= T::of_usize(s);
                    let var: T = (0..s).map(|k| (wk.pre[base + k] - mean).powi(2)).sum::<T>()
                        / T::of_usize(s);
                    let rstd = T::one() / (var + eps).sqrt();
                    wk.rstd[i * h + hd] = rstd;
                    for k in 0..s {
                        let xh = (wk.pre[base + k] - mean) * rstd;
                        wk.xhat[base + k] = xh;
                        wk.v[base + k] = xh * lw[k] + lb[k];
                    }
                }
            }
            // --- layer 2 at the query L ---
            let q = l * h * s;
            let mut mx = T::neg_infinity();
            for i in 0..l {
                for hd in 0..h {
                    let d: T = (0..s)
                        .map(|k| wk.v[q + hd * s + k] * wk.v[(i * h + hd) * s + k])
                        .sum();
                    wk.ip[i * h + hd] = d.max(T::zero());
                }
                let ip = &wk.ip[i * h..(i + 1) * h];
                let mut num = T::zero();
                for (m, cv) in self.subsets.iter().zip(c) {
                    if m & 1 != 0 {
                        continue;
                    }
                    let mut kk = *cv * *cv;
                    for hd in 0..h {
                        if m & (1 << (hd + 1)) != 0 {
                            kk *= ip[hd];
                        }
                    }
                    num += kk;
                }
                wk.num[i] = num;
                wk.p2[i] = az * num;
                mx = mx.max(wk.p2[i]);
            }
            let mut sum = T::zero();
            for i in 0..l {
                wk.p2[i] = (wk.p2[i] - mx).exp();
                sum += wk.p2[i];
            }
            yhat[..s].iter_mut().for_each(|v| *v = T::zero());
            for i in 0..l {
                wk.p2[i] /= sum;
                yhat[x[i] as usize] += wk.p2[i];
            }
            match self.cfg.loss {
                LossKind::Code => {
                    let m = yhat[..s].iter().fold(T::neg_infinity(), |a, b| a.max(*b));
                    let ze: T = yhat[..s].iter().map(|v| (*v - m).exp()).sum();
                    wk.loss += ze.ln() + m - yhat[y];
                    for k in 0..s {
                        g[k] = (yhat[k] - m).exp() / ze;
                    }
                    g[y] -= T::one();
                }
                LossKind::Nll => {
                    let floor = T::of(self.cfg.nll_floor);
                    wk.loss -= yhat[y].max(floor).ln();
                    g[..s].iter_mut().for_each(|v| *v = T::zero());
                    if yhat[y] > floor {
                        g[y] = -T::one() / yhat[y];
                    }
                }
            }
            if let Some(ob) = out.as_deref_mut() {
                ob[b * s..(b + 1) * s].copy_from_slice(&yhat[..s]);
            }
            if !grad {
                continue;
            }
            // --- backward: layer 2 ---
            let pg: T = (0..s).map(|k| yhat[k] * g[k]).sum::<T>() * scale;
            wk.dv.iter_mut().for_each(|v| *v = T::zero());
            for i in 0..l {
                let ds = wk.p2[i] * (g[x[i] as usize] * scale - pg);
                let num = wk.num[i];
                wk.grads[o_a] += ds * num / z;
                let ip = &wk.ip[i * h..(i + 1) * h];
                let mut dip = [T::zero(); 16];
                for (si, (m, cv)) in self.subsets.iter().zip(c).enumerate() {
                    if m & 1 != 0 {
                        continue;
                    }
                    let mut kern = T::one();
                    for hd in 0..h {
                        if m & (1 << (hd + 1)) != 0 {
                            kern *= ip[hd];
                        }
                    }
                    wk.grads[o_c + si] += ds * a * T::of(2.0) * *cv * (kern - num / z) / z;
                    for hd in 0..h {
                        if m & (1 << (hd + 1)) == 0 || ip[hd] <= T::zero() {
                            continue;
                        }
                        let mut rest = *cv * *cv;
                        for h2 in 0..h {
                            if h2 != hd && m & (1 << (h2 + 1)) != 0 {
                                rest *= ip[h2];
                            }
                        }
                        dip[hd] += ds * az * rest;
                    }
                }
                for hd in 0..h {
                    let d = dip[hd];
                    if d == T::zero() {
                        continue;
                    }
                    let oi = (i * h + hd) * s;
                    for k in 0..s {
                        let (vq, vi) = (wk.v[q + hd * s + k], wk.v[oi + k]);
                        wk.dv[q + hd * s + k] += d * vi;
                        wk.dv[oi + k] += d * vq;
                    }
                }
            }
            // --- backward: LayerNorm, W_OV, layer-1 softmax, QK and RPE ---
            wk.dm.iter_mut().for_each(|v| *v = T::zero());
            for i in 0..=l {
                let xi = tok(x, i);
                for hd in 0..h {
                    let base = (i * h + hd) * s;
                    let dv = &wk.dv[base..base + s];
                    if dv.iter().all(|v| *v == T::zero()) {
                        continue;
                    }
                    let xh = &wk.xhat[base..base + s];
                    let mut dxh = [T::zero(); 64];
                    for k in 0..s {
                        wk.grads[o_lw + k] += dv[k] * xh[k];
                        wk.grads[o_lb + k] += dv[k];
                        dxh[k] = dv[k] * lw[k];
                    }
                    let ns = T::of_usize(s);
                    let m1: T = dxh[..s].iter().copied().sum::<T>() / ns;
                    let m2: T = (0..s).map(|k| dxh[k] * xh[k]).sum::<T>() / ns;
                    let rstd = wk.rstd[i * h + hd];
                    let mut dpre = [T::zero(); 64];
                    for k in 0..s {
                        dpre[k] = rstd * (dxh[k] - m1 - xh[k] * m2);
                    }
                    // o again (cheap) for dW_OV, and do = W_OV dpre
                    let pr = &wk.p1[(i * h + hd) * k1..(i * h + hd + 1) * k1];
                    o[..s].iter_mut().for_each(|v| *v = T::zero());
                    for kk in 0..k1 {
                        let r = if kk == 0 { 0 } else { hd + kk };
                        if r <= i {
                            let xj = tok(x, i - r);
                            if xj != usize::MAX {
                                o[xj] += pr[kk];
                            }
                        }
                    }
                    let mut dob = [T::zero(); 64];
                    for j in 0..s {
                        for k in 0..s {
                            wk.grads[o_ov + (hd * s + j) * s + k] += o[j] * dpre[k];
                            dob[j] += ov[(hd * s + j) * s + k] * dpre[k];
                        }
                    }
                    let mut dp = [T::zero(); 16];
                    let mut pdp = T::zero();
                    for kk in 0..k1 {
                        let r = if kk == 0 { 0 } else { hd + kk };
                        if r <= i {
                            let xj = tok(x, i - r);
                            dp[kk] = if xj == usize::MAX { T::zero() } else { dob[xj] };
                            pdp += pr[kk] * dp[kk];
                        }
                    }
                    for kk in 0..k1 {
                        let r = if kk == 0 { 0 } else { hd + kk };
                        if r > i {
                            continue;
                        }
                        let dl = pr[kk] * (dp[kk] - pdp);
                        if r > 0 {
                            wk.grads[o_w + (r - 1) * h + hd] += dl;
                        }
                        let xj = tok(x, i - r);
                        if xi != usize::MAX && xj != usize::MAX {
                            wk.dm[(hd * s + xi) * s + xj] += dl;
                        }
                    }
                }
            }
            // M = Q Kᵀ: dQ = dM K, dK = dMᵀ Q
            let (wq, wkk) = (self.wq.value(), self.wk.value());
            for hd in 0..h {
                for i in 0..s {
                    for j in 0..s {
                        let mut gq = T::zero();
                        let mut gk = T::zero();
                        for k in 0..s {
                            gq += wk.dm[(hd * s + i) * s + k] * wkk[(hd * s + k) * s + j];
                            gk += wk.dm[(hd * s + k) * s + i] * wq[(hd * s + k) * s + j];
                        }
                        wk.grads[o_q + (hd * s + i) * s + j] += gq;
                        wk.grads[o_k + (hd * s + i) * s + j] += gk;
                    }
                }
            }
        }
    }
}

impl<T: Float> Parameters<T> for Full<T> {
    fn visit(&self, f: &mut dyn FnMut(&Param<T>)) {
        f(&self.w);
        f(&self.wq);
        f(&self.wk);
        f(&self.wov);
        f(&self.ln_w);
        f(&self.ln_b);
        f(&self.c);
        f(&self.a);
    }
    fn visit_mut(&mut self, f: &mut dyn FnMut(&mut Param<T>)) {
        f(&mut self.w);
        f(&mut self.wq);
        f(&mut self.wk);
        f(&mut self.wov);
        f(&mut self.ln_w);
        f(&mut self.ln_b);
        f(&mut self.c);
        f(&mut self.a);
    }
}
