//! Linear self-attention (LSA), `L` layers, in the form of Ahn et al. (2023):
//!
//! `Z_{l+1} = Z_l + (1/m) P_l Z_l M Z_lᵀ Q_l Z_l`,  prediction `ŷ = −[Z_L]_{d+1, m+1}`,
//!
//! with `Z` `[D, m + 1]` one token per column (`D = d + 1`), `M` the mask that
//! keeps the `m` context columns as keys and values (the query is read, never
//! read from), and `P_l`, `Q_l` `[D, D]` (von Oswald et al.'s `P W_V` and
//! `W_Kᵀ W_Q` merged; Zhang, Frei, Bartlett's `W^{PV}`, `W^{KQ}` with the sign
//! of the read-out flipped). Here tokens are rows, `E = Zᵀ` `[m + 1, D]`:
//!
//! `A = Σ_{i≤m} z_i z_iᵀ` `[D, D]`,  `C = (1/m) P A Q`,  `E' = E + E Cᵀ` (`z_j' = z_j + C z_j`).
//!
//! Backward, with `G = ∂L/∂E'`: `∂C = Gᵀ E`, `∂P = (1/m) ∂C Qᵀ A`, `∂Q = (1/m) A Pᵀ ∂C`,
//! `∂A = (1/m) Pᵀ ∂C Qᵀ`, `∂L/∂E = G + G C`, plus `E_ctx (∂A + ∂Aᵀ)` on the context rows.
//!
//! Because the query is masked out of `A`, its row moves linearly,
//! `z_q ← (I + C_l) z_q`, so `ŷ` is linear in `x_q` and its sensitivity
//! `∂ŷ/∂x_q` (von Oswald et al.'s comparison with GD) is exact: [`Lsa::sensitivity`].
//!
//! Written by hand because the model is the papers' object (a few `[D, D]`
//! products per prompt, `D ≤ 65`): prompts run in fixed chunks of
//! [`CHUNK_ITEMS`](mechlab_engine::parallel::CHUNK_ITEMS) over `rayon`, each
//! into its own workspace, reduced in chunk order (bit-identical for any thread
//! count), and nothing is allocated in a step.

use super::data::Task;
use super::lanes::{self, LANES};
use super::model_config::initial;
pub use super::model_config::{Attention, Init, ModelConfig, Param2};
use super::products::{gram, mm, transpose};
use super::softmax::{self, Shape, SoftWork};
use super::steps;
use crate::train::Trainable;
use mechlab_engine::parallel::{for_each_chunk, reduce_ordered, sized_chunks};
use mechlab_engine::{param, Param, Parameters};

/// One layer's parameters.
pub struct Layer {
    /// `blocks.l.attn.W_PV` `[D, D]`: `P`, what the attention writes where.
    pub p: Param<f64>,
    /// `blocks.l.attn.W_KQ` `[D, D]`: `Q`, the key-query bilinear form.
    pub q: Param<f64>,
}

impl Parameters<f64> for Layer {
    mechlab_engine::parameters!(f64; p, q);
}

/// One chunk's scratch and gradient sums.
pub(super) struct Work {
    /// `E_0 … E_L` of one prompt, `[L + 1, m + 1, D]`.
    pub(super) e: Vec<f64>,
    /// `A_l` and `C_l` of one prompt, `[L, D, D]` each.
    pub(super) a: Vec<f64>,
    pub(super) c: Vec<f64>,
    /// `∂L/∂E` of the current layer and the one below, `[m + 1, D]`.
    pub(super) g: Vec<f64>,
    pub(super) g2: Vec<f64>,
    /// `∂C`, `∂A`, and a `[D, D]` product's scratch.
    pub(super) dc: Vec<f64>,
    pub(super) da: Vec<f64>,
    pub(super) t: Vec<f64>,
    /// `P_lᵀ`, `Q_lᵀ`, `[L, D, D]` each ([`Work::load`]).
    pub(super) pt: Vec<f64>,
    pub(super) qt: Vec<f64>,
    /// The chunk's `∂P_l`, `∂Q_l`, `[L, D, D]` each, and summed loss.
    pub(super) gp: Vec<f64>,
    pub(super) gq: Vec<f64>,
    pub(super) loss: f64,
    /// [`super::lanes`]' scratch.
    pub(super) lanes: Vec<[f64; LANES]>,
}

impl Work {
    fn new(layers: usize, m: usize, dd: usize) -> Work {
        let sq = dd * dd;
        Work {
            e: vec![0.0; (layers + 1) * (m + 1) * dd],
            a: vec![0.0; layers * sq],
            c: vec![0.0; layers * sq],
            g: vec![0.0; (m + 1) * dd],
            g2: vec![0.0; (m + 1) * dd],
            dc: vec![0.0; sq],
            da: vec![0.0; sq],
            t: vec![0.0; sq],
            pt: vec![0.0; layers * sq],
            qt: vec![0.0; layers * sq],
            gp: vec![0.0; layers * sq],
            gq: vec![0.0; layers * sq],
            loss: 0.0,
            lanes: lanes::scratch(m, dd),
        }
    }
}

impl Work {
    /// Takes the layers' transposes (once per chunk of prompts).
    fn load(&mut self, blocks: &[Layer], dd: usize) {
        let sq = dd * dd;
        for (l, b) in blocks.iter().enumerate() {
            transpose(&mut self.pt[l * sq..(l + 1) * sq], b.p.value(), dd);
            transpose(&mut self.qt[l * sq..(l + 1) * sq], b.q.value(), dd);
        }
    }
}

/// How [`Lsa::loss_and_grad`] computes a prompt's gradient; each is tested
/// against the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrainPath {
    /// `steps.rs` where the layers are in the `P = 0` form, else `RankOne`,
    /// one layer's prompts eight at a time (`lanes.rs`); the same bits as
    /// `RankOne`.
    Fastest,
    /// Every layer in full but the last, in its rank-one form (`Lsa::train_prompt`).
    RankOne,
    /// Every layer's full forward and backward (the reference).
    Full,
}

/// The model, and its training batch.
pub struct Lsa {
    pub blocks: Vec<Layer>,
    pub dd: usize,
    /// Only the `d × d` blocks train ([`Param2::Blocks`], [`Param2::Steps`]).
    x_blocks_only: bool,
    /// `P` is held ([`Param2::Steps`]).
    p_held: bool,
    /// Two numbers per layer ([`Param2::Gdpp`]).
    gdpp: bool,
    /// How a training prompt's gradient is computed ([`TrainPath`]).
    pub path: TrainPath,
    /// Softmax attention ([`super::softmax`]) with this many heads; `P`, `Q` are
    /// then `[H, D, D]`. `None`: linear attention.
    softmax_heads: Option<usize>,
    soft: Vec<SoftWork>,
    task: Task,
    seed: u64,
    /// The training batch, `[batch, n + 1, D]` and `[batch]`.
    z: Vec<f64>,
    y: Vec<f64>,
    work: Vec<Work>,
}

impl Parameters<f64> for Lsa {
    mechlab_engine::parameters!(f64; blocks);
}

impl Lsa {
    pub fn new(cfg: &ModelConfig, task: Task, batch: usize, seed: u64) -> Lsa {
        let (d, dd, n) = (task.d, task.d + 1, task.n);
        let blocks = initial(cfg, d, seed)
            .into_iter()
            .enumerate()
            .map(|(l, (p, q))| {
                let shape = match cfg.attention {
                    Attention::Linear => vec![dd, dd],
                    Attention::Softmax => vec![cfg.heads, dd, dd],
                };
                Layer {
                    p: param(&format!("blocks.{l}.attn.W_PV"), "pv", &shape, p),
                    q: param(&format!("blocks.{l}.attn.W_KQ"), "kq", &shape, q),
                }
            })
            .collect();
        let chunks = sized_chunks(batch);
        let softmax_heads = (cfg.attention == Attention::Softmax).then_some(cfg.heads);
        Lsa {
            blocks,
            dd,
            x_blocks_only: matches!(cfg.param, Param2::Blocks | Param2::Steps),
            p_held: cfg.param == Param2::Steps,
            gdpp: cfg.param == Param2::Gdpp,
            path: TrainPath::Fastest,
            softmax_heads,
            // one of the two workspaces, sized for the training batch (nothing
            // is allocated in a step)
            soft: match softmax_heads {
                Some(heads) => (0..chunks)
                    .map(|_| {
                        SoftWork::new(Shape {
                            layers: cfg.layers,
                            heads,
                            m: n,
                            dd,
                        })
                    })
                    .collect(),
                None => Vec::new(),
            },
            seed,
            z: vec![0.0; batch * (n + 1) * dd],
            y: vec![0.0; batch],
            work: match softmax_heads {
                Some(_) => Vec::new(),
                None => (0..chunks).map(|_| Work::new(cfg.layers, n, dd)).collect(),
            },
            task,
        }
    }

    pub fn task(&self) -> &Task {
        &self.task
    }

    /// Layer `l`'s `P` and `Q` (`[D, D]` row-major; `[H, D, D]` with softmax
    /// attention).
    pub fn pq(&self, l: usize) -> (&[f64], &[f64]) {
        (self.blocks[l].p.value(), self.blocks[l].q.value())
    }

    /// Softmax attention's heads per layer (`None`: linear attention).
    pub fn softmax_heads(&self) -> Option<usize> {
        self.softmax_heads
    }

    fn soft_shape(&self, heads: usize, m: usize) -> Shape {
        Shape {
            layers: self.blocks.len(),
            heads,
            m,
            dd: self.dd,
        }
    }

    /// [`Lsa::loss_and_grad`] with softmax attention: the same chunks and
    /// ordered reduction.
    fn soft_loss_and_grad(&mut self, heads: usize, z: &[f64], y: &[f64], m: usize) -> f64 {
        let count = y.len();
        let shape = self.soft_shape(heads, m);
        let mut work = std::mem::take(&mut self.soft);
        if work.len() != sized_chunks(count) || work[0].shape.m != m {
            work = (0..sized_chunks(count))
                .map(|_| SoftWork::new(shape))
                .collect();
        }
        let this = &*self;
        let stride = (m + 1) * self.dd;
        let inv_b = 1.0 / count as f64;
        for_each_chunk(count, &mut work, |_, items, wk| {
            wk.gp.iter_mut().for_each(|v| *v = 0.0);
            wk.gq.iter_mut().for_each(|v| *v = 0.0);
            wk.loss = 0.0;
            for i in items {
                let prompt = &z[i * stride..(i + 1) * stride];
                wk.loss += softmax::train_prompt(&this.blocks, prompt, y[i], inv_b, wk);
            }
        });
        let per = heads * self.dd * self.dd;
        for (l, b) in self.blocks.iter_mut().enumerate() {
            let part = l * per..(l + 1) * per;
            reduce_ordered(b.p.grad_mut(), &work, |w| &w.gp[part.clone()]);
            reduce_ordered(b.q.grad_mut(), &work, |w| &w.gq[part.clone()]);
        }
        let loss = work.iter().map(|w| w.loss).sum::<f64>() * inv_b;
        self.soft = work;
        loss
    }

    /// The forward pass of one prompt `[m + 1, D]` (`m` context examples), keeping
    /// `E_0 … E_L` in `e`, `A_l`, `C_l` in `a`, `c`; layers in `skip` add nothing
    /// (an ablation). Returns `ŷ`.
    fn forward_prompt(&self, prompt: &[f64], m: usize, skip: Option<usize>, wk: &mut Work) -> f64 {
        let (dd, layers) = (self.dd, self.blocks.len());
        let size = (m + 1) * dd;
        wk.e[..size].copy_from_slice(prompt);
        for l in 0..layers {
            self.forward_layer(l, m, skip, wk);
        }
        -wk.e[(layers + 1) * size - 1]
    }

    /// Layer `l` of the forward pass: `E_{l+1}` from `E_l` in `wk.e`, keeping `A_l`
    /// and `C_l`; `skip == Some(l)` makes it add nothing.
    fn forward_layer(&self, l: usize, m: usize, skip: Option<usize>, wk: &mut Work) {
        let dd = self.dd;
        let (rows, sq) = (m + 1, dd * dd);
        let size = rows * dd;
        let inv = 1.0 / m as f64;
        let (below, above) = wk.e.split_at_mut((l + 1) * size);
        let (e, e2) = (&below[l * size..], &mut above[..size]);
        let (a, c) = (
            &mut wk.a[l * sq..(l + 1) * sq],
            &mut wk.c[l * sq..(l + 1) * sq],
        );
        let (pt, qt) = (&wk.pt[l * sq..(l + 1) * sq], &wk.qt[l * sq..(l + 1) * sq]);
        // A [D, D] = E_ctxᵀ E_ctx
        gram(a, e, m, dd);
        // Cᵀ [D, D] = (1/m) Qᵀ A Pᵀ (kept in wk.dc), C its transpose
        mm(&mut wk.t, qt, false, a, dd, dd, dd);
        mm(&mut wk.dc, &wk.t, false, pt, dd, dd, dd);
        wk.dc.iter_mut().for_each(|v| *v *= inv);
        if skip == Some(l) {
            wk.dc.iter_mut().for_each(|v| *v = 0.0);
        }
        transpose(c, &wk.dc, dd);
        // E' [m + 1, D] = E + E Cᵀ
        mm(e2, e, false, &wk.dc, rows, dd, dd);
        e2.iter_mut().zip(e).for_each(|(o, x)| *o += x);
    }

    /// Backward of one prompt after [`Lsa::forward_prompt`], with `∂L/∂ŷ = dy`:
    /// adds `∂L/∂P_l`, `∂L/∂Q_l` into the chunk's sums.
    fn backward_prompt(&self, m: usize, dy: f64, wk: &mut Work) {
        let size = (m + 1) * self.dd;
        wk.g[..size].iter_mut().for_each(|v| *v = 0.0);
        wk.g[size - 1] = -dy;
        self.backward_layers(m, self.blocks.len(), wk);
    }

    /// Backward through layers `top − 1 … 0`, `∂L/∂E_top` in `wk.g`.
    fn backward_layers(&self, m: usize, top: usize, wk: &mut Work) {
        let dd = self.dd;
        let (rows, sq) = (m + 1, dd * dd);
        let size = rows * dd;
        let inv = 1.0 / m as f64;
        for l in (0..top).rev() {
            let e = &wk.e[l * size..(l + 1) * size];
            let (a, c) = (&wk.a[l * sq..(l + 1) * sq], &wk.c[l * sq..(l + 1) * sq]);
            let (pt, qt) = (&wk.pt[l * sq..(l + 1) * sq], &wk.qt[l * sq..(l + 1) * sq]);
            let g = &wk.g[..size];
            // ∂C [D, D] = Gᵀ E
            mm(&mut wk.dc, g, true, e, dd, rows, dd);
            // ∂P += (1/m) ∂C Qᵀ A
            mm(&mut wk.da, &wk.dc, false, qt, dd, dd, dd);
            mm(&mut wk.t, &wk.da, false, a, dd, dd, dd);
            let gp = &mut wk.gp[l * sq..(l + 1) * sq];
            gp.iter_mut().zip(&wk.t).for_each(|(o, v)| *o += inv * v);
            // ∂Q += (1/m) A Pᵀ ∂C
            mm(&mut wk.da, a, false, pt, dd, dd, dd);
            mm(&mut wk.t, &wk.da, false, &wk.dc, dd, dd, dd);
            let gq = &mut wk.gq[l * sq..(l + 1) * sq];
            gq.iter_mut().zip(&wk.t).for_each(|(o, v)| *o += inv * v);
            if l == 0 {
                break;
            }
            // ∂A [D, D] = (1/m) Pᵀ ∂C Qᵀ, symmetrised: ∂A + ∂Aᵀ
            mm(&mut wk.t, pt, false, &wk.dc, dd, dd, dd);
            mm(&mut wk.da, &wk.t, false, qt, dd, dd, dd);
            for i in 0..dd {
                for j in 0..=i {
                    let s = inv * (wk.da[i * dd + j] + wk.da[j * dd + i]);
                    wk.t[i * dd + j] = s;
                    wk.t[j * dd + i] = s;
                }
            }
            // ∂L/∂E = G + G C, and E_ctx (∂A + ∂Aᵀ) on the context rows
            let g2 = &mut wk.g2[..size];
            mm(g2, g, false, c, rows, dd, dd);
            g2.iter_mut().zip(g).for_each(|(o, v)| *o += v);
            mm(&mut wk.g[..m * dd], &e[..m * dd], false, &wk.t, m, dd, dd);
            for (o, v) in wk.g[..m * dd].iter_mut().zip(&wk.g2[..m * dd]) {
                *o += v;
            }
            wk.g[m * dd..size].copy_from_slice(&wk.g2[m * dd..size]);
        }
    }

    /// Forward and backward of one training prompt with the last layer in its
    /// rank-one form: only the query's `y` entry is read, so the last layer needs
    /// `ŷ = −z_q[D] − (1/m) pᵀ A q` (`p` = `P`'s last row, `q = Q z_q`) and its
    /// gradients are outer products: `∂P[D, :] += s (A q)ᵀ`, `∂Q += s (A p) z_qᵀ`,
    /// `∂z_q = −dy e_D + s Qᵀ A p`, `∂E_ctx = s [(E_ctx p) qᵀ + (E_ctx q) pᵀ]`
    /// with `s = −(∂L/∂ŷ)/m`: `O(m D + D²)` instead of the `O(D³)` products of
    /// [`Lsa::forward_prompt`] and [`Lsa::backward_prompt`], the reference it is
    /// tested against. Returns the loss term `½ (ŷ − y)²`; `scale` is `∂L/∂ŷ`'s
    /// factor `1/batch`.
    fn train_prompt(&self, prompt: &[f64], y: f64, m: usize, scale: f64, wk: &mut Work) -> f64 {
        let (dd, layers) = (self.dd, self.blocks.len());
        let (rows, sq) = (m + 1, dd * dd);
        let size = rows * dd;
        let top = layers - 1;
        // Layers below the last, in full (one layer reads the prompt in place).
        let inv = 1.0 / m as f64;
        let e = if top == 0 {
            prompt
        } else {
            wk.e[..size].copy_from_slice(prompt);
            for l in 0..top {
                self.forward_layer(l, m, None, wk);
            }
            &wk.e[top * size..(top + 1) * size]
        };
        let (p, q) = self.pq(top);
        let a = &mut wk.a[top * sq..(top + 1) * sq];
        // A [D, D] = E_ctxᵀ E_ctx
        gram(a, e, m, dd);
        let zq = &e[m * dd..size];
        let prow = &p[(dd - 1) * dd..dd * dd];
        // qv = Q z_q, aq = A qv, ap = A p
        let (qv, rest) = wk.t.split_at_mut(dd);
        let (aq, rest) = rest.split_at_mut(dd);
        let (ap, _) = rest.split_at_mut(dd);
        for i in 0..dd {
            qv[i] = q[i * dd..(i + 1) * dd]
                .iter()
                .zip(zq)
                .map(|(x, z)| x * z)
                .sum();
        }
        for i in 0..dd {
            let ai = &a[i * dd..(i + 1) * dd];
            aq[i] = ai.iter().zip(qv.iter()).map(|(x, v)| x * v).sum();
            ap[i] = ai.iter().zip(prow).map(|(x, v)| x * v).sum();
        }
        let yh = -zq[dd - 1] - inv * prow.iter().zip(aq.iter()).map(|(x, v)| x * v).sum::<f64>();
        let r = yh - y;
        let dy = r * scale;
        let s = -dy * inv;
        let gp = &mut wk.gp[top * sq..(top + 1) * sq];
        for (o, v) in gp[(dd - 1) * dd..].iter_mut().zip(aq.iter()) {
            *o += s * v;
        }
        let gq = &mut wk.gq[top * sq..(top + 1) * sq];
        for (row, &api) in gq.chunks_exact_mut(dd).zip(ap.iter()) {
            for (o, z) in row.iter_mut().zip(zq) {
                *o += s * api * z;
            }
        }
        if top > 0 {
            // ∂E_top: the query row, and the context rows through A.
            let g = &mut wk.g[..size];
            for (j, gj) in g[m * dd..].iter_mut().enumerate() {
                *gj = s * (0..dd).map(|i| q[i * dd + j] * ap[i]).sum::<f64>();
            }
            g[size - 1] -= dy;
            for (grow, erow) in g[..m * dd]
                .chunks_exact_mut(dd)
                .zip(e[..m * dd].chunks_exact(dd))
            {
                let ep: f64 = erow.iter().zip(prow).map(|(x, v)| x * v).sum();
                let eq: f64 = erow.iter().zip(qv.iter()).map(|(x, v)| x * v).sum();
                for ((o, qj), pj) in grow.iter_mut().zip(qv.iter()).zip(prow) {
                    *o = s * (ep * qj + eq * pj);
                }
            }
            self.backward_layers(m, top, wk);
        }
        0.5 * r * r
    }

    /// Whether [`Lsa::loss_and_grad`] takes `steps.rs`' path: asked for,
    /// the layers in the `P = 0` form, and its gradients the ones kept (the `x`
    /// blocks, and `P` held or one layer, whose `P` gets none there).
    pub fn takes_steps_path(&self) -> bool {
        self.path == TrainPath::Fastest
            && self.softmax_heads.is_none()
            && self.x_blocks_only
            && (self.p_held || self.blocks.len() == 1)
            && steps::in_steps_form(&self.blocks, self.dd)
    }

    /// Half the mean squared error of the model's predictions on `z`, `y` (`m`
    /// examples per prompt), with `∂/∂P_l`, `∂/∂Q_l` added into the gradients.
    pub fn loss_and_grad(&mut self, z: &[f64], y: &[f64], m: usize) -> f64 {
        if let Some(heads) = self.softmax_heads {
            return self.soft_loss_and_grad(heads, z, y, m);
        }
        let (dd, layers, count) = (self.dd, self.blocks.len(), y.len());
        let mut work = std::mem::take(&mut self.work);
        if work.len() != sized_chunks(count) || work[0].g.len() < (m + 1) * dd {
            work = (0..sized_chunks(count))
                .map(|_| Work::new(layers, m, dd))
                .collect();
        }
        let this = &*self;
        let stride = (m + 1) * dd;
        let inv_b = 1.0 / count as f64;
        let steps = self.takes_steps_path();
        // one layer's prompts eight at a time (`lanes.rs`, the same bits)
        let grouped = !steps && self.path == TrainPath::Fastest && layers == 1;
        for_each_chunk(count, &mut work, |_, items, wk| {
            wk.load(&this.blocks, dd);
            wk.gp.iter_mut().for_each(|v| *v = 0.0);
            wk.gq.iter_mut().for_each(|v| *v = 0.0);
            wk.loss = 0.0;
            let mut from = items.start;
            if grouped {
                // the lanes as one vector operation where the processor has them
                mechlab_engine::simd::widest(
                    #[inline(always)]
                    || {
                        let (p, q) = this.pq(0);
                        while from + LANES <= items.end {
                            let group = &z[from * stride..(from + LANES) * stride];
                            let ys = &y[from..from + LANES];
                            lanes::train_prompts(p, q, group, ys, m, dd, inv_b, wk);
                            from += LANES;
                        }
                    },
                );
            }
            for i in from..items.end {
                let prompt = &z[i * stride..(i + 1) * stride];
                if steps {
                    wk.loss += steps::train_prompt(&this.blocks, prompt, y[i], m, inv_b, wk);
                } else if this.path == TrainPath::Full {
                    let r = this.forward_prompt(prompt, m, None, wk) - y[i];
                    wk.loss += 0.5 * r * r;
                    this.backward_prompt(m, r * inv_b, wk);
                } else {
                    wk.loss += this.train_prompt(prompt, y[i], m, inv_b, wk);
                }
            }
        });
        let sq = dd * dd;
        for (l, b) in self.blocks.iter_mut().enumerate() {
            let part = l * sq..(l + 1) * sq;
            reduce_ordered(b.p.grad_mut(), &work, |w| &w.gp[part.clone()]);
            reduce_ordered(b.q.grad_mut(), &work, |w| &w.gq[part.clone()]);
        }
        if self.gdpp {
            let d = dd - 1;
            for b in self.blocks.iter_mut() {
                b.q.grad_mut().iter_mut().for_each(|v| *v = 0.0);
                let g = b.p.grad_mut();
                // the shared entry's gradient: the sum over the entries it stands for
                let gamma: f64 = (0..d).map(|i| g[i * dd + i]).sum();
                let eta = g[dd * dd - 1];
                g.iter_mut().for_each(|v| *v = 0.0);
                for i in 0..d {
                    g[i * dd + i] = gamma;
                }
                g[dd * dd - 1] = eta;
            }
        }
        if self.x_blocks_only {
            let d = dd - 1;
            for b in self.blocks.iter_mut() {
                if self.p_held {
                    b.p.grad_mut().iter_mut().for_each(|v| *v = 0.0);
                }
                for g in [b.p.grad_mut(), b.q.grad_mut()] {
                    for (k, v) in g.iter_mut().enumerate() {
                        if k / dd >= d || k % dd >= d {
                            *v = 0.0;
                        }
                    }
                }
            }
        }
        let loss = work.iter().map(|w| w.loss).sum::<f64>() * inv_b;
        self.work = work;
        loss
    }

    /// Predictions on `prompts` (`[count, m + 1, D]`), layer `skip` ablated
    /// (analysis; allocates).
    pub fn predict(&self, z: &[f64], m: usize, skip: Option<usize>) -> Vec<f64> {
        let stride = (m + 1) * self.dd;
        if let Some(heads) = self.softmax_heads {
            assert!(skip.is_none(), "a layer ablation is linear attention's");
            let mut wk = SoftWork::new(self.soft_shape(heads, m));
            return z
                .chunks_exact(stride)
                .map(|p| softmax::forward(&self.blocks, p, &mut wk))
                .collect();
        }
        let mut wk = Work::new(self.blocks.len(), m, self.dd);
        wk.load(&self.blocks, self.dd);
        z.chunks_exact(stride)
            .map(|p| self.forward_prompt(p, m, skip, &mut wk))
            .collect()
    }

    /// `∂ŷ/∂x_q` `[d]` of one prompt: `−[(I + C_0)ᵀ ⋯ (I + C_{L−1})ᵀ e_D]_{1..d}`
    /// (analysis; allocates).
    pub fn sensitivity(&self, prompt: &[f64], m: usize) -> Vec<f64> {
        if let Some(heads) = self.softmax_heads {
            let mut wk = SoftWork::new(self.soft_shape(heads, m));
            return softmax::sensitivity(&self.blocks, prompt, &mut wk);
        }
        let (dd, layers) = (self.dd, self.blocks.len());
        let mut wk = Work::new(layers, m, dd);
        wk.load(&self.blocks, dd);
        self.forward_prompt(prompt, m, None, &mut wk);
        let mut v = vec![0.0; dd];
        v[dd - 1] = 1.0;
        for l in (0..layers).rev() {
            let c = &wk.c[l * dd * dd..(l + 1) * dd * dd];
            let next: Vec<f64> = (0..dd)
                .map(|j| v[j] + (0..dd).map(|i| c[i * dd + j] * v[i]).sum::<f64>())
                .collect();
            v = next;
        }
        v[..dd - 1].iter().map(|x| -x).collect()
    }
}

impl Trainable<f64> for Lsa {
    fn train_step(&mut self, step: u64) -> f64 {
        let (mut z, mut y) = (std::mem::take(&mut self.z), std::mem::take(&mut self.y));
        self.task.train_batch(self.seed, step, &mut z, &mut y);
        let loss = self.loss_and_grad(&z, &y, self.task.n);
        (self.z, self.y) = (z, y);
        loss
    }
}
