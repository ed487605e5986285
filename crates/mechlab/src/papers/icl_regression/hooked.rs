//! The trained LSA as a hooked model, for analysis: its layers' `P`, `Q` from a
//! checkpoint, and a table of the run's held-out tokens.
//!
//! The inputs are vectors `[x; y]`, so a [`Batch`] indexes a table (the role
//! `W_E` plays in a language model): a row is `m` context-token ids followed by
//! the query's id, and the table holds every held-out prompt's tokens (prompt
//! `p`'s token `i` is id `p·(N + 1) + i`, [`HookedLsa::prompt`]) and after them
//! any extra tokens an intervention adds ([`HookedLsa::push_token`]).
//! Output: `ŷ` `[batch]`.
//!
//! | name | layout | what |
//! |---|---|---|
//! | `hook_embed` | `[batch, pos, d_model]` | the tokens `[x; y]`, the query last with `y = 0` |
//! | `blocks.{l}.attn.hook_pattern` | `[batch, head, query_pos, key_pos]` | softmax attention only: `softmax_j(z_jᵀ Q_h z_i)` over the context keys `j < m` |
//! | `blocks.{l}.hook_attn_out` | `[batch, pos, d_model]` | the layer's update of each token: `(1/m) P A Q z_i` (linear), `Σ_h P_h Σ_j a_ij z_j` (softmax) |
//! | `blocks.{l}.hook_resid_post` | `[batch, pos, d_model]` | the tokens after the layer |
//!
//! Every position of every layer is computed, so with softmax attention this is
//! also the dense reference of [`super::softmax`], whose last layer computes the
//! query alone.

use mechlab_engine::hooks::{Axes, Site};
use mechlab_engine::hooks::{Batch, HookError, HookPoint, HookedModel, Tensor};

/// The layers and the token table.
pub struct HookedLsa {
    /// Each layer's `P` and `Q`, `[D, D]` row-major (`[H, D, D]` with softmax
    /// attention).
    pub layers: Vec<(Vec<f64>, Vec<f64>)>,
    /// Softmax attention's heads (`None`: linear attention).
    pub softmax_heads: Option<usize>,
    pub dd: usize,
    /// Tokens `[rows, D]`.
    pub table: Vec<f64>,
    /// Tokens per held-out prompt (`N + 1`).
    pub per_prompt: usize,
}

impl HookedLsa {
    /// The batch row of held-out prompt `p`.
    pub fn prompt(&self, p: usize) -> Vec<u32> {
        (0..self.per_prompt)
            .map(|i| (p * self.per_prompt + i) as u32)
            .collect()
    }
    /// Adds a token to the table; returns its id.
    pub fn push_token(&mut self, tok: &[f64]) -> u32 {
        let id = self.table.len() / self.dd;
        self.table.extend_from_slice(tok);
        id as u32
    }
    /// Token `id`.
    pub fn token(&self, id: u32) -> &[f64] {
        let i = id as usize;
        &self.table[i * self.dd..(i + 1) * self.dd]
    }
}

fn points(layers: usize, softmax: bool) -> Vec<HookPoint> {
    let mut v = vec![HookPoint::new(
        "hook_embed",
        "[batch, pos, d_model]",
        "the tokens [x; y]; the last position is the query, its y is 0",
    )];
    for l in 0..layers {
        if softmax {
            v.push(HookPoint::new(
                format!("blocks.{l}.attn.hook_pattern"),
                "[batch, head, query_pos, key_pos]",
                "softmax over the context keys of z_jᵀ Q_h z_i (the query is no key)",
            ));
        }
        v.push(HookPoint::new(
            format!("blocks.{l}.hook_attn_out"),
            "[batch, pos, d_model]",
            "the layer's update of each token: (1/m) P A Q z_i with A = Σ over the context tokens of z_j z_jᵀ (linear), Σ_h P_h Σ_j a_ij z_j (softmax)",
        ));
        v.push(HookPoint::new(
            format!("blocks.{l}.hook_resid_post"),
            "[batch, pos, d_model]",
            "the tokens after the layer",
        ));
    }
    v
}

const OUTPUT: &str = "[batch]: ŷ = −(the query's last entry after the last layer)";

fn forward(m: &HookedLsa, batch: &Batch, site: &mut Site<'_>) -> Result<Tensor, HookError> {
    let (nb, rows, dd) = (batch.batch, batch.seq_len, m.dd);
    if rows < 2 {
        return Err(HookError::Input(format!(
            "seq_len {rows}: a row is at least one context token and the query"
        )));
    }
    let n_tokens = m.table.len() / dd;
    if let Some(id) = batch.tokens.iter().find(|&&id| id as usize >= n_tokens) {
        return Err(HookError::Input(format!(
            "id {id} is not below the table's {n_tokens} tokens"
        )));
    }
    let axes = Axes {
        head: None,
        pos: Some(1),
    };
    let mut e = Tensor::zeros(vec![nb, rows, dd]);
    for (k, &id) in batch.tokens.iter().enumerate() {
        e.data[k * dd..(k + 1) * dd].copy_from_slice(m.token(id));
    }
    site.visit("hook_embed", &mut e, axes)?;
    for (l, (p, q)) in m.layers.iter().enumerate() {
        let mut out = Tensor::zeros(vec![nb, rows, dd]);
        match m.softmax_heads {
            Some(heads) => {
                softmax_layer(&e.data, p, q, heads, (nb, rows, dd), &mut out.data, l, site)?
            }
            None => linear_layer(&e.data, p, q, (nb, rows, dd), &mut out.data),
        }
        site.visit(&format!("blocks.{l}.hook_attn_out"), &mut out, axes)?;
        e.data.iter_mut().zip(&out.data).for_each(|(x, o)| *x += o);
        site.visit(&format!("blocks.{l}.hook_resid_post"), &mut e, axes)?;
    }
    let y = (0..nb)
        .map(|b| -e.data[((b + 1) * rows) * dd - 1])
        .collect();
    Ok(Tensor::new(vec![nb], y))
}

/// One linear layer, every position: `C = (1/m) P A Q` with `A = Σ_ctx z zᵀ`,
/// each token's update `C z` into `out` `[batch, pos, D]`.
fn linear_layer(
    e: &[f64],
    p: &[f64],
    q: &[f64],
    (nb, rows, dd): (usize, usize, usize),
    out: &mut [f64],
) {
    let ctx = rows - 1;
    let inv = 1.0 / ctx as f64;
    for b in 0..nb {
        let eb = &e[b * rows * dd..(b + 1) * rows * dd];
        // A = Σ_ctx z zᵀ, C = (1/m) P A Q
        let mut a = vec![0.0; dd * dd];
        for z in eb[..ctx * dd].chunks_exact(dd) {
            for i in 0..dd {
                for j in 0..dd {
                    a[i * dd + j] += z[i] * z[j];
                }
            }
        }
        let pa: Vec<f64> = (0..dd * dd)
            .map(|k| {
                (0..dd)
                    .map(|x| p[k / dd * dd + x] * a[x * dd + k % dd])
                    .sum()
            })
            .collect();
        let c: Vec<f64> = (0..dd * dd)
            .map(|k| {
                inv * (0..dd)
                    .map(|x| pa[k / dd * dd + x] * q[x * dd + k % dd])
                    .sum::<f64>()
            })
            .collect();
        for (r, z) in eb.chunks_exact(dd).enumerate() {
            let o = &mut out[(b * rows + r) * dd..(b * rows + r + 1) * dd];
            for i in 0..dd {
                o[i] = (0..dd).map(|j| c[i * dd + j] * z[j]).sum();
            }
        }
    }
}

/// One softmax layer, every position: visits the pattern and writes the update
/// into `out` `[batch, pos, D]`.
#[allow(clippy::too_many_arguments)]
fn softmax_layer(
    e: &[f64],
    p: &[f64],
    q: &[f64],
    heads: usize,
    (nb, rows, dd): (usize, usize, usize),
    out: &mut [f64],
    l: usize,
    site: &mut Site<'_>,
) -> Result<(), HookError> {
    let (ctx, sq) = (rows - 1, dd * dd);
    let dot = |a: &[f64], b: &[f64]| -> f64 { a.iter().zip(b).map(|(x, y)| x * y).sum() };
    let mut pat = Tensor::zeros(vec![nb, heads, rows, ctx]);
    for b in 0..nb {
        let eb = &e[b * rows * dd..(b + 1) * rows * dd];
        for h in 0..heads {
            let qh = &q[h * sq..(h + 1) * sq];
            for i in 0..rows {
                let zi = &eb[i * dd..(i + 1) * dd];
                let u: Vec<f64> = qh.chunks_exact(dd).map(|row| dot(row, zi)).collect();
                let s: Vec<f64> = (0..ctx)
                    .map(|j| dot(&u, &eb[j * dd..(j + 1) * dd]))
                    .collect();
                let mx = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = s.iter().map(|v| (v - mx).exp()).collect();
                let sum: f64 = w.iter().sum();
                let row = &mut pat.data[((b * heads + h) * rows + i) * ctx..][..ctx];
                row.iter_mut().zip(&w).for_each(|(o, v)| *o = v / sum);
            }
        }
    }
    site.visit(
        &format!("blocks.{l}.attn.hook_pattern"),
        &mut pat,
        Axes {
            head: Some(1),
            pos: Some(2),
        },
    )?;
    for b in 0..nb {
        let eb = &e[b * rows * dd..(b + 1) * rows * dd];
        for h in 0..heads {
            let ph = &p[h * sq..(h + 1) * sq];
            for i in 0..rows {
                let a = &pat.data[((b * heads + h) * rows + i) * ctx..][..ctx];
                let mut v = vec![0.0; dd];
                for (j, &aj) in a.iter().enumerate() {
                    for (vb, zb) in v.iter_mut().zip(&eb[j * dd..(j + 1) * dd]) {
                        *vb += aj * zb;
                    }
                }
                let o = &mut out[(b * rows + i) * dd..(b * rows + i + 1) * dd];
                for (oa, row) in o.iter_mut().zip(ph.chunks_exact(dd)) {
                    *oa += dot(row, &v);
                }
            }
        }
    }
    Ok(())
}

impl HookedModel for HookedLsa {
    fn hook_points(&self) -> Vec<HookPoint> {
        points(self.layers.len(), self.softmax_heads.is_some())
    }
    fn output_layout(&self) -> String {
        OUTPUT.into()
    }
    fn forward_hooked(&mut self, batch: &Batch, site: &mut Site) -> Result<Tensor, HookError> {
        forward(self, batch, site)
    }
}
