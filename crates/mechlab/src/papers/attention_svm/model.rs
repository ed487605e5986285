//! Single-layer attention with a fixed read-out (Tarzanagh et al. 2023):
//!
//! `f(X) = vᵀ Xᵀ softmax(X W z)`,  `z`: the query (`[d]`), `X`: `[T, d]`,
//!
//! or, with `model.output = "sequence"`, the self-attention form whose output is
//! the mean over every token as the query, `f(X) = (1/T) Σ_k vᵀ Xᵀ softmax(X W x_k)`
//! (the data then holds one item per query, [`SvmData::token_queries`], and the
//! loss and its gradient run over groups of `T` items: `∂L/∂f_k = g_i / T`),
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
    /// `cls` (one query per sequence) or `sequence` (every token a query, the
    /// output their mean).
    pub output: Output,
}

/// What the model reads out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Output {
    /// `vᵀ Xᵀ softmax(X W z)` for the sequence's query `z`.
    #[default]
    Cls,
    /// The mean of `vᵀ Xᵀ softmax(X W x_k)` over the sequence's tokens `x_k`.
    Sequence,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            param: Param2::W,
            m: 0,
            init: 0.01,
            output: Output::Cls,
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
    /// Attention of one output group's items: `[group, T]`.
    a: Vec<f64>,
    /// Outputs `f` of one output group's items: `[group]`.
    f: Vec<f64>,
    /// `Σ_t c_t x_t` of the chunk's sequences: `[items, d]`.
    xa: Vec<f64>,
    /// The chunk's `∂L/∂W`: `[d, d]`.
    gw: Vec<f64>,
    /// The chunk's summed loss.
    loss: f64,
}

impl Work {
    fn new(items: usize, group: usize, t: usize, d: usize) -> Self {
        Work {
            wz: vec![0.0; items * d],
            a: vec![0.0; group * t],
            f: vec![0.0; group],
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
                // Chunks of output groups, never splitting one.
                assert_eq!(data.n % data.group, 0, "items come in whole groups");
                let outs = data.n / data.group;
                let k = sized_chunks(outs);
                let items = chunk_range(outs, k, k - 1).len() * data.group;
                (0..k)
                    .map(|_| Work::new(items, data.group, data.t, d))
                    .collect()
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
        let (n, t, d, g) = (dat.n, dat.t, dat.d, dat.group);
        // wz [n, d] = Z [n, d] · Wᵀ
        let mut wz = vec![0.0; n * d];
        matmul(&mut wz, &dat.z, Op::N, w, Op::T, n, d, d, false);
        let mut att = vec![0.0; n * t];
        let mut loss = 0.0;
        let inv_g = 1.0 / g as f64;
        for o in 0..n / g {
            let mut f = 0.0;
            for i in o * g..(o + 1) * g {
                let a = &mut att[i * t..(i + 1) * t];
                f += attend(dat, &self.u, &wz[i * d..(i + 1) * d], i, a);
            }
            loss += softplus(-dat.y[o * g] * f * inv_g);
        }
        (loss / (n / g) as f64, att)
    }

    /// Loss of `w` on the data, with `∂L/∂W` written into `self.gw`.
    fn loss_and_grad(&mut self, w: &[f64]) -> f64 {
        let dat = &*self.data;
        let (t, d, g) = (dat.t, dat.d, dat.group);
        let outs = dat.n / g;
        // Exactly 1 for the ⟨cls⟩ output, so its bits do not change.
        let inv_g = 1.0 / g as f64;
        let u = &self.u;
        // work[c] gets the groups chunk_range(outs, n_chunks, c): fixed by n alone.
        for_each_chunk(outs, &mut self.work, |_, groups, wk| {
            let items = groups.start * g..groups.end * g;
            let nc = items.len();
            let (z, wz, xa) = (
                &dat.z[items.start * d..items.end * d],
                &mut wk.wz[..nc * d],
                &mut wk.xa[..nc * d],
            );
            // wz [nc, d] = Z [nc, d] · Wᵀ
            matmul(wz, z, Op::N, w, Op::T, nc, d, d, false);
            wk.loss = 0.0;
            for o in 0..groups.len() {
                let first = o * g;
                let mut f = 0.0;
                for j in 0..g {
                    let (k, i) = (first + j, items.start + first + j);
                    let a = &mut wk.a[j * t..(j + 1) * t];
                    wk.f[j] = attend(dat, u, &wz[k * d..(k + 1) * d], i, a);
                    f += wk.f[j];
                }
                let (y, f) = (dat.y[items.start + first], f * inv_g);
                wk.loss += softplus(-y * f);
                // ∂ softplus(−y f)/∂f, shared by the group's g items as ∂/∂f_k = · / g
                let gk = -y / (1.0 + (y * f).exp()) * inv_g;
                for j in 0..g {
                    let (k, i) = (first + j, items.start + first + j);
                    let (a, fk, ui) = (&wk.a[j * t..(j + 1) * t], wk.f[j], &u[i * t..(i + 1) * t]);
                    // xa_k [d] = Σ_t ∂L/∂f_k a_t (u_t − f_k) x_t
                    let row = &mut xa[k * d..(k + 1) * d];
                    row.iter_mut().for_each(|x| *x = 0.0);
                    for (tt, (&at, &ut)) in a.iter().zip(ui).enumerate() {
                        let c = gk * at * (ut - fk);
                        for (o, x) in row.iter_mut().zip(dat.token(i, tt)) {
                            *o += c * x;
                        }
                    }
                }
            }
            // gw [d, d] = XAᵀ [d, nc] · Z [nc, d]
            matmul(&mut wk.gw, xa, Op::T, z, Op::N, d, nc, d, false);
        });
        self.gw.iter_mut().for_each(|x| *x = 0.0);
        reduce_ordered(&mut self.gw, &self.work, |wk| &wk.gw[..]);
        let inv = 1.0 / outs as f64;
        self.gw.iter_mut().for_each(|x| *x *= inv);
        self.work.iter().map(|wk| wk.loss).sum::<f64>() * inv
    }

    pub fn data(&self) -> &Arc<SvmData> {
        &self.data
    }
}

/// Item `i` given `wz = W z_i`: the attention into `a` (`[T]`), and the output
/// `f_i = Σ_t a_t u_t`.
fn attend(dat: &SvmData, u: &[f64], wz: &[f64], i: usize, a: &mut [f64]) -> f64 {
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
    dot(a, &u[i * t..(i + 1) * t])
}

/// `log(1 + exp(x))`, stable.
fn softplus(x: f64) -> f64 {
    x.max(0.0) + (-x.abs()).exp().ln_1p()
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

    fn model(p: Param2, output: Output) -> SvmModel {
        let (data, v) = generate(
            &DataConfig {
                n: 3,
                t: 4,
                d: 5,
                twins: 0,
            },
            7,
        );
        let data = match output {
            Output::Cls => data,
            Output::Sequence => data.token_queries(),
        };
        let cfg = ModelConfig {
            param: p,
            m: 3,
            init: 0.5,
            output,
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
                    twins: 0,
                },
                3,
            );
            let cfg = ModelConfig {
                param: p,
                m: 3,
                init: 0.5,
                ..ModelConfig::default()
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
            m.work = vec![Work::new(1100, 1, t, d)];
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
            for output in [Output::Cls, Output::Sequence] {
                let mut m = model(p, output);
                let loss = |m: &SvmModel| m.forward(&m.w_eff()).0;
                let grads = |m: &mut SvmModel| {
                    m.train_step(0);
                };
                for (name, r) in check_params(&mut m, loss, grads, DEFAULT_H) {
                    r.assert_below(1e-6, &format!("{p:?} {output:?} {name}"));
                }
            }
        }
    }

    /// The sequence output is the mean over the sequence's token queries of the
    /// per-query outputs, and the loss is taken on that mean: rebuilt here from the
    /// per-query attention of the same items read one by one (`group = 1`).
    #[test]
    fn the_sequence_output_is_the_mean_over_token_queries() {
        let m = model(Param2::W, Output::Sequence);
        let q = m.data().clone();
        let single = SvmData {
            group: 1,
            ..(*q).clone()
        };
        let one = SvmModel::new(
            &ModelConfig {
                param: Param2::W,
                m: 3,
                init: 0.5,
                output: Output::Cls,
            },
            Arc::new(single),
            m.v.clone(),
            7,
        );
        let w = m.w_eff();
        let (loss, att) = m.forward(&w);
        let (_, att1) = one.forward(&w);
        assert_eq!(att, att1);
        let (t, n_seq) = (q.t, q.n / q.t);
        let mut want = 0.0;
        for i in 0..n_seq {
            let f: f64 = (0..t)
                .map(|k| {
                    let item = i * t + k;
                    (0..t)
                        .map(|j| att[item * t + j] * dot(&m.v, q.token(item, j)))
                        .sum::<f64>()
                })
                .sum::<f64>()
                / t as f64;
            want += softplus(-q.y[i * t] * f);
        }
        want /= n_seq as f64;
        assert!((loss - want).abs() < 1e-12, "{loss} vs {want}");
    }
}
