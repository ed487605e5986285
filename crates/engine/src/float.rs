//! The scalar type every layer is generic over.
//!
//! mechlab runs in `f32` for speed and in `f64` where an experiment runs to convergence
//! (gradient flow, margins) or checks gradients against finite differences; the
//! double-double [`crate::F64x2`] recomputes any of them with ~106 bits, as a check. Every
//! buffer, layer and optimiser is written once over [`Float`].
//!
//! ```
//! use mechlab_engine::Float;
//! fn mean<T: Float>(xs: &[T]) -> T {
//!     xs.iter().copied().fold(T::zero(), |a, b| a + b) / T::of_usize(xs.len())
//! }
//! assert_eq!(mean(&[1.0f32, 3.0]), 2.0);
//! assert_eq!(mean(&[1.0f64, 2.0]), 1.5);
//! ```

use std::fmt::{Debug, Display};

/// A real scalar mechlab can compute in: `f32`, `f64`, or the double-double
/// [`crate::F64x2`] (precision checks).
pub trait Float:
    num_traits::Float
    + num_traits::FloatConst
    + std::ops::AddAssign
    + std::ops::SubAssign
    + std::ops::MulAssign
    + std::ops::DivAssign
    + std::iter::Sum
    + Default
    + Debug
    + Display
    + Send
    + Sync
    + 'static
{
    /// `"f32"` or `"f64"`, as safetensors and numpy spell it; `"f64x2"` for the
    /// double-double, which files store as f64 pairs (`hi`, `lo`) on a last axis of 2.
    const DTYPE: &'static str;
    /// Bytes per element.
    const BYTES: usize;

    /// Converts from `f64` (rounding for `f32`).
    fn of(x: f64) -> Self;
    fn as_f64(self) -> f64;
    fn of_usize(n: usize) -> Self {
        Self::of(n as f64)
    }
    /// Little-endian bytes, for checkpoints and `.npy` files.
    fn write_le(self, out: &mut Vec<u8>);
    /// Reads one value from exactly `Self::BYTES` little-endian bytes.
    fn read_le(bytes: &[u8]) -> Self;

    /// `x ← e^(x − m)` for every entry, `(x − m).exp()` bit for bit: the softmax
    /// rows' `exp` pass. `f32` runs [`crate::expf`]'s vectorised kernel.
    #[inline(always)]
    fn exp_shifted_in_place(xs: &mut [Self], m: Self) {
        xs.iter_mut().for_each(|v| *v = (*v - m).exp());
    }
    /// `out ← e^(x − m)` entry by entry, as [`Float::exp_shifted_in_place`].
    #[inline(always)]
    fn exp_shifted_into(out: &mut [Self], xs: &[Self], m: Self) {
        assert_eq!(out.len(), xs.len(), "exp: out and xs differ in length");
        out.iter_mut()
            .zip(xs)
            .for_each(|(o, &x)| *o = (x - m).exp());
    }
}

impl Float for f32 {
    const DTYPE: &'static str = "f32";
    const BYTES: usize = 4;
    fn of(x: f64) -> Self {
        x as f32
    }
    fn as_f64(self) -> f64 {
        self as f64
    }
    fn write_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn read_le(bytes: &[u8]) -> Self {
        f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
    }
    fn exp_shifted_in_place(xs: &mut [Self], m: Self) {
        crate::expf::shifted_in_place(xs, m)
    }
    fn exp_shifted_into(out: &mut [Self], xs: &[Self], m: Self) {
        crate::expf::shifted_into(out, xs, m)
    }
}

impl Float for f64 {
    const DTYPE: &'static str = "f64";
    const BYTES: usize = 8;
    fn of(x: f64) -> Self {
        x
    }
    fn as_f64(self) -> f64 {
        self
    }
    fn write_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn read_le(bytes: &[u8]) -> Self {
        let mut b = [0u8; 8];
        b.copy_from_slice(&bytes[..8]);
        f64::from_le_bytes(b)
    }
}
