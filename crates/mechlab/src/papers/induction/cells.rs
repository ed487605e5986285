//! Layer 2's cell gradients back through the kernel, split into parallel jobs.
//!
//! A step leaves `d = ∂L/∂N(q, k)` in every (query window, key window) cell. Going
//! back needs three kinds of sum over the cells, each in row order:
//! `Σ d N` (for `a`), `Σ d K_δ` per subset `δ` (for `c`), and, per (head, query
//! head code, key head code) entry of the inner-product tables,
//! `Σ d · a/Z · c_δ² Π_{c∈δ, c≠h} ip_c` over the subsets `δ ∋ h` whose ReLU is
//! open. One loop over the cells used to form them all on one thread, a third of
//! the simplified model's epoch.
//!
//! Every accumulator's terms come from a known set of cells: a subset's total
//! from all of them, and an ip entry `(h, q, ·)` only from the query windows whose
//! head-`h` code is `q`. So the work splits into one job per total (`Σ d N` and
//! each subset's) and one per ip row `(h, q)`, which walks just its query windows,
//! ascending. Each accumulator still adds the same terms in the same order, so
//! the gradients are bit-identical to the single loop, for any thread count.
//! The jobs read the inner products after the ReLU from one table, which
//! [`Layer2`](super::layer2) fills once per step for the forward as well.

// Index loops read like the equations here.
#![allow(clippy::needless_range_loop)]

use super::layer2::product;
use mechlab_engine::{simd, Float};
use rayon::prelude::*;

/// Most heads a window can hold (the tables' `[_; 16]` rows).
const MAX_HEADS: usize = 16;

/// What the jobs iterate over, built once per shape.
pub(super) struct Plan {
    /// `[H, NQW]`: query windows sorted by (head, code, window).
    qw: Vec<u32>,
    /// `[H · NQ + 1]`: group `(h, q)` is `qw[start[h·NQ + q]..start[h·NQ + q + 1]]`.
    start: Vec<usize>,
    /// Per head, in subset order, the active subsets holding it: `(subset
    /// index, the other members, how many)`; head `h`'s are
    /// `terms[term_start[h]..term_start[h + 1]]`.
    terms: Vec<(usize, [u8; MAX_HEADS], usize)>,
    term_start: Vec<usize>,
}

impl Plan {
    /// `qw_head` `[NQW, H]`: each query window's head codes (`0..nq`);
    /// `active`: `(subset index, members, |δ|)`.
    pub fn new(
        qw_head: &[usize],
        h: usize,
        nq: usize,
        active: &[(usize, [u8; 16], usize)],
    ) -> Self {
        let nqw = qw_head.len() / h.max(1);
        let mut qw = Vec::with_capacity(h * nqw);
        let mut start = vec![0; h * nq + 1];
        let (mut terms, mut term_start) = (Vec::new(), vec![0]);
        for hd in 0..h {
            for q in 0..nq {
                qw.extend(
                    (0..nqw)
                        .filter(|&w| qw_head[w * h + hd] == q)
                        .map(|w| w as u32),
                );
                start[hd * nq + q + 1] = qw.len();
            }
            for (si, mem, k) in active {
                if mem[..*k].contains(&(hd as u8)) {
                    let mut others = [0u8; MAX_HEADS];
                    let rest: Vec<u8> = mem[..*k]
                        .iter()
                        .copied()
                        .filter(|&m| m as usize != hd)
                        .collect();
                    others[..rest.len()].copy_from_slice(&rest);
                    terms.push((*si, others, rest.len()));
                }
            }
            term_start.push(terms.len());
        }
        Plan {
            qw,
            start,
            terms,
            term_start,
        }
    }
}

/// What the jobs read: the tables of one step.
pub(super) struct Cells<'a, T> {
    pub h: usize,
    pub nq: usize,
    pub nc: usize,
    pub nkw: usize,
    /// `[NQW, H]` and `[NKW, H]`: each window's head codes.
    pub qw_head: &'a [usize],
    pub kw_head: &'a [usize],
    /// `[H, NQ, C]`: the inner products after the ReLU.
    pub ip: &'a [T],
    /// `[NQW, NKW]`: `N` and its gradient.
    pub n_tab: &'a [T],
    pub d_n: &'a [T],
    /// `(subset index, members, |δ|)` of the subsets without the raw token.
    pub active: &'a [(usize, [u8; 16], usize)],
    /// `c_δ²` by subset index, and `a / Z`.
    pub c2: &'a [T],
    pub az: T,
    pub plan: &'a Plan,
}

impl<T: Float> Cells<'_, T> {
    /// `Σ d N` (returned) and each active subset's `Σ d K_δ` into `sk_tot`
    /// (`[n_sub]`, the others left at zero), and `∂L/∂ip` into `d_ip` `[H, NQ, C]`.
    pub fn backward(&self, sk_tot: &mut [T], d_ip: &mut [T]) -> T {
        let (sn, ()) = rayon::join(
            || self.sums(sk_tot),
            || {
                d_ip.par_chunks_mut(self.nc)
                    .enumerate()
                    .for_each(|(r, row)| self.ip_row(r / self.nq, r, row))
            },
        );
        sn
    }

    /// Where query window `qw`'s head rows start in `ip`: `out[hd] + code` is
    /// head `hd`'s inner product with key head code `code`.
    fn row_base(&self, qw: usize) -> [usize; MAX_HEADS] {
        let (h, nq, nc) = (self.h, self.nq, self.nc);
        std::array::from_fn(|hd| {
            if hd < h {
                (hd * nq + self.qw_head[qw * h + hd]) * nc
            } else {
                0
            }
        })
    }

    /// `Σ d N` (returned) and each active subset's `Σ d K_δ` into `sk_tot`
    /// (`K_δ = Π_{c∈δ} ip_c`), over all cells in row order.
    fn sums(&self, sk_tot: &mut [T]) -> T {
        simd::widest(
            #[inline(always)]
            || self.sums_body(sk_tot),
        )
    }

    #[inline(always)]
    fn sums_body(&self, sk_tot: &mut [T]) -> T {
        let (h, nkw) = (self.h, self.nkw);
        sk_tot.iter_mut().for_each(|x| *x = T::zero());
        let mut sn = T::zero();
        for (qw, (drow, nrow)) in self
            .d_n
            .chunks_exact(nkw)
            .zip(self.n_tab.chunks_exact(nkw))
            .enumerate()
        {
            let base = self.row_base(qw);
            for (kw, (&d, &n)) in drow.iter().zip(nrow).enumerate() {
                if d == T::zero() {
                    continue;
                }
                sn += d * n;
                let kh = &self.kw_head[kw * h..(kw + 1) * h];
                for (si, mem, k) in self.active {
                    let kern = product(T::one(), mem, *k, |m| self.ip[base[m] + kh[m]]);
                    sk_tot[*si] += d * kern;
                }
            }
        }
        sn
    }

    /// Row `r = hd · NQ + q` of `∂L/∂ip` (`[C]`): the cells of the query windows
    /// whose head-`hd` code is `q`, ascending, each cell's subsets in order.
    fn ip_row(&self, hd: usize, r: usize, out: &mut [T]) {
        simd::widest(
            #[inline(always)]
            || self.ip_row_body(hd, r, out),
        )
    }

    #[inline(always)]
    fn ip_row_body(&self, hd: usize, r: usize, out: &mut [T]) {
        let (h, nkw) = (self.h, self.nkw);
        out.iter_mut().for_each(|x| *x = T::zero());
        let g = self.plan;
        let terms = &g.terms[g.term_start[hd]..g.term_start[hd + 1]];
        for &qw in &g.qw[g.start[r]..g.start[r + 1]] {
            let qw = qw as usize;
            let base = self.row_base(qw);
            let drow = &self.d_n[qw * nkw..(qw + 1) * nkw];
            for (kw, &d) in drow.iter().enumerate() {
                if d == T::zero() {
                    continue;
                }
                let kh = &self.kw_head[kw * h..(kw + 1) * h];
                if self.ip[base[hd] + kh[hd]] <= T::zero() {
                    continue; // ReLU
                }
                let mut acc = out[kh[hd]];
                for (si, others, k) in terms {
                    let rest = product(self.c2[*si], others, *k, |m| self.ip[base[m] + kh[m]]);
                    acc += d * self.az * rest;
                }
                out[kh[hd]] = acc;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::layer2::{active_subsets, subsets};
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// The single loop the jobs replaced: every cell in row order, each
    /// subset's terms in order, straight into the accumulators.
    fn plain(c: &Cells<f64>, sk_tot: &mut [f64], d_ip: &mut [f64]) -> f64 {
        let (h, nq, nc, nkw) = (c.h, c.nq, c.nc, c.nkw);
        let mut sn = 0.0;
        sk_tot.iter_mut().for_each(|x| *x = 0.0);
        d_ip.iter_mut().for_each(|x| *x = 0.0);
        let (mut ip, mut at) = ([0.0; 16], [0usize; 16]);
        for qw in 0..c.d_n.len() / nkw {
            for kw in 0..nkw {
                let d = c.d_n[qw * nkw + kw];
                if d == 0.0 {
                    continue;
                }
                sn += d * c.n_tab[qw * nkw + kw];
                for hd in 0..h {
                    at[hd] = (hd * nq + c.qw_head[qw * h + hd]) * nc + c.kw_head[kw * h + hd];
                    ip[hd] = c.ip[at[hd]];
                }
                for (si, mem, k) in c.active {
                    let mut kern = 1.0;
                    for &m in &mem[..*k] {
                        kern *= ip[m as usize];
                    }
                    sk_tot[*si] += d * kern;
                    for (i1, &mm) in mem[..*k].iter().enumerate() {
                        if ip[mm as usize] <= 0.0 {
                            continue;
                        }
                        let mut rest = c.c2[*si];
                        for (i2, &m2) in mem[..*k].iter().enumerate() {
                            if i1 != i2 {
                                rest *= ip[m2 as usize];
                            }
                        }
                        d_ip[at[mm as usize]] += d * c.az * rest;
                    }
                }
            }
        }
        sn
    }

    #[test]
    fn jobs_match_the_single_loop_bit_for_bit() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let (h, nq, nc, nqw, nkw) = (3, 5, 7, 40, 30);
        let subs = subsets(h, 2);
        let active = active_subsets(&subs, h);
        let qw_head: Vec<usize> = (0..nqw * h).map(|_| rng.random_range(0..nq)).collect();
        let kw_head: Vec<usize> = (0..nkw * h).map(|_| rng.random_range(0..nc)).collect();
        // a quarter of the ReLUs closed, a fifth of the cells without gradient
        let ip: Vec<f64> = (0..h * nq * nc)
            .map(|_| rng.random_range(-0.5f64..1.5).max(0.0))
            .collect();
        let n_tab: Vec<f64> = (0..nqw * nkw)
            .map(|_| rng.random_range(-2.0..2.0))
            .collect();
        let d_n: Vec<f64> = (0..nqw * nkw)
            .map(|_| {
                if rng.random_bool(0.2) {
                    0.0
                } else {
                    rng.random_range(-1.0..1.0)
                }
            })
            .collect();
        let c2: Vec<f64> = (0..subs.len())
            .map(|_| rng.random_range(0.0..2.0))
            .collect();
        let plan = Plan::new(&qw_head, h, nq, &active);
        let cells = Cells {
            h,
            nq,
            nc,
            nkw,
            qw_head: &qw_head,
            kw_head: &kw_head,
            ip: &ip,
            n_tab: &n_tab,
            d_n: &d_n,
            active: &active,
            c2: &c2,
            az: 0.37,
            plan: &plan,
        };
        let (mut sk_a, mut sk_b) = (vec![1.0; subs.len()], vec![0.0; subs.len()]);
        let (mut dip_a, mut dip_b) = (vec![1.0; h * nq * nc], vec![0.0; h * nq * nc]);
        let sn_a = cells.backward(&mut sk_a, &mut dip_a);
        let sn_b = plain(&cells, &mut sk_b, &mut dip_b);
        let first_diff = |a: &[f64], b: &[f64]| {
            a.iter()
                .zip(b)
                .position(|(x, y)| x.to_bits() != y.to_bits())
        };
        assert_eq!(sn_a.to_bits(), sn_b.to_bits(), "Σ d N");
        assert_eq!(first_diff(&sk_a, &sk_b), None, "Σ d K_δ");
        assert_eq!(first_diff(&dip_a, &dip_b), None, "∂L/∂ip");
        assert!(dip_b.iter().filter(|&&x| x != 0.0).count() > h * nq * nc / 2);
    }
}
