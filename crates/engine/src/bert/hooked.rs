//! [`HookedModel`] for [`Bert`]: TransformerLens hook names, the activation cache,
//! and Zero / Mean / Patch interventions at any site.
//!
//! Names and layouts follow TransformerLens's `HookedEncoder` (`hook_embed`,
//! `blocks.{l}.attn.hook_pattern` as `[batch, head, query_pos, key_pos]`,
//! `blocks.{l}.attn.hook_z` as `[batch, pos, head, d_head]`, ...). As in its
//! `BertBlock`, `blocks.{l}.hook_resid_post` is the sum *before* the block's final
//! layer norm and `blocks.{l}.hook_normalized_resid_post` is the block's output.
//! A hook may select heads (sites with a `head` axis) and positions (the `pos` or
//! `query_pos` axis). A `Mean` ablation is the batch mean of the activation as it
//! arrives at its site (after the hooks that act before it), found by one extra
//! forward pass and then patched in. Changing `hook_pattern` recomputes `z` from
//! the changed pattern, so the change reaches the output.
//!
//! Padding: tokens equal to the config's `pad_token_id` are masked as keys; their
//! own rows are computed as Hugging Face computes them.

use super::encoder::{Bert, Site};
use crate::hooks::{
    Ablation, ActivationCache, Batch, Hook, HookError, HookPoint, HookedModel, Site as HookSite,
    Tensor,
};
use crate::parallel::{chunk_range, for_each_chunk};

/// Sequences stacked into one chunk's products: enough rows (8 × T) to amortise
/// packing each weight matrix, few enough that a batch of 16 feeds two threads.
const CHUNK_SEQS: usize = 8;

/// What happens at one site for one forward pass.
enum Action<'h> {
    Hook(&'h Hook),
    /// Copy into cache slot `i`.
    Cache(usize),
}

/// A chunk's share of one forward pass: its workspace and its rows of every output.
struct Job<'a> {
    ws: super::encoder::Workspace,
    out: &'a mut [f64],
    caches: Vec<&'a mut [f64]>,
}

impl Bert {
    pub(super) fn site_of(&self, name: &str) -> Result<Site, HookError> {
        (0..Site::n_sites(self.config.n_layers))
            .filter_map(|i| Site::from_index(i, self.config.n_layers))
            .find(|s| s.name() == name)
            .ok_or_else(|| HookError::Unknown {
                name: name.to_string(),
                available: self.hook_points().into_iter().map(|p| p.name).collect(),
            })
    }

    pub(super) fn check_batch(&self, batch: &Batch) -> Result<(), HookError> {
        let cfg = &self.config;
        if batch.seq_len == 0 || batch.seq_len > cfg.n_ctx {
            return Err(HookError::Input(format!(
                "seq_len {} is outside 1..={} (max_position_embeddings)",
                batch.seq_len, cfg.n_ctx
            )));
        }
        if let Some(&bad) = batch.tokens.iter().find(|&&t| t as usize >= cfg.d_vocab) {
            return Err(HookError::Input(format!(
                "token id {bad} is outside the vocabulary of {}",
                cfg.d_vocab
            )));
        }
        Ok(())
    }

    /// Checks a hook against its site's layout for `t` positions.
    fn check_hook(&self, hook: &Hook, site: Site, batch: &Batch) -> Result<(), HookError> {
        let (layout, dims) = site.layout(&self.config, batch.seq_len);
        let invalid = |reason: String| HookError::Invalid {
            name: hook.name.clone(),
            reason,
        };
        if let Some(heads) = &hook.heads {
            if !layout.contains("head") {
                return Err(invalid(format!("{layout} has no head axis")));
            }
            if let Some(h) = heads.iter().find(|&&h| h >= self.config.n_heads) {
                return Err(invalid(format!("head {h} ≥ {} heads", self.config.n_heads)));
            }
        }
        if let Some(p) = hook
            .positions
            .as_ref()
            .and_then(|ps| ps.iter().find(|&&p| p >= batch.seq_len))
        {
            return Err(invalid(format!("position {p} ≥ seq_len {}", batch.seq_len)));
        }
        if let Ablation::Patch(t) = &hook.ablation {
            let mut want = vec![batch.batch];
            want.extend(&dims);
            if t.shape != want {
                return Err(invalid(format!(
                    "patch has shape {:?}, the activation {layout} is {want:?}",
                    t.shape
                )));
            }
        }
        Ok(())
    }

    /// One forward pass over `batch` with `hooks` (no `Mean` left) applied and the
    /// activations at `cache` recorded.
    fn forward_batch(
        &mut self,
        batch: &Batch,
        hooks: &[(Site, &Hook)],
        cache: &[Site],
    ) -> (Tensor, Vec<Tensor>) {
        let cfg = self.config.clone();
        let (nb, t) = (batch.batch, batch.seq_len);
        let mut out = Tensor::zeros(vec![nb, t, cfg.d_model]);
        let mut caches: Vec<Tensor> = cache
            .iter()
            .map(|s| {
                let mut shape = vec![nb];
                shape.extend(s.layout(&cfg, t).1);
                Tensor::zeros(shape)
            })
            .collect();
        // Sites are visited once per layer per sequence: index the plan by site.
        let mut plan: Vec<Vec<Action>> = (0..Site::n_sites(cfg.n_layers))
            .map(|_| Vec::new())
            .collect();
        for (s, h) in hooks {
            plan[s.index()].push(Action::Hook(h));
        }
        for (i, s) in cache.iter().enumerate() {
            plan[s.index()].push(Action::Cache(i));
        }
        // Chunks of at most CHUNK_SEQS sequences, whatever the thread count, so the
        // stacked products (and their rounding) do not depend on the machine.
        let n_chunks = nb.div_ceil(CHUNK_SEQS).max(1);
        let workspaces = self.workspaces_for(n_chunks);
        // Split every output into the chunks' contiguous rows.
        let mut out_rest: &mut [f64] = &mut out.data;
        let mut cache_rest: Vec<&mut [f64]> = caches.iter_mut().map(|c| &mut c.data[..]).collect();
        let mut jobs = Vec::with_capacity(n_chunks);
        for (c, ws) in workspaces.into_iter().enumerate() {
            let n = chunk_range(nb, n_chunks, c).len();
            let (o, rest) = std::mem::take(&mut out_rest).split_at_mut(n * t * cfg.d_model);
            out_rest = rest;
            let mut mine = Vec::with_capacity(cache.len());
            for (slot, s) in cache_rest.iter_mut().zip(cache) {
                let per: usize = s.layout(&cfg, t).1.iter().product();
                let (a, b) = std::mem::take(slot).split_at_mut(n * per);
                *slot = b;
                mine.push(a);
            }
            jobs.push(Job {
                ws,
                out: o,
                caches: mine,
            });
        }
        let this = &*self;
        for_each_chunk(nb, &mut jobs, |_, items, job| {
            let (first, n) = (items.start, items.len());
            if n == 0 {
                return;
            }
            let caches = &mut job.caches;
            let mut tap = |site: Site, s: usize, x: &mut [f32]| -> bool {
                let mut changed = false;
                for a in &plan[site.index()] {
                    match a {
                        Action::Hook(h) => {
                            apply(h, site, x, first + s, &this.config, t);
                            changed = true;
                        }
                        Action::Cache(i) => {
                            let dst = &mut caches[*i][s * x.len()..(s + 1) * x.len()];
                            dst.iter_mut()
                                .zip(x.iter())
                                .for_each(|(d, &v)| *d = v as f64);
                        }
                    }
                }
                changed
            };
            let tokens = &batch.tokens[first * t..(first + n) * t];
            this.forward_chunk(&mut job.ws, tokens, n, &mut tap);
            job.out
                .iter_mut()
                .zip(job.ws.output())
                .for_each(|(d, &v)| *d = v as f64);
        });
        self.workspaces = jobs.into_iter().map(|j| j.ws).collect();
        (out, caches)
    }
}

/// Applies a `Zero` or `Patch` hook to sequence `b`'s activation `x` at `site`.
fn apply(hook: &Hook, site: Site, x: &mut [f32], b: usize, cfg: &super::BertConfig, t: usize) {
    let (_, dims) = site.layout(cfg, t);
    let patch = match &hook.ablation {
        Ablation::Patch(p) => Some(&p.data[b * x.len()..(b + 1) * x.len()]),
        Ablation::Zero => None,
        Ablation::Mean | Ablation::Call(_) => {
            unreachable!("Mean and Call hooks are resolved to patches before the forward")
        }
    };
    let head_ok = |h: usize| hook.heads.as_ref().is_none_or(|hs| hs.contains(&h));
    let pos_ok = |p: usize| hook.positions.as_ref().is_none_or(|ps| ps.contains(&p));
    // Index of (pos, head) of each element, by layout.
    let selected = |i: usize| -> bool {
        match site {
            Site::Pattern(_) => {
                // [head, query_pos, key_pos]
                let (h, q) = (i / (t * t), (i / t) % t);
                head_ok(h) && pos_ok(q)
            }
            _ if dims.len() == 3 => {
                // [pos, head, d_head]
                let (p, h) = (i / (dims[1] * dims[2]), (i / dims[2]) % dims[1]);
                head_ok(h) && pos_ok(p)
            }
            _ => pos_ok(i / dims[1]),
        }
    };
    for (i, v) in x.iter_mut().enumerate() {
        if selected(i) {
            *v = patch.map_or(0.0, |p| p[i] as f32);
        }
    }
}

impl HookedModel for Bert {
    fn hook_points(&self) -> Vec<HookPoint> {
        let cfg = &self.config;
        (0..Site::n_sites(cfg.n_layers))
            .filter_map(|i| Site::from_index(i, cfg.n_layers))
            .map(|s| {
                let (layout, _) = s.layout(cfg, 0);
                HookPoint::new(s.name(), layout, format!("BERT {s:?}"))
            })
            .collect()
    }

    fn output_layout(&self) -> String {
        "[batch, pos, d_model]".into()
    }

    /// Through the `f64` forward and backward of [`super::grad`].
    fn run_with_grads(
        &mut self,
        batch: &Batch,
        names: &[&str],
        dout: &mut dyn FnMut(&Tensor) -> Result<Tensor, String>,
    ) -> Result<(Tensor, ActivationCache, ActivationCache), HookError> {
        self.grads(batch, names, dout)
    }

    /// The hooks are applied per chunk of sequences inside the f32 forward; a
    /// `Mean` hook is first resolved to a patch by one forward up to its site.
    fn forward_hooked(&mut self, batch: &Batch, site: &mut HookSite) -> Result<Tensor, HookError> {
        self.check_batch(batch)?;
        let hooks = site.hooks();
        let names: Vec<&str> = site.names().to_vec();
        let wanted = names
            .iter()
            .map(|n| self.site_of(n))
            .collect::<Result<Vec<_>, _>>()?;
        let mut sites = Vec::with_capacity(hooks.len());
        for h in hooks {
            let s = self.site_of(&h.name)?;
            self.check_hook(h, s, batch)?;
            sites.push(s);
        }
        // Resolve Mean and Call hooks in forward order into patches: each sees
        // the hooks acting before it, by one forward up to its site.
        let mut resolved: Vec<Hook> = hooks.to_vec();
        let mut order: Vec<usize> = (0..hooks.len())
            .filter(|&i| matches!(hooks[i].ablation, Ablation::Mean | Ablation::Call(_)))
            .collect();
        order.sort_by_key(|&i| (sites[i], i));
        for i in order {
            let before: Vec<(Site, &Hook)> = (0..hooks.len())
                .filter(|&j| sites[j] < sites[i] || (sites[j] == sites[i] && j < i))
                .map(|j| (sites[j], &resolved[j]))
                .collect();
            let (_, acts) = self.forward_batch(batch, &before, &[sites[i]]);
            let act = &acts[0];
            if let Ablation::Call(f) = &hooks[i].ablation {
                let name = &hooks[i].name;
                let invalid = |reason: String| HookError::Invalid {
                    name: name.clone(),
                    reason,
                };
                let new = (f.0)(act).map_err(invalid)?;
                if new.shape != act.shape {
                    return Err(invalid(format!(
                        "the hook function returned shape {:?}, the activation {:?}",
                        new.shape, act.shape
                    )));
                }
                // the function's values where the hook selects, the activation's elsewhere
                let mut h = hooks[i].clone();
                h.ablation = Ablation::patch(new);
                resolved[i] = h;
                continue;
            }
            let per = act.numel() / batch.batch;
            let mut mean = vec![0.0; per];
            for row in act.data.chunks_exact(per) {
                mean.iter_mut().zip(row).for_each(|(m, &v)| *m += v);
            }
            mean.iter_mut().for_each(|m| *m /= batch.batch as f64);
            let data = mean.iter().copied().cycle().take(act.numel()).collect();
            resolved[i].ablation = Ablation::patch(Tensor::new(act.shape.clone(), data));
        }
        let all: Vec<(Site, &Hook)> = sites.iter().copied().zip(resolved.iter()).collect();
        let (out, tensors) = self.forward_batch(batch, &all, &wanted);
        for (n, t) in names.iter().zip(tensors) {
            site.record(n, t);
        }
        site.applied_all();
        Ok(out)
    }
}
