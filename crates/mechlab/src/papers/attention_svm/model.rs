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
    mechlab_engine::parameters!(T; w, k, q);
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
#[path = "model_tests.rs"]
mod tests;
