//! One layer's training prompts eight at a time, one prompt per lane: the
//! operations of `Lsa::train_prompt` (the rank-one last layer) for each prompt
//! in its own lane, in the same order, so each lane's numbers are that path's
//! bits; the sums into the gradients and the loss then go prompt by prompt, in
//! order. A prompt's sums are short chains (`D` terms) that one prompt
//! alone cannot fill the vector units with; eight side by side can (one
//! AVX-512 register, two AVX2 ones, `Lsa::loss_and_grad` compiling the groups at
//! the processor's widest level).
//!
//! Written by hand for the reason the model is (its module doc), and tested
//! against the one-prompt path over training steps (`model_tests`).

use super::model::Work;
use super::products::gram_lanes;

/// Prompts per group.
pub(super) const LANES: usize = 8;
type L = [f64; LANES];

/// The lane scratch of prompts of `m` examples, `D = dd`: the prompts `[m + 1,
/// D]`, `A` `[D, D]`, and `Q z_q`, `A Q z_q`, `A p` `[D]` each.
pub(super) fn scratch(m: usize, dd: usize) -> Vec<L> {
    vec![[0.0; LANES]; (m + 1) * dd + dd * dd + 3 * dd]
}

/// `LANES` prompts `[LANES, m + 1, D]` with targets `y` through the last (here
/// the only) layer `P`, `Q`; adds their gradients into `wk.gp`, `wk.gq` and
/// their loss terms into `wk.loss`, prompt by prompt.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(super) fn train_prompts(
    p: &[f64],
    q: &[f64],
    prompts: &[f64],
    y: &[f64],
    m: usize,
    dd: usize,
    scale: f64,
    wk: &mut Work,
) {
    let (rows, sq) = (m + 1, dd * dd);
    let stride = rows * dd;
    let inv = 1.0 / m as f64;
    let (e, rest) = wk.lanes.split_at_mut(stride);
    let (a, rest) = rest.split_at_mut(sq);
    let (qv, rest) = rest.split_at_mut(dd);
    let (aq, ap) = rest.split_at_mut(dd);
    // e: [m + 1, D] of lanes
    for (k, v) in e.iter_mut().enumerate() {
        for (l, vl) in v.iter_mut().enumerate() {
            *vl = prompts[l * stride + k];
        }
    }
    gram_lanes(a, e, m, dd);
    let zq = &e[m * dd..stride];
    let prow = &p[(dd - 1) * dd..sq];
    // sums as `Iterator::sum` folds them, from −0.0
    for (i, qi) in qv.iter_mut().enumerate() {
        *qi = [-0.0; LANES];
        for (x, z) in q[i * dd..(i + 1) * dd].iter().zip(zq) {
            for l in 0..LANES {
                qi[l] += x * z[l];
            }
        }
    }
    for i in 0..dd {
        let (mut sum_q, mut sum_p) = ([-0.0; LANES], [-0.0; LANES]);
        for j in 0..dd {
            let aij = a[i * dd + j];
            for l in 0..LANES {
                sum_q[l] += aij[l] * qv[j][l];
                sum_p[l] += aij[l] * prow[j];
            }
        }
        aq[i] = sum_q;
        ap[i] = sum_p;
    }
    for l in 0..LANES {
        let mut pa = -0.0;
        for (x, v) in prow.iter().zip(aq.iter()) {
            pa += x * v[l];
        }
        let yh = -zq[dd - 1][l] - inv * pa;
        let r = yh - y[l];
        let dy = r * scale;
        let s = -dy * inv;
        for (o, v) in wk.gp[(dd - 1) * dd..sq].iter_mut().zip(aq.iter()) {
            *o += s * v[l];
        }
        for (row, api) in wk.gq[..sq].chunks_exact_mut(dd).zip(ap.iter()) {
            let sa = s * api[l];
            for (o, z) in row.iter_mut().zip(zq) {
                *o += sa * z[l];
            }
        }
        wk.loss += 0.5 * r * r;
    }
}
