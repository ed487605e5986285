//! Single-layer attention with a fixed read-out (Tarzanagh et al. 2023):
//!
//! `f(X) = vᵀ Xᵀ softmax(X W z)`,  `z`: the query (`[d]`), `X`: `[T, d]`,
//!
//! trained on the logistic loss `L = (1/n) Σ_i log(1 + exp(−y_i f(X_i)))`, either on
//! `W` (`[d, d]`) directly or on `K`, `Q` (`[d, m]` each) with `W = K Qᵀ`.
//! With scores `s_t = x_tᵀ W z`, `a = softmax(s)`, values `u_t = vᵀ x_t` and
//! `g_i = ∂L/∂f_i = −y_i σ(−y_i f_i)/n`,
//!
//! `∂L/∂W = Σ_i g_i Σ_t a_t (u_t − f_i) x_t z_iᵀ`,  `∂L/∂K = (∂L/∂W) Q`,  `∂L/∂Q = (∂L/∂W)ᵀ K`.
//!
//! The sizes are those of the papers' synthetic runs (`n`, `T` ≤ tens, `d` ≤ 64),
//! so one step runs serially in a fixed order: bit-identical for any thread count.

use crate::papers::attention_svm::data::{dot, SvmData};
use crate::rng::{stream, Stream};
use crate::train::optim::trains;
use crate::train::Trainable;
use mechlab_engine::{param, Param, Parameters};
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// How `W` is parameterised.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Param2 {
    /// `W` trained directly (group `w`).
    W,
    /// `W = K Qᵀ` (groups `k`, `q`).
    Kq,
}

/// The `[model]` section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
    pub param: Param2,
    /// Columns of `K` and `Q` (the `kq` parameterisation); `d` when 0.
    pub m: usize,
    /// Standard deviation of the initial entries.
    pub init: f64,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            param: Param2::W,
            m: 0,
            init: 0.01,
        }
    }
}

/// The model, its data and its read-out.
pub struct SvmModel {
    /// `blocks.0.attn.W` `[d, d]` (the `w` parameterisation; empty otherwise).
    pub w: Param<f64>,
    /// `blocks.0.attn.W_K` `[d, m]`, `blocks.0.attn.W_Q` `[d, m]` (the `kq` parameterisation).
    pub k: Param<f64>,
    pub q: Param<f64>,
    pub v: Vec<f64>,
    pub param: Param2,
    data: Arc<SvmData>,
    m: usize,
    /// `∂L/∂W`, `[d, d]`.
    gw: Vec<f64>,
    train: [bool; 3],
}

impl SvmModel {
    pub fn new(cfg: &ModelConfig, data: Arc<SvmData>, v: Vec<f64>, seed: u64) -> Self {
        let d = data.d;
        let m = if cfg.m == 0 { d } else { cfg.m };
        let mut rng = stream(seed, Stream::Init);
        let mut g = |len: usize| -> Vec<f64> {
            (0..len)
                .map(|_| {
                    cfg.init
                        * <StandardNormal as Distribution<f64>>::sample(&StandardNormal, &mut rng)
                })
                .collect()
        };
        let (w, k, q) = match cfg.param {
            Param2::W => (g(d * d), vec![], vec![]),
            Param2::Kq => (vec![], g(d * m), g(d * m)),
        };
        SvmModel {
            w: param("blocks.0.attn.W", "w", &[w.len()], w),
            k: param("blocks.0.attn.W_K", "k", &[k.len()], k),
            q: param("blocks.0.attn.W_Q", "q", &[q.len()], q),
            v,
            param: cfg.param,
            data,
            m,
            gw: vec![0.0; d * d],
            train: [true; 3],
        }
    }

    /// The effective `W`, `[d, d]`.
    pub fn w_eff(&self) -> Vec<f64> {
        match self.param {
            Param2::W => self.w.value().to_vec(),
            Param2::Kq => {
                let (d, m) = (self.data.d, self.m);
                let (k, q) = (self.k.value(), self.q.value());
                let mut w = vec![0.0; d * d];
                for r in 0..d {
                    for c in 0..d {
                        w[r * d + c] = (0..m).map(|j| k[r * m + j] * q[c * m + j]).sum();
                    }
                }
                w
            }
        }
    }

    /// Loss and the attention `[n, T]` of `w` on the data; adds `∂L/∂W` into `gw` when given.
    pub fn forward(&self, w: &[f64], mut gw: Option<&mut [f64]>) -> (f64, Vec<f64>) {
        let dat = &*self.data;
        let (t, d) = (dat.t, dat.d);
        let inv_n = 1.0 / dat.n as f64;
        let mut loss = 0.0;
        let mut att = vec![0.0; dat.n * t];
        let mut wz = vec![0.0; d];
        for i in 0..dat.n {
            let z = dat.query(i);
            for (r, o) in wz.iter_mut().enumerate() {
                *o = dot(&w[r * d..(r + 1) * d], z);
            }
            let a = &mut att[i * t..(i + 1) * t];
            let mut mx = f64::NEG_INFINITY;
            for (j, aj) in a.iter_mut().enumerate() {
                *aj = dot(dat.token(i, j), &wz);
                mx = mx.max(*aj);
            }
            let mut sum = 0.0;
            a.iter_mut().for_each(|s| {
                *s = (*s - mx).exp();
                sum += *s;
            });
            a.iter_mut().for_each(|s| *s /= sum);
            let u: Vec<f64> = (0..t).map(|j| dot(dat.token(i, j), &self.v)).collect();
            let f = dot(a, &u);
            let mg = -dat.y[i] * f;
            // softplus(mg), stable
            loss += mg.max(0.0) + (-mg.abs()).exp().ln_1p();
            if let Some(gw) = gw.as_deref_mut() {
                let g = -dat.y[i] / (1.0 + (-mg).exp()) * inv_n;
                for (j, &aj) in a.iter().enumerate() {
                    let c = g * aj * (u[j] - f);
                    let x = dat.token(i, j);
                    for r in 0..d {
                        let cx = c * x[r];
                        for (gc, zc) in gw[r * d..(r + 1) * d].iter_mut().zip(z) {
                            *gc += cx * zc;
                        }
                    }
                }
            }
        }
        (loss * inv_n, att)
    }

    pub fn data(&self) -> &Arc<SvmData> {
        &self.data
    }
}

impl Parameters<f64> for SvmModel {
    fn visit(&self, f: &mut dyn FnMut(&Param<f64>)) {
        f(&self.w);
        f(&self.k);
        f(&self.q);
    }
    fn visit_mut(&mut self, f: &mut dyn FnMut(&mut Param<f64>)) {
        f(&mut self.w);
        f(&mut self.k);
        f(&mut self.q);
    }
}

impl Trainable<f64> for SvmModel {
    fn train_step(&mut self, _step: u64) -> f64 {
        let w = self.w_eff();
        let mut gw = std::mem::take(&mut self.gw);
        gw.iter_mut().for_each(|x| *x = 0.0);
        let (loss, _) = self.forward(&w, Some(&mut gw));
        let (d, m) = (self.data.d, self.m);
        match self.param {
            Param2::W => {
                if self.train[0] {
                    self.w
                        .grad_mut()
                        .iter_mut()
                        .zip(&gw)
                        .for_each(|(a, b)| *a += b);
                }
            }
            Param2::Kq => {
                // ∂K [d, m] = G [d, d] · Q [d, m];  ∂Q [d, m] = Gᵀ · K
                let (kv, qv) = (self.k.value().to_vec(), self.q.value().to_vec());
                if self.train[1] {
                    let gk = self.k.grad_mut();
                    for r in 0..d {
                        for j in 0..m {
                            gk[r * m + j] +=
                                (0..d).map(|c| gw[r * d + c] * qv[c * m + j]).sum::<f64>();
                        }
                    }
                }
                if self.train[2] {
                    let gq = self.q.grad_mut();
                    for c in 0..d {
                        for j in 0..m {
                            gq[c * m + j] +=
                                (0..d).map(|r| gw[r * d + c] * kv[r * m + j]).sum::<f64>();
                        }
                    }
                }
            }
        }
        self.gw = gw;
        loss
    }

    fn set_trainable(&mut self, groups: &[String]) {
        self.train = [
            trains(groups, "w"),
            trains(groups, "k"),
            trains(groups, "q"),
        ];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::papers::attention_svm::data::{generate, DataConfig};
    use mechlab_engine::gradcheck::{check_params, DEFAULT_H};

    fn model(p: Param2) -> SvmModel {
        let (data, v) = generate(&DataConfig { n: 3, t: 4, d: 5 }, 7);
        let cfg = ModelConfig {
            param: p,
            m: 3,
            init: 0.5,
        };
        SvmModel::new(&cfg, Arc::new(data), v, 7)
    }

    #[test]
    fn gradients_match_finite_differences() {
        for p in [Param2::W, Param2::Kq] {
            let mut m = model(p);
            let loss = |m: &SvmModel| m.forward(&m.w_eff(), None).0;
            let grads = |m: &mut SvmModel| {
                m.train_step(0);
            };
            for (name, r) in check_params(&mut m, loss, grads, DEFAULT_H) {
                r.assert_below(1e-6, &format!("{p:?} {name}"));
            }
        }
    }
}
