//! Inverted dropout: `y = x ⊙ m`, with `m` 0 (probability `p`) or `1/(1−p)`.
//!
//! A mask is a buffer of those two values, filled by [`Dropout::fill`] from a
//! ChaCha8 stream of its own; forward and backward are the same product by it,
//! so a model keeps the mask in its activation struct and reuses it in backward.
//! Masks are keyed, not drawn in sequence: [`Dropout::rng`] gives the stream of
//! one `(step, item)` pair (an item is a sequence of the batch, or a mask the
//! whole batch shares), so the mask a sequence gets is the same whichever chunk
//! or thread computes it, and a resumed run draws the masks it would have drawn.
//! At evaluation a model skips dropout altogether (PyTorch's `eval()`).
//!
//! ```
//! use mechlab_engine::layers::dropout::{self, Dropout};
//! let d = Dropout::new(0.5, 7);
//! let mut m = vec![0.0f64; 6];
//! d.fill(&mut m, &mut d.rng(3, 0));
//! assert!(m.iter().all(|&v| v == 0.0 || v == 2.0));
//! let mut again = vec![0.0f64; 6];
//! d.fill(&mut again, &mut d.rng(3, 0));
//! assert_eq!(m, again);
//! let mut y = vec![0.0; 6];
//! dropout::forward(&mut y, &[1.0; 6], &m);
//! assert_eq!(y, m);
//! ```

use crate::Float;
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Items a step can key (sequences of a batch, then the shared masks counted
/// down from the top): the stream id packs `(step, item)` as `step · 2²⁰ + item`.
pub const MAX_ITEMS: u64 = 1 << 20;
/// Tag in the stream id's top bits, so dropout streams never meet a run's
/// other ChaCha streams of the same seed (those use small stream ids).
const TAG: u64 = 0xD << 60;

/// A dropout rate and the seed its masks come from.
#[derive(Clone, Debug, PartialEq)]
pub struct Dropout {
    /// Probability of zeroing an entry, in `[0, 1)`.
    pub p: f64,
    seed: u64,
    /// Keep an entry when its 32-bit draw is at least this (`p · 2³²`).
    threshold: u64,
}

impl Dropout {
    /// Dropout with rate `p` (`0 ≤ p < 1`, clamped) whose masks come from `seed`.
    pub fn new(p: f64, seed: u64) -> Self {
        let p = if p.is_finite() {
            p.clamp(0.0, 0.999)
        } else {
            0.0
        };
        Dropout {
            p,
            seed,
            threshold: (p * 4_294_967_296.0) as u64,
        }
    }

    /// True when the rate is zero (a model then skips the masks entirely).
    pub fn is_off(&self) -> bool {
        self.threshold == 0
    }

    /// The stream of masks for `item` at training step `step`.
    pub fn rng(&self, step: u64, item: u64) -> ChaCha8Rng {
        debug_assert!(item < MAX_ITEMS, "dropout item {item} out of range");
        let mut r = ChaCha8Rng::seed_from_u64(self.seed);
        r.set_stream(TAG | ((step.wrapping_mul(MAX_ITEMS) + item) & !(0xF << 60)));
        r
    }

    /// Fills `mask` with `0` (probability `p`) or `1/(1−p)`, one draw per entry.
    pub fn fill<T: Float>(&self, mask: &mut [T], rng: &mut ChaCha8Rng) {
        let keep = T::of(1.0 / (1.0 - self.p));
        for m in mask.iter_mut() {
            *m = if (rng.next_u32() as u64) >= self.threshold {
                keep
            } else {
                T::zero()
            };
        }
    }
}

/// `y = x ⊙ mask` (overwrites `y`).
pub fn forward<T: Float>(y: &mut [T], x: &[T], mask: &[T]) {
    // y, x, mask: [N]
    for ((y, &x), &m) in y.iter_mut().zip(x).zip(mask) {
        *y = x * m;
    }
}

/// `x ⊙= mask`, in place (a mask applied to a buffer that is its own output).
pub fn apply<T: Float>(x: &mut [T], mask: &[T]) {
    for (x, &m) in x.iter_mut().zip(mask) {
        *x *= m;
    }
}

/// `dx += dy ⊙ mask` (accumulates, like every backward).
pub fn backward<T: Float>(dx: &mut [T], dy: &[T], mask: &[T]) {
    // dx, dy, mask: [N]
    for ((dx, &dy), &m) in dx.iter_mut().zip(dy).zip(mask) {
        *dx += dy * m;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gradcheck::{check, DEFAULT_H};

    #[test]
    fn keeps_a_share_near_one_minus_p_and_scales_the_kept() {
        let d = Dropout::new(0.1, 3);
        let mut m = vec![0.0f32; 100_000];
        d.fill(&mut m, &mut d.rng(0, 5));
        let kept = m.iter().filter(|&&v| v != 0.0).count() as f64 / m.len() as f64;
        assert!((kept - 0.9).abs() < 0.005, "kept {kept}");
        assert!(m.iter().all(|&v| v == 0.0 || v == (1.0f64 / 0.9) as f32));
    }

    #[test]
    fn masks_are_keyed_by_step_and_item_only() {
        let d = Dropout::new(0.5, 11);
        let draw = |step, item| {
            let mut m = vec![0.0f64; 64];
            d.fill(&mut m, &mut d.rng(step, item));
            m
        };
        assert_eq!(draw(4, 2), draw(4, 2));
        assert_ne!(draw(4, 2), draw(4, 3));
        assert_ne!(draw(4, 2), draw(5, 2));
        assert_ne!(draw(4, 2), {
            let other = Dropout::new(0.5, 12);
            let mut m = vec![0.0f64; 64];
            other.fill(&mut m, &mut other.rng(4, 2));
            m
        });
        assert!(Dropout::new(0.0, 1).is_off() && !Dropout::new(1e-6, 1).is_off());
    }

    #[test]
    fn backward_matches_finite_differences_with_a_fixed_mask() {
        let d = Dropout::new(0.3, 9);
        let mut mask = vec![0.0f64; 7];
        d.fill(&mut mask, &mut d.rng(1, 0));
        let w = [0.3, -1.2, 0.8, 2.0, -0.5, 1.1, 0.7];
        let x = vec![0.5, -0.25, 1.5, 0.1, -2.0, 0.9, 0.3];
        // loss = Σ w ⊙ dropout(x)
        let mut loss = |x: &[f64]| {
            let mut y = vec![0.0; 7];
            forward(&mut y, x, &mask);
            y.iter().zip(&w).map(|(a, b)| a * b).sum::<f64>()
        };
        let mut dx = vec![0.0; 7];
        backward(&mut dx, &w, &mask);
        check(&mut loss, &x, &dx, DEFAULT_H).assert_below(1e-9, "dropout");
    }
}
