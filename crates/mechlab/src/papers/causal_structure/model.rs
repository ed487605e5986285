//! The "disentangled" two-layer transformer of Nichani, Damian & Lee (their
//! `catformer.py` `CatFormer`): one-hot tokens and positions **concatenated**,
//! attention-only layers whose heads' outputs are **concatenated** to the
//! residual stream, and a read-out of the last position:
//!
//! `h⁰_i = [e(x_i); e(i)]` (`d₀ = S + T`); layer `ℓ`, head `h`:
//! `s_ij = h_iᵀ A h_j` (no scaling), causal softmax over `j ≤ i` (the diagonal
//! included), `o_i = Σ_j a_ij h_j`, `hˡ_i = [hˡ⁻¹_i; o¹_i; …; o^H_i]`
//! (`d_ℓ = d_{ℓ−1}(1 + H_ℓ)`); `f = softmax(Wᵀ h²_{T−1})`; loss
//! `−Σ_s y_s log f_s` against the soft label `y`. Every parameter starts at 0.
//!
//! Written by hand because the model is the paper's object and tiny (`d₂ =
//! 120` at `S = 10`, `T = 20`), and because its inputs are one-hot: layer 1's
//! scores are four table look-ups, `A[x_i, x_j] + A[x_i, S+j] + A[S+i, x_j] +
//! A[S+i, S+j]`, and its gradient four scatters. Only the query's row of layer
//! 2 reaches the output, so only that row is computed (the rest of the
//! network's output is never read, as in the authors' loss). The dense
//! reference, every position of both layers, is [`super::hooked`]; a test
//! compares the two, and the gradients against finite differences.
//!
//! Sequences run in fixed chunks of [`CHUNK`] over `rayon`, each into its own
//! workspace (a training chunk also draws its sequences from its own stream,
//! [`super::data::chunk_stream`]), reduced in chunk order: bit-identical for
//! any thread count, and nothing is allocated in a step.

use super::data::{chunk_stream, Sampler, Seqs, Task};
use crate::train::Trainable;
use mechlab_engine::layers::softmax;
use mechlab_engine::parallel::{for_each_chunk, reduce_ordered};
use mechlab_engine::{param, Param, Parameters};
use serde::{Deserialize, Serialize};

/// Sequences per chunk of work (fixes the summation order).
pub const CHUNK: usize = 64;

/// The `[model]` section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
    /// Heads of layer 1 and layer 2 (theirs `[1, 1]`).
    pub heads: [usize; 2],
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig { heads: [1, 1] }
    }
}

/// Sizes.
#[derive(Clone, Copy, Debug)]
pub struct Dims {
    pub s: usize,
    pub t: usize,
    pub h1: usize,
    pub h2: usize,
    /// Widths of the residual stream after 0, 1, 2 layers.
    pub d0: usize,
    pub d1: usize,
    pub d2: usize,
}

impl Dims {
    pub fn new(task: &Task, heads: [usize; 2]) -> Dims {
        let (s, t) = (task.vocab, task.seq_len);
        let d0 = s + t;
        let d1 = d0 * (1 + heads[0]);
        Dims {
            s,
            t,
            h1: heads[0],
            h2: heads[1],
            d0,
            d1,
            d2: d1 * (1 + heads[1]),
        }
    }
}

/// One chunk's activations (the cache of the backward) and gradient sums.
pub struct Work {
    /// The chunk's sequences when it draws them itself (training).
    seqs: Seqs,
    sampler: Sampler,
    /// Layer 1: `h¹` `[T, d₁]`, attention `[H₁, T, T]` (0 above the diagonal).
    pub h1: Vec<f64>,
    pub a1: Vec<f64>,
    /// Layer 2 at the query: `u_g = A_gᵀ h¹_q` `[H₂, d₁]`, attention `[H₂, T]`.
    u: Vec<f64>,
    pub a2: Vec<f64>,
    /// `h²_q` `[d₂]`, logits and then probabilities `[S]`.
    h2: Vec<f64>,
    pub f: Vec<f64>,
    /// Backward scratch: `∂/∂logits` `[S]`, `∂h²_q` `[d₂]`, `∂h¹` `[T, d₁]`,
    /// `Σ_j ∂s_j h¹_j` `[d₁]`, a row's `∂a` `[T]`.
    dlog: Vec<f64>,
    dh2: Vec<f64>,
    dh1: Vec<f64>,
    kbar: Vec<f64>,
    da: Vec<f64>,
    /// The chunk's gradient sums and loss.
    g1: Vec<f64>,
    g2: Vec<f64>,
    gw: Vec<f64>,
    loss: f64,
}

impl Work {
    pub fn new(task: &Task, d: &Dims) -> Work {
        Work {
            seqs: Seqs::zeros(task, CHUNK),
            sampler: Sampler::new(task),
            h1: vec![0.0; d.t * d.d1],
            a1: vec![0.0; d.h1 * d.t * d.t],
            u: vec![0.0; d.h2 * d.d1],
            a2: vec![0.0; d.h2 * d.t],
            h2: vec![0.0; d.d2],
            f: vec![0.0; d.s],
            dlog: vec![0.0; d.s],
            dh2: vec![0.0; d.d2],
            dh1: vec![0.0; d.t * d.d1],
            kbar: vec![0.0; d.d1],
            da: vec![0.0; d.t],
            g1: vec![0.0; d.h1 * d.d0 * d.d0],
            g2: vec![0.0; d.h2 * d.d1 * d.d1],
            gw: vec![0.0; d.d2 * d.s],
            loss: 0.0,
        }
    }
}

/// The model.
pub struct CatFormer {
    /// `blocks.0.attn.A` `[H₁, d₀, d₀]`.
    pub a1: Param<f64>,
    /// `blocks.1.attn.A` `[H₂, d₁, d₁]`.
    pub a2: Param<f64>,
    /// `unembed.W_U` `[d₂, S]`.
    pub w: Param<f64>,
    pub dims: Dims,
    task: Task,
    seed: u64,
    batch: usize,
    work: Vec<Work>,
}

impl Parameters<f64> for CatFormer {
    mechlab_engine::parameters!(f64; a1, a2, w);
}

impl CatFormer {
    /// Their init: every parameter zero (the output is uniform).
    pub fn new(cfg: &ModelConfig, task: Task, batch: usize, seed: u64) -> CatFormer {
        let d = Dims::new(&task, cfg.heads);
        let work = (0..batch.div_ceil(CHUNK))
            .map(|_| Work::new(&task, &d))
            .collect();
        CatFormer {
            a1: param(
                "blocks.0.attn.A",
                "a1",
                &[d.h1, d.d0, d.d0],
                vec![0.0; d.h1 * d.d0 * d.d0],
            ),
            a2: param(
                "blocks.1.attn.A",
                "a2",
                &[d.h2, d.d1, d.d1],
                vec![0.0; d.h2 * d.d1 * d.d1],
            ),
            w: param("unembed.W_U", "w", &[d.d2, d.s], vec![0.0; d.d2 * d.s]),
            dims: d,
            task,
            seed,
            batch,
            work,
        }
    }

    pub fn task(&self) -> &Task {
        &self.task
    }

    /// The theory's start (our reading, docs/causal-structure.md): `A1 = 0`;
    /// `A2`'s first head `β` on the block (query's token) × (key's layer-1
    /// output token), 0 elsewhere; `W` the identity from layer 2's output
    /// token to the logits, 0 elsewhere.
    pub fn set_theory_start(&mut self, beta: f64) {
        let d = self.dims;
        self.a1.value_mut().iter_mut().for_each(|v| *v = 0.0);
        let a2 = self.a2.value_mut();
        a2.iter_mut().for_each(|v| *v = 0.0);
        for s in 0..d.s {
            a2[s * d.d1 + d.d0 + s] = beta;
        }
        let w = self.w.value_mut();
        w.iter_mut().for_each(|v| *v = 0.0);
        for s in 0..d.s {
            w[(d.d1 + s) * d.s + s] = 1.0;
        }
    }

    /// Forward of one sequence `x` `[T]` into `wk`; returns the loss against `y`.
    pub fn forward_seq(&self, x: &[u8], y: &[f64], wk: &mut Work) -> f64 {
        let d = self.dims;
        let (s, t, d0, d1) = (d.s, d.t, d.d0, d.d1);
        let a1 = self.a1.value();
        // x: [T] -> h1: [T, d1], a1: [H1, T, T]
        wk.h1.iter_mut().for_each(|v| *v = 0.0);
        for i in 0..t {
            let row = &mut wk.h1[i * d1..(i + 1) * d1];
            row[x[i] as usize] = 1.0;
            row[s + i] = 1.0;
        }
        for h in 0..d.h1 {
            let a = &a1[h * d0 * d0..(h + 1) * d0 * d0];
            for i in 0..t {
                let (rt, rp) = (x[i] as usize * d0, (s + i) * d0);
                let p = &mut wk.a1[(h * t + i) * t..(h * t + i + 1) * t];
                for j in 0..=i {
                    let (xt, xp) = (x[j] as usize, s + j);
                    p[j] = a[rt + xt] + a[rt + xp] + a[rp + xt] + a[rp + xp];
                }
                p[i + 1..].iter_mut().for_each(|v| *v = 0.0);
                softmax::row_in_place(&mut p[..=i], |_| true);
                let out = &mut wk.h1[i * d1 + d0 * (1 + h)..i * d1 + d0 * (2 + h)];
                for (&xj, &pj) in x[..=i].iter().zip(&p[..=i]) {
                    out[xj as usize] += pj;
                }
                out[s..=s + i].copy_from_slice(&p[..=i]);
            }
        }
        // layer 2 at the query q = T − 1: u_g = A_gᵀ h1_q, s_j = u_g·h1_j
        let a2 = self.a2.value();
        let q = t - 1;
        let (hq, _) = wk.h1[q * d1..].split_at(d1);
        wk.h2[..d1].copy_from_slice(hq);
        for g in 0..d.h2 {
            let a = &a2[g * d1 * d1..(g + 1) * d1 * d1];
            let u = &mut wk.u[g * d1..(g + 1) * d1];
            u.iter_mut().for_each(|v| *v = 0.0);
            for (k, &hk) in wk.h1[q * d1..(q + 1) * d1].iter().enumerate() {
                if hk != 0.0 {
                    for (ub, &ab) in u.iter_mut().zip(&a[k * d1..(k + 1) * d1]) {
                        *ub += hk * ab;
                    }
                }
            }
            let p = &mut wk.a2[g * t..(g + 1) * t];
            for (j, pj) in p.iter_mut().enumerate() {
                *pj = dot(u, &wk.h1[j * d1..(j + 1) * d1]);
            }
            softmax::row_in_place(p, |_| true);
            let o = &mut wk.h2[d1 * (1 + g)..d1 * (2 + g)];
            o.iter_mut().for_each(|v| *v = 0.0);
            for (j, &pj) in p.iter().enumerate() {
                for (ob, &hb) in o.iter_mut().zip(&wk.h1[j * d1..(j + 1) * d1]) {
                    *ob += pj * hb;
                }
            }
        }
        // logits [S] = h2ᵀ W, then f = softmax; loss = Σ y (lse − logit)
        let w = self.w.value();
        wk.f.iter_mut().for_each(|v| *v = 0.0);
        for (k, &hk) in wk.h2.iter().enumerate() {
            if hk != 0.0 {
                for (fs, &ws) in wk.f.iter_mut().zip(&w[k * s..(k + 1) * s]) {
                    *fs += hk * ws;
                }
            }
        }
        let mx = wk.f.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = mx + wk.f.iter().map(|z| (z - mx).exp()).sum::<f64>().ln();
        let loss = y.iter().zip(&wk.f).map(|(&ys, &z)| ys * (lse - z)).sum();
        wk.f.iter_mut().for_each(|z| *z = (*z - lse).exp());
        loss
    }

    /// Backward of the sequence [`CatFormer::forward_seq`] last ran, its loss
    /// weighted by `scale`; adds into `wk`'s gradient sums.
    fn backward_seq(&self, x: &[u8], y: &[f64], scale: f64, wk: &mut Work) {
        let d = self.dims;
        let (s, t, d0, d1) = (d.s, d.t, d.d0, d.d1);
        let q = t - 1;
        // ∂logits = (Σy) f − y
        let ysum: f64 = y.iter().sum();
        for ((g, &fs), &ys) in wk.dlog.iter_mut().zip(&wk.f).zip(y) {
            *g = scale * (ysum * fs - ys);
        }
        // Only the layer-1 outputs of ∂h¹ reach a parameter (h⁰ is the input), so
        // the parts of ∂h², ∂h¹ over h⁰'s d₀ entries are never formed.
        let w = self.w.value();
        for (k, &hk) in wk.h2.iter().enumerate() {
            if k >= d0 {
                wk.dh2[k] = dot(&w[k * s..(k + 1) * s], &wk.dlog);
            }
            if hk != 0.0 {
                for (gw, &dl) in wk.gw[k * s..(k + 1) * s].iter_mut().zip(&wk.dlog) {
                    *gw += hk * dl;
                }
            }
        }
        wk.dh1.iter_mut().for_each(|v| *v = 0.0);
        for (o, &v) in wk.dh1[q * d1 + d0..(q + 1) * d1]
            .iter_mut()
            .zip(&wk.dh2[d0..d1])
        {
            *o += v;
        }
        let a2 = self.a2.value();
        for g in 0..d.h2 {
            let a = &a2[g * d1 * d1..(g + 1) * d1 * d1];
            let do2 = &wk.dh2[d1 * (1 + g)..d1 * (2 + g)];
            let p = &wk.a2[g * t..(g + 1) * t];
            let u = &wk.u[g * d1..(g + 1) * d1];
            for (j, &pj) in p.iter().enumerate() {
                let hj = &wk.h1[j * d1..(j + 1) * d1];
                wk.da[j] = dot(do2, hj);
                for (o, &v) in wk.dh1[j * d1 + d0..(j + 1) * d1].iter_mut().zip(&do2[d0..]) {
                    *o += pj * v;
                }
            }
            softmax::backward_row_in_place(&mut wk.da, p);
            wk.kbar.iter_mut().for_each(|v| *v = 0.0);
            for j in 0..t {
                let ds = wk.da[j];
                for (kb, &hb) in wk.kbar.iter_mut().zip(&wk.h1[j * d1..(j + 1) * d1]) {
                    *kb += ds * hb;
                }
                for (o, &ub) in wk.dh1[j * d1 + d0..(j + 1) * d1].iter_mut().zip(&u[d0..]) {
                    *o += ds * ub;
                }
            }
            // ∂A_g += h1_q ⊗ kbar; ∂h1_q += A_g kbar
            let g2 = &mut wk.g2[g * d1 * d1..(g + 1) * d1 * d1];
            for k in 0..d1 {
                let hk = wk.h1[q * d1 + k];
                if hk != 0.0 {
                    for (o, &kb) in g2[k * d1..(k + 1) * d1].iter_mut().zip(&wk.kbar) {
                        *o += hk * kb;
                    }
                }
                if k >= d0 {
                    wk.dh1[q * d1 + k] += dot(&a[k * d1..(k + 1) * d1], &wk.kbar);
                }
            }
        }
        // layer 1: ∂a_ij = ∂o_i·h⁰_j = ∂tok_i[x_j] + ∂pos_i[j]; four scatters per score
        for h in 0..d.h1 {
            let g1 = &mut wk.g1[h * d0 * d0..(h + 1) * d0 * d0];
            for i in 0..t {
                let dout = &wk.dh1[i * d1 + d0 * (1 + h)..i * d1 + d0 * (2 + h)];
                let da = &mut wk.da[..=i];
                for (j, v) in da.iter_mut().enumerate() {
                    *v = dout[x[j] as usize] + dout[s + j];
                }
                softmax::backward_row_in_place(
                    da,
                    &wk.a1[(h * t + i) * t..(h * t + i) * t + i + 1],
                );
                let (rt, rp) = (x[i] as usize * d0, (s + i) * d0);
                for (j, &ds) in da.iter().enumerate() {
                    let (xt, xp) = (x[j] as usize, s + j);
                    g1[rt + xt] += ds;
                    g1[rt + xp] += ds;
                    g1[rp + xt] += ds;
                    g1[rp + xp] += ds;
                }
            }
        }
    }

    /// The mean loss of `seqs` with its gradient added into the parameters'.
    pub fn loss_and_grad(&mut self, seqs: &Seqs) -> f64 {
        self.run_chunks(Some(seqs), 0, true)
    }

    /// The mean loss of `seqs` (no gradient).
    pub fn loss(&mut self, seqs: &Seqs) -> f64 {
        self.run_chunks(Some(seqs), 0, false)
    }

    /// Runs every chunk of `seqs` (or, with `None`, of update `step + 1`'s
    /// batch, drawn chunk by chunk) and reduces in chunk order.
    fn run_chunks(&mut self, seqs: Option<&Seqs>, step: u64, grad: bool) -> f64 {
        let n = seqs.map_or(self.batch, |s| s.n);
        let chunks = n.div_ceil(CHUNK);
        let mut work = std::mem::take(&mut self.work);
        if work.len() < chunks {
            work.extend((work.len()..chunks).map(|_| Work::new(&self.task, &self.dims)));
        }
        let this = &*self;
        let (t, s) = (this.dims.t, this.dims.s);
        let scale = 1.0 / n as f64;
        for_each_chunk(n, &mut work[..chunks], |c, items, wk| {
            wk.loss = 0.0;
            if grad {
                for g in [&mut wk.g1, &mut wk.g2, &mut wk.gw] {
                    g.iter_mut().for_each(|v| *v = 0.0);
                }
            }
            let mut own = std::mem::take(&mut wk.seqs);
            let (src, base) = match seqs {
                Some(sq) => (sq, items.start),
                None => {
                    let mut rng = chunk_stream(this.seed, step, c);
                    own.fill(&this.task, &mut wk.sampler, &mut rng, 0..items.len());
                    (&own, 0)
                }
            };
            for b in base..base + items.len() {
                let (x, y) = (&src.x[b * t..(b + 1) * t], &src.y[b * s..(b + 1) * s]);
                wk.loss += this.forward_seq(x, y, wk);
                if grad {
                    this.backward_seq(x, y, scale, wk);
                }
            }
            wk.seqs = own;
        });
        if grad {
            reduce_ordered(self.a1.grad_mut(), &work[..chunks], |w| &w.g1);
            reduce_ordered(self.a2.grad_mut(), &work[..chunks], |w| &w.g2);
            reduce_ordered(self.w.grad_mut(), &work[..chunks], |w| &w.gw);
        }
        let loss = work[..chunks].iter().map(|w| w.loss).sum::<f64>() * scale;
        self.work = work;
        loss
    }

    /// A workspace for one-sequence analysis ([`CatFormer::forward_seq`]).
    pub fn workspace(&self) -> Work {
        Work::new(&self.task, &self.dims)
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

impl Trainable<f64> for CatFormer {
    fn train_step(&mut self, step: u64) -> f64 {
        self.run_chunks(None, step, true)
    }
}
