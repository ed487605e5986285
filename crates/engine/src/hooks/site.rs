//! The bookkeeping every [`HookedModel`](super::HookedModel)
//! forward shares: recording the requested activations and applying [`Hook`]s at
//! the point where the forward produces each named activation.
//!
//! A model's analysis forward builds each activation as a [`Tensor`] and hands it
//! to [`Site::visit`] with the axes a hook may restrict (the `head` axis and the
//! `pos` / `query_pos` axis); the site applies every hook on that name, in the
//! order given, then records the (changed) tensor if it was asked for, so that
//! everything downstream of the point reads the changed activation. After the
//! forward, [`Site::finish`] turns a hook the forward never reached into an
//! error instead of a silent no-op.
//!
//! ```
//! use mechlab_engine::hooks::{Axes, Site};
//! use mechlab_engine::hooks::{Ablation, Hook, HookPoint, Tensor};
//! let points = vec![HookPoint::new("hook_embed", "[batch, pos, d_model]", "")];
//! let hooks = vec![Hook { name: "hook_embed".into(), ablation: Ablation::Zero, heads: None, positions: Some(vec![1]) }];
//! let mut site = Site::new(&points, &["hook_embed"], &hooks).unwrap();
//! let mut x = Tensor::new(vec![1, 2, 1], vec![3.0, 4.0]);
//! site.visit("hook_embed", &mut x, Axes { head: None, pos: Some(1) }).unwrap();
//! assert_eq!(x.data, vec![3.0, 0.0]);
//! let cache = site.finish().unwrap();
//! assert_eq!(cache["hook_embed"].data, vec![3.0, 0.0]);
//! ```

use super::{check_names, Ablation, ActivationCache, Hook, HookError, HookPoint, Tensor};

/// Which axes of an activation a hook's `heads` and `positions` restrict.
#[derive(Clone, Copy, Debug, Default)]
pub struct Axes {
    pub head: Option<usize>,
    pub pos: Option<usize>,
}

/// One forward pass's requested names and interventions.
pub struct Site<'a> {
    names: Vec<&'a str>,
    hooks: &'a [Hook],
    reached: Vec<bool>,
    cache: ActivationCache,
}

impl<'a> Site<'a> {
    /// Checks every requested and hooked name against the model's points.
    pub fn new(
        points: &[HookPoint],
        names: &[&'a str],
        hooks: &'a [Hook],
    ) -> Result<Self, HookError> {
        check_names(points, names)?;
        let hooked: Vec<&str> = hooks.iter().map(|h| h.name.as_str()).collect();
        check_names(points, &hooked)?;
        Ok(Site {
            names: names.to_vec(),
            hooks,
            reached: vec![false; hooks.len()],
            cache: ActivationCache::new(),
        })
    }

    /// Applies the hooks on `name` to `t` in order, then records `t` if asked for.
    pub fn visit(&mut self, name: &str, t: &mut Tensor, axes: Axes) -> Result<(), HookError> {
        for (i, h) in self.hooks.iter().enumerate() {
            if h.name == name {
                apply(t, h, axes)?;
                self.reached[i] = true;
            }
        }
        if self.names.contains(&name) {
            self.cache.insert(name.to_string(), t.clone());
        }
        Ok(())
    }

    /// Whether `name` is hooked or recorded: a forward may skip handing over
    /// an activation nobody asked about.
    pub fn touches(&self, name: &str) -> bool {
        self.names.contains(&name) || self.hooks.iter().any(|h| h.name == name)
    }

    /// The hooks this forward applies, in order.
    pub fn hooks(&self) -> &'a [Hook] {
        self.hooks
    }

    /// The names this forward records.
    pub fn names(&self) -> &[&'a str] {
        &self.names
    }

    /// For a forward that applies the hooks itself (see
    /// [`HookedModel::run_hooked`](super::HookedModel::run_hooked)): every hook
    /// reached its point.
    pub fn applied_all(&mut self) {
        self.reached.iter_mut().for_each(|r| *r = true);
    }

    /// For a forward that records activations itself: `name` is `t`.
    pub fn record(&mut self, name: &str, t: Tensor) {
        self.cache.insert(name.to_string(), t);
    }

    /// The recorded activations; a hook whose point the forward never reached
    /// (a point this input does not produce) is an error.
    pub fn finish(self) -> Result<ActivationCache, HookError> {
        if let Some(i) = self.reached.iter().position(|r| !r) {
            return Err(HookError::Invalid {
                name: self.hooks[i].name.clone(),
                reason: "the forward pass never reached this point, so the hook would do nothing"
                    .into(),
            });
        }
        Ok(self.cache)
    }
}

fn check_indices(
    name: &str,
    what: &str,
    sel: &Option<Vec<usize>>,
    axis: Option<usize>,
    shape: &[usize],
) -> Result<Option<Vec<bool>>, HookError> {
    let Some(sel) = sel else { return Ok(None) };
    let invalid = |reason: String| HookError::Invalid {
        name: name.to_string(),
        reason,
    };
    let axis = axis.ok_or_else(|| invalid(format!("this point has no {what} axis to restrict")))?;
    let n = shape[axis];
    let mut keep = vec![false; n];
    for &i in sel {
        if i >= n {
            return Err(invalid(format!(
                "{what} index {i} out of range (the axis has {n})"
            )));
        }
        keep[i] = true;
    }
    Ok(Some(keep))
}

/// Writes `hook`'s ablation into the selected entries of `t`.
pub fn apply(t: &mut Tensor, hook: &Hook, axes: Axes) -> Result<(), HookError> {
    let name = hook.name.as_str();
    let heads = check_indices(name, "head", &hook.heads, axes.head, &t.shape)?;
    let pos = check_indices(name, "position", &hook.positions, axes.pos, &t.shape)?;
    let called;
    let patch = match &hook.ablation {
        Ablation::Patch(p) => Some(p),
        Ablation::Call(f) => {
            called = (f.0)(t).map_err(|reason| HookError::Invalid {
                name: name.to_string(),
                reason,
            })?;
            Some(&called)
        }
        Ablation::Zero | Ablation::Mean => None,
    };
    if let Some(p) = patch {
        if p.shape != t.shape {
            let what = if matches!(hook.ablation, Ablation::Call(_)) {
                "the hook function returned"
            } else {
                "patch has"
            };
            return Err(HookError::Invalid {
                name: name.to_string(),
                reason: format!("{what} shape {:?}, the activation {:?}", p.shape, t.shape),
            });
        }
    }
    // Row-major strides, to read an entry's head and position index.
    let mut strides = vec![1usize; t.shape.len()];
    for k in (0..t.shape.len().saturating_sub(1)).rev() {
        strides[k] = strides[k + 1] * t.shape[k + 1];
    }
    let idx = |flat: usize, axis: usize| (flat / strides[axis]) % t.shape[axis];
    let selected = |flat: usize| {
        heads
            .as_ref()
            .is_none_or(|k| k[idx(flat, axes.head.unwrap_or(0))])
            && pos
                .as_ref()
                .is_none_or(|k| k[idx(flat, axes.pos.unwrap_or(0))])
    };
    let batch = t.shape.first().copied().unwrap_or(1).max(1);
    let per = t.numel() / batch;
    let mean: Vec<f64> = if hook.ablation == Ablation::Mean {
        (0..per)
            .map(|j| (0..batch).map(|b| t.data[b * per + j]).sum::<f64>() / batch as f64)
            .collect()
    } else {
        Vec::new()
    };
    for flat in 0..t.numel() {
        if !selected(flat) {
            continue;
        }
        t.data[flat] = match (&hook.ablation, patch) {
            (Ablation::Mean, _) => mean[flat % per],
            (_, Some(p)) => p.data[flat],
            (_, None) => 0.0,
        };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(ablation: Ablation, heads: Option<Vec<usize>>, positions: Option<Vec<usize>>) -> Hook {
        Hook {
            name: "blocks.0.attn.hook_z".into(),
            ablation,
            heads,
            positions,
        }
    }

    /// `[batch 2, pos 3, head 2, d_head 1]` with entry value `100 b + 10 pos + head`.
    fn z() -> Tensor {
        let data = (0..12)
            .map(|i| (100 * (i / 6) + 10 * ((i / 2) % 3) + i % 2) as f64)
            .collect();
        Tensor::new(vec![2, 3, 2, 1], data)
    }

    const AXES: Axes = Axes {
        head: Some(2),
        pos: Some(1),
    };

    #[test]
    fn restrictions_select_exactly_their_heads_and_positions() {
        let mut t = z();
        apply(
            &mut t,
            &hook(Ablation::Zero, Some(vec![1]), Some(vec![0, 2])),
            AXES,
        )
        .unwrap();
        let orig = z();
        for i in 0..12 {
            let (pos, head) = ((i / 2) % 3, i % 2);
            let hit = head == 1 && pos != 1;
            assert_eq!(t.data[i], if hit { 0.0 } else { orig.data[i] }, "entry {i}");
        }
    }

    #[test]
    fn mean_is_over_the_batch_and_patch_copies() {
        let mut t = z();
        apply(&mut t, &hook(Ablation::Mean, None, Some(vec![2])), AXES).unwrap();
        // position 2, head 0: (20 + 120) / 2; head 1: (21 + 121) / 2, in both rows
        assert_eq!(&t.data[4..6], &[70.0, 71.0]);
        assert_eq!(&t.data[10..12], &[70.0, 71.0]);
        assert_eq!(&t.data[..4], &z().data[..4]);
        let mut u = z();
        let src = Tensor::new(vec![2, 3, 2, 1], vec![-1.0; 12]);
        apply(
            &mut u,
            &hook(Ablation::Patch(src), Some(vec![0]), None),
            AXES,
        )
        .unwrap();
        assert!(u
            .data
            .iter()
            .enumerate()
            .all(|(i, v)| (*v == -1.0) == (i % 2 == 0)));
    }

    #[test]
    fn bad_hooks_are_errors() {
        let mut t = z();
        let out_of_range = hook(Ablation::Zero, None, Some(vec![3]));
        assert!(apply(&mut t, &out_of_range, AXES).is_err());
        let no_axis = hook(Ablation::Zero, Some(vec![0]), None);
        assert!(apply(&mut t, &no_axis, Axes::default()).is_err());
        let wrong = hook(Ablation::Patch(Tensor::zeros(vec![2, 3, 2])), None, None);
        assert!(apply(&mut t, &wrong, AXES).is_err());
        assert_eq!(t, z(), "a failed hook leaves the activation alone");
        // a hook on a listed point the forward never visits is an error at the end
        let points = vec![HookPoint::new("blocks.0.attn.hook_z", "", "")];
        let hooks = vec![hook(Ablation::Zero, None, None)];
        let site = Site::new(&points, &[], &hooks).unwrap();
        assert!(matches!(site.finish(), Err(HookError::Invalid { .. })));
    }
}
