//! What the causal-structure run measures: the loss against the Bayes
//! predictor's, layer 1's attention on each position's parent, layer 2's
//! induction mass, the match and copy blocks, and the quantity the theory says
//! drives layer 1, the χ²-mutual information between positions, beside the
//! gradient of the first attention layer at the theory's start.
//!
//! Every probe reads each sequence's own parents (in position terms), so the
//! controls, whose graph moves per sequence, are measured on the graph their
//! sequences were drawn from.

use super::data::{bayes, soft_ce, Sampler, Seqs, Task};
use super::model::CatFormer;
use crate::rng::{substream, Stream};

/// The held-out sequences and their reference losses.
pub struct Eval {
    pub seqs: Seqs,
    /// Soft-label cross-entropy of the Bayes predictor `(α + N_s)/(Sα + N)`
    /// (parents as drawn), of the authors' version of it (roots counted, their
    /// −1 index), of the true row (the floor: the target's entropy) and of
    /// the uniform prediction (`log S`).
    pub bayes: f64,
    pub bayes_theirs: f64,
    pub entropy: f64,
    pub uniform: f64,
}

impl Eval {
    pub fn new(task: &Task, seed: u64, count: usize) -> Eval {
        let seqs = Seqs::draw(task, &mut substream(seed, Stream::Sample, 1), count);
        let (t, s) = (task.seq_len, task.vocab);
        let mut p = vec![0.0; s];
        let (mut b, mut bt, mut e) = (0.0, 0.0, 0.0);
        for i in 0..count {
            let (x, y) = (seqs.seq(i, t), &seqs.y[i * s..(i + 1) * s]);
            let par = &seqs.par[i * (t - 1)..(i + 1) * (t - 1)];
            bayes(x, par, s, task.alpha, false, &mut p);
            b += soft_ce(&p, y);
            bayes(x, par, s, task.alpha, true, &mut p);
            bt += soft_ce(&p, y);
            e += soft_ce(y, y);
        }
        let n = count as f64;
        Eval {
            seqs,
            bayes: b / n,
            bayes_theirs: bt / n,
            entropy: e / n,
            uniform: (s as f64).ln(),
        }
    }

    /// `(uniform − loss) / (uniform − Bayes)`: the share of the gap from the
    /// uniform prediction to the Bayes predictor that `loss` closes.
    pub fn gap_closed(&self, loss: f64) -> f64 {
        (self.uniform - loss) / (self.uniform - self.bayes)
    }
}

/// One reading of the model on the first `n` held-out sequences.
#[derive(Clone, Debug, Default)]
pub struct Probe {
    pub loss: f64,
    /// Layer 1's attention from a position to its own parent, over positions
    /// whose parent is earlier (the best head), and the same under uniform
    /// causal attention, `1/(i + 1)`.
    pub parent_attn: f64,
    pub parent_chance: f64,
    /// Each layer-1 head's parent attention.
    pub parent_heads: Vec<f64>,
    /// Share of the positions with a parent whose parent is earlier (1 unless
    /// positions are shuffled).
    pub parent_pairs: f64,
    /// Fixed graph only (NaN otherwise): the share of positions with a parent
    /// whose mean attention row (the best head) peaks at the parent, and the
    /// authors' `many_graphs.ipynb` reading, the masked softmax of `A1`'s
    /// position block alone, on the parent.
    pub parent_argmax: f64,
    pub parent_attn_pos: f64,
    /// Fixed graph only: the positions whose mean row peaks elsewhere, as
    /// `(position, parent, peak)`.
    pub parent_misses: Vec<(usize, i64, usize)>,
    /// The query's layer-2 mass on the keys whose parent's token is the query
    /// token (the best head), over sequences with such a key; and the same
    /// under uniform attention.
    pub induction: f64,
    pub induction_uniform: f64,
    /// Mean diagonal minus mean off-diagonal of `A2`'s block (query's token) ×
    /// (key's layer-1 output token), the match, and of `W`'s block (layer 2's
    /// output token) × logits, the copy (the blocks their `plots.py` outlines).
    pub a2_match: f64,
    pub w_copy: f64,
}

impl Probe {
    /// The readings as `(key, value)`, for the log and the summary (those that
    /// do not apply, NaN, left out).
    pub fn readings(&self) -> Vec<(String, f64)> {
        let mut v: Vec<(String, f64)> = [
            ("loss", self.loss),
            ("parent_attn", self.parent_attn),
            ("parent_chance", self.parent_chance),
            ("parent_pairs", self.parent_pairs),
            ("parent_argmax", self.parent_argmax),
            ("parent_attn_pos", self.parent_attn_pos),
            ("induction", self.induction),
            ("induction_uniform", self.induction_uniform),
            ("a2_match", self.a2_match),
            ("w_copy", self.w_copy),
        ]
        .into_iter()
        .filter(|(_, v)| !v.is_nan())
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        if self.parent_heads.len() > 1 {
            for (h, a) in self.parent_heads.iter().enumerate() {
                v.push((format!("parent_attn_head_{h}"), *a));
            }
        }
        v
    }
}

/// Diagonal mean minus off-diagonal mean of the `S × S` block of `m` (row
/// stride `stride`) at rows `r0..`, columns `c0..`.
fn diag_contrast(m: &[f64], stride: usize, r0: usize, c0: usize, s: usize) -> f64 {
    let (mut d, mut off) = (0.0, 0.0);
    for a in 0..s {
        for b in 0..s {
            let v = m[(r0 + a) * stride + c0 + b];
            if a == b {
                d += v;
            } else {
                off += v;
            }
        }
    }
    d / s as f64 - off / (s * s - s) as f64
}

/// Reads the model on the first `n` held-out sequences (allocates: not in a
/// training step).
pub fn probe(m: &CatFormer, ev: &Eval, n: usize) -> Probe {
    let (task, d) = (m.task(), m.dims);
    let (s, t) = (d.s, d.t);
    let n = n.min(ev.seqs.n);
    let mut wk = m.workspace();
    let mut loss = 0.0;
    let (mut pa, mut pairs, mut chance, mut kids) = (vec![0.0; d.h1], 0usize, 0.0, 0usize);
    let (mut ind, mut ind_u, mut ind_n) = (vec![0.0; d.h2], 0.0, 0usize);
    // mean attention rows (fixed graph): [H1, T, T]
    let mut mean_rows = vec![0.0; d.h1 * t * t];
    for b in 0..n {
        let x = ev.seqs.seq(b, t);
        let par = &ev.seqs.par[b * (t - 1)..(b + 1) * (t - 1)];
        loss += m.forward_seq(x, &ev.seqs.y[b * s..(b + 1) * s], &mut wk);
        for (i, &p) in par.iter().enumerate() {
            if p < 0 {
                continue;
            }
            kids += 1;
            if (p as usize) < i {
                pairs += 1;
                chance += 1.0 / (i + 1) as f64;
                for (h, v) in pa.iter_mut().enumerate() {
                    *v += wk.a1[(h * t + i) * t + p as usize];
                }
            }
        }
        for (o, &a) in mean_rows.iter_mut().zip(&wk.a1) {
            *o += a;
        }
        let q = x[t - 1];
        let hits: Vec<usize> = (0..t - 1)
            .filter(|&j| par[j] >= 0 && (par[j] as usize) < j && x[par[j] as usize] == q)
            .collect();
        if !hits.is_empty() {
            ind_n += 1;
            ind_u += hits.len() as f64 / t as f64;
            for (g, v) in ind.iter_mut().enumerate() {
                *v += hits.iter().map(|&j| wk.a2[g * t + j]).sum::<f64>();
            }
        }
    }
    let parent_heads: Vec<f64> = pa.iter().map(|v| v / pairs.max(1) as f64).collect();
    let best = (0..d.h1)
        .max_by(|&a, &b| parent_heads[a].total_cmp(&parent_heads[b]))
        .unwrap_or(0);
    let (mut argmax, mut pos, mut misses) = (f64::NAN, f64::NAN, Vec::new());
    if task.fixed_graph() {
        let kids: Vec<usize> = (0..t - 1).filter(|&i| task.dag[i] >= 0).collect();
        if !kids.is_empty() {
            let rows = &mean_rows[best * t * t..(best + 1) * t * t];
            for &i in &kids {
                let peak = row_argmax(&rows[i * t..i * t + i + 1]);
                if peak != task.dag[i] as usize {
                    misses.push((i, task.dag[i], peak));
                }
            }
            argmax = 1.0 - misses.len() as f64 / kids.len() as f64;
            // the masked softmax of A1's position block alone (their Fig. 9)
            let a1 = &m.a1.value()[best * d.d0 * d.d0..(best + 1) * d.d0 * d.d0];
            let mut acc = 0.0;
            for &i in &kids {
                let mut row: Vec<f64> = (0..=i).map(|j| a1[(s + i) * d.d0 + s + j]).collect();
                mechlab_engine::layers::softmax::row_in_place(&mut row, |_| true);
                acc += row[task.dag[i] as usize];
            }
            pos = acc / kids.len() as f64;
        }
    }
    let ind_best = ind.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    Probe {
        loss: loss / n as f64,
        parent_attn: parent_heads[best],
        parent_chance: chance / pairs.max(1) as f64,
        parent_pairs: pairs as f64 / kids.max(1) as f64,
        parent_heads,
        parent_argmax: argmax,
        parent_attn_pos: pos,
        parent_misses: misses,
        induction: ind_best / ind_n.max(1) as f64,
        induction_uniform: ind_u / ind_n.max(1) as f64,
        a2_match: diag_contrast(m.a2.value(), d.d1, 0, d.d0, s),
        w_copy: diag_contrast(m.w.value(), s, d.d1, 0, s),
    }
}

/// The first largest entry's index.
pub fn row_argmax(row: &[f64]) -> usize {
    let mut best = 0;
    for (j, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = j;
        }
    }
    best
}

/// The χ²-mutual information between the tokens at positions `i` and `j`
/// (`j < i < T − 1`) within one transition matrix, estimated from data:
/// `n_pi` matrices, `n_seq` sequences each, the plug-in
/// `Σ_ab P(a,b)² / (P_i(a) P_j(b)) − 1` per matrix, averaged. `[T − 1, T − 1]`,
/// lower triangle (fixed graph only).
pub fn chi2_mi(task: &Task, seed: u64, n_pi: usize, n_seq: usize) -> Vec<f64> {
    let (s, n) = (task.vocab, task.seq_len - 1);
    let mut rng = substream(seed, Stream::Sample, 2);
    let mut w = Sampler::new(task);
    let mut out = vec![0.0; n * n];
    let mut joint = vec![0u32; n * n * s * s];
    let mut marg = vec![0u32; n * s];
    let mut x = vec![0u8; n * n_seq];
    let mut par = vec![0i16; n];
    for _ in 0..n_pi {
        w.draw_pi(task, &mut rng);
        joint.iter_mut().for_each(|v| *v = 0);
        marg.iter_mut().for_each(|v| *v = 0);
        for seq in x.chunks_exact_mut(n) {
            w.tokens(task, &mut rng, seq, &mut par);
            for i in 0..n {
                marg[i * s + seq[i] as usize] += 1;
                for j in 0..i {
                    joint[((i * n + j) * s + seq[i] as usize) * s + seq[j] as usize] += 1;
                }
            }
        }
        let z = n_seq as f64;
        for i in 0..n {
            for j in 0..i {
                let mut chi = 0.0;
                for a in 0..s {
                    let pa = marg[i * s + a] as f64 / z;
                    if pa == 0.0 {
                        continue;
                    }
                    for b in 0..s {
                        let pb = marg[j * s + b] as f64 / z;
                        let pab = joint[((i * n + j) * s + a) * s + b] as f64 / z;
                        if pb > 0.0 && pab > 0.0 {
                            chi += pab * pab / (pa * pb);
                        }
                    }
                }
                out[i * n + j] += (chi - 1.0) / n_pi as f64;
            }
        }
    }
    out
}

/// `−∂L/∂A1`'s position block `[T − 1, T − 1]` (head 0, context positions) at
/// the theory's start ([`CatFormer::set_theory_start`]) on `count` fresh
/// sequences.
pub fn start_gradient(m: &CatFormer, beta: f64, seed: u64, count: usize) -> Vec<f64> {
    let task = m.task().clone();
    let d = m.dims;
    let mut start = CatFormer::new(
        &super::model::ModelConfig {
            heads: [d.h1, d.h2],
        },
        task,
        count,
        seed,
    );
    start.set_theory_start(beta);
    let seqs = Seqs::draw(start.task(), &mut substream(seed, Stream::Sample, 3), count);
    start.loss_and_grad(&seqs);
    let n = d.t - 1;
    let g = start.a1.grad();
    (0..n * n)
        .map(|k| -g[(d.s + k / n) * d.d0 + d.s + k % n])
        .collect()
}

/// Over the positions with a parent in `dag`: the share whose row `m[i, ..i]`
/// peaks at the parent (position 0 has no earlier key and is skipped).
pub fn argmax_is_parent(m: &[f64], dag: &[i64]) -> f64 {
    let n = dag.len();
    let kids: Vec<usize> = (1..n).filter(|&i| dag[i] >= 0).collect();
    if kids.is_empty() {
        return f64::NAN;
    }
    let hit = kids
        .iter()
        .filter(|&&i| row_argmax(&m[i * n..i * n + i]) == dag[i] as usize)
        .count();
    hit as f64 / kids.len() as f64
}

/// The mean over positions `i ≥ 2` with a parent of the Pearson correlation of
/// rows `a[i, ..i]` and `b[i, ..i]`.
pub fn row_corr(a: &[f64], b: &[f64], dag: &[i64]) -> f64 {
    let n = dag.len();
    let mut cs = Vec::new();
    for i in (2..n).filter(|&i| dag[i] >= 0) {
        let (ra, rb) = (&a[i * n..i * n + i], &b[i * n..i * n + i]);
        let (ma, mb) = (mean(ra), mean(rb));
        let cov: f64 = ra.iter().zip(rb).map(|(x, y)| (x - ma) * (y - mb)).sum();
        let va: f64 = ra.iter().map(|x| (x - ma).powi(2)).sum();
        let vb: f64 = rb.iter().map(|y| (y - mb).powi(2)).sum();
        if va > 0.0 && vb > 0.0 {
            cs.push(cov / (va * vb).sqrt());
        }
    }
    if cs.is_empty() {
        f64::NAN
    } else {
        mean(&cs)
    }
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}
