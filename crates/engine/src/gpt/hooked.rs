//! The model's TransformerLens hook points: the training forward run with a
//! visitor that hands each activation to the [`Site`] (read, then changed by any
//! hooks before the forward goes on), so analysis and training share one forward.
//!
//! Input: [`Batch`] token ids `[batch, pos]` (`pos ≤ n_ctx`). Output: the logits
//! `[batch, pos, d_vocab]`. Hook points, in forward order (`l` over the layers;
//! the MLP ones only with MLPs, `hook_pos_embed` only with absolute positions):
//!
//! | name | layout |
//! |---|---|
//! | `hook_embed`, `hook_pos_embed` | `[batch, pos, d_model]` |
//! | `blocks.{l}.hook_resid_pre` | `[batch, pos, d_model]` |
//! | `blocks.{l}.attn.hook_q`, `hook_k`, `hook_v` | `[batch, pos, head, d_head]` |
//! | `blocks.{l}.attn.hook_pattern` | `[batch, head, query_pos, key_pos]` |
//! | `blocks.{l}.attn.hook_z` | `[batch, pos, head, d_head]` |
//! | `blocks.{l}.hook_attn_out`, `hook_resid_mid` | `[batch, pos, d_model]` |
//! | `blocks.{l}.mlp.hook_pre`, `mlp.hook_post` | `[batch, pos, d_mlp]` |
//! | `blocks.{l}.hook_mlp_out`, `hook_resid_post` | `[batch, pos, d_model]` |
//!
//! ```
//! use mechlab_engine::gpt::{Gpt, GptConfig};
//! use mechlab_engine::hooks::{Batch, HookedModel};
//! use rand::SeedableRng;
//! let cfg = GptConfig { d_model: 8, n_heads: 2, d_head: 4, n_ctx: 6, d_vocab: 5, ..GptConfig::default() };
//! let mut m = Gpt::<f64>::new(&cfg, &mut rand_chacha::ChaCha8Rng::seed_from_u64(1)).unwrap();
//! let (y, cache) = m.run_with_cache(&Batch::new(vec![0, 1, 2, 0], 1, 4), &["blocks.1.attn.hook_pattern"]).unwrap();
//! assert_eq!(y.shape, vec![1, 4, 5]);
//! assert_eq!(cache["blocks.1.attn.hook_pattern"].shape, vec![1, 2, 4, 4]);
//! ```

use super::backward::GradSink;
use super::forward::Resume;
use super::work::{Kind, Visitor};
use super::{Gpt, Workspace};
use crate::hooks::{
    ActivationCache, Axes, Batch, Hook, HookError, HookPoint, HookedModel, Site, Tensor,
};
use crate::Float;

fn layout(kind: Kind) -> &'static str {
    match kind {
        Kind::Resid => "[batch, pos, d_model]",
        Kind::Heads => "[batch, pos, head, d_head]",
        Kind::Pattern => "[batch, head, query_pos, key_pos]",
        Kind::Mlp => "[batch, pos, d_mlp]",
    }
}

impl<T: Float> Gpt<T> {
    /// Every hook point with its layout kind, in forward order.
    fn points_with_kind(&self) -> Vec<(String, Kind, &'static str)> {
        let mut v = vec![(
            "hook_embed".to_string(),
            Kind::Resid,
            "token embeddings W_E[x]",
        )];
        if self.ix.w_pos.is_some() {
            v.push((
                "hook_pos_embed".into(),
                Kind::Resid,
                "position embeddings W_pos[pos]",
            ));
        }
        for l in 0..self.cfg.n_layers {
            let b = format!("blocks.{l}");
            v.push((
                format!("{b}.hook_resid_pre"),
                Kind::Resid,
                "residual stream into the block",
            ));
            v.push((format!("{b}.attn.hook_q"), Kind::Heads, "queries"));
            v.push((format!("{b}.attn.hook_k"), Kind::Heads, "keys"));
            v.push((format!("{b}.attn.hook_v"), Kind::Heads, "values"));
            v.push((
                format!("{b}.attn.hook_pattern"),
                Kind::Pattern,
                "causal softmax of q·k/√d_head",
            ));
            v.push((format!("{b}.attn.hook_z"), Kind::Heads, "Σ_j pattern · v_j"));
            v.push((format!("{b}.hook_attn_out"), Kind::Resid, "z · W_Oᵀ + b_O"));
            if self.cfg.d_mlp > 0 {
                v.push((
                    format!("{b}.hook_resid_mid"),
                    Kind::Resid,
                    "resid_pre + attn_out",
                ));
                v.push((
                    format!("{b}.mlp.hook_pre"),
                    Kind::Mlp,
                    "W_in · LN2(resid_mid) + b_in",
                ));
                v.push((format!("{b}.mlp.hook_post"), Kind::Mlp, "act_fn(pre)"));
                v.push((
                    format!("{b}.hook_mlp_out"),
                    Kind::Resid,
                    "W_out · post + b_out",
                ));
            }
            v.push((
                format!("{b}.hook_resid_post"),
                Kind::Resid,
                "residual stream out of the block",
            ));
        }
        v
    }
}

impl<T: Float> HookedModel for Gpt<T> {
    fn hook_points(&self) -> Vec<HookPoint> {
        self.points_with_kind()
            .into_iter()
            .map(|(n, k, doc)| HookPoint::new(n, layout(k), doc))
            .collect()
    }

    fn output_layout(&self) -> String {
        "[batch, pos, d_vocab]".into()
    }

    fn forward_hooked(&mut self, batch: &Batch, site: &mut Site) -> Result<Tensor, HookError> {
        self.check_input(batch)?;
        let (nb, t) = (batch.batch, batch.seq_len);
        let mut ws = self.scratch.take(self, nb, t, 1);
        let w = &mut ws.chunks[0];
        w.load(&batch.tokens, 0..nb, t);
        let y = self.forward_in(w, batch, site, None);
        self.scratch.put(ws);
        y
    }

    /// With no hooks, the training forward's fixed chunks in parallel (what
    /// `run_with_grads` records too); with hooks, one chunk, so a hook sees
    /// the whole batch (a mean ablation's mean is over all of it).
    fn run_hooked(
        &mut self,
        batch: &Batch,
        hooks: &[Hook],
        names: &[&str],
    ) -> Result<(Tensor, ActivationCache), HookError> {
        if hooks.is_empty() {
            let (ws, y, acts) = self.record(batch, names)?;
            self.scratch.put(ws);
            return Ok((y, acts));
        }
        crate::hooks::run_sited(self, batch, hooks, names)
    }

    /// In parallel over the jobs, each forward only reading the model. Jobs
    /// on one batch (a patching sweep) share its unhooked forward: each
    /// resumes at its first hooked point with what comes before taken from
    /// that forward, so a patch in a late layer reruns only the layers after
    /// it. Same bits as running each job whole.
    fn run_many_each(
        &mut self,
        jobs: &[(&Batch, Vec<Hook>)],
        each: &(dyn Fn(usize, Result<Tensor, HookError>) + Sync),
    ) {
        use rayon::prelude::*;
        let points = self.hook_points();
        let this = &*self;
        let shared = jobs.first().map(|j| j.0);
        if jobs.len() > 1 && jobs.iter().all(|j| Some(j.0) == shared) {
            if let Some(b) = shared {
                return this.run_resumed(b, jobs, &points, each);
            }
        }
        jobs.par_iter().enumerate().for_each(|(i, (batch, hooks))| {
            let run = || {
                this.check_input(batch)?;
                let mut ws = Workspace::with_chunks(this, batch.batch, batch.seq_len, 1);
                let w = &mut ws.chunks[0];
                w.load(&batch.tokens, 0..batch.batch, batch.seq_len);
                this.resume_job(w, batch, &points, hooks, None)
            };
            each(i, run());
        });
    }

    /// The forward and backward run chunk by chunk in parallel (the
    /// training step's fixed chunks, so the numbers do not depend on the
    /// thread count), each chunk recording its sequences' activations and
    /// gradients, joined in order. (The hooked forward runs the batch as one
    /// chunk, so its numbers may differ from these in the last bit.)
    fn run_with_grads(
        &mut self,
        batch: &Batch,
        names: &[&str],
        dout: &mut dyn FnMut(&Tensor) -> Result<Tensor, String>,
    ) -> Result<(Tensor, ActivationCache, ActivationCache), HookError> {
        use crate::parallel::chunk_range;
        use rayon::prelude::*;
        let (mut ws, y, acts) = self.record(batch, names)?;
        let (nb, t, v) = (batch.batch, batch.seq_len, self.cfg.d_vocab);
        let n_chunks = ws.chunks.len();
        let d = crate::hooks::metric_grad(dout, &y)?;
        // only the activations' gradients are asked for: every parameter is
        // frozen for the pass, which skips the weight products
        let frozen = std::mem::replace(&mut self.frozen, vec![true; self.params.len()]);
        let this = &*self;
        let mut grads = self.outputs(names, nb, t);
        let mut parts = split_by_chunk(&mut grads, nb, n_chunks);
        ws.chunks
            .par_iter_mut()
            .zip(parts.par_iter_mut())
            .enumerate()
            .for_each(|(c, (w, out))| {
                let items = chunk_range(nb, n_chunks, c);
                if items.is_empty() {
                    return;
                }
                w.set_dlogits(&d.data[items.start * t * v..items.end * t * v]);
                let mut g = |name: &str, _: Kind, data: &[T]| put(names, out, name, data);
                let sink = GradSink { f: &mut g, names };
                w.backward_visit(this, &mut Some(sink));
            });
        self.frozen = frozen;
        self.scratch.put(ws);
        Ok((y, acts, named(names, grads)))
    }
}

/// Each chunk's rows of `outs` (`[batch, ...]` tensors): `[chunk][tensor]`.
fn split_by_chunk(outs: &mut [Tensor], nb: usize, n_chunks: usize) -> Vec<Vec<&mut [f64]>> {
    let mut parts: Vec<Vec<&mut [f64]>> = (0..n_chunks).map(|_| Vec::new()).collect();
    for x in outs.iter_mut() {
        let per_seq = x.data.len() / nb.max(1);
        let mut rest = &mut x.data[..];
        for (c, part) in parts.iter_mut().enumerate() {
            let n = crate::parallel::chunk_range(nb, n_chunks, c).len() * per_seq;
            let (mine, later) = std::mem::take(&mut rest).split_at_mut(n);
            part.push(mine);
            rest = later;
        }
    }
    parts
}

/// Writes `data` into the chunk's rows of `name`'s output, if asked for.
fn put<T: Float>(names: &[&str], out: &mut [&mut [f64]], name: &str, data: &[T]) {
    if let Some(i) = names.iter().position(|n| *n == name) {
        out[i]
            .iter_mut()
            .zip(data)
            .for_each(|(o, x)| *o = x.as_f64());
    }
}

/// The outputs keyed by their names.
fn named(names: &[&str], outs: Vec<Tensor>) -> ActivationCache {
    names.iter().map(|n| n.to_string()).zip(outs).collect()
}

impl<T: Float> Gpt<T> {
    /// The analysis forward without hooks, chunk by chunk in parallel,
    /// recording `names`: the workspace (for a backward), the logits and the
    /// activations.
    fn record(
        &self,
        batch: &Batch,
        names: &[&str],
    ) -> Result<(Workspace<T>, Tensor, ActivationCache), HookError> {
        use crate::parallel::chunk_range;
        use rayon::prelude::*;
        self.check_input(batch)?;
        crate::hooks::check_names(&self.hook_points(), names)?;
        let (nb, t, v) = (batch.batch, batch.seq_len, self.cfg.d_vocab);
        let mut ws = self.scratch.take(self, nb, t, crate::parallel::N_CHUNKS);
        let n_chunks = ws.chunks.len();
        let mut acts = self.outputs(names, nb, t);
        let mut parts = split_by_chunk(&mut acts, nb, n_chunks);
        ws.chunks
            .par_iter_mut()
            .zip(parts.par_iter_mut())
            .enumerate()
            .try_for_each(|(c, (w, out))| -> Result<(), HookError> {
                let items = chunk_range(nb, n_chunks, c);
                if items.is_empty() {
                    return Ok(());
                }
                w.load(&batch.tokens, items, t);
                let mut f = |name: &str, _: Kind, data: &mut [T]| -> Result<bool, HookError> {
                    put(names, out, name, data);
                    Ok(false)
                };
                let mut vis: Visitor<'_, T> = Some(&mut f);
                w.forward(self, &mut vis)
            })?;
        drop(parts);
        let mut logits = Vec::with_capacity(nb * t * v);
        for (c, w) in ws.chunks.iter().enumerate() {
            for s in 0..chunk_range(nb, n_chunks, c).len() {
                logits.extend(w.logits(s).iter().map(|x| x.as_f64()));
            }
        }
        Ok((ws, Tensor::new(vec![nb, t, v], logits), named(names, acts)))
    }

    /// A zero `[batch, ...]` tensor for each of `names` (hook points).
    fn outputs(&self, names: &[&str], nb: usize, t: usize) -> Vec<Tensor> {
        let kinds = self.points_with_kind();
        names
            .iter()
            .map(|n| {
                let kind = kinds
                    .iter()
                    .find(|p| p.0 == *n)
                    .map_or(Kind::Resid, |p| p.1);
                Tensor::zeros(self.shape_of(kind, nb, t))
            })
            .collect()
    }

    /// [`HookedModel::run_many_each`] for jobs that share `batch`: its unhooked
    /// forward once, then each job resumed at its first hooked point, the
    /// latest first so that what each reads before its point is still that
    /// forward's. The jobs are dealt round-robin to one workspace per thread.
    fn run_resumed(
        &self,
        batch: &Batch,
        jobs: &[(&Batch, Vec<Hook>)],
        points: &[HookPoint],
        each: &(dyn Fn(usize, Result<Tensor, HookError>) + Sync),
    ) {
        use rayon::prelude::*;
        let fail = |e: HookError| (0..jobs.len()).for_each(|i| each(i, Err(e.clone())));
        if let Err(e) = self.check_input(batch) {
            return fail(e);
        }
        let (nb, t) = (batch.batch, batch.seq_len);
        let mut ws = self.scratch.take(self, nb, t, 1);
        let base = &mut ws.chunks[0];
        base.load(&batch.tokens, 0..nb, t);
        let mut none = Site::new(points, &[], &[]).expect("no hooks");
        if let Err(e) = self.forward_in(base, batch, &mut none, None) {
            return fail(e);
        }
        // each job's resume point: its first hooked point in forward order
        let start = |hooks: &[Hook]| -> Result<Option<Resume>, HookError> {
            let site = Site::new(points, &[], hooks)?;
            let first = points.iter().find(|p| site.touches(&p.name));
            Ok(first.and_then(|p| Resume::at(&p.name)))
        };
        let mut order: Vec<(Option<Resume>, usize)> = jobs
            .iter()
            .enumerate()
            .map(|(i, (_, h))| (start(h).ok().flatten(), i))
            .collect();
        order.sort_by(|a, b| b.cmp(a));
        // what each resume point reads first, as the unhooked forward left it
        let mut saved = std::collections::BTreeMap::new();
        for r in order
            .iter()
            .filter_map(|o| o.0)
            .flat_map(Resume::overwrites)
        {
            saved
                .entry(r)
                .or_insert_with(|| base.at_mut(self, r).to_vec());
        }
        let base = &*base;
        let lanes = rayon::current_num_threads().clamp(1, order.len());
        (0..lanes).into_par_iter().for_each(|lane| {
            let mut w = base.clone();
            for &(from, i) in order.iter().skip(lane).step_by(lanes) {
                for r in from.into_iter().flat_map(Resume::overwrites) {
                    w.at_mut(self, r).copy_from_slice(&saved[&r]);
                }
                each(i, self.resume_job(&mut w, batch, points, &jobs[i].1, from));
            }
        });
        self.scratch.put(ws);
    }

    /// One job of [`Gpt::run_resumed`] on `w`, resumed at `from`.
    fn resume_job(
        &self,
        w: &mut super::work::Work<T>,
        batch: &Batch,
        points: &[HookPoint],
        hooks: &[Hook],
        from: Option<Resume>,
    ) -> Result<Tensor, HookError> {
        let mut site = Site::new(points, &[], hooks)?;
        let y = self.forward_in(w, batch, &mut site, from)?;
        site.finish()?;
        Ok(y)
    }

    fn check_input(&self, batch: &Batch) -> Result<(), HookError> {
        let (nb, t) = (batch.batch, batch.seq_len);
        let c = &self.cfg;
        if nb == 0 || t == 0 || t > c.n_ctx {
            return Err(HookError::Input(format!(
                "batch {nb} × pos {t}: need at least one sequence of 1..={} positions",
                c.n_ctx
            )));
        }
        if let Some(bad) = batch.tokens.iter().find(|&&x| x as usize >= c.d_vocab) {
            return Err(HookError::Input(format!(
                "token {bad} outside the vocabulary of {}",
                c.d_vocab
            )));
        }
        Ok(())
    }

    /// An activation's `[batch, ...]` shape for `nb` sequences of `t`.
    fn shape_of(&self, kind: Kind, nb: usize, t: usize) -> Vec<usize> {
        let c = &self.cfg;
        match kind {
            Kind::Resid => vec![nb, t, c.d_model],
            Kind::Heads => vec![nb, t, c.n_heads, c.d_head],
            Kind::Pattern => vec![nb, c.n_heads, t, t],
            Kind::Mlp => vec![nb, t, c.d_mlp],
        }
    }

    /// The analysis forward of a loaded chunk `w`: every activation through
    /// `site`, the logits `[batch, pos, d_vocab]` out.
    fn forward_in(
        &self,
        w: &mut super::work::Work<T>,
        batch: &Batch,
        site: &mut Site,
        from: Option<Resume>,
    ) -> Result<Tensor, HookError> {
        let (nb, t) = (batch.batch, batch.seq_len);
        let c = &self.cfg;
        let mut f = |name: &str, kind: Kind, data: &mut [T]| -> Result<bool, HookError> {
            if !site.touches(name) {
                return Ok(false);
            }
            let axes = match kind {
                Kind::Resid | Kind::Mlp => Axes {
                    head: None,
                    pos: Some(1),
                },
                Kind::Heads => Axes {
                    head: Some(2),
                    pos: Some(1),
                },
                Kind::Pattern => Axes {
                    head: Some(1),
                    pos: Some(2),
                },
            };
            let shape = self.shape_of(kind, nb, t);
            if site.visit_in_place(name, data, &shape, axes)? {
                return Ok(true);
            }
            let mut x = Tensor::new(shape, data.iter().map(|v| v.as_f64()).collect());
            site.visit(name, &mut x, axes)?;
            data.iter_mut()
                .zip(&x.data)
                .for_each(|(a, &b)| *a = T::of(b));
            Ok(true)
        };
        let mut vis: Visitor<'_, T> = Some(&mut f);
        w.forward_from(self, from, &mut vis)?;
        let v = c.d_vocab;
        let logits = (0..nb)
            .flat_map(|s| w.logits(s).iter().map(|x| x.as_f64()).collect::<Vec<_>>())
            .collect();
        Ok(Tensor::new(vec![nb, t, v], logits))
    }
}
