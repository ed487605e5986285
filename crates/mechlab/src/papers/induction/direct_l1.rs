//! Layer 1 of the direct induction path ([`super::direct`]), forward and
//! backward, one sequence at a time.
//!
//! Position `i` (`0..=L`, the query `L` last), head `h`: the distances
//! `h+1+j`, `j < m`, exist, with `m = clamp(i − h, 0, H)`; `tok_j = x_{i−h−1−j}`.
//!
//! - simplified: `u = Σ_j A_h(m, j) e_{tok_j}` (the pattern depends on `m` only),
//!   `v = u / (‖u‖ + ε)`. Only the query's `v` is stored densely (`[H, S]`); a
//!   key's inner product with it is `Σ_j A_j v_L[tok_j] / (‖u‖ + ε)`, `O(H)`.
//! - full: logits `M_h[x_i, x_i] + 1e-6` (self) and `M_h[x_i, tok_j] + W[h+j, h]`
//!   (`M = W_Q W_Kᵀ`; the query has a zero token row), softmax, `o = Σ A e_tok`,
//!   `pre = o W_OV^h`, `v = LayerNorm(pre)`, all dense `[L+1, H, S]`.

#![allow(clippy::needless_range_loop)]

use super::direct::{Direct, FullParams, Step, Work};
use super::full::{LN_EPS, SELF_LOGIT};
use super::simplified::NORM_EPS;
use mechlab_engine::layers::{l2norm, layernorm, softmax};
use mechlab_engine::Float;

/// Token `j` of head `hd`'s window at position `i` (`j < m`).
#[inline]
fn tok(x: &[u8], i: usize, hd: usize, j: usize) -> usize {
    x[i - hd - 1 - j] as usize
}

/// Distances present for head `hd` at position `i`.
#[inline]
fn present(i: usize, hd: usize, h: usize) -> usize {
    i.saturating_sub(hd).min(h)
}

impl<T: Float> Direct<T> {
    /// Ablates the layer-1 heads whose bits are set in `mask` (0: none), in every
    /// forward and backward from now on.
    pub fn set_ablated(&mut self, mask: u16) {
        self.ablated = mask;
    }

    /// Clamps the layer-1 patterns of the heads in `mask` (simplified model): a
    /// head newly in the mask keeps a copy of its RPE logits as they are now.
    pub fn set_clamped(&mut self, mask: u16) {
        let h = self.cfg.n_heads;
        for hd in (0..h).filter(|hd| (mask & !self.clamped) >> hd & 1 == 1) {
            for r in 0..2 * h - 1 {
                self.clamp_w[r * h + hd] = self.w.value()[r * h + hd];
            }
        }
        self.clamped = mask;
    }

    /// `W_pos` as the patterns read it: clamped heads' columns from their copy.
    pub(crate) fn w_seen(&self) -> Vec<f64> {
        let h = self.cfg.n_heads;
        let w = self.w.value();
        (0..w.len())
            .map(|k| {
                let src = if self.clamped >> (k % h) & 1 == 1 {
                    &self.clamp_w
                } else {
                    w
                };
                src[k].as_f64()
            })
            .collect()
    }

    /// The clamp's state for a checkpoint: the mask and the copied logits.
    pub fn clamp_state(&self) -> (u16, Vec<f64>) {
        (
            self.clamped,
            self.clamp_w.iter().map(|x| x.as_f64()).collect(),
        )
    }

    /// Restores [`Direct::clamp_state`]; `false` when the sizes differ.
    pub fn load_clamp_state(&mut self, mask: u16, w: &[f64]) -> bool {
        if w.len() != self.clamp_w.len() {
            return false;
        }
        self.clamp_w
            .iter_mut()
            .zip(w)
            .for_each(|(d, &x)| *d = T::of(x));
        self.clamped = mask;
        true
    }

    /// Per-step tables from the parameters: the simplified model's patterns
    /// `[H, H+1, H]`, or the full model's `M = W_Q W_Kᵀ` `[H, S, S]`.
    pub(crate) fn prepare(&mut self) {
        let (h, s) = (self.cfg.n_heads, self.cfg.d_vocab);
        match &self.full {
            None => {
                // A clamped head reads its copy of the logits instead of W.
                for hd in 0..h {
                    let w = if self.clamped >> hd & 1 == 1 {
                        &self.clamp_w[..]
                    } else {
                        self.w.value()
                    };
                    for m in 0..=h {
                        let row =
                            &mut self.pattern[(hd * (h + 1) + m) * h..(hd * (h + 1) + m + 1) * h];
                        for (j, x) in row.iter_mut().enumerate() {
                            *x = w[(hd + j) * h + hd];
                        }
                        softmax::row_in_place(row, |j| j < m);
                    }
                }
            }
            Some(f) => {
                let (wq, wk) = (f.wq.value(), f.wk.value());
                for hd in 0..h {
                    for i in 0..s {
                        for k in 0..s {
                            self.qk[(hd * s + i) * s + k] = (0..s)
                                .map(|j| wq[(hd * s + i) * s + j] * wk[(hd * s + k) * s + j])
                                .sum();
                        }
                    }
                }
            }
        }
    }
}

/// `M = Q Kᵀ`: `dQ += dM K`, `dK += dMᵀ Q` per head.
pub(crate) fn qk_backward<T: Float>(f: &mut FullParams<T>, dm: &[T], h: usize, s: usize) {
    for hd in 0..h {
        for i in 0..s {
            for j in 0..s {
                let (mut gq, mut gk) = (T::zero(), T::zero());
                for k in 0..s {
                    gq += dm[(hd * s + i) * s + k] * f.wk.value()[(hd * s + k) * s + j];
                    gk += dm[(hd * s + k) * s + i] * f.wq.value()[(hd * s + k) * s + j];
                }
                f.wq.grad_mut()[(hd * s + i) * s + j] += gq;
                f.wk.grad_mut()[(hd * s + i) * s + j] += gk;
            }
        }
    }
}

impl<T: Float> Step<'_, T> {
    /// Layer 1 of one sequence `[L+1]`: fills `wk.pr`, the head outputs and `wk.ip`.
    pub(crate) fn layer1_forward(&self, wk: &mut Work<T>, seq: &[u8]) {
        let (l, h, s) = (self.l, self.m.cfg.n_heads, self.m.cfg.d_vocab);
        let x = &seq[..l];
        let k1 = h + 1;
        match &self.m.full {
            None => {
                let pat = &self.m.pattern;
                for i in 0..=l {
                    for hd in 0..h {
                        let m = present(i, hd, h);
                        let pr = &mut wk.pr[(i * h + hd) * k1..(i * h + hd + 1) * k1];
                        pr[0] = T::zero();
                        pr[1..].copy_from_slice(
                            &pat[(hd * (h + 1) + m) * h..(hd * (h + 1) + m + 1) * h],
                        );
                    }
                }
                // the query: u dense, v = u / (‖u‖ + ε) through the engine's layer
                for hd in 0..h {
                    let u = &mut wk.pre[hd * s..(hd + 1) * s];
                    u.iter_mut().for_each(|v| *v = T::zero());
                    let pr = &wk.pr[(l * h + hd) * k1..(l * h + hd + 1) * k1];
                    for j in 0..h {
                        u[tok(x, l, hd, j)] += pr[1 + j];
                    }
                    l2norm::forward_plus_eps(
                        &mut wk.v[hd * s..(hd + 1) * s],
                        &mut wk.norm[l * h + hd..l * h + hd + 1],
                        &wk.pre[hd * s..(hd + 1) * s],
                        1,
                        s,
                        NORM_EPS,
                    );
                }
                let eps = T::of(NORM_EPS);
                for i in 0..l {
                    for hd in 0..h {
                        let m = present(i, hd, h);
                        let pr = &wk.pr[(i * h + hd) * k1 + 1..(i * h + hd + 1) * k1];
                        // ‖u‖² = Σ_{j,j'} A_j A_j' [tok_j = tok_j']
                        let mut n2 = T::zero();
                        let mut dot = T::zero();
                        for j in 0..m {
                            let t = tok(x, i, hd, j);
                            let mut uk = T::zero();
                            for j2 in 0..m {
                                if tok(x, i, hd, j2) == t {
                                    uk += pr[j2];
                                }
                            }
                            n2 += pr[j] * uk;
                            dot += pr[j] * wk.v[hd * s + t];
                        }
                        let n = n2.sqrt();
                        wk.norm[i * h + hd] = n;
                        wk.ip[i * h + hd] = dot / (n + eps);
                    }
                }
            }
            Some(f) => {
                let (w, ov) = (self.m.w.value(), f.wov.value());
                let (lw, lb) = (f.ln_w.value(), f.ln_b.value());
                let qk = &self.m.qk;
                for i in 0..=l {
                    let me = (i < l).then(|| x[i] as usize);
                    for hd in 0..h {
                        let m = present(i, hd, h);
                        let r = i * h + hd;
                        let pr = &mut wk.pr[r * k1..(r + 1) * k1];
                        let mk = |t: usize| me.map_or(T::zero(), |e| qk[(hd * s + e) * s + t]);
                        pr[0] = me.map_or(T::zero(), mk) + T::of(SELF_LOGIT);
                        for j in 0..h {
                            pr[1 + j] = if j < m {
                                mk(tok(x, i, hd, j)) + w[(hd + j) * h + hd]
                            } else {
                                T::zero()
                            };
                        }
                        softmax::row_in_place(pr, |k| k <= m);
                        let pre = &mut wk.pre[r * s..(r + 1) * s];
                        pre.iter_mut().for_each(|v| *v = T::zero());
                        if let Some(e) = me {
                            let row = &ov[(hd * s + e) * s..(hd * s + e + 1) * s];
                            pre.iter_mut().zip(row).for_each(|(p, &o)| *p += pr[0] * o);
                        }
                        for j in 0..m {
                            let t = tok(x, i, hd, j);
                            let row = &ov[(hd * s + t) * s..(hd * s + t + 1) * s];
                            pre.iter_mut()
                                .zip(row)
                                .for_each(|(p, &o)| *p += pr[1 + j] * o);
                        }
                        layernorm::forward(
                            &mut wk.v[r * s..(r + 1) * s],
                            &mut wk.mean[r..r + 1],
                            &mut wk.rstd[r..r + 1],
                            &wk.pre[r * s..(r + 1) * s],
                            lw,
                            lb,
                            1,
                            s,
                            LN_EPS,
                        );
                    }
                }
                for i in 0..l {
                    for hd in 0..h {
                        let (a, b) = ((i * h + hd) * s, (l * h + hd) * s);
                        wk.ip[i * h + hd] = (0..s).map(|k| wk.v[a + k] * wk.v[b + k]).sum();
                    }
                }
            }
        }
    }

    /// From `wk.dip` back to layer 1's partials (`wk.d_pat`, and the full model's
    /// `dm`, `dov`, `dlw`, `dlb`).
    pub(crate) fn layer1_backward(&self, wk: &mut Work<T>, seq: &[u8]) {
        let (l, h, s) = (self.l, self.m.cfg.n_heads, self.m.cfg.d_vocab);
        let [train_w, _, _] = self.m.train;
        if !train_w {
            return;
        }
        let x = &seq[..l];
        let k1 = h + 1;
        match &self.m.full {
            None => {
                let eps = T::of(NORM_EPS);
                wk.dq.iter_mut().for_each(|v| *v = T::zero());
                for i in 0..l {
                    for hd in 0..h {
                        let d = wk.dip[i * h + hd];
                        let n = wk.norm[i * h + hd];
                        if d == T::zero() || n <= T::zero() {
                            continue; // no gradient, or no distance (u = 0 whatever W is)
                        }
                        let m = present(i, hd, h);
                        let den = n + eps;
                        let vq = &wk.v[hd * s..(hd + 1) * s];
                        let pr = &wk.pr[(i * h + hd) * k1 + 1..(i * h + hd + 1) * k1];
                        // ⟨u, v_L⟩ = ip (‖u‖ + ε); dv = d v_L
                        let coef = d * wk.ip[i * h + hd] * den / (n * den * den);
                        let po = (hd * (h + 1) + m) * h;
                        for j in 0..m {
                            let t = tok(x, i, hd, j);
                            wk.dq[hd * s + t] += d * pr[j] / den;
                            let mut uk = T::zero();
                            for j2 in 0..m {
                                if tok(x, i, hd, j2) == t {
                                    uk += pr[j2];
                                }
                            }
                            wk.d_pat[po + j] += d * vq[t] / den - uk * coef;
                        }
                    }
                }
                for hd in 0..h {
                    wk.dx.iter_mut().for_each(|v| *v = T::zero());
                    l2norm::backward_plus_eps(
                        &mut wk.dx,
                        &wk.dq[hd * s..(hd + 1) * s],
                        &wk.pre[hd * s..(hd + 1) * s],
                        &wk.norm[l * h + hd..l * h + hd + 1],
                        1,
                        s,
                        NORM_EPS,
                    );
                    let po = (hd * (h + 1) + h) * h;
                    for j in 0..h {
                        wk.d_pat[po + j] += wk.dx[tok(x, l, hd, j)];
                    }
                }
            }
            Some(f) => {
                let (ov, lw) = (f.wov.value(), f.ln_w.value());
                // dv of every key, and of the query (the sum over keys)
                wk.dv.iter_mut().for_each(|v| *v = T::zero());
                for i in 0..l {
                    for hd in 0..h {
                        let d = wk.dip[i * h + hd];
                        if d == T::zero() {
                            continue;
                        }
                        let (a, b) = ((i * h + hd) * s, (l * h + hd) * s);
                        for k in 0..s {
                            wk.dv[a + k] += d * wk.v[b + k];
                            wk.dv[b + k] += d * wk.v[a + k];
                        }
                    }
                }
                let mut dp = [T::zero(); 9];
                for i in 0..=l {
                    let me = (i < l).then(|| x[i] as usize);
                    for hd in 0..h {
                        let r = i * h + hd;
                        if wk.dv[r * s..(r + 1) * s].iter().all(|v| *v == T::zero()) {
                            continue;
                        }
                        let m = present(i, hd, h);
                        wk.dx.iter_mut().for_each(|v| *v = T::zero());
                        layernorm::backward(
                            &mut wk.dx,
                            Some(&mut wk.dlw[..]),
                            Some(&mut wk.dlb[..]),
                            &wk.dv[r * s..(r + 1) * s],
                            &wk.pre[r * s..(r + 1) * s],
                            &wk.mean[r..r + 1],
                            &wk.rstd[r..r + 1],
                            lw,
                            1,
                            s,
                        );
                        let pr = &wk.pr[r * k1..(r + 1) * k1];
                        // pre = Σ_k A_k OV[t_k, :]: dOV[t_k] += A_k dpre, dA_k = ⟨OV[t_k], dpre⟩
                        let row = |k: usize, t: usize, dov: &mut [T]| -> T {
                            let o = (hd * s + t) * s;
                            let mut acc = T::zero();
                            for c in 0..s {
                                dov[o + c] += pr[k] * wk.dx[c];
                                acc += ov[o + c] * wk.dx[c];
                            }
                            acc
                        };
                        dp[0] = match me {
                            Some(e) => row(0, e, &mut wk.dov),
                            None => T::zero(),
                        };
                        for j in 0..m {
                            dp[1 + j] = row(1 + j, tok(x, i, hd, j), &mut wk.dov);
                        }
                        softmax::backward_row_in_place(&mut dp[..=m], &pr[..=m]);
                        for j in 0..m {
                            wk.d_pat[(hd + j) * h + hd] += dp[1 + j];
                        }
                        if let Some(e) = me {
                            wk.dm[(hd * s + e) * s + e] += dp[0];
                            for j in 0..m {
                                wk.dm[(hd * s + e) * s + tok(x, i, hd, j)] += dp[1 + j];
                            }
                        }
                    }
                }
            }
        }
    }
}
