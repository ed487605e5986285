//! The layer vocabulary: one concept per module, each a `forward` / `backward` pair
//! of free functions over caller-owned slices (see the crate doc for conventions).

pub mod attention;
pub mod embedding;
pub mod linear;
pub mod rpe;
pub mod softmax;
