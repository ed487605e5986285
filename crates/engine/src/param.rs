//! Named trainable tensors and the visitor that optimisers and checkpoints walk.
//!
//! A model keeps its parameters as named struct fields (llm.c style), each a [`Param`]
//! holding its value and its gradient side by side. The model implements
//! [`Parameters`] by visiting its fields in a fixed order; optimisers keep their state
//! in that order and checkpoints store each tensor under its name, so the visit order
//! and the names are part of a model's contract.
//!
//! The order is declared once, with [`parameters!`](crate::parameters): one list of
//! fields from which both visitors (shared and mutable) are generated, so they
//! cannot drift apart. A field may be a [`Param`], anything that is itself
//! [`Parameters`] (a wrapped model, a sub-block), or an `Option` or `Vec` of those
//! (visited when present, in order).
//!
//! ```
//! use mechlab_engine::{Param, Parameters, param, parameters};
//! struct Tiny { w: Param<f64>, b: Param<f64> }
//! impl Parameters<f64> for Tiny {
//!     parameters!(f64; w, b);
//! }
//! let mut m = Tiny { w: param("w", "weights", &[2, 3], vec![0.5; 6]), b: param("b", "bias", &[3], vec![0.0; 3]) };
//! m.w.grad_mut()[0] = 1.0;
//! m.zero_grad();
//! assert_eq!(m.num_params(), 9);
//! assert_eq!(m.w.grad()[0], 0.0);
//! ```

use crate::Float;

/// One trainable tensor: row-major value and gradient buffers of the same shape.
#[derive(Clone, Debug)]
pub struct Param<T> {
    name: String,
    group: String,
    shape: Vec<usize>,
    value: Vec<T>,
    grad: Vec<T>,
}

/// Builds a parameter named `name` (a TransformerLens-style dotted name where one
/// fits, e.g. `blocks.0.attn.W_Q`) in parameter group `group` (the unit that
/// optimiser stages freeze, train and give learning rates to).
///
/// Panics if `value.len()` does not match `shape`: that is a programming error in
/// a model constructor, never a user input.
pub fn param<T: Float>(name: &str, group: &str, shape: &[usize], value: Vec<T>) -> Param<T> {
    let numel: usize = shape.iter().product();
    assert_eq!(
        numel,
        value.len(),
        "parameter {name}: shape {shape:?} needs {numel} values, got {}",
        value.len()
    );
    Param {
        name: name.to_string(),
        group: group.to_string(),
        shape: shape.to_vec(),
        grad: vec![T::zero(); numel],
        value,
    }
}

impl<T: Float> Param<T> {
    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn group(&self) -> &str {
        &self.group
    }
    /// Moves the parameter to another group: how a paper freezes single matrices
    /// of a model whose constructor groups them by layer (train only the groups
    /// its stages name).
    pub fn set_group(&mut self, group: &str) {
        self.group = group.to_string();
    }
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    pub fn numel(&self) -> usize {
        self.value.len()
    }
    pub fn value(&self) -> &[T] {
        &self.value
    }
    pub fn value_mut(&mut self) -> &mut [T] {
        &mut self.value
    }
    pub fn grad(&self) -> &[T] {
        &self.grad
    }
    pub fn grad_mut(&mut self) -> &mut [T] {
        &mut self.grad
    }
    /// Value and gradient at once, for optimisers that read one and write the other.
    pub fn value_and_grad_mut(&mut self) -> (&mut [T], &mut [T]) {
        (&mut self.value, &mut self.grad)
    }
    pub fn zero_grad(&mut self) {
        self.grad.iter_mut().for_each(|g| *g = T::zero());
    }
    /// Squared ℓ2 norm of the gradient, summed in index order (deterministic).
    pub fn grad_norm_sq(&self) -> f64 {
        self.grad.iter().map(|g| g.as_f64() * g.as_f64()).sum()
    }
}

/// A model's parameters, visited in a fixed order (declare it with
/// [`parameters!`](crate::parameters)).
pub trait Parameters<T: Float> {
    fn visit(&self, f: &mut dyn FnMut(&Param<T>));
    fn visit_mut(&mut self, f: &mut dyn FnMut(&mut Param<T>));

    fn zero_grad(&mut self) {
        self.visit_mut(&mut |p| p.zero_grad());
    }
    fn num_params(&self) -> usize {
        let mut n = 0;
        self.visit(&mut |p| n += p.numel());
        n
    }
    /// Names of every parameter, in visit order.
    fn param_names(&self) -> Vec<String> {
        let mut v = Vec::new();
        self.visit(&mut |p| v.push(p.name().to_string()));
        v
    }
}

/// Both visitors of [`Parameters`] from one list of fields, in checkpoint order:
/// `parameters!(T; w, c, a)` inside `impl Parameters<T> for M`. Nested paths
/// (`ffn.w1`) work; each field is a [`Param`] or anything [`Parameters`].
#[macro_export]
macro_rules! parameters {
    ($t:ty; $($($field:ident).+),+ $(,)?) => {
        fn visit(&self, f: &mut dyn FnMut(&$crate::Param<$t>)) {
            $( <_ as $crate::Parameters<$t>>::visit(&self.$($field).+, f); )+
        }
        fn visit_mut(&mut self, f: &mut dyn FnMut(&mut $crate::Param<$t>)) {
            $( <_ as $crate::Parameters<$t>>::visit_mut(&mut self.$($field).+, f); )+
        }
    };
}

/// One tensor is a parameter list of one.
impl<T: Float> Parameters<T> for Param<T> {
    fn visit(&self, f: &mut dyn FnMut(&Param<T>)) {
        f(self)
    }
    fn visit_mut(&mut self, f: &mut dyn FnMut(&mut Param<T>)) {
        f(self)
    }
}

/// An optional block: visited when present.
impl<T: Float, P: Parameters<T>> Parameters<T> for Option<P> {
    fn visit(&self, f: &mut dyn FnMut(&Param<T>)) {
        if let Some(p) = self {
            p.visit(f)
        }
    }
    fn visit_mut(&mut self, f: &mut dyn FnMut(&mut Param<T>)) {
        if let Some(p) = self {
            p.visit_mut(f)
        }
    }
}

/// A list of blocks (layers), in order.
impl<T: Float, P: Parameters<T>> Parameters<T> for Vec<P> {
    fn visit(&self, f: &mut dyn FnMut(&Param<T>)) {
        self.iter().for_each(|p| p.visit(f))
    }
    fn visit_mut(&mut self, f: &mut dyn FnMut(&mut Param<T>)) {
        self.iter_mut().for_each(|p| p.visit_mut(f))
    }
}
