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
//! use mechlab::papers::induction::full::{Full, FullConfig};
//! let mut m = Full::<f64>::new(&FullConfig::default());
//! let tokens = vec![0u8, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1];
//! assert!(m.loss(&tokens, 10, false).is_finite());
//! ```

#![allow(clippy::needless_range_loop)]

use super::layer2::{subsets, window, Layer2, LossKind};
use mechlab_engine::layers::{layernorm, softmax};
use mechlab_engine::{param, Float, Param, Parameters};

pub use super::layer2::CHUNK;
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
            w_plus: 3.0,
            w_minus: 0.01,
            c_init: 0.01,
            a_init: 0.01,
            proj_init: 0.01,
            loss: LossKind::Code,
            nll_floor: 1e-8,
        }
    }
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
    qk: Vec<T>,       // [H, S, S]: W_Q W_Kᵀ
    p_tab: Vec<T>,    // [H, C, H+1]: layer-1 pattern (self, then distances h+1..)
    o_tab: Vec<T>,    // [H, C, S]: attention output
    pre_tab: Vec<T>,  // [H, C, S]: o · W_OV, the LayerNorm's input
    mean_tab: Vec<T>, // [H, C]: its mean
    rstd_tab: Vec<T>, // [H, C]: and 1/std
    dm: Vec<T>,       // [H, S, S]
    /// Head codes `C = (S+1)^(H+1)`: own token, then the `H` band tokens.
    l2: Layer2<T>,
}

/// Largest (query windows × key windows) table the full model accepts.
pub const MAX_TABLE: usize = 1 << 21;

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
        let l2 = Layer2::new(s, h, &subsets, true);
        let nc = l2.nc;
        let z = |n: usize| vec![T::zero(); n];
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
            qk: z(h * s * s),
            p_tab: z(h * nc * (h + 1)),
            o_tab: z(h * nc * s),
            pre_tab: z(h * nc * s),
            mean_tab: z(h * nc),
            rstd_tab: z(h * nc),
            dm: z(h * s * s),
            l2,
        }
    }

    /// Layer 1 for every (head, code) into the layer-2 `v` table.
    fn layer1(&mut self) {
        let (h, s, nc) = (self.cfg.n_heads, self.cfg.d_vocab, self.l2.nc);
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
        let mut o = [T::zero(); 64];
        for hd in 0..h {
            for code in 0..nc {
                let me = code % p;
                let (m, band) = window(code / p, s, h);
                let pr = &mut self.p_tab[(hd * nc + code) * k1..(hd * nc + code + 1) * k1];
                let qk = |t: usize| {
                    if me < s {
                        self.qk[(hd * s + me) * s + t]
                    } else {
                        T::zero()
                    }
                };
                // logits of the self key and the band's existing distances; the
                // missing ones (j ≥ m) are masked out of the softmax
                pr[0] = (if me < s { qk(me) } else { T::zero() }) + T::of(SELF_LOGIT);
                for j in 0..h {
                    pr[1 + j] = if j < m {
                        qk(band[j]) + w[(hd + j) * h + hd]
                    } else {
                        T::zero()
                    };
                }
                softmax::row_in_place(pr, |k| k <= m);
                o[..s].iter_mut().for_each(|v| *v = T::zero());
                if me < s {
                    o[me] += pr[0];
                }
                for j in 0..m {
                    o[band[j]] += pr[1 + j];
                }
                let base = (hd * nc + code) * s;
                self.o_tab[base..base + s].copy_from_slice(&o[..s]);
                let pre = &mut self.pre_tab[base..base + s];
                for k in 0..s {
                    pre[k] = (0..s).map(|j| o[j] * ov[(hd * s + j) * s + k]).sum();
                }
                let r = hd * nc + code;
                layernorm::forward(
                    &mut self.l2.v_tab[base..base + s],
                    &mut self.mean_tab[r..r + 1],
                    &mut self.rstd_tab[r..r + 1],
                    pre,
                    lw,
                    lb,
                    1,
                    s,
                    LN_EPS,
                );
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
        let (h, s, nc) = (self.cfg.n_heads, self.cfg.d_vocab, self.l2.nc);
        let p = s + 1;
        let nd = 2 * h;
        let wins = self.l2.first_windows();
        let mut p1 = vec![0.0; (l + 1) * h * nd];
        for i in 0..=l {
            let me = if i < l { seq[i] as usize } else { s };
            let win = window(wins[i], s, 2 * h - 1).1;
            for hd in 0..h {
                let code = (0..h).fold(me, |acc, j| acc + win[hd + j] * p.pow(1 + j as u32));
                let pr = &self.p_tab[(hd * nc + code) * (h + 1)..];
                p1[(i * h + hd) * nd] = pr[0].as_f64();
                for j in 0..h {
                    p1[(i * h + hd) * nd + hd + 1 + j] = pr[1 + j].as_f64();
                }
            }
        }
        (p1, self.l2.first_query_pattern(l))
    }

    fn run(&mut self, tokens: &[u8], l: usize, grad: bool, out: Option<&mut [T]>) -> T {
        let (h, s, nc) = (self.cfg.n_heads, self.cfg.d_vocab, self.l2.nc);
        self.layer1();
        let (a, floor) = (self.a.value()[0], self.cfg.nll_floor);
        let loss = self.l2.run(
            tokens,
            l,
            grad,
            out,
            self.c.value(),
            a,
            self.cfg.loss,
            floor,
        );
        if !grad {
            return loss;
        }
        self.l2
            .backward(&mut self.c, &mut self.a, [true, true], true);
        // v → LayerNorm → W_OV → layer-1 softmax → QK and RPE, once per (head, code)
        self.dm.iter_mut().for_each(|x| *x = T::zero());
        let p = s + 1;
        let k1 = h + 1;
        let ov: Vec<T> = self.wov.value().to_vec();
        let lw: Vec<T> = self.ln_w.value().to_vec();
        for hd in 0..h {
            for code in 0..nc {
                let base = (hd * nc + code) * s;
                if self.l2.dv_tab[base..base + s]
                    .iter()
                    .all(|v| *v == T::zero())
                {
                    continue;
                }
                let r = hd * nc + code;
                let mut dpre = [T::zero(); 64];
                layernorm::backward(
                    &mut dpre[..s],
                    Some(self.ln_w.grad_mut()),
                    Some(self.ln_b.grad_mut()),
                    &self.l2.dv_tab[base..base + s],
                    &self.pre_tab[base..base + s],
                    &self.mean_tab[r..r + 1],
                    &self.rstd_tab[r..r + 1],
                    &lw,
                    1,
                    s,
                );
                let o = &self.o_tab[base..base + s];
                let mut dob = [T::zero(); 64];
                let gov = self.wov.grad_mut();
                for j in 0..s {
                    for k in 0..s {
                        gov[(hd * s + j) * s + k] += o[j] * dpre[k];
                        dob[j] += ov[(hd * s + j) * s + k] * dpre[k];
                    }
                }
                let me = code % p;
                let (m, band) = window(code / p, s, h);
                let pr = &self.p_tab[(hd * nc + code) * k1..(hd * nc + code + 1) * k1];
                let mut dp = [T::zero(); 16];
                dp[0] = if me < s { dob[me] } else { T::zero() };
                for j in 0..m {
                    dp[1 + j] = dob[band[j]];
                }
                // centred on the top key: exact once the pattern is one-hot
                let (dp_top, pdp) = softmax::centred_inner(&dp[..=m], &pr[..=m]);
                let dw = self.w.grad_mut();
                for kk in 0..=m {
                    let dl = pr[kk] * ((dp[kk] - dp_top) - pdp);
                    if kk > 0 {
                        dw[(hd + kk - 1) * h + hd] += dl;
                    }
                    let t = if kk == 0 { me } else { band[kk - 1] };
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
        loss
    }
}

impl<T: Float> Parameters<T> for Full<T> {
    mechlab_engine::parameters!(T; w, wq, wk, wov, ln_w, ln_b, c, a);
}
