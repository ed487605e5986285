//! mechlab's engine: the layers of the three papers' transformers as explicit
//! `forward` / `backward` pairs over preallocated buffers, generic over [`Float`].
//!
//! There is no autograd tape. Each layer's forward writes its activations into
//! caller-owned buffers (a model keeps them in a named activation struct, which
//! doubles as the activation cache for probes), and its backward reads them back to
//! accumulate parameter gradients into [`Param`] buffers. Nothing here allocates on
//! the hot path; every backward is checked against central finite differences in
//! `f64` by [`gradcheck`].
//!
//! ```
//! use mechlab_engine::{param, Parameters, Param};
//! let p = param::<f32>("embed.W_E", "embed", &[4, 2], vec![0.0; 8]);
//! assert_eq!(p.shape(), &[4, 2]);
//! ```

pub mod float;
pub mod gradcheck;
pub mod layers;
pub mod matmul;
pub mod param;

#[cfg(test)]
mod testutil;

pub use float::Float;
pub use param::{param, Param, Parameters};
