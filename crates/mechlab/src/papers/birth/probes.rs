//! The measurements of Bietti et al.'s script (`ihead_basic_main.py`), on a
//! fixed evaluation set of fresh sequences:
//!
//! - **accuracy**: the top prediction is the right output, over the outputs of
//!   triggers from their second occurrence (`acc_end`), and the loss there;
//! - **attention probes**: layer 0's argmax at an output token is the trigger
//!   just before it (`score_acc`, the previous-token head); layer 1's argmax at a
//!   trigger's second or later occurrence is a token whose predecessor is the
//!   same trigger (`score2_acc`, the induction head; an argmax on position 0
//!   counts as a miss);
//! - **memory-recall probes** on the weights alone: `wo1`, the share of tokens
//!   `k` for which `W_U W_O² W_V² w_E(k)` has its largest entry at `k` (the
//!   output memory); `wk1`, the share of triggers `q` for which
//!   `w_E(q)ᵀ W_K² W_O¹ W_V¹ w_E(q')` is largest at `q' = q` (the induction head's
//!   key memory); `wk0`, the share of positions `t` for which `p_{t+1}ᵀ W_K¹ p_s`
//!   is largest at `s = t` over all positions (the previous-token head's
//!   positional memory), and `wk0_64` over the first 64 positions only.

use super::data::Bigrams;
use mechlab_engine::gpt::{Gpt, Workspace};
use mechlab_engine::Float;

/// One probe's numbers (`NaN` where the model has no second layer).
#[derive(Clone, Debug, Default)]
pub struct Eval {
    pub acc: f64,
    /// Accuracy at exactly the second occurrence: the output seen once before.
    pub acc2: f64,
    pub loss_head: f64,
    pub attn0: f64,
    pub attn1: f64,
    pub wo1: f64,
    pub wk1: f64,
    pub wk0: f64,
    pub wk0_64: f64,
}

impl Eval {
    /// `(key, value)` pairs for the metrics log.
    pub fn record(&self) -> [(&'static str, f64); 9] {
        [
            ("acc", self.acc),
            ("acc2", self.acc2),
            ("loss_head", self.loss_head),
            ("attn0", self.attn0),
            ("attn1", self.attn1),
            ("wo1", self.wo1),
            ("wk1", self.wk1),
            ("wk0", self.wk0),
            ("wk0_64", self.wk0_64),
        ]
    }
}

/// The fixed evaluation set and its workspace.
pub struct Probe<T: Float> {
    pub inputs: Vec<u32>,
    pub targets: Vec<u32>,
    pub occ: Vec<u32>,
    pub ws: Workspace<T>,
    n: usize,
    t: usize,
}

/// `y = W x` for `W` stored `[out, in]` (PyTorch's `nn.Linear` layout).
fn apply<T: Float>(w: &[T], x: &[f64]) -> Vec<f64> {
    let d_in = x.len();
    w.chunks(d_in)
        .map(|row| row.iter().zip(x).map(|(a, b)| a.as_f64() * b).sum())
        .collect()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Index of the largest entry (the first on ties, as `argmax` does).
pub fn argmax(v: impl IntoIterator<Item = f64>) -> usize {
    let mut best = (0, f64::NEG_INFINITY);
    for (i, x) in v.into_iter().enumerate() {
        if x > best.1 {
            best = (i, x);
        }
    }
    best.0
}

fn share(hits: usize, total: usize) -> f64 {
    if total == 0 {
        f64::NAN
    } else {
        hits as f64 / total as f64
    }
}

impl<T: Float> Probe<T> {
    /// From `n` sequences (`tokens` `[n, T + 1]`, `occ` `[n, T]`).
    pub fn new(model: &Gpt<T>, tokens: &[u32], occ: Vec<u32>, n: usize, t: usize) -> Self {
        let (mut inputs, mut targets) = (Vec::with_capacity(n * t), Vec::with_capacity(n * t));
        for row in tokens.chunks_exact(t + 1) {
            inputs.extend_from_slice(&row[..t]);
            targets.extend_from_slice(&row[1..]);
        }
        Probe {
            inputs,
            targets,
            occ,
            ws: Workspace::new(model, n, t),
            n,
            t,
        }
    }

    pub fn evaluate(&mut self, m: &Gpt<T>, data: &Bigrams) -> Eval {
        m.evaluate(&mut self.ws, &self.inputs, Some(&self.targets));
        let (t, two) = (self.t, m.cfg.n_layers == 2);
        let v = m.cfg.d_vocab;
        let (mut hit, mut tot, mut loss) = (0, 0, 0.0);
        let (mut hit2, mut tot2) = (0, 0);
        let (mut a0, mut n0, mut a1, mut n1) = (0, 0, 0, 0);
        for s in 0..self.n {
            let (w, i) = self.ws.seq(s);
            let (x, occ) = (
                &self.inputs[s * t..(s + 1) * t],
                &self.occ[s * t..(s + 1) * t],
            );
            let (logits, losses) = (w.logits(i), w.token_losses(i));
            let p0 = w.pattern(0, i);
            for p in 0..t {
                if occ[p] >= 1 && p + 1 < t {
                    n0 += 1;
                    let row = &p0[(p + 1) * t..(p + 2) * t];
                    a0 += usize::from(argmax(row.iter().map(|a| a.as_f64())) == p);
                }
                if occ[p] < 2 {
                    continue;
                }
                tot += 1;
                loss += losses[p];
                let row = &logits[p * v..(p + 1) * v];
                let ok = argmax(row.iter().map(|z| z.as_f64())) == self.targets[s * t + p] as usize;
                hit += usize::from(ok);
                if occ[p] == 2 {
                    tot2 += 1;
                    hit2 += usize::from(ok);
                }
                if two {
                    n1 += 1;
                    let row = &w.pattern(1, i)[p * t..(p + 1) * t];
                    let j = argmax(row.iter().map(|a| a.as_f64()));
                    a1 += usize::from(j >= 1 && x[j - 1] == x[p]);
                }
            }
        }
        let mut e = Eval {
            acc: share(hit, tot),
            acc2: share(hit2, tot2),
            loss_head: if tot == 0 {
                f64::NAN
            } else {
                loss / tot as f64
            },
            attn0: share(a0, n0),
            attn1: if two { share(a1, n1) } else { f64::NAN },
            wk1: f64::NAN,
            wk0: f64::NAN,
            wk0_64: f64::NAN,
            ..Eval::default()
        };
        e.wo1 = wo1(m);
        if two {
            e.wk1 = wk1(m, data);
            e.wk0 = wk0(m, t);
            e.wk0_64 = wk0(m, t.min(64));
        }
        e
    }
}

fn value<'m, T: Float>(m: &'m Gpt<T>, name: &str) -> &'m [T] {
    m.param(name)
        .unwrap_or_else(|| panic!("birth: the model has no {name}"))
        .value()
}

fn embedding<T: Float>(m: &Gpt<T>, k: usize) -> Vec<f64> {
    let d = m.cfg.d_model;
    value(m, "embed.W_E")[k * d..(k + 1) * d]
        .iter()
        .map(|x| x.as_f64())
        .collect()
}

/// `wo1`: the last layer's value-output map sends each token to itself through the unembedding.
pub fn wo1<T: Float>(m: &Gpt<T>) -> f64 {
    let l = m.cfg.n_layers - 1;
    let (wv, wo) = (
        value(m, &format!("blocks.{l}.attn.W_V")),
        value(m, &format!("blocks.{l}.attn.W_O")),
    );
    let wu = value(m, "unembed.W_U");
    let n = m.cfg.d_vocab;
    let hits = (0..n)
        .filter(|&k| argmax(apply(wu, &apply(wo, &apply(wv, &embedding(m, k))))) == k)
        .count();
    share(hits, n)
}

/// `wk1`: each trigger's query finds its own key among the triggers' keys.
pub fn wk1<T: Float>(m: &Gpt<T>, data: &Bigrams) -> f64 {
    let (wv, wo, wk) = (
        value(m, "blocks.0.attn.W_V"),
        value(m, "blocks.0.attn.W_O"),
        value(m, "blocks.1.attn.W_K"),
    );
    let keys: Vec<Vec<f64>> = data
        .triggers
        .iter()
        .map(|&q| apply(wk, &apply(wo, &apply(wv, &embedding(m, q as usize)))))
        .collect();
    let hits = data
        .triggers
        .iter()
        .enumerate()
        .filter(|&(j, &q)| {
            let e = embedding(m, q as usize);
            argmax(keys.iter().map(|k| dot(&e, k))) == j
        })
        .count();
    share(hits, data.triggers.len())
}

/// `wk0` over the first `len` positions: position `t + 1`'s query finds position `t`'s key.
pub fn wk0<T: Float>(m: &Gpt<T>, len: usize) -> f64 {
    let d = m.cfg.d_model;
    let pe: Vec<Vec<f64>> = value(m, "pos_embed.W_pos")
        .chunks(d)
        .take(len)
        .map(|r| r.iter().map(|x| x.as_f64()).collect())
        .collect();
    let wk = value(m, "blocks.0.attn.W_K");
    let keys: Vec<Vec<f64>> = pe[..len - 1].iter().map(|p| apply(wk, p)).collect();
    let hits = (0..len - 1)
        .filter(|&t| argmax(keys.iter().map(|k| dot(&pe[t + 1], k))) == t)
        .count();
    share(hits, len - 1)
}
