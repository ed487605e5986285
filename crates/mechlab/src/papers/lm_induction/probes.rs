//! Olsson et al.'s measurements: per-head induction and previous-token scores,
//! the in-context learning score, and what ablating heads does to it.
//!
//! * **Induction score** of head `(l, h)`: on sequences of `n` random tokens
//!   followed by their repeat, the mean attention from a query `i` in the second
//!   copy to key `i − n + 1`, the token after the earlier occurrence of the
//!   query's token (Olsson et al. 2022, "prefix matching"; TransformerLens's
//!   `induction_score`). Uniform causal attention scores `mean_i 1/(i+1)`.
//! * **Previous-token score**: mean attention from `i ≥ 1` to `i − 1` on held-out text.
//! * **In-context learning score**: the mean loss at the late positions minus
//!   the mean loss at the early ones (Olsson et al.: "the loss of the 500th
//!   token minus the loss of the 50th", here positions from `probe.icl_*`),
//!   negative when later tokens are predicted better thanks to the context.
//!   The held-out windows are drawn the way training windows are (with
//!   `data.repeat_frac`, some repeat a segment of their text), so the score
//!   measures what training teaches; `icl_text` is the same score over the
//!   plain-text windows alone.

use super::config::ProbeConfig;
use mechlab_engine::gpt::{Gpt, Workspace};
use mechlab_engine::hooks::{Ablation, Batch, Hook, HookedModel, Tensor};
use mechlab_engine::Float;
use std::ops::Range;

/// The fixed evaluation sets and their workspaces.
pub struct Probe<T: Float> {
    /// Held-out inputs and targets `[n, T]`.
    pub x: Vec<u32>,
    pub y: Vec<u32>,
    /// Repeated random sequences `[n, 2·rep_len + 1]`.
    pub rep: Vec<u32>,
    pub rep_len: usize,
    /// Which held-out windows are plain text (the rest repeat a segment).
    pub plain: Vec<bool>,
    pub early: Range<usize>,
    pub late: Range<usize>,
    ws: Workspace<T>,
    ws_rep: Workspace<T>,
}

/// One probe's numbers.
#[derive(Clone, Debug, Default)]
pub struct Eval {
    pub loss: f64,
    pub icl: f64,
    /// The ICL score over the plain-text held-out windows alone (`None` when
    /// every window repeats, as on repeated random data).
    pub icl_text: Option<f64>,
    /// Mean held-out loss at every position `[T]`.
    pub per_pos: Vec<f64>,
    /// `[layer][head]`
    pub induction: Vec<Vec<f64>>,
    pub prev_token: Vec<Vec<f64>>,
    /// Loss on the second copy of the repeated sequences.
    pub rep_loss: f64,
    /// Copying score of each head's OV circuit `[layer][head]` ([`super::ov`]).
    pub copying: Vec<Vec<f64>>,
}

impl Eval {
    /// The strongest induction head `(layer, head, score)`.
    pub fn best_induction(&self) -> (usize, usize, f64) {
        let mut best = (0, 0, f64::NEG_INFINITY);
        for (l, hs) in self.induction.iter().enumerate() {
            for (h, &s) in hs.iter().enumerate() {
                if s > best.2 {
                    best = (l, h, s);
                }
            }
        }
        best
    }
}

fn splits(rows: &[u32], len: usize) -> (Vec<u32>, Vec<u32>) {
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for r in rows.chunks_exact(len + 1) {
        x.extend_from_slice(&r[..len]);
        y.extend_from_slice(&r[1..]);
    }
    (x, y)
}

/// `mean_i 1/(i+1)` over the second copy's queries: uniform attention's induction score.
pub fn uniform_induction(rep_len: usize) -> f64 {
    let qs = rep_len..2 * rep_len;
    qs.clone().map(|i| 1.0 / (i + 1) as f64).sum::<f64>() / qs.len() as f64
}

/// `mean_{i ≥ 1} 1/(i+1)`: uniform attention's previous-token score over `t` positions.
pub fn uniform_prev(t: usize) -> f64 {
    (1..t).map(|i| 1.0 / (i + 1) as f64).sum::<f64>() / (t - 1) as f64
}

fn mean_over(per_pos: &[f64], r: &Range<usize>) -> f64 {
    per_pos[r.clone()].iter().sum::<f64>() / r.len() as f64
}

impl<T: Float> Probe<T> {
    /// `heldout`: `[n, T + 1]` windows (`plain[i]`: window `i` is plain text);
    /// `rep`: `[n, 2·rep_len + 1]` sequences.
    pub fn new(
        m: &Gpt<T>,
        heldout: &[u32],
        plain: Vec<bool>,
        rep: Vec<u32>,
        t: usize,
        cfg: &ProbeConfig,
    ) -> Self {
        let (x, y) = splits(heldout, t);
        let n = x.len() / t;
        let rep_len = cfg.rep_len;
        let (early, late) = cfg.icl_windows(t);
        Probe {
            ws: Workspace::new(m, n, t),
            ws_rep: Workspace::new(m, rep.len() / (2 * rep_len + 1), 2 * rep_len),
            x,
            y,
            rep,
            rep_len,
            plain,
            early,
            late,
        }
    }

    /// Every score of the model as it is now.
    pub fn evaluate(&mut self, m: &Gpt<T>) -> Eval {
        let (t, c) = (self.ws.seq_len(), &m.cfg);
        let loss = m.evaluate(&mut self.ws, &self.x, Some(&self.y));
        let n = self.ws.batch();
        let mut per_pos = vec![0.0; t];
        let n_plain = self.plain.iter().filter(|&&p| p).count();
        let mut per_pos_text = vec![0.0; t];
        let mut prev = vec![vec![0.0; c.n_heads]; c.n_layers];
        for s in 0..n {
            let (w, i) = self.ws.seq(s);
            per_pos
                .iter_mut()
                .zip(w.token_losses(i))
                .for_each(|(a, b)| *a += b / n as f64);
            if self.plain[s] {
                per_pos_text
                    .iter_mut()
                    .zip(w.token_losses(i))
                    .for_each(|(a, b)| *a += b / n_plain as f64);
            }
            for (l, pl) in prev.iter_mut().enumerate() {
                let pat = w.pattern(l, i);
                for (h, ph) in pl.iter_mut().enumerate() {
                    let p = &pat[h * t * t..(h + 1) * t * t];
                    *ph += (1..t).map(|q| p[q * t + q - 1].as_f64()).sum::<f64>()
                        / ((t - 1) * n) as f64;
                }
            }
        }
        let icl = mean_over(&per_pos, &self.late) - mean_over(&per_pos, &self.early);
        let icl_text = (n_plain > 0)
            .then(|| mean_over(&per_pos_text, &self.late) - mean_over(&per_pos_text, &self.early));
        let (rx, ry) = splits(&self.rep, 2 * self.rep_len);
        m.evaluate(&mut self.ws_rep, &rx, Some(&ry));
        let (rl, tr) = (self.rep_len, 2 * self.rep_len);
        let nr = self.ws_rep.batch();
        let mut induction = vec![vec![0.0; c.n_heads]; c.n_layers];
        let mut rep_loss = 0.0;
        for s in 0..nr {
            let (w, i) = self.ws_rep.seq(s);
            // positions rl .. 2rl predict the second copy from its second token on
            // (its first, the repeat of token 0, no context can tell)
            rep_loss += w.token_losses(i)[rl..].iter().sum::<f64>() / (rl * nr) as f64;
            for (l, il) in induction.iter_mut().enumerate() {
                let pat = w.pattern(l, i);
                for (h, ih) in il.iter_mut().enumerate() {
                    let p = &pat[h * tr * tr..(h + 1) * tr * tr];
                    *ih += (rl..tr)
                        .map(|q| p[q * tr + q - rl + 1].as_f64())
                        .sum::<f64>()
                        / (rl * nr) as f64;
                }
            }
        }
        Eval {
            loss,
            icl,
            icl_text,
            per_pos,
            induction,
            prev_token: prev,
            rep_loss,
            copying: super::ov::copying_scores(m),
        }
    }

    /// The in-context learning score with `heads` (`(layer, head)`) zero-ablated
    /// at `blocks.{l}.attn.hook_z` (their outputs removed from the residual stream).
    pub fn icl_ablated(&self, m: &mut Gpt<T>, heads: &[(usize, usize)]) -> Result<f64, String> {
        let t = self.ws.seq_len();
        let n = self.x.len() / t;
        let mut hooks = Vec::new();
        for l in 0..m.cfg.n_layers {
            let hs: Vec<usize> = heads.iter().filter(|x| x.0 == l).map(|x| x.1).collect();
            if !hs.is_empty() {
                hooks.push(Hook {
                    name: format!("blocks.{l}.attn.hook_z"),
                    ablation: Ablation::Zero,
                    heads: Some(hs),
                    positions: None,
                });
            }
        }
        let logits = m
            .run_with_hooks(&Batch::new(self.x.clone(), n, t), &hooks)
            .map_err(|e| e.to_string())?;
        let per_pos = position_losses(&logits, &self.y, n, t);
        Ok(mean_over(&per_pos, &self.late) - mean_over(&per_pos, &self.early))
    }
}

/// Mean induction score of `heads` with `ablate` (`(layer, head)`) zero-ablated
/// at `hook_z`: how much the induction heads depend on each other head.
pub fn induction_without<T: Float>(
    m: &mut Gpt<T>,
    rep: &[u32],
    rep_len: usize,
    heads: &[(usize, usize)],
    ablate: (usize, usize),
) -> Result<f64, String> {
    let tr = 2 * rep_len;
    let n = rep.len() / (tr + 1);
    let x: Vec<u32> = rep
        .chunks_exact(tr + 1)
        .flat_map(|r| r[..tr].to_vec())
        .collect();
    let hook = Hook {
        name: format!("blocks.{}.attn.hook_z", ablate.0),
        ablation: Ablation::Zero,
        heads: Some(vec![ablate.1]),
        positions: None,
    };
    let names: Vec<String> = heads
        .iter()
        .map(|(l, _)| format!("blocks.{l}.attn.hook_pattern"))
        .collect();
    let refs: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
    let (_, cache) = m
        .run_hooked(&Batch::new(x, n, tr), &[hook], &refs)
        .map_err(|e| e.to_string())?;
    let nh = m.cfg.n_heads;
    let mut total = 0.0;
    for (l, h) in heads {
        let p = &cache[&format!("blocks.{l}.attn.hook_pattern")].data;
        for s in 0..n {
            let ph = &p[(s * nh + h) * tr * tr..(s * nh + h + 1) * tr * tr];
            total += (rep_len..tr)
                .map(|q| ph[q * tr + q - rep_len + 1])
                .sum::<f64>();
        }
    }
    Ok(total / (heads.len() * n * rep_len) as f64)
}

/// Mean next-token loss at each position of `[n, T, V]` logits.
pub fn position_losses(logits: &Tensor, y: &[u32], n: usize, t: usize) -> Vec<f64> {
    let v = logits.shape[2];
    let mut per = vec![0.0; t];
    for s in 0..n {
        for p in 0..t {
            let row = &logits.data[(s * t + p) * v..(s * t + p + 1) * v];
            let mx = row.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b));
            let lse = mx + row.iter().map(|z| (z - mx).exp()).sum::<f64>().ln();
            per[p] += (lse - row[y[s * t + p] as usize]) / n as f64;
        }
    }
    per
}
