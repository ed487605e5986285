//! Probe-time reads of [`TopicMlm`]: the effective token embeddings and one
//! document's full attention pattern. They are separate from training because
//! they answer a different question with a different shape: training only ever
//! queries the `S` labelled positions through the chunk workspaces, while a probe
//! wants every position as a query (`[L, L]`) or every vocabulary id alone
//! (`[V, d]`), once, outside the step. They reuse the training layers
//! ([`embed`], [`project`], [`scores`]) on a throwaway [`Work`] sized for the
//! call, so what they read is exactly what training computes.

use super::attention::{project, scores};
use super::*;

impl<T: Float> TopicMlm<T> {
    /// `h0` of every token id alone: `[d_vocab, d_model]` (the effective embeddings).
    pub fn token_embeddings(&self) -> Vec<f64> {
        let (v, d) = (self.plan.v, self.plan.d);
        let mut w = make_probe_work::<T>(v, d);
        let ids: Vec<u32> = (0..v as u32).collect();
        embed(
            &self.p,
            &self.plan,
            &ids,
            &mut w.hook_embed,
            &mut w.emb_pre,
            &mut w.emb_mean,
            &mut w.emb_rstd,
        );
        w.hook_embed[..v * d].iter().map(|x| x.as_f64()).collect()
    }

    /// The attention pattern `[L, L]` of one document, every position a query
    /// (hidden keys get 0).
    pub fn attention_pattern(&self, ids: &[u32], hidden: &[bool]) -> Vec<f64> {
        let (l, d) = (ids.len(), self.plan.d);
        let mut w = make_probe_work::<T>(l, d);
        embed(
            &self.p,
            &self.plan,
            ids,
            &mut w.hook_embed,
            &mut w.emb_pre,
            &mut w.emb_mean,
            &mut w.emb_rstd,
        );
        let n_vis = hidden.iter().filter(|h| !**h).count().max(1);
        if self.plan.uniform {
            let u = 1.0 / n_vis as f64;
            return (0..l * l)
                .map(|ij| if hidden[ij % l] { 0.0 } else { u })
                .collect();
        }
        w.qpos = (0..l).collect();
        project(
            &mut w.hook_q,
            &w.hook_embed,
            ids,
            None,
            &self.plan,
            &self.p[W_Q],
            &self.p[B_Q],
        );
        project(
            &mut w.hook_k,
            &w.hook_embed,
            ids,
            None,
            &self.plan,
            &self.p[W_K],
            &self.p[B_K],
        );
        scores(&mut w.hook_pattern, &w.hook_q, &w.hook_k, hidden, l, l, d);
        w.hook_pattern[..l * l].iter().map(|x| x.as_f64()).collect()
    }
}

/// A [`Work`] holding only the buffers the probes touch, for `l` rows of width
/// `d`: `hook_embed`, `emb_pre`: `[l, d]`, `emb_mean`, `emb_rstd`: `[l]`, `hook_q`,
/// `hook_k`: `[l, d]`, `hook_pattern`: `[l, l]`. The rest stay empty so a probe
/// over the whole vocabulary does not allocate training-sized buffers.
fn make_probe_work<T: Float>(l: usize, d: usize) -> Work<T> {
    let z = |n: usize| vec![T::zero(); n];
    Work {
        hook_embed: z(l * d),
        emb_pre: z(l * d),
        emb_mean: z(l),
        emb_rstd: z(l),
        hq: Vec::new(),
        hook_q: z(l * d),
        hook_k: z(l * d),
        hook_v: Vec::new(),
        hook_pattern: z(l * l),
        hook_z: Vec::new(),
        resid: Vec::new(),
        ln_mean: Vec::new(),
        ln_rstd: Vec::new(),
        y: Vec::new(),
        logits: Vec::new(),
        d_logits: Vec::new(),
        d_y: Vec::new(),
        d_resid: Vec::new(),
        d_pattern: Vec::new(),
        d_q: Vec::new(),
        d_k: Vec::new(),
        d_v: Vec::new(),
        d_h0: Vec::new(),
        d_hq: Vec::new(),
        hbar: Vec::new(),
        d_table: Vec::new(),
        qpos: Vec::new(),
        row_top: Vec::new(),
        row_l1p: Vec::new(),
        grads: std::array::from_fn(|_| Vec::new()),
        loss: 0.0,
    }
}
