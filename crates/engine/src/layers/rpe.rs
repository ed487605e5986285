//! Relative-position attention bias from a trainable `[H, n_dist]` table.
//!
//! For query position `i`, key position `j` and head `h`, let `r = i − j` (the
//! distance back from the query: `r = 0` is the query itself, `r > 0` the past,
//! `r < 0` the future). Each head has an inclusive window `[lo_h, hi_h]` of allowed
//! distances. Inside the window the logit bias is
//!
//! `bias[h, i, j] = table[h, r − offset]`
//!
//! and outside it the entry is masked (logit `−∞`; written as `mask = false` and
//! `bias = 0`, so the bias stays finite). [`Rpe::new`] checks that every allowed `r`
//! maps to a column `0 ≤ r − offset < n_dist`. The `[H, T, T]` bias and mask go
//! straight into [`super::attention::AttnExtras`] (with `Tq = Tk = T`), and the
//! attention's `d_bias` comes back through [`Rpe::backward`].
//!
//! Two settings this expresses:
//! * [`Rpe::causal`]: every head attends to `r ∈ [0, max_dist]`, column `r`.
//! * The induction paper's simplified first layer, where head `h` attends only to
//!   distances `h+1 ..= h+H` with logit `W[r−1, h]`: `offset = 1`, `n_dist = 2H`,
//!   window `(h+1, h+H)`, and `table[h, c] = W[c, h]` (the table is `Wᵀ`):
//!
//! ```
//! use mechlab_engine::layers::rpe::Rpe;
//! let h = 2;
//! let rpe = Rpe::new(h, 2 * h, 1, (0..h as isize).map(|k| (k + 1, k + h as isize)).collect());
//! let table: Vec<f64> = (0..h * 2 * h).map(|c| c as f64).collect(); // [H, n_dist]
//! let t = 4;
//! let (mut bias, mut mask) = (vec![0.0; h * t * t], vec![false; h * t * t]);
//! rpe.forward(&mut bias, &mut mask, &table, t);
//! // head 1, query 3 may see keys 1 (r=2, column 1) and 0 (r=3, column 2)
//! let row = (1 * t + 3) * t; // start of (h=1, i=3) in [H, T, T]
//! assert_eq!(mask[row..row + 4], [true, true, false, false]);
//! assert_eq!(bias[row..row + 2], [table[4 + 2], table[4 + 1]]);
//! ```

use crate::Float;

/// A relative-position bias layout: heads, table width, column offset, windows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rpe {
    n_heads: usize,
    n_dist: usize,
    offset: isize,
    windows: Vec<(isize, isize)>,
}

impl Rpe {
    /// Head `h` allows distances `windows[h].0 ..= windows[h].1` (an empty window,
    /// `lo > hi`, masks the whole head) and reads column `r − offset`.
    ///
    /// Panics if `windows.len() != n_heads` or a window reaches outside the table.
    pub fn new(n_heads: usize, n_dist: usize, offset: isize, windows: Vec<(isize, isize)>) -> Self {
        assert_eq!(windows.len(), n_heads, "rpe: need one window per head");
        for (h, &(lo, hi)) in windows.iter().enumerate() {
            if lo <= hi {
                assert!(
                    lo - offset >= 0 && hi - offset < n_dist as isize,
                    "rpe: head {h} window [{lo}, {hi}] with offset {offset} leaves the {n_dist} columns"
                );
            }
        }
        Rpe {
            n_heads,
            n_dist,
            offset,
            windows,
        }
    }

    /// Causal bias: every head sees distances `0 ..= max_dist` (itself and the
    /// `max_dist` previous positions), column `r`; `n_dist = max_dist + 1`.
    pub fn causal(n_heads: usize, max_dist: usize) -> Self {
        Rpe::new(
            n_heads,
            max_dist + 1,
            0,
            vec![(0, max_dist as isize); n_heads],
        )
    }

    pub fn n_heads(&self) -> usize {
        self.n_heads
    }
    pub fn n_dist(&self) -> usize {
        self.n_dist
    }
    pub fn offset(&self) -> isize {
        self.offset
    }
    pub fn windows(&self) -> &[(isize, isize)] {
        &self.windows
    }
    /// Elements of the table: `H · n_dist`.
    pub fn table_len(&self) -> usize {
        self.n_heads * self.n_dist
    }

    /// The table column head `h` uses for query `i`, key `j`, or `None` if masked.
    pub fn column(&self, h: usize, i: usize, j: usize) -> Option<usize> {
        let r = i as isize - j as isize;
        let (lo, hi) = self.windows[h];
        (lo <= r && r <= hi).then(|| (r - self.offset) as usize)
    }

    /// Fills the `[H, T, T]` bias and mask for a sequence of length `t`, overwriting both.
    pub fn forward<T: Float>(&self, bias: &mut [T], mask: &mut [bool], table: &[T], t: usize) {
        // table: [H, n_dist] -> bias: [H, T, T], mask: [H, T, T]
        let n = self.n_heads * t * t;
        assert_eq!(
            table.len(),
            self.table_len(),
            "rpe: table is not [H, n_dist]"
        );
        assert_eq!(bias.len(), n, "rpe: bias is not [H, T, T]");
        assert_eq!(mask.len(), n, "rpe: mask is not [H, T, T]");
        for h in 0..self.n_heads {
            let row = &table[h * self.n_dist..(h + 1) * self.n_dist];
            for i in 0..t {
                for j in 0..t {
                    let e = (h * t + i) * t + j;
                    match self.column(h, i, j) {
                        Some(c) => (bias[e], mask[e]) = (row[c], true),
                        None => (bias[e], mask[e]) = (T::zero(), false),
                    }
                }
            }
        }
    }

    /// Accumulates `d_table[h, r − offset] += Σ d_bias[h, i, j]` over the allowed
    /// `(i, j)` with `i − j = r` (masked entries contribute nothing).
    pub fn backward<T: Float>(&self, d_table: &mut [T], d_bias: &[T], t: usize) {
        // d_bias: [H, T, T] -> d_table: [H, n_dist] (+=)
        assert_eq!(
            d_table.len(),
            self.table_len(),
            "rpe: d_table is not [H, n_dist]"
        );
        assert_eq!(
            d_bias.len(),
            self.n_heads * t * t,
            "rpe: d_bias is not [H, T, T]"
        );
        for h in 0..self.n_heads {
            let row = &mut d_table[h * self.n_dist..(h + 1) * self.n_dist];
            for i in 0..t {
                for j in 0..t {
                    if let Some(c) = self.column(h, i, j) {
                        row[c] += d_bias[(h * t + i) * t + j];
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::attention::{Attention, AttnExtras};
    use crate::testutil::*;

    #[test]
    fn causal_hand_case() {
        let rpe = Rpe::causal(1, 1); // distances 0 and 1
        let (a, b) = (2.0, 3.0);
        let (mut bias, mut mask) = (vec![9.0; 9], vec![true; 9]);
        rpe.forward(&mut bias, &mut mask, &[a, b], 3);
        assert_eq!(bias, [a, 0.0, 0.0, b, a, 0.0, 0.0, b, a]);
        let m = |x: u8| x == 1;
        assert_eq!(mask, [1, 0, 0, 1, 1, 0, 0, 1, 1].map(m));
        // backward: column 0 collects the diagonal, column 1 the subdiagonal
        let d_bias: Vec<f64> = (0..9).map(|x| x as f64).collect();
        let mut d_table = vec![1.0, 1.0];
        rpe.backward(&mut d_table, &d_bias, 3);
        assert_eq!(d_table, [1.0 + 0.0 + 4.0 + 8.0, 1.0 + 3.0 + 7.0]);
    }

    #[test]
    fn windows_can_look_forward_and_be_empty() {
        // head 0: only the next position (r = -1); head 1: empty window
        let rpe = Rpe::new(2, 1, -1, vec![(-1, -1), (1, 0)]);
        let (mut bias, mut mask) = (vec![0.0; 8], vec![true; 8]);
        rpe.forward(&mut bias, &mut mask, &[5.0, 0.0], 2);
        assert_eq!(
            mask,
            [false, true, false, false, false, false, false, false]
        );
        assert_eq!(bias[1], 5.0);
    }

    #[test]
    #[should_panic(expected = "leaves the")]
    fn window_outside_table_panics() {
        Rpe::new(1, 3, 0, vec![(0, 3)]);
    }

    #[test]
    fn gradcheck_table_direct_and_through_attention() {
        let (nh, t, d) = (3, 5, 2);
        let rpe = Rpe::new(
            nh,
            2 * nh,
            1,
            (0..nh as isize).map(|h| (h + 1, h + nh as isize)).collect(),
        );
        let mut r = rng(11);
        let table = uniform(&mut r, rpe.table_len());
        // direct: L = <seed, bias>
        let seed = uniform(&mut r, nh * t * t);
        let bias_of = |tab: &[f64]| {
            let (mut b, mut m) = (vec![0.0; nh * t * t], vec![false; nh * t * t]);
            rpe.forward(&mut b, &mut m, tab, t);
            (b, m)
        };
        let before = uniform(&mut r, rpe.table_len());
        let mut g = before.clone();
        rpe.backward(&mut g, &seed, t);
        assert_grad(
            "rpe direct",
            &mut |x: &[f64]| dot(&bias_of(x).0, &seed),
            &table,
            &accumulated(&g, &before),
        );

        // through attention (q = k = 0 so the bias alone sets the pattern)
        let attn = Attention::new(nh, t, t, d, d);
        let (q, v) = (vec![0.0; t * nh * d], uniform(&mut r, t * nh * d));
        let seed_z = uniform(&mut r, t * nh * d);
        let run = |tab: &[f64]| {
            let (b, m) = bias_of(tab);
            let ex = AttnExtras {
                bias: Some(&b[..]),
                mask: Some(&m[..]),
                key_mask: None,
            };
            let (mut z, mut pat) = (vec![0.0; t * nh * d], vec![0.0; nh * t * t]);
            attn.forward(&mut z, &mut pat, &q, &q, &v, &ex);
            (dot(&z, &seed_z), pat)
        };
        let (_, pat) = run(&table);
        // head 0 at query 0 has no allowed key (r >= 1): a zero row
        assert!(pat[..t].iter().all(|&p| p == 0.0));
        let (mut dq, mut dk, mut dv) = (vec![0.0; q.len()], vec![0.0; q.len()], vec![0.0; v.len()]);
        let (mut d_bias, mut scratch) = (vec![0.0; nh * t * t], vec![0.0; t * t]);
        attn.backward(
            &mut dq,
            &mut dk,
            &mut dv,
            Some(&mut d_bias),
            &mut scratch,
            &seed_z,
            &pat,
            &q,
            &q,
            &v,
        );
        let mut g = vec![0.0; rpe.table_len()];
        rpe.backward(&mut g, &d_bias, t);
        assert_grad("rpe via attention", &mut |x: &[f64]| run(x).0, &table, &g);
    }

    #[test]
    fn f32_smoke() {
        let rpe = Rpe::causal(2, 2);
        let table: Vec<f32> = (0..6).map(|x| x as f32).collect();
        let (mut b, mut m) = (vec![0.0f32; 2 * 16], vec![false; 2 * 16]);
        rpe.forward(&mut b, &mut m, &table, 4);
        assert_eq!(m.iter().filter(|&&x| x).count(), 2 * (4 + 3 + 2));
        let mut g = vec![0.0f32; 6];
        rpe.backward(&mut g, &[1.0f32; 32], 4);
        assert_eq!(g, [4.0, 3.0, 2.0, 4.0, 3.0, 2.0]);
    }
}
