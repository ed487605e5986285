//! Deterministic batch parallelism: fixed chunks, per-chunk workspaces, ordered reduction.
//!
//! Floating-point sums depend on their order, so splitting a batch by the number of
//! rayon threads would make gradients depend on the machine. Here a batch of
//! `n_items` is split into a *fixed* number of contiguous chunks (the number of
//! workspaces the caller preallocated, independent of the thread count); each chunk
//! runs its items in order into its own workspace, chunks run in parallel via rayon,
//! and [`reduce_ordered`] adds the chunks' gradient buffers into the destination in
//! chunk order. The result is bit-identical for any thread count, including one.
//!
//! ```
//! use mechlab_engine::parallel::{for_each_chunk, reduce_ordered};
//! let xs: Vec<f64> = (0..10).map(|i| 0.1 * i as f64).collect();
//! // 4 chunks, each with its own 1-element gradient buffer
//! let mut work = vec![vec![0.0f64; 1]; 4];
//! for_each_chunk(xs.len(), &mut work, |_chunk, items, w| {
//!     for i in items {
//!         w[0] += xs[i] * xs[i];
//!     }
//! });
//! let mut total = [0.0f64];
//! reduce_ordered(&mut total, &work, |w| &w[..]);
//! assert!((total[0] - 2.85).abs() < 1e-12);
//! ```

use crate::Float;
use rayon::prelude::*;
use std::ops::Range;

/// The number of workspaces a model allocates for [`for_each_chunk`]: fixed (not
/// the thread count), so every model's gradient sums have the same order anywhere.
pub const N_CHUNKS: usize = 8;

/// Items per chunk for batches split by [`sized_chunks`]: large enough that a
/// chunk's work dwarfs rayon's scheduling, small enough that 2 cores stay busy on
/// the papers' batches (a few thousand sequences).
pub const CHUNK_ITEMS: usize = 512;

/// Items of chunk `chunk` when `n_items` are split into `n_chunks` contiguous chunks:
/// chunk `c` gets `c·n/k .. (c+1)·n/k`, so sizes differ by at most one (chunks may
/// be empty when `n_items < n_chunks`). Panics if `chunk >= n_chunks`.
pub fn chunk_range(n_items: usize, n_chunks: usize, chunk: usize) -> Range<usize> {
    assert!(chunk < n_chunks, "chunk {chunk} of {n_chunks}");
    chunk * n_items / n_chunks..(chunk + 1) * n_items / n_chunks
}

/// How many chunks of [`CHUNK_ITEMS`] items `n_items` make (the last may be short):
/// the other way to fix the summation order, for batches whose workspaces grow
/// with the batch (one per chunk) rather than staying at [`N_CHUNKS`].
pub fn sized_chunks(n_items: usize) -> usize {
    n_items.div_ceil(CHUNK_ITEMS)
}

/// Items of chunk `chunk` of [`sized_chunks`]: `chunk·CHUNK_ITEMS ..` up to
/// `CHUNK_ITEMS` items, clipped to `n_items`. Multiply by a per-item stride to cut a
/// flat `[n_items, …]` buffer. Panics if the chunk starts past the end.
pub fn sized_chunk_range(n_items: usize, chunk: usize) -> Range<usize> {
    let start = chunk * CHUNK_ITEMS;
    assert!(start < n_items.max(1), "chunk {chunk} of {} items", n_items);
    start..(start + CHUNK_ITEMS).min(n_items)
}

/// Runs `f(chunk, items, workspace)` for every chunk, in parallel; the number of
/// chunks is `workspaces.len()` and chunk `c` gets `workspaces[c]` and the items
/// [`chunk_range`]`(n_items, workspaces.len(), c)`. `f` should process its items in
/// order so that each workspace's contents are deterministic.
pub fn for_each_chunk<W, F>(n_items: usize, workspaces: &mut [W], f: F)
where
    W: Send,
    F: Fn(usize, Range<usize>, &mut W) + Sync,
{
    let n_chunks = workspaces.len();
    workspaces
        .par_iter_mut()
        .enumerate()
        .for_each(|(c, w)| f(c, chunk_range(n_items, n_chunks, c), w));
}

/// Elements per rayon task in [`reduce_ordered`].
const REDUCE_BLOCK: usize = 4096;

/// `dst[i] += part(w₀)[i] + part(w₁)[i] + …`, the chunks' contributions summed left
/// to right in chunk order and then added to `dst[i]`. Elements are spread over
/// rayon threads, but every element's own sum has this fixed order, so the result
/// does not depend on the thread count. Panics if a part's length differs from `dst`.
pub fn reduce_ordered<T, W, G>(dst: &mut [T], workspaces: &[W], part: G)
where
    T: Float,
    W: Sync,
    G: Fn(&W) -> &[T] + Sync,
{
    // dst: [N] (+=), part(w): [N] for every workspace
    for (c, w) in workspaces.iter().enumerate() {
        assert_eq!(
            part(w).len(),
            dst.len(),
            "reduce_ordered: chunk {c} has the wrong length"
        );
    }
    let Some((first, rest)) = workspaces.split_first() else {
        return;
    };
    dst.par_chunks_mut(REDUCE_BLOCK)
        .enumerate()
        .for_each(|(b, block)| {
            // Chunk by chunk over a tile of sums, rather than chunk by chunk per
            // element: the same additions in the same order for every element,
            // as loops the compiler vectorises, without a slice lookup per
            // element and chunk.
            crate::simd::widest(
                #[inline(always)]
                || {
                    let mut acc = [T::zero(); REDUCE_TILE];
                    for (t, tile) in block.chunks_mut(REDUCE_TILE).enumerate() {
                        let at = b * REDUCE_BLOCK + t * REDUCE_TILE;
                        let (n, acc) = (tile.len(), &mut acc[..tile.len()]);
                        acc.copy_from_slice(&part(first)[at..at + n]);
                        for w in rest {
                            for (s, &x) in acc.iter_mut().zip(&part(w)[at..at + n]) {
                                *s += x;
                            }
                        }
                        for (d, &s) in tile.iter_mut().zip(acc.iter()) {
                            *d += s;
                        }
                    }
                },
            )
        });
}

/// Elements summed together in a [`reduce_ordered`] block (a stack tile).
const REDUCE_TILE: usize = 256;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::linear;
    use crate::testutil::*;

    #[test]
    fn chunks_cover_items_contiguously_and_evenly() {
        for n_items in [0, 1, 5, 16, 17, 100] {
            for n_chunks in [1, 3, 8, 16] {
                let ranges: Vec<_> = (0..n_chunks)
                    .map(|c| chunk_range(n_items, n_chunks, c))
                    .collect();
                assert_eq!(ranges[0].start, 0);
                assert_eq!(ranges[n_chunks - 1].end, n_items);
                assert!(ranges.windows(2).all(|w| w[0].end == w[1].start));
                let (lo, hi) = (
                    ranges.iter().map(|r| r.len()).min().unwrap(),
                    ranges.iter().map(|r| r.len()).max().unwrap(),
                );
                assert!(hi - lo <= 1);
            }
        }
        assert_eq!(chunk_range(10, 4, 1), 2..5);
        assert_eq!(chunk_range(10, 4, 3), 7..10);
    }

    #[test]
    fn sized_chunks_cover_items_in_blocks_of_chunk_items() {
        assert_eq!(sized_chunks(0), 0);
        assert_eq!(sized_chunks(1), 1);
        assert_eq!(sized_chunks(2 * CHUNK_ITEMS), 2);
        let n = 2 * CHUNK_ITEMS + 3;
        assert_eq!(sized_chunks(n), 3);
        assert_eq!(sized_chunk_range(n, 0), 0..CHUNK_ITEMS);
        assert_eq!(sized_chunk_range(n, 2), 2 * CHUNK_ITEMS..n);
        assert!(std::panic::catch_unwind(|| sized_chunk_range(n, 3)).is_err());
    }

    struct Work {
        dw: Vec<f64>,
        dx: Vec<f64>,
    }

    /// A realistic step: per item, a linear layer's backward into a per-chunk dW.
    fn batch_grad(xs: &[f64], dys: &[f64], w: &[f64], n_items: usize, n_chunks: usize) -> Vec<f64> {
        let (n, di, dout) = (3, 5, 4);
        let mut work: Vec<Work> = (0..n_chunks)
            .map(|_| Work {
                dw: vec![0.0; dout * di],
                dx: vec![0.0; n * di],
            })
            .collect();
        for_each_chunk(n_items, &mut work, |_, items, wk| {
            for it in items {
                let (x, dy) = (
                    &xs[it * n * di..(it + 1) * n * di],
                    &dys[it * n * dout..(it + 1) * n * dout],
                );
                linear::backward(Some(&mut wk.dx), &mut wk.dw, None, dy, x, w, n, di, dout);
            }
        });
        let mut dw = vec![0.5; dout * di];
        reduce_ordered(&mut dw, &work, |wk| &wk.dw);
        dw
    }

    #[test]
    fn bit_identical_across_thread_counts() {
        let n_items = 37;
        let mut r = rng(21);
        // values of very different magnitudes, so summation order would show
        let xs: Vec<f64> = uniform(&mut r, n_items * 15)
            .iter()
            .enumerate()
            .map(|(i, v)| v * 10f64.powi((i % 13) as i32 - 6))
            .collect();
        let dys = uniform(&mut r, n_items * 12);
        let w = uniform(&mut r, 20);
        let in_pool = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| batch_grad(&xs, &dys, &w, n_items, 8))
        };
        let one = in_pool(1);
        let two = in_pool(2);
        let four = in_pool(4);
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&one), bits(&two));
        assert_eq!(bits(&one), bits(&four));

        // and it is the sum it claims to be
        let mut serial = vec![0.0; 20];
        for it in 0..n_items {
            let x = &xs[it * 15..(it + 1) * 15];
            let dy = &dys[it * 12..(it + 1) * 12];
            linear::backward(None, &mut serial, None, dy, x, &w, 3, 5, 4);
        }
        let want: Vec<f64> = serial.iter().map(|v| v + 0.5).collect();
        assert_close("chunked dW", &one, &want, 1e-9);
    }

    #[test]
    fn reduce_ordered_sums_in_chunk_order_over_many_blocks() {
        let n = 3 * REDUCE_BLOCK + 7;
        let parts: Vec<Vec<f32>> = (0..5)
            .map(|c| (0..n).map(|i| (i * (c + 1)) as f32 * 1e-3).collect())
            .collect();
        let mut dst = vec![1.0f32; n];
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        pool.install(|| reduce_ordered(&mut dst, &parts, |p| &p[..]));
        for i in 0..n {
            let mut s = parts[0][i];
            for p in &parts[1..] {
                s += p[i];
            }
            assert_eq!(dst[i].to_bits(), (1.0 + s).to_bits(), "element {i}");
        }
        // no workspaces: dst untouched
        reduce_ordered(&mut dst[..2], &[] as &[Vec<f32>], |p| &p[..]);
    }
}
