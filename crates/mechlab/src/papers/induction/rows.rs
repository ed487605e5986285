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

// Index loops read like the equations here.
#![allow(clippy::needless_range_loop)]

use super::layer2::{LossKind, CHUNK};
use super::windows::WindowIndex;
use mechlab_engine::layers::loss::{self, Reduction};
use mechlab_engine::layers::softmax;
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
    }

    /// Query row `q`'s sequences, in order: their losses and ŷ, and, with
    /// `grad`, the row's cell gradients, one partial per work chunk added in
    /// chunk order.
    fn row(&self, q: usize, d_n: &mut [T], part: &mut [T], loss_out: &mut [T], yhat_out: &mut [T]) {
        let (s, l, nkw) = (self.s, self.l, self.nkw);
        let ix = self.index;
        let erow = &self.e_tab[q * nkw..(q + 1) * nkw];
        let first = ix.row_start[q] as usize;
        let seqs = &ix.order[first..ix.row_start[q + 1] as usize];
        let mut yhat = [T::zero(); 64];
        let mut g = [T::zero(); 64];
        if self.grad {
            d_n.iter_mut().for_each(|x| *x = T::zero());
            part.iter_mut().for_each(|x| *x = T::zero());
        }
        for (j, &b) in seqs.iter().enumerate() {
            let (b, at) = (b as usize, first + j);
            let x = &ix.keys[at * l..(at + 1) * l];
            let y = ix.label[at] as usize;
            let kidx = &ix.kidx[at * l..(at + 1) * l];
            // --- layer-2 attention of the query over the keys: looked up ---
            let mut sum = T::zero();
            for &k in kidx {
                sum += erow[k as usize];
            }
            let inv = T::one() / sum;
            // p_i = erow[k_i] · inv, formed the same way wherever it is used
            mix(&mut yhat[..s], erow, kidx, x, inv);
            // --- loss and dL/dŷ (per sequence; the mean's 1/n comes below) ---
            let (yh, gy, label) = (&yhat[..s], &mut g[..s], [Some(y)]);
            let lo = match self.loss {
                LossKind::Code => {
                    loss::cross_entropy_probs_as_logits(gy, yh, &label, s, Reduction::Sum)
                }
                LossKind::Nll => {
                    loss::cross_entropy_probs_floor(gy, yh, &label, s, Reduction::Sum, self.floor)
                }
            };
            // exact for f32 too: the per-sequence loss is computed in T
            loss_out[j] = T::of(lo.loss);
            if self.yhat_stride > 0 {
                yhat_out[j * s..(j + 1) * s].copy_from_slice(&yhat[..s]);
            }
            if !self.grad {
                continue;
            }
            // --- backward through the layer-2 softmax into the cells ---
            // g_k − ⟨ŷ, g⟩ centred on the likeliest token: no cancellation once
            // ŷ rounds to one-hot (softmax::centred_inner).
            let (g_top, pg) = softmax::centred_inner(&g[..s], &yhat[..s]);
            for k in 0..s {
                g[k] = ((g[k] - g_top) - pg) * self.scale;
            }
            for (&k, &xi) in kidx.iter().zip(x) {
                part[k as usize] += (erow[k as usize] * inv) * g[xi as usize];
            }
            // the chunk's partial is complete: into the row, in chunk order
            let last = j + 1 == seqs.len() || seqs[j + 1] as usize / CHUNK != b / CHUNK;
            if last {
                for (d, p) in d_n.iter_mut().zip(part.iter_mut()) {
                    *d += *p;
                    *p = T::zero();
                }
            }
        }
    }
}

/// `ŷ_t = Σ_{i: x_i = t} erow[k_i] · inv`, each token's terms added in key order.
/// For `S ≤ 4` the sums stay in registers (adding an exact `+0` for the other
/// tokens changes nothing), which breaks the store-to-load chain through `ŷ`.
fn mix<T: Float>(yhat: &mut [T], erow: &[T], kidx: &[u16], x: &[u8], inv: T) {
    match yhat.len() {
        2 => mix_const::<T, 2>(yhat, erow, kidx, x, inv),
        3 => mix_const::<T, 3>(yhat, erow, kidx, x, inv),
        4 => mix_const::<T, 4>(yhat, erow, kidx, x, inv),
        _ => {
            yhat.iter_mut().for_each(|v| *v = T::zero());
            for (&k, &xi) in kidx.iter().zip(x) {
                yhat[xi as usize] += erow[k as usize] * inv;
            }
        }
    }
}

fn mix_const<T: Float, const S: usize>(yhat: &mut [T], erow: &[T], kidx: &[u16], x: &[u8], inv: T) {
    let mut acc = [T::zero(); S];
    for (&k, &xi) in kidx.iter().zip(x) {
        let p = erow[k as usize] * inv;
        for (t, a) in acc.iter_mut().enumerate() {
            *a += if xi as usize == t { p } else { T::zero() };
        }
    }
    yhat.copy_from_slice(&acc);
}
