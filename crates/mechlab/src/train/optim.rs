//! Update rules over a model's parameters: SGD (with momentum), normalised GD,
//! Adam and AdamW.
//!
//! State (momentum, first and second moments) is allocated once, per parameter in
//! the model's visit order, so a step allocates nothing. Only parameters whose group
//! the current stage trains are touched; the others keep their values (and their
//! state stays zero).
//!
//! ```
//! use mechlab::train::{config::OptimizerKind, optim::{Optimizer, Hyper}};
//! use mechlab_engine::{param, Param, Parameters};
//! struct M { w: Param<f64> }
//! impl Parameters<f64> for M {
//!     mechlab_engine::parameters!(f64; w);
//! }
//! let mut m = M { w: param("w", "w", &[2], vec![1.0, 2.0]) };
//! m.w.grad_mut().copy_from_slice(&[0.5, -1.0]);
//! let mut opt = Optimizer::new(OptimizerKind::Sgd, Hyper::default(), &m);
//! opt.step(&mut m, 0.1, &[]);
//! assert_eq!(m.w.value(), &[0.95, 2.1]);
//! ```

use super::config::{NgdNorm, OptimizerKind, TrainConfig};
use mechlab_engine::{Float, Param, Parameters};

/// Hyperparameters shared by the rules (each uses the ones it needs).
#[derive(Clone, Copy, Debug)]
pub struct Hyper {
    pub momentum: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    pub grad_clip: f64,
    /// `grad_clip` applies to each tensor's norm on its own.
    pub grad_clip_per_tensor: bool,
    /// Normalised GD's floor on the norm (`train.ngd_eps`).
    pub ngd_eps: f64,
    /// Normalised GD's norm: global or per tensor (`train.ngd_norm`).
    pub ngd_norm: NgdNorm,
}

impl Default for Hyper {
    fn default() -> Self {
        Hyper {
            momentum: 0.0,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
            grad_clip: 0.0,
            grad_clip_per_tensor: false,
            ngd_eps: 0.0,
            ngd_norm: NgdNorm::Global,
        }
    }
}

impl Hyper {
    pub fn from_config(c: &TrainConfig) -> Self {
        Hyper {
            momentum: c.momentum,
            beta1: c.beta1,
            beta2: c.beta2,
            eps: c.eps,
            weight_decay: c.weight_decay,
            grad_clip: c.grad_clip,
            grad_clip_per_tensor: c.grad_clip_per_tensor,
            ngd_eps: c.ngd_eps,
            ngd_norm: c.ngd_norm,
        }
    }
}

/// An optimiser and its state.
pub struct Optimizer<T: Float> {
    kind: OptimizerKind,
    hyper: Hyper,
    /// Number of updates taken (Adam's bias correction).
    t: u64,
    /// Momentum buffer (SGD) or first moment (Adam), per parameter in visit order.
    m: Vec<Vec<T>>,
    /// Second moment (Adam), per parameter in visit order.
    v: Vec<Vec<T>>,
    /// Learning-rate multiplier per parameter in visit order (empty: all 1).
    lr_scale: Vec<f64>,
    /// Whether weight decay applies, per parameter in visit order (empty: all).
    decays: Vec<bool>,
}

/// Below this sum of squares [`Optimizer::grad_norm`] rescales (f64's normal
/// range ends near 1e-308; a gradient of 1e-155 squares to 1e-310).
const TINY_SQ: f64 = 1e-280;

/// Below this `‖g‖ + ngd_eps`, `1/(‖g‖ + ngd_eps)` could overflow f64.
const TINY: f64 = 1e-290;
/// The exact power of two a tiny gradient is scaled by first (2⁶⁰⁰).
const BOOST: f64 = 4.149515568880993e180;

/// Multiplies `g` by [`BOOST`], exactly (a power of two; subnormals included).
fn boost<T: Float>(g: &mut [T]) {
    let b = T::of(BOOST);
    g.iter_mut().for_each(|x| *x *= b);
}

/// One parameter as a model, for measuring its own gradient norm.
struct Single<'a, T: Float>(&'a Param<T>);

impl<T: Float> Parameters<T> for Single<'_, T> {
    fn visit(&self, f: &mut dyn FnMut(&Param<T>)) {
        f(self.0)
    }
    fn visit_mut(&mut self, _: &mut dyn FnMut(&mut Param<T>)) {
        unreachable!("read only")
    }
}

/// True when `group` is trained by a stage training `groups` (empty: all).
pub fn trains(groups: &[String], group: &str) -> bool {
    groups.is_empty() || groups.iter().any(|g| g == group)
}

impl<T: Float> Optimizer<T> {
    pub fn new(kind: OptimizerKind, hyper: Hyper, model: &dyn Parameters<T>) -> Self {
        let mut m = Vec::new();
        let mut v = Vec::new();
        let needs_m = matches!(kind, OptimizerKind::Adam | OptimizerKind::Adamw)
            || (kind == OptimizerKind::Sgd && hyper.momentum != 0.0);
        let needs_v = matches!(kind, OptimizerKind::Adam | OptimizerKind::Adamw);
        model.visit(&mut |p| {
            m.push(if needs_m {
                vec![T::zero(); p.numel()]
            } else {
                Vec::new()
            });
            v.push(if needs_v {
                vec![T::zero(); p.numel()]
            } else {
                Vec::new()
            });
        });
        Optimizer {
            kind,
            hyper,
            t: 0,
            m,
            v,
            lr_scale: Vec::new(),
            decays: Vec::new(),
        }
    }

    /// Multiplies the learning rate of the parameters in each named group
    /// (`train.lr_scale`); `Err` names a group the model does not have, since a
    /// multiplier that matches nothing would silently do nothing.
    pub fn with_lr_scale(
        mut self,
        scale: &std::collections::BTreeMap<String, f64>,
        model: &dyn Parameters<T>,
    ) -> Result<Self, String> {
        if scale.is_empty() {
            return Ok(self);
        }
        let mut groups: Vec<String> = Vec::new();
        let mut per = Vec::new();
        model.visit(&mut |p| {
            per.push(scale.get(p.group()).copied().unwrap_or(1.0));
            if !groups.iter().any(|g| g == p.group()) {
                groups.push(p.group().to_string());
            }
        });
        if let Some(g) = scale.keys().find(|g| !groups.contains(g)) {
            return Err(format!(
                "train.lr_scale.{g}: the model has no parameter group `{g}` (its groups: {})",
                groups.join(", ")
            ));
        }
        self.lr_scale = per;
        Ok(self)
    }

    /// Restricts weight decay to the parameters `on` names (`train.weight_decay_on`;
    /// empty: every parameter, as before). An entry names a parameter group
    /// (`layer0`), a parameter (`blocks.0.attn.W_Q`) or the last part of parameter
    /// names (`W_Q`, every parameter called `….W_Q`), the way PyTorch users put
    /// their `nn.Linear` weights in a decayed group and the rest in another. `Err`
    /// names an entry that matches nothing.
    pub fn with_decay_on(
        mut self,
        on: &[String],
        model: &dyn Parameters<T>,
    ) -> Result<Self, String> {
        if on.is_empty() {
            return Ok(self);
        }
        let matches = |e: &str, p: &Param<T>| {
            let name = p.name();
            p.group() == e || name == e || name.rsplit('.').next() == Some(e)
        };
        let mut per = Vec::new();
        let mut used = vec![false; on.len()];
        let mut names = Vec::new();
        model.visit(&mut |p| {
            let mut hit = false;
            for (k, e) in on.iter().enumerate() {
                if matches(e, p) {
                    used[k] = true;
                    hit = true;
                }
            }
            per.push(hit);
            names.push(p.name().to_string());
        });
        if let Some(k) = used.iter().position(|u| !u) {
            return Err(format!(
                "train.weight_decay_on[{k}] = {:?}: matches no parameter group, parameter or name ending (parameters: {})",
                on[k],
                names.join(", ")
            ));
        }
        self.decays = per;
        Ok(self)
    }

    pub fn kind(&self) -> OptimizerKind {
        self.kind
    }

    pub fn updates(&self) -> u64 {
        self.t
    }

    /// The global ℓ2 norm of the gradients of the trained groups.
    pub fn grad_norm(model: &dyn Parameters<T>, groups: &[String]) -> f64 {
        let mut s = 0.0;
        model.visit(&mut |p| {
            if trains(groups, p.group()) {
                s += p.grad_norm_sq();
            }
        });
        if s < TINY_SQ {
            // Squares of a gradient near 1e-160 underflow in f64; normalised GD
            // still follows it, so measure it scaled by its largest entry.
            let mut big = 0.0f64;
            model.visit(&mut |p| {
                if trains(groups, p.group()) {
                    big = p.grad().iter().fold(big, |b, g| b.max(g.as_f64().abs()));
                }
            });
            if big > 0.0 {
                let mut s = 0.0;
                model.visit(&mut |p| {
                    if trains(groups, p.group()) {
                        s += p
                            .grad()
                            .iter()
                            .map(|g| (g.as_f64() / big).powi(2))
                            .sum::<f64>();
                    }
                });
                return big * s.sqrt();
            }
        }
        s.sqrt()
    }

    /// One update with learning rate `lr` on the parameters of `groups` (empty: all).
    pub fn step(&mut self, model: &mut dyn Parameters<T>, lr: f64, groups: &[String]) {
        self.t += 1;
        let h = self.hyper;
        let per_tensor =
            self.kind == OptimizerKind::NormalizedGd && h.ngd_norm == NgdNorm::PerTensor;
        let clip_global = h.grad_clip > 0.0 && !h.grad_clip_per_tensor;
        let clip_tensor = h.grad_clip > 0.0 && h.grad_clip_per_tensor;
        let norm = if self.kind == OptimizerKind::NormalizedGd || clip_global {
            Self::grad_norm(model, groups)
        } else {
            0.0
        };
        // Scale applied to every gradient: clipping, or normalisation.
        let mut gscale = 1.0;
        if clip_global && norm > h.grad_clip {
            gscale = h.grad_clip / norm;
        }
        if self.kind == OptimizerKind::NormalizedGd {
            let mut den = norm + h.ngd_eps;
            if norm > 0.0 && den < TINY && T::BYTES >= 8 {
                // 1/den would overflow: boost every trained gradient (and den) by
                // an exact power of two, which leaves g/den's bits unchanged.
                model.visit_mut(&mut |p| {
                    if trains(groups, p.group()) {
                        boost(p.grad_mut());
                    }
                });
                den *= BOOST;
            }
            gscale = if norm > 0.0 { 1.0 / den } else { 0.0 };
        }
        let kind = self.kind;
        let t = self.t;
        let (ms, vs) = (&mut self.m, &mut self.v);
        let mut i = 0usize;
        // A zero (or underflowed) norm means there is nothing to follow: no step.
        model.visit_mut(&mut |p: &mut Param<T>| {
            let idx = i;
            i += 1;
            if !trains(groups, p.group()) {
                return;
            }
            let gscale = if per_tensor {
                let norm = Self::grad_norm(&Single(&*p), &[]);
                let mut den = norm + h.ngd_eps;
                if norm > 0.0 && den < TINY && T::BYTES >= 8 {
                    boost(p.grad_mut());
                    den *= BOOST;
                }
                if norm > 0.0 {
                    1.0 / den
                } else {
                    0.0
                }
            } else if clip_tensor && self.kind != OptimizerKind::NormalizedGd {
                let norm = Self::grad_norm(&Single(&*p), &[]);
                if norm > h.grad_clip {
                    h.grad_clip / norm
                } else {
                    1.0
                }
            } else {
                gscale
            };
            let (w, g) = p.value_and_grad_mut();
            let gs = T::of(gscale);
            let lr_t = T::of(lr * self.lr_scale.get(idx).copied().unwrap_or(1.0));
            let h = Hyper {
                weight_decay: if self.decays.get(idx).copied().unwrap_or(true) {
                    h.weight_decay
                } else {
                    0.0
                },
                ..h
            };
            match kind {
                OptimizerKind::Sgd | OptimizerKind::NormalizedGd => {
                    let wd = T::of(h.weight_decay);
                    if h.momentum != 0.0 && kind == OptimizerKind::Sgd {
                        let mu = T::of(h.momentum);
                        for ((w, g), m) in w.iter_mut().zip(g.iter()).zip(ms[idx].iter_mut()) {
                            let gi = *g * gs + wd * *w;
                            *m = mu * *m + gi;
                            *w -= lr_t * *m;
                        }
                    } else if gscale == 1.0 {
                        for (w, g) in w.iter_mut().zip(g.iter()) {
                            *w -= lr_t * (*g + wd * *w);
                        }
                    } else if T::BYTES < 8 {
                        // Scale in f64: normalising a tiny f32 gradient would
                        // overflow 1/‖g‖ in f32 and turn a converged run into inf.
                        for (w, g) in w.iter_mut().zip(g.iter()) {
                            *w -= lr_t * (T::of(g.as_f64() * gscale) + wd * *w);
                        }
                    } else {
                        // In T itself (the same bits in f64), so the double-double
                        // keeps the gradient's low word.
                        for (w, g) in w.iter_mut().zip(g.iter()) {
                            *w -= lr_t * (*g * gs + wd * *w);
                        }
                    }
                }
                OptimizerKind::Adam | OptimizerKind::Adamw => {
                    let (b1, b2) = (h.beta1, h.beta2);
                    let bc1 = T::of(1.0 - b1.powi(t as i32));
                    let bc2 = T::of(1.0 - b2.powi(t as i32));
                    let (b1, b2, eps) = (T::of(b1), T::of(b2), T::of(h.eps));
                    let one = T::one();
                    let wd = T::of(h.weight_decay);
                    let decoupled = kind == OptimizerKind::Adamw;
                    for (((w, g), m), v) in w
                        .iter_mut()
                        .zip(g.iter())
                        .zip(ms[idx].iter_mut())
                        .zip(vs[idx].iter_mut())
                    {
                        let mut gi = *g * gs;
                        if !decoupled {
                            gi += wd * *w;
                        }
                        *m = b1 * *m + (one - b1) * gi;
                        *v = b2 * *v + (one - b2) * gi * gi;
                        let mhat = *m / bc1;
                        let vhat = *v / bc2;
                        if decoupled {
                            *w -= lr_t * wd * *w;
                        }
                        *w -= lr_t * mhat / (vhat.sqrt() + eps);
                    }
                }
            }
        });
    }

    /// State tensors for a checkpoint: (`m` or `v`, parameter index, values).
    pub fn state(&self) -> (u64, &[Vec<T>], &[Vec<T>]) {
        (self.t, &self.m, &self.v)
    }

    /// Restores state saved by [`Optimizer::state`]; lengths must match.
    pub fn restore(&mut self, t: u64, m: Vec<Vec<T>>, v: Vec<Vec<T>>) -> Result<(), String> {
        let shape = |a: &[Vec<T>]| a.iter().map(|x| x.len()).collect::<Vec<_>>();
        if shape(&m) != shape(&self.m) || shape(&v) != shape(&self.v) {
            return Err("optimizer state does not match the model's parameters".into());
        }
        self.t = t;
        self.m = m;
        self.v = v;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mechlab_engine::param;

    struct One(Param<f32>);
    impl Parameters<f32> for One {
        fn visit(&self, f: &mut dyn FnMut(&Param<f32>)) {
            f(&self.0)
        }
        fn visit_mut(&mut self, f: &mut dyn FnMut(&mut Param<f32>)) {
            f(&mut self.0)
        }
    }

    #[test]
    fn normalized_gd_takes_unit_steps_even_for_tiny_f32_gradients() {
        let mut m = One(param("p", "p", &[2], vec![1.0, 1.0]));
        m.0.grad_mut().copy_from_slice(&[3e-40, 4e-40]); // subnormal in f32
        let mut opt = Optimizer::new(OptimizerKind::NormalizedGd, Hyper::default(), &m);
        opt.step(&mut m, 0.5, &[]);
        let w = m.0.value();
        assert!(w.iter().all(|x| x.is_finite()), "{w:?}");
        assert!(
            (w[0] - (1.0 - 0.5 * 0.6)).abs() < 1e-3 && (w[1] - (1.0 - 0.5 * 0.8)).abs() < 1e-3,
            "{w:?}"
        );
        m.0.grad_mut().copy_from_slice(&[0.0, 0.0]);
        opt.step(&mut m, 0.5, &[]);
        assert!(m.0.value().iter().all(|x| x.is_finite()));
    }

    struct Two(Param<f64>, Param<f64>);
    impl Parameters<f64> for Two {
        fn visit(&self, f: &mut dyn FnMut(&Param<f64>)) {
            f(&self.0);
            f(&self.1)
        }
        fn visit_mut(&mut self, f: &mut dyn FnMut(&mut Param<f64>)) {
            f(&mut self.0);
            f(&mut self.1)
        }
    }

    #[test]
    fn weight_decay_on_restricts_decoupled_decay_and_rejects_unmatched_entries() {
        let two = || {
            Two(
                param("blocks.0.attn.W_Q", "layer0", &[1], vec![2.0]),
                param("blocks.0.attn.W_pos", "layer0", &[1], vec![2.0]),
            )
        };
        let hyper = Hyper {
            weight_decay: 0.1,
            ..Hyper::default()
        };
        // zero gradients: AdamW's only change is the decoupled decay w −= lr·wd·w
        let decayed = |on: &[&str]| {
            let mut m = two();
            let on: Vec<String> = on.iter().map(|s| s.to_string()).collect();
            let mut opt = Optimizer::new(OptimizerKind::Adamw, hyper, &m)
                .with_decay_on(&on, &m)
                .unwrap();
            opt.step(&mut m, 0.5, &[]);
            (m.0.value()[0], m.1.value()[0])
        };
        let shrunk = 2.0 - 0.5 * 0.1 * 2.0;
        assert_eq!(decayed(&["W_Q"]), (shrunk, 2.0));
        assert_eq!(decayed(&["blocks.0.attn.W_pos"]), (2.0, shrunk));
        assert_eq!(decayed(&["layer0"]), (shrunk, shrunk));
        assert_eq!(decayed(&[]), (shrunk, shrunk));
        let m = two();
        let e = Optimizer::new(OptimizerKind::Adamw, hyper, &m)
            .with_decay_on(&["W_Q".into(), "W_K".into()], &m)
            .err()
            .unwrap();
        assert!(
            e.contains("weight_decay_on[1]") && e.contains("\"W_K\""),
            "{e}"
        );
    }

    #[test]
    fn lr_scale_multiplies_one_groups_rate_and_rejects_unknown_groups() {
        let mut m = Two(
            param("a", "v", &[1], vec![1.0]),
            param("b", "W", &[1], vec![1.0]),
        );
        let scale: std::collections::BTreeMap<String, f64> = [("v".to_string(), 100.0)].into();
        let mut opt = Optimizer::new(OptimizerKind::Sgd, Hyper::default(), &m)
            .with_lr_scale(&scale, &m)
            .unwrap();
        m.0.grad_mut()[0] = 1.0;
        m.1.grad_mut()[0] = 1.0;
        opt.step(&mut m, 0.01, &[]);
        assert_eq!((m.0.value()[0], m.1.value()[0]), (1.0 - 1.0, 1.0 - 0.01));
        let typo: std::collections::BTreeMap<String, f64> = [("V".to_string(), 2.0)].into();
        let e = Optimizer::new(OptimizerKind::Sgd, Hyper::default(), &m)
            .with_lr_scale(&typo, &m)
            .err()
            .unwrap();
        assert!(e.contains("train.lr_scale.V") && e.contains("v, W"), "{e}");
    }

    fn two(a: [f64; 2], b: [f64; 2]) -> Two {
        let mut m = Two(
            param("a", "k", &[2], vec![0.0; 2]),
            param("b", "q", &[2], vec![0.0; 2]),
        );
        m.0.grad_mut().copy_from_slice(&a);
        m.1.grad_mut().copy_from_slice(&b);
        m
    }

    /// Normalised GD follows a gradient of any size: one far below f64's normal
    /// range (where 1/‖g‖ overflows) still gives a step of length lr along it.
    #[test]
    fn normalized_gd_follows_subnormal_gradients() {
        let mut m = two([3e-320, -4e-320], [0.0, 0.0]);
        let mut opt = Optimizer::new(OptimizerKind::NormalizedGd, Hyper::default(), &m);
        opt.step(&mut m, 1.0, &[]);
        let w = m.0.value();
        assert!(
            (w[0] + 0.6).abs() < 1e-3 && (w[1] - 0.8).abs() < 1e-3,
            "{w:?}"
        );
    }

    /// `ngd_eps` floors the norm (a gradient far below it barely moves the
    /// parameters), and `ngd_norm = per_tensor` gives each tensor a step of length
    /// lr whatever the other's size.
    #[test]
    fn ngd_floor_and_per_tensor_norms() {
        let h = Hyper {
            ngd_eps: 1e-6,
            ..Hyper::default()
        };
        let mut m = two([1e-12, 0.0], [0.0, 0.0]);
        let mut opt = Optimizer::new(OptimizerKind::NormalizedGd, h, &m);
        opt.step(&mut m, 1.0, &[]);
        assert!((m.0.value()[0] + 1e-6).abs() < 1e-9, "{:?}", m.0.value());
        let h = Hyper {
            ngd_norm: NgdNorm::PerTensor,
            ..Hyper::default()
        };
        let mut m = two([3.0, 4.0], [0.0, 1e-9]);
        let mut opt = Optimizer::new(OptimizerKind::NormalizedGd, h, &m);
        opt.step(&mut m, 1.0, &[]);
        let w = m.0.value();
        assert!(
            (w[0] + 0.6).abs() < 1e-15 && (w[1] + 0.8).abs() < 1e-15,
            "{w:?}"
        );
        let q = m.1.value();
        assert!(q[0] == 0.0 && (q[1] + 1.0).abs() < 1e-15, "{q:?}");
    }

    /// Per-tensor clipping: SGD with lr 1 moves a tensor of gradient norm 5 by 1
    /// and one of norm 0.5 by its whole gradient (global clipping shrinks both).
    #[test]
    fn per_tensor_clipping_clips_each_tensor_alone() {
        let h = Hyper {
            grad_clip: 1.0,
            grad_clip_per_tensor: true,
            ..Hyper::default()
        };
        let mut m = two([3.0, 4.0], [0.3, 0.4]);
        let mut opt = Optimizer::new(OptimizerKind::Sgd, h, &m);
        opt.step(&mut m, 1.0, &[]);
        let (w, q) = (m.0.value(), m.1.value());
        assert!(
            (w[0] + 0.6).abs() < 1e-15 && (w[1] + 0.8).abs() < 1e-15,
            "{w:?}"
        );
        assert!(
            (q[0] + 0.3).abs() < 1e-15 && (q[1] + 0.4).abs() < 1e-15,
            "{q:?}"
        );
    }
}
