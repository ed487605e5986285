//! Softmax attention for icl-regression (`model.attention = "softmax"`): von
//! Oswald et al.'s `use_softmax` layer in the merged form of the linear model.
//! Layer `l`, head `h`, tokens as rows (`E = Zᵀ` `[m + 1, D]`), the `m` context
//! rows as keys and values, every row a query:
//!
//! `u_i = Q_h z_i`,  `s_ij = u_i · z_j` (`j < m`),  `a_i = softmax_j(s_i)`,
//! `v_i = Σ_j a_ij z_j`,  `z_i' = z_i + Σ_h P_h v_i`,  `ŷ = −[z_q]_D` after the last layer.
//!
//! Their layer is `softmax(QKᵀ/√key_size) V W_O` with separate `W_Q`, `W_K`,
//! `W_V`, `W_O`; merging `W_Q W_Kᵀ/√key_size` into `Q_h` and `W_O W_V` into
//! `P_h` gives the same functions at `key_size = D` (their setting), as the
//! linear model merges them (a different parametrisation of the same map, so
//! training paths differ). Linear attention is this layer with `a_ij = s_ij / m`.
//!
//! Backward, with `g_i = ∂L/∂z_i'`: `∂v_i = P_hᵀ g_i`, `∂P_h += Σ_i g_i v_iᵀ`,
//! `∂a_ij = ∂v_i · z_j`, `∂s_i` the softmax backward of `∂a_i` (the engine's,
//! which does not cancel at saturation), `∂u_i = Σ_j ∂s_ij z_j`,
//! `∂Q_h += Σ_i ∂u_i z_iᵀ`; `∂z_i += g_i + Q_hᵀ ∂u_i`, and a context row `j`
//! also `+= Σ_i (a_ij ∂v_i + ∂s_ij u_i)`.
//!
//! Only the query row of the last layer reaches `ŷ`, so the last layer runs for
//! that row alone (the dense reference, every row of every layer, is
//! [`super::hooked`]; a test compares the two, and the gradients against finite
//! differences). Written by hand for the same reasons as the linear model
//! ([`super::model`]): `D ≤ 65`, products of a few rows.

use super::model::Layer;
use mechlab_engine::layers::softmax;

/// Sizes of one prompt's pass.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub layers: usize,
    pub heads: usize,
    /// Context rows (keys and values); the query is row `m`.
    pub m: usize,
    pub dd: usize,
}

impl Shape {
    fn rows(&self) -> usize {
        self.m + 1
    }
    /// The first row layer `l` computes: every row below the last layer, the
    /// query alone in it.
    fn lo(&self, l: usize) -> usize {
        if l + 1 == self.layers {
            self.m
        } else {
            0
        }
    }
}

/// One prompt's activations (the cache of the backward), scratch and a chunk's
/// gradient sums.
pub struct SoftWork {
    pub shape: Shape,
    /// `E_0 … E_L` `[L + 1, m + 1, D]`.
    pub e: Vec<f64>,
    /// Per layer and head: `U` `[m + 1, D]`, the pattern `[m + 1, m]`, `V` `[m + 1, D]`
    /// (the last layer's hold the query's row `m` alone; the rows above are stale).
    u: Vec<f64>,
    pub pattern: Vec<f64>,
    v: Vec<f64>,
    /// Backward: `∂E` of the layer above and below `[m + 1, D]`, `∂v`, `∂u` of a
    /// row `[D]`, a row's `∂a` `[m]`.
    g: Vec<f64>,
    g2: Vec<f64>,
    dv: Vec<f64>,
    du: Vec<f64>,
    da: Vec<f64>,
    /// `∂P`, `∂Q` `[L, H, D, D]` and the summed loss.
    pub gp: Vec<f64>,
    pub gq: Vec<f64>,
    pub loss: f64,
}

impl SoftWork {
    pub fn new(shape: Shape) -> SoftWork {
        let (l, h, r, m, dd) = (shape.layers, shape.heads, shape.rows(), shape.m, shape.dd);
        SoftWork {
            shape,
            e: vec![0.0; (l + 1) * r * dd],
            u: vec![0.0; l * h * r * dd],
            pattern: vec![0.0; l * h * r * m],
            v: vec![0.0; l * h * r * dd],
            g: vec![0.0; r * dd],
            g2: vec![0.0; r * dd],
            dv: vec![0.0; dd],
            du: vec![0.0; dd],
            da: vec![0.0; m],
            gp: vec![0.0; l * h * dd * dd],
            gq: vec![0.0; l * h * dd * dd],
            loss: 0.0,
        }
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// `out [D] = M x` for `M` `[D, D]` row-major.
fn mat_vec(out: &mut [f64], m: &[f64], x: &[f64]) {
    for (o, row) in out.iter_mut().zip(m.chunks_exact(x.len())) {
        *o = dot(row, x);
    }
}

/// `out [D] += Mᵀ x`.
fn add_mat_t_vec(out: &mut [f64], m: &[f64], x: &[f64]) {
    for (row, &xa) in m.chunks_exact(out.len()).zip(x) {
        for (o, &mab) in out.iter_mut().zip(row) {
            *o += xa * mab;
        }
    }
}

/// `g [D, D] += a bᵀ`.
fn add_outer(g: &mut [f64], a: &[f64], b: &[f64]) {
    for (row, &av) in g.chunks_exact_mut(b.len()).zip(a) {
        for (o, &bv) in row.iter_mut().zip(b) {
            *o += av * bv;
        }
    }
}

/// The forward pass of one prompt `[m + 1, D]` into `wk`; returns `ŷ`.
pub fn forward(layers: &[Layer], prompt: &[f64], wk: &mut SoftWork) -> f64 {
    let s = wk.shape;
    let (h_n, r, m, dd) = (s.heads, s.rows(), s.m, s.dd);
    let (size, sq) = (r * dd, dd * dd);
    wk.e[..size].copy_from_slice(prompt);
    for (l, layer) in layers.iter().enumerate() {
        let (p_all, q_all) = (layer.p.value(), layer.q.value());
        let (below, above) = wk.e.split_at_mut((l + 1) * size);
        let (e, e2) = (&below[l * size..], &mut above[..size]);
        e2.copy_from_slice(e);
        for h in 0..h_n {
            let (p, q) = (&p_all[h * sq..(h + 1) * sq], &q_all[h * sq..(h + 1) * sq]);
            let at = (l * h_n + h) * r;
            for i in s.lo(l)..r {
                let zi = &e[i * dd..(i + 1) * dd];
                let u = &mut wk.u[(at + i) * dd..(at + i + 1) * dd];
                mat_vec(u, q, zi);
                let a = &mut wk.pattern[(at + i) * m..(at + i + 1) * m];
                for (j, aj) in a.iter_mut().enumerate() {
                    *aj = dot(u, &e[j * dd..(j + 1) * dd]);
                }
                softmax::row_in_place(a, |_| true);
                let v = &mut wk.v[(at + i) * dd..(at + i + 1) * dd];
                v.iter_mut().for_each(|x| *x = 0.0);
                for (j, &aj) in a.iter().enumerate() {
                    for (vb, &zb) in v.iter_mut().zip(&e[j * dd..(j + 1) * dd]) {
                        *vb += aj * zb;
                    }
                }
                for (o, row) in e2[i * dd..(i + 1) * dd].iter_mut().zip(p.chunks_exact(dd)) {
                    *o += dot(row, v);
                }
            }
        }
    }
    -wk.e[(s.layers + 1) * size - 1]
}

/// Backward of the prompt [`forward`] last ran, with `∂L/∂ŷ = dy`: adds `∂P`,
/// `∂Q` into `wk.gp`, `wk.gq` when `grads`, and leaves `∂L/∂E_0` in
/// [`SoftWork::input_grad`].
pub fn backward(layers: &[Layer], dy: f64, grads: bool, wk: &mut SoftWork) {
    let s = wk.shape;
    let (h_n, r, m, dd) = (s.heads, s.rows(), s.m, s.dd);
    let (size, sq) = (r * dd, dd * dd);
    wk.g.iter_mut().for_each(|v| *v = 0.0);
    wk.g[size - 1] = -dy;
    for l in (0..s.layers).rev() {
        let (p_all, q_all) = (layers[l].p.value(), layers[l].q.value());
        let e = &wk.e[l * size..(l + 1) * size];
        // the residual: ∂E_l starts as ∂E_{l+1}
        wk.g2.copy_from_slice(&wk.g);
        for h in 0..h_n {
            let (p, q) = (&p_all[h * sq..(h + 1) * sq], &q_all[h * sq..(h + 1) * sq]);
            let at = (l * h_n + h) * r;
            let k = (l * h_n + h) * sq;
            for i in s.lo(l)..r {
                let gi = &wk.g[i * dd..(i + 1) * dd];
                let v = &wk.v[(at + i) * dd..(at + i + 1) * dd];
                let u = &wk.u[(at + i) * dd..(at + i + 1) * dd];
                let a = &wk.pattern[(at + i) * m..(at + i + 1) * m];
                // ∂v = Pᵀ g_i; ∂P += g_i v_iᵀ
                wk.dv.iter_mut().for_each(|x| *x = 0.0);
                add_mat_t_vec(&mut wk.dv, p, gi);
                if grads {
                    add_outer(&mut wk.gp[k..k + sq], gi, v);
                }
                // ∂a_ij = ∂v · z_j; the values' share of ∂z_j
                for (j, daj) in wk.da.iter_mut().enumerate() {
                    *daj = dot(&wk.dv, &e[j * dd..(j + 1) * dd]);
                    for (o, &dvb) in wk.g2[j * dd..(j + 1) * dd].iter_mut().zip(&wk.dv) {
                        *o += a[j] * dvb;
                    }
                }
                softmax::backward_row_in_place(&mut wk.da, a);
                // ∂u = Σ_j ∂s_j z_j; the keys' share of ∂z_j
                wk.du.iter_mut().for_each(|x| *x = 0.0);
                for (j, &dsj) in wk.da.iter().enumerate() {
                    let zj = &e[j * dd..(j + 1) * dd];
                    for (o, &zb) in wk.du.iter_mut().zip(zj) {
                        *o += dsj * zb;
                    }
                    for (o, &ub) in wk.g2[j * dd..(j + 1) * dd].iter_mut().zip(u) {
                        *o += dsj * ub;
                    }
                }
                // u_i = Q z_i: ∂Q += ∂u z_iᵀ, ∂z_i += Qᵀ ∂u
                let zi = &e[i * dd..(i + 1) * dd];
                if grads {
                    add_outer(&mut wk.gq[k..k + sq], &wk.du, zi);
                }
                add_mat_t_vec(&mut wk.g2[i * dd..(i + 1) * dd], q, &wk.du);
            }
        }
        std::mem::swap(&mut wk.g, &mut wk.g2);
    }
}

impl SoftWork {
    /// `∂L/∂E_0` `[m + 1, D]` after [`backward`].
    pub fn input_grad(&self) -> &[f64] {
        &self.g
    }
}

/// Forward and backward of one training prompt: adds `scale ·` the gradient of
/// `½ (ŷ − y)²` into the sums and returns that loss term.
pub fn train_prompt(
    layers: &[Layer],
    prompt: &[f64],
    y: f64,
    scale: f64,
    wk: &mut SoftWork,
) -> f64 {
    let r = forward(layers, prompt, wk) - y;
    backward(layers, r * scale, true, wk);
    0.5 * r * r
}

/// `∂ŷ/∂x_q` `[d]` of one prompt (the softmax layer is not linear in the query,
/// so this is the local sensitivity, as von Oswald et al. take it by autodiff).
pub fn sensitivity(layers: &[Layer], prompt: &[f64], wk: &mut SoftWork) -> Vec<f64> {
    forward(layers, prompt, wk);
    backward(layers, 1.0, false, wk);
    let (m, dd) = (wk.shape.m, wk.shape.dd);
    wk.input_grad()[m * dd..(m + 1) * dd - 1].to_vec()
}
