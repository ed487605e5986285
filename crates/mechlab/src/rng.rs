//! Seeded, portable random streams.
//!
//! A run has one `seed`. From it come independent ChaCha8 streams, one per purpose,
//! so that changing how much randomness one part draws (say, a bigger model init)
//! never shifts another part (the data). ChaCha is specified bit for bit, so the
//! same seed gives the same numbers on every platform; a stream's position can be
//! saved in a checkpoint and restored exactly.
//!
//! ```
//! use mechlab::rng::{stream, Stream};
//! use rand::Rng;
//! let mut a = stream(7, Stream::Data);
//! let mut b = stream(7, Stream::Data);
//! assert_eq!(a.random::<u64>(), b.random::<u64>());
//! let mut init = stream(7, Stream::Init);
//! assert_ne!(stream(7, Stream::Data).random::<u64>(), init.random::<u64>());
//! ```

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// What a random stream is used for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// Parameter initialisation.
    Init = 1,
    /// Training data: generated sequences, shuffling, masks.
    Data = 2,
    /// Evaluation / probe sampling (held-out sets, repeated-token probes).
    Sample = 3,
}

/// The stream `which` for `seed`.
pub fn stream(seed: u64, which: Stream) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(which as u64);
    rng
}

/// A sub-stream: the same purpose, an independent sequence per `index` (e.g. one
/// per validation split or per parallel worker), still fixed by the seed.
pub fn substream(seed: u64, which: Stream, index: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    rng.set_stream(which as u64);
    rng
}

/// A stream's exact position, for checkpoints.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct RngState {
    seed: [u8; 32],
    stream: u64,
    /// The 128-bit word position as a decimal string (JSON has no u128).
    word_pos: String,
}

/// Saves `rng`'s position.
pub fn save(rng: &ChaCha8Rng) -> RngState {
    RngState {
        seed: rng.get_seed(),
        stream: rng.get_stream(),
        word_pos: rng.get_word_pos().to_string(),
    }
}

/// Restores a position saved by [`save`].
pub fn restore(state: &RngState) -> Result<ChaCha8Rng, String> {
    let pos: u128 = state
        .word_pos
        .parse()
        .map_err(|_| format!("bad RNG word position {:?}", state.word_pos))?;
    let mut rng = ChaCha8Rng::from_seed(state.seed);
    rng.set_stream(state.stream);
    rng.set_word_pos(pos);
    Ok(rng)
}

/// [`save`] as the JSON a model's `Trainable::save_state` returns.
pub fn save_json(rng: &ChaCha8Rng) -> serde_json::Value {
    serde_json::to_value(save(rng)).unwrap_or(serde_json::Value::Null)
}

/// Restores a stream from what [`save_json`] returned (a resume's data stream).
pub fn restore_json(state: &serde_json::Value) -> Result<ChaCha8Rng, String> {
    let st: RngState =
        serde_json::from_value(state.clone()).map_err(|e| format!("data stream state: {e}"))?;
    restore(&st)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    #[test]
    fn save_restore_continues_the_same_sequence() {
        let mut a = stream(3, Stream::Data);
        for _ in 0..17 {
            a.random::<u32>();
        }
        let st = save(&a);
        let mut b = restore(&st).unwrap();
        for _ in 0..100 {
            assert_eq!(a.random::<u64>(), b.random::<u64>());
        }
    }
}
