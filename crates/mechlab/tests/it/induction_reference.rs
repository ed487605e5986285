//! The fused induction models (their table-based layer 1 and the shared layer-2
//! table trick) against a reference assembled from engine layers, llm.c style:
//! the same mean loss and every parameter gradient, in f64, to 1e-10 relative.
//!
//! The reference runs one sequence at a time, every position, through `rpe` →
//! `attention` (simplified: no Q/K, the logits are the RPE bias and the values
//! the one-hot tokens; full: `x W_Q`, `x W_K`, `x W_OV` and the self logit) →
//! `l2norm` (`+ eps` variant; full: `layernorm`) → `polykernel` → `linear` (the
//! `a c_δ² / Z` weights) → `softmax` → the one-hot mixing `ŷ = Σ_l p_l e_{x_l}`
//! (an `embedding` backward: it scatters `p` by token id) → `loss`. It shares no
//! code with the fused path beyond the engine layers both call.

use mechlab::papers::induction::data::{generate, MarkovSpec};
use mechlab::papers::induction::full::{Full, FullConfig, LN_EPS, SELF_LOGIT};
use mechlab::papers::induction::simplified::{LossKind, Simplified, SimplifiedConfig, NORM_EPS};
use mechlab_engine::layers::attention::{Attention, AttnExtras};
use mechlab_engine::layers::loss::{self, Reduction};
use mechlab_engine::layers::rpe::Rpe;
use mechlab_engine::layers::{embedding, l2norm, layernorm, linear, polykernel, softmax};
use mechlab_engine::Parameters;

/// What the reference needs of a model's config. Parameters and gradients are
/// lists in the model's `Parameters::visit` order: simplified `[W, C, a]`, full
/// `[W, W_Q, W_K, W_OV, ln.w, ln.b, C, a]`.
struct Shape {
    full: bool,
    h: usize,
    s: usize,
    loss: LossKind,
    nll_floor: f64,
    subsets: Vec<u32>,
}

/// Loss of one sequence `seq` (`[L+1]`, target last); adds `scale ·` its gradient
/// into `g`.
fn reference_seq(
    m: &Shape,
    p: &[Vec<f64>],
    seq: &[u8],
    l: usize,
    scale: f64,
    g: &mut [Vec<f64>],
) -> f64 {
    let (h, s, subsets) = (m.h, m.s, &m.subsets[..]);
    let (t, nc, ns) = (l + 1, h + 1, subsets.len());
    let (iw, ic) = (0, p.len() - 2);
    let ids: Vec<usize> = seq[..l].iter().map(|&x| x as usize).collect();
    let y = seq[l] as usize;

    // --- layer 1: head h attends to distances h+1..=h+H with logit W[r-1, h]
    // (plus, in the full model, q·k and itself at logit SELF_LOGIT) ---
    let rpe = Rpe::new(
        h,
        2 * h,
        1,
        (0..h as isize).map(|k| (k + 1, k + h as isize)).collect(),
    );
    let mut table = vec![0.0; rpe.table_len()]; // [H, 2H]: Wᵀ, last column unused
    for hd in 0..h {
        for r in 0..2 * h - 1 {
            table[hd * 2 * h + r] = p[iw][r * h + hd];
        }
    }
    let (mut bias, mut mask) = (vec![0.0; h * t * t], vec![false; h * t * t]);
    rpe.forward(&mut bias, &mut mask, &table, t);
    // per-head rows of a [H, S, S] matrix for every token: x_i M^h, the query's zero
    let rows = |mat: &[f64]| {
        let mut out = vec![0.0; t * h * s]; // [T, H, S]
        for (j, &x) in ids.iter().enumerate() {
            for hd in 0..h {
                let src = (hd * s + x) * s;
                out[(j * h + hd) * s..(j * h + hd + 1) * s].copy_from_slice(&mat[src..src + s]);
            }
        }
        out
    };
    let eye: Vec<f64> = (0..h * s * s)
        .map(|i| if i / s % s == i % s { 1.0 } else { 0.0 })
        .collect();
    let (attn, q, k, v) = if m.full {
        for hd in 0..h {
            for i in 0..t {
                bias[(hd * t + i) * t + i] = SELF_LOGIT;
                mask[(hd * t + i) * t + i] = true;
            }
        }
        let attn = Attention::new(h, t, t, s, s).with_scale(1.0);
        (attn, rows(&p[1]), rows(&p[2]), rows(&p[3]))
    } else {
        // no Q/K: the logits are the bias alone; the values are the one-hot tokens
        let attn = Attention::new(h, t, t, 1, s).with_scale(1.0);
        (attn, vec![0.0; t * h], vec![0.0; t * h], rows(&eye))
    };
    let ex = AttnExtras {
        bias: Some(&bias),
        mask: Some(&mask),
        key_mask: None,
    };
    let (mut u, mut pat) = (vec![0.0; t * h * s], vec![0.0; h * t * t]);
    attn.forward(&mut u, &mut pat, &q, &k, &v, &ex);
    let (mut vn, mut st1, mut st2) = (vec![0.0; t * h * s], vec![0.0; t * h], vec![0.0; t * h]);
    if m.full {
        layernorm::forward(
            &mut vn,
            &mut st1,
            &mut st2,
            &u,
            &p[4],
            &p[5],
            t * h,
            s,
            LN_EPS,
        );
    } else {
        l2norm::forward_plus_eps(&mut vn, &mut st1, &u, t * h, s, NORM_EPS);
    }

    // --- layer 2: components [raw token, head 0, …, head H-1] of every position ---
    let mut z = vec![0.0; t * nc * s]; // [T, C, S]
    for i in 0..t {
        if i < l {
            z[i * nc * s + ids[i]] = 1.0;
        }
        for hd in 0..h {
            let (dst, src) = ((i * nc + 1 + hd) * s, (i * h + hd) * s);
            z[dst..dst + s].copy_from_slice(&vn[src..src + s]);
        }
    }
    let deltas: Vec<u32> = subsets
        .iter()
        .flat_map(|m| (0..nc).map(move |k| (m >> k) & 1))
        .collect();
    let (zq, zk) = (&z[l * nc * s..], &z[..l * nc * s]);
    let (mut kf, mut gram) = (vec![0.0; ns * l], vec![0.0; l * nc]);
    polykernel::forward(&mut kf, &mut gram, zq, zk, &deltas, nc, s, l);
    // s_l = Σ_δ (a c_δ² / Z) K_δ(l), Z = Σ over subsets without the raw token
    let (c, a) = (&p[ic], p[ic + 1][0]);
    let active = |i: usize| subsets[i] & 1 == 0;
    let zn: f64 = (0..ns).filter(|&i| active(i)).map(|i| c[i] * c[i]).sum();
    let wts: Vec<f64> = (0..ns)
        .map(|i| if active(i) { a * c[i] * c[i] / zn } else { 0.0 })
        .collect();
    let mut kt = vec![0.0; l * ns]; // [L, n_sub]
    for i in 0..ns {
        for j in 0..l {
            kt[j * ns + i] = kf[i * l + j];
        }
    }
    let mut logit = vec![0.0; l];
    linear::forward(&mut logit, &kt, &wts, None, l, ns, 1);
    let mut prob = vec![0.0; l];
    softmax::forward(&mut prob, &logit, None, 1, l);
    let mut yhat = vec![0.0; s];
    embedding::backward(&mut yhat, &ids, &prob, 1);
    let mut dy = vec![0.0; s];
    let label = [Some(y)];
    let out = match m.loss {
        LossKind::Code => {
            loss::cross_entropy_probs_as_logits(&mut dy, &yhat, &label, s, Reduction::Sum)
        }
        LossKind::Nll => {
            loss::cross_entropy_probs_floor(&mut dy, &yhat, &label, s, Reduction::Sum, m.nll_floor)
        }
    };

    // --- backward ---
    dy.iter_mut().for_each(|x| *x *= scale);
    let mut dprob = vec![0.0; l];
    embedding::forward(&mut dprob, &ids, &dy, 1);
    let mut dlogit = vec![0.0; l];
    softmax::backward(&mut dlogit, &dprob, &prob, 1, l);
    let (mut dkt, mut dwts) = (vec![0.0; l * ns], vec![0.0; ns]);
    linear::backward(
        Some(&mut dkt),
        &mut dwts,
        None,
        &dlogit,
        &kt,
        &wts,
        l,
        ns,
        1,
    );
    // wts_δ = a c_δ² / Z: da = Σ dwts_δ c_δ² / Z, dc_δ = 2 a c_δ (dwts_δ − Σ dwts c² / Z) / Z
    let sw: f64 = (0..ns)
        .filter(|&i| active(i))
        .map(|i| dwts[i] * c[i] * c[i])
        .sum::<f64>()
        / zn;
    g[ic + 1][0] += sw;
    for i in (0..ns).filter(|&i| active(i)) {
        g[ic][i] += 2.0 * a * c[i] * (dwts[i] - sw) / zn;
    }
    let mut dkf = vec![0.0; ns * l];
    for i in 0..ns {
        for j in 0..l {
            dkf[i * l + j] = dkt[j * ns + i];
        }
    }
    let mut dz = vec![0.0; t * nc * s];
    {
        let (dzk, dzq) = dz.split_at_mut(l * nc * s);
        polykernel::backward(dzq, dzk, &dkf, &gram, zq, zk, &deltas, nc, s, l);
    }
    let mut dvn = vec![0.0; t * h * s];
    for i in 0..t {
        for hd in 0..h {
            let (src, dst) = ((i * nc + 1 + hd) * s, (i * h + hd) * s);
            dvn[dst..dst + s].copy_from_slice(&dz[src..src + s]);
        }
    }
    let mut du = vec![0.0; t * h * s];
    if m.full {
        let (dlw, rest) = g[4..6].split_at_mut(1);
        layernorm::backward(
            &mut du,
            Some(&mut dlw[0]),
            Some(&mut rest[0]),
            &dvn,
            &u,
            &st1,
            &st2,
            &p[4],
            t * h,
            s,
        );
    } else {
        l2norm::backward_plus_eps(&mut du, &dvn, &u, &st1, t * h, s, NORM_EPS);
    }
    let (mut dq, mut dk, mut dv) = (vec![0.0; q.len()], vec![0.0; k.len()], vec![0.0; v.len()]);
    let (mut dbias, mut scratch) = (vec![0.0; h * t * t], vec![0.0; t * t]);
    attn.backward(
        &mut dq,
        &mut dk,
        &mut dv,
        Some(&mut dbias),
        &mut scratch,
        &du,
        &pat,
        &q,
        &k,
        &v,
    );
    let mut dtable = vec![0.0; rpe.table_len()];
    rpe.backward(&mut dtable, &dbias, t); // reads the windows only, not the self logit
    for hd in 0..h {
        for r in 0..2 * h - 1 {
            g[iw][r * h + hd] += dtable[hd * 2 * h + r];
        }
    }
    if m.full {
        // x_i M^h picks row x_i of M^h: its gradient scatters back by token id
        for (slot, d) in [(1, &dq), (2, &dk), (3, &dv)] {
            for (j, &x) in ids.iter().enumerate() {
                for hd in 0..h {
                    let dst = (hd * s + x) * s;
                    let src = &d[(j * h + hd) * s..(j * h + hd + 1) * s];
                    g[slot][dst..dst + s]
                        .iter_mut()
                        .zip(src)
                        .for_each(|(a, b)| *a += *b);
                }
            }
        }
    }
    out.loss
}

/// Values (or gradients) of a model's parameters, in visit order.
fn lists<M: Parameters<f64>>(m: &M, grad: bool) -> Vec<Vec<f64>> {
    let mut out = Vec::new();
    m.visit(&mut |p| out.push(if grad { p.grad() } else { p.value() }.to_vec()));
    out
}

/// The reference's mean loss and gradient over `tokens` (`[n, l+1]`).
fn reference(m: &Shape, p: &[Vec<f64>], tokens: &[u8], l: usize) -> (f64, Vec<Vec<f64>>) {
    let mut g: Vec<Vec<f64>> = p.iter().map(|x| vec![0.0; x.len()]).collect();
    let n = tokens.len() / (l + 1);
    let total: f64 = tokens
        .chunks_exact(l + 1)
        .map(|seq| reference_seq(m, p, seq, l, 1.0 / n as f64, &mut g))
        .sum();
    (total / n as f64, g)
}

/// Moves every parameter to a generic point, away from the symmetric init.
fn perturb<M: Parameters<f64>>(m: &mut M, amp: f64) {
    let mut k = 0;
    m.visit_mut(&mut |p| {
        for v in p.value_mut() {
            *v += amp * (k as f64 * 1.3).sin();
            k += 1;
        }
    });
}

fn assert_matches(
    tag: &str,
    names: &[&str],
    fused: (f64, Vec<Vec<f64>>),
    want: (f64, Vec<Vec<f64>>),
) {
    assert!(
        (fused.0 - want.0).abs() <= 1e-10 * want.0.abs(),
        "{tag} loss: fused {} vs reference {}",
        fused.0,
        want.0
    );
    for ((name, got), want) in names.iter().zip(&fused.1).zip(&want.1) {
        max_rel(&format!("{tag} d{name}"), got, want);
    }
}

fn max_rel(name: &str, got: &[f64], want: &[f64]) {
    let scale = want.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    let err = got
        .iter()
        .zip(want)
        .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
    assert!(scale > 0.0, "{name}: the reference gradient is zero");
    assert!(
        err <= 1e-10 * scale,
        "{name}: max |fused − reference| = {err:e} vs scale {scale:e}\n got {got:?}\nwant {want:?}"
    );
}

fn simplified_matches_engine_layers(loss: LossKind, heads: usize, degree: usize) {
    let l = 12;
    let spec = MarkovSpec {
        n_seqs: 40,
        seq_len: l,
        ..MarkovSpec::default()
    };
    let data = generate(&spec, 5).unwrap();
    let cfg = SimplifiedConfig {
        loss,
        n_heads: heads,
        degree,
        ..SimplifiedConfig::default()
    };
    let mut m = Simplified::<f64>::new(&cfg);
    perturb(&mut m, 0.4);
    m.a.value_mut()[0] = 2.5; // a sharp layer-2 softmax, so every gradient is sizeable
    m.zero_grad();
    let fused = m.loss(&data.tokens, l, true);
    let shape = Shape {
        full: false,
        h: heads,
        s: cfg.d_vocab,
        loss,
        nll_floor: cfg.nll_floor,
        subsets: m.subsets.clone(),
    };
    let want = reference(&shape, &lists(&m, false), &data.tokens, l);
    let tag = format!("simplified {loss:?} H={heads} D={degree}");
    assert_matches(&tag, &["W", "C", "a"], (fused, lists(&m, true)), want);
}

fn full_matches_engine_layers(loss: LossKind) {
    let l = 30;
    let spec = MarkovSpec {
        n_seqs: 200,
        seq_len: l,
        ..MarkovSpec::default()
    };
    let data = generate(&spec, 17).unwrap();
    let cfg = FullConfig {
        loss,
        ..FullConfig::default()
    };
    let mut m = Full::<f64>::new(&cfg);
    perturb(&mut m, 0.5); // QK and OV far from the identity, LN gain and bias off 1 and 0
    m.a.value_mut()[0] = 2.5;
    m.zero_grad();
    let fused = m.loss(&data.tokens, l, true);
    let shape = Shape {
        full: true,
        h: cfg.n_heads,
        s: cfg.d_vocab,
        loss,
        nll_floor: cfg.nll_floor,
        subsets: m.subsets.clone(),
    };
    let want = reference(&shape, &lists(&m, false), &data.tokens, l);
    let names = ["W", "W_Q", "W_K", "W_OV", "ln.w", "ln.b", "C", "a"];
    assert_matches(
        &format!("full {loss:?}"),
        &names,
        (fused, lists(&m, true)),
        want,
    );
}

#[test]
fn simplified_code_loss_matches_engine_layers() {
    simplified_matches_engine_layers(LossKind::Code, 3, 2);
    simplified_matches_engine_layers(LossKind::Code, 2, 3);
}

#[test]
fn simplified_true_loss_matches_engine_layers() {
    simplified_matches_engine_layers(LossKind::Nll, 3, 2);
}

#[test]
fn full_matches_engine_layers_both_losses() {
    full_matches_engine_layers(LossKind::Code);
    full_matches_engine_layers(LossKind::Nll);
}
