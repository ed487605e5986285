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
//! `u_t − f_i` is never formed as written: once the selected token's weight rounds
//! to 1, `f_i` equals its `u` to the last bit and its term is rounding noise, so the
//! direction GD follows goes astray long before the true gradient underflows. With
//! `m` the token of largest weight it is `(u_t − u_m) − Σ_s a_s (u_s − u_m)`, whose
//! terms stay accurate however saturated the softmax is (the engine's
//! [`softmax::centred_inner`]; tested against the double-double at saturation).
//! With `model.kq_reg = λ` the `(K, Q)` loss carries the authors' `λ(‖K‖² + ‖Q‖²)`.
//!
//! The model is generic over [`Float`] (`model.dtype`): f64 as the papers' code
//! runs, [`mechlab_engine::F64x2`] to check what f64 rounding does over a long run.
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

use crate::experiment::Dtype;
use crate::papers::attention_svm::data::SvmData;
use crate::rng::{stream, Stream};
use crate::train::optim::trains;
use crate::train::Trainable;
use mechlab_engine::layers::softmax;
use mechlab_engine::matmul::{matmul, Op};
use mechlab_engine::parallel::{chunk_range, for_each_chunk, reduce_ordered, sized_chunks};
use mechlab_engine::{param, Float, Param, Parameters};
use rand::Rng;
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
    /// `normal`, or `uniform` on `±√3·init` (PyTorch's `nn.Linear` default, which
    /// the authors' code uses, is uniform on `±1/√d`: `init = 1/√(3d)`).
    pub init_dist: InitDist,
    /// `cls` (one query per sequence) or `sequence` (every token a query, the
    /// output their mean).
    pub output: Output,
    /// `λ` of the term `λ (‖K‖²_F + ‖Q‖²_F)` added to the `(K, Q)` loss (the
    /// authors' code adds it with `λ` = f64's machine epsilon); 0: none.
    pub kq_reg: f64,
    /// `f64`, or `f64x2` (the double-double, for precision checks); `f32` also runs.
    pub dtype: Dtype,
}

/// How the initial entries are drawn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InitDist {
    #[default]
    Normal,
    Uniform,
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
            init_dist: InitDist::Normal,
            output: Output::Cls,
            kq_reg: 0.0,
            dtype: Dtype::F64,
        }
    }
}

/// The model, its data and its read-out.
pub struct SvmModel<T: Float> {
    /// `blocks.0.attn.W` `[d, d]` (the `w` parameterisation; empty otherwise).
    pub w: Param<T>,
    /// `blocks.0.attn.W_K` `[d, m]`, `blocks.0.attn.W_Q` `[d, m]` (the `kq` parameterisation).
    pub k: Param<T>,
    pub q: Param<T>,
    pub v: Vec<f64>,
    pub param: Param2,
    data: Arc<SvmData>,
    /// The tokens `[n, T, d]` and queries `[n, d]` in `T`.
    x: Vec<T>,
    z: Vec<T>,
    m: usize,
    kq_reg: T,
    /// `∂L/∂W`, `[d, d]`.
    gw: Vec<T>,
    /// The effective `W` of the current step, `[d, d]`.
    w_buf: Vec<T>,
    /// The values `u_(i,t) = vᵀ x_(i,t)`, `[n, T]`.
    u: Vec<T>,
    /// One per chunk of sequences ([`sized_chunks`]).
    work: Vec<Work<T>>,
    train: [bool; 3],
}

/// A chunk's scratch and partial sums.
struct Work<T> {
    /// `W z_i` of the chunk's sequences: `[items, d]`.
    wz: Vec<T>,
    /// Attention of one output group's items: `[group, T]`.
    a: Vec<T>,
    /// Outputs `f` of one output group's items: `[group]`.
    f: Vec<T>,
    /// `Σ_t c_t x_t` of the chunk's sequences: `[items, d]`.
    xa: Vec<T>,
    /// The chunk's `∂L/∂W`: `[d, d]`.
    gw: Vec<T>,
    /// The chunk's summed loss.
    loss: T,
}

impl<T: Float> Work<T> {
    fn new(items: usize, group: usize, t: usize, d: usize) -> Self {
        Work {
            wz: vec![T::zero(); items * d],
            a: vec![T::zero(); group * t],
            f: vec![T::zero(); group],
            xa: vec![T::zero(); items * d],
            gw: vec![T::zero(); d * d],
            loss: T::zero(),
        }
    }
}

fn cast<T: Float>(x: &[f64]) -> Vec<T> {
    x.iter().map(|&v| T::of(v)).collect()
}

impl<T: Float> SvmModel<T> {
    pub fn new(cfg: &ModelConfig, data: Arc<SvmData>, v: Vec<f64>, seed: u64) -> Self {
        let d = data.d;
        let m = if cfg.m == 0 { d } else { cfg.m };
        let mut rng = stream(seed, Stream::Init);
        // Drawn in f64 whatever T is, so every dtype starts from the same point.
        let bound = 3f64.sqrt() * cfg.init;
        let mut g = |len: usize| -> Vec<T> {
            (0..len)
                .map(|_| {
                    T::of(match cfg.init_dist {
                        InitDist::Normal => {
                            cfg.init
                                * <StandardNormal as Distribution<f64>>::sample(
                                    &StandardNormal,
                                    &mut rng,
                                )
                        }
                        InitDist::Uniform => {
                            if bound > 0.0 {
                                rng.random_range(-bound..bound)
                            } else {
                                0.0
                            }
                        }
                    })
                })
                .collect()
        };
        let (w, k, q) = match cfg.param {
            Param2::W => (g(d * d), vec![], vec![]),
            Param2::Kq => (vec![], g(d * m), g(d * m)),
        };
        let (x, z) = (cast::<T>(&data.x), cast::<T>(&data.z));
        let vt = cast::<T>(&v);
        let u = (0..data.n * data.t)
            .map(|k| dot(&vt, &x[k * d..(k + 1) * d]))
            .collect();
        SvmModel {
            w: param("blocks.0.attn.W", "w", &[w.len()], w),
            k: param("blocks.0.attn.W_K", "k", &[k.len()], k),
            q: param("blocks.0.attn.W_Q", "q", &[q.len()], q),
            v,
            param: cfg.param,
            m,
            kq_reg: T::of(cfg.kq_reg),
            gw: vec![T::zero(); d * d],
            w_buf: vec![T::zero(); d * d],
            u,
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
            x,
            z,
            data,
            train: [true; 3],
        }
    }

    /// The effective `W`, `[d, d]`, rounded to f64 (for the SVMs and probes).
    pub fn w_eff(&self) -> Vec<f64> {
        let mut w = vec![T::zero(); self.data.d * self.data.d];
        self.w_eff_into(&mut w);
        w.iter().map(|x| x.as_f64()).collect()
    }

    /// Writes the effective `W` into `w` (`[d, d]`).
    fn w_eff_into(&self, w: &mut [T]) {
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

    /// Loss and attention `[n, T]` of the model's own `W`, computed in `T`
    /// (analysis; allocates).
    pub fn attention(&self) -> (f64, Vec<f64>) {
        let mut w = vec![T::zero(); self.data.d * self.data.d];
        self.w_eff_into(&mut w);
        self.forward_in(&w)
    }

    /// Loss and the attention `[n, T]` of a given `w` on the data (analysis; allocates).
    pub fn forward(&self, w: &[f64]) -> (f64, Vec<f64>) {
        self.forward_in(&cast::<T>(w))
    }

    fn forward_in(&self, w: &[T]) -> (f64, Vec<f64>) {
        let dat = &*self.data;
        let (n, t, d, g) = (dat.n, dat.t, dat.d, dat.group);
        // wz [n, d] = Z [n, d] · Wᵀ
        let mut wz = vec![T::zero(); n * d];
        matmul(&mut wz, &self.z, Op::N, w, Op::T, n, d, d, false);
        let mut att = vec![T::zero(); n * t];
        let mut loss = T::zero();
        let inv_g = T::one() / T::of_usize(g);
        for o in 0..n / g {
            let mut f = T::zero();
            for i in o * g..(o + 1) * g {
                let a = &mut att[i * t..(i + 1) * t];
                f += self.attend(&wz[i * d..(i + 1) * d], i, a);
            }
            loss += softplus(-T::of(dat.y[o * g]) * f * inv_g);
        }
        (
            (loss / T::of_usize(n / g)).as_f64(),
            att.iter().map(|a| a.as_f64()).collect(),
        )
    }

    /// Item `i` given `wz = W z_i`: the attention into `a` (`[T]`), and the
    /// output `f_i = Σ_t a_t u_t`.
    fn attend(&self, wz: &[T], i: usize, a: &mut [T]) -> T {
        let (t, d) = (self.data.t, self.data.d);
        let x = &self.x[i * t * d..(i + 1) * t * d];
        for (aj, xj) in a.iter_mut().zip(x.chunks_exact(d)) {
            *aj = dot(xj, wz);
        }
        softmax::row_in_place(a, |_| true);
        dot(a, &self.u[i * t..(i + 1) * t])
    }

    /// Loss of `w` on the data, with `∂L/∂W` written into `self.gw`.
    fn loss_and_grad(&mut self, w: &[T]) -> T {
        let mut work = std::mem::take(&mut self.work);
        let this = &*self;
        let dat = &*this.data;
        let (t, d, g) = (dat.t, dat.d, dat.group);
        let outs = dat.n / g;
        // Exactly 1 for the ⟨cls⟩ output, so its bits do not change.
        let inv_g = T::one() / T::of_usize(g);
        let (u, xs, zs) = (&this.u, &this.x, &this.z);
        // work[c] gets the groups chunk_range(outs, n_chunks, c): fixed by n alone.
        for_each_chunk(outs, &mut work, |_, groups, wk| {
            let items = groups.start * g..groups.end * g;
            let nc = items.len();
            let (z, wz, xa) = (
                &zs[items.start * d..items.end * d],
                &mut wk.wz[..nc * d],
                &mut wk.xa[..nc * d],
            );
            // wz [nc, d] = Z [nc, d] · Wᵀ
            matmul(wz, z, Op::N, w, Op::T, nc, d, d, false);
            wk.loss = T::zero();
            for o in 0..groups.len() {
                let first = o * g;
                let mut f = T::zero();
                for j in 0..g {
                    let (k, i) = (first + j, items.start + first + j);
                    let a = &mut wk.a[j * t..(j + 1) * t];
                    wk.f[j] = this.attend(&wz[k * d..(k + 1) * d], i, a);
                    f += wk.f[j];
                }
                let (y, f) = (T::of(dat.y[items.start + first]), f * inv_g);
                wk.loss += softplus(-y * f);
                // ∂ softplus(−y f)/∂f, shared by the group's g items as ∂/∂f_k = · / g
                let gk = -y / (T::one() + (y * f).exp()) * inv_g;
                for j in 0..g {
                    let (k, i) = (first + j, items.start + first + j);
                    let (a, ui) = (&wk.a[j * t..(j + 1) * t], &u[i * t..(i + 1) * t]);
                    // u_t − f_k = (u_t − u_m) − Σ_s a_s (u_s − u_m), m the top token
                    let (um, centred) = softmax::centred_inner(ui, a);
                    // xa_k [d] = Σ_t ∂L/∂f_k a_t (u_t − f_k) x_t
                    let row = &mut xa[k * d..(k + 1) * d];
                    row.iter_mut().for_each(|x| *x = T::zero());
                    let x = &xs[i * t * d..(i + 1) * t * d];
                    for ((&at, &ut), xt) in a.iter().zip(ui).zip(x.chunks_exact(d)) {
                        let c = gk * at * ((ut - um) - centred);
                        for (o, &x) in row.iter_mut().zip(xt) {
                            *o += c * x;
                        }
                    }
                }
            }
            // gw [d, d] = XAᵀ [d, nc] · Z [nc, d]
            matmul(&mut wk.gw, xa, Op::T, z, Op::N, d, nc, d, false);
        });
        self.work = work;
        self.gw.iter_mut().for_each(|x| *x = T::zero());
        reduce_ordered(&mut self.gw, &self.work, |wk| &wk.gw[..]);
        let inv = T::one() / T::of_usize(outs);
        self.gw.iter_mut().for_each(|x| *x *= inv);
        self.work.iter().map(|wk| wk.loss).sum::<T>() * inv
    }

    pub fn data(&self) -> &Arc<SvmData> {
        &self.data
    }
}

/// `log(1 + exp(x))`, stable.
fn softplus<T: Float>(x: T) -> T {
    x.max(T::zero()) + (-x.abs()).exp().ln_1p()
}

/// `Σ a_k b_k` in four interleaved partial sums (a sum LLVM can vectorise).
fn dot<T: Float>(a: &[T], b: &[T]) -> T {
    let mut s = [T::zero(); 4];
    let (ca, cb) = (a.chunks_exact(4), b.chunks_exact(4));
    let tail: T = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(&x, &y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for k in 0..4 {
            s[k] += x[k] * y[k];
        }
    }
    (s[0] + s[1]) + (s[2] + s[3]) + tail
}

impl<T: Float> Parameters<T> for SvmModel<T> {
    fn visit(&self, f: &mut dyn FnMut(&Param<T>)) {
        f(&self.w);
        f(&self.k);
        f(&self.q);
    }
    fn visit_mut(&mut self, f: &mut dyn FnMut(&mut Param<T>)) {
        f(&mut self.w);
        f(&mut self.k);
        f(&mut self.q);
    }
}

impl<T: Float> Trainable<T> for SvmModel<T> {
    fn train_step(&mut self, _step: u64) -> T {
        let mut w = std::mem::take(&mut self.w_buf);
        self.w_eff_into(&mut w);
        let mut loss = self.loss_and_grad(&w);
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
                        .for_each(|(a, &b)| *a += b);
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
                let lam = self.kq_reg;
                if lam > T::zero() {
                    // + λ(‖K‖² + ‖Q‖²): ∂ = 2λK, 2λQ
                    for (p, on) in [(&mut self.k, self.train[1]), (&mut self.q, self.train[2])] {
                        let (val, grad) = p.value_and_grad_mut();
                        loss += lam * val.iter().map(|&x| x * x).sum::<T>();
                        if on {
                            let two = lam + lam;
                            grad.iter_mut()
                                .zip(val.iter())
                                .for_each(|(g, &x)| *g += two * x);
                        }
                    }
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

    fn model(p: Param2, output: Output) -> SvmModel<f64> {
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
            ..ModelConfig::default()
        };
        SvmModel::new(&cfg, Arc::new(data), v, 7)
    }

    fn grads(m: &mut SvmModel<f64>) -> Vec<u64> {
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
            let mut m = SvmModel::<f64>::new(&cfg, Arc::new(data), v, 3);
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
                let loss = |m: &SvmModel<f64>| m.forward(&m.w_eff()).0;
                let grads = |m: &mut SvmModel<f64>| {
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
        let one = SvmModel::<f64>::new(
            &ModelConfig {
                param: Param2::W,
                m: 3,
                init: 0.5,
                output: Output::Cls,
                ..ModelConfig::default()
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

    /// Scales the parameters until every item's largest attention weight is 1 in
    /// f64 (returns the f64 model; `scale` is applied to W, or √scale to K and Q).
    fn saturated(p: Param2, output: Output) -> SvmModel<f64> {
        let mut m = model(p, output);
        let mut c = 1.0;
        while m
            .attention()
            .1
            .chunks(m.data.t)
            .any(|r| r.iter().all(|&a| a < 1.0))
        {
            let f = if p == Param2::W { 2.0 } else { 2f64.sqrt() };
            m.visit_mut(&mut |q| q.value_mut().iter_mut().for_each(|x| *x *= f));
            c *= 2.0;
            assert!(c < 1e6, "{p:?} {output:?}: no saturation");
        }
        m
    }

    /// Where the softmax has saturated in f64 (the largest weight of every item
    /// is exactly 1), the f64 gradient points where the double-double's does, for
    /// every parameter, both outputs and both parameterisations. The textbook
    /// `a_t (u_t − f)` fails this: its selected-token term is rounding noise.
    #[test]
    fn gradient_keeps_its_direction_at_saturation() {
        use mechlab_engine::precision::{assert_direction, MIN_COSINE};
        use mechlab_engine::F64x2;
        for p in [Param2::W, Param2::Kq] {
            for output in [Output::Cls, Output::Sequence] {
                let mut m = saturated(p, output);
                let mut hi = SvmModel::<F64x2>::new(
                    &ModelConfig {
                        param: p,
                        m: 3,
                        init: 0.5,
                        output,
                        ..ModelConfig::default()
                    },
                    m.data.clone(),
                    m.v.clone(),
                    7,
                );
                let mut vals = Vec::new();
                m.visit(&mut |q| vals.push(q.value().to_vec()));
                let mut i = 0;
                hi.visit_mut(&mut |q| {
                    for (x, &y) in q.value_mut().iter_mut().zip(&vals[i]) {
                        *x = F64x2::of(y);
                    }
                    i += 1;
                });
                m.zero_grad();
                m.train_step(0);
                hi.zero_grad();
                hi.train_step(0);
                let mut want = Vec::new();
                hi.visit(&mut |q| {
                    want.push(q.grad().iter().map(|g| g.as_f64()).collect::<Vec<_>>())
                });
                let mut k = 0;
                m.visit(&mut |q| {
                    if !q.grad().is_empty() {
                        let what = format!("{p:?} {output:?} {}", q.name());
                        assert_direction(&what, q.grad(), &want[k], MIN_COSINE);
                    }
                    k += 1;
                });
            }
        }
    }

    /// `model.kq_reg = λ` adds `λ(‖K‖² + ‖Q‖²)` to the loss, and its gradient
    /// matches finite differences of that loss.
    #[test]
    fn the_kq_regulariser_is_in_loss_and_gradient() {
        let (data, v) = generate(
            &DataConfig {
                n: 3,
                t: 4,
                d: 5,
                twins: 0,
            },
            7,
        );
        let cfg = ModelConfig {
            param: Param2::Kq,
            m: 3,
            init: 0.5,
            kq_reg: 0.05,
            ..ModelConfig::default()
        };
        let mut m = SvmModel::<f64>::new(&cfg, Arc::new(data), v, 7);
        let loss = |m: &SvmModel<f64>| {
            let sq = |p: &Param<f64>| p.value().iter().map(|x| x * x).sum::<f64>();
            m.forward(&m.w_eff()).0 + 0.05 * (sq(&m.k) + sq(&m.q))
        };
        let want = loss(&m);
        m.zero_grad();
        assert!((m.train_step(0) - want).abs() < 1e-14);
        let grads = |m: &mut SvmModel<f64>| {
            m.train_step(0);
        };
        for (name, r) in check_params(&mut m, loss, grads, DEFAULT_H) {
            r.assert_below(1e-6, &format!("kq_reg {name}"));
        }
    }
}
