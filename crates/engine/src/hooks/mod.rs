//! Named hook points: every model's activations under TransformerLens names, read
//! with [`HookedModel::run_with_cache`] and changed with [`HookedModel::run_with_hooks`].
//!
//! A researcher who knows TransformerLens asks a model for `blocks.0.attn.hook_pattern`
//! and gets `[batch, head, query_pos, key_pos]`; the same name means the same layout
//! in every mechlab model (see [`layout_of`] for the rule per name). A model lists
//! the names it can produce with [`HookedModel::hook_points`]; asking for any other
//! name is a [`HookError::Unknown`] naming the closest valid ones, never an empty
//! array. Nothing here runs inside a training step: a model fills a cache only
//! when asked, so training pays nothing for hooks nobody uses.
//!
//! ```
//! use mechlab_engine::hooks::{layout_of, Tensor};
//! assert_eq!(layout_of("blocks.1.attn.hook_pattern"), Some("[batch, head, query_pos, key_pos]"));
//! let t = Tensor::new(vec![2, 3], vec![0.0; 6]);
//! assert_eq!(t.numel(), 6);
//! ```

mod site;

pub use site::{apply, Axes, Site};
use std::collections::BTreeMap;
use thiserror::Error;

/// A dense row-major tensor of activations (always `f64`: caches are for analysis,
/// and `f32` models widen exactly).
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

impl Tensor {
    pub fn new(shape: Vec<usize>, data: Vec<f64>) -> Self {
        assert_eq!(
            shape.iter().product::<usize>(),
            data.len(),
            "tensor shape {shape:?} does not hold {} values",
            data.len()
        );
        Tensor { shape, data }
    }
    pub fn zeros(shape: Vec<usize>) -> Self {
        let n = shape.iter().product();
        Tensor {
            shape,
            data: vec![0.0; n],
        }
    }
    pub fn numel(&self) -> usize {
        self.data.len()
    }
}

/// Named activations of one forward pass, in name order.
pub type ActivationCache = BTreeMap<String, Tensor>;

/// The inputs of one forward pass: a batch of token sequences of one length, with
/// optional per-token targets (an MLM's masked targets, a classifier's labels as
/// one value per sequence). Token ids are the model's own vocabulary ids.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    /// `[batch, seq_len]`, row-major.
    pub tokens: Vec<u32>,
    pub batch: usize,
    pub seq_len: usize,
    /// Model-specific targets (`[batch]` labels or `[batch, seq_len]` targets);
    /// empty when the model needs none for its output.
    pub targets: Vec<i64>,
}

impl Batch {
    pub fn new(tokens: Vec<u32>, batch: usize, seq_len: usize) -> Self {
        assert_eq!(tokens.len(), batch * seq_len, "tokens are [batch, seq_len]");
        Batch {
            tokens,
            batch,
            seq_len,
            targets: Vec::new(),
        }
    }
    pub fn with_targets(mut self, targets: Vec<i64>) -> Self {
        self.targets = targets;
        self
    }
    pub fn seq(&self, b: usize) -> &[u32] {
        &self.tokens[b * self.seq_len..(b + 1) * self.seq_len]
    }
}

/// One hook point a model offers: its name and layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookPoint {
    pub name: String,
    /// Axis names, e.g. `[batch, head, query_pos, key_pos]`.
    pub layout: String,
    /// What the activation is, in this model.
    pub doc: String,
}

impl HookPoint {
    pub fn new(name: impl Into<String>, layout: impl Into<String>, doc: impl Into<String>) -> Self {
        HookPoint {
            name: name.into(),
            layout: layout.into(),
            doc: doc.into(),
        }
    }
}

/// The layout rule of a standard TransformerLens hook name (`None` for a model's
/// own points, whose layout its [`HookPoint`] gives).
pub fn layout_of(name: &str) -> Option<&'static str> {
    let leaf = name.rsplit('.').next().unwrap_or(name);
    let in_attn = name.contains(".attn.");
    Some(match leaf {
        "hook_embed" | "hook_pos_embed" | "hook_resid_pre" | "hook_resid_mid"
        | "hook_resid_post" | "hook_attn_out" | "hook_mlp_out" => "[batch, pos, d_model]",
        "hook_pattern" | "hook_attn_scores" if in_attn => "[batch, head, query_pos, key_pos]",
        "hook_z" | "hook_q" | "hook_k" | "hook_v" if in_attn => "[batch, pos, head, d_head]",
        "hook_result" if in_attn => "[batch, pos, head, d_model]",
        "hook_pre" | "hook_post" => "[batch, pos, d_mlp]",
        "hook_logits" => "[batch, pos, d_vocab]",
        _ => return None,
    })
}

/// A function of an activation that returns its replacement (the same
/// shape), as TransformerLens's hook functions are: Python's
/// `fwd_hooks=[(name, fn)]`. An `Err` stops the forward with that message.
pub type HookFnBox = dyn Fn(&Tensor) -> Result<Tensor, String> + Send + Sync;

/// A [`HookFnBox`] shared by the hook and its copies; equal only to itself.
#[derive(Clone)]
pub struct HookFn(pub std::sync::Arc<HookFnBox>);

impl std::fmt::Debug for HookFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HookFn(..)")
    }
}

impl PartialEq for HookFn {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

/// What an intervention writes into an activation.
#[derive(Clone, Debug, PartialEq)]
pub enum Ablation {
    /// Zero the selected entries.
    Zero,
    /// Replace the selected entries by their mean over the batch (the mean over a
    /// reference batch is [`Ablation::Patch`] of a precomputed tensor).
    Mean,
    /// Replace the selected entries by this tensor's (same shape as the activation:
    /// activation patching from another run, or resample ablation). Shared, so
    /// a sweep's many hooks hold one copy ([`Ablation::patch`] wraps one).
    Patch(std::sync::Arc<Tensor>),
    /// Replace the selected entries by those of the function's result on the
    /// whole activation (which must keep its shape).
    Call(HookFn),
}

impl Ablation {
    /// [`Ablation::Patch`] of `t`.
    pub fn patch(t: Tensor) -> Ablation {
        Ablation::Patch(std::sync::Arc::new(t))
    }
}

/// One intervention on a named activation, optionally restricted to some heads
/// (the `head` axis of per-head names) and some positions (the `pos` or
/// `query_pos` axis).
#[derive(Clone, Debug, PartialEq)]
pub struct Hook {
    pub name: String,
    pub ablation: Ablation,
    pub heads: Option<Vec<usize>>,
    pub positions: Option<Vec<usize>>,
}

/// Why a hook request could not be served.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum HookError {
    #[error("unknown hook point `{name}`{}; this model has: {}", suggestion(.name, .available), .available.join(", "))]
    Unknown {
        name: String,
        available: Vec<String>,
    },
    #[error("hook `{name}`: {reason}")]
    Invalid { name: String, reason: String },
    #[error("input: {0}")]
    Input(String),
}

fn suggestion(name: &str, available: &[String]) -> String {
    let leaf = name.rsplit('.').next().unwrap_or(name);
    match available
        .iter()
        .find(|a| a.rsplit('.').next() == Some(leaf))
    {
        Some(a) => format!(" (did you mean `{a}`?)"),
        None => String::new(),
    }
}

/// The gradient `dout` gives for the output `y` of a `run_with_grads`,
/// checked to have `y`'s shape; either failure is an error naming the metric.
pub fn metric_grad(
    dout: &mut dyn FnMut(&Tensor) -> Result<Tensor, String>,
    y: &Tensor,
) -> Result<Tensor, HookError> {
    let invalid = |reason| HookError::Invalid {
        name: "the metric".into(),
        reason,
    };
    let d = dout(y).map_err(invalid)?;
    if d.shape != y.shape {
        return Err(invalid(format!(
            "its gradient has shape {:?}, the output {:?}",
            d.shape, y.shape
        )));
    }
    Ok(d)
}

/// Checks `names` against a model's hook points.
pub fn check_names(points: &[HookPoint], names: &[&str]) -> Result<(), HookError> {
    for n in names {
        if !points.iter().any(|p| p.name == *n) {
            return Err(HookError::Unknown {
                name: n.to_string(),
                available: points.iter().map(|p| p.name.clone()).collect(),
            });
        }
    }
    Ok(())
}

/// A model whose activations can be read and changed by name.
///
/// A model writes one hooked forward, [`HookedModel::forward_hooked`], that hands
/// each activation it builds to [`Site::visit`]; the site applies the hooks and
/// records what was asked for. `run_with_cache`, `run_with_hooks` and
/// `run_hooked` are provided once, here, on top of it (as TransformerLens's
/// `HookPoint`s sit inside one `forward`). A forward that cannot pass whole
/// tensors through the site (the BERT encoder works sequence-chunk by chunk in
/// f32) reads the site's hooks and names, applies them itself and records into
/// the site ([`Site::record`], [`Site::applied_all`]), so every model answers
/// the three calls through the same path.
///
/// `run_with_cache(batch, &[])` returns the output and an empty cache (no hook
/// point is computed twice); `run_with_cache(batch, &names)` returns exactly the
/// named activations. The output is the model's prediction in its own layout
/// (documented by [`HookedModel::output_layout`]).
pub trait HookedModel {
    /// Every hook point this model can fill, in forward order.
    fn hook_points(&self) -> Vec<HookPoint>;
    /// The output tensor's layout, e.g. `[batch, d_vocab]`.
    fn output_layout(&self) -> String;
    /// The model's one analysis forward: every named activation passes through
    /// `site` ([`Site::visit`]) as it is produced.
    fn forward_hooked(&mut self, batch: &Batch, site: &mut Site) -> Result<Tensor, HookError>;

    /// One forward with `hooks` applied in order at their points that also
    /// records `names`, each recorded after the hooks that act on it (what an
    /// ablation does downstream).
    fn run_hooked(
        &mut self,
        batch: &Batch,
        hooks: &[Hook],
        names: &[&str],
    ) -> Result<(Tensor, ActivationCache), HookError> {
        run_sited(self, batch, hooks, names)
    }
    /// Forward pass recording the named activations.
    fn run_with_cache(
        &mut self,
        batch: &Batch,
        names: &[&str],
    ) -> Result<(Tensor, ActivationCache), HookError> {
        self.run_hooked(batch, &[], names)
    }
    /// Forward pass with interventions applied, in order, at their hook points.
    fn run_with_hooks(&mut self, batch: &Batch, hooks: &[Hook]) -> Result<Tensor, HookError> {
        Ok(self.run_hooked(batch, hooks, &[])?.0)
    }
    /// Several forwards with hooks (`jobs`: a batch and its hooks each), in
    /// order; a model whose forward only reads it runs them in parallel. What
    /// an activation-patching sweep asks: one forward per patched cell.
    fn run_many(&mut self, jobs: &[(&Batch, Vec<Hook>)]) -> Vec<Result<Tensor, HookError>> {
        let out = std::sync::Mutex::new(vec![None; jobs.len()]);
        self.run_many_each(jobs, &|i, y| out.lock().expect("run_many")[i] = Some(y));
        let out = out.into_inner().expect("run_many");
        out.into_iter().map(|y| y.expect("every job ran")).collect()
    }
    /// [`run_many`](Self::run_many) handing each job's output to `each(job,
    /// output)` as it comes (in any order), so a sweep of many forwards holds
    /// one output per thread, not one per job.
    fn run_many_each(
        &mut self,
        jobs: &[(&Batch, Vec<Hook>)],
        each: &(dyn Fn(usize, Result<Tensor, HookError>) + Sync),
    ) {
        for (i, (b, h)) in jobs.iter().enumerate() {
            each(i, self.run_with_hooks(b, h));
        }
    }
    /// Forward pass recording `names`, then the backward of a scalar metric of
    /// the output from `dout` (the metric's gradient w.r.t. the output, given
    /// the output): `(output, activations, their gradients)`, TransformerLens's
    /// `run_with_cache(incl_bwd=True)`. A model without a backward at its hook
    /// points says so, naming the first point asked for: never an empty or
    /// zero gradient.
    fn run_with_grads(
        &mut self,
        batch: &Batch,
        names: &[&str],
        dout: &mut dyn FnMut(&Tensor) -> Result<Tensor, String>,
    ) -> Result<(Tensor, ActivationCache, ActivationCache), HookError> {
        let _ = (batch, dout);
        Err(HookError::Invalid {
            name: names.first().unwrap_or(&"the output").to_string(),
            reason: "this model has no backward at its hook points (gradients come from the general transformer's)".into(),
        })
    }
}

/// [`HookedModel::run_hooked`] through the model's [`HookedModel::forward_hooked`]
/// and a [`Site`] for `hooks` and `names` (what a model overriding
/// `run_hooked` for some inputs falls back to).
pub fn run_sited<M: HookedModel + ?Sized>(
    m: &mut M,
    batch: &Batch,
    hooks: &[Hook],
    names: &[&str],
) -> Result<(Tensor, ActivationCache), HookError> {
    let points = m.hook_points();
    let mut site = Site::new(&points, names, hooks)?;
    let y = m.forward_hooked(batch, &mut site)?;
    Ok((y, site.finish()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_names_suggest_the_same_leaf() {
        let pts = vec![
            HookPoint::new(
                "blocks.0.attn.hook_pattern",
                "[batch, head, query_pos, key_pos]",
                "",
            ),
            HookPoint::new("hook_embed", "[batch, pos, d_model]", ""),
        ];
        assert!(check_names(&pts, &["hook_embed"]).is_ok());
        let e = check_names(&pts, &["blocks.1.attn.hook_pattern"]).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("did you mean `blocks.0.attn.hook_pattern`"),
            "{msg}"
        );
    }

    #[test]
    fn standard_layouts() {
        assert_eq!(
            layout_of("blocks.0.attn.hook_z"),
            Some("[batch, pos, head, d_head]")
        );
        assert_eq!(
            layout_of("blocks.0.hook_resid_post"),
            Some("[batch, pos, d_model]")
        );
        assert_eq!(layout_of("blocks.0.ffn.hook_kernel"), None);
    }
}
