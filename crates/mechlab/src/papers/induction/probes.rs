//! Probes of the induction-head mechanism (Chen et al. 2024): selector, copier,
//! classifier, and generalisation.
//!
//! - **copier**: which distance each layer-1 head copies (its attention mass per
//!   relative distance at a position where every distance exists);
//! - **selector**: the kernel subset with the largest normalised `c_δ²`, read as the
//!   set of distances its heads copy, against the true parents and against the set
//!   that maximises the modified χ² mutual information of the data;
//! - **classifier**: `a`;
//! - **generalisation**: the trained parameters on fresh data of other lengths `L`
//!   and priors `α`, beside the Bayes and uniform baselines.
//!
//! ```
//! use mechlab::papers::induction::probes::parent_sets;
//! let sets = parent_sets(3, 2);
//! assert_eq!(sets.len(), 6); // {1},{2},{3},{1,2},{1,3},{2,3}
//! ```

use crate::papers::induction::data::{
    baseline_losses, code_loss, generate_with, modified_chi2_mi, nll, Baseline, MarkovData,
    MarkovSpec,
};
use crate::papers::induction::full::Full;
use crate::papers::induction::simplified::Simplified;
use mechlab_engine::layers::softmax;
use mechlab_engine::{Float, Parameters};

/// What the probes read from either induction model.
pub trait InductionModel<T: Float>: Parameters<T> + Send {
    fn n_heads(&self) -> usize;
    /// The kernel's subsets (bit `c` = component `c`).
    fn subsets(&self) -> &[u32];
    /// `c_δ² / Σ_{δ_0=0} c_δ²` per subset.
    fn c_shares(&self) -> Vec<f64>;
    /// `[H, 2H-1]`: each head's RPE attention over distances `1..=2H-1` at a
    /// position where all exist (the full model: the RPE part alone, without QK
    /// and the distance-0 key).
    fn interior_pattern(&self) -> Vec<f64>;
    fn a(&self) -> f64;
    fn loss(&mut self, tokens: &[u8], l: usize, grad: bool) -> T;
    fn predict(&mut self, tokens: &[u8], l: usize, out: &mut [T]) -> T;
    fn set_groups(&mut self, groups: &[String]);
    /// Layer-1 pattern `[L+1, H, 2H]` (by distance) and the query's layer-2
    /// pattern `[L]` on one sequence `[L + 1]`.
    fn patterns(&mut self, seq: &[u8], l: usize) -> (Vec<f64>, Vec<f64>);
    /// Ablates the layer-1 heads of `mask` (bit `h`) in training and evaluation;
    /// `false` when the model cannot (the table kernels have no hook sites, so
    /// only `mask = 0` is accepted there).
    fn set_ablated(&mut self, mask: u16) -> bool {
        mask == 0
    }
    /// Clamps the layer-1 patterns of the heads in `mask` (bit `h`); `false` when
    /// the model cannot (as for [`InductionModel::set_ablated`]).
    fn set_clamped(&mut self, mask: u16) -> bool {
        mask == 0
    }
    /// The clamp's state for a checkpoint (mask and copied logits), if any.
    fn clamp_state(&self) -> Option<(u16, Vec<f64>)> {
        None
    }
    /// Restores [`InductionModel::clamp_state`]; `false` when it does not fit.
    fn load_clamp_state(&mut self, _mask: u16, _w: &[f64]) -> bool {
        false
    }
}

impl<T: Float> InductionModel<T> for Simplified<T> {
    fn n_heads(&self) -> usize {
        self.cfg.n_heads
    }
    fn subsets(&self) -> &[u32] {
        &self.subsets
    }
    fn c_shares(&self) -> Vec<f64> {
        Simplified::c_shares(self)
    }
    fn interior_pattern(&self) -> Vec<f64> {
        Simplified::interior_pattern(self)
    }
    fn a(&self) -> f64 {
        self.a.value()[0].as_f64()
    }
    fn loss(&mut self, tokens: &[u8], l: usize, grad: bool) -> T {
        Simplified::loss(self, tokens, l, grad)
    }
    fn predict(&mut self, tokens: &[u8], l: usize, out: &mut [T]) -> T {
        Simplified::predict(self, tokens, l, out)
    }
    fn set_groups(&mut self, groups: &[String]) {
        Simplified::set_groups(self, groups)
    }
    fn patterns(&mut self, seq: &[u8], l: usize) -> (Vec<f64>, Vec<f64>) {
        Simplified::patterns(self, seq, l)
    }
}

pub(crate) fn shares(subsets: &[u32], c: &[f64]) -> Vec<f64> {
    let z: f64 = subsets
        .iter()
        .zip(c)
        .filter(|(m, _)| *m & 1 == 0)
        .map(|(_, v)| v * v)
        .sum();
    subsets
        .iter()
        .zip(c)
        .map(|(m, v)| if m & 1 == 0 { v * v / z } else { 0.0 })
        .collect()
}

/// Head `h`'s softmax over its window of distances `h+1 ..= h+H` from `W`
/// (`[2H-1, H]`), at a position where every distance exists: `[H, 2H-1]` (head,
/// distance − 1), zero outside the window.
pub(crate) fn rpe_pattern(w: &[f64], h: usize) -> Vec<f64> {
    let nd = 2 * h - 1;
    let mut out = vec![0.0; h * nd];
    for hd in 0..h {
        let row = &mut out[hd * nd + hd..hd * nd + hd + h];
        for (j, x) in row.iter_mut().enumerate() {
            *x = w[(hd + j) * h + hd];
        }
        softmax::row_in_place(row, |_| true);
    }
    out
}

impl<T: Float> InductionModel<T> for crate::papers::induction::direct::Direct<T> {
    fn n_heads(&self) -> usize {
        self.cfg.n_heads
    }
    fn subsets(&self) -> &[u32] {
        &self.subsets
    }
    fn c_shares(&self) -> Vec<f64> {
        Self::c_shares(self)
    }
    fn interior_pattern(&self) -> Vec<f64> {
        Self::interior_pattern(self)
    }
    fn a(&self) -> f64 {
        self.a.value()[0].as_f64()
    }
    fn loss(&mut self, tokens: &[u8], l: usize, grad: bool) -> T {
        Self::loss(self, tokens, l, grad)
    }
    fn predict(&mut self, tokens: &[u8], l: usize, out: &mut [T]) -> T {
        Self::predict(self, tokens, l, out)
    }
    fn set_groups(&mut self, groups: &[String]) {
        Self::set_groups(self, groups)
    }
    fn patterns(&mut self, seq: &[u8], l: usize) -> (Vec<f64>, Vec<f64>) {
        Self::patterns(self, seq, l)
    }
    fn set_ablated(&mut self, mask: u16) -> bool {
        Self::set_ablated(self, mask);
        true
    }
    fn set_clamped(&mut self, mask: u16) -> bool {
        if self.full.is_some() {
            return mask == 0;
        }
        Self::set_clamped(self, mask);
        true
    }
    fn clamp_state(&self) -> Option<(u16, Vec<f64>)> {
        Some(Self::clamp_state(self))
    }
    fn load_clamp_state(&mut self, mask: u16, w: &[f64]) -> bool {
        Self::load_clamp_state(self, mask, w)
    }
}

impl<T: Float> InductionModel<T> for Full<T> {
    fn n_heads(&self) -> usize {
        self.cfg.n_heads
    }
    fn subsets(&self) -> &[u32] {
        &self.subsets
    }
    fn c_shares(&self) -> Vec<f64> {
        let c: Vec<f64> = self.c.value().iter().map(|v| v.as_f64()).collect();
        shares(&self.subsets, &c)
    }
    fn interior_pattern(&self) -> Vec<f64> {
        let w: Vec<f64> = self.w.value().iter().map(|v| v.as_f64()).collect();
        rpe_pattern(&w, self.cfg.n_heads)
    }
    fn a(&self) -> f64 {
        self.a.value()[0].as_f64()
    }
    fn loss(&mut self, tokens: &[u8], l: usize, grad: bool) -> T {
        Full::loss(self, tokens, l, grad)
    }
    fn predict(&mut self, tokens: &[u8], l: usize, out: &mut [T]) -> T {
        Full::predict(self, tokens, l, out)
    }
    fn set_groups(&mut self, _groups: &[String]) {}
    fn patterns(&mut self, seq: &[u8], l: usize) -> (Vec<f64>, Vec<f64>) {
        Full::patterns(self, seq, l)
    }
}

/// TransformerLens-style head scores on repeated random tokens: each sequence is
/// `T` uniform tokens repeated (`L = 2T`, query at `L`). The previous-token score of
/// layer-1 head `h` is its mean attention to distance 1 over the positions; the
/// induction score of layer 2 is the query's attention on key `L − T`, the token
/// that followed the previous occurrence of the query's context (uniform
/// attention scores `1/L`).
pub fn head_scores<T: Float, M: InductionModel<T>>(
    m: &mut M,
    vocab: usize,
    half: usize,
    n: usize,
    rng: &mut impl rand::Rng,
) -> (Vec<f64>, f64) {
    let h = m.n_heads();
    let l = 2 * half;
    let mut prev = vec![0.0; h];
    let mut ind = 0.0;
    let mut seq = vec![0u8; l + 1];
    for _ in 0..n {
        for i in 0..half {
            seq[i] = rng.random_range(0..vocab) as u8;
            seq[i + half] = seq[i];
        }
        seq[l] = seq[half];
        let (p1, p2) = m.patterns(&seq, l);
        for (hd, pv) in prev.iter_mut().enumerate() {
            *pv += (1..=l).map(|i| p1[(i * h + hd) * 2 * h + 1]).sum::<f64>() / l as f64;
        }
        ind += p2[l - half];
    }
    prev.iter_mut().for_each(|v| *v /= n.max(1) as f64);
    (prev, ind / n.max(1) as f64)
}

/// Every set of distances in `1..=window` with `1 ≤ |P| ≤ max_size`, sorted.
pub fn parent_sets(window: usize, max_size: usize) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    for mask in 1u32..(1 << window) {
        if (mask.count_ones() as usize) <= max_size {
            out.push(
                (0..window)
                    .filter(|k| mask & (1 << k) != 0)
                    .map(|k| k + 1)
                    .collect(),
            );
        }
    }
    out.sort_by_key(|p: &Vec<usize>| (p.len(), p.clone()));
    out
}

/// The distance each head attends to most (1-based), from its interior pattern.
pub fn head_distances<T: Float, M: InductionModel<T>>(m: &M) -> Vec<usize> {
    let h = m.n_heads();
    let nd = 2 * h - 1;
    let p = m.interior_pattern();
    (0..h)
        .map(|hd| {
            (0..nd)
                .max_by(|&a, &b| p[hd * nd + a].total_cmp(&p[hd * nd + b]))
                .map(|r| r + 1)
                .unwrap_or(0)
        })
        .collect()
}

/// The selector's verdict: the winning subset (largest `c_δ²` share among the
/// subsets without the raw token), its share, and the distances its heads copy.
#[derive(Clone, Debug)]
pub struct Selector {
    pub mask: u32,
    pub share: f64,
    pub heads: Vec<usize>,
    pub distances: Vec<usize>,
}

pub fn selector<T: Float, M: InductionModel<T>>(m: &M) -> Selector {
    let shares = m.c_shares();
    let (best, share) = m
        .subsets()
        .iter()
        .zip(&shares)
        .filter(|(mask, _)| *mask & 1 == 0)
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(mask, s)| (*mask, *s))
        .unwrap_or((0, 0.0));
    let dist = head_distances::<T, M>(m);
    let heads: Vec<usize> = (0..m.n_heads())
        .filter(|h| best & (1 << (h + 1)) != 0)
        .collect();
    let mut distances: Vec<usize> = heads.iter().map(|&h| dist[h]).collect();
    distances.sort_unstable();
    distances.dedup();
    Selector {
        mask: best,
        share,
        heads,
        distances,
    }
}

/// Most parent sets the χ² search scores ([`mi_search`]).
pub const MAX_MI_SETS: usize = 512;

/// The search space of the χ² argmax for heads' window `window` (`2H − 1`) and
/// degree `D`: every distance in the window (the first 6 when the window is
/// 5 or less, as before), sets of size up to `D`, the size lowered until at most
/// [`MAX_MI_SETS`] sets remain (H = 3, D = 2: 15 sets; H = 5, D = 2: 45; H = 8,
/// D = 8: sizes ≤ 2, 120 sets).
pub fn mi_search(window: usize, degree: usize) -> (usize, usize) {
    let w = if window <= 6 { window.min(6) } else { window };
    let mut d = degree.max(1);
    while d > 1 && parent_sets(w, d).len() > MAX_MI_SETS {
        d -= 1;
    }
    (w, d)
}

/// The set maximising the modified χ² MI over [`parent_sets`], with every value
/// (the sets are scored in parallel; each value is computed alone, so the result
/// does not depend on the thread count).
pub fn mi_argmax(
    data: &MarkovData,
    window: usize,
    max_size: usize,
    power: f64,
) -> (Vec<usize>, Vec<(Vec<usize>, f64)>) {
    use rayon::prelude::*;
    let all: Vec<(Vec<usize>, f64)> = parent_sets(window, max_size)
        .into_par_iter()
        .map(|p| {
            let v = modified_chi2_mi(data, &p, power);
            (p, v)
        })
        .collect();
    let best = all
        .iter()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(p, _)| p.clone())
        .unwrap_or_default();
    (best, all)
}

/// Mean (code, true) losses of the model on `data`.
pub fn model_losses<T: Float, M: InductionModel<T>>(
    m: &mut M,
    data: &MarkovData,
    floor: f64,
) -> (f64, f64) {
    let s = data.vocab;
    let mut out = vec![T::zero(); data.len() * s];
    m.predict(&data.tokens, data.seq_len, &mut out);
    let mut p = vec![0.0; s];
    let (mut c, mut t) = (0.0, 0.0);
    for b in 0..data.len() {
        for k in 0..s {
            p[k] = out[b * s + k].as_f64();
        }
        c += code_loss(&p, data.target(b));
        t += nll(&p, data.target(b), floor);
    }
    let n = data.len().max(1) as f64;
    (c / n, t / n)
}

/// One generalisation point: the model and the baselines on fresh data.
#[derive(Clone, Debug)]
pub struct GenPoint {
    pub seq_len: usize,
    pub alpha: f64,
    /// (code, true) losses.
    pub model: (f64, f64),
    pub bayes: (f64, f64),
    pub induction: (f64, f64),
    pub uniform: (f64, f64),
}

/// Evaluates the trained model on fresh data of each `(L, α)` in `points`.
pub fn generalisation<T: Float, M: InductionModel<T>>(
    m: &mut M,
    base: &MarkovSpec,
    points: &[(usize, f64)],
    rng: &mut impl rand::Rng,
    floor: f64,
) -> Result<Vec<GenPoint>, String> {
    let mut out = Vec::new();
    for &(seq_len, alpha) in points {
        let spec = MarkovSpec {
            seq_len,
            alpha,
            ..base.clone()
        };
        let data = generate_with(&spec, rng)?;
        let model = model_losses(m, &data, floor);
        out.push(GenPoint {
            seq_len,
            alpha,
            model,
            bayes: baseline_losses(&data, &Baseline::Bayes(spec.parents.clone())),
            induction: baseline_losses(&data, &Baseline::Empirical(spec.parents.clone())),
            uniform: baseline_losses(&data, &Baseline::Uniform),
        });
    }
    Ok(out)
}
