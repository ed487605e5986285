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
//! Per sequence the gradient is one outer product `(Σ_t c_t x_t) z_iᵀ` with
//! `c_t = g_i a_t (u_t − f_i)`, so over a chunk of sequences it is one product
//! `XAᵀ Z` (`XA`: the rows `Σ_t c_t x_t`), and the queries' `W z_i` are another
//! (`Z Wᵀ`): both go through `gemm`, and only the `T·d` token loops per sequence
//! are written out. The values `u_t = vᵀ x_t` do not depend on `W` and are
//! computed once. Sequences are split into `⌈n / CHUNK_ITEMS⌉` equal chunks (a
//! number fixed by `n` alone, [`sized_chunks`]; one chunk at the papers' sizes),
//! each summed in order into its own preallocated workspace and reduced in chunk
//! order: bit-identical for any thread count, and nothing is allocated in a step.

use crate::papers::attention_svm::data::SvmData;
use crate::rng::{stream, Stream};
use crate::train::optim::trains;
use crate::train::Trainable;
use mechlab_engine::matmul::{matmul, Op};
use mechlab_engine::parallel::{chunk_range, for_each_chunk, reduce_ordered, sized_chunks};
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
    /// The effective `W` of the current step, `[d, d]`.
    w_buf: Vec<f64>,
    /// The values `u_(i,t) = vᵀ x_(i,t)`, `[n, T]`.
    u: Vec<f64>,
    /// One per chunk of sequences ([`sized_chunks`]).
    work: Vec<Work>,
    train: [bool; 3],
}

/// A chunk's scratch and partial sums.
struct Work {
    /// `W z_i` of the chunk's sequences: `[items, d]`.
    wz: Vec<f64>,
    /// Attention of one sequence: `[T]`.
    a: Vec<f64>,
    /// `Σ_t c_t x_t` of the chunk's sequences: `[items, d]`.
    xa: Vec<f64>,
    /// The chunk's `∂L/∂W`: `[d, d]`.
    gw: Vec<f64>,
    /// The chunk's summed loss.
    loss: f64,
}

impl Work {
    fn new(items: usize, t: usize, d: usize) -> Self {
        Work {
            wz: vec![0.0; items * d],
            a: vec![0.0; t],
            xa: vec![0.0; items * d],
            gw: vec![0.0; d * d],
            loss: 0.0,
        }
    }
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
            v: v.clone(),
            param: cfg.param,
            m,
            gw: vec![0.0; d * d],
            w_buf: vec![0.0; d * d],
            u: (0..data.n * data.t)
                .map(|k| dot(&v, data.token(k / data.t, k % data.t)))
                .collect(),
            work: {
                let k = sized_chunks(data.n);
                let items = chunk_range(data.n, k, k - 1).len();
                (0..k).map(|_| Work::new(items, data.t, d)).collect()
            },
            data,
            train: [true; 3],
        }
    }

    /// The effective `W`, `[d, d]`.
    pub fn w_eff(&self) -> Vec<f64> {
        let mut w = vec![0.0; self.data.d * self.data.d];
        self.w_eff_into(&mut w);
        w
    }

    /// Writes the effective `W` into `w` (`[d, d]`).
    fn w_eff_into(&self, w: &mut [f64]) {
        match self.param {
            Param2::W => w.copy_from_slice(self.w.value()),
            Param2::Kq => {
                // W [d, d] = K [d, m] · Qᵀ
                let (d, m) = (self.data.d, self.m);
                matmul(
                    w,
                    self.k.value(),
                    Op::N,
                    self.q.value(),
                    Op::T,
                    d,
                    m,
                    d,
                    false,
                );
            }
        }
    }

    /// Loss and the attention `[n, T]` of `w` on the data (analysis; allocates).
    pub fn forward(&self, w: &[f64]) -> (f64, Vec<f64>) {
        let dat = &*self.data;
        let (n, t, d) = (dat.n, dat.t, dat.d);
        // wz [n, d] = Z [n, d] · Wᵀ
        let mut wz = vec![0.0; n * d];
        matmul(&mut wz, &dat.z, Op::N, w, Op::T, n, d, d, false);
        let mut att = vec![0.0; n * t];
        let mut loss = 0.0;
        for i in 0..n {
            let a = &mut att[i * t..(i + 1) * t];
            loss += attend(dat, &self.u, &wz[i * d..(i + 1) * d], i, a).0;
        }
        (loss / n as f64, att)
    }

    /// Loss of `w` on the data, with `∂L/∂W` written into `self.gw`.
    fn loss_and_grad(&mut self, w: &[f64]) -> f64 {
        let dat = &*self.data;
        let (t, d) = (dat.t, dat.d);
        let u = &self.u;
        // work[c] gets chunk_range(n, n_chunks, c): fixed by n alone.
        for_each_chunk(dat.n, &mut self.work, |_, items, wk| {
            let nc = items.len();
            let (z, wz, xa) = (
                &dat.z[items.start * d..items.end * d],
                &mut wk.wz[..nc * d],
                &mut wk.xa[..nc * d],
            );
            // wz [nc, d] = Z [nc, d] · Wᵀ
            matmul(wz, z, Op::N, w, Op::T, nc, d, d, false);
            wk.loss = 0.0;
            for (k, i) in items.enumerate() {
                let (l, f) = attend(dat, u, &wz[k * d..(k + 1) * d], i, &mut wk.a);
                wk.loss += l;
                // g_i = ∂ softplus(−y f)/∂f;  xa_k [d] = Σ_t g_i a_t (u_t − f) x_t
                let g = -dat.y[i] / (1.0 + (dat.y[i] * f).exp());
                let row = &mut xa[k * d..(k + 1) * d];
                row.iter_mut().for_each(|x| *x = 0.0);
                for j in 0..t {
                    let c = g * wk.a[j] * (u[i * t + j] - f);
                    for (o, x) in row.iter_mut().zip(dat.token(i, j)) {
                        *o += c * x;
                    }
                }
            }
            // gw [d, d] = XAᵀ [d, nc] · Z [nc, d]
            matmul(&mut wk.gw, xa, Op::T, z, Op::N, d, nc, d, false);
        });
        self.gw.iter_mut().for_each(|x| *x = 0.0);
        reduce_ordered(&mut self.gw, &self.work, |wk| &wk.gw[..]);
        let inv_n = 1.0 / dat.n as f64;
        self.gw.iter_mut().for_each(|x| *x *= inv_n);
        self.work.iter().map(|wk| wk.loss).sum::<f64>() * inv_n
    }

    pub fn data(&self) -> &Arc<SvmData> {
        &self.data
    }
}

/// Sequence `i` given `wz = W z_i`: the attention into `a` (`[T]`), and the loss
/// `softplus(−y_i f_i)` with the output `f_i = Σ_t a_t u_t`.
fn attend(dat: &SvmData, u: &[f64], wz: &[f64], i: usize, a: &mut [f64]) -> (f64, f64) {
    let t = dat.t;
    let mut mx = f64::NEG_INFINITY;
    for (j, aj) in a.iter_mut().enumerate() {
        *aj = dot(dat.token(i, j), wz);
        mx = mx.max(*aj);
    }
    let mut sum = 0.0;
    a.iter_mut().for_each(|s| {
        *s = (*s - mx).exp();
        sum += *s;
    });
    a.iter_mut().for_each(|s| *s /= sum);
    let f = dot(a, &u[i * t..(i + 1) * t]);
    let mg = -dat.y[i] * f;
    // softplus(mg), stable
    (mg.max(0.0) + (-mg.abs()).exp().ln_1p(), f)
}

/// `Σ a_k b_k` in four interleaved partial sums (a sum LLVM can vectorise).
fn dot(a: &[f64], b: &[f64]) -> f64 {
    let mut s = [0.0; 4];
    let (ca, cb) = (a.chunks_exact(4), b.chunks_exact(4));
    let tail: f64 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for k in 0..4 {
            s[k] += x[k] * y[k];
        }
    }
    (s[0] + s[1]) + (s[2] + s[3]) + tail
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
        let mut w = std::mem::take(&mut self.w_buf);
        self.w_eff_into(&mut w);
        let loss = self.loss_and_grad(&w);
        self.w_buf = w;
        let (d, m) = (self.data.d, self.m);
        let gw = &self.gw;
        match self.param {
            Param2::W => {
                if self.train[0] {
                    self.w
                        .grad_mut()
                        .iter_mut()
                        .zip(gw)
                        .for_each(|(a, b)| *a += b);
                }
            }
            Param2::Kq => {
                // ∂K [d, m] += G [d, d] · Q [d, m];  ∂Q [d, m] += Gᵀ · K
                if self.train[1] {
                    matmul(
                        self.k.grad_mut(),
                        gw,
                        Op::N,
                        self.q.value(),
                        Op::N,
                        d,
                        d,
                        m,
                        true,
                    );
                }
                if self.train[2] {
                    matmul(
                        self.q.grad_mut(),
                        gw,
                        Op::T,
                        self.k.value(),
                        Op::N,
                        d,
                        d,
                        m,
                        true,
                    );
                }
            }
        }
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

    fn grads(m: &mut SvmModel) -> Vec<u64> {
        m.visit_mut(&mut |p| p.grad_mut().iter_mut().for_each(|g| *g = 0.0));
        let loss = m.train_step(0);
        let mut out = vec![loss.to_bits()];
        m.visit(&mut |p| out.extend(p.grad().iter().map(|g| g.to_bits())));
        out
    }

    /// Past `CHUNK_ITEMS` (512) sequences the step splits into chunks: the result is the
    /// same bits on 1 and 2 threads, and matches one serial chunk to rounding.
    #[test]
    fn chunked_step_is_thread_count_free_and_matches_one_chunk() {
        for p in [Param2::W, Param2::Kq] {
            let (data, v) = generate(
                &DataConfig {
                    n: 1100,
                    t: 4,
                    d: 5,
                },
                3,
            );
            let cfg = ModelConfig {
                param: p,
                m: 3,
                init: 0.5,
            };
            let mut m = SvmModel::new(&cfg, Arc::new(data), v, 3);
            assert_eq!(m.work.len(), 3);
            let pool = |k| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(k)
                    .build()
                    .unwrap()
            };
            let one = pool(1).install(|| grads(&mut m));
            let two = pool(2).install(|| grads(&mut m));
            assert_eq!(one, two, "{p:?}");
            let (t, d) = (m.data.t, m.data.d);
            m.work = vec![Work::new(1100, t, d)];
            let serial = grads(&mut m);
            assert_ne!(serial, one, "{p:?}: one chunk should round differently");
            for (a, b) in serial.iter().zip(&one) {
                let (a, b) = (f64::from_bits(*a), f64::from_bits(*b));
                assert!(
                    (a - b).abs() <= 1e-12 * (1.0 + a.abs()),
                    "{p:?}: {a} vs {b}"
                );
            }
        }
    }

    #[test]
    fn gradients_match_finite_differences() {
        for p in [Param2::W, Param2::Kq] {
            let mut m = model(p);
            let loss = |m: &SvmModel| m.forward(&m.w_eff()).0;
            let grads = |m: &mut SvmModel| {
                m.train_step(0);
            };
            for (name, r) in check_params(&mut m, loss, grads, DEFAULT_H) {
                r.assert_below(1e-6, &format!("{p:?} {name}"));
            }
        }
    }
}
