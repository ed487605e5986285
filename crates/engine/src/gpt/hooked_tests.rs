//! The analysis forward's tests: hook points on the training forward, sweeps
//! resumed at the patched point, and the workspace kept between calls.

use super::tests::{perturb, tiny, tokens};
use super::*;
use crate::hooks::{Ablation, Batch, Hook, HookedModel};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// A small MLP + LayerNorm model with perturbed (not initial) parameters.
fn mlp_ln_model() -> Gpt<f64> {
    let cfg = tiny(
        true,
        Normalization::LN,
        PositionalEmbedding::Standard,
        false,
    );
    let mut m = Gpt::<f64>::new(&cfg, &mut ChaCha8Rng::seed_from_u64(5)).unwrap();
    perturb(&mut m, 6);
    m
}

#[test]
fn hooked_forward_is_the_training_forward_and_hooks_act() {
    let mut m = mlp_ln_model();
    let (b, t) = (3, 4);
    let x = tokens(b, t, m.cfg.d_vocab, 7);
    let mut ws = Workspace::new(&m, b, t);
    m.evaluate(&mut ws, &x, None);
    let batch = Batch::new(x.clone(), b, t);
    let names = ["blocks.1.attn.hook_pattern", "blocks.0.mlp.hook_post"];
    let (y, cache) = m.run_with_cache(&batch, &names).unwrap();
    for s in 0..b {
        let (w, i) = ws.seq(s);
        assert_eq!(
            &y.data[s * t * 7..(s + 1) * t * 7],
            w.logits(i),
            "logits of sequence {s}"
        );
        let pat = &cache["blocks.1.attn.hook_pattern"].data;
        assert_eq!(&pat[s * 2 * t * t..(s + 1) * 2 * t * t], w.pattern(1, i));
    }
    assert_eq!(cache["blocks.0.mlp.hook_post"].shape, vec![b, t, 5]);
    // a hook on the pattern changes what follows it; the same hook on head 1
    // only leaves head 0's z alone
    let hook = |heads: Vec<usize>| Hook {
        name: "blocks.0.attn.hook_pattern".into(),
        ablation: Ablation::Zero,
        heads: Some(heads),
        positions: None,
    };
    let (y1, c1) = m
        .run_hooked(&batch, &[hook(vec![1])], &["blocks.0.attn.hook_z"])
        .unwrap();
    assert_ne!(y1.data, y.data);
    let z = &c1["blocks.0.attn.hook_z"].data; // [b, t, 2, 3]
    for (e, &v) in z.iter().enumerate() {
        if (e / 3) % 2 == 1 {
            assert_eq!(v, 0.0, "head 1's z is zero once its pattern is");
        }
    }
    assert!(z.iter().any(|&v| v != 0.0));
    let err = m
        .run_with_cache(&Batch::new(vec![9, 0], 1, 2), &[])
        .unwrap_err();
    assert!(err.to_string().contains("token 9 outside"), "{err}");
}

/// A sweep's forwards on one batch resume at their hooked point from the
/// unhooked forward: every job's output is the same bits as running it alone,
/// whatever the order of the jobs, and a bad job fails alone.
#[test]
fn resumed_jobs_are_the_jobs_run_whole() {
    use crate::hooks::Tensor;
    for (mlp, pos) in [
        (true, PositionalEmbedding::Standard),
        (false, PositionalEmbedding::Rpe),
    ] {
        let cfg = tiny(mlp, Normalization::LN, pos, false);
        let mut m = Gpt::<f64>::new(&cfg, &mut ChaCha8Rng::seed_from_u64(5)).unwrap();
        perturb(&mut m, 6);
        let (b, t) = (3, 5);
        let batch = Batch::new(tokens(b, t, cfg.d_vocab, 7), b, t);
        let other = Batch::new(tokens(b, t, cfg.d_vocab, 8), b, t);
        let names: Vec<String> = m.hook_points().into_iter().map(|p| p.name).collect();
        let (_, clean) = m
            .run_with_cache(
                &other,
                &names.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
            )
            .unwrap();
        // every point patched from the other batch, by head and position where it has them
        let mut jobs: Vec<(&Batch, Vec<Hook>)> = Vec::new();
        for (i, name) in names.iter().enumerate().rev() {
            let heads = (name.contains("attn.hook_")).then(|| vec![i % 2]);
            let hook = |positions| Hook {
                name: name.clone(),
                ablation: Ablation::patch(clean[name].clone()),
                heads: heads.clone(),
                positions,
            };
            jobs.push((&batch, vec![hook(Some(vec![i % t]))]));
            jobs.push((&batch, vec![hook(None)]));
        }
        jobs.swap(1, 7);
        jobs.push((&batch, Vec::new()));
        let bad = Hook {
            name: "blocks.9.attn.hook_z".into(),
            ablation: Ablation::Zero,
            heads: None,
            positions: None,
        };
        jobs.insert(3, (&batch, vec![bad]));
        let many = m.run_many(&jobs);
        for (j, ((bt, hooks), got)) in jobs.iter().zip(&many).enumerate() {
            let whole: Result<Tensor, _> = m.run_with_hooks(bt, hooks);
            match (whole, got) {
                (Ok(a), Ok(b)) => {
                    assert_eq!(a.data, b.data, "mlp {mlp}: job {j} {:?}", hooks[0].name)
                }
                (Err(a), Err(b)) => assert_eq!(&a, b),
                (a, b) => panic!("job {j}: alone {a:?}, in the sweep {b:?}"),
            }
        }
        assert!(many[3].is_err());
        let y0 = m.run_with_hooks(&batch, &[]).unwrap();
        assert_ne!(
            many[0].as_ref().unwrap().data,
            y0.data,
            "the patches change the output"
        );
    }
}

/// The analysis workspace kept between calls leaks nothing from one call into
/// the next: after a hook has filled every buffer it reaches with junk, each
/// pass equals a fresh model's (a clone keeps no workspace).
#[test]
fn a_kept_workspace_carries_nothing_over() {
    use crate::hooks::{HookFn, Tensor};
    let mut m = mlp_ln_model();
    let (b, t) = (3, 5);
    let (x, y) = (tokens(b, t, 7, 1), tokens(b, t, 7, 2));
    let (bx, by) = (Batch::new(x, b, t), Batch::new(y, b, t));
    let junk = |t: &Tensor| Ok(Tensor::new(t.shape.clone(), vec![7.0; t.numel()]));
    let names: Vec<String> = m.hook_points().into_iter().map(|p| p.name).collect();
    let hooks: Vec<Hook> = names
        .iter()
        .map(|n| Hook {
            name: n.clone(),
            ablation: Ablation::Call(HookFn(std::sync::Arc::new(junk))),
            heads: None,
            positions: None,
        })
        .collect();
    let refs: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
    let dout = |y: &Tensor| Ok(Tensor::new(y.shape.clone(), vec![1.0; y.numel()]));
    for pass in 0..2 {
        let _ = m.run_with_hooks(&bx, &hooks).unwrap();
        let _ = m
            .run_with_grads(&bx, &refs, &mut |y: &Tensor| dout(y))
            .unwrap();
        let mut fresh = m.clone();
        assert_eq!(
            m.run_with_cache(&by, &refs).unwrap(),
            fresh.run_with_cache(&by, &refs).unwrap(),
            "pass {pass}"
        );
        let _ = m.run_with_hooks(&bx, &hooks).unwrap();
        let one = [Hook {
            name: "blocks.1.attn.hook_pattern".into(),
            ablation: Ablation::Zero,
            heads: Some(vec![0]),
            positions: None,
        }];
        let (a, b) = (
            m.run_with_hooks(&by, &one).unwrap(),
            fresh.run_with_hooks(&by, &one).unwrap(),
        );
        assert_eq!(a, b);
        let g = m
            .run_with_grads(&by, &refs, &mut |y: &Tensor| dout(y))
            .unwrap();
        assert_eq!(
            g,
            fresh
                .run_with_grads(&by, &refs, &mut |y: &Tensor| dout(y))
                .unwrap()
        );
    }
}

/// The attention forward leaves the pattern's zeros past each causal block to
/// the workspace that keeps them (`Attention::rest_zeroed`): once a hook has
/// written every entry of a pattern (ones, the masked triangle included), the
/// next hooked forward through the same kept one-chunk workspace writes those
/// zeros again, so what its hooks and cache see is the unhooked forward's.
#[test]
fn a_pattern_hook_leaves_no_entry_behind_for_the_next_forward() {
    use crate::hooks::{HookFn, Tensor};
    // two causal blocks (T > CAUSAL_BLOCK): keys 64.. of the first block's
    // rows are never computed, only zeroed
    let t = crate::layers::attention::CAUSAL_BLOCK + 6;
    let cfg = GptConfig {
        n_ctx: t,
        ..tiny(
            false,
            Normalization::LN,
            PositionalEmbedding::Standard,
            false,
        )
    };
    let mut m = Gpt::<f64>::new(&cfg, &mut ChaCha8Rng::seed_from_u64(5)).unwrap();
    let b = 2;
    let batch = Batch::new(tokens(b, t, cfg.d_vocab, 8), b, t);
    let names = ["blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern"];
    let (y0, c0) = m.run_with_cache(&batch, &names).unwrap();
    let zeros = c0[names[0]].data.iter().filter(|&&p| p == 0.0).count();
    assert!(zeros > b * 2 * 64 * 6, "the masked triangle holds zeros");
    let hook = |name: &str, ablation| Hook {
        name: name.into(),
        ablation,
        heads: None,
        positions: None,
    };
    // hands the hooked tensor on unchanged: what the forward left there
    let same = || Ablation::Call(HookFn(std::sync::Arc::new(|t: &Tensor| Ok(t.clone()))));
    for name in names {
        let ones = Tensor::new(c0[name].shape.clone(), vec![1.0; c0[name].numel()]);
        let (y1, _) = m
            .run_hooked(&batch, &[hook(name, Ablation::patch(ones))], &[])
            .unwrap();
        assert_ne!(y1.data, y0.data, "the hook acts");
        let (y2, c2) = m.run_hooked(&batch, &[hook(name, same())], &names).unwrap();
        assert_eq!(y2.data, y0.data, "after a hook on {name}");
        for n in names {
            assert_eq!(c2[n].data, c0[n].data, "{n} after a hook on {name}");
        }
    }
}
