//! One-layer softmax attention with trained embeddings (Wu, Shevchenko, Oymak,
//! Mondelli 2025): a ⟨cls⟩ query `p` attends over the token embeddings, and the
//! attended embedding is read out along `v`:
//!
//! `f(X) = Σ_i a_i u_i`,  `a = softmax(s)`,  `s_i = p·E_(x_i)`,  `u_i = v·E_(x_i)`,
//!
//! with padding masked out of the softmax and the logistic loss
//! `L = (1/n) Σ_k log(1 + exp(−y_k f(X_k)))`.
//!
//! Both scores and values are scalar projections of one embedding row, so the
//! forward needs only the two columns `E·p` and `E·v` (`[d_vocab, 2]`, one small
//! matmul) and a gather per position, and the backward is rank 2 per position:
//! with `g_k = ∂L/∂f_k = −y_k σ(−y_k f_k)/n`,
//!
//! `∂L/∂E_s = c_v[s] v + c_p[s] p`,  `∂L/∂v = Eᵀ c_v`,  `∂L/∂p = Eᵀ c_p`,
//!
//! where `c_v[s] = Σ_(k,i: x_ki = s) g_k a_ki` and `c_p[s] = Σ_(k,i: x_ki = s) g_k a_ki (u_ki − f_k)`
//! are scattered per vocabulary entry. A step costs `O(d_vocab·d_model + n·T)`.
//! Sequences are processed in fixed chunks of [`SEQ_CHUNK`] in parallel, each into
//! its own `[d_vocab, 2]` partial, summed in chunk order: results are bit-identical
//! whatever the number of threads.
//!
//! ```
//! use mechlab::papers::selection::data::SeqData;
//! use mechlab::papers::selection::model::{ModelConfig, SelectionModel};
//! use std::sync::Arc;
//! let data = Arc::new(SeqData { n: 1, n_ctx: 2, d_vocab: 2, ids: vec![0, 1], lens: vec![2], y: vec![1.0], signal: vec![] });
//! let cfg = ModelConfig { d_model: 2, ..ModelConfig::default() };
//! let mut m = SelectionModel::<f64>::new(&cfg, data, 0);
//! m.w_e.value_mut().copy_from_slice(&[1.0, 0.0, 0.0, 1.0]); // E = I
//! m.v.value_mut().copy_from_slice(&[1.0, -1.0]);
//! // p = 0: uniform attention, f = (1 − 1)/2 = 0, loss = log 2
//! let loss = mechlab::train::Trainable::train_step(&mut m, 0);
//! assert!((loss - 2f64.ln()).abs() < 1e-15);
//! ```

use crate::papers::selection::data::SeqData;
use crate::rng::{stream, Stream};
use crate::train::optim::trains;
use crate::train::Trainable;
use mechlab_engine::matmul::{matmul, Op};
use mechlab_engine::parallel;
use mechlab_engine::{param, Float, Param, Parameters};
use rand_distr::{Distribution, StandardNormal};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Sequences per parallel work unit: the engine's fixed [`parallel::CHUNK_ITEMS`],
/// so reductions do not depend on threads.
pub const SEQ_CHUNK: usize = parallel::CHUNK_ITEMS;
/// Embedding rows per parallel work unit in the `[d_vocab, d_model]` products.
pub const ROW_BLOCK: usize = 512;

/// The `[model]` section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
    pub d_model: usize,
    /// `"f64"` or `"f32"`.
    pub dtype: crate::experiment::Dtype,
    /// Expected norm of an embedding row at initialisation (entries `N(0, init_e²/d)`).
    pub init_e: f64,
    /// Norm of `v` (a random direction).
    pub v_norm: f64,
    /// Project the initial embeddings orthogonally to `v`, so that `f ≡ 0` at
    /// initialisation and the one-step formula holds exactly.
    pub e_orthogonal_to_v: bool,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            d_model: 64,
            dtype: crate::experiment::Dtype::F64,
            init_e: 1.0,
            v_norm: 1.0,
            e_orthogonal_to_v: true,
        }
    }
}

/// The activation cache of the last training forward (TransformerLens names).
#[derive(Clone, Debug, Default)]
pub struct SelectionActs<T> {
    /// `blocks.0.attn.hook_attn_scores`: `s = p·E_x`, `[batch, key_pos]` (one head, one query).
    pub hook_attn_scores: Vec<T>,
    /// `blocks.0.attn.hook_pattern`: softmax of the scores, 0 on padding, `[batch, key_pos]`.
    pub hook_pattern: Vec<T>,
    /// `blocks.0.attn.hook_v`: the scalar values `u = v·E_x`, `[batch, key_pos]`.
    pub hook_v: Vec<T>,
    /// The model output `f`, `[batch]`.
    pub logits: Vec<T>,
}

/// The model with its training data and every buffer a step needs.
pub struct SelectionModel<T: Float> {
    /// `embed.W_E`: `[d_vocab, d_model]`, group `embed`.
    pub w_e: Param<T>,
    /// `cls`: the ⟨cls⟩ query `p`, `[d_model]`, group `cls`.
    pub p: Param<T>,
    /// `unembed.v`: the read-out `v`, `[d_model]`, group `v`.
    pub v: Param<T>,
    pub acts: SelectionActs<T>,
    data: Arc<SeqData>,
    d_model: usize,
    d_vocab: usize,
    /// `[p v]`: `[d_model, 2]`.
    pv: Vec<T>,
    /// `[E·p  E·v]`: `[d_vocab, 2]`.
    ev: Vec<T>,
    /// Per-chunk scatter partials `[n_chunks, d_vocab, 2]`, then their sum `c = [c_v c_p]`.
    partial: Vec<T>,
    c: Vec<T>,
    /// Per-chunk loss sums.
    chunk_loss: Vec<T>,
    /// `[∂v ∂p]`: `[d_model, 2]`.
    dvp: Vec<T>,
    train: [bool; 3],
}

impl<T: Float> SelectionModel<T> {
    /// A model over `data` initialised from the seed's `Init` stream; `p = 0`.
    pub fn new(cfg: &ModelConfig, data: Arc<SeqData>, seed: u64) -> Self {
        let (d, v) = (cfg.d_model, data.d_vocab);
        let mut rng = stream(seed, Stream::Init);
        let mut gauss = |n: usize, sd: f64| -> Vec<f64> {
            (0..n)
                .map(|_| {
                    sd * <StandardNormal as Distribution<f64>>::sample(&StandardNormal, &mut rng)
                })
                .collect()
        };
        let mut vv = gauss(d, 1.0);
        let nv = vv.iter().map(|x| x * x).sum::<f64>().sqrt().max(1e-300);
        vv.iter_mut().for_each(|x| *x *= cfg.v_norm / nv);
        let mut e = gauss(v * d, cfg.init_e / (d as f64).sqrt());
        if cfg.e_orthogonal_to_v && cfg.v_norm > 0.0 {
            let vv2: f64 = vv.iter().map(|x| x * x).sum();
            for row in e.chunks_mut(d) {
                let c = row.iter().zip(&vv).map(|(a, b)| a * b).sum::<f64>() / vv2;
                row.iter_mut().zip(&vv).for_each(|(a, b)| *a -= c * b);
            }
        }
        let cast = |x: Vec<f64>| x.into_iter().map(T::of).collect::<Vec<T>>();
        let n_chunks = parallel::sized_chunks(data.n);
        let nt = data.n * data.n_ctx;
        SelectionModel {
            w_e: param("embed.W_E", "embed", &[v, d], cast(e)),
            p: param("cls", "cls", &[d], vec![T::zero(); d]),
            v: param("unembed.v", "v", &[d], cast(vv)),
            acts: SelectionActs {
                hook_attn_scores: vec![T::zero(); nt],
                hook_pattern: vec![T::zero(); nt],
                hook_v: vec![T::zero(); nt],
                logits: vec![T::zero(); data.n],
            },
            d_model: d,
            d_vocab: v,
            pv: vec![T::zero(); d * 2],
            ev: vec![T::zero(); v * 2],
            partial: vec![T::zero(); n_chunks * v * 2],
            c: vec![T::zero(); v * 2],
            chunk_loss: vec![T::zero(); n_chunks],
            dvp: vec![T::zero(); d * 2],
            train: [true; 3],
            data,
        }
    }

    pub fn data(&self) -> &Arc<SeqData> {
        &self.data
    }

    /// `[E·p  E·v]` into `ev` (`[d_vocab, 2]`), in fixed row blocks.
    fn project(&mut self) {
        let d = self.d_model;
        for j in 0..d {
            self.pv[2 * j] = self.p.value()[j];
            self.pv[2 * j + 1] = self.v.value()[j];
        }
        let (e, pv) = (self.w_e.value(), &self.pv);
        self.ev
            .par_chunks_mut(ROW_BLOCK * 2)
            .zip(e.par_chunks(ROW_BLOCK * d))
            .for_each(|(out, rows)| {
                // out: [rows, 2] = rows: [rows, d] · pv: [d, 2]
                matmul(out, rows, Op::N, pv, Op::N, rows.len() / d, d, 2, false)
            });
    }

    /// Scores, values and logits of the current parameters on `data` (not
    /// necessarily the training set): `(pattern [n, n_ctx], logits [n])`.
    pub fn attend(&mut self, data: &SeqData) -> (Vec<T>, Vec<T>) {
        self.project();
        let t = data.n_ctx;
        let mut pattern = vec![T::zero(); data.n * t];
        let mut scores = vec![T::zero(); data.n * t];
        let mut u = vec![T::zero(); data.n * t];
        let mut logits = vec![T::zero(); data.n];
        let ev = &self.ev;
        pattern
            .par_chunks_mut(t)
            .zip(scores.par_chunks_mut(t))
            .zip(u.par_chunks_mut(t))
            .zip(logits.par_iter_mut())
            .enumerate()
            .for_each(|(k, (((a, s), u), f))| {
                *f = forward_seq(ev, data.tokens(k), s, a, u).0;
            });
        (pattern, logits)
    }

    /// Mean logistic loss and accuracy (sign of `f`; `f = 0` counts as wrong) on `data`.
    pub fn evaluate(&mut self, data: &SeqData) -> (f64, f64) {
        let (_, logits) = self.attend(data);
        let mut loss = 0.0;
        let mut right = 0usize;
        for (f, y) in logits.iter().zip(&data.y) {
            let m = y * f.as_f64();
            loss += softplus(-m);
            right += (m > 0.0) as usize;
        }
        let n = data.n.max(1) as f64;
        (loss / n, right as f64 / n)
    }
}

/// `log(1 + e^x)` without overflow.
pub fn softplus(x: f64) -> f64 {
    if x > 0.0 {
        x + (-x).exp().ln_1p()
    } else {
        x.exp().ln_1p()
    }
}

/// One sequence's forward: writes scores `s`, pattern `a`, values `u` (first
/// `len` entries; padding entries are set to 0) and returns `(f, u_0, δ)` with
/// `f = u_0 + δ`, `u_0` the value of the highest-scoring token and
/// `δ = Σ_i a_i (u_i − u_0)`. Once attention has converged on one token, `f − u_i`
/// computed as `(u_0 − u_i) + δ` keeps its tiny size accurately, where `f − u_i`
/// itself would be rounding noise; gradient flow on `p` lives on that size.
fn forward_seq<T: Float>(
    ev: &[T],
    toks: &[u32],
    s: &mut [T],
    a: &mut [T],
    u: &mut [T],
) -> (T, T, T) {
    // toks: [len], s/a/u: [n_ctx]
    let len = toks.len();
    let mut i0 = 0;
    for (i, &x) in toks.iter().enumerate() {
        s[i] = ev[2 * x as usize];
        u[i] = ev[2 * x as usize + 1];
        if s[i] > s[i0] {
            i0 = i;
        }
    }
    let (m, u0) = (s[i0], u[i0]);
    let mut z = T::zero();
    for i in 0..len {
        a[i] = (s[i] - m).exp();
        z += a[i];
    }
    let mut delta = T::zero();
    for i in 0..len {
        a[i] /= z;
        delta += a[i] * (u[i] - u0);
    }
    for i in len..s.len() {
        s[i] = T::zero();
        a[i] = T::zero();
        u[i] = T::zero();
    }
    (u0 + delta, u0, delta)
}

impl<T: Float> Parameters<T> for SelectionModel<T> {
    mechlab_engine::parameters!(T; w_e, p, v);
}

impl<T: Float> Trainable<T> for SelectionModel<T> {
    fn train_step(&mut self, _step: u64) -> T {
        let (t, dv, d) = (self.data.n_ctx, self.d_vocab, self.d_model);
        let n = self.data.n;
        self.project();
        let inv_n = T::one() / T::of_usize(n.max(1));
        // --- forward + per-chunk scatter of the rank-2 coefficients ---
        let data = &*self.data;
        let ev = &self.ev;
        let acts = &mut self.acts;
        self.partial
            .par_chunks_mut(dv * 2)
            .zip(self.chunk_loss.par_iter_mut())
            .zip(acts.hook_attn_scores.par_chunks_mut(SEQ_CHUNK * t))
            .zip(acts.hook_pattern.par_chunks_mut(SEQ_CHUNK * t))
            .zip(acts.hook_v.par_chunks_mut(SEQ_CHUNK * t))
            .zip(acts.logits.par_chunks_mut(SEQ_CHUNK))
            .enumerate()
            .for_each(|(ci, (((((part, loss), s), a), u), f))| {
                part.iter_mut().for_each(|x| *x = T::zero());
                let mut lsum = T::zero();
                for (j, fk) in f.iter_mut().enumerate() {
                    let k = ci * SEQ_CHUNK + j;
                    let toks = data.tokens(k);
                    let r = j * t..(j + 1) * t;
                    let (s, a, u) = (&mut s[r.clone()], &mut a[r.clone()], &mut u[r]);
                    let (fv, u0, delta) = forward_seq(ev, toks, s, a, u);
                    *fk = fv;
                    let y = T::of(data.y[k]);
                    let m = -y * *fk;
                    // loss = softplus(m); g = ∂loss/∂f / n = −y σ(m) / n
                    lsum += T::of(softplus(m.as_f64()));
                    let sig = T::one() / (T::one() + (-m).exp());
                    let g = -y * sig * inv_n;
                    for (i, &x) in toks.iter().enumerate() {
                        let ga = g * a[i];
                        part[2 * x as usize] += ga;
                        part[2 * x as usize + 1] += ga * ((u[i] - u0) - delta);
                    }
                }
                *loss = lsum;
            });
        // --- chunk-order reduction into c = [c_v c_p], in fixed vocabulary blocks ---
        let partial = &self.partial;
        self.c
            .par_chunks_mut(ROW_BLOCK * 2)
            .enumerate()
            .for_each(|(bi, c)| {
                let (off, len) = (bi * ROW_BLOCK * 2, c.len());
                c.iter_mut().for_each(|x| *x = T::zero());
                for part in partial.chunks(dv * 2) {
                    for (ci, &pi) in c.iter_mut().zip(&part[off..off + len]) {
                        *ci += pi;
                    }
                }
            });
        // --- parameter gradients ---
        let [tr_e, tr_p, tr_v] = self.train;
        if tr_e {
            // ∂E[s, :] = c_v[s] v + c_p[s] p  (rank 2)
            let (p, v, c) = (self.p.value(), self.v.value(), &self.c);
            self.w_e
                .grad_mut()
                .par_chunks_mut(ROW_BLOCK * d)
                .zip(c.par_chunks(ROW_BLOCK * 2))
                .for_each(|(g, c)| {
                    for (row, cs) in g.chunks_mut(d).zip(c.chunks(2)) {
                        for j in 0..d {
                            row[j] += cs[0] * v[j] + cs[1] * p[j];
                        }
                    }
                });
        }
        if tr_p || tr_v {
            // [∂v ∂p]: [d, 2] = Eᵀ: [d, d_vocab] · c: [d_vocab, 2]
            matmul(
                &mut self.dvp,
                self.w_e.value(),
                Op::T,
                &self.c,
                Op::N,
                d,
                dv,
                2,
                false,
            );
            for j in 0..d {
                if tr_v {
                    self.v.grad_mut()[j] += self.dvp[2 * j];
                }
                if tr_p {
                    self.p.grad_mut()[j] += self.dvp[2 * j + 1];
                }
            }
        }
        self.chunk_loss.iter().fold(T::zero(), |a, &b| a + b) * inv_n
    }

    fn set_trainable(&mut self, groups: &[String]) {
        self.train = [
            trains(groups, "embed"),
            trains(groups, "cls"),
            trains(groups, "v"),
        ];
    }
}
