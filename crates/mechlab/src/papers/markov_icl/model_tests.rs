//! Tests of the markov-icl transformer: gradients against finite differences
//! (with and without dropout), dropout only in training steps and bit-identical
//! across thread counts, causal patterns.

use super::*;
use crate::papers::markov_icl::data::{sample, ChainSpec, Prior};
use crate::rng::{stream, Stream};
use mechlab_engine::gradcheck::{check_params, DEFAULT_H};

fn dims(h: usize) -> Dims {
    Dims {
        vocab: 3,
        max_len: 9,
        d_model: 4,
        n_heads: h,
        init_std: 0.5,
        proj_std: 0.5,
        dropout: 0.0,
    }
}

fn batch(n: usize) -> Vec<u8> {
    let spec = ChainSpec {
        vocab: 3,
        order: 2,
        prior: Prior::Dirichlet,
        alpha: 1.0,
        len: 8,
        first: crate::papers::markov_icl::data::FirstToken::Stationary,
    };
    sample(&spec, n, &mut stream(3, Stream::Data))
        .unwrap()
        .tokens
}

/// Without dropout, and with it at a fixed training step (the masks are then
/// fixed, so the loss is a smooth function of the parameters), the backward
/// matches central differences. Head widths 2 and 4 take the pair loops'
/// run-time width, 8 and 16 their constant ones (`pairs.rs`).
#[test]
fn gradient_matches_finite_differences_in_f64() {
    for (d, h, dropout) in [
        (4, 1, 0.0),
        (4, 2, 0.0),
        (4, 1, 0.3),
        (4, 2, 0.3),
        (16, 1, 0.0),
        (16, 2, 0.3),
    ] {
        let mut dm = dims(h);
        dm.d_model = d;
        dm.dropout = dropout;
        let mut m = RpeTransformer::<f64>::new(&dm, &mut stream(3, Stream::Init))
            .unwrap()
            .with_dropout_seed(5);
        m.set_train_step(Some(17));
        let tok = batch(11);
        let results = check_params(
            &mut m,
            |m: &RpeTransformer<f64>| m.duplicate().loss(&tok, 8, false),
            |m| {
                m.loss(&tok, 8, true);
            },
            DEFAULT_H,
        );
        for (name, r) in results {
            r.assert_below(
                1e-5,
                &format!("{name} (d {d}, heads {h}, dropout {dropout})"),
            );
        }
    }
}

/// Dropout changes the training loss, not the evaluation one, and a step's
/// masks depend on the step.
#[test]
fn dropout_acts_in_training_steps_only() {
    let mut dm = dims(2);
    dm.dropout = 0.3;
    let tok = batch(9);
    let mut m = RpeTransformer::<f64>::new(&dm, &mut stream(3, Stream::Init))
        .unwrap()
        .with_dropout_seed(5);
    let mut plain = RpeTransformer::<f64>::new(&dims(2), &mut stream(3, Stream::Init)).unwrap();
    let eval = m.loss(&tok, 8, false);
    assert_eq!(eval.to_bits(), plain.loss(&tok, 8, false).to_bits());
    m.set_train_step(Some(1));
    let s1 = m.loss(&tok, 8, false);
    m.set_train_step(Some(2));
    let s2 = m.loss(&tok, 8, false);
    assert!(s1 != eval && s2 != eval && s1 != s2, "{eval} {s1} {s2}");
    m.set_train_step(Some(1));
    assert_eq!(m.loss(&tok, 8, false).to_bits(), s1.to_bits());
}

/// A training step with dropout gives the same bits on 1 and 3 threads.
#[test]
fn dropout_steps_are_bit_identical_across_thread_counts() {
    let mut dm = dims(2);
    dm.dropout = 0.1;
    let tok = batch(37);
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let mut m = RpeTransformer::<f32>::new(&dm, &mut stream(3, Stream::Init))
                .unwrap()
                .with_dropout_seed(8);
            m.set_train_step(Some(4));
            let loss = m.loss(&tok, 8, true);
            let mut bits = vec![loss.to_bits()];
            m.visit(&mut |p| bits.extend(p.grad().iter().map(|g| g.to_bits())));
            bits
        })
    };
    assert_eq!(run(1), run(3));
}

#[test]
fn rows_of_the_pattern_are_causal_distributions() {
    let mut m = RpeTransformer::<f64>::new(&dims(2), &mut stream(1, Stream::Init)).unwrap();
    let (logits, pats) = m.run_one(&[0, 1, 2, 1, 0]);
    assert_eq!(logits.len(), 5 * 3);
    for (l, pat) in pats.iter().enumerate() {
        for r in pat.chunks_exact(5).enumerate() {
            let (row, i) = (r.1, r.0 % 5);
            assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-12, "layer {l}");
            assert!(row[i + 1..].iter().all(|&a| a == 0.0));
        }
    }
}

#[test]
fn heads_must_divide_the_width() {
    assert!(RpeTransformer::<f64>::new(&dims(3), &mut stream(1, Stream::Init)).is_err());
}
