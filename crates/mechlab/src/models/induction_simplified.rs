//! The simplified two-layer transformer of Chen, Sheen, Wang, Yang (2024), fused.
//!
//! Layer 1 is RPE-only attention with `H` heads and no Q/K/V: head `h` (0-based)
//! attends to the relative distances `h+1 ..= h+H` with logit `W[r-1, h]`, so its
//! pattern is the same for every sequence (it depends on the position only through
//! which distances exist). Each head's output `u_i^h = Σ_r A_h(i, r) e_{x_{i-r}}` is
//! scaled to unit ℓ2 norm, `v = u / (‖u‖ + 1e-7)`. The feature of position `i` is
//! `[x_i, v_i^0, ..., v_i^{H-1}]` (component 0 is the raw token; the query, at
//! position `L`, has a zero raw token). FFN + layer 2 form a polynomial kernel over
//! subsets `δ` of the `H+1` components with `|δ| ≤ D`:
//! `K_δ(l) = Π_{c∈δ} ReLU(⟨z_L^c, z_l^c⟩)`, and the layer-2 logit of key `l` is
//! `s_l = a Σ_δ c_δ² K_δ(l) / Σ_{δ_0 = 0} c_δ²`; the output is
//! `ŷ = Σ_l softmax(s)_l e_{x_l}`.
//!
//! Two losses: the *code loss* (the authors' code: cross-entropy of the probability
//! vector ŷ used as logits, bounded below by `−log(e/(e+S−1))`) and the true
//! `−log max(ŷ_y, floor)`.
//!
//! Speed: the layer-1 pattern is computed once per step; only the query row `L` of
//! layer 2 exists; the sequences are split into fixed chunks of [`CHUNK`] whose
//! gradients are summed in chunk order, so the result is bit-identical whatever the
//! thread count; every buffer is preallocated.
//!
//! ```
//! use mechlab::models::induction_simplified::{Simplified, SimplifiedConfig};
//! let cfg = SimplifiedConfig::default();
//! let mut m = Simplified::<f64>::new(&cfg);
//! let tokens = vec![0u8, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1]; // L = 10 and the target
//! let loss = m.loss(&tokens, 10, false);
//! assert!(loss.is_finite() && loss > 0.55);
//! ```

// Index loops read like the equations here.
#![allow(clippy::needless_range_loop)]

use mechlab_engine::{param, Float, Param, Parameters};
use rayon::prelude::*;

/// Sequences per work chunk: fixed, so the summation order never depends on threads.
pub const CHUNK: usize = 512;
/// The `ε` of the unit-norm scaling, as in the authors' code.
pub const NORM_EPS: f64 = 1e-7;

/// Which loss a step minimises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossKind {
    /// Cross-entropy of ŷ treated as logits (the authors' code).
    Code,
    /// `−log max(ŷ_y, floor)`.
    Nll,
}

impl LossKind {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "code" => Ok(LossKind::Code),
            "nll" => Ok(LossKind::Nll),
            _ => Err(format!("model.loss `{s}`: expected code or nll")),
        }
    }
}

/// Shape and initialisation.
#[derive(Clone, Debug)]
pub struct SimplifiedConfig {
    pub d_vocab: usize,
    pub n_heads: usize,
    /// Largest `|δ|` of the kernel's subsets.
    pub degree: usize,
    pub w_plus: f64,
    pub w_minus: f64,
    pub c_init: f64,
    pub a_init: f64,
    pub loss: LossKind,
    pub nll_floor: f64,
}

impl Default for SimplifiedConfig {
    fn default() -> Self {
        SimplifiedConfig {
            d_vocab: 3,
            n_heads: 3,
            degree: 2,
            w_plus: 3.0,
            w_minus: 0.1,
            c_init: 0.01,
            a_init: 0.01,
            loss: LossKind::Code,
            nll_floor: 1e-8,
        }
    }
}

/// The kernel's subsets `δ` (bit `c` = component `c`), `|δ| ≤ degree`, in the order
/// of the authors' `itertools.product` (component 0 the most significant digit).
pub fn subsets(n_heads: usize, degree: usize) -> Vec<u32> {
    let n = n_heads + 1;
    (0u32..(1 << n))
        .map(|code| {
            // product order: digit k (k = 0 most significant) is component k
            (0..n).fold(0u32, |m, k| m | (((code >> (n - 1 - k)) & 1) << k))
        })
        .filter(|m| (m.count_ones() as usize) <= degree)
        .collect()
}

/// Human name of a subset: the parent distances its heads copy at initialisation,
/// e.g. `{1,2}`; `{x}` marks the raw-token component.
pub fn subset_name(mask: u32, n_heads: usize) -> String {
    let mut parts = Vec::new();
    if mask & 1 != 0 {
        parts.push("x".to_string());
    }
    for h in 0..n_heads {
        if mask & (1 << (h + 1)) != 0 {
            parts.push(format!("{}", h + 1));
        }
    }
    format!("{{{}}}", parts.join(","))
}

/// Per-chunk scratch and gradient partials.
struct Work<T> {
    win: Vec<usize>, // [L+1]: window code of each position (the 2H-1 tokens before it)
    kidx: Vec<u32>,  // [L]: compact key-window index of each key
    p: Vec<T>,       // [L]: blocks.1.attn.hook_pattern (query L)
    d_n: Vec<T>,     // [NQW, NKW]: Σ ds over the (query, key) window pairs
    loss: T,
}

/// The model: parameters, its subsets, the per-step tables and workspaces.
///
/// Why tables: the layer-2 logit of key `l` depends on the sequence only through
/// the `2H − 1` tokens before the query and the `2H − 1` tokens before `l` (or
/// "missing" before the start): layer 1's pattern is the same for every sequence.
/// So each step builds, from the parameters, the logit `N(q, k)` and `exp` of every
/// (query window, key window) pair once; a sequence then costs a lookup per key,
/// and its backward adds `∂L/∂s_l` into that pair's cell. The cells' gradients go
/// through the kernel, the unit-norm scaling and the layer-1 softmax once per step.
pub struct Simplified<T: Float> {
    pub cfg: SimplifiedConfig,
    /// `blocks.0.attn.W_pos` `[2H-1, H]`: `W[r-1, h]` is head `h`'s logit for distance `r`.
    pub w: Param<T>,
    /// `blocks.1.ffn.C` `[n_subsets]`: the kernel's `c_δ`.
    pub c: Param<T>,
    /// `blocks.1.attn.a` `[1]`: the classifier's scale.
    pub a: Param<T>,
    pub subsets: Vec<u32>,
    /// `blocks.0.attn.hook_pattern` by window: `[head, m (distances present, 0..=H), j]`,
    /// head h's weight on distance `h+1+j` when its first `m` distances exist.
    pub pattern: Vec<T>,
    n_codes: usize, // (S+1)^H head codes
    n_q: usize,     // S^H head codes without a missing token
    q_code: Vec<usize>,
    wq_list: Vec<usize>, // query windows (no missing token)
    wq_index: Vec<usize>,
    wk_list: Vec<usize>, // key windows (missing only as a suffix)
    wk_index: Vec<u32>,
    qw_head: Vec<usize>, // [NQW, H]: the ip-table row of each head for a query window
    kw_head: Vec<usize>, // [NKW, H]: the head code of each head for a key window
    u_tab: Vec<T>,       // [H, C, S]
    norm_tab: Vec<T>,    // [H, C]
    v_tab: Vec<T>,       // [H, C, S]
    ip_raw: Vec<T>,      // [H, NQ, C]
    n_tab: Vec<T>,       // [NQW, NKW]: N(q, k) = Σ_δ c_δ² K_δ
    e_tab: Vec<T>,       // [NQW, NKW]: exp(a N / Z − row max)
    d_n: Vec<T>,         // [NQW, NKW]
    d_ip: Vec<T>,        // [H, NQ, C]
    dv_tab: Vec<T>,      // [H, C, S]
    d_pat: Vec<T>,       // [H, H+1, H]
    sk_tot: Vec<T>,      // [n_sub]
    active: Vec<(usize, [u8; 16], usize)>, // (subset index, members, |δ|) with δ_0 = 0
    l: usize,
    work: Vec<Work<T>>,
    train_w: bool,
    train_c: bool,
    train_a: bool,
}

/// Largest `(query windows) × (key windows)` table the model accepts.
pub const MAX_TABLE: usize = 1 << 20;

fn n_key_windows(s: usize, digits: usize) -> usize {
    (0..=digits).map(|m| s.pow(m as u32)).sum()
}

impl<T: Float> Simplified<T> {
    /// Checks that the table form fits: `S^(2H-1) × Σ_m S^m ≤ MAX_TABLE`
    /// (S = 3: H ≤ 3; S = 2: H ≤ 5).
    pub fn check_size(d_vocab: usize, n_heads: usize) -> Result<(), String> {
        if !(1..=8).contains(&n_heads) || !(2..=64).contains(&d_vocab) {
            return Err(format!("model: H = {n_heads}, S = {d_vocab} out of range"));
        }
        let digits = (2 * n_heads - 1) as u32;
        let nq = (d_vocab as u64).saturating_pow(digits);
        let nk: u64 = (0..=digits)
            .map(|m| (d_vocab as u64).saturating_pow(m))
            .sum();
        let n = nq.saturating_mul(nk);
        if n > MAX_TABLE as u64 {
            return Err(format!(
                "model: the window table has {n} cells > {MAX_TABLE} (S = {d_vocab}, H = {n_heads}); \
                 the fused model supports S = 3 with H ≤ 3, S = 2 with H ≤ 5"
            ));
        }
        Ok(())
    }

    /// Panics if [`Simplified::check_size`] fails (check it first on user input).
    pub fn new(cfg: &SimplifiedConfig) -> Self {
        Self::check_size(cfg.d_vocab, cfg.n_heads).expect("model size checked by the caller");
        let (h, s) = (cfg.n_heads, cfg.d_vocab);
        let nd = 2 * h - 1;
        let mut w = vec![T::of(cfg.w_minus); nd * h];
        for k in 0..h {
            w[k * h + k] = T::of(cfg.w_plus);
        }
        let subsets = subsets(h, cfg.degree);
        let n_sub = subsets.len();
        let n_codes = (s + 1).pow(h as u32);
        let mut q_code = Vec::new();
        let mut q_index = vec![usize::MAX; n_codes];
        for code in 0..n_codes {
            if window(code, s, h).0 == h {
                q_index[code] = q_code.len();
                q_code.push(code);
            }
        }
        let n_q = q_code.len();
        let n_w = (s + 1).pow(nd as u32);
        let (mut wq_list, mut wq_index) = (Vec::new(), vec![usize::MAX; n_w]);
        let (mut wk_list, mut wk_index) = (Vec::new(), vec![u32::MAX; n_w]);
        for code in 0..n_w {
            let (m, toks) = window(code, s, nd);
            // missing tokens only as a suffix: the windows that positions produce
            if toks[m..nd].iter().all(|&t| t == s) {
                wk_index[code] = wk_list.len() as u32;
                wk_list.push(code);
                if m == nd {
                    wq_index[code] = wq_list.len();
                    wq_list.push(code);
                }
            }
        }
        debug_assert_eq!(wk_list.len(), n_key_windows(s, nd));
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
        let p = s + 1;
        let sub = |code: usize, hd: usize| (code / p.pow(hd as u32)) % n_codes;
        let qw_head: Vec<usize> = wq_list
            .iter()
            .flat_map(|&q| (0..h).map(move |hd| (q, hd)))
            .map(|(q, hd)| q_index[sub(q, hd)])
            .collect();
        let kw_head: Vec<usize> = wk_list
            .iter()
            .flat_map(|&k| (0..h).map(move |hd| (k, hd)))
            .map(|(k, hd)| sub(k, hd))
            .collect();
        let z = |n: usize| vec![T::zero(); n];
        let cells = wq_list.len() * wk_list.len();
        Simplified {
            cfg: cfg.clone(),
            w: param("blocks.0.attn.W_pos", "W", &[nd, h], w),
            c: param(
                "blocks.1.ffn.C",
                "C",
                &[n_sub],
                vec![T::of(cfg.c_init); n_sub],
            ),
            a: param("blocks.1.attn.a", "a", &[1], vec![T::of(cfg.a_init)]),
            subsets,
            pattern: z(h * (h + 1) * h),
            n_codes,
            n_q,
            q_code,
            wq_list,
            wq_index,
            wk_list,
            wk_index,
            qw_head,
            kw_head,
            u_tab: z(h * n_codes * s),
            norm_tab: z(h * n_codes),
            v_tab: z(h * n_codes * s),
            ip_raw: z(h * n_q * n_codes),
            n_tab: z(cells),
            e_tab: z(cells),
            d_n: z(cells),
            d_ip: z(h * n_q * n_codes),
            dv_tab: z(h * n_codes * s),
            d_pat: z(h * (h + 1) * h),
            sk_tot: z(n_sub),
            active,
            l: 0,
            work: Vec::new(),
            train_w: true,
            train_c: true,
            train_a: true,
        }
    }

    /// Which groups get gradients (the others are frozen).
    pub fn set_groups(&mut self, groups: &[String]) {
        let all = groups.is_empty();
        self.train_w = all || groups.iter().any(|g| g == "W");
        self.train_c = all || groups.iter().any(|g| g == "C");
        self.train_a = all || groups.iter().any(|g| g == "a");
    }

    /// Sizes the workspaces for `n` sequences of length `l` (allocates only when
    /// the shape grows, i.e. never inside training).
    pub fn reserve(&mut self, n: usize, l: usize) {
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

    /// Rebuilds the layer-1 patterns and every table from the parameters.
    fn prepare(&mut self) {
        let (h, s, nc) = (self.cfg.n_heads, self.cfg.d_vocab, self.n_codes);
        let w = self.w.value();
        for hd in 0..h {
            for m in 0..=h {
                let row = &mut self.pattern[(hd * (h + 1) + m) * h..(hd * (h + 1) + m + 1) * h];
                row.iter_mut().for_each(|x| *x = T::zero());
                if m == 0 {
                    continue;
                }
                let mx = (0..m)
                    .map(|j| w[(hd + j) * h + hd])
                    .fold(T::neg_infinity(), T::max);
                let mut sum = T::zero();
                for j in 0..m {
                    row[j] = (w[(hd + j) * h + hd] - mx).exp();
                    sum += row[j];
                }
                row[..m].iter_mut().for_each(|x| *x /= sum);
            }
        }
        let eps = T::of(NORM_EPS);
        for hd in 0..h {
            for code in 0..nc {
                let o = (hd * nc + code) * s;
                let u = &mut self.u_tab[o..o + s];
                u.iter_mut().for_each(|x| *x = T::zero());
                let (m, toks) = window(code, s, h);
                let pat = &self.pattern[(hd * (h + 1) + m) * h..];
                for j in 0..m {
                    u[toks[j]] += pat[j];
                }
                let n = u.iter().map(|x| *x * *x).sum::<T>().sqrt();
                self.norm_tab[hd * nc + code] = n;
                for k in 0..s {
                    self.v_tab[o + k] = self.u_tab[o + k] / (n + eps);
                }
            }
            for qi in 0..self.n_q {
                let qo = (hd * nc + self.q_code[qi]) * s;
                for code in 0..nc {
                    let o = (hd * nc + code) * s;
                    let d: T = (0..s).map(|k| self.v_tab[qo + k] * self.v_tab[o + k]).sum();
                    self.ip_raw[(hd * self.n_q + qi) * nc + code] = d;
                }
            }
        }
        let c = self.c.value();
        let z: T = self.active.iter().map(|(i, _, _)| c[*i] * c[*i]).sum();
        let az = self.a.value()[0] / z;
        let nkw = self.wk_list.len();
        let mut ip = [T::zero(); 16];
        let nqw = self.wq_list.len();
        for qw in 0..nqw {
            let mut mx = T::neg_infinity();
            let qh = &self.qw_head[qw * h..(qw + 1) * h];
            for kw in 0..nkw {
                let kh = &self.kw_head[kw * h..(kw + 1) * h];
                for (hd, v) in ip.iter_mut().enumerate().take(h) {
                    *v = self.ip_raw[(hd * self.n_q + qh[hd]) * nc + kh[hd]].max(T::zero());
                }
                let mut num = T::zero();
                for (si, mem, k) in &self.active {
                    let mut v = c[*si] * c[*si];
                    for &m in &mem[..*k] {
                        v *= ip[m as usize];
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

    /// Head `h`'s weight on each distance `1..=2H-1` at a position where every
    /// distance exists: `[H, 2H-1]` (head, distance − 1).
    pub fn interior_pattern(&self) -> Vec<f64> {
        let h = self.cfg.n_heads;
        let nd = 2 * h - 1;
        let w: Vec<f64> = self.w.value().iter().map(|x| x.as_f64()).collect();
        let mut out = vec![0.0; h * nd];
        for hd in 0..h {
            let mx = (0..h)
                .map(|j| w[(hd + j) * h + hd])
                .fold(f64::MIN, f64::max);
            let z: f64 = (0..h).map(|j| (w[(hd + j) * h + hd] - mx).exp()).sum();
            for j in 0..h {
                out[hd * nd + hd + j] = (w[(hd + j) * h + hd] - mx).exp() / z;
            }
        }
        out
    }

    /// `c_δ² / Σ_{δ_0=0} c_δ²` for every subset (0 for subsets holding the raw token).
    pub fn c_shares(&self) -> Vec<f64> {
        let c = self.c.value();
        let z: f64 = self
            .subsets
            .iter()
            .zip(c)
            .filter(|(m, _)| *m & 1 == 0)
            .map(|(_, v)| v.as_f64() * v.as_f64())
            .sum();
        self.subsets
            .iter()
            .zip(c)
            .map(|(m, v)| {
                if m & 1 == 0 {
                    v.as_f64().powi(2) / z
                } else {
                    0.0
                }
            })
            .collect()
    }

    /// Mean loss over the sequences in `tokens` (`[n, l+1]`, target last); with
    /// `grad`, accumulates the mean's gradient into the trained parameters.
    /// Needs `l ≥ 2H − 1` (the query sees every distance).
    pub fn loss(&mut self, tokens: &[u8], l: usize, grad: bool) -> T {
        self.run(tokens, l, grad, None)
    }

    /// Predicted distributions `[n, S]` into `out` (no gradient); returns the loss.
    pub fn predict(&mut self, tokens: &[u8], l: usize, out: &mut [T]) -> T {
        self.run(tokens, l, false, Some(out))
    }

    /// The attention patterns of one sequence `[l + 1]` (target last):
    /// `blocks.0.attn.hook_pattern` as `[query_pos (0..=L), head, distance (0..2H)]`
    /// and `blocks.1.attn.hook_pattern` of the query as `[L]`.
    pub fn patterns(&mut self, seq: &[u8], l: usize) -> (Vec<f64>, Vec<f64>) {
        self.run(seq, l, false, None);
        let h = self.cfg.n_heads;
        let nd = 2 * h;
        let mut p1 = vec![0.0; (l + 1) * h * nd];
        for i in 0..=l {
            for hd in 0..h {
                let m = i.saturating_sub(hd).min(h);
                for j in 0..m {
                    p1[(i * h + hd) * nd + hd + 1 + j] =
                        self.pattern[(hd * (h + 1) + m) * h + j].as_f64();
                }
            }
        }
        (p1, self.work[0].p[..l].iter().map(|v| v.as_f64()).collect())
    }

    fn run(&mut self, tokens: &[u8], l: usize, grad: bool, out: Option<&mut [T]>) -> T {
        let n = tokens.len() / (l + 1);
        let (h, s, nc) = (self.cfg.n_heads, self.cfg.d_vocab, self.n_codes);
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
        // reduce in chunk order
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
        // cells → a, c and the ip tables: s = a N / Z, N = Σ_δ c_δ² Π_{h∈δ} ip_h
        let c = self.c.value();
        let z: T = self.active.iter().map(|(i, _, _)| c[*i] * c[*i]).sum();
        let a = self.a.value()[0];
        let az = a / z;
        let nkw = self.wk_list.len();
        let mut sn = T::zero();
        self.sk_tot.iter_mut().for_each(|x| *x = T::zero());
        self.d_ip.iter_mut().for_each(|x| *x = T::zero());
        let mut ip = [T::zero(); 16];
        let mut at = [0usize; 16];
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
                    at[hd] = (hd * self.n_q + qh[hd]) * nc + kh[hd];
                    ip[hd] = self.ip_raw[at[hd]].max(T::zero());
                }
                for (si, mem, k) in &self.active {
                    let c2 = c[*si] * c[*si];
                    let mut kern = T::one();
                    for &m in &mem[..*k] {
                        kern *= ip[m as usize];
                    }
                    self.sk_tot[*si] += d * kern;
                    for (i1, &m) in mem[..*k].iter().enumerate() {
                        if ip[m as usize] <= T::zero() {
                            continue; // ReLU
                        }
                        let mut rest = c2;
                        for (i2, &m2) in mem[..*k].iter().enumerate() {
                            if i1 != i2 {
                                rest *= ip[m2 as usize];
                            }
                        }
                        self.d_ip[at[m as usize]] += d * az * rest;
                    }
                }
            }
        }
        if self.train_a {
            self.a.grad_mut()[0] += sn / z;
        }
        if self.train_c {
            // ∂s/∂c_δ = 2 a c_δ (K_δ − N / Z) / Z
            for &(i, _, _) in &self.active {
                let ci = self.c.value()[i];
                self.c.grad_mut()[i] += T::of(2.0) * a * ci * (self.sk_tot[i] - sn / z) / z;
            }
        }
        if !self.train_w {
            return loss * scale;
        }
        // ip tables → v tables → u tables → patterns → W
        self.dv_tab.iter_mut().for_each(|x| *x = T::zero());
        for hd in 0..h {
            for qi in 0..self.n_q {
                let qo = (hd * nc + self.q_code[qi]) * s;
                for code in 0..nc {
                    let t = (hd * self.n_q + qi) * nc + code;
                    let d = self.d_ip[t];
                    if d == T::zero() {
                        continue;
                    }
                    let o = (hd * nc + code) * s;
                    for k in 0..s {
                        let (vq, vk) = (self.v_tab[qo + k], self.v_tab[o + k]);
                        self.dv_tab[qo + k] += d * vk;
                        self.dv_tab[o + k] += d * vq;
                    }
                }
            }
        }
        let eps = T::of(NORM_EPS);
        self.d_pat.iter_mut().for_each(|x| *x = T::zero());
        for hd in 0..h {
            for code in 0..nc {
                let nrm = self.norm_tab[hd * nc + code];
                if nrm <= T::zero() {
                    continue;
                }
                let o = (hd * nc + code) * s;
                let ne = nrm + eps;
                let dot: T = (0..s).map(|k| self.dv_tab[o + k] * self.u_tab[o + k]).sum();
                let coef = dot / (nrm * ne * ne);
                let (m, toks) = window(code, s, h);
                let po = (hd * (h + 1) + m) * h;
                for j in 0..m {
                    let k = toks[j];
                    self.d_pat[po + j] += self.dv_tab[o + k] / ne - self.u_tab[o + k] * coef;
                }
            }
        }
        let dw = self.w.grad_mut();
        for hd in 0..h {
            for m in 1..=h {
                let po = (hd * (h + 1) + m) * h;
                let pat = &self.pattern[po..po + m];
                let g = &self.d_pat[po..po + m];
                let dot: T = (0..m).map(|j| pat[j] * g[j]).sum();
                for j in 0..m {
                    dw[(hd + j) * h + hd] += pat[j] * (g[j] - dot);
                }
            }
        }
        loss * scale
    }
}

/// The tokens of a code over `digits` tokens (`t_j`, `j = 0` nearest; `S` =
/// missing) and how many leading tokens exist before the first missing one.
fn window(code: usize, s: usize, digits: usize) -> (usize, [usize; 16]) {
    let mut toks = [0usize; 16];
    let mut c = code;
    let mut m = digits;
    for (j, t) in toks.iter_mut().enumerate().take(digits) {
        *t = c % (s + 1);
        c /= s + 1;
        if *t == s && m == digits {
            m = j;
        }
    }
    (m, toks)
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
        wk.loss = T::zero();
        if self.grad {
            wk.d_n.iter_mut().for_each(|x| *x = T::zero());
        }
        let top = self.n_w / (s + 1); // (S+1)^(2H-2)
        let mut yhat = [T::zero(); 64];
        let mut g = [T::zero(); 64];
        for (b, seq) in tokens.chunks_exact(l + 1).enumerate() {
            let x = &seq[..l];
            let y = seq[l] as usize;
            // --- window codes: the 2H-1 tokens before each position, nearest first ---
            // rolling without a division: drop the farthest digit, shift, add the nearest
            wk.win[0] = self.n_w - 1;
            for i in 1..=l {
                let far = if i > self.digits {
                    x[i - 1 - self.digits] as usize
                } else {
                    s
                };
                wk.win[i] = x[i - 1] as usize + (s + 1) * (wk.win[i - 1] - far * top);
            }
            let qrow = self.wq_index[wk.win[l]] * nkw;
            let erow = &self.e_tab[qrow..qrow + nkw];
            // --- layer-2 attention of the query over the keys: looked up ---
            let mut sum = T::zero();
            for i in 0..l {
                let k = self.wk_index[wk.win[i]];
                wk.kidx[i] = k;
                let e = erow[k as usize];
                wk.p[i] = e;
                sum += e;
            }
            yhat[..s].iter_mut().for_each(|v| *v = T::zero());
            let inv = T::one() / sum;
            for i in 0..l {
                wk.p[i] *= inv;
                yhat[x[i] as usize] += wk.p[i];
            }
            // --- loss and dL/dŷ ---
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
            // --- backward through the layer-2 softmax into the cells ---
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

impl<T: Float> Parameters<T> for Simplified<T> {
    fn visit(&self, f: &mut dyn FnMut(&Param<T>)) {
        f(&self.w);
        f(&self.c);
        f(&self.a);
    }
    fn visit_mut(&mut self, f: &mut dyn FnMut(&mut Param<T>)) {
        f(&mut self.w);
        f(&mut self.c);
        f(&mut self.a);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subsets_follow_product_order_and_degree() {
        let s = subsets(3, 2);
        assert_eq!(s.len(), 11);
        let names: Vec<String> = s
            .iter()
            .filter(|m| *m & 1 == 0)
            .map(|m| subset_name(*m, 3))
            .collect();
        assert_eq!(
            names,
            ["{}", "{3}", "{2}", "{2,3}", "{1}", "{1,3}", "{1,2}"]
        );
    }

    #[test]
    fn init_pattern_prefers_the_diagonal_distance() {
        let m = Simplified::<f64>::new(&SimplifiedConfig::default());
        let p = m.interior_pattern();
        // head 0 on distance 1, head 1 on distance 2, head 2 on distance 3
        for hd in 0..3 {
            assert!(p[hd * 5 + hd] > 0.8);
        }
    }
}
