//! The general (direct) induction path: agreement with the table kernels where
//! both apply (losses, predictions and every gradient to 1e-12 relative, f64),
//! finite-difference gradient checks at sizes the tables cannot reach, and
//! bit-identical results for any thread count.

use mechlab::papers::induction::config::ModelKind;
use mechlab::papers::induction::data::{generate, MarkovSpec};
use mechlab::papers::induction::direct::{Direct, DirectConfig};
use mechlab::papers::induction::full::{Full, FullConfig};
use mechlab::papers::induction::simplified::{LossKind, Simplified, SimplifiedConfig};
use mechlab_engine::gradcheck::{check, DEFAULT_H};
use mechlab_engine::Parameters;

fn flat<M: Parameters<f64>>(m: &M) -> Vec<f64> {
    let mut v = Vec::new();
    m.visit(&mut |p| v.extend_from_slice(p.value()));
    v
}

fn grads<M: Parameters<f64>>(m: &M) -> Vec<f64> {
    let mut v = Vec::new();
    m.visit(&mut |p| v.extend_from_slice(p.grad()));
    v
}

fn set<M: Parameters<f64>>(m: &mut M, x: &[f64]) {
    let mut o = 0;
    m.visit_mut(&mut |p| {
        let n = p.numel();
        p.value_mut().copy_from_slice(&x[o..o + n]);
        o += n;
    });
}

/// A generic point away from the symmetric init (a raised so layer 2 is sharp).
fn perturb(x: &[f64], amp: f64) -> Vec<f64> {
    let n = x.len();
    x.iter()
        .enumerate()
        .map(|(i, v)| v + amp * (i as f64 * 1.7).sin() + if i + 1 == n { 1.5 } else { 0.0 })
        .collect()
}

fn data(s: usize, l: usize, n: usize, parents: Vec<usize>, seed: u64) -> Vec<u8> {
    let spec = MarkovSpec {
        vocab: s,
        seq_len: l,
        parents,
        n_seqs: n,
        ..MarkovSpec::default()
    };
    generate(&spec, seed).unwrap().tokens
}

/// A direct model moved off its symmetric init (`perturb` at amplitude 0.3).
fn perturbed_direct(cfg: &DirectConfig) -> Direct<f64> {
    let mut g = Direct::<f64>::new(cfg);
    let x0 = perturb(&flat(&g), 0.3);
    set(&mut g, &x0);
    g
}

/// The model's predictions `[n, S]` on `tokens` (sequences `[l + 1]`).
fn predictions(g: &mut Direct<f64>, tokens: &[u8], l: usize, s: usize) -> Vec<f64> {
    let mut p = vec![0.0; tokens.len() / (l + 1) * s];
    g.predict(tokens, l, &mut p);
    p
}

/// The contexts (targets dropped) of `n` sequences `[l + 1]` as a hook batch.
fn contexts(tokens: &[u8], n: usize, l: usize) -> mechlab_engine::hooks::Batch {
    let ctx = (0..n)
        .flat_map(|b| {
            tokens[b * (l + 1)..b * (l + 1) + l]
                .iter()
                .map(|&t| t as u32)
        })
        .collect();
    mechlab_engine::hooks::Batch::new(ctx, n, l)
}

fn close(a: &[f64], b: &[f64], tol: f64, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    let scale = a.iter().fold(1e-300f64, |m, v| m.max(v.abs()));
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol * scale,
            "{what}[{i}]: {x} vs {y} (scale {scale})"
        );
    }
}

fn agree_simplified(loss: LossKind, s: usize, h: usize, d: usize) {
    let l = 14;
    let tokens = data(s, l, 1100, vec![1, 2], 21);
    let cfg = SimplifiedConfig {
        d_vocab: s,
        n_heads: h,
        degree: d,
        loss,
        ..SimplifiedConfig::default()
    };
    let mut t = Simplified::<f64>::new(&cfg);
    let mut g = Direct::<f64>::new(&DirectConfig {
        kind: ModelKind::Simplified,
        d_vocab: s,
        n_heads: h,
        degree: d,
        loss,
        ..DirectConfig::default()
    });
    let x0 = perturb(&flat(&t), 0.3);
    set(&mut t, &x0);
    set(&mut g, &x0);
    t.zero_grad();
    g.zero_grad();
    let (lt, lg) = (t.loss(&tokens, l, true), g.loss(&tokens, l, true));
    let what = format!("simplified {loss:?} S={s} H={h} D={d}");
    close(&[lt], &[lg], 1e-12, &format!("{what} loss"));
    close(&grads(&t), &grads(&g), 1e-12, &format!("{what} grad"));
    let n = tokens.len() / (l + 1);
    let (mut pt, mut pg) = (vec![0.0; n * s], vec![0.0; n * s]);
    t.predict(&tokens, l, &mut pt);
    g.predict(&tokens, l, &mut pg);
    close(&pt, &pg, 1e-12, &format!("{what} ŷ"));
    let seq = &tokens[..l + 1];
    let ((t1, t2), (g1, g2)) = (t.patterns(seq, l), g.patterns(seq, l));
    close(&t1, &g1, 1e-12, &format!("{what} layer-1 pattern"));
    close(&t2, &g2, 1e-12, &format!("{what} layer-2 pattern"));
}

#[test]
fn direct_simplified_matches_the_table_kernel() {
    agree_simplified(LossKind::Code, 3, 3, 2);
    agree_simplified(LossKind::Nll, 3, 3, 3);
    agree_simplified(LossKind::Code, 2, 5, 3);
    agree_simplified(LossKind::Code, 5, 2, 1);
}

#[test]
fn direct_full_matches_the_table_kernel() {
    for loss in [LossKind::Code, LossKind::Nll] {
        let (s, l) = (3, 12);
        let tokens = data(s, l, 700, vec![1, 2], 23);
        let mut t = Full::<f64>::new(&FullConfig {
            loss,
            w_plus: 1.0,
            ..FullConfig::default()
        });
        let mut g = Direct::<f64>::new(&DirectConfig {
            kind: ModelKind::Full,
            loss,
            w_plus: 1.0,
            w_minus: 0.01,
            ..DirectConfig::default()
        });
        let x0 = perturb(&flat(&t), 0.4);
        set(&mut t, &x0);
        set(&mut g, &x0);
        t.zero_grad();
        g.zero_grad();
        let (lt, lg) = (t.loss(&tokens, l, true), g.loss(&tokens, l, true));
        close(&[lt], &[lg], 1e-12, &format!("full {loss:?} loss"));
        close(
            &grads(&t),
            &grads(&g),
            1e-12,
            &format!("full {loss:?} grad"),
        );
    }
}

fn gradcheck(kind: ModelKind, loss: LossKind, s: usize, h: usize, d: usize, parents: Vec<usize>) {
    let l = 2 * h + 4;
    let tokens = data(s, l, 40, parents, 31);
    let mut m = Direct::<f64>::new(&DirectConfig {
        kind,
        d_vocab: s,
        n_heads: h,
        degree: d,
        loss,
        w_plus: 1.0,
        ..DirectConfig::default()
    });
    let x0 = perturb(&flat(&m), 0.3);
    set(&mut m, &x0);
    m.zero_grad();
    m.loss(&tokens, l, true);
    let g = grads(&m);
    let mut f = |x: &[f64]| {
        set(&mut m, x);
        m.loss(&tokens, l, false)
    };
    check(&mut f, &x0, &g, DEFAULT_H)
        .assert_below(1e-6, &format!("direct {kind:?} {loss:?} S={s} H={h} D={d}"));
}

#[test]
fn direct_gradients_match_finite_differences() {
    gradcheck(ModelKind::Simplified, LossKind::Code, 10, 3, 2, vec![1, 2]);
    gradcheck(ModelKind::Simplified, LossKind::Nll, 12, 5, 3, vec![1, 4]);
    gradcheck(ModelKind::Simplified, LossKind::Code, 4, 8, 2, vec![2, 9]);
    gradcheck(ModelKind::Full, LossKind::Code, 10, 3, 2, vec![1, 2]);
    gradcheck(ModelKind::Full, LossKind::Nll, 6, 4, 3, vec![1, 3]);
}

#[test]
fn direct_is_bit_identical_across_thread_counts() {
    let (s, l) = (10, 30);
    let tokens = data(s, l, 900, vec![1, 2], 41);
    let run = |threads: usize, kind: ModelKind| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let mut m = Direct::<f64>::new(&DirectConfig {
                kind,
                d_vocab: s,
                ..DirectConfig::default()
            });
            let x0 = perturb(&flat(&m), 0.2);
            set(&mut m, &x0);
            m.zero_grad();
            let lo = m.loss(&tokens, l, true);
            (
                lo.to_bits(),
                grads(&m).iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            )
        })
    };
    for kind in [ModelKind::Simplified, ModelKind::Full] {
        assert_eq!(run(1, kind), run(2, kind), "{kind:?}");
    }
}

#[test]
fn validation_names_the_new_limits_and_the_path() {
    use mechlab::papers::induction::config::{check, uses_table};
    use mechlab::papers::induction::{InductionConfig, ModelPath};
    let base = InductionConfig::default();
    assert!(
        check(&base).is_ok() && uses_table(&base),
        "S = 3 stays on the table path"
    );
    let mut c = base.clone();
    c.data.vocab = 10;
    assert!(
        check(&c).is_ok() && !uses_table(&c),
        "auto picks the direct path at S = 10"
    );
    c.model.path = ModelPath::Table;
    let e = check(&c).unwrap_err();
    assert!(e.contains("model.path") && e.contains("direct"), "{e}");
    c.model.path = ModelPath::Direct;
    c.data.vocab = 256;
    c.model.n_heads = 8;
    c.data.parents = vec![1, 15];
    c.probe.gen_lengths = vec![100];
    assert!(check(&c).is_ok(), "{:?}", check(&c));
    let refuse = |f: &dyn Fn(&mut InductionConfig), key: &str| {
        let mut d = c.clone();
        f(&mut d);
        let e = check(&d).unwrap_err();
        assert!(e.contains(key), "{key}: {e}");
    };
    refuse(&|d| d.data.vocab = 257, "data.vocab");
    refuse(&|d| d.model.n_heads = 9, "model.n_heads");
    refuse(&|d| d.data.seq_len = 1025, "data.seq_len");
    refuse(&|d| d.data.parents = vec![16], "data.parents");
    refuse(&|d| d.model.degree = 9, "model.degree");
    refuse(&|d| d.probe.gen_lengths = vec![10], "probe.gen_lengths");
    refuse(&|d| d.data.parents = (1..=8).collect(), "data.parents"); // 256^8 contexts
}

/// The general path's hook points: its analysis forward is the one the table
/// models use, so at S = 10 (no table) it must agree with the direct kernel's own
/// prediction, and a zero-ablated head must change it.
#[test]
fn direct_hooks_agree_with_its_prediction_at_a_size_without_table() {
    use mechlab_engine::hooks::{Ablation, Hook, HookedModel};
    for kind in [ModelKind::Simplified, ModelKind::Full] {
        let (s, l) = (10, 20);
        let tokens = data(s, l, 8, vec![1, 2], 29);
        let mut g = perturbed_direct(&DirectConfig {
            kind,
            d_vocab: s,
            ..DirectConfig::default()
        });
        let n = tokens.len() / (l + 1);
        let p = predictions(&mut g, &tokens, l, s);
        let batch = contexts(&tokens, n, l);
        let (y, _) = g.run_with_cache(&batch, &[]).unwrap();
        close(&p, &y.data, 1e-12, &format!("{kind:?} hooked ŷ"));
        let hook = Hook {
            name: "blocks.0.attn.hook_z".into(),
            ablation: Ablation::Zero,
            heads: Some(vec![0]),
            positions: None,
        };
        let ablated = g.run_with_hooks(&batch, &[hook]).unwrap();
        let moved = ablated
            .data
            .iter()
            .zip(&y.data)
            .any(|(a, b)| (a - b).abs() > 1e-6);
        assert!(moved, "{kind:?}: ablating head 0 changed nothing");
    }
}

/// The training-time `ablate` intervention (`Direct::set_ablated`) is the hooked
/// zero-ablation of the head's output `v^h` (the simplified model's
/// `hook_z_unit`, the full model's `hook_normalized`): same predictions to
/// rounding; the mask 0 is exactly the unablated model; the ablated model's
/// gradients match finite differences and leave the head's RPE weights at zero.
#[test]
fn training_time_ablation_is_the_hooked_zero_ablation_of_the_head_output() {
    use mechlab_engine::hooks::{Ablation, Hook, HookedModel};
    for (kind, hook) in [
        (ModelKind::Simplified, "blocks.0.attn.hook_z_unit"),
        (ModelKind::Full, "blocks.0.ln.hook_normalized"),
    ] {
        let (s, h, l) = (6, 3, 16);
        let tokens = data(s, l, 12, vec![1, 2], 41);
        let n = tokens.len() / (l + 1);
        let mut g = perturbed_direct(&DirectConfig {
            kind,
            d_vocab: s,
            n_heads: h,
            w_plus: 1.0,
            ..DirectConfig::default()
        });
        let x0 = flat(&g);
        let predict = |g: &mut Direct<f64>| predictions(g, &tokens, l, s);
        let clean = predict(&mut g);
        let batch = contexts(&tokens, n, l);
        for head in 0..h {
            g.set_ablated(1 << head);
            let ablated = predict(&mut g);
            // The hooked forward of an ablated model is ablated too.
            let (own, _) = g.run_with_cache(&batch, &[]).unwrap();
            close(
                &ablated,
                &own.data,
                1e-12,
                &format!("{kind:?} head {head}, cache"),
            );
            g.set_ablated(0);
            let hooked = g
                .run_with_hooks(
                    &batch,
                    &[Hook {
                        name: hook.into(),
                        ablation: Ablation::Zero,
                        heads: Some(vec![head]),
                        positions: None,
                    }],
                )
                .unwrap();
            close(
                &ablated,
                &hooked.data,
                1e-12,
                &format!("{kind:?} head {head}"),
            );
            assert!(
                ablated
                    .iter()
                    .zip(&clean)
                    .any(|(a, b)| (a - b).abs() > 1e-6),
                "{kind:?}: ablating head {head} changed nothing"
            );
            assert_eq!(predict(&mut g), clean, "{kind:?}: mask 0 is the identity");
        }
        // Gradients of the ablated model.
        g.set_ablated(0b010);
        g.zero_grad();
        g.loss(&tokens, l, true);
        let gr = grads(&g);
        if kind == ModelKind::Simplified {
            // blocks.0.attn.W_pos [2H-1, H]: column 1 is head 1's.
            assert!((0..2 * h - 1).all(|r| gr[r * h + 1] == 0.0), "{gr:?}");
        }
        let mut f = |x: &[f64]| {
            set(&mut g, x);
            g.loss(&tokens, l, false)
        };
        check(&mut f, &x0, &gr, DEFAULT_H).assert_below(1e-6, &format!("ablated {kind:?}"));
    }
}

/// The training-time `clamp` intervention (`Direct::set_clamped`, simplified
/// model): clamping changes nothing at the moment it starts; afterwards the
/// clamped head's pattern ignores its `W` column (predictions, the hooked forward
/// and the probes' pattern all stay put when that column moves), its `W` gets no
/// gradient, the gradients match finite differences, and unclamping reads `W`
/// again.
#[test]
fn a_clamped_pattern_ignores_its_weights_and_gets_no_gradient() {
    use mechlab_engine::hooks::HookedModel;
    let (s, h, l) = (6, 3, 16);
    let tokens = data(s, l, 12, vec![1, 2], 43);
    let n = tokens.len() / (l + 1);
    let mut g = perturbed_direct(&DirectConfig {
        d_vocab: s,
        n_heads: h,
        w_plus: 1.0,
        ..DirectConfig::default()
    });
    let x0 = flat(&g);
    let predict = |g: &mut Direct<f64>| predictions(g, &tokens, l, s);
    let batch = contexts(&tokens, n, l);
    let clean = predict(&mut g);
    let pattern = g.interior_pattern();
    g.set_clamped(0b010);
    assert_eq!(predict(&mut g), clean, "clamping changes nothing at once");
    // move head 1's RPE logits (blocks.0.attn.W_pos [2H-1, H], column 1)
    let mut x1 = x0.clone();
    for r in 0..2 * h - 1 {
        x1[r * h + 1] += 0.7 * (r as f64 + 1.0);
    }
    set(&mut g, &x1);
    assert_eq!(predict(&mut g), clean, "a clamped head ignores its W");
    assert_eq!(g.interior_pattern(), pattern);
    let (y, _) = g.run_with_cache(&batch, &[]).unwrap();
    close(
        &clean,
        &y.data,
        1e-12,
        "hooked forward of the clamped model",
    );
    g.zero_grad();
    g.loss(&tokens, l, true);
    let gr = grads(&g);
    assert!((0..2 * h - 1).all(|r| gr[r * h + 1] == 0.0), "{gr:?}");
    assert!(
        (0..2 * h - 1).any(|r| gr[r * h] != 0.0),
        "the other heads train"
    );
    let mut f = |x: &[f64]| {
        set(&mut g, x);
        g.loss(&tokens, l, false)
    };
    check(&mut f, &x1, &gr, DEFAULT_H).assert_below(1e-6, "clamped");
    set(&mut g, &x1);
    g.set_clamped(0);
    assert_ne!(
        predict(&mut g),
        clean,
        "unclamped, head 1 reads its moved W"
    );
}
