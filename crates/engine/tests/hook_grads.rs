//! Gradients at hook points (`run_with_grads`, TransformerLens's
//! `run_with_cache(incl_bwd=True)`) against central finite differences taken
//! through the hooks themselves: a hook function adds ±ε to one entry of the
//! activation and the metric is read off the output. In f64, at a generic
//! point and with saturated attention (one weight per row rounding to 1).

use mechlab_engine::gpt::{Gpt, GptConfig};
use mechlab_engine::hooks::{Ablation, Batch, Hook, HookFn, HookedModel, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;

fn model(saturate: f64) -> Gpt<f64> {
    let cfg = GptConfig {
        n_layers: 2,
        d_model: 8,
        n_heads: 2,
        d_head: 4,
        d_mlp: 12,
        attn_only: false,
        n_ctx: 5,
        d_vocab: 7,
        ..GptConfig::default()
    };
    let mut m = Gpt::<f64>::new(&cfg, &mut ChaCha8Rng::seed_from_u64(4)).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let names: Vec<String> = m.hook_points().iter().map(|p| p.name.clone()).collect();
    assert!(!names.is_empty());
    for l in 0..2 {
        for w in ["W_Q", "W_K"] {
            let p = m.param_mut(&format!("blocks.{l}.attn.{w}")).unwrap();
            p.value_mut()
                .iter_mut()
                .for_each(|x| *x = saturate * (*x + 0.3 * rng.random_range(-1.0..1.0)));
        }
    }
    for name in ["blocks.0.ln1.w", "blocks.1.mlp.b_in", "ln_final.b"] {
        if let Some(p) = m.param_mut(name) {
            p.value_mut()
                .iter_mut()
                .for_each(|x| *x += 0.2 * rng.random_range(-1.0..1.0));
        }
    }
    m
}

/// The metric `Σ w · logits` for fixed random weights `w`.
fn weights(shape: &[usize]) -> Tensor {
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let n = shape.iter().product();
    Tensor::new(
        shape.to_vec(),
        (0..n).map(|_| rng.random_range(-1.0..1.0)).collect(),
    )
}

fn metric(y: &Tensor, w: &Tensor) -> f64 {
    y.data.iter().zip(&w.data).map(|(a, b)| a * b).sum()
}

fn check(m: &mut Gpt<f64>, what: &str) {
    let batch = Batch::new(vec![1, 4, 2, 1, 4, 6, 0, 3, 6, 0], 2, 5);
    let names: Vec<String> = m.hook_points().iter().map(|p| p.name.clone()).collect();
    let refs: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
    let w = weights(&[2, 5, 7]);
    let wc = w.clone();
    let (y, acts, grads) = m
        .run_with_grads(&batch, &refs, &mut |y: &Tensor| {
            assert_eq!(y.shape, wc.shape);
            Ok(wc.clone())
        })
        .unwrap();
    assert_eq!(
        grads.len(),
        names.len(),
        "{what}: a gradient for every point"
    );
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let eps = 1e-6;
    let mut saturated = false;
    for name in &refs {
        let (a, g) = (&acts[*name], &grads[*name]);
        assert_eq!(a.shape, g.shape, "{what} {name}");
        if name.ends_with("hook_pattern") {
            saturated |= a.data.iter().any(|&p| p == 1.0 && a.shape[3] > 1);
        }
        for _ in 0..6 {
            let i = rng.random_range(0..a.numel());
            let mut at = |sign: f64| {
                let f = move |t: &Tensor| {
                    let mut t = t.clone();
                    t.data[i] += sign * eps;
                    Ok(t)
                };
                let h = Hook {
                    name: name.to_string(),
                    ablation: Ablation::Call(HookFn(Arc::new(f))),
                    heads: None,
                    positions: None,
                };
                metric(&m.run_with_hooks(&batch, &[h]).unwrap(), &w)
            };
            let fd = (at(1.0) - at(-1.0)) / (2.0 * eps);
            let tol = 1e-6 * (1.0 + fd.abs().max(g.data[i].abs()));
            assert!(
                (fd - g.data[i]).abs() < tol,
                "{what} {name}[{i}]: finite difference {fd}, backward {}",
                g.data[i]
            );
        }
    }
    assert_eq!(
        metric(&y, &w),
        metric(&m.run_with_cache(&batch, &[]).unwrap().0, &w)
    );
    // asked alone, a point's gradient is the same bits (the backward stops
    // past the deepest point asked for), and no parameter stays frozen
    for name in &refs {
        let (_, _, one) = m
            .run_with_grads(&batch, &[name], &mut |_: &Tensor| Ok(w.clone()))
            .unwrap();
        assert_eq!(one.len(), 1, "{what} {name}");
        assert_eq!(one[*name], grads[*name], "{what} {name} alone");
    }
    assert!(!m.is_frozen("blocks.0.attn.W_Q"));
    if what == "saturated" {
        assert!(saturated, "some attention weight rounds to 1");
    }
}

#[test]
fn gradients_at_every_hook_point_are_the_finite_differences() {
    check(&mut model(1.0), "generic");
}

#[test]
fn gradients_at_hook_points_hold_at_saturation() {
    check(&mut model(60.0), "saturated");
}

#[test]
fn a_metric_of_the_wrong_shape_or_an_unknown_point_is_an_error() {
    let mut m = model(1.0);
    let batch = Batch::new(vec![1, 4, 2], 1, 3);
    let e = m
        .run_with_grads(&batch, &["blocks.0.attn.hook_z"], &mut |_| {
            Ok(Tensor::zeros(vec![1]))
        })
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("its gradient has shape [1], the output [1, 3, 7]"),
        "{e}"
    );
    let e = m
        .run_with_grads(&batch, &["blocks.9.attn.hook_z"], &mut |y| Ok(y.clone()))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("unknown hook point `blocks.9.attn.hook_z`"),
        "{e}"
    );
}
