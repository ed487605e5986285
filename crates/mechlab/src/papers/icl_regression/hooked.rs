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
//! | `blocks.{l}.hook_attn_out` | `[batch, pos, d_model]` | the layer's update `(1/m) P A Q z_j` of each token |
//! | `blocks.{l}.hook_resid_post` | `[batch, pos, d_model]` | the tokens after the layer |

use mechlab_engine::hooks::{Axes, Site};
use mechlab_engine::hooks::{Batch, HookError, HookPoint, HookedModel, Tensor};

/// The layers and the token table.
pub struct HookedLsa {
    /// Each layer's `P` and `Q`, `[D, D]` row-major.
    pub layers: Vec<(Vec<f64>, Vec<f64>)>,
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

fn points(layers: usize) -> Vec<HookPoint> {
    let mut v = vec![HookPoint::new(
        "hook_embed",
        "[batch, pos, d_model]",
        "the tokens [x; y]; the last position is the query, its y is 0",
    )];
    for l in 0..layers {
        v.push(HookPoint::new(
            format!("blocks.{l}.hook_attn_out"),
            "[batch, pos, d_model]",
            "the layer's update (1/m) P A Q z_j, A = Σ over the context tokens of z_i z_iᵀ",
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
    let ctx = rows - 1;
    let axes = Axes {
        head: None,
        pos: Some(1),
    };
    let mut e = Tensor::zeros(vec![nb, rows, dd]);
    for (k, &id) in batch.tokens.iter().enumerate() {
        e.data[k * dd..(k + 1) * dd].copy_from_slice(m.token(id));
    }
    site.visit("hook_embed", &mut e, axes)?;
    let inv = 1.0 / ctx as f64;
    for (l, (p, q)) in m.layers.iter().enumerate() {
        let mut out = Tensor::zeros(vec![nb, rows, dd]);
        for b in 0..nb {
            let eb = &e.data[b * rows * dd..(b + 1) * rows * dd];
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
                let o = &mut out.data[(b * rows + r) * dd..(b * rows + r + 1) * dd];
                for i in 0..dd {
                    o[i] = (0..dd).map(|j| c[i * dd + j] * z[j]).sum();
                }
            }
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

impl HookedModel for HookedLsa {
    fn hook_points(&self) -> Vec<HookPoint> {
        points(self.layers.len())
    }
    fn output_layout(&self) -> String {
        OUTPUT.into()
    }
    fn forward_hooked(&mut self, batch: &Batch, site: &mut Site) -> Result<Tensor, HookError> {
        forward(self, batch, site)
    }
}
