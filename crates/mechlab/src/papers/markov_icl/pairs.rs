//! The RPE attention's per-pair inner loops, for [`super::model`].
//!
//! Each (query `i`, key `j`) pair of a head costs a score
//! `q_i·(k_j + p_{i−j} ⊙ m_ij)` forward and a dot `dz_i·v_j` plus three
//! `d_head`-long updates backward; at d_head 16 these loops are the step. Two
//! things make them slow when written as plain index loops: every `x[a + e]` is
//! bounds-checked, which keeps the elementwise updates from vectorising, and a
//! dot product is one serial chain of adds, each waiting for the last. Here every
//! slice is cut to the head's width first (the checks go and the updates
//! vectorise), and scores are formed four keys at a time, four independent chains
//! the processor overlaps. The common head widths (8, 16, 32) are matched once
//! per query row into a constant loop length, which the compiler unrolls and
//! vectorises; other widths take the same code with a run-time length. Each
//! chain still adds its terms in `e` order and each update keeps its order over
//! pairs, so every number is bit-identical to the plain loops this replaced (no
//! reassociation, no fused multiply-add): 300-step `markov-icl` (with dropout)
//! and `markov-icl-bigram` runs write byte-identical metrics, summaries and
//! activations before and after.

// Index loops over e read like the equations, and with every slice cut to the
// width first they compile to the same vector code as zipped iterators.
#![allow(clippy::needless_range_loop)]

use mechlab_engine::Float;

/// Keys scored together: independent add chains in flight.
const LANES: usize = 4;

/// Where pair `(i, j)`'s position vector and mask sit.
pub(super) struct Keys<'a, T> {
    /// `[T, D]` keys
    pub k: &'a [T],
    /// `[T_max, D]` relative-position table
    pub pos: &'a [T],
    /// packed `[pairs, D]` position masks of the step, if dropout is on
    pub mask: Option<&'a [T]>,
    /// model width and the head's offset and width
    pub d: usize,
    pub o: usize,
    pub dh: usize,
}

/// `$body` with the constant `$n` bound to the head width `$dh` when it is a
/// common one (8, 16, 32), else to 0, which the workers read as "use the run-time
/// width". A const-generic function cannot be passed as a value, so each
/// dispatcher names its worker here once instead of once per width.
macro_rules! by_width {
    ($dh:expr, $n:ident => $body:expr) => {
        match $dh {
            8 => {
                const $n: usize = 8;
                $body
            }
            16 => {
                const $n: usize = 16;
                $body
            }
            32 => {
                const $n: usize = 32;
                $body
            }
            _ => {
                const $n: usize = 0;
                $body
            }
        }
    };
}

impl<'a, T: Float> Keys<'a, T> {
    /// The head width as the loops see it: `N` when the caller matched it (a
    /// constant the loops unroll and vectorise over), else `dh`.
    fn width<const N: usize>(&self) -> usize {
        if N > 0 {
            N
        } else {
            self.dh
        }
    }
    fn key<const N: usize>(&self, j: usize) -> &'a [T] {
        &self.k[j * self.d + self.o..][..self.width::<N>()]
    }
    fn pos<const N: usize>(&self, i: usize, j: usize) -> &'a [T] {
        &self.pos[(i - j) * self.d + self.o..][..self.width::<N>()]
    }
    fn mask<const N: usize>(&self, i: usize, j: usize) -> Option<&'a [T]> {
        // the packed index of the causal pair (i, j ≤ i)
        let pair = i * (i + 1) / 2 + j;
        self.mask
            .map(|m| &m[pair * self.d + self.o..][..self.width::<N>()])
    }

    /// `row[j] = q_i·(k_j + p_{i−j} (⊙ m_ij)) · scale` for `j ≤ i`.
    pub fn scores(&self, row: &mut [T], qi: &[T], i: usize, scale: T) {
        by_width!(self.dh, N => self.scores_w::<N>(row, qi, i, scale))
    }

    fn scores_w<const N: usize>(&self, row: &mut [T], qi: &[T], i: usize, scale: T) {
        let n = self.width::<N>();
        let qi = &qi[..n];
        let mut j = 0;
        while j + LANES <= i + 1 {
            let k: [&[T]; LANES] = std::array::from_fn(|c| self.key::<N>(j + c));
            let p: [&[T]; LANES] = std::array::from_fn(|c| self.pos::<N>(i, j + c));
            let acc = match self.mask {
                None => dot_lanes(qi, k, p),
                Some(_) => {
                    let m: [&[T]; LANES] =
                        std::array::from_fn(|c| self.mask::<N>(i, j + c).expect("mask on"));
                    dot_lanes_masked(qi, k, p, m)
                }
            };
            for c in 0..LANES {
                row[j + c] = acc[c] * scale;
            }
            j += LANES;
        }
        for j in j..=i {
            let (kj, pr) = (self.key::<N>(j), self.pos::<N>(i, j));
            let mut acc = T::zero();
            match self.mask::<N>(i, j) {
                None => (0..n).for_each(|e| acc += qi[e] * (kj[e] + pr[e])),
                Some(m) => (0..n).for_each(|e| acc += qi[e] * (kj[e] + pr[e] * m[e])),
            }
            row[j] = acc * scale;
        }
    }

    /// Backward of [`Keys::scores`] for query `i`, from `ds[j] = ∂L/∂s_ij · scale`:
    /// `dq_i += ds_j (k_j + p_{i−j} ⊙ m)`, `dk_j += ds_j q_i`,
    /// `dp_{i−j} += ds_j q_i ⊙ m`, pairs in `j` order.
    pub fn scores_backward(
        &self,
        dqi: &mut [T],
        dk: &mut [T],
        dpos: &mut [T],
        qi: &[T],
        i: usize,
        ds: &[T],
    ) {
        let args = (dqi, dk, dpos, qi, i, ds);
        by_width!(self.dh, N => self.scores_backward_w::<N>(args))
    }

    #[allow(clippy::type_complexity)]
    fn scores_backward_w<const N: usize>(
        &self,
        (dqi, dk, dpos, qi, i, ds): (&mut [T], &mut [T], &mut [T], &[T], usize, &[T]),
    ) {
        let (n, d, o) = (self.width::<N>(), self.d, self.o);
        let (dqi, qi) = (&mut dqi[..n], &qi[..n]);
        for (j, &g) in ds[..=i].iter().enumerate() {
            let (kj, pr) = (self.key::<N>(j), self.pos::<N>(i, j));
            let dkj = &mut dk[j * d + o..][..n];
            let dpr = &mut dpos[(i - j) * d + o..][..n];
            match self.mask::<N>(i, j) {
                None => {
                    for e in 0..n {
                        dqi[e] += g * (kj[e] + pr[e]);
                        dkj[e] += g * qi[e];
                        dpr[e] += g * qi[e];
                    }
                }
                Some(m) => {
                    for e in 0..n {
                        dqi[e] += g * (kj[e] + pr[e] * m[e]);
                        dkj[e] += g * qi[e];
                        dpr[e] += g * qi[e] * m[e];
                    }
                }
            }
        }
    }
}

/// `Σ_e q_e (k_e + p_e)` for four keys at once, each summed in `e` order.
#[inline(always)]
fn dot_lanes<T: Float>(q: &[T], k: [&[T]; LANES], p: [&[T]; LANES]) -> [T; LANES] {
    let n = q.len();
    let (k, p) = (k.map(|s| &s[..n]), p.map(|s| &s[..n]));
    let mut acc = [T::zero(); LANES];
    for e in 0..n {
        for c in 0..LANES {
            acc[c] += q[e] * (k[c][e] + p[c][e]);
        }
    }
    acc
}

/// [`dot_lanes`] with the position term masked: `Σ_e q_e (k_e + p_e m_e)`.
#[inline(always)]
fn dot_lanes_masked<T: Float>(
    q: &[T],
    k: [&[T]; LANES],
    p: [&[T]; LANES],
    m: [&[T]; LANES],
) -> [T; LANES] {
    let n = q.len();
    let (k, p, m) = (k.map(|s| &s[..n]), p.map(|s| &s[..n]), m.map(|s| &s[..n]));
    let mut acc = [T::zero(); LANES];
    for e in 0..n {
        for c in 0..LANES {
            acc[c] += q[e] * (k[c][e] + p[c][e] * m[c][e]);
        }
    }
    acc
}

/// `out[j] = (dz·v_j) (· m_j)` and `dv_j += a_j (· m_j) dz` for `j < a.len()`,
/// the backward of `z = Σ_j a_j (m_j) v_j`; dots four at a time.
pub(super) fn mix_backward<T: Float>(
    out: &mut [T],
    dv: &mut [T],
    v: &[T],
    dz: &[T],
    a: &[T],
    mask: Option<&[T]>,
    at: (usize, usize),
) {
    by_width!(dz.len(), N => mix_backward_w::<T, N>(out, dv, v, dz, a, mask, at))
}

fn mix_backward_w<T: Float, const N: usize>(
    out: &mut [T],
    dv: &mut [T],
    v: &[T],
    dz: &[T],
    a: &[T],
    mask: Option<&[T]>,
    (d, o): (usize, usize),
) {
    let n = if N > 0 { N } else { dz.len() };
    let dz = &dz[..n];
    let vj = |j: usize| &v[j * d + o..][..n];
    let cnt = a.len();
    let mut j = 0;
    while j + LANES <= cnt {
        let vs: [&[T]; LANES] = std::array::from_fn(|c| vj(j + c));
        let mut acc = [T::zero(); LANES];
        for e in 0..n {
            for c in 0..LANES {
                acc[c] += dz[e] * vs[c][e];
            }
        }
        out[j..j + LANES].copy_from_slice(&acc);
        j += LANES;
    }
    for j in j..cnt {
        let vj = vj(j);
        let mut acc = T::zero();
        (0..n).for_each(|e| acc += dz[e] * vj[e]);
        out[j] = acc;
    }
    for j in 0..cnt {
        let (aj, m) = match mask {
            Some(m) => (a[j] * m[j], Some(m[j])),
            None => (a[j], None),
        };
        let dvj = &mut dv[j * d + o..][..n];
        for e in 0..n {
            dvj[e] += aj * dz[e];
        }
        if let Some(m) = m {
            out[j] *= m;
        }
    }
}

/// `z += Σ_j a_j (m_j) v_j` over `j < a.len()`, keys in order.
pub(super) fn mix<T: Float>(
    z: &mut [T],
    v: &[T],
    a: &[T],
    mask: Option<&[T]>,
    (d, o): (usize, usize),
) {
    let n = z.len();
    for (j, &aj) in a.iter().enumerate() {
        let aj = match mask {
            Some(m) => aj * m[j],
            None => aj,
        };
        let vj = &v[j * d + o..][..n];
        for e in 0..n {
            z[e] += aj * vj[e];
        }
    }
}

#[cfg(test)]
mod tests {
    //! Every loop against the plain index loops it replaced, bit for bit, at
    //! run-time widths (4, 12) and constant ones (8, 16), with and without masks.
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn draw(rng: &mut ChaCha8Rng, n: usize) -> Vec<f64> {
        (0..n).map(|_| rng.random_range(-1.0..1.0)).collect()
    }

    #[test]
    fn pair_loops_match_plain_loops_bit_for_bit() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        for (dh, h) in [(4, 1), (8, 2), (12, 1), (16, 2)] {
            let (t, d) = (11, dh * h);
            let (q, k, v, pos, dz) = (
                draw(&mut rng, t * d),
                draw(&mut rng, t * d),
                draw(&mut rng, t * d),
                draw(&mut rng, t * d),
                draw(&mut rng, t * d),
            );
            let masks = draw(&mut rng, t * (t + 1) / 2 * d);
            let arow = draw(&mut rng, t * t);
            for mask in [None, Some(&masks[..])] {
                for hd in 0..h {
                    let o = hd * dh;
                    let keys = Keys {
                        k: &k,
                        pos: &pos,
                        mask,
                        d,
                        o,
                        dh,
                    };
                    let (mut dq, mut dk, mut dp) =
                        (vec![0.5; d], vec![0.25; t * d], vec![0.0; t * d]);
                    let (mut dq0, mut dk0, mut dp0) = (dq.clone(), dk.clone(), dp.clone());
                    let (mut z, mut dv) = (vec![0.0; dh], vec![0.1; t * d]);
                    let (mut z0, mut dv0) = (z.clone(), dv.clone());
                    for i in 0..t {
                        let mp = |j: usize| mask.map(|m| &m[(i * (i + 1) / 2 + j) * d + o..][..dh]);
                        let a = &arow[i * t..i * t + i + 1];
                        let am = mask.map(|m| &m[i * t..i * t + i + 1]);
                        // scores
                        let mut row = vec![0.0; t];
                        keys.scores(&mut row, &q[i * d + o..], i, 0.25);
                        for j in 0..=i {
                            let mut acc = 0.0;
                            for e in 0..dh {
                                let p = match mp(j) {
                                    Some(m) => pos[(i - j) * d + o + e] * m[e],
                                    None => pos[(i - j) * d + o + e],
                                };
                                acc += q[i * d + o + e] * (k[j * d + o + e] + p);
                            }
                            assert_eq!(
                                row[j].to_bits(),
                                (acc * 0.25).to_bits(),
                                "score dh {dh} i {i} j {j}"
                            );
                        }
                        // the backward of the scores
                        let ds = &row[..=i];
                        keys.scores_backward(
                            &mut dq[o..o + dh],
                            &mut dk,
                            &mut dp,
                            &q[i * d + o..],
                            i,
                            ds,
                        );
                        for (j, &g) in ds.iter().enumerate() {
                            for e in 0..dh {
                                let (kk, pp, qq) =
                                    (k[j * d + o + e], pos[(i - j) * d + o + e], q[i * d + o + e]);
                                match mp(j) {
                                    Some(m) => {
                                        dq0[o + e] += g * (kk + pp * m[e]);
                                        dk0[j * d + o + e] += g * qq;
                                        dp0[(i - j) * d + o + e] += g * qq * m[e];
                                    }
                                    None => {
                                        dq0[o + e] += g * (kk + pp);
                                        dk0[j * d + o + e] += g * qq;
                                        dp0[(i - j) * d + o + e] += g * qq;
                                    }
                                }
                            }
                        }
                        // the value mixing and its backward
                        mix(&mut z, &v, a, am, (d, o));
                        let mut out = vec![0.0; i + 1];
                        mix_backward(&mut out, &mut dv, &v, &dz[i * d + o..][..dh], a, am, (d, o));
                        for j in 0..=i {
                            let aj = am.map_or(a[j], |m| a[j] * m[j]);
                            let mut acc = 0.0;
                            for e in 0..dh {
                                z0[e] += aj * v[j * d + o + e];
                                acc += dz[i * d + o + e] * v[j * d + o + e];
                                dv0[j * d + o + e] += aj * dz[i * d + o + e];
                            }
                            let acc = am.map_or(acc, |m| acc * m[j]);
                            assert_eq!(out[j].to_bits(), acc.to_bits(), "dz·v dh {dh} i {i} j {j}");
                        }
                    }
                    let bits = |x: &[f64]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&dq), bits(&dq0), "dq dh {dh}");
                    assert_eq!(bits(&dk), bits(&dk0), "dk dh {dh}");
                    assert_eq!(bits(&dp), bits(&dp0), "dpos dh {dh}");
                    assert_eq!(bits(&z), bits(&z0), "z dh {dh}");
                    assert_eq!(bits(&dv), bits(&dv0), "dv dh {dh}");
                }
            }
        }
    }
}
