//! The attention-SVM model as a hooked model, for analysis: the one head of
//! `f(X) = vᵀ Xᵀ softmax(X W z)` with its effective `W` (`W`, or `K Qᵀ`) and
//! read-out `v` from a checkpoint, widened to f64.
//!
//! The model's inputs are vectors, not token ids, so a [`Batch`] indexes a
//! table of the run's vectors (the role `W_E` plays in a language model): ids
//! `0 .. n·T` are the tokens `x_(i,t)` (id `i·T + t`), ids `n·T .. n·T + n` the
//! queries `z_i`. A row of the batch is a query id followed by `T` token ids
//! (like a ⟨cls⟩ token prepended), so sequence `i` of the run is
//! `[n·T + i, i·T, …, i·T + T − 1]` ([`HookedSvm::sequence`]), and replacing a
//! token is replacing an id. Output: `f` `[batch]` (the label is its sign).
//!
//! | name | layout | what |
//! |---|---|---|
//! | `hook_embed` | `[batch, pos, d_model]` | the vectors; position 0 is the query |
//! | `blocks.0.attn.hook_attn_scores` | `[batch, head, query_pos, key_pos]` | `x_tᵀ W z`, `1 × 1 × (T + 1)`; key 0 (the query itself) is 0 |
//! | `blocks.0.attn.hook_pattern` | `[batch, head, query_pos, key_pos]` | softmax over keys `1..=T`; key 0 is 0 |
//! | `blocks.0.attn.hook_z` | `[batch, pos, head, d_head]` | `Σ_t a_t x_t`, `1 × 1 × d` |
//!
//! Only the ⟨cls⟩-query form (`model.output = "cls"`) is served.

use mechlab_engine::hooks::{Axes, Site};
use mechlab_engine::hooks::{Batch, HookError, HookPoint, HookedModel, Tensor};

/// The head, its read-out and the run's vectors.
pub struct HookedSvm {
    /// The effective `W`, `[d, d]`.
    pub w: Vec<f64>,
    pub v: Vec<f64>,
    /// Tokens `[n·T, d]` then queries `[n, d]`.
    pub table: Vec<f64>,
    pub n: usize,
    pub t: usize,
    pub d: usize,
}

impl HookedSvm {
    /// The batch row of the run's sequence `i`.
    pub fn sequence(&self, i: usize) -> Vec<u32> {
        let mut row = vec![(self.n * self.t + i) as u32];
        row.extend((0..self.t).map(|k| (i * self.t + k) as u32));
        row
    }
    /// Every sequence of the run, one per batch row.
    pub fn all_sequences(&self) -> Batch {
        let tokens = (0..self.n).flat_map(|i| self.sequence(i)).collect();
        Batch::new(tokens, self.n, self.t + 1)
    }
    fn rows(&self) -> usize {
        self.n * self.t + self.n
    }
}

fn points() -> Vec<HookPoint> {
    let pattern = "[batch, head, query_pos, key_pos]";
    vec![
        HookPoint::new(
            "hook_embed",
            "[batch, pos, d_model]",
            "the vectors of the ids; position 0 is the query z",
        ),
        HookPoint::new(
            "blocks.0.attn.hook_attn_scores",
            pattern,
            "scores x_tᵀ W z; query_pos is the query alone; key 0 (the query's slot) is 0",
        ),
        HookPoint::new(
            "blocks.0.attn.hook_pattern",
            pattern,
            "softmax over the keys 1..=T; key 0 is 0",
        ),
        HookPoint::new(
            "blocks.0.attn.hook_z",
            "[batch, pos, head, d_head]",
            "Σ_t a_t x_t (values are the tokens, d_head = d); pos is the query alone",
        ),
    ]
}

const OUTPUT: &str = "[batch]: f = vᵀ hook_z (the label is its sign)";

fn forward(m: &HookedSvm, batch: &Batch, site: &mut Site<'_>) -> Result<Tensor, HookError> {
    let (nb, l, d) = (batch.batch, batch.seq_len, m.d);
    if l < 2 {
        return Err(HookError::Input(format!(
            "seq_len {l}: a row is a query id and at least one token id"
        )));
    }
    if let Some(id) = batch.tokens.iter().find(|&&id| id as usize >= m.rows()) {
        return Err(HookError::Input(format!(
            "id {id} is not below the table's {} rows (n·T tokens, then n queries)",
            m.rows()
        )));
    }
    let mut x = Tensor::zeros(vec![nb, l, d]);
    for (k, &id) in batch.tokens.iter().enumerate() {
        let id = id as usize;
        x.data[k * d..(k + 1) * d].copy_from_slice(&m.table[id * d..(id + 1) * d]);
    }
    site.visit(
        "hook_embed",
        &mut x,
        Axes {
            head: None,
            pos: Some(1),
        },
    )?;
    let pattern_axes = Axes {
        head: Some(1),
        pos: Some(2),
    };
    let mut sc = Tensor::zeros(vec![nb, 1, 1, l]);
    for b in 0..nb {
        let z = &x.data[b * l * d..][..d];
        // W z, then each token's inner product with it.
        let wz: Vec<f64> = (0..d)
            .map(|r| (0..d).map(|c| m.w[r * d + c] * z[c]).sum())
            .collect();
        for k in 1..l {
            let xt = &x.data[(b * l + k) * d..][..d];
            sc.data[b * l + k] = xt.iter().zip(&wz).map(|(a, c)| a * c).sum();
        }
    }
    site.visit("blocks.0.attn.hook_attn_scores", &mut sc, pattern_axes)?;
    let mut a = Tensor::zeros(vec![nb, 1, 1, l]);
    for b in 0..nb {
        let s = &sc.data[b * l + 1..(b + 1) * l];
        let mx = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let row = &mut a.data[b * l + 1..(b + 1) * l];
        for (o, si) in row.iter_mut().zip(s) {
            *o = (si - mx).exp();
        }
        let sum: f64 = row.iter().sum();
        row.iter_mut().for_each(|o| *o /= sum);
    }
    site.visit("blocks.0.attn.hook_pattern", &mut a, pattern_axes)?;
    let mut z = Tensor::zeros(vec![nb, 1, 1, d]);
    for b in 0..nb {
        for k in 1..l {
            let w = a.data[b * l + k];
            let xt = &x.data[(b * l + k) * d..][..d];
            for (o, xv) in z.data[b * d..(b + 1) * d].iter_mut().zip(xt) {
                *o += w * xv;
            }
        }
    }
    site.visit(
        "blocks.0.attn.hook_z",
        &mut z,
        Axes {
            head: Some(2),
            pos: Some(1),
        },
    )?;
    let f = (0..nb)
        .map(|b| {
            z.data[b * d..(b + 1) * d]
                .iter()
                .zip(&m.v)
                .map(|(a, c)| a * c)
                .sum()
        })
        .collect();
    Ok(Tensor::new(vec![nb], f))
}

impl HookedModel for HookedSvm {
    fn hook_points(&self) -> Vec<HookPoint> {
        points()
    }
    fn output_layout(&self) -> String {
        OUTPUT.into()
    }
    fn forward_hooked(&mut self, batch: &Batch, site: &mut Site) -> Result<Tensor, HookError> {
        forward(self, batch, site)
    }
}
