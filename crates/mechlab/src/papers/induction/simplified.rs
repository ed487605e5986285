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
//! use mechlab::papers::induction::simplified::{Simplified, SimplifiedConfig};
//! let cfg = SimplifiedConfig::default();
//! let mut m = Simplified::<f64>::new(&cfg);
//! let tokens = vec![0u8, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1]; // L = 10 and the target
//! let loss = m.loss(&tokens, 10, false);
//! assert!(loss.is_finite() && loss > 0.55);
//! ```

// Index loops read like the equations here.
#![allow(clippy::needless_range_loop)]

use super::layer2::{window, Layer2};
use mechlab_engine::layers::{l2norm, softmax};
use mechlab_engine::{param, Float, Param, Parameters};

pub use super::layer2::{subset_name, subsets, LossKind, CHUNK};

/// The `ε` of the unit-norm scaling, as in the authors' code.
pub const NORM_EPS: f64 = 1e-7;

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
    u_tab: Vec<T>,    // [H, C, S]: u before the unit-norm scaling
    norm_tab: Vec<T>, // [H, C]: ‖u‖
    d_pat: Vec<T>,    // [H, H+1, H]
    /// Head codes `C = (S+1)^H`: the `H` band tokens.
    l2: Layer2<T>,
    train_w: bool,
    train_c: bool,
    train_a: bool,
}

/// Largest `(query windows) × (key windows)` table the model accepts.
pub const MAX_TABLE: usize = 1 << 20;

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
        let l2 = Layer2::new(s, h, &subsets, false);
        let nc = l2.nc;
        let z = |n: usize| vec![T::zero(); n];
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
            u_tab: z(h * nc * s),
            norm_tab: z(h * nc),
            d_pat: z(h * (h + 1) * h),
            l2,
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
        self.l2.reserve(n, l);
    }

    /// Rebuilds the layer-1 patterns and the layer-2 `v` table from `W`.
    fn layer1(&mut self) {
        let (h, s, nc) = (self.cfg.n_heads, self.cfg.d_vocab, self.l2.nc);
        let w = self.w.value();
        for hd in 0..h {
            for m in 0..=h {
                // the first m distances exist: softmax over those, 0 on the rest
                let row = &mut self.pattern[(hd * (h + 1) + m) * h..(hd * (h + 1) + m + 1) * h];
                for (j, x) in row.iter_mut().enumerate() {
                    *x = w[(hd + j) * h + hd];
                }
                softmax::row_in_place(row, |j| j < m);
            }
        }
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
                let r = hd * nc + code;
                l2norm::forward_plus_eps(
                    &mut self.l2.v_tab[o..o + s],
                    &mut self.norm_tab[r..r + 1],
                    u,
                    1,
                    s,
                    NORM_EPS,
                );
            }
        }
    }

    /// Head `h`'s weight on each distance `1..=2H-1` at a position where every
    /// distance exists: `[H, 2H-1]` (head, distance − 1).
    pub fn interior_pattern(&self) -> Vec<f64> {
        let w: Vec<f64> = self.w.value().iter().map(|x| x.as_f64()).collect();
        super::probes::rpe_pattern(&w, self.cfg.n_heads)
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
        let train = [self.train_c, self.train_a];
        self.l2
            .backward(&mut self.c, &mut self.a, train, self.train_w);
        if !self.train_w {
            return loss;
        }
        // v tables → u tables → patterns → W
        self.d_pat.iter_mut().for_each(|x| *x = T::zero());
        let mut du = [T::zero(); 64];
        for hd in 0..h {
            for code in 0..nc {
                let r = hd * nc + code;
                if self.norm_tab[r] <= T::zero() {
                    continue; // no distance exists: u = 0 whatever W is
                }
                let o = r * s;
                du[..s].iter_mut().for_each(|x| *x = T::zero());
                l2norm::backward_plus_eps(
                    &mut du[..s],
                    &self.l2.dv_tab[o..o + s],
                    &self.u_tab[o..o + s],
                    &self.norm_tab[r..r + 1],
                    1,
                    s,
                    NORM_EPS,
                );
                // u[k] = Σ_{j: toks[j] = k} pattern[j]
                let (m, toks) = window(code, s, h);
                let po = (hd * (h + 1) + m) * h;
                for j in 0..m {
                    self.d_pat[po + j] += du[toks[j]];
                }
            }
        }
        let dw = self.w.grad_mut();
        for hd in 0..h {
            for m in 1..=h {
                let po = (hd * (h + 1) + m) * h;
                let pat = &self.pattern[po..po + m];
                let g = &self.d_pat[po..po + m];
                // centred on the top distance: exact once the pattern is one-hot
                let (g_top, dot) = softmax::centred_inner(g, pat);
                for j in 0..m {
                    dw[(hd + j) * h + hd] += pat[j] * ((g[j] - g_top) - dot);
                }
            }
        }
        loss
    }
}

impl<T: Float> Parameters<T> for Simplified<T> {
    mechlab_engine::parameters!(T; w, c, a);
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
    fn each_token_set_gets_its_own_window_index() {
        // three sets of the same shape in turn, twice (the model keeps two
        // indexes): every loss and gradient equals a fresh model's, bit for bit
        let cfg = SimplifiedConfig::default();
        let sets: Vec<Vec<u8>> = (0..3)
            .map(|k| {
                (0..4 * 21)
                    .map(|i| ((i * 7 + k * 5 + i / 3) % 3) as u8)
                    .collect()
            })
            .collect();
        let mut m = Simplified::<f64>::new(&cfg);
        for _ in 0..2 {
            for t in &sets {
                let mut fresh = Simplified::<f64>::new(&cfg);
                m.zero_grad();
                assert_eq!(
                    m.loss(t, 20, true).to_bits(),
                    fresh.loss(t, 20, true).to_bits()
                );
                assert_eq!(m.w.grad(), fresh.w.grad());
                assert_eq!(m.c.grad(), fresh.c.grad());
            }
        }
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
