//! Layer 2 of the induction models, shared by the simplified and the full model.
//!
//! The table trick: with one-hot tokens and a layer 1 whose heads each look at a
//! fixed band of `H` distances, a head's output at a position depends only on a
//! *head code*, the `H` tokens of its band (`S` = "missing" before the start) and,
//! in the full model, the position's own token. So the layer-2 logit of key `l`
//! depends on the sequence only through the query's *window* (the `2H − 1` tokens
//! before position `L`) and the key's window (the `2H − 1` tokens before `l`, plus
//! `x_l` when the head codes carry the own token). Each step therefore builds,
//! from the parameters, the head outputs `v` once per (head, code), their inner
//! products once per (head, query code, code), and the logit `N(q, k)` and its
//! `exp` once per (query window, key window) cell; a sequence then costs one
//! lookup per key, and its backward adds `∂L/∂s_l` into that key's cell. The
//! cells' gradients go back to `a`, `c` and the `v` tables once per step (in
//! parallel jobs, [`super::cells`]), and each model takes its own layer 1 from `v`
//! back to its parameters.
//!
//! The kernel: `s_l = a Σ_δ c_δ² Π_{c∈δ} ReLU⟨z_L^c, z_l^c⟩ / Σ_{δ_0=0} c_δ²` over
//! the subsets `δ` without the raw-token component (the query's raw token is zero),
//! and `ŷ = Σ_l softmax(s)_l e_{x_l}`.
//!
//! Codes are base `S + 1` numbers, the nearest token the least significant digit;
//! a window or head code with the own token puts it in the lowest digit. Which
//! cell each key reads is fixed by the tokens, so it is indexed once per token
//! set ([`super::windows`]); the sequences then run one job per query row, and
//! each row's cell gradients are the partials of the engine's fixed-size chunks
//! ([`parallel::sized_chunks`]) summed in chunk order, so the result is
//! bit-identical for any thread count (and to the chunk-parallel pass this
//! replaced). The losses are the engine's ([`mechlab_engine::layers::loss`]); the layer-2 softmax and
//! the mixing `ŷ = Σ_l p_l e_{x_l}` stay fused with the table lookups (the test
//! `tests/it/induction_reference.rs` checks them against engine layers).
//!
//! The per-cell loops (here, [`super::cells`] and [`super::rows`]) run compiled
//! for the processor's widest instruction set ([`simd::widest`]), which changes
//! no operation and so no bit (`tests/it/simd_levels.rs`); the cell tables are
//! formed a block of key windows at a time, subset by subset, which the
//! compiler turns into vector code with each cell's sum still in subset order.

// Index loops read like the equations here.
#![allow(clippy::needless_range_loop)]

use mechlab_engine::parallel::{self, sized_chunk_range, sized_chunks};
use mechlab_engine::{simd, Float, Param};
use rayon::prelude::*;

use super::cells::{Cells, Plan};
use super::rows::Ctx;
use super::windows::{Coding, IndexCache};

/// Sequences per work chunk: the engine's [`parallel::CHUNK_ITEMS`] (kept under
/// this name for the models' callers).
pub const CHUNK: usize = parallel::CHUNK_ITEMS;

/// Which loss a step minimises (`model.loss`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LossKind {
    /// Cross-entropy of ŷ treated as logits (the authors' code).
    #[default]
    Code,
    /// `−log max(ŷ_y, floor)`.
    Nll,
}

/// The kernel's subsets `δ` (bit `c` = component `c`), `|δ| ≤ degree`, in the order
/// of the authors' `itertools.product` (component 0 the most significant digit).
pub fn subsets(n_heads: usize, degree: usize) -> Vec<u32> {
    let n = n_heads + 1;
    (0u32..(1 << n))
        .map(|code| {
            // product order: digit k (k = 0 most significant) is component k
            (0..n).fold(0u32, |m, k| m | (((code >> (n - 1 - k)) & 1) << k))
        })
        .filter(|m| (m.count_ones() as usize) <= degree)
        .collect()
}

/// The kernel's subsets without the raw-token component: for each, its index
/// in `subsets`, its member heads and how many there are.
pub(super) fn active_subsets(subsets: &[u32], h: usize) -> Vec<(usize, [u8; 16], usize)> {
    subsets
        .iter()
        .enumerate()
        .filter(|(_, m)| *m & 1 == 0)
        .map(|(i, m)| {
            let mut mem = [0u8; 16];
            let mut k = 0;
            for hd in 0..h {
                if m & (1 << (hd + 1)) != 0 {
                    mem[k] = hd as u8;
                    k += 1;
                }
            }
            (i, mem, k)
        })
        .collect()
}

/// `init · f(m_0) · f(m_1) ⋯` over a subset's first `k` members, multiplied
/// left to right: the loop `for m in members { v *= f(m) }`, with the one- and
/// two-member products written out so the per-cell loops over the tables run
/// straight-line code (the members' count varies per subset, which kept the
/// compiler from unrolling the loop). Same operations in the same order, so
/// the same bits.
#[inline(always)]
pub(super) fn product<T: Float>(
    init: T,
    members: &[u8; 16],
    k: usize,
    f: impl Fn(usize) -> T,
) -> T {
    match k {
        0 => init,
        1 => init * f(members[0] as usize),
        2 => init * f(members[0] as usize) * f(members[1] as usize),
        _ => members[..k].iter().fold(init, |v, &m| v * f(m as usize)),
    }
}

/// Human name of a subset: the parent distances its heads copy at initialisation,
/// e.g. `{1,2}`; `{x}` marks the raw-token component.
pub fn subset_name(mask: u32, n_heads: usize) -> String {
    let mut parts = Vec::new();
    if mask & 1 != 0 {
        parts.push("x".to_string());
    }
    for h in 0..n_heads {
        if mask & (1 << (h + 1)) != 0 {
            parts.push(format!("{}", h + 1));
        }
    }
    format!("{{{}}}", parts.join(","))
}

/// The tokens of a code over `digits` tokens (`t_j`, `j = 0` nearest; `S` =
/// missing) and how many leading tokens exist before the first missing one.
pub(crate) fn window(code: usize, s: usize, digits: usize) -> (usize, [usize; 16]) {
    let mut toks = [0usize; 16];
    let mut c = code;
    let mut m = digits;
    for (j, t) in toks.iter_mut().enumerate().take(digits) {
        *t = c % (s + 1);
        c /= s + 1;
        if *t == s && m == digits {
            m = j;
        }
    }
    (m, toks)
}

/// The code tables, the per-step tables from `v` on, and the chunk workspaces.
///
/// `C` head codes: `(S+1)^H`, or `(S+1)^(H+1)` with the own token. A model writes
/// its head outputs into [`Layer2::v_tab`] before [`Layer2::run`] and reads their
/// gradient from [`Layer2::dv_tab`] after [`Layer2::backward`].
pub(crate) struct Layer2<T> {
    h: usize,
    s: usize,
    own_token: bool,
    /// Head codes `C`.
    pub nc: usize,
    nq: usize,            // NQ: head codes of the query (every band token present)
    q_code: Vec<usize>,   // [NQ]: the head code of each query code, ascending
    wq_index: Vec<usize>, // [(S+1)^(2H-1)]: compact query-window index (MAX if none)
    wk_index: Vec<u32>,   // [(S+1)^(2H-1) or ^2H]: compact key-window index (MAX if none)
    nqw: usize,           // NQW: query windows (no missing token)
    nkw: usize,           // NKW: key windows (missing only as a suffix)
    qw_head: Vec<usize>,  // [NQW, H]: the ip-table row of each head for a query window
    kw_head: Vec<usize>,  // [NKW, H]: the head code of each head for a key window
    /// `[H, C, S]`: the head outputs `z^h` of every code.
    pub v_tab: Vec<T>,
    ip_raw: Vec<T>, // [H, NQ, C]: ⟨z_L^h, z^h⟩ before the ReLU
    ip: Vec<T>,     // [H, NQ, C]: after the ReLU
    n_tab: Vec<T>,  // [NQW, NKW]: N(q, k) = Σ_δ c_δ² K_δ
    e_tab: Vec<T>,  // [NQW, NKW]: exp(a N / Z − row max)
    d_n: Vec<T>,    // [NQW, NKW]
    d_ip: Vec<T>,   // [H, NQ, C]
    /// `[H, C, S]`: `∂L/∂v_tab`.
    pub dv_tab: Vec<T>,
    sk_tot: Vec<T>,                        // [n_sub]
    c2: Vec<T>,                            // [n_sub]: c_δ²
    plan: Plan,                            // how the cell backward splits
    active: Vec<(usize, [u8; 16], usize)>, // (subset index, members, |δ|) with δ_0 = 0
    /// `[NQW, NKW]`: each row's partial of the current work chunk.
    part: Vec<T>,
    /// `[n]`, `[n, S]`: each sequence's loss and ŷ, in the index's row order.
    seq_loss: Vec<T>,
    seq_yhat: Vec<T>,
    /// `[L]`: `blocks.1.attn.hook_pattern` of sequence 0's query.
    first_p: Vec<T>,
    index: IndexCache,
}

impl<T: Float> Layer2<T> {
    /// `own_token`: a head code (and so a key window) also holds the position's
    /// own token, in its lowest digit; the query's own token is the zero row `S`.
    pub fn new(s: usize, h: usize, subsets: &[u32], own_token: bool) -> Self {
        let p = s + 1;
        let nd = 2 * h - 1;
        let off = p.pow(own_token as u32); // weight of the band's first digit
        let q_self = if own_token { s } else { 0 };
        let nc = off * p.pow(h as u32);
        let (mut q_code, mut q_index) = (Vec::new(), vec![usize::MAX; nc]);
        for band in 0..p.pow(h as u32) {
            if window(band, s, h).0 == h {
                q_index[q_self + off * band] = q_code.len();
                q_code.push(q_self + off * band);
            }
        }
        let n_w = p.pow(nd as u32);
        let (mut wq_list, mut wq_index) = (Vec::new(), vec![usize::MAX; n_w]);
        for code in 0..n_w {
            if window(code, s, nd).0 == nd {
                wq_index[code] = wq_list.len();
                wq_list.push(code);
            }
        }
        let kd = nd + own_token as usize;
        let (mut wk_list, mut wk_index) = (Vec::new(), vec![u32::MAX; p.pow(kd as u32)]);
        for code in 0..p.pow(kd as u32) {
            let (m, toks) = window(code, s, kd);
            // missing tokens only as a suffix (the windows positions produce), and
            // a key's own token always exists
            if toks[m..kd].iter().all(|&t| t == s) && (!own_token || m > 0) {
                wk_index[code] = wk_list.len() as u32;
                wk_list.push(code);
            }
        }
        let band = |win: usize, hd: usize| (win / p.pow(hd as u32)) % p.pow(h as u32);
        let qw_head: Vec<usize> = wq_list
            .iter()
            .flat_map(|&q| (0..h).map(move |hd| (q, hd)))
            .map(|(q, hd)| q_index[q_self + off * band(q, hd)])
            .collect();
        let kw_head: Vec<usize> = wk_list
            .iter()
            .flat_map(|&k| (0..h).map(move |hd| (k, hd)))
            .map(|(k, hd)| k % off + off * band(k / off, hd))
            .collect();
        let active = active_subsets(subsets, h);
        let z = |n: usize| vec![T::zero(); n];
        let nq = q_code.len();
        let cells = wq_list.len() * wk_list.len();
        let plan = Plan::new(&qw_head, h, nq, &active);
        Layer2 {
            h,
            s,
            own_token,
            nc,
            nq,
            q_code,
            wq_index,
            wk_index,
            nqw: wq_list.len(),
            nkw: wk_list.len(),
            qw_head,
            kw_head,
            v_tab: z(h * nc * s),
            ip_raw: z(h * nq * nc),
            ip: z(h * nq * nc),
            n_tab: z(cells),
            e_tab: z(cells),
            d_n: z(cells),
            d_ip: z(h * nq * nc),
            dv_tab: z(h * nc * s),
            sk_tot: z(subsets.len()),
            c2: z(subsets.len()),
            plan,
            active,
            part: z(cells),
            seq_loss: Vec::new(),
            seq_yhat: Vec::new(),
            first_p: Vec::new(),
            index: IndexCache::default(),
        }
    }

    /// Sizes the workspaces for `n` sequences of length `l` (allocates only when
    /// the shape grows, i.e. never inside training).
    pub fn reserve(&mut self, n: usize, l: usize) {
        grow(&mut self.seq_loss, n);
        grow(&mut self.seq_yhat, n * self.s);
        grow(&mut self.first_p, l);
    }

    /// The ip and cell tables from `v_tab`, `c` `[n_sub]` and `a`; the cell
    /// tables row by row in parallel (each row is its own work: bit-identical).
    fn prepare(&mut self, c: &[T], a: T) {
        let (h, s, nc, nq, nkw) = (self.h, self.s, self.nc, self.nq, self.nkw);
        for hd in 0..h {
            for qi in 0..nq {
                let qo = (hd * nc + self.q_code[qi]) * s;
                for code in 0..nc {
                    let ko = (hd * nc + code) * s;
                    self.ip_raw[(hd * nq + qi) * nc + code] = (0..s)
                        .map(|k| self.v_tab[qo + k] * self.v_tab[ko + k])
                        .sum();
                }
            }
        }
        for (o, &v) in self.ip.iter_mut().zip(&self.ip_raw) {
            *o = v.max(T::zero());
        }
        let z: T = self.active.iter().map(|(i, _, _)| c[*i] * c[*i]).sum();
        let az = a / z;
        let qw_head = &self.qw_head;
        let tabs = CellTabs {
            h,
            nq,
            nc,
            ip: &self.ip,
            kw_head: &self.kw_head,
            active: &self.active,
            c,
            az,
        };
        self.n_tab
            .par_chunks_mut(nkw)
            .zip(self.e_tab.par_chunks_mut(nkw))
            .enumerate()
            .for_each(|(qw, (n_row, e_row))| {
                tabs.fill_row(&qw_head[qw * h..(qw + 1) * h], n_row, e_row)
            });
    }

    /// Mean loss over `tokens` (`[n, l+1]`, target last) from the current
    /// `v_tab`, `c` and `a`; `out` `[n, S]` gets ŷ. With `grad`, leaves the cells'
    /// gradient for [`Layer2::backward`]. Needs `l ≥ 2H − 1`.
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        &mut self,
        tokens: &[u8],
        l: usize,
        grad: bool,
        out: Option<&mut [T]>,
        c: &[T],
        a: T,
        loss: LossKind,
        floor: f64,
    ) -> T {
        let n = tokens.len() / (l + 1);
        let (h, s, nkw) = (self.h, self.s, self.nkw);
        assert!(l + 1 >= 2 * h, "sequence length {l} < 2H - 1");
        self.reserve(n, l);
        self.prepare(c, a);
        let coding = Coding {
            s,
            digits: 2 * h - 1,
            own_token: self.own_token,
            nqw: self.nqw,
            wq_index: &self.wq_index,
            wk_index: &self.wk_index,
        };
        let index = self.index.get(tokens, l, &coding);
        let ctx = Ctx {
            s,
            l,
            nkw,
            index,
            e_tab: &self.e_tab,
            loss,
            floor,
            scale: T::one() / T::of_usize(n.max(1)),
            grad,
            yhat_stride: if out.is_some() { s } else { 0 },
        };
        ctx.rows(
            0..self.nqw,
            &mut self.d_n,
            &mut self.part,
            &mut self.seq_loss[..n],
            &mut self.seq_yhat[..n * ctx.yhat_stride],
        );
        // the losses chunk by chunk in sequence order, as the chunks summed them
        let mut total = T::zero();
        for ci in 0..sized_chunks(n) {
            let mut chunk = T::zero();
            for b in sized_chunk_range(n, ci) {
                chunk += self.seq_loss[index.pos[b] as usize];
            }
            total += chunk;
        }
        if let Some(o) = out {
            for b in 0..n {
                let at = index.pos[b] as usize * s;
                o[b * s..(b + 1) * s].copy_from_slice(&self.seq_yhat[at..at + s]);
            }
        }
        if n > 0 {
            let erow = &self.e_tab[index.qrow[0] as usize * nkw..][..nkw];
            let at = index.pos[0] as usize;
            let kidx = &index.kidx[at * l..(at + 1) * l];
            let mut sum = T::zero();
            for &k in kidx {
                sum += erow[k as usize];
            }
            let inv = T::one() / sum;
            for (p, &k) in self.first_p.iter_mut().zip(kidx) {
                *p = erow[k as usize] * inv;
            }
        }
        total * ctx.scale
    }

    /// After a `run` with `grad`: cells → `a` and `c` (each only where trained)
    /// and the ip tables, `s = a N / Z`, `N = Σ_δ c_δ² Π_{h∈δ} ip_h`; then, with
    /// `to_v`, the ip tables → `dv_tab`.
    pub fn backward(&mut self, c: &mut Param<T>, a: &mut Param<T>, train: [bool; 2], to_v: bool) {
        let (h, s, nc, nq, nkw) = (self.h, self.s, self.nc, self.nq, self.nkw);
        let cv = c.value();
        let z: T = self.active.iter().map(|(i, _, _)| cv[*i] * cv[*i]).sum();
        let av = a.value()[0];
        let az = av / z;
        for (c2, &v) in self.c2.iter_mut().zip(cv) {
            *c2 = v * v;
        }
        let cells = Cells {
            h,
            nq,
            nc,
            nkw,
            qw_head: &self.qw_head,
            kw_head: &self.kw_head,
            ip: &self.ip,
            n_tab: &self.n_tab,
            d_n: &self.d_n,
            active: &self.active,
            c2: &self.c2,
            az,
            plan: &self.plan,
        };
        let sn = cells.backward(&mut self.sk_tot, &mut self.d_ip);
        let [train_c, train_a] = train;
        if train_a {
            a.grad_mut()[0] += sn / z;
        }
        if train_c {
            // ∂s/∂c_δ = 2 a c_δ (K_δ − N / Z) / Z
            for &(i, _, _) in &self.active {
                let ci = c.value()[i];
                c.grad_mut()[i] += T::of(2.0) * av * ci * (self.sk_tot[i] - sn / z) / z;
            }
        }
        if !to_v {
            return;
        }
        self.dv_tab.iter_mut().for_each(|x| *x = T::zero());
        for hd in 0..h {
            for qi in 0..nq {
                let qo = (hd * nc + self.q_code[qi]) * s;
                for code in 0..nc {
                    let d = self.d_ip[(hd * nq + qi) * nc + code];
                    if d == T::zero() {
                        continue;
                    }
                    let ko = (hd * nc + code) * s;
                    for k in 0..s {
                        let (vq, vk) = (self.v_tab[qo + k], self.v_tab[ko + k]);
                        self.dv_tab[qo + k] += d * vk;
                        self.dv_tab[ko + k] += d * vq;
                    }
                }
            }
        }
    }

    /// The window codes `[L+1]` of the first sequence of the last `run`.
    pub fn first_windows(&self) -> &[usize] {
        self.index.last().map_or(&[], |w| &w.first_win)
    }

    /// `blocks.1.attn.hook_pattern` `[L]` of the first sequence of the last `run`.
    pub fn first_query_pattern(&self, l: usize) -> Vec<f64> {
        self.first_p[..l].iter().map(|v| v.as_f64()).collect()
    }
}

/// What one row of the cell tables reads.
struct CellTabs<'a, T> {
    h: usize,
    nq: usize,
    nc: usize,
    /// `[H, NQ, C]` after the ReLU; `[NKW, H]` each key window's head codes.
    ip: &'a [T],
    kw_head: &'a [usize],
    active: &'a [(usize, [u8; 16], usize)],
    c: &'a [T],
    az: T,
}

impl<T: Float> CellTabs<'_, T> {
    /// The row of query window with head codes `qh` `[H]`: `N(q, k)` into
    /// `n_row` and `exp(a N / Z − row max)` into `e_row` (`[NKW]` each).
    fn fill_row(&self, qh: &[usize], n_row: &mut [T], e_row: &mut [T]) {
        simd::widest(
            #[inline(always)]
            || self.fill_row_body(qh, n_row, e_row),
        )
    }

    #[inline(always)]
    fn fill_row_body(&self, qh: &[usize], n_row: &mut [T], e_row: &mut [T]) {
        let (h, nq, nc) = (self.h, self.nq, self.nc);
        // where each head's ip row of this query window starts
        let rb: [usize; 16] =
            std::array::from_fn(|hd| if hd < h { (hd * nq + qh[hd]) * nc } else { 0 });
        let mut mx = T::neg_infinity();
        for (kb, n_blk) in n_row.chunks_mut(BLOCK).enumerate() {
            // the block's inner products, head by head: [H, BLOCK]
            let mut iph = [[T::zero(); BLOCK]; 16];
            for (j, kh) in self.kw_head[kb * BLOCK * h..]
                .chunks_exact(h)
                .take(n_blk.len())
                .enumerate()
            {
                for hd in 0..h {
                    iph[hd][j] = self.ip[rb[hd] + kh[hd]];
                }
            }
            // N = Σ_δ c_δ² Π_{h∈δ} ip_h, each cell's terms in subset order and
            // each product left to right, as [`product`] forms it: the same
            // operations cell by cell, a block of cells at a time.
            let mut num = [T::zero(); BLOCK];
            for (si, mem, k) in self.active {
                let ci = self.c[*si];
                let mut t = [ci * ci; BLOCK];
                for &m in &mem[..*k] {
                    for (t, &v) in t.iter_mut().zip(&iph[m as usize]) {
                        *t *= v;
                    }
                }
                for (n, &t) in num.iter_mut().zip(&t) {
                    *n += t;
                }
            }
            for (n, &v) in n_blk.iter_mut().zip(&num) {
                *n = v;
                mx = mx.max(self.az * v);
            }
        }
        for (e, &n) in e_row.iter_mut().zip(n_row.iter()) {
            *e = (self.az * n - mx).exp();
        }
    }
}

/// Key windows per block of [`CellTabs::fill_row`]: two 512-bit registers of `f64`.
const BLOCK: usize = 16;

/// Grows `v` to at least `n` zeros.
fn grow<T: Float>(v: &mut Vec<T>, n: usize) {
    if v.len() < n {
        v.resize(n, T::zero());
    }
}
