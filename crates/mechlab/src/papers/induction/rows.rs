//! Layer 2's sequence pass over a [`WindowIndex`]: one job per query row.
//!
//! Each job runs its row's sequences in order: the keys' `exp` entries looked
//! up in the row, the layer-2 softmax and the mixing `ŷ = Σ_l p_l e_{x_l}`, the
//! loss, and, with gradients, `∂L/∂s_l` added into the row's cells. A row's
//! cells take one partial per work chunk (from zero, the chunk's sequences in
//! order), added in chunk order: the sums of the chunk-parallel pass this
//! replaced, so results are bit-identical to it and across thread counts. The
//! rows split in halves across the threads ([`rayon::join`]), which allocates
//! nothing.
//!
//! Speed without new sums: each job's loops are compiled for the processor's
//! widest instruction set ([`simd::widest`]: same operations, same bits; a
//! test runs the presets under `MECHLAB_SIMD=baseline` and compares bytes), and
//! a row's forwards run four sequences side by side ([`forward_group`]).

// Index loops read like the equations here.
#![allow(clippy::needless_range_loop)]

use super::layer2::{LossKind, CHUNK};
use super::windows::WindowIndex;
use mechlab_engine::layers::loss::{self, Reduction};
use mechlab_engine::layers::softmax;
use mechlab_engine::simd;
use mechlab_engine::Float;
use std::ops::Range;

/// What every row's job reads.
pub(super) struct Ctx<'a, T> {
    pub s: usize,
    pub l: usize,
    pub nkw: usize,
    pub index: &'a WindowIndex,
    pub e_tab: &'a [T],
    pub loss: LossKind,
    pub floor: f64,
    pub scale: T,
    pub grad: bool,
    /// `s` when the caller wants ŷ, else 0: a training step reads only the
    /// losses, so its `yhat` slices are empty and nothing is copied.
    pub yhat_stride: usize,
}

/// Rows per job below which [`Ctx::rows`] stops splitting.
const ROW_GRAIN: usize = 8;

impl<T: Float> Ctx<'_, T> {
    /// Query rows `rows`, split in halves across the threads; each slice starts
    /// at the range's first row (`d_n`, `part`: its cells; `loss`, `yhat`: its
    /// sequences in the index's order). Splitting allocates nothing.
    pub fn rows(
        &self,
        rows: Range<usize>,
        d_n: &mut [T],
        part: &mut [T],
        loss: &mut [T],
        yhat: &mut [T],
    ) {
        if rows.len() > ROW_GRAIN {
            let mid = rows.start + rows.len() / 2;
            let rs = &self.index.row_start;
            let cells = (mid - rows.start) * self.nkw;
            let seqs = (rs[mid] - rs[rows.start]) as usize;
            let (d0, d1) = d_n.split_at_mut(cells);
            let (p0, p1) = part.split_at_mut(cells);
            let (l0, l1) = loss.split_at_mut(seqs);
            let (y0, y1) = yhat.split_at_mut(seqs * self.yhat_stride);
            rayon::join(
                || self.rows(rows.start..mid, d0, p0, l0, y0),
                || self.rows(mid..rows.end, d1, p1, l1, y1),
            );
            return;
        }
        let (nkw, rs, ys) = (self.nkw, &self.index.row_start, self.yhat_stride);
        let base = rs[rows.start] as usize;
        simd::widest(
            #[inline(always)]
            || {
                for (j, q) in rows.enumerate() {
                    let cells = j * nkw..(j + 1) * nkw;
                    let seqs = rs[q] as usize - base..rs[q + 1] as usize - base;
                    self.row(
                        q,
                        &mut d_n[cells.clone()],
                        &mut part[cells],
                        &mut loss[seqs.clone()],
                        &mut yhat[seqs.start * ys..seqs.end * ys],
                    );
                }
            },
        )
    }

    /// Query row `q`'s sequences, in order: their losses and ŷ, and, with
    /// `grad`, the row's cell gradients, one partial per work chunk added in
    /// chunk order. The forward runs [`GROUP`] sequences at a time (see
    /// [`forward_group`]); the backward stays one sequence at a time, in order.
    #[inline(always)]
    fn row(&self, q: usize, d_n: &mut [T], part: &mut [T], loss_out: &mut [T], yhat_out: &mut [T]) {
        let s = self.s;
        let ix = self.index;
        let erow = &self.e_tab[q * self.nkw..(q + 1) * self.nkw];
        let first = ix.row_start[q] as usize;
        let seqs = &ix.order[first..ix.row_start[q + 1] as usize];
        let mut yhat = [[T::zero(); 64]; GROUP];
        let mut inv = [T::zero(); GROUP];
        if self.grad {
            d_n.iter_mut().for_each(|x| *x = T::zero());
            part.iter_mut().for_each(|x| *x = T::zero());
        }
        let mut j = 0;
        while j < seqs.len() {
            let n = if seqs.len() - j >= GROUP {
                forward_group::<T, GROUP>(self, erow, first + j, &mut yhat, &mut inv);
                GROUP
            } else {
                forward_group::<T, 1>(self, erow, first + j, &mut yhat, &mut inv);
                1
            };
            for gg in 0..n {
                let jj = j + gg;
                let yh = &yhat[gg][..s];
                if self.yhat_stride > 0 {
                    yhat_out[jj * s..(jj + 1) * s].copy_from_slice(yh);
                }
                let last = jj + 1 == seqs.len()
                    || seqs[jj + 1] as usize / CHUNK != seqs[jj] as usize / CHUNK;
                loss_out[jj] = self.backward_seq(erow, first + jj, yh, inv[gg], part);
                if self.grad && last {
                    // the chunk's partial is complete: into the row, in chunk order
                    for (d, p) in d_n.iter_mut().zip(part.iter_mut()) {
                        *d += *p;
                        *p = T::zero();
                    }
                }
            }
            j += n;
        }
    }

    /// Sequence `at` (its place in the index) from its ŷ and `1 / Σ exp`: its
    /// loss, and, with `grad`, `∂L/∂s_l` added into `part` key by key.
    #[inline(always)]
    fn backward_seq(&self, erow: &[T], at: usize, yh: &[T], inv: T, part: &mut [T]) -> T {
        let (s, l, ix) = (self.s, self.l, self.index);
        let x = &ix.keys[at * l..(at + 1) * l];
        let kidx = &ix.kidx[at * l..(at + 1) * l];
        let label = [Some(ix.label[at] as usize)];
        // --- loss and dL/dŷ (per sequence; the mean's 1/n comes below) ---
        let mut g = [T::zero(); 64];
        let gy = &mut g[..s];
        let lo = match self.loss {
            LossKind::Code => {
                loss::cross_entropy_probs_as_logits(gy, yh, &label, s, Reduction::Sum)
            }
            LossKind::Nll => {
                loss::cross_entropy_probs_floor(gy, yh, &label, s, Reduction::Sum, self.floor)
            }
        };
        if self.grad {
            // --- backward through the layer-2 softmax into the cells ---
            // g_k − ⟨ŷ, g⟩ centred on the likeliest token: no cancellation once
            // ŷ rounds to one-hot (softmax::centred_inner).
            let (g_top, pg) = softmax::centred_inner(&g[..s], yh);
            for k in 0..s {
                g[k] = ((g[k] - g_top) - pg) * self.scale;
            }
            for (&k, &xi) in kidx.iter().zip(x) {
                part[k as usize] += (erow[k as usize] * inv) * g[xi as usize];
            }
        }
        // exact for f32 too: the per-sequence loss is computed in T
        T::of(lo.loss)
    }
}

/// Sequences whose forwards run interleaved.
const GROUP: usize = 4;

/// The layer-2 attention of `G` consecutive sequences of one row (index places
/// `at..at + G`): each one's `1 / Σ_l exp` into `inv` and its ŷ into `yhat`.
///
/// Each sequence's sums are chains of dependent additions, one per key, that
/// must stay in key order (the bits are the contract); one sequence alone
/// leaves the adder waiting on its own latency. Running `G` independent chains
/// side by side fills that wait and changes no operation of any chain, so the
/// results are the bits of `G = 1`.
#[inline(always)]
fn forward_group<T: Float, const G: usize>(
    ctx: &Ctx<'_, T>,
    erow: &[T],
    at: usize,
    yhat: &mut [[T; 64]; GROUP],
    inv: &mut [T; GROUP],
) {
    let (s, l, ix) = (ctx.s, ctx.l, ctx.index);
    let kidx: [&[u16]; G] = std::array::from_fn(|gg| &ix.kidx[(at + gg) * l..][..l]);
    let keys: [&[u8]; G] = std::array::from_fn(|gg| &ix.keys[(at + gg) * l..][..l]);
    let mut sum = [T::zero(); G];
    for i in 0..l {
        for gg in 0..G {
            sum[gg] += erow[kidx[gg][i] as usize];
        }
    }
    // p_i = erow[k_i] · inv, formed the same way wherever it is used
    let iv: [T; G] = std::array::from_fn(|gg| T::one() / sum[gg]);
    inv[..G].copy_from_slice(&iv);
    match s {
        2 => mix_const::<T, G, 2>(yhat, erow, &kidx, &keys, &iv),
        3 => mix_const::<T, G, 3>(yhat, erow, &kidx, &keys, &iv),
        4 => mix_const::<T, G, 4>(yhat, erow, &kidx, &keys, &iv),
        _ => {
            for gg in 0..G {
                mix(&mut yhat[gg][..s], erow, kidx[gg], keys[gg], iv[gg]);
            }
        }
    }
}

/// `ŷ_t = Σ_{i: x_i = t} erow[k_i] · inv`, each token's terms added in key order.
#[inline(always)]
fn mix<T: Float>(yhat: &mut [T], erow: &[T], kidx: &[u16], x: &[u8], inv: T) {
    yhat.iter_mut().for_each(|v| *v = T::zero());
    for (&k, &xi) in kidx.iter().zip(x) {
        yhat[xi as usize] += erow[k as usize] * inv;
    }
}

/// [`mix`] for `S ≤ 4` and `G` sequences side by side: the sums stay in
/// registers (adding an exact `+0` for the other tokens changes nothing), which
/// breaks the store-to-load chain through `ŷ`.
#[inline(always)]
fn mix_const<T: Float, const G: usize, const S: usize>(
    yhat: &mut [[T; 64]; GROUP],
    erow: &[T],
    kidx: &[&[u16]; G],
    x: &[&[u8]; G],
    inv: &[T; G],
) {
    let mut acc = [[T::zero(); S]; G];
    for i in 0..kidx[0].len() {
        for gg in 0..G {
            let (k, xi) = (kidx[gg][i], x[gg][i]);
            let p = erow[k as usize] * inv[gg];
            for (t, a) in acc[gg].iter_mut().enumerate() {
                *a += if xi as usize == t { p } else { T::zero() };
            }
        }
    }
    for gg in 0..G {
        yhat[gg][..S].copy_from_slice(&acc[gg]);
    }
}
