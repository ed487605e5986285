//! mechlab's engine: the layers of the seven papers' models and of the general
//! transformer, as explicit `forward` / `backward` pairs over preallocated
//! buffers, generic over [`Float`].
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
//!
//! # Layers
//!
//! [`layers`] holds one concept per module, each a `forward` / `backward` pair
//! generic over [`Float`] (free functions; methods on a small shape struct for
//! attention and rpe):
//!
//! | module | computes |
//! |---|---|
//! | [`layers::embedding`] | table lookup `out[t] = table[ids[t]]` |
//! | [`layers::linear`] | `y = x·Wᵀ + b`, `W` stored `[out, in]` |
//! | [`layers::softmax`] | row softmax with keep-mask, empty rows → zeros |
//! | [`layers::attention`] | multi-head attention, bias / masks / causal, saves the pattern |
//! | [`layers::rpe`] | relative-position bias from a `[H, n_dist]` table, per-head windows |
//! | [`layers::dropout`] | inverted dropout `y = x ⊙ m`, masks keyed by (step, item) |
//! | [`layers::layernorm`] | layer norm over the last dim, saves mean / rstd |
//! | [`layers::gelu`] | GELU (GPT-2's tanh form, computed as `x·σ(2u)`) |
//! | [`layers::l2norm`] | `y = x / max(‖x‖, eps)` per row, or `x / (‖x‖ + eps)` |
//! | [`layers::polykernel`] | `Π_c ReLU(⟨zq^c, zk_t^c⟩)^δ_c` features, subset enumeration |
//! | [`layers::loss`] | logistic, cross-entropies (logits, probabilities with a floor, probs-as-logits), MSE |
//!
//! [`F64x2`] is a double-double float (~106 bits) every generic layer and model also
//! runs in, to tell what f64 rounding does from what the dynamics do.
//!
//! Alongside: [`matmul`] (row-major `gemm`, including strided sub-matrices),
//! [`gradcheck`] (finite-difference checks, also for model tests in other crates),
//! [`precision`] (working precision against the double-double, at saturation),
//! [`simd`] (vectorised `f32` exp, softmax row and GELU for inference, bit-identical
//! on every instruction set), [`packed`] (an inference linear map whose weight is
//! packed once for an AVX-512 product kernel) and [`parallel`] (fixed-chunk rayon helpers whose
//! results do not depend on the thread count, and the batching constants every
//! model uses).
//!
//! The models in the `mechlab` crate call these layers directly, or keep a fused
//! kernel for speed that a test there checks against a chain of these layers (loss
//! and every gradient to 1e-10): `tests/{induction,selection,topic}_reference.rs`.
//!
//! [`gpt`] is a general small causal transformer assembled from these layers
//! (TransformerLens names and hooks, forward and backward, gradient-checked): the
//! model a paper trains when it needs no fused kernel of its own.
//!
//! [`bert`] is inference only: a pretrained BERT-family encoder loaded from a Hugging
//! Face folder, built from these layers, its activations behind [`hooks`].
//!
//! # Conventions
//!
//! * Every layer works on **one sequence**; models parallelise over the batch with
//!   [`parallel`]. All tensors are caller-owned, row-major, flat slices, with shapes
//!   given in `// x: [T, D]` comments on every forward and backward. Sizes are
//!   checked with `assert!` (a wrong size is a programming error).
//! * `forward` **overwrites** its outputs (and any saved statistics).
//! * `backward` **accumulates** (`+=`) into every gradient it produces, parameter
//!   and input gradients alike, so branches that share an input (a residual
//!   stream feeding Q, K and V) just add up; zero the buffers once per step. Scratch
//!   buffers passed to a backward are overwritten. Losses are the exception: they
//!   start the backward pass and *write* their gradient.
//! * Nothing in a forward or backward allocates; buffers a layer needs beyond its
//!   inputs and outputs (saved statistics, scratch) are parameters.
//! * Sequence tensors use TransformerLens layouts: activations `[T, D]`, per-head
//!   activations `[T, H, d_head]`, attention patterns `[H, Tq, Tk]`.
//!

pub mod bert;
pub mod expf;
pub mod f64x2;
pub mod float;
pub mod gpt;
pub mod gradcheck;
pub mod hooks;
pub mod layers;
pub mod matmul;
pub mod packed;
pub mod parallel;
pub mod param;
pub mod precision;
pub mod simd;
pub mod text;

#[cfg(test)]
mod testutil;

pub use f64x2::F64x2;
pub use float::Float;
pub use param::{param, Param, Parameters};
