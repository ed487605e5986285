//! Multi-head scaled dot-product attention over one sequence.
//! (Its tests are in `attention_tests.rs`.)
//!
//! Layouts follow TransformerLens (per batch element): `q` is `[Tq, H, d_qk]`,
//! `k` is `[Tk, H, d_qk]`, `v` is `[Tk, H, d_v]` (TL `hook_q/k/v`; what a linear
//! layer with `out = H·d` emits, no transpose needed), the output `z` is
//! `[Tq, H, d_v]` (TL `hook_z`), and the saved `pattern` is `[H, Tq, Tk]`
//! (TL `blocks.L.attn.hook_pattern`). For head `h`:
//!
//! `logits[h, i, j] = scale · ⟨q[i, h], k[j, h]⟩ + bias[h, i, j]`,
//! `pattern[h, i, :] = softmax over allowed j`, `z[i, h] = Σ_j pattern[h, i, j] · v[j, h]`.
//! [`reference::attention`](super::reference::attention) is that definition as
//! plain loops; the layer agrees with it (tested).
//!
//! Key `j` is allowed for query `i` in head `h` when all given conditions hold:
//! the key mask `[Tk]` keeps `j`; the full mask `[H, Tq, Tk]` keeps `(h, i, j)` (this
//! is where [`super::rpe`] windows go); and, if `causal`, `j ≤ i + (Tk − Tq)`, i.e.
//! query `i` sits at the last `Tq` positions of the key sequence (`j ≤ i` when
//! `Tq = Tk`). Disallowed entries have pattern exactly `0`; a query with no allowed
//! key gets an all-zero pattern row and `z = 0`. The default `scale` is `1/√d_qk`.
//!
//! ```
//! use mechlab_engine::layers::attention::{Attention, AttnExtras};
//! // one head, two positions, d=1, causal, scale 1
//! let attn = Attention::new(1, 2, 2, 1, 1).with_scale(1.0).with_causal(true);
//! let (q, k, v) = ([0.0f64, 1.0], [0.0, 3f64.ln()], [4.0, 8.0]);
//! let (mut z, mut pattern) = ([0.0; 2], [0.0; 4]);
//! attn.forward(&mut z, &mut pattern, &q, &k, &v, &AttnExtras::default());
//! // query 0 sees key 0 only; query 1: softmax([0, ln 3]) = [1/4, 3/4]
//! let want = [1.0, 0.0, 0.25, 0.75];
//! assert!(pattern.iter().zip(want).all(|(p, w)| (p - w).abs() < 1e-12));
//! assert!((z[0] - 4.0).abs() < 1e-12 && (z[1] - 7.0).abs() < 1e-12);
//! ```

use super::softmax;
use crate::matmul::{matmul_strided, with_b_transposed, Op};
use crate::Float;

/// Query rows per block of the causal path (`Attention::row_blocks`).
pub const CAUSAL_BLOCK: usize = 64;

/// Shapes and options of one attention call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Attention {
    pub n_heads: usize,
    pub t_q: usize,
    pub t_k: usize,
    pub d_qk: usize,
    pub d_v: usize,
    /// Multiplies `q·k` (not the bias). Default `1/√d_qk`.
    pub scale: f64,
    /// Mask keys after the query (see the module doc for `Tq ≠ Tk`).
    pub causal: bool,
    /// The backward writes `dq`, `dk`, `dv` (the bits of adding into zeros)
    /// instead of adding into them. Default off.
    pub grads_written: bool,
    /// The caller's `pattern` already holds zeros past each causal block's keys
    /// (the part of the masked triangle the row blocks never compute), so the
    /// forward leaves those entries alone instead of writing the zeros again.
    /// Default off; a caller that sets it must know it (the GPT's workspace
    /// tracks it per layer). Nothing the forward computes reads them.
    pub rest_zeroed: bool,
}

/// Optional additive bias and masks (all `None` by default).
#[derive(Clone, Copy, Debug)]
pub struct AttnExtras<'a, T> {
    /// `[H, Tq, Tk]`, added to the scaled logits (position biases).
    pub bias: Option<&'a [T]>,
    /// `[H, Tq, Tk]`, `true` = allowed.
    pub mask: Option<&'a [bool]>,
    /// `[Tk]`, `true` = allowed (padding / key masks).
    pub key_mask: Option<&'a [bool]>,
}

impl<T> Default for AttnExtras<'_, T> {
    fn default() -> Self {
        AttnExtras {
            bias: None,
            mask: None,
            key_mask: None,
        }
    }
}

impl Attention {
    /// Non-causal attention with scale `1/√d_qk`.
    pub fn new(n_heads: usize, t_q: usize, t_k: usize, d_qk: usize, d_v: usize) -> Self {
        Attention {
            n_heads,
            t_q,
            t_k,
            d_qk,
            d_v,
            scale: 1.0 / (d_qk.max(1) as f64).sqrt(),
            causal: false,
            grads_written: false,
            rest_zeroed: false,
        }
    }
    pub fn with_scale(mut self, scale: f64) -> Self {
        self.scale = scale;
        self
    }
    pub fn with_causal(mut self, causal: bool) -> Self {
        self.causal = causal;
        self
    }
    /// See [`Attention::grads_written`]: a training step's backward, whose
    /// buffers would otherwise be zeroed first.
    pub fn with_grads_written(mut self, on: bool) -> Self {
        self.grads_written = on;
        self
    }
    /// See [`Attention::rest_zeroed`]: for a caller whose pattern buffer keeps
    /// those zeros from one forward to the next.
    pub fn with_rest_zeroed(mut self, on: bool) -> Self {
        self.rest_zeroed = on;
        self
    }
    /// Elements of `pattern` (and of `bias`, `mask`): `H · Tq · Tk`.
    pub fn pattern_len(&self) -> usize {
        self.n_heads * self.t_q * self.t_k
    }

    /// Whether query `i` may attend to key `j` in head `h`.
    pub fn allowed<T>(&self, ex: &AttnExtras<'_, T>, h: usize, i: usize, j: usize) -> bool {
        if self.causal && j + self.t_q > i + self.t_k {
            return false;
        }
        if let Some(km) = ex.key_mask {
            if !km[j] {
                return false;
            }
        }
        match ex.mask {
            Some(m) => m[(h * self.t_q + i) * self.t_k + j],
            None => true,
        }
    }

    fn check_inputs<T: Float>(&self, q: &[T], k: &[T], v: &[T]) {
        let (h, tq, tk) = (self.n_heads, self.t_q, self.t_k);
        assert_eq!(
            q.len(),
            tq * h * self.d_qk,
            "attention: q is not [Tq, H, d_qk]"
        );
        assert_eq!(
            k.len(),
            tk * h * self.d_qk,
            "attention: k is not [Tk, H, d_qk]"
        );
        assert_eq!(
            v.len(),
            tk * h * self.d_v,
            "attention: v is not [Tk, H, d_v]"
        );
    }

    /// Computes `pattern` and `z`, overwriting both.
    pub fn forward<T: Float>(
        &self,
        z: &mut [T],
        pattern: &mut [T],
        q: &[T],
        k: &[T],
        v: &[T],
        ex: &AttnExtras<'_, T>,
    ) {
        // q: [Tq, H, d_qk], k: [Tk, H, d_qk], v: [Tk, H, d_v], bias/mask: [H, Tq, Tk], key_mask: [Tk]
        //   -> pattern: [H, Tq, Tk], z: [Tq, H, d_v]
        self.check_inputs(q, k, v);
        let (nh, tq, tk, dqk, dv) = (self.n_heads, self.t_q, self.t_k, self.d_qk, self.d_v);
        assert_eq!(z.len(), tq * nh * dv, "attention: z is not [Tq, H, d_v]");
        assert_eq!(
            pattern.len(),
            self.pattern_len(),
            "attention: pattern is not [H, Tq, Tk]"
        );
        if let Some(b) = ex.bias {
            assert_eq!(
                b.len(),
                self.pattern_len(),
                "attention: bias is not [H, Tq, Tk]"
            );
        }
        if let Some(m) = ex.mask {
            assert_eq!(
                m.len(),
                self.pattern_len(),
                "attention: mask is not [H, Tq, Tk]"
            );
        }
        if let Some(m) = ex.key_mask {
            assert_eq!(m.len(), tk, "attention: key_mask is not [Tk]");
        }
        let scale = T::of(self.scale);
        let (ldqk, ldv) = (nh * dqk, nh * dv);
        let only_causal = ex.key_mask.is_none() && ex.mask.is_none();
        // query i's kept keys when only the causal mask applies: a prefix
        let kept = |i: usize| {
            if self.causal {
                (i + tk + 1).saturating_sub(tq).min(tk)
            } else {
                tk
            }
        };
        for h in 0..nh {
            let pat = &mut pattern[h * tq * tk..(h + 1) * tq * tk];
            let (qh, kh, vh) = (&q[h * dqk..], &k[h * dqk..], &v[h * dv..]);
            // kᵀ copied once for all the blocks (each takes a prefix of its columns)
            with_b_transposed(kh, ldqk, tk, dqk, |kt| {
                for (i0, i1, n) in self.row_blocks() {
                    // pat[i, :n] = <q[i, h], k[j, h]> for the block's rows
                    kt.product(
                        &mut pat[i0 * tk..],
                        tk,
                        &qh[i0 * ldqk..],
                        ldqk,
                        Op::N,
                        i1 - i0,
                        n,
                        false,
                    );
                    // scaled (and masked) in the widest lanes: the same bits per entry
                    crate::simd::widest(
                        #[inline(always)]
                        || {
                            for i in i0..i1 {
                                let (row, rest) = pat[i * tk..(i + 1) * tk].split_at_mut(n);
                                if !self.rest_zeroed {
                                    rest.iter_mut().for_each(|x| *x = T::zero());
                                }
                                row.iter_mut().for_each(|x| *x *= scale);
                                if let Some(b) = ex.bias {
                                    let b = &b[(h * tq + i) * tk..(h * tq + i) * tk + n];
                                    row.iter_mut().zip(b).for_each(|(x, &bj)| *x += bj);
                                }
                                if only_causal {
                                    row[kept(i)..].iter_mut().for_each(|x| *x = T::zero());
                                } else {
                                    softmax::row_in_place(row, |j| self.allowed(ex, h, i, j));
                                }
                            }
                        },
                    );
                    if only_causal {
                        // the kept keys are a prefix: the softmax over it alone gives the
                        // same numbers (masked keys only add zeros to the sum) without a
                        // branch per key, and the block's rows side by side
                        softmax::prefix_rows_in_place(&mut pat[i0 * tk..], i1 - i0, tk, |r| {
                            kept(i0 + r)
                        });
                    }
                    // z[i, h] = pat[i, :n] · v[:n, h]
                    matmul_strided(
                        &mut z[i0 * ldv + h * dv..],
                        ldv,
                        &pat[i0 * tk..],
                        tk,
                        Op::N,
                        vh,
                        ldv,
                        Op::N,
                        i1 - i0,
                        n,
                        dv,
                        false,
                    );
                }
            });
        }
    }

    /// Query rows `i0..i1` and the keys `0..n` they may see: one block of every
    /// row and key without `causal`; with it, blocks of [`CAUSAL_BLOCK`] rows,
    /// each multiplying only the keys up to its last query (the masked upper
    /// triangle is never computed: about half the products at long contexts).
    fn row_blocks(&self) -> impl Iterator<Item = (usize, usize, usize)> {
        let (tq, tk, causal) = (self.t_q, self.t_k, self.causal);
        let step = if causal { CAUSAL_BLOCK } else { tq.max(1) };
        (0..tq).step_by(step).map(move |i0| {
            let i1 = (i0 + step).min(tq);
            let n = if causal {
                (i1 + tk).saturating_sub(tq).min(tk)
            } else {
                tk
            };
            (i0, i1, n)
        })
    }

    /// Accumulates `dq`, `dk`, `dv` (written instead with
    /// [`Attention::grads_written`]; and `d_bias`, the gradient of the logits,
    /// if given) from `dz`. Reads the `pattern` saved by [`Attention::forward`]; the
    /// masks need not be passed again (masked entries have zero pattern and get
    /// zero gradient). `scratch` is `[Tq, Tk]`, overwritten.
    #[allow(clippy::too_many_arguments)]
    pub fn backward<T: Float>(
        &self,
        dq: &mut [T],
        dk: &mut [T],
        dv: &mut [T],
        mut d_bias: Option<&mut [T]>,
        scratch: &mut [T],
        dz: &[T],
        pattern: &[T],
        q: &[T],
        k: &[T],
        v: &[T],
    ) {
        // dz: [Tq, H, d_v], pattern: [H, Tq, Tk], q/k/v as in forward
        //   -> dq: [Tq, H, d_qk] (+=), dk: [Tk, H, d_qk] (+=), dv: [Tk, H, d_v] (+=),
        //      d_bias: [H, Tq, Tk] (+=); scratch: [Tq, Tk]
        self.check_inputs(q, k, v);
        let (nh, tq, tk, dqk, d_v) = (self.n_heads, self.t_q, self.t_k, self.d_qk, self.d_v);
        assert_eq!(dq.len(), q.len(), "attention: dq is not [Tq, H, d_qk]");
        assert_eq!(dk.len(), k.len(), "attention: dk is not [Tk, H, d_qk]");
        assert_eq!(dv.len(), v.len(), "attention: dv is not [Tk, H, d_v]");
        assert_eq!(dz.len(), tq * nh * d_v, "attention: dz is not [Tq, H, d_v]");
        assert_eq!(
            pattern.len(),
            self.pattern_len(),
            "attention: pattern is not [H, Tq, Tk]"
        );
        assert_eq!(scratch.len(), tq * tk, "attention: scratch is not [Tq, Tk]");
        if let Some(db) = d_bias.as_deref() {
            assert_eq!(
                db.len(),
                self.pattern_len(),
                "attention: d_bias is not [H, Tq, Tk]"
            );
        }
        let scale = T::of(self.scale);
        let (ldqk, ldv) = (nh * dqk, nh * d_v);
        let set = self.grads_written;
        for h in 0..nh {
            let pat = &pattern[h * tq * tk..(h + 1) * tq * tk];
            let (dzh, vh) = (&dz[h * d_v..], &v[h * d_v..]);
            let (qh, kh) = (&q[h * dqk..], &k[h * dqk..]);
            // keys 0..seen have their dk, dv rows formed by an earlier block
            let mut seen = if set { 0 } else { tk };
            // vᵀ copied once for all the blocks (each takes a prefix of its columns)
            with_b_transposed(vh, ldv, tk, d_v, |vt| {
                for (i0, i1, n) in self.row_blocks() {
                    let m = i1 - i0;
                    // d_pattern[i, :n] = dz[i, h] · v[:n, h]ᵀ   (scratch rows i, stride Tk)
                    vt.product(
                        &mut scratch[i0 * tk..],
                        tk,
                        &dzh[i0 * ldv..],
                        ldv,
                        Op::N,
                        m,
                        n,
                        false,
                    );
                    // dv[:n, h] += pattern[rows, :n]ᵀ · dz[rows, h]
                    // (rows seen..n written)
                    for (j0, j1, add) in key_spans(seen, n) {
                        matmul_strided(
                            &mut dv[j0 * ldv + h * d_v..],
                            ldv,
                            &pat[i0 * tk + j0..],
                            tk,
                            Op::T,
                            &dzh[i0 * ldv..],
                            ldv,
                            Op::N,
                            j1 - j0,
                            m,
                            d_v,
                            add,
                        );
                    }
                    // d_logits = softmax backward, the block's rows side by side
                    softmax::backward_rows_in_place(
                        &mut scratch[i0 * tk..],
                        &pat[i0 * tk..],
                        m,
                        n,
                        tk,
                    );
                    crate::simd::widest(
                        #[inline(always)]
                        || {
                            for i in i0..i1 {
                                let g = &mut scratch[i * tk..i * tk + n];
                                if let Some(db) = d_bias.as_deref_mut() {
                                    let db = &mut db[(h * tq + i) * tk..(h * tq + i) * tk + n];
                                    db.iter_mut().zip(g.iter()).for_each(|(a, &b)| *a += b);
                                }
                                g.iter_mut().for_each(|x| *x *= scale);
                            }
                        },
                    );
                    // dq[rows, h] += d_logits · k[:n, h] (each row once: written
                    // when set);  dk[:n, h] += d_logitsᵀ · q[rows, h] (as dv)
                    matmul_strided(
                        &mut dq[i0 * ldqk + h * dqk..],
                        ldqk,
                        &scratch[i0 * tk..],
                        tk,
                        Op::N,
                        kh,
                        ldqk,
                        Op::N,
                        m,
                        n,
                        dqk,
                        !set,
                    );
                    for (j0, j1, add) in key_spans(seen, n) {
                        matmul_strided(
                            &mut dk[j0 * ldqk + h * dqk..],
                            ldqk,
                            &scratch[i0 * tk + j0..],
                            tk,
                            Op::T,
                            &qh[i0 * ldqk..],
                            ldqk,
                            Op::N,
                            j1 - j0,
                            m,
                            dqk,
                            add,
                        );
                    }
                    seen = seen.max(n);
                }
            });
            // keys no query may see: zero gradient, written
            for j in seen..tk {
                dk[j * ldqk + h * dqk..][..dqk].fill(T::zero());
                dv[j * ldv + h * d_v..][..d_v].fill(T::zero());
            }
        }
    }
}

/// The key rows `0..n` of a block's `dk`, `dv` products as `(j0, j1, add)`
/// spans: rows before `seen` add into what earlier blocks formed, the rest are
/// written. Each output row's sum runs over the block's queries alone, so the
/// split gives the bits of one product (and with `seen ≥ n` it is that product).
fn key_spans(seen: usize, n: usize) -> impl Iterator<Item = (usize, usize, bool)> {
    let lo = seen.min(n);
    [(0, lo, true), (lo, n, false)]
        .into_iter()
        .filter(|&(j0, j1, _)| j1 > j0)
}

#[cfg(test)]
#[path = "attention_tests.rs"]
mod tests;
