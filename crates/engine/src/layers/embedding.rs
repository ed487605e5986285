//! Token embedding: a table lookup, `out[t, :] = table[ids[t], :]`.
//!
//! The table is `[V, D]` (TransformerLens `W_E`, or `W_pos` when the ids are
//! positions). The backward scatter-adds each output row's gradient into the row of
//! the table it was read from, so a token that occurs twice gets both gradients.
//!
//! ```
//! use mechlab_engine::layers::embedding;
//! let table = [0.0f32, 1.0, 10.0, 11.0, 20.0, 21.0]; // V=3, D=2
//! let mut out = [0.0f32; 4];
//! embedding::forward(&mut out, &[2, 0], &table, 2);
//! assert_eq!(out, [20.0, 21.0, 0.0, 1.0]);
//! let mut d_table = [0.0f32; 6];
//! embedding::backward(&mut d_table, &[2, 2], &[1.0, 2.0, 3.0, 4.0], 2);
//! assert_eq!(d_table, [0.0, 0.0, 0.0, 0.0, 4.0, 6.0]);
//! ```

use crate::Float;

/// `out[t, :] = table[ids[t], :]`. Panics on an id outside the table.
pub fn forward<T: Float>(out: &mut [T], ids: &[usize], table: &[T], d: usize) {
    // ids: [T], table: [V, D] -> out: [T, D]
    assert_eq!(out.len(), ids.len() * d, "embedding: out is not [T, D]");
    let v = table.len() / d.max(1);
    for (row, &id) in out.chunks_exact_mut(d.max(1)).zip(ids) {
        assert!(id < v, "embedding: id {id} outside vocabulary of {v}");
        row.copy_from_slice(&table[id * d..(id + 1) * d]);
    }
}

/// `d_table[ids[t], :] += d_out[t, :]` for every `t` (in order of `t`).
pub fn backward<T: Float>(d_table: &mut [T], ids: &[usize], d_out: &[T], d: usize) {
    // d_out: [T, D] -> d_table: [V, D] (+=)
    assert_eq!(d_out.len(), ids.len() * d, "embedding: d_out is not [T, D]");
    let v = d_table.len() / d.max(1);
    for (row, &id) in d_out.chunks_exact(d.max(1)).zip(ids) {
        assert!(id < v, "embedding: id {id} outside vocabulary of {v}");
        for (g, &x) in d_table[id * d..(id + 1) * d].iter_mut().zip(row) {
            *g += x;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;

    #[test]
    fn forward_copies_rows() {
        let table: Vec<f64> = (0..12).map(|i| i as f64).collect(); // V=4, D=3
        let mut out = vec![0.0; 9];
        forward(&mut out, &[3, 1, 3], &table, 3);
        assert_eq!(out, [9.0, 10.0, 11.0, 3.0, 4.0, 5.0, 9.0, 10.0, 11.0]);
    }

    #[test]
    fn gradcheck_table() {
        let (v, d) = (5, 3);
        let ids = [4, 0, 4, 2, 1, 4];
        let mut r = rng(1);
        let table = uniform(&mut r, v * d);
        let w = uniform(&mut r, ids.len() * d);
        let mut loss = |tab: &[f64]| {
            let mut out = vec![0.0; ids.len() * d];
            forward(&mut out, &ids, tab, d);
            dot(&out, &w)
        };
        let before = uniform(&mut r, v * d);
        let mut g = before.clone();
        backward(&mut g, &ids, &w, d);
        assert_grad(
            "embedding d_table",
            &mut loss,
            &table,
            &accumulated(&g, &before),
        );
        // token 3 never occurs: its row got nothing
        assert_eq!(&g[9..12], &before[9..12]);
    }

    #[test]
    #[should_panic(expected = "outside vocabulary")]
    fn out_of_range_id_panics() {
        let mut out = [0.0f32; 2];
        forward(&mut out, &[3], &[0.0f32; 6], 2);
    }

    #[test]
    fn f32_smoke() {
        let table: Vec<f32> = (0..6).map(|i| i as f32 * 0.5).collect();
        let mut out = [0.0f32; 4];
        forward(&mut out, &[1, 1], &table, 2);
        let mut d = vec![0.0f32; 6];
        backward(&mut d, &[1, 1], &out, 2);
        assert_eq!(&d[2..4], &[2.0 * table[2], 2.0 * table[3]]);
    }
}
