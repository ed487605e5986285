//! The paper's minimal two-layer model: a positional first layer and a linear,
//! token-only second layer, with `S + T` parameters in all.
//!
//! Edelman et al. analyse a stripped-down model (`mingpt/min_model.py`, the
//! notebook's "Minimal Model") that keeps exactly the two pieces a statistical
//! induction head needs. Tokens are one-hot, `e_i = onehot(x_i)` (`[S]`).
//!
//! - **Layer 1** mixes earlier tokens by position only:
//!   `l_j = Σ_{k ≤ j} A_{jk} e_k`, with `A_{jk}` a function of the distance
//!   `j − k` through one learned weight per distance, `v` (`[T]`): either a
//!   causal softmax over `v_{j−k}` (`softmax`, the authors' committed code) or the
//!   weights themselves (`linear`, the notebook's earlier version).
//! - **Layer 2** is linear attention from the current token to those mixtures:
//!   `B_{ij} = e_iᵀ W l_j` for `j ≤ i` (`W`: `[S, S]`), and the logits are
//!   `z_i = Σ_{j ≤ i} B_{ij} e_j` (no softmax inside the model; the loss takes
//!   the cross-entropy of `z_i` against `x_{i+1}`).
//!
//! With `v` on distance 1 and `W ∝ I`, `z_i[s]` counts the transitions
//! `x_i → s` seen so far: the in-context bigram. With `v` flat, `l_j` is the
//! running unigram histogram and the model can only reach the unigram strategy.
//!
//! The authors' `min_model.py` calls `masked_fill` out of place, so its softmax
//! attends to later positions too (and reads the target); here the mask is
//! applied, as the model's definition intends. Their init (`v = 0`, every entry
//! of `W` 0.01) and optimiser (SGD, learning rate 1 for `v` and the run's rate
//! for `W`, set here with `train.lr_scale`) are the presets' defaults.
//!
//! Forward and backward are written by hand: the model is two small bilinear
//! maps, and the engine's layers (built for `[T, D]` activations with
//! projections) would only add copies. The batch is split into the engine's
//! fixed chunks and reduced in order, as in [`super::model`].
//!
//! ```
//! use mechlab::papers::markov_icl::minimal::{Layer1, MinimalModel};
//! let mut m = MinimalModel::<f64>::new(2, 8, Layer1::Softmax);
//! let (logits, pats) = m.run_one(&[0, 1, 1, 0]);
//! // at init every weight is 0.01 and l_j sums to 1, so B_ij = 0.01 for j ≤ i:
//! // position 3 has seen token 0 twice and token 1 twice
//! assert!((logits[3 * 2] - 0.02).abs() < 1e-15 && (logits[3 * 2 + 1] - 0.02).abs() < 1e-15);
//! assert!((pats[0][3 * 4] - 0.25).abs() < 1e-15); // layer 1 uniform over 4 keys
//! ```

use mechlab_engine::layers::loss::{cross_entropy_logits, Reduction};
use mechlab_engine::layers::softmax;
use mechlab_engine::parallel::{for_each_chunk, reduce_ordered, N_CHUNKS};
use mechlab_engine::{param, Float, Param, Parameters};
use serde::{Deserialize, Serialize};

/// How layer 1 turns the distance weights `v` into its pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layer1 {
    /// `A_{jk} = softmax_{k ≤ j}(v_{j−k})`: rows are distributions.
    Softmax,
    /// `A_{jk} = v_{j−k}`: unnormalised weights.
    Linear,
}

/// Index of `v` and `W` in [`MinimalModel::params`].
const V: usize = 0;
const W: usize = 1;

/// The minimal model: `v` (`blocks.0.attn.v`, `[T]`) and `W` (`blocks.1.attn.W`, `[S, S]`).
pub struct MinimalModel<T: Float> {
    pub vocab: usize,
    pub max_len: usize,
    pub layer1: Layer1,
    pub params: Vec<Param<T>>,
    work: Vec<Work<T>>,
}

/// One chunk's activations for one sequence, and its accumulators.
#[derive(Clone)]
struct Work<T> {
    t: usize,
    // layer-1 pattern A: [T, T] (shared by every sequence of the chunk)
    a: Vec<T>,
    // l: [T, S], b: [T, T] (layer-2 scores), logits / dlogits: [T, S]
    l: Vec<T>,
    b: Vec<T>,
    // bv: [S, T] (B's row for each token), run: [S, S] (running sums of bv)
    bv: Vec<T>,
    run: Vec<T>,
    logits: Vec<T>,
    dlogits: Vec<T>,
    labels: Vec<Option<usize>>,
    // dl: [T, S]; da: [T, T] summed over the chunk's sequences
    dl: Vec<T>,
    da: Vec<T>,
    grads: [Vec<T>; 2],
    loss: f64,
}

impl<T: Float> Work<T> {
    fn new(s: usize, max_len: usize, t: usize) -> Self {
        let z = |n: usize| vec![T::zero(); n];
        Work {
            t,
            a: z(t * t),
            l: z(t * s),
            b: z(t * t),
            bv: z(s * t),
            run: z(s * s),
            logits: z(t * s),
            dlogits: z(t * s),
            labels: vec![None; t],
            dl: z(t * s),
            da: z(t * t),
            grads: [z(max_len), z(s * s)],
            loss: 0.0,
        }
    }
}

impl<T: Float> MinimalModel<T> {
    /// The model at the authors' init: `v = 0`, every entry of `W` 0.01.
    pub fn new(vocab: usize, max_len: usize, layer1: Layer1) -> Self {
        let params = vec![
            param("blocks.0.attn.v", "v", &[max_len], vec![T::zero(); max_len]),
            param(
                "blocks.1.attn.W",
                "W",
                &[vocab, vocab],
                vec![T::of(0.01); vocab * vocab],
            ),
        ];
        MinimalModel {
            vocab,
            max_len,
            layer1,
            params,
            work: Vec::new(),
        }
    }

    fn ensure_work(&mut self, t: usize) {
        if self.work.first().is_none_or(|w| w.t != t) {
            self.work = vec![Work::new(self.vocab, self.max_len, t); N_CHUNKS];
        }
    }

    /// Mean next-token cross-entropy over `tokens` (`[B, T + 1]`); with `grad`,
    /// the gradients are accumulated into the parameters.
    pub fn loss(&mut self, tokens: &[u8], len: usize, grad: bool) -> T {
        let (b, t) = (tokens.len() / len, len - 1);
        assert!(
            t <= self.max_len,
            "sequence longer than the model's max_len"
        );
        self.ensure_work(t);
        let inv = 1.0 / (b * t) as f64;
        let (params, s, layer1) = (&self.params, self.vocab, self.layer1);
        for_each_chunk(b, &mut self.work, |_, items, w| {
            w.loss = 0.0;
            pattern(layer1, params[V].value(), t, &mut w.a);
            if grad {
                w.grads.iter_mut().for_each(|g| g.fill(T::zero()));
                w.da.fill(T::zero());
            }
            for i in items {
                let seq = &tokens[i * len..(i + 1) * len];
                forward(s, params[W].value(), &seq[..t], w, false);
                for (p, lab) in w.labels.iter_mut().enumerate() {
                    *lab = Some(seq[p + 1] as usize);
                }
                let out =
                    cross_entropy_logits(&mut w.dlogits, &w.logits, &w.labels, s, Reduction::Sum);
                w.loss += out.loss;
                if grad {
                    let sc = T::of(inv);
                    w.dlogits.iter_mut().for_each(|x| *x *= sc);
                    backward(s, params[W].value(), &seq[..t], w);
                }
            }
            if grad {
                pattern_backward(layer1, t, &w.a, &mut w.da, &mut w.grads[V]);
            }
        });
        if grad {
            for (k, p) in self.params.iter_mut().enumerate() {
                reduce_ordered(p.grad_mut(), &self.work, |w| &w.grads[k]);
            }
        }
        T::of(self.work.iter().map(|w| w.loss).sum::<f64>() * inv)
    }

    /// Runs one input (`[T]`): its logits `[T, S]` and the two layers' patterns,
    /// `[1, T, T]` each (layer 2's is the raw linear score `B`, zero above the diagonal).
    pub fn run_one(&mut self, input: &[u8]) -> (Vec<T>, [Vec<T>; 2]) {
        let t = input.len();
        self.ensure_work(t);
        let w = &mut self.work[0];
        pattern(self.layer1, self.params[V].value(), t, &mut w.a);
        forward(self.vocab, self.params[W].value(), input, w, true);
        (w.logits.clone(), [w.a.clone(), w.b.clone()])
    }
}

/// Rescales each row `i` of a `[T, T]` causal weight matrix to the share of its
/// total absolute weight on each key `j ≤ i`; an all-zero row becomes uniform
/// over its keys (the model then favours none).
pub fn row_shares<T: Float>(m: &mut [T], t: usize) {
    for (i, row) in m.chunks_exact_mut(t).enumerate() {
        let tot: T = row[..=i].iter().map(|x| x.abs()).sum();
        for (j, x) in row.iter_mut().enumerate() {
            *x = if j > i {
                T::zero()
            } else if tot > T::zero() {
                x.abs() / tot
            } else {
                T::of(1.0 / (i + 1) as f64)
            };
        }
    }
}

/// Layer 1's pattern from the distance weights.
fn pattern<T: Float>(layer1: Layer1, v: &[T], t: usize, a: &mut [T]) {
    // v: [T_max] -> a: [T, T], zero above the diagonal
    for j in 0..t {
        let row = &mut a[j * t..(j + 1) * t];
        for (k, x) in row.iter_mut().enumerate() {
            *x = if k <= j { v[j - k] } else { T::zero() };
        }
        if layer1 == Layer1::Softmax {
            softmax::row_in_place(row, |k| k <= j);
        }
    }
}

/// Turns the chunk's summed `dA` into `dv` (adds into `dv`).
fn pattern_backward<T: Float>(layer1: Layer1, t: usize, a: &[T], da: &mut [T], dv: &mut [T]) {
    for j in 0..t {
        let g = &mut da[j * t..j * t + j + 1];
        if layer1 == Layer1::Softmax {
            softmax::backward_row_in_place(g, &a[j * t..j * t + j + 1]);
        }
        for (k, &gk) in g.iter().enumerate() {
            dv[j - k] += gk;
        }
    }
}

/// One sequence's forward: `l`, the logits and, with `scores`, layer 2's `B`
/// (training reads only the logits). Every sum is the in-order chain the
/// definition spells out, computed in an order with fewer steps:
/// - `l[j, c]` takes `A[j, k]` for `k ≤ j` with `x_k = c` in order of `k`; key by
///   key, the rows' chains are independent of each other.
/// - `B[i, j] = W[x_i] · l_j` depends on `i` only through `x_i`, so it is
///   computed once per token (`bv`), and `z[i, c] = Σ_(j ≤ i, x_j = c) B[i, j]` in
///   order of `j` is the running sum of `bv[x_i, j]` over those `j` at `i`:
///   `O(T·S²)` instead of `O(T²·S)`, with the same bits.
fn forward<T: Float>(s: usize, wm: &[T], x: &[u8], w: &mut Work<T>, scores: bool) {
    let t = x.len();
    // l[j] = Σ_{k ≤ j} A[j, k] e_{x_k}                       l: [T, S]
    w.l.fill(T::zero());
    for (k, &xk) in x.iter().enumerate() {
        let c = xk as usize;
        for j in k..t {
            w.l[j * s + c] += w.a[j * t + k];
        }
    }
    // bv[a, j] = Σ_c W[a, c] l[j, c]                         bv: [S, T]
    for a in 0..s {
        let wrow = &wm[a * s..(a + 1) * s];
        for j in 0..t {
            w.bv[a * t + j] = wrow
                .iter()
                .zip(&w.l[j * s..(j + 1) * s])
                .map(|(&p, &q)| p * q)
                .sum();
        }
    }
    // run[a, c] = Σ_{j ≤ i, x_j = c} bv[a, j]; z[i] = run[x_i]    z: [T, S]
    w.run.fill(T::zero());
    for (i, &xi) in x.iter().enumerate() {
        let xi = xi as usize;
        for a in 0..s {
            w.run[a * s + xi] += w.bv[a * t + i];
        }
        w.logits[i * s..(i + 1) * s].copy_from_slice(&w.run[xi * s..(xi + 1) * s]);
    }
    if scores {
        // B[i, j] = bv[x_i, j] (j ≤ i)                        B: [T, T]
        w.b.fill(T::zero());
        for (i, &xi) in x.iter().enumerate() {
            let xi = xi as usize;
            w.b[i * t..i * t + i + 1].copy_from_slice(&w.bv[xi * t..xi * t + i + 1]);
        }
    }
}

/// Backward of one sequence given `dlogits`: adds into `dW` and the chunk's `dA`.
fn backward<T: Float>(s: usize, wm: &[T], x: &[u8], w: &mut Work<T>) {
    let t = x.len();
    w.dl.fill(T::zero());
    let dw = &mut w.grads[W];
    // dB[i, j] = dz[i, x_j]. Two passes over the (i, j) pairs in the same order:
    // dW's sums are long chains that wait on each addition, dl's are one per
    // key and independent, so apart the second pass runs at the adds' throughput.
    for (i, &xi) in x.iter().enumerate() {
        let xi = xi as usize;
        let (dwrow, dz) = (
            &mut dw[xi * s..(xi + 1) * s],
            &w.dlogits[i * s..(i + 1) * s],
        );
        let mut c = 0;
        while c + 2 <= s {
            dw_cols::<T, 2>(dwrow, dz, &w.l, &x[..=i], s, c);
            c += 2;
        }
        if c < s {
            dw_cols::<T, 1>(dwrow, dz, &w.l, &x[..=i], s, c);
        }
    }
    for (i, &xi) in x.iter().enumerate() {
        let xi = xi as usize;
        let (wrow, dz) = (&wm[xi * s..(xi + 1) * s], &w.dlogits[i * s..(i + 1) * s]);
        for (dl, &xj) in w.dl.chunks_exact_mut(s).zip(x).take(i + 1) {
            let db = dz[xj as usize];
            for (g, &wc) in dl.iter_mut().zip(wrow) {
                *g += db * wc;
            }
        }
    }
    // dA[j, k] = dl[j, x_k] (k ≤ j)
    for j in 0..t {
        let dl = &w.dl[j * s..(j + 1) * s];
        for (g, &xk) in w.da[j * t..j * t + j + 1].iter_mut().zip(x) {
            *g += dl[xk as usize];
        }
    }
}

/// `dW[x_i, c0..c0 + G] += Σ_(j ≤ i) dz[i, x_j] · l[j, c0..c0 + G]` (`x` is `x[..=i]`),
/// each sum in order of `j` with its running value in a register: through
/// memory, every addition also waited on the store of the one before.
#[inline(always)]
fn dw_cols<T: Float, const G: usize>(
    dwrow: &mut [T],
    dz: &[T],
    l: &[T],
    x: &[u8],
    s: usize,
    c0: usize,
) {
    let mut acc: [T; G] = std::array::from_fn(|k| dwrow[c0 + k]);
    for (lj, &xj) in l.chunks_exact(s).zip(x) {
        let db = dz[xj as usize];
        for k in 0..G {
            acc[k] += db * lj[c0 + k];
        }
    }
    dwrow[c0..c0 + G].copy_from_slice(&acc);
}

impl<T: Float> Parameters<T> for MinimalModel<T> {
    mechlab_engine::parameters!(T; params);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::papers::markov_icl::data::{sample, ChainSpec, Prior};
    use crate::rng::{stream, Stream};
    use mechlab_engine::gradcheck::{check_params, DEFAULT_H};

    /// A model away from its symmetric init, so every gradient entry is exercised.
    fn model(layer1: Layer1) -> MinimalModel<f64> {
        let mut m = MinimalModel::<f64>::new(3, 9, layer1);
        for (k, p) in m.params.iter_mut().enumerate() {
            for (i, x) in p.value_mut().iter_mut().enumerate() {
                *x = ((i * 7 + k * 3) % 5) as f64 * 0.3 - 0.6;
            }
        }
        m
    }

    #[test]
    fn gradient_matches_finite_differences_in_f64() {
        let spec = ChainSpec {
            vocab: 3,
            order: 2,
            prior: Prior::Dirichlet,
            alpha: 1.0,
            len: 8,
            first: crate::papers::markov_icl::data::FirstToken::Stationary,
        };
        let tok = sample(&spec, 11, &mut stream(3, Stream::Data))
            .unwrap()
            .tokens;
        for layer1 in [Layer1::Softmax, Layer1::Linear] {
            let mut m = model(layer1);
            let results = check_params(
                &mut m,
                |m: &MinimalModel<f64>| {
                    let mut c = MinimalModel::<f64>::new(3, 9, layer1);
                    c.params = m.params.clone();
                    c.loss(&tok, 8, false)
                },
                |m| {
                    m.loss(&tok, 8, true);
                },
                DEFAULT_H,
            );
            for (name, r) in results {
                r.assert_below(1e-6, &format!("{name} ({layer1:?})"));
            }
        }
    }

    #[test]
    fn previous_token_layer_one_and_identity_w_count_the_transitions() {
        // v one-hot on distance 1 (linear) and W = I: z_i[s] = #{j ≤ i : x_{j−1} = x_i, x_j = s}
        let mut m = MinimalModel::<f64>::new(2, 8, Layer1::Linear);
        m.params[V].value_mut().fill(0.0);
        m.params[V].value_mut()[1] = 1.0;
        m.params[W]
            .value_mut()
            .copy_from_slice(&[1.0, 0.0, 0.0, 1.0]);
        let x = [0u8, 1, 1, 0, 1, 0];
        let (z, pats) = m.run_one(&x);
        for i in 0..x.len() {
            for s in 0..2u8 {
                let count = (1..=i).filter(|&j| x[j - 1] == x[i] && x[j] == s).count();
                assert_eq!(
                    z[i * 2 + s as usize],
                    count as f64,
                    "position {i}, symbol {s}"
                );
            }
        }
        assert_eq!(pats[0][3 * 6 + 2], 1.0);
        assert!(
            pats[1][2 * 6 + 3..2 * 6 + 6].iter().all(|&b| b == 0.0),
            "causal"
        );
    }

    #[test]
    fn row_shares_are_causal_distributions() {
        let mut p = vec![0.0, 9.0, 9.0, 2.0, -2.0, 9.0, 0.0, 0.0, 0.0];
        row_shares(&mut p, 3);
        assert_eq!(
            p,
            [
                1.0,
                0.0,
                0.0,
                0.5,
                0.5,
                0.0,
                1.0 / 3.0,
                1.0 / 3.0,
                1.0 / 3.0
            ]
        );
    }

    #[test]
    fn the_softmax_pattern_is_causal_and_ignores_later_tokens() {
        let mut m = model(Layer1::Softmax);
        let (za, pa) = m.run_one(&[0, 1, 2, 2, 1]);
        let (zb, _) = m.run_one(&[0, 1, 2, 0, 0]);
        assert_eq!(
            za[..3 * 3],
            zb[..3 * 3],
            "positions 0..3 do not see positions 3, 4"
        );
        for (j, row) in pa[0].chunks_exact(5).enumerate() {
            assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-12);
            assert!(row[j + 1..].iter().all(|&a| a == 0.0));
        }
    }

    /// The forward's and backward's reordered loops give the bits of the loops
    /// the definitions spell out (pair by pair over `j ≤ i`), in f32 with three
    /// tokens (so both register widths of the dW pass run).
    #[test]
    fn reordered_loops_give_the_definitions_bits() {
        let (s, t) = (3, 23);
        let x: Vec<u8> = (0..t).map(|i| ((i * 7 + i / 3) % s) as u8).collect();
        let wm: Vec<f32> = (0..s * s).map(|k| 0.3 - 0.11 * k as f32).collect();
        let mut w = Work::<f32>::new(s, t, t);
        let v: Vec<f32> = (0..t).map(|k| (k as f32 * 0.7).sin()).collect();
        pattern(Layer1::Softmax, &v, t, &mut w.a);
        forward(s, &wm, &x, &mut w, true);
        w.dlogits = (0..t * s).map(|k| (k as f32 * 0.37).cos() * 1e-2).collect();
        w.grads[W].fill(0.25);
        w.da.fill(0.0);
        backward(s, &wm, &x, &mut w);
        // the definitions, pair by pair
        let (a, dz) = (&w.a, &w.dlogits);
        let mut l = vec![0.0f32; t * s];
        for j in 0..t {
            for k in 0..=j {
                l[j * s + x[k] as usize] += a[j * t + k];
            }
        }
        let (mut z, mut b) = (vec![0.0f32; t * s], vec![0.0f32; t * t]);
        let (mut dw, mut dl) = (vec![0.25f32; s * s], vec![0.0f32; t * s]);
        for i in 0..t {
            let xi = x[i] as usize;
            for j in 0..=i {
                let bij: f32 = (0..s).map(|c| wm[xi * s + c] * l[j * s + c]).sum();
                b[i * t + j] = bij;
                z[i * s + x[j] as usize] += bij;
                let db = dz[i * s + x[j] as usize];
                for c in 0..s {
                    dw[xi * s + c] += db * l[j * s + c];
                    dl[j * s + c] += db * wm[xi * s + c];
                }
            }
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&w.l), bits(&l), "l");
        assert_eq!(bits(&w.logits), bits(&z), "logits");
        assert_eq!(bits(&w.b), bits(&b), "B");
        assert_eq!(bits(&w.grads[W]), bits(&dw), "dW");
        assert_eq!(bits(&w.dl), bits(&dl), "dl");
    }
}
