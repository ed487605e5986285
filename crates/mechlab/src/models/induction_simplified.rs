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

use mechlab_engine::{param, Float, Param, Parameters};
use rayon::prelude::*;

/// Sequences per work chunk: fixed, so the summation order never depends on threads.
pub const CHUNK: usize = 64;
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
    // per sequence, reused: [L+1, H, S], [L+1, H]
    u: Vec<T>,
    norm: Vec<T>,
    v: Vec<T>,
    dv: Vec<T>,
    ip: Vec<T>,  // [L, H]: ⟨v_L^h, v_l^h⟩
    num: Vec<T>, // [L]: Σ_δ c_δ² K_δ(l)
    p: Vec<T>,   // [L]: layer-2 pattern
    // chunk partials
    d_pat: Vec<T>, // [H, L+1, H]
    dc: Vec<T>,
    da: T,
    loss: T,
}

impl<T: Float> Work<T> {
    fn new(l: usize, h: usize, s: usize, n_sub: usize) -> Self {
        Work {
            u: vec![T::zero(); (l + 1) * h * s],
            norm: vec![T::zero(); (l + 1) * h],
            v: vec![T::zero(); (l + 1) * h * s],
            dv: vec![T::zero(); (l + 1) * h * s],
            ip: vec![T::zero(); l * h],
            num: vec![T::zero(); l],
            p: vec![T::zero(); l],
            d_pat: vec![T::zero(); h * (l + 1) * h],
            dc: vec![T::zero(); n_sub],
            da: T::zero(),
            loss: T::zero(),
        }
    }
}

/// The model: parameters, its subsets, and preallocated workspaces.
pub struct Simplified<T: Float> {
    pub cfg: SimplifiedConfig,
    /// `blocks.0.attn.W_pos` `[2H-1, H]`: `W[r-1, h]` is head `h`'s logit for distance `r`.
    pub w: Param<T>,
    /// `blocks.1.ffn.C` `[n_subsets]`: the kernel's `c_δ`.
    pub c: Param<T>,
    /// `blocks.1.attn.a` `[1]`: the classifier's scale.
    pub a: Param<T>,
    pub subsets: Vec<u32>,
    /// `blocks.0.attn.hook_pattern` `[head, query_pos (0..=L), dist offset j]`:
    /// head h's weight on distance `h+1+j` at position i (zero where absent).
    pub pattern: Vec<T>,
    /// The sequence length the workspaces are sized for.
    l: usize,
    work: Vec<Work<T>>,
    train_w: bool,
    train_c: bool,
    train_a: bool,
}

impl<T: Float> Simplified<T> {
    pub fn new(cfg: &SimplifiedConfig) -> Self {
        let h = cfg.n_heads;
        let nd = 2 * h - 1;
        let mut w = vec![T::of(cfg.w_minus); nd * h];
        for k in 0..h {
            w[k * h + k] = T::of(cfg.w_plus);
        }
        let subsets = subsets(h, cfg.degree);
        let n_sub = subsets.len();
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
            pattern: Vec::new(),
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
    /// the shape changes, i.e. never inside training).
    pub fn reserve(&mut self, n: usize, l: usize) {
        let (h, s) = (self.cfg.n_heads, self.cfg.d_vocab);
        let chunks = n.div_ceil(CHUNK);
        if self.l != l {
            self.work.clear();
            self.l = l;
            self.pattern = vec![T::zero(); h * (l + 1) * h];
        }
        while self.work.len() < chunks {
            self.work.push(Work::new(l, h, s, self.subsets.len()));
        }
    }

    /// Layer-1 pattern for every position: softmax over the distances that exist.
    fn compute_pattern(&mut self) {
        let h = self.cfg.n_heads;
        let l = self.l;
        let w = self.w.value();
        for hd in 0..h {
            for i in 0..=l {
                let row = &mut self.pattern[(hd * (l + 1) + i) * h..(hd * (l + 1) + i + 1) * h];
                let mut mx = T::neg_infinity();
                for j in 0..h {
                    if hd + 1 + j <= i {
                        mx = mx.max(w[(hd + j) * h + hd]);
                    }
                }
                let mut sum = T::zero();
                for j in 0..h {
                    row[j] = if hd + 1 + j <= i {
                        (w[(hd + j) * h + hd] - mx).exp()
                    } else {
                        T::zero()
                    };
                    sum += row[j];
                }
                if sum > T::zero() {
                    row.iter_mut().for_each(|x| *x /= sum);
                }
            }
        }
    }

    /// Head `h`'s weight on distance `h+1+j` at a position with every distance
    /// present: `[H, H]` (head, offset).
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
    pub fn loss(&mut self, tokens: &[u8], l: usize, grad: bool) -> T {
        self.run(tokens, l, grad, None)
    }

    /// Predicted distributions `[n, S]` (no gradient).
    pub fn predict(&mut self, tokens: &[u8], l: usize, out: &mut [T]) -> T {
        self.run(tokens, l, false, Some(out))
    }

    fn run(&mut self, tokens: &[u8], l: usize, grad: bool, out: Option<&mut [T]>) -> T {
        let n = tokens.len() / (l + 1);
        self.reserve(n, l);
        self.compute_pattern();
        let (h, s) = (self.cfg.n_heads, self.cfg.d_vocab);
        let ctx = Ctx {
            h,
            s,
            l,
            pattern: &self.pattern,
            subsets: &self.subsets,
            c: self.c.value(),
            a: self.a.value()[0],
            loss: self.cfg.loss,
            floor: T::of(self.cfg.nll_floor),
            scale: T::one() / T::of_usize(n.max(1)),
            grad,
        };
        let chunks = n.div_ceil(CHUNK);
        let mut dummy = Vec::new();
        let out = match out {
            Some(o) => o,
            None => &mut dummy[..],
        };
        let with_out = !out.is_empty();
        let mut outs: Vec<&mut [T]> = if with_out {
            out.chunks_mut(CHUNK * s).collect()
        } else {
            Vec::new()
        };
        let work = &mut self.work[..chunks];
        if with_out {
            work.par_iter_mut()
                .zip(outs.par_iter_mut())
                .enumerate()
                .for_each(|(ci, (wk, o))| {
                    let end = ((ci + 1) * CHUNK).min(n);
                    ctx.chunk(wk, &tokens[ci * CHUNK * (l + 1)..end * (l + 1)], Some(o));
                });
        } else {
            work.par_iter_mut().enumerate().for_each(|(ci, wk)| {
                let end = ((ci + 1) * CHUNK).min(n);
                ctx.chunk(wk, &tokens[ci * CHUNK * (l + 1)..end * (l + 1)], None);
            });
        }
        let scale = ctx.scale;
        // reduce in chunk order
        let mut loss = T::zero();
        for wk in self.work[..chunks].iter() {
            loss += wk.loss;
        }
        if grad {
            if self.train_a {
                let mut da = T::zero();
                for wk in self.work[..chunks].iter() {
                    da += wk.da;
                }
                self.a.grad_mut()[0] += da;
            }
            if self.train_c {
                let dc = self.c.grad_mut();
                for wk in self.work[..chunks].iter() {
                    for (g, d) in dc.iter_mut().zip(&wk.dc) {
                        *g += *d;
                    }
                }
            }
            if self.train_w {
                // chunk 0 accumulates the others' pattern gradients, then the softmax
                let (first, rest) = self.work[..chunks].split_at_mut(1);
                for wk in rest.iter() {
                    for (g, d) in first[0].d_pat.iter_mut().zip(&wk.d_pat) {
                        *g += *d;
                    }
                }
                let dpat = &first[0].d_pat;
                let dw = self.w.grad_mut();
                for hd in 0..h {
                    for i in 0..=l {
                        let o = (hd * (l + 1) + i) * h;
                        let a = &self.pattern[o..o + h];
                        let g = &dpat[o..o + h];
                        let dot: T = (0..h).map(|j| a[j] * g[j]).sum();
                        for j in 0..h {
                            dw[(hd + j) * h + hd] += a[j] * (g[j] - dot);
                        }
                    }
                }
            }
        }
        loss * scale
    }
}

/// What every chunk reads.
struct Ctx<'a, T> {
    h: usize,
    s: usize,
    l: usize,
    pattern: &'a [T],
    subsets: &'a [u32],
    c: &'a [T],
    a: T,
    loss: LossKind,
    floor: T,
    scale: T,
    grad: bool,
}

impl<T: Float> Ctx<'_, T> {
    fn chunk(&self, wk: &mut Work<T>, tokens: &[u8], mut out: Option<&mut &mut [T]>) {
        let (h, s, l) = (self.h, self.s, self.l);
        wk.loss = T::zero();
        if self.grad {
            wk.d_pat.iter_mut().for_each(|x| *x = T::zero());
            wk.dc.iter_mut().for_each(|x| *x = T::zero());
            wk.da = T::zero();
        }
        // Z = Σ_{δ_0 = 0} c_δ²
        let z: T = self
            .subsets
            .iter()
            .zip(self.c)
            .filter(|(m, _)| *m & 1 == 0)
            .map(|(_, c)| *c * *c)
            .sum();
        let eps = T::of(NORM_EPS);
        let mut yhat = [T::zero(); 64];
        let mut g = [T::zero(); 64];
        for (b, seq) in tokens.chunks_exact(l + 1).enumerate() {
            let x = &seq[..l];
            let y = seq[l] as usize;
            // --- layer 1: u_i^h, v_i^h  [L+1, H, S] ---
            wk.u.iter_mut().for_each(|v| *v = T::zero());
            for hd in 0..h {
                for i in 0..=l {
                    let pat = &self.pattern[(hd * (l + 1) + i) * h..(hd * (l + 1) + i + 1) * h];
                    let o = (i * h + hd) * s;
                    for (j, &aw) in pat.iter().enumerate() {
                        let r = hd + 1 + j;
                        if r <= i {
                            wk.u[o + x[i - r] as usize] += aw;
                        }
                    }
                    let nrm = wk.u[o..o + s].iter().map(|v| *v * *v).sum::<T>().sqrt();
                    wk.norm[i * h + hd] = nrm;
                    let inv = T::one() / (nrm + eps);
                    for k in 0..s {
                        wk.v[o + k] = wk.u[o + k] * inv;
                    }
                }
            }
            // --- layer 2 at the query L: ip, kernel, logits ---
            let q = l * h * s;
            for i in 0..l {
                for hd in 0..h {
                    let o = (i * h + hd) * s;
                    let d: T = (0..s).map(|k| wk.v[q + hd * s + k] * wk.v[o + k]).sum();
                    wk.ip[i * h + hd] = d.max(T::zero());
                }
            }
            let mut mx = T::neg_infinity();
            for i in 0..l {
                let ip = &wk.ip[i * h..(i + 1) * h];
                let mut num = T::zero();
                for (m, c) in self.subsets.iter().zip(self.c) {
                    if m & 1 != 0 {
                        continue; // the query's raw token is zero: K_δ = 0
                    }
                    let mut k = *c * *c;
                    for (hd, v) in ip.iter().enumerate() {
                        if m & (1 << (hd + 1)) != 0 {
                            k *= *v;
                        }
                    }
                    num += k;
                }
                wk.num[i] = num;
                let si = self.a * num / z;
                wk.p[i] = si;
                mx = mx.max(si);
            }
            let mut sum = T::zero();
            for i in 0..l {
                wk.p[i] = (wk.p[i] - mx).exp();
                sum += wk.p[i];
            }
            yhat[..s].iter_mut().for_each(|v| *v = T::zero());
            for i in 0..l {
                wk.p[i] /= sum;
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
                    let py = yhat[y].max(self.floor);
                    wk.loss -= py.ln();
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
            g[..s].iter_mut().for_each(|v| *v *= self.scale);
            // --- backward: layer-2 softmax ---
            let pg: T = (0..l).map(|i| wk.p[i] * g[x[i] as usize]).sum();
            let az = self.a / z;
            wk.dv.iter_mut().for_each(|v| *v = T::zero());
            for i in 0..l {
                let ds = wk.p[i] * (g[x[i] as usize] - pg);
                let num = wk.num[i];
                wk.da += ds * num / z;
                let ip = &wk.ip[i * h..(i + 1) * h];
                let mut dip = [T::zero(); 32];
                for (si, (m, c)) in self.subsets.iter().zip(self.c).enumerate() {
                    if m & 1 != 0 {
                        continue;
                    }
                    let mut kern = T::one();
                    for (hd, v) in ip.iter().enumerate() {
                        if m & (1 << (hd + 1)) != 0 {
                            kern *= *v;
                        }
                    }
                    // ∂s/∂c_δ = a (2 c K / Z − N 2c / Z²)
                    wk.dc[si] += ds * self.a * T::of(2.0) * *c * (kern - num / z) / z;
                    for hd in 0..h {
                        if m & (1 << (hd + 1)) == 0 || ip[hd] <= T::zero() {
                            continue;
                        }
                        let mut rest = *c * *c;
                        for (h2, v) in ip.iter().enumerate() {
                            if h2 != hd && m & (1 << (h2 + 1)) != 0 {
                                rest *= *v;
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
                    let o = (i * h + hd) * s;
                    for k in 0..s {
                        let vq = wk.v[q + hd * s + k];
                        let vi = wk.v[o + k];
                        wk.dv[q + hd * s + k] += d * vi;
                        wk.dv[o + k] += d * vq;
                    }
                }
            }
            // --- backward: unit-norm scaling and the layer-1 pattern ---
            for i in 0..=l {
                for hd in 0..h {
                    let o = (i * h + hd) * s;
                    let nrm = wk.norm[i * h + hd];
                    if nrm <= T::zero() {
                        continue; // no distance exists here: u does not depend on W
                    }
                    let ne = nrm + eps;
                    let dot: T = (0..s).map(|k| wk.dv[o + k] * wk.u[o + k]).sum();
                    let coef = dot / (nrm * ne * ne);
                    let po = (hd * (l + 1) + i) * h;
                    for j in 0..h {
                        let r = hd + 1 + j;
                        if r > i {
                            break;
                        }
                        let k = x[i - r] as usize;
                        wk.d_pat[po + j] += wk.dv[o + k] / ne - wk.u[o + k] * coef;
                    }
                }
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
