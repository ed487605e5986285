//! The full two-layer transformer of Chen, Sheen, Wang, Yang (2024).
//!
//! Layer 1, head `h`: logits `x_i W_Q^h (W_K^h)ᵀ x_jᵀ + RPE`, where the RPE bias is
//! `W[r-1, h]` on the distances `r = i - j ∈ {h+1, ..., h+H}`, `1e-6` on distance 0
//! and `−∞` elsewhere; softmax; value `x_j W_OV^h`; then a LayerNorm over the `S`
//! coordinates whose gain and bias are shared by the heads. The query (position
//! `L`) has a zero token row. Layer 2 is the simplified model's polynomial kernel
//! over the `H + 1` components (`s_l = a Σ_δ c_δ² Π_{c∈δ} ReLU⟨z_L^c, z_l^c⟩ / Σ_{δ_0=0} c_δ²`)
//! and `ŷ = Σ_l softmax(s)_l x_l`. Every parameter trains (the authors' `train.py`).
//!
//! With one-hot tokens, `x_i M x_jᵀ = M[x_i, x_j]`, so a head's logits are lookups;
//! each head attends to at most `H + 1` keys. The sequences are processed in fixed
//! chunks with chunk-order reduction (bit-identical for any thread count).
//!
//! ```
//! use mechlab::models::induction_full::{Full, FullConfig};
//! let mut m = Full::<f64>::new(&FullConfig::default());
//! let tokens = vec![0u8, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1];
//! assert!(m.loss(&tokens, 10, false).is_finite());
//! ```

#![allow(clippy::needless_range_loop)]

use super::induction_simplified::{subsets, LossKind};
use mechlab_engine::{param, Float, Param, Parameters};
use rayon::prelude::*;

/// Sequences per work chunk (fixed: the summation order never depends on threads).
pub const CHUNK: usize = 512;
/// LayerNorm ε (PyTorch's default).
pub const LN_EPS: f64 = 1e-5;
/// The fixed logit of distance 0 (the authors' code).
pub const SELF_LOGIT: f64 = 1e-6;

/// Shape and initialisation.
#[derive(Clone, Debug)]
pub struct FullConfig {
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

impl Default for FullConfig {
    fn default() -> Self {
        FullConfig {
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

/// Per-chunk scratch and partials.
struct Work<T> {
    win: Vec<usize>, // [L+1]: code of the 2H-1 tokens before each position
    kidx: Vec<u32>,  // [L]
    p: Vec<T>,       // [L]: blocks.1.attn.hook_pattern (query L)
    d_n: Vec<T>,     // [NQW, NKW]
    loss: T,
}

/// The model: parameters, per-step tables and workspaces.
///
/// As in the simplified model, a head's output at a position depends only on a
/// code: its own token (or the query's zero row) and the `H` tokens in its window
/// (or "missing"); so each step computes attention, value and LayerNorm once per
/// (head, code), the layer-2 logit once per (query window, key window) pair, and a
/// sequence costs one lookup per key. The backward runs the same way in reverse.
pub struct Full<T: Float> {
    pub cfg: FullConfig,
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
    nc: usize, // (S+1)^(H+1) head codes: self digit, then H window digits
    q_code: Vec<usize>,
    wq_list: Vec<usize>,
    wq_index: Vec<usize>,
    wk_list: Vec<usize>,
    wk_index: Vec<u32>,
    qw_head: Vec<usize>, // [NQW, H]: ip-table row
    kw_head: Vec<usize>, // [NKW, H]: head code
    qk: Vec<T>,          // [H, S, S]: W_Q W_Kᵀ
    p_tab: Vec<T>,       // [H, NC, H+1]: layer-1 pattern (self, then distances h+1..)
    o_tab: Vec<T>,       // [H, NC, S]
    xhat_tab: Vec<T>,    // [H, NC, S]
    rstd_tab: Vec<T>,    // [H, NC]
    v_tab: Vec<T>,       // [H, NC, S]
    ip_raw: Vec<T>,      // [H, NQ, NC]
    n_tab: Vec<T>,       // [NQW, NKW]
    e_tab: Vec<T>,       // [NQW, NKW]
    d_n: Vec<T>,
    d_ip: Vec<T>,
    dv_tab: Vec<T>,
    dm: Vec<T>, // [H, S, S]
    sk_tot: Vec<T>,
    active: Vec<(usize, [u8; 16], usize)>,
    l: usize,
    work: Vec<Work<T>>,
}

/// Largest (query windows × key windows) table the full model accepts.
pub const MAX_TABLE: usize = 1 << 21;

/// Digits of `code` in base `S+1`, least significant first.
fn digits(code: usize, p: usize, n: usize) -> [usize; 16] {
    let mut d = [0usize; 16];
    let mut c = code;
    for x in d.iter_mut().take(n) {
        *x = c % p;
        c /= p;
    }
    d
}

impl<T: Float> Full<T> {
    /// Checks the table size: `S^(2H-1) · S · Σ_m S^m ≤ MAX_TABLE` (S = 3: H ≤ 3).
    pub fn check_size(d_vocab: usize, n_heads: usize) -> Result<(), String> {
        if !(1..=7).contains(&n_heads) || !(2..=64).contains(&d_vocab) {
            return Err(format!("model: H = {n_heads}, S = {d_vocab} out of range"));
        }
        let dg = (2 * n_heads - 1) as u32;
        let s = d_vocab as u64;
        let nk: u64 = s * (0..=dg).map(|m| s.saturating_pow(m)).sum::<u64>();
        let n = s.saturating_pow(dg).saturating_mul(nk);
        if n > MAX_TABLE as u64 {
            return Err(format!(
                "model: the full model's window table has {n} cells > {MAX_TABLE} (S = {d_vocab}, H = {n_heads})"
            ));
        }
        Ok(())
    }

    /// Panics if [`Full::check_size`] fails (check user input first).
    pub fn new(cfg: &FullConfig) -> Self {
        Self::check_size(cfg.d_vocab, cfg.n_heads).expect("model size checked by the caller");
        let (h, s) = (cfg.n_heads, cfg.d_vocab);
        let p = s + 1;
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
        let nc = p.pow(h as u32 + 1);
        // query head codes: zero-row self, every window token present
        let mut q_code = Vec::new();
        let mut q_index = vec![usize::MAX; nc];
        for code in 0..nc {
            let d = digits(code, p, h + 1);
            if d[0] == s && d[1..=h].iter().all(|&t| t < s) {
                q_index[code] = q_code.len();
                q_code.push(code);
            }
        }
        let nq_w = p.pow(nd as u32);
        let (mut wq_list, mut wq_index) = (Vec::new(), vec![usize::MAX; nq_w]);
        for code in 0..nq_w {
            if digits(code, p, nd)[..nd].iter().all(|&t| t < s) {
                wq_index[code] = wq_list.len();
                wq_list.push(code);
            }
        }
        let nk_w = p.pow(2 * h as u32);
        let (mut wk_list, mut wk_index) = (Vec::new(), vec![u32::MAX; nk_w]);
        for code in 0..nk_w {
            let d = digits(code, p, 2 * h);
            let m = (1..2 * h).find(|&k| d[k] == s).unwrap_or(2 * h);
            if d[0] < s && d[m..2 * h].iter().all(|&t| t == s) {
                wk_index[code] = wk_list.len() as u32;
                wk_list.push(code);
            }
        }
        // head codes inside windows
        let head_of = |self_tok: usize, win: &[usize; 16], hd: usize| {
            (0..h).fold(self_tok, |acc, j| acc + win[hd + j] * p.pow(1 + j as u32))
        };
        let qw_head: Vec<usize> = wq_list
            .iter()
            .flat_map(|&q| {
                let d = digits(q, p, nd);
                (0..h).map(move |hd| (d, hd))
            })
            .map(|(d, hd)| q_index[head_of(s, &d, hd)])
            .collect();
        let kw_head: Vec<usize> = wk_list
            .iter()
            .flat_map(|&k| {
                let d = digits(k, p, 2 * h);
                let mut win = [0usize; 16];
                win[..nd].copy_from_slice(&d[1..2 * h]);
                (0..h).map(move |hd| (d[0], win, hd))
            })
            .map(|(x0, win, hd)| head_of(x0, &win, hd))
            .collect();
        let active = subsets
            .iter()
            .enumerate()
            .filter(|(_, m)| *m & 1 == 0)
            .map(|(i, m)| {
                let mut mem = [0u8; 16];
                let mut k = 0;
                for hd in 0..h {
                    if m & (1 << (hd + 1)) != 0 {
                        mem[k] = hd as u8;
                        k += 1;
                    }
                }
                (i, mem, k)
            })
            .collect();
        let z = |n: usize| vec![T::zero(); n];
        let nq = q_code.len();
        let cells = wq_list.len() * wk_list.len();
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
            nc,
            q_code,
            wq_list,
            wq_index,
            wk_list,
            wk_index,
            qw_head,
            kw_head,
            qk: z(h * s * s),
            p_tab: z(h * nc * (h + 1)),
            o_tab: z(h * nc * s),
            xhat_tab: z(h * nc * s),
            rstd_tab: z(h * nc),
            v_tab: z(h * nc * s),
            ip_raw: z(h * nq * nc),
            n_tab: z(cells),
            e_tab: z(cells),
            d_n: z(cells),
            d_ip: z(h * nq * nc),
            dv_tab: z(h * nc * s),
            dm: z(h * s * s),
            sk_tot: z(n_sub),
            active,
            l: 0,
            work: Vec::new(),
        }
    }

    fn reserve(&mut self, n: usize, l: usize) {
        if self.l != l {
            self.work.clear();
            self.l = l;
        }
        let cells = self.n_tab.len();
        while self.work.len() < n.div_ceil(CHUNK) {
            self.work.push(Work {
                win: vec![0; l + 1],
                kidx: vec![0; l],
                p: vec![T::zero(); l],
                d_n: vec![T::zero(); cells],
                loss: T::zero(),
            });
        }
    }

    /// Layer 1 for every (head, code), then the ip and cell tables.
    fn prepare(&mut self) {
        let (h, s, nc) = (self.cfg.n_heads, self.cfg.d_vocab, self.nc);
        let p = s + 1;
        let k1 = h + 1;
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
        let w = self.w.value();
        let ov = self.wov.value();
        let (lw, lb) = (self.ln_w.value(), self.ln_b.value());
        let eps = T::of(LN_EPS);
        let mut o = [T::zero(); 64];
        for hd in 0..h {
            for code in 0..nc {
                let d = digits(code, p, h + 1);
                let me = d[0];
                let m = (1..=h).find(|&k| d[k] == s).map(|k| k - 1).unwrap_or(h);
                let pr = &mut self.p_tab[(hd * nc + code) * k1..(hd * nc + code + 1) * k1];
                let qk = |t: usize| {
                    if me < s {
                        self.qk[(hd * s + me) * s + t]
                    } else {
                        T::zero()
                    }
                };
                pr[0] = (if me < s { qk(me) } else { T::zero() }) + T::of(SELF_LOGIT);
                let mut mx = pr[0];
                for j in 0..h {
                    pr[1 + j] = if j < m {
                        qk(d[1 + j]) + w[(hd + j) * h + hd]
                    } else {
                        T::neg_infinity()
                    };
                    mx = mx.max(pr[1 + j]);
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
                o[..s].iter_mut().for_each(|v| *v = T::zero());
                if me < s {
                    o[me] += pr[0];
                }
                for j in 0..m {
                    o[d[1 + j]] += pr[1 + j];
                }
                let base = (hd * nc + code) * s;
                self.o_tab[base..base + s].copy_from_slice(&o[..s]);
                let mut pre = [T::zero(); 64];
                let mut mean = T::zero();
                for k in 0..s {
                    pre[k] = (0..s).map(|j| o[j] * ov[(hd * s + j) * s + k]).sum();
                    mean += pre[k];
                }
                mean /= T::of_usize(s);
                let var: T = (0..s).map(|k| (pre[k] - mean).powi(2)).sum::<T>() / T::of_usize(s);
                let rstd = T::one() / (var + eps).sqrt();
                self.rstd_tab[hd * nc + code] = rstd;
                for k in 0..s {
                    let xh = (pre[k] - mean) * rstd;
                    self.xhat_tab[base + k] = xh;
                    self.v_tab[base + k] = xh * lw[k] + lb[k];
                }
            }
            let nq = self.q_code.len();
            for qi in 0..nq {
                let qo = (hd * nc + self.q_code[qi]) * s;
                for code in 0..nc {
                    let ko = (hd * nc + code) * s;
                    self.ip_raw[(hd * nq + qi) * nc + code] = (0..s)
                        .map(|k| self.v_tab[qo + k] * self.v_tab[ko + k])
                        .sum();
                }
            }
        }
        let c = self.c.value();
        let z: T = self.active.iter().map(|(i, _, _)| c[*i] * c[*i]).sum();
        let az = self.a.value()[0] / z;
        let (nq, nkw) = (self.q_code.len(), self.wk_list.len());
        let mut ip = [T::zero(); 16];
        for qw in 0..self.wq_list.len() {
            let qh = &self.qw_head[qw * h..(qw + 1) * h];
            let mut mx = T::neg_infinity();
            for kw in 0..nkw {
                let kh = &self.kw_head[kw * h..(kw + 1) * h];
                for hd in 0..h {
                    ip[hd] = self.ip_raw[(hd * nq + qh[hd]) * nc + kh[hd]].max(T::zero());
                }
                let mut num = T::zero();
                for (si, mem, k) in &self.active {
                    let mut v = c[*si] * c[*si];
                    for &mm in &mem[..*k] {
                        v *= ip[mm as usize];
                    }
                    num += v;
                }
                self.n_tab[qw * nkw + kw] = num;
                mx = mx.max(az * num);
            }
            for kw in 0..nkw {
                self.e_tab[qw * nkw + kw] = (az * self.n_tab[qw * nkw + kw] - mx).exp();
            }
        }
    }

    /// Mean loss over `tokens` (`[n, l+1]`, target last); with `grad`, accumulates
    /// the mean's gradient into every parameter. Needs `l ≥ 2H − 1`.
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
        let (h, s, nc) = (self.cfg.n_heads, self.cfg.d_vocab, self.nc);
        let p = s + 1;
        let nd = 2 * h;
        let wk = &self.work[0];
        let mut p1 = vec![0.0; (l + 1) * h * nd];
        for i in 0..=l {
            let me = if i < l { seq[i] as usize } else { s };
            let win = digits(wk.win[i], p, 2 * h - 1);
            for hd in 0..h {
                let code = (0..h).fold(me, |acc, j| acc + win[hd + j] * p.pow(1 + j as u32));
                let pr = &self.p_tab[(hd * nc + code) * (h + 1)..];
                p1[(i * h + hd) * nd] = pr[0].as_f64();
                for j in 0..h {
                    p1[(i * h + hd) * nd + hd + 1 + j] = pr[1 + j].as_f64();
                }
            }
        }
        (p1, wk.p[..l].iter().map(|v| v.as_f64()).collect())
    }

    fn run(&mut self, tokens: &[u8], l: usize, grad: bool, out: Option<&mut [T]>) -> T {
        let n = tokens.len() / (l + 1);
        let (h, s, nc) = (self.cfg.n_heads, self.cfg.d_vocab, self.nc);
        assert!(l + 1 >= 2 * h, "sequence length {l} < 2H - 1");
        self.reserve(n, l);
        self.prepare();
        let nd = 2 * h - 1;
        let ctx = Ctx {
            s,
            l,
            n_w: (s + 1).pow(nd as u32),
            digits: nd,
            nkw: self.wk_list.len(),
            wq_index: &self.wq_index,
            wk_index: &self.wk_index,
            e_tab: &self.e_tab,
            loss: self.cfg.loss,
            floor: T::of(self.cfg.nll_floor),
            scale: T::one() / T::of_usize(n.max(1)),
            grad,
        };
        let chunks = n.div_ceil(CHUNK);
        let work = &mut self.work[..chunks];
        let per = |ci: usize| &tokens[ci * CHUNK * (l + 1)..((ci + 1) * CHUNK).min(n) * (l + 1)];
        match out {
            Some(o) => {
                let mut outs: Vec<&mut [T]> = o.chunks_mut(CHUNK * s).collect();
                work.par_iter_mut()
                    .zip(outs.par_iter_mut())
                    .enumerate()
                    .for_each(|(ci, (wk, o))| ctx.chunk(wk, per(ci), Some(o)));
            }
            None => work
                .par_iter_mut()
                .enumerate()
                .for_each(|(ci, wk)| ctx.chunk(wk, per(ci), None)),
        }
        let scale = ctx.scale;
        let mut loss = T::zero();
        for wk in self.work[..chunks].iter() {
            loss += wk.loss;
        }
        if !grad {
            return loss * scale;
        }
        self.d_n.iter_mut().for_each(|x| *x = T::zero());
        for wk in self.work[..chunks].iter() {
            for (acc, v) in self.d_n.iter_mut().zip(&wk.d_n) {
                *acc += *v;
            }
        }
        // cells → a, c, ip tables
        let c = self.c.value();
        let z: T = self.active.iter().map(|(i, _, _)| c[*i] * c[*i]).sum();
        let a = self.a.value()[0];
        let az = a / z;
        let (nq, nkw) = (self.q_code.len(), self.wk_list.len());
        let mut sn = T::zero();
        self.sk_tot.iter_mut().for_each(|x| *x = T::zero());
        self.d_ip.iter_mut().for_each(|x| *x = T::zero());
        let (mut ip, mut at) = ([T::zero(); 16], [0usize; 16]);
        for qw in 0..self.wq_list.len() {
            let qh = &self.qw_head[qw * h..(qw + 1) * h];
            for kw in 0..nkw {
                let d = self.d_n[qw * nkw + kw];
                if d == T::zero() {
                    continue;
                }
                sn += d * self.n_tab[qw * nkw + kw];
                let kh = &self.kw_head[kw * h..(kw + 1) * h];
                for hd in 0..h {
                    at[hd] = (hd * nq + qh[hd]) * nc + kh[hd];
                    ip[hd] = self.ip_raw[at[hd]].max(T::zero());
                }
                for (si, mem, k) in &self.active {
                    let c2 = c[*si] * c[*si];
                    let mut kern = T::one();
                    for &mm in &mem[..*k] {
                        kern *= ip[mm as usize];
                    }
                    self.sk_tot[*si] += d * kern;
                    for (i1, &mm) in mem[..*k].iter().enumerate() {
                        if ip[mm as usize] <= T::zero() {
                            continue;
                        }
                        let mut rest = c2;
                        for (i2, &m2) in mem[..*k].iter().enumerate() {
                            if i1 != i2 {
                                rest *= ip[m2 as usize];
                            }
                        }
                        self.d_ip[at[mm as usize]] += d * az * rest;
                    }
                }
            }
        }
        self.a.grad_mut()[0] += sn / z;
        for &(i, _, _) in &self.active {
            let ci = self.c.value()[i];
            self.c.grad_mut()[i] += T::of(2.0) * a * ci * (self.sk_tot[i] - sn / z) / z;
        }
        // ip tables → v tables
        self.dv_tab.iter_mut().for_each(|x| *x = T::zero());
        for hd in 0..h {
            for qi in 0..nq {
                let qo = (hd * nc + self.q_code[qi]) * s;
                for code in 0..nc {
                    let d = self.d_ip[(hd * nq + qi) * nc + code];
                    if d == T::zero() {
                        continue;
                    }
                    let ko = (hd * nc + code) * s;
                    for k in 0..s {
                        let (vq, vk) = (self.v_tab[qo + k], self.v_tab[ko + k]);
                        self.dv_tab[qo + k] += d * vk;
                        self.dv_tab[ko + k] += d * vq;
                    }
                }
            }
        }
        // v → LayerNorm → W_OV → layer-1 softmax → QK and RPE, once per (head, code)
        self.dm.iter_mut().for_each(|x| *x = T::zero());
        let p = s + 1;
        let k1 = h + 1;
        let ns = T::of_usize(s);
        let ov: Vec<T> = self.wov.value().to_vec();
        let lw: Vec<T> = self.ln_w.value().to_vec();
        for hd in 0..h {
            for code in 0..nc {
                let base = (hd * nc + code) * s;
                if self.dv_tab[base..base + s].iter().all(|v| *v == T::zero()) {
                    continue;
                }
                let mut dxh = [T::zero(); 64];
                for k in 0..s {
                    let dv = self.dv_tab[base + k];
                    self.ln_w.grad_mut()[k] += dv * self.xhat_tab[base + k];
                    self.ln_b.grad_mut()[k] += dv;
                    dxh[k] = dv * lw[k];
                }
                let xh = &self.xhat_tab[base..base + s];
                let m1: T = dxh[..s].iter().copied().sum::<T>() / ns;
                let m2: T = (0..s).map(|k| dxh[k] * xh[k]).sum::<T>() / ns;
                let rstd = self.rstd_tab[hd * nc + code];
                let mut dpre = [T::zero(); 64];
                for k in 0..s {
                    dpre[k] = rstd * (dxh[k] - m1 - xh[k] * m2);
                }
                let o = &self.o_tab[base..base + s];
                let mut dob = [T::zero(); 64];
                let gov = self.wov.grad_mut();
                for j in 0..s {
                    for k in 0..s {
                        gov[(hd * s + j) * s + k] += o[j] * dpre[k];
                        dob[j] += ov[(hd * s + j) * s + k] * dpre[k];
                    }
                }
                let d = digits(code, p, h + 1);
                let me = d[0];
                let m = (1..=h).find(|&k| d[k] == s).map(|k| k - 1).unwrap_or(h);
                let pr = &self.p_tab[(hd * nc + code) * k1..(hd * nc + code + 1) * k1];
                let mut dp = [T::zero(); 16];
                dp[0] = if me < s { dob[me] } else { T::zero() };
                for j in 0..m {
                    dp[1 + j] = dob[d[1 + j]];
                }
                let pdp: T = (0..=m).map(|kk| pr[kk] * dp[kk]).sum();
                let dw = self.w.grad_mut();
                for kk in 0..=m {
                    let dl = pr[kk] * (dp[kk] - pdp);
                    if kk > 0 {
                        dw[(hd + kk - 1) * h + hd] += dl;
                    }
                    let t = if kk == 0 { me } else { d[kk] };
                    if me < s && t < s {
                        self.dm[(hd * s + me) * s + t] += dl;
                    }
                }
            }
        }
        // M = Q Kᵀ: dQ = dM K, dK = dMᵀ Q
        let (wq, wkk) = (self.wq.value().to_vec(), self.wk.value().to_vec());
        for hd in 0..h {
            for i in 0..s {
                for j in 0..s {
                    let mut gq = T::zero();
                    let mut gk = T::zero();
                    for k in 0..s {
                        gq += self.dm[(hd * s + i) * s + k] * wkk[(hd * s + k) * s + j];
                        gk += self.dm[(hd * s + k) * s + i] * wq[(hd * s + k) * s + j];
                    }
                    self.wq.grad_mut()[(hd * s + i) * s + j] += gq;
                    self.wk.grad_mut()[(hd * s + i) * s + j] += gk;
                }
            }
        }
        loss * scale
    }
}

/// What every chunk reads.
struct Ctx<'a, T> {
    s: usize,
    l: usize,
    n_w: usize,
    digits: usize,
    nkw: usize,
    wq_index: &'a [usize],
    wk_index: &'a [u32],
    e_tab: &'a [T],
    loss: LossKind,
    floor: T,
    scale: T,
    grad: bool,
}

impl<T: Float> Ctx<'_, T> {
    fn chunk(&self, wk: &mut Work<T>, tokens: &[u8], mut out: Option<&mut &mut [T]>) {
        let (s, l, nkw) = (self.s, self.l, self.nkw);
        let p = s + 1;
        wk.loss = T::zero();
        if self.grad {
            wk.d_n.iter_mut().for_each(|x| *x = T::zero());
        }
        let top = self.n_w / p;
        let mut yhat = [T::zero(); 64];
        let mut g = [T::zero(); 64];
        for (b, seq) in tokens.chunks_exact(l + 1).enumerate() {
            let x = &seq[..l];
            let y = seq[l] as usize;
            wk.win[0] = self.n_w - 1;
            for i in 1..=l {
                let far = if i > self.digits {
                    x[i - 1 - self.digits] as usize
                } else {
                    s
                };
                wk.win[i] = x[i - 1] as usize + p * (wk.win[i - 1] - far * top);
            }
            let qrow = self.wq_index[wk.win[l]] * nkw;
            let erow = &self.e_tab[qrow..qrow + nkw];
            let mut sum = T::zero();
            for i in 0..l {
                let k = self.wk_index[x[i] as usize + p * wk.win[i]];
                wk.kidx[i] = k;
                wk.p[i] = erow[k as usize];
                sum += wk.p[i];
            }
            yhat[..s].iter_mut().for_each(|v| *v = T::zero());
            let inv = T::one() / sum;
            for i in 0..l {
                wk.p[i] *= inv;
                yhat[x[i] as usize] += wk.p[i];
            }
            match self.loss {
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
                    wk.loss -= yhat[y].max(self.floor).ln();
                    g[..s].iter_mut().for_each(|v| *v = T::zero());
                    if yhat[y] > self.floor {
                        g[y] = -T::one() / yhat[y];
                    }
                }
            }
            if let Some(o) = out.as_deref_mut() {
                o[b * s..(b + 1) * s].copy_from_slice(&yhat[..s]);
            }
            if !self.grad {
                continue;
            }
            let pg: T = (0..s).map(|k| yhat[k] * g[k]).sum();
            for k in 0..s {
                g[k] = (g[k] - pg) * self.scale;
            }
            let drow = &mut wk.d_n[qrow..qrow + nkw];
            for i in 0..l {
                drow[wk.kidx[i] as usize] += wk.p[i] * g[x[i] as usize];
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
