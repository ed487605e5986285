//! The general induction path: both models (simplified and full) computed
//! directly, position by position, for any `2 ≤ S ≤ 256`, `1 ≤ H ≤ 8`,
//! `1 ≤ D ≤ H` and `L ≤ 1024`, without the window tables of
//! [`super::simplified`] / [`super::full`] (which grow as `(S+1)^(2H−1)`).
//!
//! The equations are the models' own (see their module docs): layer 1 per
//! position and head (`direct_l1.rs`), then the query row of layer 2, the
//! polynomial kernel `s_l = a Σ_δ c_δ² Π_{h∈δ} ReLU(ip_h(l)) / Σ c²` with
//! `ip_h(l) = ⟨v_L^h, v_l^h⟩`, `ŷ = Σ_l softmax(s)_l e_{x_l}` and the engine's
//! losses. The parameters have the same names, shapes and visit order as the
//! table models', so checkpoints are interchangeable.
//!
//! Cost per sequence: simplified `O(L·H²)` (a head output has at most `H`
//! non-zero coordinates, so its inner product with the query is a sum over its
//! window); full `O(L·H·S)` (the `W_OV` product and LayerNorm are dense).
//!
//! Determinism: the batch is split into the engine's [`N_CHUNKS`] fixed chunks
//! ([`parallel::for_each_chunk`]); each chunk accumulates its gradient partials in
//! its own workspace, and the partials are summed in chunk order, so the result
//! is bit-identical for any thread count. Every buffer is sized by
//! [`Direct::reserve`]; a training step allocates nothing.
//!
//! ```
//! use mechlab::papers::induction::direct::{Direct, DirectConfig};
//! let cfg = DirectConfig { d_vocab: 10, ..DirectConfig::default() };
//! let mut m = Direct::<f64>::new(&cfg);
//! let tokens: Vec<u8> = (0..11).map(|i| (i * 7 % 10) as u8).collect(); // L = 10
//! assert!(m.loss(&tokens, 10, false).is_finite());
//! ```

#![allow(clippy::needless_range_loop)]

use super::config::ModelKind;
use super::layer2::{active_subsets, subsets, LossKind};
use mechlab_engine::layers::loss::{self, Reduction};
use mechlab_engine::parallel::{self, N_CHUNKS};
use mechlab_engine::{param, Float, Param, Parameters};

/// Shape and initialisation of either model on the direct path.
#[derive(Clone, Debug)]
pub struct DirectConfig {
    pub kind: ModelKind,
    pub d_vocab: usize,
    pub n_heads: usize,
    pub degree: usize,
    pub w_plus: f64,
    pub w_minus: f64,
    pub c_init: f64,
    pub a_init: f64,
    /// Full model: `W_Q = W_K = W_OV = proj_init · I` at init.
    pub proj_init: f64,
    pub loss: LossKind,
    pub nll_floor: f64,
}

impl Default for DirectConfig {
    fn default() -> Self {
        DirectConfig {
            kind: ModelKind::Simplified,
            d_vocab: 3,
            n_heads: 3,
            degree: 2,
            w_plus: 3.0,
            w_minus: 0.1,
            c_init: 0.01,
            a_init: 0.01,
            proj_init: 0.01,
            loss: LossKind::Code,
            nll_floor: 1e-8,
        }
    }
}

/// The full model's layer-1 parameters (absent in the simplified model).
pub struct FullParams<T: Float> {
    /// `blocks.0.attn.W_Q`, `W_K`, `W_OV` `[H, S, S]`.
    pub wq: Param<T>,
    pub wk: Param<T>,
    pub wov: Param<T>,
    /// `blocks.0.ln.w`, `blocks.0.ln.b` `[S]`.
    pub ln_w: Param<T>,
    pub ln_b: Param<T>,
}

impl<T: Float> Parameters<T> for FullParams<T> {
    mechlab_engine::parameters!(T; wq, wk, wov, ln_w, ln_b);
}

/// Per-chunk scratch (one sequence at a time) and gradient partials.
pub(crate) struct Work<T> {
    // --- per sequence, layer 1 ---
    /// `[L+1, H, H+1]` layer-1 pattern: self (full only), then distances `h+1+j`.
    pub pr: Vec<T>,
    /// simplified: `[L+1, H]` ‖u‖; full: unused.
    pub norm: Vec<T>,
    /// simplified: `[H, S]` query `u` and `v`; full: `[L+1, H, S]` LayerNorm input and output.
    pub pre: Vec<T>,
    pub v: Vec<T>,
    /// full: `[L+1, H]` LayerNorm statistics.
    pub mean: Vec<T>,
    pub rstd: Vec<T>,
    /// `[H, S]` scratch (dv of the query, or a LayerNorm row's dx).
    pub dq: Vec<T>,
    pub dx: Vec<T>,
    /// full: `[L+1, H, S]` dv of every position.
    pub dv: Vec<T>,
    // --- per sequence, layer 2 ---
    /// `[L, H]` ⟨v_L^h, v_l^h⟩ and its gradient.
    pub ip: Vec<T>,
    pub dip: Vec<T>,
    /// `[L]` kernel value N_l and blocks.1.attn.hook_pattern.
    pub nn: Vec<T>,
    pub p: Vec<T>,
    pub yhat: Vec<T>, // [S]
    pub g: Vec<T>,    // [S]
    /// `[items, S]` predictions of this chunk's sequences.
    pub out: Vec<T>,
    // --- gradient partials ---
    pub loss: T,
    pub sn: T,
    pub sk: Vec<T>, // [n_sub]
    /// simplified: `[H, H+1, H]` d pattern by (head, distances present, j); full: dW `[2H-1, H]`.
    pub d_pat: Vec<T>,
    /// full: `[H, S, S]` d(W_Q W_Kᵀ) and d W_OV; `[S]` d ln_w, d ln_b.
    pub dm: Vec<T>,
    pub dov: Vec<T>,
    pub dlw: Vec<T>,
    pub dlb: Vec<T>,
}

/// Either induction model, computed directly.
pub struct Direct<T: Float> {
    pub cfg: DirectConfig,
    /// `blocks.0.attn.W_pos` `[2H-1, H]`.
    pub w: Param<T>,
    pub full: Option<FullParams<T>>,
    /// `blocks.1.ffn.C` `[n_subsets]`, `blocks.1.attn.a` `[1]`.
    pub c: Param<T>,
    pub a: Param<T>,
    pub subsets: Vec<u32>,
    /// The subsets without the raw token: (index, member heads, count).
    pub(crate) active: Vec<(usize, [u8; 16], usize)>,
    /// simplified: `[H, H+1, H]` layer-1 pattern by (head, distances present, j).
    pub(crate) pattern: Vec<T>,
    /// full: `[H, S, S]` `W_Q W_Kᵀ`.
    pub(crate) qk: Vec<T>,
    /// full: `[H, S, S]` dM summed over the chunks.
    dm_tot: Vec<T>,
    pub(crate) work: Vec<Work<T>>,
    /// The `(n, L)` the workspaces are sized for.
    shape: (usize, usize),
    pub(crate) train: [bool; 3], // W, C, a
    /// Layer-1 heads ablated (bit `h`; the `ablate` intervention): `v^h = 0`, so
    /// `ip_h = 0`, the kernel products holding `h` vanish and `h` gets no gradient.
    pub(crate) ablated: u16,
    /// `clamp`: heads clamped (bit `h`), and the RPE logits `[2H-1, H]` they read.
    pub(crate) clamped: u16,
    pub(crate) clamp_w: Vec<T>,
}

/// Read-only state every chunk shares in a step.
pub(crate) struct Step<'a, T: Float> {
    pub m: &'a Direct<T>,
    pub l: usize,
    pub c2: Vec<T>,
    pub az: T,
    pub scale: T,
    pub grad: bool,
}

impl<T: Float> Direct<T> {
    pub fn new(cfg: &DirectConfig) -> Self {
        let (h, s) = (cfg.n_heads, cfg.d_vocab);
        let nd = 2 * h - 1;
        let mut w = vec![T::of(cfg.w_minus); nd * h];
        for k in 0..h {
            w[k * h + k] = T::of(cfg.w_plus);
        }
        let subsets = subsets(h, cfg.degree);
        let n_sub = subsets.len();
        let active = active_subsets(&subsets, h);
        let full = (cfg.kind == ModelKind::Full).then(|| {
            let mut eye = vec![T::zero(); h * s * s];
            for hd in 0..h {
                for k in 0..s {
                    eye[(hd * s + k) * s + k] = T::of(cfg.proj_init);
                }
            }
            FullParams {
                wq: param("blocks.0.attn.W_Q", "QK", &[h, s, s], eye.clone()),
                wk: param("blocks.0.attn.W_K", "QK", &[h, s, s], eye.clone()),
                wov: param("blocks.0.attn.W_OV", "OV", &[h, s, s], eye),
                ln_w: param("blocks.0.ln.w", "LN", &[s], vec![T::one(); s]),
                ln_b: param("blocks.0.ln.b", "LN", &[s], vec![T::zero(); s]),
            }
        });
        let qk = vec![T::zero(); if full.is_some() { h * s * s } else { 0 }];
        Direct {
            cfg: cfg.clone(),
            w: param("blocks.0.attn.W_pos", "W", &[nd, h], w),
            full,
            c: param(
                "blocks.1.ffn.C",
                "C",
                &[n_sub],
                vec![T::of(cfg.c_init); n_sub],
            ),
            a: param("blocks.1.attn.a", "a", &[1], vec![T::of(cfg.a_init)]),
            subsets,
            active,
            pattern: vec![T::zero(); h * (h + 1) * h],
            dm_tot: qk.clone(),
            qk,
            work: Vec::new(),
            shape: (usize::MAX, usize::MAX),
            train: [true; 3],
            ablated: 0,
            clamped: 0,
            clamp_w: vec![T::zero(); nd * h],
        }
    }

    /// Which groups get gradients (the simplified model; the full model trains all).
    pub fn set_groups(&mut self, groups: &[String]) {
        if self.full.is_some() {
            return;
        }
        let all = groups.is_empty();
        let on = |g: &str| all || groups.iter().any(|x| x == g);
        self.train = [on("W"), on("C"), on("a")];
    }

    /// Sizes the workspaces for `n` sequences of length `l` (allocates only when
    /// the shape changes, i.e. never inside training).
    pub fn reserve(&mut self, n: usize, l: usize) {
        if self.shape == (n, l) && self.work.len() == N_CHUNKS {
            return;
        }
        self.shape = (n, l);
        let (h, s) = (self.cfg.n_heads, self.cfg.d_vocab);
        let full = self.full.is_some();
        let per = n.div_ceil(N_CHUNKS).max(1);
        let z = |k: usize| vec![T::zero(); k];
        let (big, pos) = if full {
            ((l + 1) * h * s, (l + 1) * h)
        } else {
            (h * s, 0)
        };
        self.work = (0..N_CHUNKS)
            .map(|_| Work {
                pr: z((l + 1) * h * (h + 1)),
                norm: z(if full { 0 } else { (l + 1) * h }),
                pre: z(big),
                v: z(big),
                mean: z(pos),
                rstd: z(pos),
                dq: z(h * s),
                dx: z(s),
                dv: z(if full { big } else { 0 }),
                ip: z(l * h),
                dip: z(l * h),
                nn: z(l),
                p: z(l),
                yhat: z(s),
                g: z(s),
                out: z(per * s),
                loss: T::zero(),
                sn: T::zero(),
                sk: z(self.subsets.len()),
                d_pat: z(if full {
                    (2 * h - 1) * h
                } else {
                    h * (h + 1) * h
                }),
                dm: z(if full { h * s * s } else { 0 }),
                dov: z(if full { h * s * s } else { 0 }),
                dlw: z(if full { s } else { 0 }),
                dlb: z(if full { s } else { 0 }),
            })
            .collect();
    }

    /// `c_δ² / Σ_{δ_0=0} c_δ²` for every subset (0 for subsets holding the raw token).
    pub fn c_shares(&self) -> Vec<f64> {
        let c: Vec<f64> = self.c.value().iter().map(|v| v.as_f64()).collect();
        super::probes::shares(&self.subsets, &c)
    }

    /// Each head's RPE attention over distances `1..=2H-1` where all exist: `[H, 2H-1]`.
    pub fn interior_pattern(&self) -> Vec<f64> {
        super::probes::rpe_pattern(&self.w_seen(), self.cfg.n_heads)
    }

    /// Mean loss over `tokens` (`[n, l+1]`, target last); with `grad`, accumulates
    /// the mean's gradient into the trained parameters. Needs `l ≥ 2H − 1`.
    pub fn loss(&mut self, tokens: &[u8], l: usize, grad: bool) -> T {
        self.run(tokens, l, grad, None)
    }

    /// Predicted distributions `[n, S]` into `out` (no gradient); returns the loss.
    pub fn predict(&mut self, tokens: &[u8], l: usize, out: &mut [T]) -> T {
        self.run(tokens, l, false, Some(out))
    }

    /// The attention patterns of one sequence `[l + 1]` (target last):
    /// layer 1 as `[query_pos (0..=L), head, distance (0..2H)]` and the query's
    /// layer-2 pattern `[L]`.
    pub fn patterns(&mut self, seq: &[u8], l: usize) -> (Vec<f64>, Vec<f64>) {
        self.run(&seq[..l + 1], l, false, None);
        let h = self.cfg.n_heads;
        let nd = 2 * h;
        // the chunk that ran the one sequence (chunk_range puts it in the last one)
        let first = (0..N_CHUNKS)
            .position(|c| parallel::chunk_range(1, N_CHUNKS, c).contains(&0))
            .unwrap_or(0);
        let wk = &self.work[first];
        let mut p1 = vec![0.0; (l + 1) * h * nd];
        for i in 0..=l {
            for hd in 0..h {
                let pr = &wk.pr[(i * h + hd) * (h + 1)..(i * h + hd + 1) * (h + 1)];
                p1[(i * h + hd) * nd] = pr[0].as_f64();
                for j in 0..h {
                    p1[(i * h + hd) * nd + hd + 1 + j] = pr[1 + j].as_f64();
                }
            }
        }
        (p1, wk.p[..l].iter().map(|v| v.as_f64()).collect())
    }

    fn run(&mut self, tokens: &[u8], l: usize, grad: bool, out: Option<&mut [T]>) -> T {
        let (h, s) = (self.cfg.n_heads, self.cfg.d_vocab);
        assert!(l + 1 >= 2 * h, "sequence length {l} < 2H - 1");
        let n = tokens.len() / (l + 1);
        self.reserve(n, l);
        self.prepare();
        let cv = self.c.value();
        let c2: Vec<T> = cv.iter().map(|&c| c * c).collect();
        let z: T = self.active.iter().map(|(i, _, _)| c2[*i]).sum();
        let av = self.a.value()[0];
        let mut work = std::mem::take(&mut self.work);
        {
            let st = Step {
                m: self,
                l,
                c2,
                az: av / z,
                scale: T::one() / T::of_usize(n.max(1)),
                grad,
            };
            parallel::for_each_chunk(n, &mut work, |_, items, wk| st.chunk(wk, tokens, items));
        }
        self.work = work;
        let mut total = T::zero();
        for wk in &self.work {
            total += wk.loss;
        }
        if let Some(o) = out {
            for (ci, wk) in self.work.iter().enumerate() {
                let r = parallel::chunk_range(n, N_CHUNKS, ci);
                o[r.start * s..r.end * s].copy_from_slice(&wk.out[..r.len() * s]);
            }
        }
        if grad {
            self.backward(z, av);
        }
        total / T::of_usize(n.max(1))
    }

    /// Reduces the chunks' partials in chunk order into the parameters' gradients.
    fn backward(&mut self, z: T, av: T) {
        let [train_w, train_c, train_a] = self.train;
        let mut sn = T::zero();
        for wk in &self.work {
            sn += wk.sn;
        }
        if train_a {
            self.a.grad_mut()[0] += sn / z;
        }
        if train_c {
            // ∂s/∂c_δ = 2 a c_δ (K_δ − N / Z) / Z
            for &(i, _, _) in &self.active {
                let mut sk = T::zero();
                for wk in &self.work {
                    sk += wk.sk[i];
                }
                let ci = self.c.value()[i];
                self.c.grad_mut()[i] += T::of(2.0) * av * ci * (sk - sn / z) / z;
            }
        }
        if !train_w {
            return;
        }
        let h = self.cfg.n_heads;
        match self.full.as_mut() {
            None => {
                // d pattern → W through each (head, distances present) softmax
                let dw = self.w.grad_mut();
                let mut g = [T::zero(); 8];
                // A clamped head's pattern does not read W: no gradient.
                for hd in (0..h).filter(|hd| self.clamped >> hd & 1 == 0) {
                    for m in 1..=h {
                        let po = (hd * (h + 1) + m) * h;
                        for j in 0..m {
                            g[j] = T::zero();
                            for wk in &self.work {
                                g[j] += wk.d_pat[po + j];
                            }
                        }
                        let pat = &self.pattern[po..po + m];
                        mechlab_engine::layers::softmax::backward_row_in_place(&mut g[..m], pat);
                        for j in 0..m {
                            dw[(hd + j) * h + hd] += g[j];
                        }
                    }
                }
            }
            Some(f) => {
                let work = &self.work;
                let sum = |pick: &dyn Fn(&Work<T>) -> &[T], dst: &mut [T]| {
                    for wk in work {
                        for (d, v) in dst.iter_mut().zip(pick(wk)) {
                            *d += *v;
                        }
                    }
                };
                sum(&|w| &w.d_pat, self.w.grad_mut());
                sum(&|w| &w.dov, f.wov.grad_mut());
                sum(&|w| &w.dlw, f.ln_w.grad_mut());
                sum(&|w| &w.dlb, f.ln_b.grad_mut());
                self.dm_tot.iter_mut().for_each(|x| *x = T::zero());
                sum(&|w| &w.dm, &mut self.dm_tot);
                super::direct_l1::qk_backward(f, &self.dm_tot, h, self.cfg.d_vocab);
            }
        }
    }
}

impl<T: Float> Parameters<T> for Direct<T> {
    mechlab_engine::parameters!(T; w, full, c, a);
}

impl<T: Float> Step<'_, T> {
    /// One chunk: every sequence in `items`, in order, into `wk`.
    fn chunk(&self, wk: &mut Work<T>, tokens: &[u8], items: std::ops::Range<usize>) {
        let l = self.l;
        wk.loss = T::zero();
        if self.grad {
            wk.sn = T::zero();
            for b in [
                &mut wk.sk,
                &mut wk.d_pat,
                &mut wk.dm,
                &mut wk.dov,
                &mut wk.dlw,
                &mut wk.dlb,
            ] {
                b.iter_mut().for_each(|x| *x = T::zero());
            }
        }
        let s = self.m.cfg.d_vocab;
        for (k, b) in items.enumerate() {
            let seq = &tokens[b * (l + 1)..(b + 1) * (l + 1)];
            self.layer1_forward(wk, seq);
            let lo = self.layer2(wk, seq);
            wk.loss += lo;
            wk.out[k * s..(k + 1) * s].copy_from_slice(&wk.yhat);
            if self.grad {
                self.layer1_backward(wk, seq);
            }
        }
    }

    /// Layer 2's query row from `wk.ip`: kernel, softmax, ŷ, loss; with `grad`,
    /// `wk.dip` and the `a` / `c` partials. Returns the sequence's loss.
    fn layer2(&self, wk: &mut Work<T>, seq: &[u8]) -> T {
        let (l, h, s) = (self.l, self.m.cfg.n_heads, self.m.cfg.d_vocab);
        let x = &seq[..l];
        let y = seq[l] as usize;
        let mut ipr = [T::zero(); 8];
        let mut mx = T::neg_infinity();
        let off = self.m.ablated;
        // ReLU(ip_h), 0 for an ablated head (its output v^h is zero).
        let relu = |ip: T, hd: usize| {
            if off >> hd & 1 == 1 {
                T::zero()
            } else {
                ip.max(T::zero())
            }
        };
        for i in 0..l {
            for hd in 0..h {
                ipr[hd] = relu(wk.ip[i * h + hd], hd);
            }
            let mut num = T::zero();
            for (si, mem, k) in &self.m.active {
                let mut v = self.c2[*si];
                for &mm in &mem[..*k] {
                    v *= ipr[mm as usize];
                }
                num += v;
            }
            wk.nn[i] = num;
            wk.p[i] = self.az * num;
            mx = mx.max(wk.p[i]);
        }
        let mut sum = T::zero();
        for i in 0..l {
            wk.p[i] = (wk.p[i] - mx).exp();
            sum += wk.p[i];
        }
        wk.yhat.iter_mut().for_each(|v| *v = T::zero());
        for i in 0..l {
            wk.p[i] /= sum;
            wk.yhat[x[i] as usize] += wk.p[i];
        }
        let label = [Some(y)];
        let lo = match self.m.cfg.loss {
            LossKind::Code => {
                loss::cross_entropy_probs_as_logits(&mut wk.g, &wk.yhat, &label, s, Reduction::Sum)
            }
            LossKind::Nll => loss::cross_entropy_probs_floor(
                &mut wk.g,
                &wk.yhat,
                &label,
                s,
                Reduction::Sum,
                self.m.cfg.nll_floor,
            ),
        };
        if !self.grad {
            return T::of(lo.loss);
        }
        // ŷ = Σ p_l e_{x_l}, p = softmax(s): ds_l = p_l (g[x_l] − ⟨ŷ, g⟩) / n
        // centred on the likeliest token, so it does not cancel at saturation
        let (g_top, pg) = mechlab_engine::layers::softmax::centred_inner(&wk.g, &wk.yhat);
        for i in 0..l {
            let ds = wk.p[i] * ((wk.g[x[i] as usize] - g_top) - pg) * self.scale;
            wk.sn += ds * wk.nn[i];
            for hd in 0..h {
                ipr[hd] = relu(wk.ip[i * h + hd], hd);
                wk.dip[i * h + hd] = T::zero();
            }
            for (si, mem, k) in &self.m.active {
                let c2 = self.c2[*si];
                let mut kern = T::one();
                for &mm in &mem[..*k] {
                    kern *= ipr[mm as usize];
                }
                wk.sk[*si] += ds * kern;
                for (i1, &mm) in mem[..*k].iter().enumerate() {
                    if ipr[mm as usize] <= T::zero() {
                        continue; // ReLU
                    }
                    let mut rest = c2;
                    for (i2, &m2) in mem[..*k].iter().enumerate() {
                        if i1 != i2 {
                            rest *= ipr[m2 as usize];
                        }
                    }
                    wk.dip[i * h + mm as usize] += ds * self.az * rest;
                }
            }
        }
        T::of(lo.loss)
    }
}
