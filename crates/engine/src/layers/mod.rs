//! The layer vocabulary: one concept per module, each a `forward` / `backward`
//! pair over caller-owned slices. The crate doc lists them and states the buffer
//! conventions (forward overwrites, backward accumulates, losses write).

pub mod attention;
pub mod dropout;
pub mod embedding;
pub mod gelu;
pub mod l2norm;
pub mod layernorm;
pub mod linear;
pub mod loss;
pub mod polykernel;
pub mod reference;
pub mod relu;
pub mod rpe;
pub mod softmax;
