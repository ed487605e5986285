//! Multi-head scaled dot-product attention over one sequence.
//! (One file a little past 600 lines: forward, backward and the key-mask rules of
//! one layer are read together, and its tests sit with them.)
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
use crate::matmul::{matmul_strided, Op};
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
            for (i0, i1, n) in self.row_blocks() {
                // pat[i, :n] = <q[i, h], k[j, h]> for the block's rows
                matmul_strided(
                    &mut pat[i0 * tk..],
                    tk,
                    &qh[i0 * ldqk..],
                    ldqk,
                    Op::N,
                    kh,
                    ldqk,
                    Op::T,
                    i1 - i0,
                    dqk,
                    n,
                    false,
                );
                for i in i0..i1 {
                    let (row, rest) = pat[i * tk..(i + 1) * tk].split_at_mut(n);
                    rest.iter_mut().for_each(|x| *x = T::zero());
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
            for (i0, i1, n) in self.row_blocks() {
                let m = i1 - i0;
                // d_pattern[i, :n] = dz[i, h] · v[:n, h]ᵀ   (scratch rows i, stride Tk)
                matmul_strided(
                    &mut scratch[i0 * tk..],
                    tk,
                    &dzh[i0 * ldv..],
                    ldv,
                    Op::N,
                    vh,
                    ldv,
                    Op::T,
                    m,
                    d_v,
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
                softmax::backward_rows_in_place(&mut scratch[i0 * tk..], &pat[i0 * tk..], m, n, tk);
                for i in i0..i1 {
                    let g = &mut scratch[i * tk..i * tk + n];
                    if let Some(db) = d_bias.as_deref_mut() {
                        let db = &mut db[(h * tq + i) * tk..(h * tq + i) * tk + n];
                        db.iter_mut().zip(g.iter()).for_each(|(a, &b)| *a += b);
                    }
                    g.iter_mut().for_each(|x| *x *= scale);
                }
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
mod tests {
    use super::*;
    use crate::testutil::*;

    struct Case {
        a: Attention,
        q: Vec<f64>,
        k: Vec<f64>,
        v: Vec<f64>,
        bias: Vec<f64>,
        mask: Vec<bool>,
        key_mask: Vec<bool>,
    }

    fn case(seed: u64, causal: bool, t_q: usize) -> Case {
        let a = Attention::new(2, t_q, 4, 3, 2).with_causal(causal);
        let mut r = rng(seed);
        let mut big = |n| {
            uniform(&mut r, n)
                .iter()
                .map(|x| 2.0 * x)
                .collect::<Vec<_>>()
        };
        Case {
            q: big(a.t_q * 2 * 3),
            k: big(4 * 2 * 3),
            v: big(4 * 2 * 2),
            bias: big(a.pattern_len()),
            // head 0 loses key 1 for query 0; everything else allowed
            mask: (0..a.pattern_len()).map(|i| i != 1).collect(),
            key_mask: vec![true, true, false, true],
            a,
        }
    }

    #[test]
    fn forward_matches_reference_loops() {
        for (causal, tq) in [(false, 4), (true, 4), (true, 2), (false, 3)] {
            let c = case(5, causal, tq);
            let ex = AttnExtras {
                bias: Some(&c.bias[..]),
                mask: Some(&c.mask[..]),
                key_mask: Some(&c.key_mask[..]),
            };
            let mut z = vec![0.0; tq * 2 * 2];
            let mut pat = vec![0.0; c.a.pattern_len()];
            c.a.forward(&mut z, &mut pat, &c.q, &c.k, &c.v, &ex);
            let (zr, pr) = crate::layers::reference::attention(&c.a, &c.q, &c.k, &c.v, &ex);
            assert_close("z", &z, &zr, 1e-12);
            assert_close("pattern", &pat, &pr, 1e-12);
            // key 2 is masked everywhere: exact zeros
            assert!((0..2 * tq).all(|r| pat[r * 4 + 2] == 0.0));
        }
    }

    /// The causal path computes only the lower triangle, in blocks of
    /// [`CAUSAL_BLOCK`] rows: at a context of several blocks (and with fewer
    /// queries than keys) it gives what the full product with the causal mask
    /// spelled out gives, forward and backward.
    #[test]
    fn causal_blocks_match_the_full_masked_product() {
        for (tq, tk) in [(150, 150), (70, 150)] {
            let (nh, d) = (2, 3);
            let blocked = Attention::new(nh, tq, tk, d, d).with_causal(true);
            let full = Attention::new(nh, tq, tk, d, d);
            let mask: Vec<bool> = (0..nh * tq * tk)
                .map(|e| (e % tk) + tq <= (e / tk) % tq + tk)
                .collect();
            let mut r = rng(21);
            let (q, k, v) = (
                uniform(&mut r, tq * nh * d),
                uniform(&mut r, tk * nh * d),
                uniform(&mut r, tk * nh * d),
            );
            let dz = uniform(&mut r, tq * nh * d);
            let run = |a: &Attention, ex: &AttnExtras<'_, f64>| {
                let (mut z, mut p) = (vec![0.0; tq * nh * d], vec![9.0; a.pattern_len()]);
                a.forward(&mut z, &mut p, &q, &k, &v, ex);
                let (mut dq, mut dk, mut dv) =
                    (vec![0.0; q.len()], vec![0.0; k.len()], vec![0.0; v.len()]);
                let mut scratch = vec![7.0; tq * tk];
                a.backward(
                    &mut dq,
                    &mut dk,
                    &mut dv,
                    None,
                    &mut scratch,
                    &dz,
                    &p,
                    &q,
                    &k,
                    &v,
                );
                [z, p, dq, dk, dv]
            };
            let ex_full = AttnExtras {
                mask: Some(&mask[..]),
                ..AttnExtras::default()
            };
            let (a, b) = (run(&blocked, &AttnExtras::default()), run(&full, &ex_full));
            for (name, (x, y)) in ["z", "pattern", "dq", "dk", "dv"]
                .iter()
                .zip(a.iter().zip(&b))
            {
                assert_close(name, x, y, 1e-12);
            }
        }
    }

    #[test]
    fn fully_masked_query_gives_zero_output_and_gradient() {
        let a = Attention::new(1, 2, 2, 2, 2);
        let (q, k, v) = (vec![1.0; 4], vec![0.5; 4], vec![3.0; 4]);
        let mask = [false, false, true, false]; // query 0 sees nothing
        let ex = AttnExtras {
            mask: Some(&mask[..]),
            ..Default::default()
        };
        let (mut z, mut pat) = (vec![9.0; 4], vec![9.0; 4]);
        a.forward(&mut z, &mut pat, &q, &k, &v, &ex);
        assert_eq!(z, [0.0, 0.0, 3.0, 3.0]);
        assert_eq!(pat, [0.0, 0.0, 1.0, 0.0]);
        let (mut dq, mut dk, mut dv, mut db, mut s) = (
            vec![0.0f64; 4],
            vec![0.0; 4],
            vec![0.0; 4],
            vec![0.0; 4],
            vec![0.0; 4],
        );
        a.backward(
            &mut dq,
            &mut dk,
            &mut dv,
            Some(&mut db),
            &mut s,
            &[1.0; 4],
            &pat,
            &q,
            &k,
            &v,
        );
        assert!(dq
            .iter()
            .chain(&dk)
            .chain(&dv)
            .chain(&db)
            .all(|x| x.is_finite()));
        assert_eq!(&dq[..2], &[0.0, 0.0]);
        assert_eq!(dv, [1.0, 1.0, 0.0, 0.0]);
    }

    #[test]
    fn gradcheck_q_k_v_bias() {
        for (causal, tq, seed) in [(false, 4, 6), (true, 4, 7), (true, 3, 8)] {
            let c = case(seed, causal, tq);
            let a = c.a;
            let mut r = rng(seed + 100);
            let seed_z = uniform(&mut r, tq * 2 * 2);
            let run = |q: &[f64], k: &[f64], v: &[f64], bias: &[f64]| {
                let ex = AttnExtras {
                    bias: Some(bias),
                    mask: Some(&c.mask[..]),
                    key_mask: Some(&c.key_mask[..]),
                };
                let mut z = vec![0.0; tq * 2 * 2];
                let mut pat = vec![0.0; a.pattern_len()];
                a.forward(&mut z, &mut pat, q, k, v, &ex);
                (dot(&z, &seed_z), pat)
            };
            let (_, pat) = run(&c.q, &c.k, &c.v, &c.bias);
            let (dq0, dk0, dv0, db0) = (
                uniform(&mut r, c.q.len()),
                uniform(&mut r, c.k.len()),
                uniform(&mut r, c.v.len()),
                uniform(&mut r, c.bias.len()),
            );
            let (mut dq, mut dk, mut dv, mut db) =
                (dq0.clone(), dk0.clone(), dv0.clone(), db0.clone());
            let mut scratch = vec![f64::NAN; tq * 4];
            a.backward(
                &mut dq,
                &mut dk,
                &mut dv,
                Some(&mut db),
                &mut scratch,
                &seed_z,
                &pat,
                &c.q,
                &c.k,
                &c.v,
            );
            assert_grad(
                "attn dq",
                &mut |x: &[f64]| run(x, &c.k, &c.v, &c.bias).0,
                &c.q,
                &accumulated(&dq, &dq0),
            );
            assert_grad(
                "attn dk",
                &mut |x: &[f64]| run(&c.q, x, &c.v, &c.bias).0,
                &c.k,
                &accumulated(&dk, &dk0),
            );
            assert_grad(
                "attn dv",
                &mut |x: &[f64]| run(&c.q, &c.k, x, &c.bias).0,
                &c.v,
                &accumulated(&dv, &dv0),
            );
            assert_grad(
                "attn dbias",
                &mut |x: &[f64]| run(&c.q, &c.k, &c.v, x).0,
                &c.bias,
                &accumulated(&db, &db0),
            );
        }
    }

    fn run_generic<T: Float>(c: &Case, dz: &[f64]) -> Vec<f64> {
        let (q, k, v, bias, dz) = (
            cast::<T>(&c.q),
            cast::<T>(&c.k),
            cast::<T>(&c.v),
            cast::<T>(&c.bias),
            cast::<T>(dz),
        );
        let ex = AttnExtras {
            bias: Some(&bias[..]),
            mask: None,
            key_mask: Some(&c.key_mask[..]),
        };
        let mut z = vec![T::zero(); dz.len()];
        let mut pat = vec![T::zero(); c.a.pattern_len()];
        c.a.forward(&mut z, &mut pat, &q, &k, &v, &ex);
        let (mut dq, mut dk, mut dv) = (
            vec![T::zero(); q.len()],
            vec![T::zero(); k.len()],
            vec![T::zero(); v.len()],
        );
        let mut s = vec![T::zero(); c.a.t_q * c.a.t_k];
        c.a.backward(
            &mut dq, &mut dk, &mut dv, None, &mut s, &dz, &pat, &q, &k, &v,
        );
        [z, pat, dq, dk, dv]
            .iter()
            .flat_map(|x| to_f64(x))
            .collect()
    }

    /// With `grads_written` the backward writes over whatever `dq`, `dk`, `dv`
    /// held the bits that the adding backward leaves in zeros: f32, causal over
    /// several blocks (`T` 200, `Tq < Tk`) and not, with a logit bias.
    #[test]
    fn written_gradients_are_the_added_into_zeros_bits() {
        for (causal, tq, tk) in [(true, 200, 200), (true, 150, 200), (false, 70, 90)] {
            let (nh, dqk, dv_) = (2, 8, 4);
            let a = Attention::new(nh, tq, tk, dqk, dv_).with_causal(causal);
            let mut r = rng(tq as u64);
            let mut f = |n: usize| -> Vec<f32> {
                uniform(&mut r, n)
                    .into_iter()
                    .map(|x| (2.0 * x) as f32)
                    .collect()
            };
            let (q, k, v, dz) = (
                f(tq * nh * dqk),
                f(tk * nh * dqk),
                f(tk * nh * dv_),
                f(tq * nh * dv_),
            );
            let bias = f(a.pattern_len());
            let ex = AttnExtras {
                bias: Some(&bias[..]),
                ..AttnExtras::default()
            };
            let mut z = vec![0.0f32; tq * nh * dv_];
            let mut pat = vec![0.0f32; a.pattern_len()];
            a.forward(&mut z, &mut pat, &q, &k, &v, &ex);
            let mut s = vec![0.0f32; tq * tk];
            let grads = |a: Attention, g: (Vec<f32>, Vec<f32>, Vec<f32>), s: &mut [f32]| {
                let (mut dq, mut dk, mut dv) = g;
                let mut db = vec![0.0f32; a.pattern_len()];
                a.backward(
                    &mut dq,
                    &mut dk,
                    &mut dv,
                    Some(&mut db),
                    s,
                    &dz,
                    &pat,
                    &q,
                    &k,
                    &v,
                );
                [dq, dk, dv, db].map(|x| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>())
            };
            let zeros = (vec![0.0; q.len()], vec![0.0; k.len()], vec![0.0; v.len()]);
            let added = grads(a, zeros, &mut s);
            let junk = (f(q.len()), f(k.len()), f(v.len()));
            let written = grads(a.with_grads_written(true), junk, &mut s);
            for (name, (w, g)) in ["dq", "dk", "dv", "d_bias"]
                .iter()
                .zip(written.iter().zip(&added))
            {
                assert_eq!(w, g, "{name}, causal {causal}, Tq {tq}, Tk {tk}");
            }
        }
    }

    #[test]
    fn f32_matches_f64() {
        let c = case(9, true, 4);
        let dz = uniform(&mut rng(10), 4 * 2 * 2);
        assert_close(
            "attn f32",
            &run_generic::<f32>(&c, &dz),
            &run_generic::<f64>(&c, &dz),
            1e-5,
        );
    }

    /// Every query's pattern saturated on key 0 (a bias of 60 nats): dq and dk, the
    /// gradients that pass through the softmax backward, point where the
    /// double-double's do.
    #[test]
    fn backward_keeps_its_direction_at_saturation() {
        use crate::precision::{assert_direction, MIN_COSINE};
        use crate::F64x2;
        let mut c = case(11, false, 4);
        let (tq, tk) = (c.a.t_q, c.a.t_k);
        for (i, b) in c.bias.iter_mut().enumerate() {
            if i % tk == 0 {
                *b += 60.0;
            }
        }
        let dz = uniform(&mut rng(12), tq * 2 * 2);
        let (got, want) = (run_generic::<f64>(&c, &dz), run_generic::<F64x2>(&c, &dz));
        let pat = tq * 2 * 2..tq * 2 * 2 + c.a.pattern_len();
        assert!(got[pat.clone()].iter().step_by(tk).all(|&p| p == 1.0));
        let dq = pat.end..pat.end + c.q.len();
        let dk = dq.end..dq.end + c.k.len();
        for (name, r) in [("dq", dq), ("dk", dk)] {
            assert_direction(name, &got[r.clone()], &want[r], MIN_COSINE);
        }
    }
}
