//! The built-in synthetic tasks researchers keep rebuilding, each with its
//! parameters (`[task]`), its own seeded stream, a loss mask (which tokens are
//! targets) and, where it has a closed form, the Bayes-optimal loss of every
//! target ([`Task::bayes`]), the floor a model's loss is measured against.
//!
//! | task | a sequence | targets | Bayes loss |
//! |---|---|---|---|
//! | `repeated` | `n` random tokens, then their repeat (`n` from `T/4 .. T/2`; lm-induction's generator) | every token | exact: the posterior over the period |
//! | `markov` | an in-context Markov chain of order `k`, rows ~ Dirichlet(α) (markov-icl's generator, first `k` tokens uniform) | every token | exact: the posterior mean of the in-context counts |
//! | `ngram` | an in-context n-gram chain on parent distances `P` (induction's generator) | every token | exact, as `markov` with the parents `P` |
//! | `assoc` | `n_pairs` pairs `k v` with distinct keys, then queries `k v` of earlier keys | the queried values | 0 |
//! | `copy` | `n` random symbols, a separator, the same `n` again | the copy | 0 |
//! | `sort` | `n` random symbols, a separator, the same sorted | the sorted part | 0 |
//! | `modadd` | `a b = c`, `c = (a + b) mod p`, on a fixed split of the `p²` pairs | `c` | 0 |
//! | `triggers` | bigram text in which each trigger token is followed by an output drawn once per sequence (birth's generator, on a random bigram table) | every token | exact: known bigram rows; an output once its trigger has shown it |
//!
//! ```
//! use mechlab::papers::transformer::{config::TransformerConfig, tasks::Task};
//! use rand::SeedableRng;
//! let t = Task::new(&TransformerConfig::default()).unwrap(); // repeated, 32 symbols, T = 32
//! let (mut tok, mut mask) = (vec![0; 2 * 33], vec![false; 2 * 33]);
//! t.batch(&mut tok, &mut mask, &mut rand_chacha::ChaCha8Rng::seed_from_u64(0));
//! assert!(tok.iter().all(|&x| x < 32) && mask[1] && !mask[0]);
//! ```

use super::bayes::{ngram_bayes, repeated_bayes, triggers_bayes};
use super::config::{TaskKind, TransformerConfig};
use crate::papers::birth::data::Bigrams;
use crate::papers::induction::data::{self as ngram, MarkovSpec, Variant};
use crate::papers::lm_induction::data::{period, repeated_row};
use crate::papers::markov_icl::data::{self as mc, ChainSpec, FirstToken, Prior, Strategy};
use crate::rng::{substream, Stream};
use rand::seq::SliceRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Gamma};

/// modadd's pairs `(a, b)`.
type Pairs = Vec<(u32, u32)>;

/// A task ready to draw batches.
pub struct Task {
    pub kind: TaskKind,
    /// Symbols (the task's own alphabet, before separators).
    pub symbols: usize,
    /// Token ids the task uses (`d_vocab`).
    pub vocab: usize,
    /// Positions the model reads, `T`; sequences are `T + 1` tokens.
    pub t: usize,
    alpha: f64,
    order: usize,
    parents: Vec<usize>,
    n_pairs: usize,
    p: usize,
    gamma: Option<Gamma<f64>>,
    /// modadd: the training pairs and the held-out ones.
    split: (Pairs, Pairs),
    bigrams: Option<Bigrams>,
}

fn default_symbols(kind: TaskKind) -> usize {
    match kind {
        TaskKind::Markov | TaskKind::Ngram => 3,
        TaskKind::Repeated | TaskKind::Triggers => 32,
        _ => 16,
    }
}

fn default_t(kind: TaskKind, n_pairs: usize) -> usize {
    match kind {
        TaskKind::Modadd => 3,
        TaskKind::Copy | TaskKind::Sort => 16,
        TaskKind::Assoc => 4 * n_pairs - 1,
        TaskKind::Repeated => 32,
        _ => 64,
    }
}

impl Task {
    /// The task `cfg.data.task` with `cfg.task`'s parameters; errors name the key.
    pub fn new(cfg: &TransformerConfig) -> Result<Task, String> {
        let (k, c) = (cfg.data.task, &cfg.task);
        let symbols = if c.vocab == 0 {
            default_symbols(k)
        } else {
            c.vocab
        };
        let t = if cfg.data.seq_len == 0 {
            default_t(k, c.n_pairs)
        } else {
            cfg.data.seq_len
        };
        let name = format!("{k:?}").to_lowercase();
        let need = |ok: bool, msg: String| if ok { Ok(()) } else { Err(msg) };
        need(
            (2..=65536).contains(&symbols),
            format!("task.vocab = {symbols}: must be 2..=65536"),
        )?;
        need(t >= 2, format!("data.seq_len = {t}: must be at least 2"))?;
        let mut task = Task {
            kind: k,
            symbols,
            vocab: symbols,
            t,
            alpha: c.alpha,
            order: c.order,
            parents: c.parents.clone(),
            n_pairs: c.n_pairs,
            p: c.p,
            gamma: None,
            split: (Vec::new(), Vec::new()),
            bigrams: None,
        };
        match k {
            TaskKind::Repeated => {}
            TaskKind::Markov => {
                need(
                    (1..=3).contains(&c.order),
                    format!("task.order = {}: must be 1..=3", c.order),
                )?;
                task.chain().check().map_err(|e| {
                    e.replace("data.vocab", "task.vocab")
                        .replace("data.order", "task.order (+1)")
                        .replace("data.alpha", "task.alpha")
                })?;
                task.gamma = Some(mc::gamma_of(&task.chain())?);
            }
            TaskKind::Ngram => {
                need(
                    symbols <= 256,
                    format!("task.vocab = {symbols}: the ngram task has at most 256 symbols"),
                )?;
                // the generator's own checks, on one sequence
                ngram::generate_with(&task.ngram_spec(1), &mut substream(0, Stream::Data, 0))
                    .map_err(|e| e.replace("data.", "task."))?;
            }
            TaskKind::Assoc => {
                need(
                    (t + 1) % 2 == 0,
                    format!("data.seq_len = {t}: assoc sequences are pairs, so seq_len + 1 must be even"),
                )?;
                need(
                    c.n_pairs >= 1 && c.n_pairs <= symbols,
                    format!("task.n_pairs = {}: must be 1..=task.vocab ({symbols}), the keys are distinct", c.n_pairs),
                )?;
                need(
                    t.div_ceil(2) > c.n_pairs,
                    format!(
                        "data.seq_len = {t}: leaves no room for a query after task.n_pairs = {} pairs (need seq_len ≥ {})",
                        c.n_pairs,
                        2 * c.n_pairs + 1
                    ),
                )?;
                task.vocab = 2 * symbols;
            }
            TaskKind::Copy | TaskKind::Sort => {
                need(
                    t % 2 == 0,
                    format!("data.seq_len = {t}: {name} sequences are n symbols, a separator and n more, so seq_len must be even"),
                )?;
                task.vocab = symbols + 1;
            }
            TaskKind::Modadd => {
                need(t == 3, format!("data.seq_len = {t}: modadd sequences are `a b = c`, so seq_len must be 3 (or 0)"))?;
                need(
                    (2..=1024).contains(&c.p),
                    format!("task.p = {}: must be 2..=1024", c.p),
                )?;
                need(
                    c.train_frac > 0.0 && c.train_frac < 1.0,
                    format!("task.train_frac = {}: must be in (0, 1)", c.train_frac),
                )?;
                task.vocab = c.p + 1;
                let mut pairs: Vec<(u32, u32)> = (0..c.p as u32)
                    .flat_map(|a| (0..c.p as u32).map(move |b| (a, b)))
                    .collect();
                pairs.shuffle(&mut substream(cfg.seed, Stream::Data, 8));
                let n = ((pairs.len() as f64 * c.train_frac).round() as usize)
                    .clamp(1, pairs.len() - 1);
                let held = pairs.split_off(n);
                task.split = (pairs, held);
            }
            TaskKind::Triggers => {
                need(
                    symbols <= 256,
                    format!("task.vocab = {symbols}: the triggers task has at most 256 symbols"),
                )?;
                need(
                    c.triggers >= 1 && c.triggers < symbols,
                    format!(
                        "task.triggers = {}: must be 1..task.vocab ({symbols})",
                        c.triggers
                    ),
                )?;
                let text = bigram_text(symbols, &mut substream(cfg.seed, Stream::Data, 7));
                let b = Bigrams::from_bytes(&text, c.triggers).map_err(|e| format!("task: {e}"))?;
                task.vocab = b.vocab();
                task.bigrams = Some(b);
            }
        }
        Ok(task)
    }

    fn chain(&self) -> ChainSpec {
        ChainSpec {
            vocab: self.symbols,
            order: self.order + 1,
            prior: Prior::Dirichlet,
            alpha: self.alpha,
            len: self.t + 1,
            first: FirstToken::Uniform,
        }
    }

    fn ngram_spec(&self, n: usize) -> MarkovSpec {
        MarkovSpec {
            vocab: self.symbols,
            seq_len: self.t,
            parents: self.parents.clone(),
            alpha: self.alpha,
            n_seqs: n,
            variant: Variant::NGram,
        }
    }

    /// The task's name as in the config.
    pub fn name(&self) -> String {
        format!("{:?}", self.kind).to_lowercase()
    }

    /// Fills `tokens` (`[n, T + 1]`) with fresh sequences and `mask` (same
    /// shape) with their targets (`mask[:, 0]` is never a target).
    pub fn batch(&self, tokens: &mut [u32], mask: &mut [bool], rng: &mut ChaCha8Rng) {
        let w = self.t + 1;
        let n = tokens.len() / w;
        mask.iter_mut().for_each(|m| *m = false);
        match self.kind {
            TaskKind::Markov => {
                let b = mc::draw(&self.chain(), self.gamma.as_ref().expect("checked"), n, rng);
                tokens
                    .iter_mut()
                    .zip(&b.tokens)
                    .for_each(|(o, &x)| *o = x as u32);
            }
            TaskKind::Ngram => {
                let d =
                    ngram::generate_with(&self.ngram_spec(n), rng).expect("checked in Task::new");
                tokens
                    .iter_mut()
                    .zip(&d.tokens)
                    .for_each(|(o, &x)| *o = x as u32);
            }
            TaskKind::Triggers => {
                let b = self.bigrams.as_ref().expect("checked");
                let mut occ = vec![0; self.t];
                let mut outs = vec![(0, 0); b.triggers.len()];
                for row in tokens.chunks_exact_mut(w) {
                    b.sequence(row, &mut occ, &mut outs, rng);
                }
            }
            _ => {
                for (row, m) in tokens.chunks_exact_mut(w).zip(mask.chunks_exact_mut(w)) {
                    self.row(row, m, rng);
                }
                return;
            }
        }
        for m in mask.chunks_exact_mut(w) {
            m[1..].iter_mut().for_each(|x| *x = true);
        }
    }

    /// One sequence of the tasks drawn row by row.
    fn row(&self, row: &mut [u32], mask: &mut [bool], rng: &mut ChaCha8Rng) {
        let (w, s) = (row.len(), self.symbols as u32);
        match self.kind {
            TaskKind::Repeated => {
                repeated_row(row, period(w, rng), self.symbols, rng);
                mask[1..].iter_mut().for_each(|x| *x = true);
            }
            TaskKind::Assoc => {
                // distinct keys: a partial Fisher–Yates over the key alphabet
                let mut keys: Vec<u32> = (0..s).collect();
                let np = self.n_pairs;
                for i in 0..np {
                    let j = rng.random_range(i..keys.len());
                    keys.swap(i, j);
                }
                let vals: Vec<u32> = (0..np).map(|_| s + rng.random_range(0..s)).collect();
                for i in 0..np {
                    row[2 * i] = keys[i];
                    row[2 * i + 1] = vals[i];
                }
                for q in np..w / 2 {
                    let i = rng.random_range(0..np);
                    row[2 * q] = keys[i];
                    row[2 * q + 1] = vals[i];
                    mask[2 * q + 1] = true;
                }
            }
            TaskKind::Copy | TaskKind::Sort => {
                let n = self.t / 2;
                for x in row[..n].iter_mut() {
                    *x = rng.random_range(0..s);
                }
                row[n] = s;
                let (a, b) = row.split_at_mut(n + 1);
                b.copy_from_slice(&a[..n]);
                if self.kind == TaskKind::Sort {
                    b.sort_unstable();
                }
                mask[n + 1..].iter_mut().for_each(|x| *x = true);
            }
            TaskKind::Modadd => {
                let train = &self.split.0;
                let (a, b) = train[rng.random_range(0..train.len())];
                self.modadd_row(row, mask, a, b);
            }
            TaskKind::Markov | TaskKind::Ngram | TaskKind::Triggers => unreachable!("batch tasks"),
        }
    }

    fn modadd_row(&self, row: &mut [u32], mask: &mut [bool], a: u32, b: u32) {
        let p = self.p as u32;
        row.copy_from_slice(&[a, b, p, (a + b) % p]);
        mask.copy_from_slice(&[false, false, false, true]);
    }

    /// `n` held-out sequences and their masks from `rng` (modadd: every held-out pair).
    pub fn heldout(&self, n: usize, rng: &mut ChaCha8Rng) -> (Vec<u32>, Vec<bool>) {
        let w = self.t + 1;
        if self.kind == TaskKind::Modadd {
            let held = &self.split.1;
            let (mut tok, mut mask) = (vec![0; held.len() * w], vec![false; held.len() * w]);
            for ((row, m), &(a, b)) in tok
                .chunks_exact_mut(w)
                .zip(mask.chunks_exact_mut(w))
                .zip(held)
            {
                self.modadd_row(row, m, a, b);
            }
            return (tok, mask);
        }
        let (mut tok, mut mask) = (vec![0; n * w], vec![false; n * w]);
        self.batch(&mut tok, &mut mask, rng);
        (tok, mask)
    }

    /// The Bayes-optimal loss (nats) of every token of `row` (`[T + 1]`; entry
    /// `j` is the loss of predicting `row[j]` from `row[..j]`, entry 0 unused),
    /// or `false` when the task has no closed form.
    pub fn bayes(&self, row: &[u32], out: &mut [f64]) -> bool {
        let w = self.t + 1;
        out.iter_mut().for_each(|x| *x = 0.0);
        match self.kind {
            TaskKind::Repeated => repeated_bayes(row, self.symbols, out),
            TaskKind::Markov => {
                let s = self.symbols;
                let seq: Vec<u8> = row.iter().map(|&x| x as u8).collect();
                let mut probs = vec![0.0; self.t * s];
                mc::strategy_probs(
                    &seq,
                    s,
                    self.alpha,
                    Strategy::Ngram(self.order + 1),
                    &mut probs,
                );
                for j in 1..w {
                    out[j] = -probs[(j - 1) * s + row[j] as usize].ln();
                }
            }
            TaskKind::Ngram => ngram_bayes(row, &self.parents, self.symbols, self.alpha, out),
            TaskKind::Triggers => triggers_bayes(self.bigrams.as_ref().expect("checked"), row, out),
            // deterministic targets
            TaskKind::Assoc | TaskKind::Copy | TaskKind::Sort | TaskKind::Modadd => {}
        }
        true
    }

    /// A token as text, for the attention viewer and figure ticks.
    pub fn show(&self, id: u32) -> String {
        let s = self.symbols as u32;
        match self.kind {
            TaskKind::Copy | TaskKind::Sort if id == s => "|".into(),
            TaskKind::Modadd if id == self.p as u32 => "=".into(),
            TaskKind::Assoc if id >= s => format!("v{}", id - s),
            TaskKind::Assoc => format!("k{id}"),
            _ => id.to_string(),
        }
    }
}

/// Bytes of a random bigram chain over `s` symbols (Dirichlet(1/2) rows), long
/// enough that every symbol and row is seen many times: the text the triggers
/// task's [`Bigrams`] tables are counted from.
fn bigram_text(s: usize, rng: &mut ChaCha8Rng) -> Vec<u8> {
    let g = Gamma::new(0.5, 1.0).expect("valid");
    let rows: Vec<Vec<f64>> = (0..s)
        .map(|_| {
            let r: Vec<f64> = (0..s)
                .map(|_| Distribution::<f64>::sample(&g, rng).max(1e-12))
                .collect();
            let z: f64 = r.iter().sum();
            r.iter().map(|x| x / z).collect()
        })
        .collect();
    let mut text = Vec::with_capacity(400 * s);
    // every symbol once first, so none is missing from the vocabulary
    text.extend((0..s).map(|x| x as u8));
    let mut cur = rng.random_range(0..s);
    for _ in 0..400 * s {
        let u: f64 = rng.random();
        let mut acc = 0.0;
        let mut next = s - 1;
        for (x, &p) in rows[cur].iter().enumerate() {
            acc += p;
            if u < acc {
                next = x;
                break;
            }
        }
        text.push(next as u8);
        cur = next;
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(kind: TaskKind) -> TransformerConfig {
        let mut c = TransformerConfig::default();
        c.data.task = kind;
        c
    }

    const ALL: [TaskKind; 8] = [
        TaskKind::Repeated,
        TaskKind::Markov,
        TaskKind::Ngram,
        TaskKind::Assoc,
        TaskKind::Copy,
        TaskKind::Sort,
        TaskKind::Modadd,
        TaskKind::Triggers,
    ];

    #[test]
    fn every_task_draws_valid_sequences_with_targets_and_finite_bayes_losses() {
        for k in ALL {
            let t = Task::new(&cfg(k)).unwrap();
            let w = t.t + 1;
            let (mut tok, mut mask) = (vec![0; 8 * w], vec![false; 8 * w]);
            t.batch(&mut tok, &mut mask, &mut substream(1, Stream::Data, 0));
            assert!(
                tok.iter().all(|&x| (x as usize) < t.vocab),
                "{k:?}: {tok:?}"
            );
            assert!(
                mask.chunks(w).all(|m| !m[0] && m.iter().any(|&x| x)),
                "{k:?}"
            );
            let mut b = vec![0.0; w];
            for row in tok.chunks(w) {
                assert!(t.bayes(row, &mut b));
                assert!(b.iter().all(|x| x.is_finite() && *x >= 0.0), "{k:?}: {b:?}");
            }
        }
    }

    /// The Bayes losses are the losses of proper predictive distributions:
    /// on the repeated task, the first token of a segment costs ln V and the
    /// repeat's tokens cost almost nothing once the period is pinned down;
    /// on markov, the posterior beats the uniform guess on average.
    #[test]
    fn bayes_losses_behave_as_the_posteriors_they_are() {
        let t = Task::new(&cfg(TaskKind::Repeated)).unwrap();
        let w = t.t + 1;
        let (mut tok, mut mask) = (vec![0; w * 16], vec![false; w * 16]);
        t.batch(&mut tok, &mut mask, &mut substream(2, Stream::Data, 0));
        let mut b = vec![0.0; w];
        t.bayes(&tok[..w], &mut b);
        assert!((b[1] - (32f64).ln()).abs() < 1e-12);
        assert!(b[w - 1] < 1e-6, "{b:?}");
        let m = Task::new(&cfg(TaskKind::Markov)).unwrap();
        let w = m.t + 1;
        let (mut tot, mut cnt) = (0.0, 0.0);
        let mut b = vec![0.0; w];
        let (mut tk, mut mk) = (vec![0; w * 64], vec![false; w * 64]);
        m.batch(&mut tk, &mut mk, &mut substream(3, Stream::Data, 0));
        for row in tk.chunks(w) {
            m.bayes(row, &mut b);
            tot += b[1..].iter().sum::<f64>();
            cnt += (w - 1) as f64;
        }
        assert!(tot / cnt < (3f64).ln() - 0.1, "{}", tot / cnt);
    }

    #[test]
    fn modadd_splits_the_pairs_and_bad_settings_name_their_key() {
        let t = Task::new(&cfg(TaskKind::Modadd)).unwrap();
        assert_eq!(t.split.0.len() + t.split.1.len(), 23 * 23);
        let (h, m) = t.heldout(0, &mut substream(0, Stream::Sample, 0));
        assert_eq!(h.len(), 4 * t.split.1.len());
        assert!(h
            .chunks(4)
            .all(|r| r[3] == (r[0] + r[1]) % 23 && r[2] == 23));
        assert!(m.chunks(4).all(|r| r == [false, false, false, true]));
        let mut c = cfg(TaskKind::Modadd);
        c.data.seq_len = 8;
        assert!(Task::new(&c).err().unwrap().contains("data.seq_len = 8"));
        let mut c = cfg(TaskKind::Markov);
        c.task.vocab = 30;
        assert!(Task::new(&c).err().unwrap().contains("task.vocab"));
        let mut c = cfg(TaskKind::Assoc);
        c.task.n_pairs = 40;
        assert!(Task::new(&c).err().unwrap().contains("task.n_pairs = 40"));
    }
}
