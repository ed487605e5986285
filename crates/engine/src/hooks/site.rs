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
use crate::Float;

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

    /// [`Site::visit`] straight into the model's own buffer `data` (`shape`),
    /// when no hook on `name` is a function and `name` is not recorded (both
    /// need a [`Tensor`]): `false` when the caller must visit with one. A
    /// patching sweep's forwards write their patch this way, with no copy.
    pub fn visit_in_place<T: Float>(
        &mut self,
        name: &str,
        data: &mut [T],
        shape: &[usize],
        axes: Axes,
    ) -> Result<bool, HookError> {
        let mine = |h: &Hook| h.name == name;
        let call = |h: &Hook| matches!(h.ablation, Ablation::Call(_));
        if self.names.contains(&name) || self.hooks.iter().any(|h| mine(h) && call(h)) {
            return Ok(false);
        }
        for (i, h) in self.hooks.iter().enumerate() {
            if mine(h) {
                apply_in_place(data, shape, h, axes)?;
                self.reached[i] = true;
            }
        }
        Ok(true)
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
    let called = match &hook.ablation {
        Ablation::Call(f) => Some((f.0)(t).map_err(|reason| HookError::Invalid {
            name: name.to_string(),
            reason,
        })?),
        _ => None,
    };
    let patch = match &hook.ablation {
        Ablation::Patch(p) => Some(&**p),
        _ => called.as_ref(),
    };
    let shape = t.shape.clone();
    write(&mut t.data, &shape, hook, patch, axes, |x| x)
}

/// [`apply`] straight into an activation of the model's float type, for a
/// hook that is not a function (which needs the activation as a [`Tensor`]).
fn apply_in_place<T: Float>(
    data: &mut [T],
    shape: &[usize],
    hook: &Hook,
    axes: Axes,
) -> Result<(), HookError> {
    let patch = match &hook.ablation {
        Ablation::Patch(p) => Some(&**p),
        _ => None,
    };
    write(data, shape, hook, patch, axes, T::of)
}

/// Writes the ablation (`patch`: the tensor a patch or a function gives)
/// into the entries of `data` (`shape`) that `hook` selects.
fn write<T: Float>(
    data: &mut [T],
    shape: &[usize],
    hook: &Hook,
    patch: Option<&Tensor>,
    axes: Axes,
    of: impl Fn(f64) -> T,
) -> Result<(), HookError> {
    let name = hook.name.as_str();
    let heads = check_indices(name, "head", &hook.heads, axes.head, shape)?;
    let pos = check_indices(name, "position", &hook.positions, axes.pos, shape)?;
    if let Some(p) = patch {
        if p.shape != shape {
            let what = if matches!(hook.ablation, Ablation::Call(_)) {
                "the hook function returned"
            } else {
                "patch has"
            };
            return Err(HookError::Invalid {
                name: name.to_string(),
                reason: format!("{what} shape {:?}, the activation {:?}", p.shape, shape),
            });
        }
    }
    let numel = data.len();
    let batch = shape.first().copied().unwrap_or(1).max(1);
    let per = numel / batch;
    let mean: Vec<T> = if hook.ablation == Ablation::Mean {
        (0..per)
            .map(|j| {
                let sum: f64 = (0..batch).map(|b| data[b * per + j].as_f64()).sum();
                of(sum / batch as f64)
            })
            .collect()
    } else {
        Vec::new()
    };
    // The entries go by runs along the last axis, which no hook selects on
    // (else runs of one): each run is kept or written whole, its leading
    // indices counted as an odometer.
    let nd = shape.len();
    let last_selected = [(axes.head, &heads), (axes.pos, &pos)]
        .iter()
        .any(|(a, k)| k.is_some() && *a == Some(nd.saturating_sub(1)));
    let run = if nd < 2 || last_selected {
        1
    } else {
        shape[nd - 1].max(1)
    };
    let keep = |ix: &[usize]| {
        let on = |a: Option<usize>, k: &Option<Vec<bool>>| {
            k.as_ref().is_none_or(|k| k[ix[a.unwrap_or(0)]])
        };
        on(axes.head, &heads) && on(axes.pos, &pos)
    };
    let mut ix = vec![0usize; nd];
    for start in (0..numel).step_by(run) {
        if keep(&ix) {
            let out = &mut data[start..start + run];
            match (&hook.ablation, patch) {
                (Ablation::Mean, _) => {
                    let j = start % per;
                    out.copy_from_slice(&mean[j..j + run]);
                }
                (_, Some(p)) => {
                    let src = &p.data[start..start + run];
                    out.iter_mut().zip(src).for_each(|(o, &v)| *o = of(v));
                }
                (_, None) => out.iter_mut().for_each(|x| *x = T::zero()),
            }
        }
        // the next run's index: the odometer over the axes before the run
        let mut k = if run > 1 { nd - 1 } else { nd };
        while k > 0 {
            k -= 1;
            ix[k] += 1;
            if ix[k] < shape[k] {
                break;
            }
            ix[k] = 0;
        }
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
            &hook(Ablation::patch(src), Some(vec![0]), None),
            AXES,
        )
        .unwrap();
        assert!(u
            .data
            .iter()
            .enumerate()
            .all(|(i, v)| (*v == -1.0) == (i % 2 == 0)));
    }

    /// `apply` writes by runs; here each entry is decoded on its own.
    #[test]
    fn runs_are_the_entries_one_by_one() {
        let shape = [2usize, 3, 4, 5];
        let n: usize = shape.iter().product();
        let t = Tensor::new(
            shape.to_vec(),
            (0..n).map(|i| i as f64 * 0.5 - 7.0).collect(),
        );
        let p = Tensor::new(shape.to_vec(), (0..n).map(|i| 100.0 + i as f64).collect());
        let at = |flat: usize, axis: usize| {
            flat / shape[axis + 1..].iter().product::<usize>() % shape[axis]
        };
        for (head, pos) in [(1, 2), (2, 1), (1, 3), (3, 2)] {
            for ablation in [Ablation::Zero, Ablation::Mean, Ablation::patch(p.clone())] {
                let h = Hook {
                    name: "x".into(),
                    ablation: ablation.clone(),
                    heads: Some(vec![0, 2]),
                    positions: Some(vec![1]),
                };
                let mut got = t.clone();
                let axes = Axes {
                    head: Some(head),
                    pos: Some(pos),
                };
                apply(&mut got, &h, axes).unwrap();
                // in place in f32: the same entries, narrowed
                let mut narrow: Vec<f32> = t.data.iter().map(|&x| x as f32).collect();
                apply_in_place(&mut narrow, &shape, &h, axes).unwrap();
                let want: Vec<f32> = got.data.iter().map(|&x| x as f32).collect();
                assert_eq!(narrow, want, "in place, {ablation:?}");
                for (i, &g) in got.data.iter().enumerate() {
                    let hit = [0, 2].contains(&at(i, head)) && at(i, pos) == 1;
                    let per = n / shape[0];
                    let want = match (&ablation, hit) {
                        (_, false) => t.data[i],
                        (Ablation::Zero, _) => 0.0,
                        (Ablation::Mean, _) => (t.data[i % per] + t.data[i % per + per]) / 2.0,
                        _ => p.data[i],
                    };
                    assert_eq!(
                        g, want,
                        "head axis {head}, pos axis {pos}, {ablation:?}, entry {i}"
                    );
                }
            }
        }
    }

    #[test]
    fn bad_hooks_are_errors() {
        let mut t = z();
        let out_of_range = hook(Ablation::Zero, None, Some(vec![3]));
        assert!(apply(&mut t, &out_of_range, AXES).is_err());
        let no_axis = hook(Ablation::Zero, Some(vec![0]), None);
        assert!(apply(&mut t, &no_axis, Axes::default()).is_err());
        let wrong = hook(Ablation::patch(Tensor::zeros(vec![2, 3, 2])), None, None);
        assert!(apply(&mut t, &wrong, AXES).is_err());
        assert_eq!(t, z(), "a failed hook leaves the activation alone");
        // a hook on a listed point the forward never visits is an error at the end
        let points = vec![HookPoint::new("blocks.0.attn.hook_z", "", "")];
        let hooks = vec![hook(Ablation::Zero, None, None)];
        let site = Site::new(&points, &[], &hooks).unwrap();
        assert!(matches!(site.finish(), Err(HookError::Invalid { .. })));
    }
}
