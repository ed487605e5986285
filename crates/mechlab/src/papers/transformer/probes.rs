//! What the transformer experiment measures at every probe step, on fixed
//! held-out windows: the loss and accuracy over the target tokens beside the
//! task's Bayes loss, TransformerLens's head detectors, the induction score on
//! repeated random tokens, the composition scores between heads of
//! consecutive layers, each head's OV copying score, the logit lens and the
//! in-context learning score.
//!
//! * **Head detectors** (TransformerLens `head_detector.detect_head`, its
//!   default `"mul"` measure): for a detection pattern `D` `[T, T]` built from a
//!   sequence's tokens, a head's score is `Σ A⊙D / Σ A` (its attention mass on
//!   the detected positions, per query, averaged), averaged over the held-out
//!   windows. `previous_token`: `D[i, i−1] = 1`; `duplicate_token`:
//!   `D[i, j] = 1` for `j < i` with `x_j = x_i`; `induction`: `D[i, j] = 1` for
//!   `1 ≤ j ≤ i` with `x_{j−1} = x_i` (the duplicate pattern shifted one key to
//!   the right, as TransformerLens builds it). `probe.pattern_file` adds one of
//!   the researcher's own.
//! * **Induction score on repeated random tokens** (Olsson et al.; as
//!   lm-induction measures it): the mean attention from a query in the second
//!   copy to the token after the query's earlier occurrence.
//! * **Composition scores** (Elhage et al. 2021; TransformerLens
//!   `all_composition_scores`): `‖L R‖_F / (‖L‖_F ‖R‖_F)` with `L` the earlier
//!   head's OV circuit and `R` the later head's QK circuit (Q-composition), its
//!   transpose (K-composition) or its OV circuit (V-composition), for every pair
//!   of heads in consecutive layers, computed from the `d_head`-sized factors
//!   (`‖A₁B₁A₂B₂‖²_F = tr(A₁ᵀA₁ · M · B₂B₂ᵀ · Mᵀ)`, `M = B₁A₂`), never from the
//!   `d_model × d_model` products.
//! * **Logit lens**: each layer's residual stream put through the final
//!   LayerNorm and the unembedding, and the loss it would give; the last entry
//!   is the model's own.

use super::config::ProbeConfig;
use crate::papers::lm_induction::ov::copying_scores;
use mechlab_engine::gpt::{Gpt, Workspace, LN_EPS};
use mechlab_engine::layers::layernorm;
use mechlab_engine::matmul::{matmul, Op};
use mechlab_engine::Float;
use std::ops::Range;

/// The built-in detection patterns, in the order [`Eval::detectors`] holds them.
pub const DETECTORS: [&str; 3] = ["previous_token", "duplicate_token", "induction"];

/// The fixed evaluation sets and their workspaces.
pub struct Probe<T: Float> {
    /// Held-out inputs, targets and target mask, `[n, T]`.
    pub x: Vec<u32>,
    pub y: Vec<u32>,
    pub m: Vec<bool>,
    /// Repeated random sequences `[n, 2·rep_len + 1]`.
    rep: Vec<u32>,
    pub rep_len: usize,
    /// The researcher's detection patterns.
    pub custom: Vec<CustomPattern>,
    /// Mean Bayes loss over the held-out targets, where the task has one.
    pub bayes: Option<f64>,
    early: Range<usize>,
    late: Range<usize>,
    /// Every held-out target is a token of the window (the ICL score is defined).
    dense: bool,
    ws: Workspace<T>,
    ws_rep: Workspace<T>,
}

/// A detection pattern of the researcher's: `[T, T]` for every window, or
/// `[n, T, T]`, one per held-out window.
#[derive(Clone, Debug, PartialEq)]
pub struct CustomPattern {
    /// Its metrics key: `custom` (`probe.pattern_file`) or `custom_{name}`.
    pub key: String,
    pub pattern: Vec<f64>,
}

/// One probe's numbers.
#[derive(Clone, Debug, Default)]
pub struct Eval {
    /// The key of each of `detectors`: [`DETECTORS`], then the custom patterns'.
    pub detector_names: Vec<String>,
    pub loss: f64,
    pub accuracy: f64,
    /// Mean loss at every position over the targets there (NaN where none is).
    pub per_pos: Vec<f64>,
    pub icl: Option<f64>,
    /// `[detector][layer][head]`, [`DETECTORS`] then the custom patterns.
    pub detectors: Vec<Vec<Vec<f64>>>,
    /// Induction score on repeated random tokens, `[layer][head]`.
    pub rep_induction: Vec<Vec<f64>>,
    /// OV copying score, `[layer][head]`.
    pub copying: Vec<Vec<f64>>,
    /// Q-, K-, V-composition `[mode][layer l ≥ 1][head of l−1][head of l]`.
    pub composition: [Vec<Vec<Vec<f64>>>; 3],
    /// Logit-lens loss after each layer's input and the final block, `[n_layers + 1]`.
    pub lens: Vec<f64>,
    /// Direct logit attribution `[layer][head]`: the mean over the held-out
    /// targets of what each head's output adds to the target's logit through
    /// the final LayerNorm at its frozen scale and the unembedding.
    pub dla: Vec<Vec<f64>>,
}

fn splits(rows: &[u32], mask: &[bool], w: usize) -> (Vec<u32>, Vec<u32>, Vec<bool>) {
    let (mut x, mut y, mut m) = (Vec::new(), Vec::new(), Vec::new());
    for (r, k) in rows.chunks_exact(w).zip(mask.chunks_exact(w)) {
        x.extend_from_slice(&r[..w - 1]);
        y.extend_from_slice(&r[1..]);
        m.extend_from_slice(&k[1..]);
    }
    (x, y, m)
}

impl<T: Float> Probe<T> {
    /// `heldout`, `mask`: `[n, T + 1]`; `rep_ids`: the ids the repeated random
    /// sequences draw from; `bayes`: the mean Bayes loss over the held-out targets.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        model: &Gpt<T>,
        heldout: &[u32],
        mask: &[bool],
        t: usize,
        rep: Vec<u32>,
        rep_len: usize,
        custom: Vec<CustomPattern>,
        bayes: Option<f64>,
        cfg: &ProbeConfig,
    ) -> Self {
        let (x, y, m) = splits(heldout, mask, t + 1);
        let n = x.len() / t;
        let late = if cfg.icl_late == 0 {
            t - 1
        } else {
            cfg.icl_late.min(t - 1)
        };
        let around = |c: usize| c.saturating_sub(cfg.icl_window)..(c + cfg.icl_window + 1).min(t);
        let dense = m.iter().all(|&k| k) && cfg.icl_early < late;
        let nr = rep.len() / (2 * rep_len + 1);
        Probe {
            ws: Workspace::new(model, n, t),
            ws_rep: Workspace::new(model, nr.max(1), (2 * rep_len).max(1)),
            x,
            y,
            m,
            rep,
            rep_len,
            custom,
            bayes,
            early: around(cfg.icl_early.min(t - 1)),
            late: around(late),
            dense,
        }
    }

    /// Every number of the model as it is now.
    pub fn evaluate(&mut self, model: &Gpt<T>) -> Eval {
        let (t, c) = (self.ws.seq_len(), &model.cfg);
        let n = self.ws.batch();
        model.evaluate(&mut self.ws, &self.x, Some(&self.y));
        let v = c.d_vocab;
        let (mut sum, mut hits, mut count) = (0.0, 0.0, 0.0f64);
        let (mut pos_sum, mut pos_n) = (vec![0.0; t], vec![0.0; t]);
        let n_det = DETECTORS.len() + self.custom.len();
        let mut det = vec![vec![vec![0.0; c.n_heads]; c.n_layers]; n_det];
        let mut pat = vec![0.0; t * t];
        for s in 0..n {
            let (w, i) = self.ws.seq(s);
            let (losses, logits) = (w.token_losses(i), w.logits(i));
            for p in 0..t {
                if !self.m[s * t + p] {
                    continue;
                }
                sum += losses[p];
                count += 1.0;
                pos_sum[p] += losses[p];
                pos_n[p] += 1.0;
                let row = &logits[p * v..(p + 1) * v];
                let best = (0..v).fold(0, |b, k| if row[k] > row[b] { k } else { b });
                hits += f64::from(best == self.y[s * t + p] as usize);
            }
            let toks = &self.x[s * t..(s + 1) * t];
            for (d, dl) in det.iter_mut().enumerate() {
                match d {
                    0..=2 => detection_pattern(d, toks, &mut pat),
                    _ => {
                        let c = &self.custom[d - DETECTORS.len()].pattern;
                        let at = if c.len() == t * t { 0 } else { s * t * t };
                        pat.copy_from_slice(&c[at..at + t * t]);
                    }
                }
                for (l, dh) in dl.iter_mut().enumerate() {
                    let a = w.pattern(l, i);
                    for (h, score) in dh.iter_mut().enumerate() {
                        let ah = &a[h * t * t..(h + 1) * t * t];
                        let (mut num, mut den) = (0.0, 0.0);
                        for (x, &dp) in ah.iter().zip(&pat) {
                            num += x.as_f64() * dp;
                            den += x.as_f64();
                        }
                        *score += num / den / n as f64;
                    }
                }
            }
        }
        let per_pos: Vec<f64> = pos_sum.iter().zip(&pos_n).map(|(s, n)| s / n).collect();
        let mean = |r: &Range<usize>| per_pos[r.clone()].iter().sum::<f64>() / r.len() as f64;
        let icl = self.dense.then(|| mean(&self.late) - mean(&self.early));
        let lens = self.lens(model, n, t);
        let dla = self.dla(model, n, t);
        Eval {
            detector_names: DETECTORS
                .iter()
                .map(|d| d.to_string())
                .chain(self.custom.iter().map(|c| c.key.clone()))
                .collect(),
            loss: sum / count.max(1.0),
            accuracy: hits / count.max(1.0),
            per_pos,
            icl,
            detectors: det,
            rep_induction: self.rep_induction(model),
            copying: copying_scores(model),
            composition: composition_scores(model),
            lens,
            dla,
        }
    }

    /// Direct logit attribution of every head on the held-out targets. With
    /// LayerNorm, head `(l, h)` adds `rstd · (W_O^h z_h − mean) · (γ ⊙ W_U[y])`
    /// to the target's logit, `= rstd · z_h · W_O^hᵀ (γ ⊙ W_U[y] − mean)`, with
    /// the final LayerNorm's `rstd` of the whole residual stream held fixed (the
    /// TransformerLens `apply_ln_to_stack` convention, `γ` included).
    fn dla(&self, model: &Gpt<T>, n: usize, t: usize) -> Vec<Vec<f64>> {
        let c = &model.cfg;
        let (d, nh, dh, l_n) = (c.d_model, c.n_heads, c.d_head, c.n_layers);
        let hd = nh * dh;
        let val = |name: &str| values(model, name);
        let wu = unembedding(model);
        let gamma = val("ln_final.w");
        let wo: Vec<Vec<f64>> = (0..l_n)
            .map(|l| val(&format!("blocks.{l}.attn.W_O")).expect("W_O"))
            .collect();
        let mut out = vec![vec![0.0; nh]; l_n];
        let (mut g, mut v) = (vec![0.0; d], vec![0.0; hd]);
        let mut count = 0.0f64;
        for s in 0..n {
            let (w, i) = self.ws.seq(s);
            let resid = w.resid(l_n, i);
            for p in 0..t {
                if !self.m[s * t + p] {
                    continue;
                }
                count += 1.0;
                let y = self.y[s * t + p] as usize;
                let row = &wu[y * d..(y + 1) * d];
                let scale = match &gamma {
                    Some(gm) => {
                        g.iter_mut()
                            .zip(row.iter().zip(gm))
                            .for_each(|(a, (&u, &k))| *a = u * k);
                        let mean = g.iter().sum::<f64>() / d as f64;
                        g.iter_mut().for_each(|a| *a -= mean);
                        let r = &resid[p * d..(p + 1) * d];
                        let mu = r.iter().map(|x| x.as_f64()).sum::<f64>() / d as f64;
                        let var =
                            r.iter().map(|x| (x.as_f64() - mu).powi(2)).sum::<f64>() / d as f64;
                        1.0 / (var + mechlab_engine::gpt::LN_EPS).sqrt()
                    }
                    None => {
                        g.copy_from_slice(row);
                        1.0
                    }
                };
                for (l, ol) in out.iter_mut().enumerate() {
                    // v = W_Oᵀ g: [H·dh]
                    matmul(&mut v, &g, Op::N, &wo[l], Op::N, 1, d, hd, false);
                    let z = &w.z(l, i)[p * hd..(p + 1) * hd];
                    for (h, o) in ol.iter_mut().enumerate() {
                        let zh = &z[h * dh..(h + 1) * dh];
                        *o += scale
                            * zh.iter()
                                .zip(&v[h * dh..(h + 1) * dh])
                                .map(|(a, b)| a.as_f64() * b)
                                .sum::<f64>();
                    }
                }
            }
        }
        out.iter_mut().flatten().for_each(|x| *x /= count.max(1.0));
        out
    }

    fn rep_induction(&mut self, model: &Gpt<T>) -> Vec<Vec<f64>> {
        let c = &model.cfg;
        let (rl, tr) = (self.rep_len, 2 * self.rep_len);
        let mut out = vec![vec![0.0; c.n_heads]; c.n_layers];
        let nr = self.rep.len() / (tr + 1);
        if nr == 0 || rl == 0 {
            return out;
        }
        let x: Vec<u32> = self
            .rep
            .chunks_exact(tr + 1)
            .flat_map(|r| r[..tr].to_vec())
            .collect();
        model.evaluate(&mut self.ws_rep, &x, None);
        for s in 0..nr {
            let (w, i) = self.ws_rep.seq(s);
            for (l, ol) in out.iter_mut().enumerate() {
                let p = w.pattern(l, i);
                for (h, o) in ol.iter_mut().enumerate() {
                    let ph = &p[h * tr * tr..(h + 1) * tr * tr];
                    *o += (rl..tr)
                        .map(|q| ph[q * tr + q - rl + 1].as_f64())
                        .sum::<f64>()
                        / (rl * nr) as f64;
                }
            }
        }
        out
    }

    /// The logit lens's loss over the held-out targets after each block.
    fn lens(&self, model: &Gpt<T>, n: usize, t: usize) -> Vec<f64> {
        let c = &model.cfg;
        let (d, v) = (c.d_model, c.d_vocab);
        let val = |name: &str| values(model, name);
        let wu = unembedding(model);
        let bu = val("unembed.b_U").expect("every Gpt has b_U");
        let ln = val("ln_final.w").zip(val("ln_final.b"));
        let rows = n * t;
        let (mut h, mut z) = (vec![0.0; rows * d], vec![0.0; rows * d]);
        let (mut mean, mut rstd) = (vec![0.0; rows], vec![0.0; rows]);
        let mut logits = vec![0.0; rows * v];
        (0..=c.n_layers)
            .map(|l| {
                for s in 0..n {
                    let (w, i) = self.ws.seq(s);
                    h[s * t * d..(s + 1) * t * d]
                        .iter_mut()
                        .zip(w.resid(l, i))
                        .for_each(|(a, b)| *a = b.as_f64());
                }
                let x = match &ln {
                    Some((g, b)) => {
                        layernorm::forward(&mut z, &mut mean, &mut rstd, &h, g, b, rows, d, LN_EPS);
                        &z
                    }
                    None => &h,
                };
                matmul(&mut logits, x, Op::N, &wu, Op::T, rows, d, v, false);
                let (mut sum, mut cnt) = (0.0, 0.0f64);
                for r in 0..rows {
                    if !self.m[r] {
                        continue;
                    }
                    let row = &mut logits[r * v..(r + 1) * v];
                    row.iter_mut().zip(&bu).for_each(|(a, b)| *a += b);
                    let mx = row.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b));
                    let lse = mx + row.iter().map(|q| (q - mx).exp()).sum::<f64>().ln();
                    sum += lse - row[self.y[r] as usize];
                    cnt += 1.0;
                }
                sum / cnt.max(1.0)
            })
            .collect()
    }
}

/// A parameter's values in f64, if the model has it.
fn values<T: Float>(model: &Gpt<T>, name: &str) -> Option<Vec<f64>> {
    model
        .param(name)
        .map(|p| p.value().iter().map(|x| x.as_f64()).collect())
}

/// The unembedding `[d_vocab, d_model]` (the embedding when tied).
fn unembedding<T: Float>(model: &Gpt<T>) -> Vec<f64> {
    values(model, "unembed.W_U")
        .or_else(|| values(model, "embed.W_E"))
        .expect("every Gpt unembeds")
}

/// TransformerLens's built-in detection pattern `which` ([`DETECTORS`]) of
/// `toks` into `out` `[T, T]`.
pub fn detection_pattern(which: usize, toks: &[u32], out: &mut [f64]) {
    let t = toks.len();
    out.iter_mut().for_each(|x| *x = 0.0);
    for i in 0..t {
        for j in 0..=i {
            out[i * t + j] = f64::from(match which {
                0 => j + 1 == i,
                1 => j < i && toks[j] == toks[i],
                _ => j >= 1 && toks[j - 1] == toks[i] && j - 1 < i,
            });
        }
    }
}

/// A head's circuit as factors `A` `[d, r]` and `B` `[r, d]` (the circuit is `A·B`).
struct Factors {
    a: Vec<f64>,
    b: Vec<f64>,
}

/// `XᵀX` of row-major `[rows, cols]` `x`, or `X·Xᵀ` with `rows_gram`.
fn gram(x: &[f64], rows: usize, cols: usize, rows_gram: bool) -> Vec<f64> {
    let mut g = vec![0.0; if rows_gram { rows * rows } else { cols * cols }];
    if rows_gram {
        matmul(&mut g, x, Op::N, x, Op::T, rows, cols, rows, false);
    } else {
        matmul(&mut g, x, Op::T, x, Op::N, cols, rows, cols, false);
    }
    g
}

/// `tr(P Q)` of two `[r, r]` matrices.
fn trace_of_product(p: &[f64], q: &[f64], r: usize) -> f64 {
    (0..r)
        .map(|i| (0..r).map(|k| p[i * r + k] * q[k * r + i]).sum::<f64>())
        .sum()
}

/// `‖A₁B₁A₂B₂‖_F / (‖A₁B₁‖_F ‖A₂B₂‖_F)` from the factors alone.
fn comp(left: &Factors, right: &Factors, d: usize, r: usize) -> f64 {
    let mut m = vec![0.0; r * r];
    matmul(&mut m, &left.b, Op::N, &right.a, Op::N, r, d, r, false);
    let ga = gram(&left.a, d, r, false); // A₁ᵀA₁ [r, r]
    let gb = gram(&right.b, r, d, true); // B₂B₂ᵀ [r, r]
                                         // tr(GA · M · GB · Mᵀ)
    let mut t1 = vec![0.0; r * r];
    matmul(&mut t1, &ga, Op::N, &m, Op::N, r, r, r, false);
    let mut t2 = vec![0.0; r * r];
    matmul(&mut t2, &gb, Op::N, &m, Op::T, r, r, r, false);
    let prod = trace_of_product(&t1, &t2, r).max(0.0).sqrt();
    let norm = |f: &Factors| {
        trace_of_product(&gram(&f.a, d, r, false), &gram(&f.b, r, d, true), r)
            .max(0.0)
            .sqrt()
    };
    let den = norm(left) * norm(right);
    if den > 0.0 {
        prod / den
    } else {
        0.0
    }
}

/// The OV, QK and QKᵀ circuits of head `h` of layer `l` as TransformerLens
/// writes them (`x @ W` conventions): `OV = W_V[h] W_O[h]`, `QK = W_Q[h] W_K[h]ᵀ`.
fn circuits<T: Float>(model: &Gpt<T>, l: usize, h: usize) -> [Factors; 3] {
    let c = &model.cfg;
    let (d, dh, hd) = (c.d_model, c.d_head, c.n_heads * c.d_head);
    let w = |name: &str| -> Vec<f64> {
        let p = model
            .param(&format!("blocks.{l}.attn.{name}"))
            .unwrap_or_else(|| panic!("every Gpt has {name}"));
        p.value().iter().map(|x| x.as_f64()).collect()
    };
    // our W_Q, W_K, W_V: [H·dh, d] (rows of head h: TransformerLens's W[h]ᵀ);
    // W_O: [d, H·dh] (columns of head h: TransformerLens's W_O[h]ᵀ)
    let rows = |x: &[f64]| x[h * dh * d..(h + 1) * dh * d].to_vec(); // [dh, d]
    let transpose = |x: &[f64], r: usize, cc: usize| -> Vec<f64> {
        let mut o = vec![0.0; r * cc];
        for i in 0..r {
            for j in 0..cc {
                o[j * r + i] = x[i * cc + j];
            }
        }
        o
    };
    let (q, k, v) = (rows(&w("W_Q")), rows(&w("W_K")), rows(&w("W_V")));
    let wo = w("W_O");
    let o_t: Vec<f64> = (0..dh) // TransformerLens's W_O[h]: [dh, d]
        .flat_map(|cc| (0..d).map(move |i| (i, cc)))
        .map(|(i, cc)| wo[i * hd + h * dh + cc])
        .collect();
    [
        Factors {
            a: transpose(&v, dh, d),
            b: o_t,
        },
        Factors {
            a: transpose(&q, dh, d),
            b: k.clone(),
        },
        Factors {
            a: transpose(&k, dh, d),
            b: q,
        },
    ]
}

/// Q-, K- and V-composition of every pair of heads in consecutive layers.
pub fn composition_scores<T: Float>(model: &Gpt<T>) -> [Vec<Vec<Vec<f64>>>; 3] {
    let c = &model.cfg;
    let (d, r, nh) = (c.d_model, c.d_head, c.n_heads);
    let all: Vec<Vec<[Factors; 3]>> = (0..c.n_layers)
        .map(|l| (0..nh).map(|h| circuits(model, l, h)).collect())
        .collect();
    let mut out: [Vec<Vec<Vec<f64>>>; 3] = Default::default();
    for l in 1..c.n_layers {
        for (mode, o) in out.iter_mut().enumerate() {
            let right = |h2: usize| match mode {
                0 => &all[l][h2][1],
                1 => &all[l][h2][2],
                _ => &all[l][h2][0],
            };
            o.push(
                (0..nh)
                    .map(|h1| {
                        (0..nh)
                            .map(|h2| comp(&all[l - 1][h1][0], right(h2), d, r))
                            .collect()
                    })
                    .collect(),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection_patterns_are_transformer_lens_s() {
        let toks = [3, 5, 3, 5];
        let mut p = vec![0.0; 16];
        detection_pattern(0, &toks, &mut p);
        assert_eq!(
            p,
            [0., 0., 0., 0., 1., 0., 0., 0., 0., 1., 0., 0., 0., 0., 1., 0.]
        );
        detection_pattern(1, &toks, &mut p);
        assert_eq!(
            p,
            [0., 0., 0., 0., 0., 0., 0., 0., 1., 0., 0., 0., 0., 1., 0., 0.]
        );
        // induction: query 2 (a 3) attends to key 1 (after the earlier 3)
        detection_pattern(2, &toks, &mut p);
        assert_eq!(
            p,
            [0., 0., 0., 0., 0., 0., 0., 0., 0., 1., 0., 0., 0., 0., 1., 0.]
        );
    }

    /// The factored composition score is the plain one, `‖LR‖/(‖L‖‖R‖)`, of
    /// the `d × d` circuits built directly.
    #[test]
    #[allow(clippy::needless_range_loop)]
    fn factored_composition_is_the_dense_one() {
        use rand::SeedableRng;
        let cfg = mechlab_engine::gpt::GptConfig {
            n_layers: 2,
            d_model: 6,
            n_heads: 2,
            d_head: 3,
            d_mlp: 0,
            n_ctx: 4,
            d_vocab: 5,
            init_range: 0.5,
            ..Default::default()
        };
        let m = Gpt::<f64>::new(&cfg, &mut rand_chacha::ChaCha8Rng::seed_from_u64(3)).unwrap();
        let scores = composition_scores(&m);
        let dense = |f: &Factors| {
            let mut o = vec![0.0; 36];
            matmul(&mut o, &f.a, Op::N, &f.b, Op::N, 6, 3, 6, false);
            o
        };
        let fro = |x: &[f64]| x.iter().map(|v| v * v).sum::<f64>().sqrt();
        for h1 in 0..2 {
            for h2 in 0..2 {
                let (a, b) = (circuits(&m, 0, h1), circuits(&m, 1, h2));
                let ov = dense(&a[0]);
                for (mode, r) in [(0, &b[1]), (1, &b[2]), (2, &b[0])] {
                    let rd = dense(r);
                    let mut p = vec![0.0; 36];
                    matmul(&mut p, &ov, Op::N, &rd, Op::N, 6, 6, 6, false);
                    let want = fro(&p) / (fro(&ov) * fro(&rd));
                    let got = scores[mode][0][h1][h2];
                    assert!((got - want).abs() < 1e-12, "mode {mode}: {got} vs {want}");
                }
            }
        }
    }
}
