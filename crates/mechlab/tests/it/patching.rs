//! Every intervention kind of `mechlab::patching` on both induction models: it
//! changes the output when it should, it is exactly the identity when the value
//! written equals the original, and patching every position of a point that
//! every path goes through recovers the clean output exactly (a hook that
//! silently does nothing would fail all three).

use mechlab::papers::induction::data::{generate, MarkovSpec};
use mechlab::papers::induction::full::{Full, FullConfig};
use mechlab::papers::induction::simplified::{Simplified, SimplifiedConfig};
use mechlab::patching::{self, hook, mean_nll, patching_effect};
use mechlab_engine::hooks::{Ablation, Batch, HookedModel, Tensor};
use mechlab_engine::{Float, Parameters};

fn perturb<T: Float>(m: &mut dyn Parameters<T>, scale: f64) {
    let mut i = 0usize;
    m.visit_mut(&mut |p| {
        for v in p.value_mut() {
            *v = T::of(v.as_f64() + scale * ((i as f64 * 1.7).sin() + 0.2));
            i += 1;
        }
    });
}

/// `n` sequences of `l` context tokens, and their targets.
fn markov(n: usize, l: usize, seed: u64) -> (Batch, Vec<usize>) {
    let spec = MarkovSpec {
        n_seqs: n,
        seq_len: l,
        ..MarkovSpec::default()
    };
    let d = generate(&spec, seed).unwrap();
    let ctx = d
        .tokens
        .chunks(l + 1)
        .flat_map(|s| s[..l].iter().map(|&t| t as u32))
        .collect();
    let targets = (0..n).map(|b| d.target(b)).collect();
    (Batch::new(ctx, n, l), targets)
}

const Z: &str = "blocks.0.attn.hook_z";

fn every_kind(m: &mut dyn HookedModel) {
    let (batch, targets) = markov(4, 10, 7);
    let (other, _) = markov(4, 10, 8);
    let y = m.run_with_hooks(&batch, &[]).unwrap();
    let loss = |t: &Tensor| mean_nll(t, &targets, 1e-12);

    // zero: head 1's output changes ŷ; zeroing the query row of the embedding,
    // which is already zero, is the identity
    let zero = m
        .run_with_hooks(&batch, &[hook(Z, Ablation::Zero, Some(vec![1]), None)])
        .unwrap();
    assert_ne!(zero, y, "zero ablation of head 1");
    let emb = patching::activation(m, &batch, "hook_embed").unwrap();
    assert!(emb
        .data
        .chunks(3)
        .skip(10)
        .step_by(11)
        .all(|r| r == [0.0; 3]));
    let z_id = m
        .run_with_hooks(
            &batch,
            &[hook("hook_embed", Ablation::Zero, None, Some(vec![10]))],
        )
        .unwrap();
    assert_eq!(z_id, y, "zero ablation of zeros is the identity");
    let z_tok = m
        .run_with_hooks(
            &batch,
            &[hook("hook_embed", Ablation::Zero, None, Some(vec![9]))],
        )
        .unwrap();
    assert_ne!(z_tok, y, "zero ablation of a token changes ŷ");

    // mean over a reference batch: another batch changes ŷ; a reference batch of
    // two copies of each row's own sequence (batch 1) is the identity
    let mh = patching::mean_hook(m, Z, &other, 4, Some(vec![0]), None).unwrap();
    assert_ne!(m.run_with_hooks(&batch, &[mh]).unwrap(), y, "mean ablation");
    for b in 0..batch.batch {
        let one = Batch::new(batch.seq(b).to_vec(), 1, 10);
        let two = Batch::new([batch.seq(b), batch.seq(b)].concat(), 2, 10);
        let y1 = m.run_with_hooks(&one, &[]).unwrap();
        let mh = patching::mean_hook(m, Z, &two, 1, None, None).unwrap();
        assert_eq!(
            m.run_with_hooks(&one, &[mh]).unwrap(),
            y1,
            "mean of copies, row {b}"
        );
    }

    // resample: from another input changes ŷ; from the same input is the identity
    let rolled = patching::roll_batch(&batch);
    let rh = patching::resample_hook(m, Z, &rolled, None, None).unwrap();
    assert_ne!(
        m.run_with_hooks(&batch, &[rh]).unwrap(),
        y,
        "resample ablation"
    );
    let same = patching::resample_hook(m, Z, &batch, None, Some(vec![3, 9])).unwrap();
    assert_eq!(
        m.run_with_hooks(&batch, &[same]).unwrap(),
        y,
        "resample from itself"
    );

    // patch: every position of the embedding recovers the clean run exactly, with
    // effect 1 on the loss; no position is effect 0; the grid's cells are the
    // runs they claim to be
    let (v, b, e) =
        patching::patch_positions(m, &batch, &other, "hook_embed", None, &loss).unwrap();
    assert_eq!(v, b.clean);
    assert_eq!(e, 1.0, "patching every position restores the clean loss");
    let src = patching::activation(m, &batch, "hook_embed").unwrap();
    let all = m
        .run_with_hooks(
            &other,
            &[hook("hook_embed", Ablation::patch(src), None, None)],
        )
        .unwrap();
    assert_eq!(all, y, "patching every position recovers the clean output");
    let (v0, _, e0) =
        patching::patch_positions(m, &batch, &other, "hook_embed", Some(vec![]), &loss).unwrap();
    assert_eq!(
        (v0, e0),
        (b.corrupted, 0.0),
        "patching nothing changes nothing"
    );

    let g = patching::patch_by_head_pos(m, &batch, &other, Z, &loss).unwrap();
    assert_eq!((g.rows, g.cols), (3, 11));
    assert!(g.effect.iter().any(|&e| e != 0.0), "some cell matters");
    let src = patching::activation(m, &batch, Z).unwrap();
    let cell = m
        .run_with_hooks(
            &other,
            &[hook(Z, Ablation::patch(src), Some(vec![2]), Some(vec![7]))],
        )
        .unwrap();
    assert_eq!(g.patched[2 * 11 + 7], loss(&cell));
    assert_eq!(
        g.effect[2 * 11 + 7],
        patching_effect(g.baselines.clean, g.baselines.corrupted, loss(&cell))
    );
    let row = patching::patch_by_pos(m, &batch, &other, "hook_embed", &loss).unwrap();
    assert_eq!((row.rows, row.cols), (1, 11));
    assert_eq!(
        row.effect[10], 0.0,
        "the query row of the embedding is zero in both runs"
    );

    // mismatched shapes are errors, not panics
    let (short, _) = markov(2, 10, 9);
    assert!(patching::patch_by_pos(m, &batch, &short, "hook_embed", &loss).is_err());
    assert!(patching::resample_hook(m, "blocks.9.attn.hook_z", &batch, None, None).is_err());
}

#[test]
fn every_intervention_kind_on_the_simplified_model() {
    let mut m = Simplified::<f64>::new(&SimplifiedConfig::default());
    perturb(&mut m, 0.4);
    m.a.value_mut()[0] = 3.0;
    every_kind(&mut m);
}

#[test]
fn every_intervention_kind_on_the_full_model() {
    let mut m = Full::<f64>::new(&FullConfig::default());
    perturb(&mut m, 0.5);
    m.a.value_mut()[0] = 3.0;
    every_kind(&mut m);
}
