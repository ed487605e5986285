//! Sequences with a latent causal graph over positions (Nichani, Damian & Lee
//! 2024, their `problems.py` `InContextTree`).
//!
//! A sequence has `T` tokens in `[S]`. Positions `0 … T − 2` follow a graph in
//! which each position has at most one parent, earlier than itself; position
//! `T − 1` is the query. Per sequence, a transition matrix `π` with i.i.d.
//! `Dirichlet(α·1)` rows is drawn; a root's token comes from `π`'s stationary law
//! `μ`, a child's from the row of its parent's token; the query is uniform. The
//! target is the whole row `π[x_query]` (a soft label: the law of a child of the
//! query).
//!
//! Controls (not in their code): `redraw` draws the graph afresh for every
//! sequence from the `random` prior, `shuffle` writes the fixed graph's nodes at
//! positions permuted per sequence. Either way no position-to-position rule
//! finds the parents, which is what the first layer is claimed to learn. Every
//! sequence carries its own parents in position terms (`−1` for a root), so
//! probes and the Bayes predictor read the same graph the sampler used.

use crate::rng::substream;
use crate::rng::Stream;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Gamma};
use serde::{Deserialize, Serialize};

/// The graph over positions `0 … T − 2`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GraphKind {
    /// `parent(i) = i − 1`: an in-context Markov chain.
    #[default]
    Chain,
    /// Odd positions have parent `i − 1`, even positions are roots (pairs).
    Icl,
    /// `parent(i)` uniform on {none, 0, …, i − 1}, drawn once from the seed
    /// (their `single_parent.py`).
    Random,
    /// `parent(i)` uniform on {0, …, i − 1}, then dropped with probability ½
    /// (their `many_graphs.ipynb`, Fig. 9).
    RandomHalf,
}

/// What is done to the graph per sequence.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Control {
    /// The run's one graph for every sequence (the paper).
    #[default]
    None,
    /// A fresh graph per sequence from the `random` prior.
    Redraw,
    /// The run's graph, its nodes written at positions permuted per sequence.
    Shuffle,
}

/// The `[data]` section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DataConfig {
    /// `S`, the vocabulary.
    pub vocab: usize,
    /// `T`, the sequence length with the query.
    pub seq_len: usize,
    /// The Dirichlet prior's `α` of each transition row.
    pub alpha: f64,
    pub graph: GraphKind,
    /// An explicit graph: the parent of each of the positions `0 … T − 2`
    /// (`−1`: a root); overrides `graph` when not empty.
    pub parents: Vec<i64>,
    pub control: Control,
    /// Sequences per training step (fresh every step).
    pub batch: usize,
    /// Held-out sequences for the losses and probes.
    pub eval_seqs: usize,
}

impl Default for DataConfig {
    fn default() -> Self {
        DataConfig {
            vocab: 10,
            seq_len: 20,
            alpha: 0.1,
            graph: GraphKind::Chain,
            parents: Vec::new(),
            control: Control::None,
            batch: 256,
            eval_seqs: 16_384,
        }
    }
}

impl DataConfig {
    pub fn check(&self) -> Result<(), String> {
        if !(2..=64).contains(&self.vocab) {
            return Err(format!("data.vocab = {}: must be in 2..=64", self.vocab));
        }
        if !(3..=128).contains(&self.seq_len) {
            return Err(format!(
                "data.seq_len = {}: must be in 3..=128",
                self.seq_len
            ));
        }
        if !(self.alpha.is_finite() && self.alpha > 0.0) {
            return Err(format!(
                "data.alpha = {}: must be finite and > 0",
                self.alpha
            ));
        }
        if !self.parents.is_empty() {
            let n = self.seq_len - 1;
            if self.parents.len() != n {
                return Err(format!(
                    "data.parents has {} entries: it lists the parent of each of the seq_len − 1 = {n} context positions",
                    self.parents.len()
                ));
            }
            if let Some((i, p)) = self
                .parents
                .iter()
                .enumerate()
                .find(|&(i, &p)| p < -1 || p >= i as i64)
            {
                return Err(format!(
                    "data.parents[{i}] = {p}: a parent is an earlier position or −1 (a root)"
                ));
            }
        }
        if self.batch == 0 || self.batch > 1 << 20 {
            return Err(format!("data.batch = {}: must be in 1..=2^20", self.batch));
        }
        if self.eval_seqs < 2 {
            return Err(format!(
                "data.eval_seqs = {}: must be at least 2",
                self.eval_seqs
            ));
        }
        Ok(())
    }
}

/// The run's fixed setting: sizes and the graph.
#[derive(Clone, Debug)]
pub struct Task {
    pub vocab: usize,
    pub seq_len: usize,
    pub alpha: f64,
    /// The run's graph: parent of positions `0 … T − 2` (`−1`: a root).
    pub dag: Vec<i64>,
    pub control: Control,
    gamma: Gamma<f64>,
}

impl Task {
    /// The task of `cfg` (checked); a random graph is drawn from `seed`.
    pub fn new(cfg: &DataConfig, seed: u64) -> Task {
        let mut rng = substream(seed, Stream::Sample, 0x0da6);
        let dag = if cfg.parents.is_empty() {
            draw_graph(cfg.graph, cfg.seq_len - 1, &mut rng)
        } else {
            cfg.parents.clone()
        };
        Task {
            vocab: cfg.vocab,
            seq_len: cfg.seq_len,
            alpha: cfg.alpha,
            dag,
            control: cfg.control,
            gamma: Gamma::new(cfg.alpha, 1.0).expect("data.alpha checked"),
        }
    }

    /// Whether every sequence has the run's graph in position terms.
    pub fn fixed_graph(&self) -> bool {
        self.control == Control::None
    }
}

/// A graph of `kind` over `n` positions.
pub fn draw_graph(kind: GraphKind, n: usize, rng: &mut ChaCha8Rng) -> Vec<i64> {
    (0..n as i64)
        .map(|i| match kind {
            GraphKind::Chain => i - 1,
            GraphKind::Icl => {
                if i % 2 == 1 {
                    i - 1
                } else {
                    -1
                }
            }
            GraphKind::Random => rng.random_range(-1..i),
            GraphKind::RandomHalf => {
                let p = if i == 0 { -1 } else { rng.random_range(0..i) };
                if rng.random::<f64>() < 0.5 {
                    -1
                } else {
                    p
                }
            }
        })
        .collect()
}

/// Sequences `[n, T]`, their soft labels `[n, S]` and parents `[n, T − 1]`.
#[derive(Clone, Debug, Default)]
pub struct Seqs {
    pub n: usize,
    pub x: Vec<u8>,
    pub y: Vec<f64>,
    pub par: Vec<i16>,
}

impl Seqs {
    pub fn zeros(task: &Task, n: usize) -> Seqs {
        Seqs {
            n,
            x: vec![0; n * task.seq_len],
            y: vec![0.0; n * task.vocab],
            par: vec![0; n * (task.seq_len - 1)],
        }
    }

    /// `count` sequences from `rng`.
    pub fn draw(task: &Task, rng: &mut ChaCha8Rng, count: usize) -> Seqs {
        let mut s = Seqs::zeros(task, count);
        let mut w = Sampler::new(task);
        s.fill(task, &mut w, rng, 0..count);
        s
    }

    /// Sequences `items` from `rng`, in order.
    pub fn fill(
        &mut self,
        task: &Task,
        w: &mut Sampler,
        rng: &mut ChaCha8Rng,
        items: std::ops::Range<usize>,
    ) {
        let (t, s) = (task.seq_len, task.vocab);
        for b in items {
            w.sequence(
                task,
                rng,
                &mut self.x[b * t..(b + 1) * t],
                &mut self.y[b * s..(b + 1) * s],
                &mut self.par[b * (t - 1)..(b + 1) * (t - 1)],
            );
        }
    }

    pub fn seq(&self, b: usize, t: usize) -> &[u8] {
        &self.x[b * t..(b + 1) * t]
    }
}

/// The training batch of update `step + 1`, chunk `chunk`: its own stream, so
/// chunks fill in parallel and any thread count gives the same batch.
pub fn chunk_stream(seed: u64, step: u64, chunk: usize) -> ChaCha8Rng {
    substream(seed, Stream::Data, ((step + 1) << 20) | chunk as u64)
}

/// One sequence's scratch: `π`, `μ`, the stationary system and a permutation.
pub struct Sampler {
    pi: Vec<f64>,
    mu: Vec<f64>,
    m: Vec<f64>,
    order: Vec<usize>,
    dag: Vec<i64>,
}

impl Sampler {
    pub fn new(task: &Task) -> Sampler {
        let s = task.vocab;
        Sampler {
            pi: vec![0.0; s * s],
            mu: vec![0.0; s],
            m: vec![0.0; s * s],
            order: (0..task.seq_len - 1).collect(),
            dag: task.dag.clone(),
        }
    }

    /// The transition matrix of the last sequence drawn, `[S, S]`.
    pub fn pi(&self) -> &[f64] {
        &self.pi
    }

    /// Draws one `π` (rows Dirichlet(α)) and its stationary law.
    pub fn draw_pi(&mut self, task: &Task, rng: &mut ChaCha8Rng) {
        let s = task.vocab;
        for row in self.pi.chunks_exact_mut(s) {
            let mut sum = 0.0;
            for v in row.iter_mut() {
                *v = task.gamma.sample(rng);
                sum += *v;
            }
            if sum > 0.0 {
                row.iter_mut().for_each(|v| *v /= sum);
            } else {
                // every Gamma(α) draw underflowed (probability ~1e-30 at α = 0.1):
                // uniform, as their sampler makes it
                row.iter_mut().for_each(|v| *v = 1.0 / s as f64);
            }
        }
        stationary(&self.pi, s, &mut self.m, &mut self.mu);
    }

    /// Draws tokens for the current `π` along `dag` (node `k` written at
    /// position `pos[k]`), without the query.
    pub fn tokens(&self, task: &Task, rng: &mut ChaCha8Rng, x: &mut [u8], par: &mut [i16]) {
        let s = task.vocab;
        for k in 0..self.dag.len() {
            let p = self.dag[k];
            let at = self.order[k];
            let law = if p < 0 {
                &self.mu[..]
            } else {
                let pt = x[self.order[p as usize]] as usize;
                &self.pi[pt * s..(pt + 1) * s]
            };
            x[at] = pick(rng, law);
            par[at] = if p < 0 {
                -1
            } else {
                self.order[p as usize] as i16
            };
        }
    }

    /// One sequence: tokens `[T]`, the soft label `[S]`, parents `[T − 1]`.
    pub fn sequence(
        &mut self,
        task: &Task,
        rng: &mut ChaCha8Rng,
        x: &mut [u8],
        y: &mut [f64],
        par: &mut [i16],
    ) {
        let (s, n) = (task.vocab, task.seq_len - 1);
        match task.control {
            Control::None => {}
            Control::Redraw => {
                for (i, p) in self.dag.iter_mut().enumerate() {
                    *p = rng.random_range(-1..i as i64);
                }
            }
            Control::Shuffle => {
                for i in (1..n).rev() {
                    let j = rng.random_range(0..=i);
                    self.order.swap(i, j);
                }
            }
        }
        self.draw_pi(task, rng);
        self.tokens(task, rng, x, par);
        let q = rng.random_range(0..s);
        x[n] = q as u8;
        y.copy_from_slice(&self.pi[q * s..(q + 1) * s]);
    }
}

/// A categorical draw from `law` (sums to 1 up to rounding).
fn pick(rng: &mut ChaCha8Rng, law: &[f64]) -> u8 {
    let u: f64 = rng.random::<f64>() * law.iter().sum::<f64>();
    let mut acc = 0.0;
    for (i, &p) in law.iter().enumerate() {
        acc += p;
        if u < acc {
            return i as u8;
        }
    }
    (law.len() - 1) as u8
}

/// The stationary law `μ` of `π` `[S, S]`: `(πᵀ − I) μ = 0`, `Σ μ = 1`, by
/// Gaussian elimination with partial pivoting (the authors take the same
/// vector from an SVD); power iteration where the system is singular.
pub fn stationary(pi: &[f64], s: usize, m: &mut [f64], mu: &mut [f64]) {
    // m: [S, S] = πᵀ − I with the last row replaced by ones; mu: the right side
    for a in 0..s {
        for b in 0..s {
            m[a * s + b] = pi[b * s + a] - if a == b { 1.0 } else { 0.0 };
        }
    }
    m[(s - 1) * s..].iter_mut().for_each(|v| *v = 1.0);
    mu.iter_mut().for_each(|v| *v = 0.0);
    mu[s - 1] = 1.0;
    let mut ok = true;
    for c in 0..s {
        let piv = (c..s)
            .max_by(|&i, &j| m[i * s + c].abs().total_cmp(&m[j * s + c].abs()))
            .unwrap_or(c);
        if m[piv * s + c].abs() < 1e-300 {
            ok = false;
            break;
        }
        if piv != c {
            for k in 0..s {
                m.swap(c * s + k, piv * s + k);
            }
            mu.swap(c, piv);
        }
        for r in c + 1..s {
            let f = m[r * s + c] / m[c * s + c];
            if f != 0.0 {
                for k in c..s {
                    m[r * s + k] -= f * m[c * s + k];
                }
                mu[r] -= f * mu[c];
            }
        }
    }
    if ok {
        for c in (0..s).rev() {
            let acc: f64 = (c + 1..s).map(|k| m[c * s + k] * mu[k]).sum();
            mu[c] = (mu[c] - acc) / m[c * s + c];
        }
        ok = mu.iter().all(|v| v.is_finite());
    }
    if !ok {
        // singular: power iteration from uniform
        mu.iter_mut().for_each(|v| *v = 1.0 / s as f64);
        for _ in 0..10_000 {
            for b in 0..s {
                m[b] = (0..s).map(|a| mu[a] * pi[a * s + b]).sum();
            }
            mu.copy_from_slice(&m[..s]);
        }
    }
    mu.iter_mut().for_each(|v| *v = v.max(0.0));
    let z: f64 = mu.iter().sum();
    mu.iter_mut().for_each(|v| *v /= z);
}

/// The Dirichlet posterior mean of the query's row from the sequence's own
/// transitions, `(α + N_s) / (Sα + N)` with `N_s` the positions whose parent's
/// token is the query and whose own token is `s` (their `bayes`).
/// `theirs`: also counts every root whenever `x[T − 2]` is the query (their
/// code indexes a root's parent with −1; docs/causal-structure.md).
pub fn bayes(x: &[u8], par: &[i16], s: usize, alpha: f64, theirs: bool, out: &mut [f64]) {
    let q = x[x.len() - 1];
    out.iter_mut().for_each(|v| *v = alpha);
    let mut total = s as f64 * alpha;
    for (j, &p) in par.iter().enumerate() {
        let pt = if p >= 0 {
            x[p as usize]
        } else if theirs {
            x[par.len() - 1]
        } else {
            continue;
        };
        if pt == q {
            out[x[j] as usize] += 1.0;
            total += 1.0;
        }
    }
    out.iter_mut().for_each(|v| *v /= total);
}

/// `−Σ y log p` (soft-label cross-entropy).
pub fn soft_ce(p: &[f64], y: &[f64]) -> f64 {
    -p.iter()
        .zip(y)
        .map(|(&p, &y)| if y > 0.0 { y * p.max(1e-300).ln() } else { 0.0 })
        .sum::<f64>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::stream;

    fn task(graph: GraphKind, control: Control) -> Task {
        let cfg = DataConfig {
            vocab: 4,
            seq_len: 8,
            graph,
            control,
            ..DataConfig::default()
        };
        Task::new(&cfg, 3)
    }

    #[test]
    fn the_stationary_law_is_stationary() {
        let t = task(GraphKind::Chain, Control::None);
        let mut w = Sampler::new(&t);
        let mut rng = stream(1, Stream::Data);
        for _ in 0..50 {
            w.draw_pi(&t, &mut rng);
            let s = t.vocab;
            for b in 0..s {
                let v: f64 = (0..s).map(|a| w.mu[a] * w.pi[a * s + b]).sum();
                assert!((v - w.mu[b]).abs() < 1e-10, "μπ ≠ μ");
            }
            assert!((w.mu.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        }
    }

    #[test]
    fn graphs_have_earlier_parents_and_their_shapes() {
        let mut rng = stream(2, Stream::Sample);
        assert_eq!(draw_graph(GraphKind::Chain, 4, &mut rng), vec![-1, 0, 1, 2]);
        assert_eq!(
            draw_graph(GraphKind::Icl, 5, &mut rng),
            vec![-1, 0, -1, 2, -1]
        );
        for kind in [GraphKind::Random, GraphKind::RandomHalf] {
            let g = draw_graph(kind, 30, &mut rng);
            assert!(g.iter().enumerate().all(|(i, &p)| p >= -1 && p < i as i64));
        }
    }

    #[test]
    fn children_follow_their_parents_row_and_controls_move_the_graph() {
        // Chain at α = 0.1: a child repeats a transition its parent's token
        // makes often; the parents recorded are where the sampler read them.
        for control in [Control::None, Control::Redraw, Control::Shuffle] {
            let t = task(GraphKind::Chain, control);
            let seqs = Seqs::draw(&t, &mut stream(5, Stream::Data), 200);
            let n = t.seq_len - 1;
            let mut moved = 0;
            for b in 0..seqs.n {
                let par = &seqs.par[b * n..(b + 1) * n];
                let roots = par.iter().filter(|&&p| p < 0).count();
                if control != Control::Redraw {
                    assert_eq!(roots, 1, "a chain has one root");
                }
                if par.iter().enumerate().any(|(i, &p)| p != i as i16 - 1) {
                    moved += 1;
                }
                assert!(par.iter().all(|&p| p >= -1 && (p as usize) < n || p == -1));
            }
            assert_eq!(moved == 0, control == Control::None, "{control:?}");
        }
    }

    #[test]
    fn bayes_counts_the_query_tokens_children() {
        // x = 1 2 1 3 | query 1; chain: transitions 1→2, 2→1, 1→3
        let x = [1u8, 2, 1, 3, 1];
        let par = [-1i16, 0, 1, 2];
        let mut p = [0.0; 4];
        bayes(&x, &par, 4, 0.5, false, &mut p);
        // N_2 = N_3 = 1, N = 2: (0.5 + N_s) / (2 + 2)
        assert_eq!(p, [0.125, 0.125, 0.375, 0.375]);
        // theirs: the root (x_0 = 1) also counts, as x[T − 2] = 3 ≠ 1 it does not
        bayes(&x, &par, 4, 0.5, true, &mut p);
        assert_eq!(p, [0.125, 0.125, 0.375, 0.375]);
        let x = [1u8, 2, 1, 1, 1];
        bayes(&x, &par, 4, 0.5, true, &mut p);
        // transitions 1→2, 2→1, 1→1, and the root's 1 counted: N_1 = 2, N_2 = 1
        assert_eq!(p, [0.5 / 5.0, 2.5 / 5.0, 1.5 / 5.0, 0.5 / 5.0]);
    }
}
