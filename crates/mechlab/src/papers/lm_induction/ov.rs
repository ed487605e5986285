//! Olsson et al.'s copying score of each head's OV circuit.
//!
//! The full OV circuit of head `(l, h)` maps a token to the logits its value
//! writes: `M = W_U · G_f · C · W_O^h · W_V^h · G_1 · C · W_Eᵀ`, `[V, V]`, column
//! `i` being what attending to token `i` adds to every logit. A head that copies
//! raises the logit of the token it attends to, so `M` has mostly positive
//! eigenvalues; Elhage et al. 2021 ("A Mathematical Framework for Transformer
//! Circuits") and Olsson et al. 2022 summarise this as the **copying score**
//! `Σ λ / Σ |λ|` over `M`'s eigenvalues: 1 for a pure copier, −1 for a head that
//! suppresses what it attends to, about 0 for a random circuit.
//!
//! LayerNorm is folded in the way TransformerLens's `fold_ln` and
//! `center_writing_weights` fold it: `C` subtracts the mean over `d_model` (what
//! LayerNorm does before scaling), `G_1` and `G_f` are the gains of the head's
//! `ln1` and of `ln_final`; the per-token scale `1/σ` and the biases are left
//! out, as there. `W_U` is centred over the vocabulary too (softmax ignores a
//! shift shared by every logit; TransformerLens's `center_unembed`). Layer-1
//! heads are read on the direct path from the embedding, as Olsson et al. do.
//!
//! `M`'s nonzero eigenvalues are those of the `d_head × d_head` product taken
//! the other way round, `W_V^h G_1 C W_Eᵀ · W_U' G_f C W_O^h` (`AB` and `BA`
//! share them), so only a small nonsymmetric eigenproblem is solved; `nalgebra`'s
//! real Schur decomposition solves it (a general eigensolver is not our core).

use mechlab_engine::gpt::Gpt;
use mechlab_engine::Float;
use nalgebra::DMatrix;

/// A weight every [`Gpt`] has by construction (`embed.W_E`, `blocks.{l}.attn.W_V`, ...).
fn values<T: Float>(m: &Gpt<T>, name: &str) -> Vec<f64> {
    let p = m
        .param(name)
        .unwrap_or_else(|| panic!("every Gpt has `{name}`"));
    p.value().iter().map(|x| x.as_f64()).collect()
}

/// LayerNorm's gain, or ones when the model has no LayerNorm.
fn gain<T: Float>(m: &Gpt<T>, name: &str, d: usize) -> Vec<f64> {
    m.param(name)
        .map(|p| p.value().iter().map(|x| x.as_f64()).collect())
        .unwrap_or_else(|| vec![1.0; d])
}

/// Centres each row of a row-major `[rows, d]` matrix (subtracts its mean).
fn centre_rows(x: &mut [f64], d: usize) {
    for r in x.chunks_exact_mut(d) {
        let mean = r.iter().sum::<f64>() / d as f64;
        r.iter_mut().for_each(|v| *v -= mean);
    }
}

/// `Σ λ / Σ |λ|` over the eigenvalues of the square row-major `k`; 0 for a zero matrix.
pub fn copying_score(k: &[f64], n: usize) -> f64 {
    let eig = DMatrix::from_row_slice(n, n, k).complex_eigenvalues();
    // |z| as num-complex's `norm` computes it (that method needs num-complex's std)
    let abs: f64 = eig.iter().map(|z| z.re.hypot(z.im)).sum();
    let re: f64 = eig.iter().map(|z| z.re).sum();
    if abs > 0.0 {
        re / abs
    } else {
        0.0
    }
}

/// The `d_head × d_head` matrix whose eigenvalues are the nonzero ones of head
/// `(l, h)`'s full OV circuit (module doc), row-major.
pub fn ov_core<T: Float>(m: &Gpt<T>, l: usize, h: usize) -> Vec<f64> {
    let c = &m.cfg;
    let (d, dh, hd, v) = (c.d_model, c.d_head, c.n_heads * c.d_head, c.d_vocab);
    let ln = c.normalization == mechlab_engine::gpt::Normalization::LN;
    // embeddings as LayerNorm sees them: [V, D], each row centred
    let mut we = values(m, "embed.W_E");
    if ln {
        centre_rows(&mut we, d);
    }
    let w_u = if c.tied_embeddings {
        "embed.W_E"
    } else {
        "unembed.W_U"
    };
    // W_U [V, D], centred over the vocabulary
    let mut wu = values(m, w_u);
    for j in 0..d {
        let mean = (0..v).map(|i| wu[i * d + j]).sum::<f64>() / v as f64;
        (0..v).for_each(|i| wu[i * d + j] -= mean);
    }
    let g1 = gain(m, &format!("blocks.{l}.ln1.w"), d);
    let gf = gain(m, "ln_final.w", d);
    let wv = values(m, &format!("blocks.{l}.attn.W_V")); // [H·dh, D]
    let wo = values(m, &format!("blocks.{l}.attn.W_O")); // [D, H·dh]
                                                         // a = W_V^h · G_1: [dh, D]
    let a: Vec<f64> = (0..dh)
        .flat_map(|r| {
            let row = &wv[(h * dh + r) * d..(h * dh + r + 1) * d];
            row.iter().zip(&g1).map(|(w, g)| w * g).collect::<Vec<_>>()
        })
        .collect();
    // o = C · W_O^h: [D, dh], each column centred over D (what ln_final sees)
    let mut o = vec![0.0; d * dh];
    for r in 0..d {
        o[r * dh..(r + 1) * dh].copy_from_slice(&wo[r * hd + h * dh..r * hd + (h + 1) * dh]);
    }
    for j in 0..dh {
        let mean = (0..d).map(|r| o[r * dh + j]).sum::<f64>() / d as f64;
        (0..d).for_each(|r| o[r * dh + j] -= mean);
    }
    // b = W_U · G_f · o: [V, dh]
    let mut b = vec![0.0; v * dh];
    for i in 0..v {
        for r in 0..d {
            let s = wu[i * d + r] * gf[r];
            if s != 0.0 {
                for j in 0..dh {
                    b[i * dh + j] += s * o[r * dh + j];
                }
            }
        }
    }
    // k = a · W_Eᵀ · b: [dh, dh], through e = a · W_Eᵀ: [dh, V]
    let mut e = vec![0.0; dh * v];
    for r in 0..dh {
        for i in 0..v {
            e[r * v + i] = (0..d).map(|q| a[r * d + q] * we[i * d + q]).sum();
        }
    }
    let mut k = vec![0.0; dh * dh];
    for r in 0..dh {
        for i in 0..v {
            let s = e[r * v + i];
            for j in 0..dh {
                k[r * dh + j] += s * b[i * dh + j];
            }
        }
    }
    k
}

/// Copying score of every head, `[layer][head]`.
pub fn copying_scores<T: Float>(m: &Gpt<T>) -> Vec<Vec<f64>> {
    (0..m.cfg.n_layers)
        .map(|l| {
            (0..m.cfg.n_heads)
                .map(|h| copying_score(&ov_core(m, l, h), m.cfg.d_head))
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use mechlab_engine::gpt::GptConfig;
    use rand::SeedableRng;

    #[test]
    fn copying_score_reads_the_sign_of_the_spectrum() {
        // diag(2, 1): a copier; −I: a suppressor; a rotation by 90°: eigenvalues ±i
        assert!((copying_score(&[2.0, 0.0, 0.0, 1.0], 2) - 1.0).abs() < 1e-12);
        assert!((copying_score(&[-1.0, 0.0, 0.0, -1.0], 2) + 1.0).abs() < 1e-12);
        assert!(copying_score(&[0.0, -1.0, 1.0, 0.0], 2).abs() < 1e-12);
        // diag(3, −1): (3 − 1) / (3 + 1)
        assert!((copying_score(&[3.0, 0.0, 0.0, -1.0], 2) - 0.5).abs() < 1e-12);
    }

    /// The small core has the full `[V, V]` circuit's nonzero eigenvalues:
    /// compare its trace and the trace of its square with the full matrix's,
    /// built here directly from the definition.
    #[test]
    fn the_core_has_the_full_circuits_spectrum() {
        let cfg = GptConfig {
            n_layers: 2,
            d_model: 8,
            n_heads: 2,
            d_head: 3,
            d_mlp: 0,
            n_ctx: 4,
            d_vocab: 6,
            tied_embeddings: false,
            ..GptConfig::default()
        };
        let mut m = Gpt::<f64>::new(&cfg, &mut rand_chacha::ChaCha8Rng::seed_from_u64(3)).unwrap();
        // LayerNorm gains away from one, so that folding them is tested
        for name in ["blocks.1.ln1.w", "ln_final.w"] {
            let p = m.param_mut(name).unwrap();
            for (i, g) in p.value_mut().iter_mut().enumerate() {
                *g = 0.5 + 0.1 * i as f64;
            }
        }
        let (d, v, dh) = (8, 6, 3);
        let val = |n: &str| m.param(n).unwrap().value().to_vec();
        let (we, wu, wv, wo) = (
            val("embed.W_E"),
            val("unembed.W_U"),
            val("blocks.1.attn.W_V"),
            val("blocks.1.attn.W_O"),
        );
        let (g1, gf) = (val("blocks.1.ln1.w"), val("ln_final.w"));
        let h = 1;
        let centre = |x: &[f64]| -> Vec<f64> {
            let mu = x.iter().sum::<f64>() / x.len() as f64;
            x.iter().map(|a| a - mu).collect()
        };
        // column i of the full circuit: the logits token i's value writes
        let mut full = vec![0.0; v * v];
        for i in 0..v {
            let x: Vec<f64> = centre(&we[i * d..(i + 1) * d])
                .iter()
                .zip(&g1)
                .map(|(a, g)| a * g)
                .collect();
            let z: Vec<f64> = (0..dh)
                .map(|r| (0..d).map(|q| wv[(h * dh + r) * d + q] * x[q]).sum())
                .collect();
            let out: Vec<f64> = (0..d)
                .map(|q| (0..dh).map(|r| wo[q * 2 * dh + h * dh + r] * z[r]).sum())
                .collect();
            let y: Vec<f64> = centre(&out).iter().zip(&gf).map(|(a, g)| a * g).collect();
            let logits: Vec<f64> = (0..v)
                .map(|j| (0..d).map(|q| wu[j * d + q] * y[q]).sum())
                .collect();
            for (j, z) in centre(&logits).iter().enumerate() {
                full[j * v + i] = *z;
            }
        }
        let k = ov_core(&m, 1, h);
        let trace = |a: &[f64], n: usize| (0..n).map(|i| a[i * n + i]).sum::<f64>();
        let square = |a: &[f64], n: usize| -> Vec<f64> {
            (0..n * n)
                .map(|ij| {
                    (0..n)
                        .map(|q| a[(ij / n) * n + q] * a[q * n + ij % n])
                        .sum()
                })
                .collect()
        };
        assert!((trace(&k, dh) - trace(&full, v)).abs() < 1e-12);
        assert!((trace(&square(&k, dh), dh) - trace(&square(&full, v), v)).abs() < 1e-12);
        let s = copying_score(&k, dh);
        assert!(s.abs() <= 1.0);
        let full_score = copying_score(&full, v);
        assert!((s - full_score).abs() < 1e-9, "{s} vs {full_score}");
    }

    /// A head built to copy reads near 1; the same head with `W_O` negated
    /// (a suppressor) reads near −1, so the verdict built on it can fail.
    #[test]
    fn a_built_copier_reads_one_and_its_negation_minus_one() {
        let cfg = GptConfig {
            n_layers: 1,
            d_model: 8,
            n_heads: 1,
            d_head: 8,
            d_mlp: 0,
            n_ctx: 4,
            d_vocab: 5,
            tied_embeddings: true,
            ..GptConfig::default()
        };
        let mut m = Gpt::<f64>::new(&cfg, &mut rand_chacha::ChaCha8Rng::seed_from_u64(5)).unwrap();
        // W_V = W_O = I: the circuit is W_E C C W_Eᵀ (vocabulary-centred), a Gram matrix
        for name in ["blocks.0.attn.W_V", "blocks.0.attn.W_O"] {
            let w = m.param_mut(name).unwrap().value_mut();
            for (i, x) in w.iter_mut().enumerate() {
                *x = if i / 8 == i % 8 { 1.0 } else { 0.0 };
            }
        }
        let s = copying_scores(&m)[0][0];
        assert!(s > 0.99, "{s}");
        m.param_mut("blocks.0.attn.W_O")
            .unwrap()
            .value_mut()
            .iter_mut()
            .for_each(|x| *x = -*x);
        let s = copying_scores(&m)[0][0];
        assert!(s < -0.99, "{s}");
    }
}
