//! The double-double against f64 early in training: every model generic over
//! `Float` takes five plain GD steps in both precisions from the same point. Away
//! from saturation both are exact to f64's rounding, so the losses agree to 1e-12
//! and the parameters to 1e-10; a broken F64x2 operation or a model that is not
//! really generic fails it. (`tests/it/saturation.rs` is the other half: the two
//! parting ways, at saturation, only where f64 cancels.)

use mechlab::papers::induction::data::{generate, MarkovSpec};
use mechlab::papers::induction::direct::{Direct, DirectConfig};
use mechlab::papers::induction::full::{Full, FullConfig};
use mechlab::papers::induction::simplified::{Simplified, SimplifiedConfig};
use mechlab::papers::markov_icl::data::{sample, ChainSpec, Prior};
use mechlab::papers::markov_icl::minimal::{Layer1, MinimalModel};
use mechlab::papers::markov_icl::model::{Dims, RpeTransformer};
use mechlab::papers::selection::model::{ModelConfig, SelectionModel};
use mechlab::papers::topic::model::{
    AttnKind, DecoderKind, EmbedKind, TopicMlm, TopicMlmConfig, ValueKind,
};
use mechlab::rng::{stream, Stream};
use mechlab::train::Trainable;
use mechlab_engine::{F64x2, Float, Parameters};
use std::sync::Arc;

use crate::support::precision as support;
use support::{copy_params, tiny_docs, tiny_reviews};

/// `steps` steps of plain GD (lr 0.05) on the same model in f64 and in F64x2 from
/// the same point: early in training, away from saturation, both are exact to
/// f64's rounding, so their losses agree to 1e-12 and their parameters to 1e-10.
fn agree_early<A, B>(
    what: &str,
    a: &mut A,
    b: &mut B,
    mut step_a: impl FnMut(&mut A) -> f64,
    mut step_b: impl FnMut(&mut B) -> f64,
) where
    A: Parameters<f64>,
    B: Parameters<F64x2>,
{
    copy_params(a, b);
    for k in 0..5 {
        a.zero_grad();
        b.zero_grad();
        let (la, lb) = (step_a(a), step_b(b));
        assert!(
            (la - lb).abs() <= 1e-12 * la.abs().max(1e-300),
            "{what}: step {k} loss {la} vs {lb}"
        );
        a.visit_mut(&mut |p| {
            let (w, g) = p.value_and_grad_mut();
            w.iter_mut().zip(g.iter()).for_each(|(w, g)| *w -= 0.05 * g);
        });
        b.visit_mut(&mut |p| {
            let (w, g) = p.value_and_grad_mut();
            let lr = F64x2::of(0.05);
            w.iter_mut().zip(g.iter()).for_each(|(w, &g)| *w -= lr * g);
        });
    }
    let mut va = Vec::new();
    a.visit(&mut |p| va.extend_from_slice(p.value()));
    let mut vb = Vec::new();
    b.visit(&mut |p| vb.extend(p.value().iter().map(|x| x.as_f64())));
    for (i, (x, y)) in va.iter().zip(&vb).enumerate() {
        assert!(
            (x - y).abs() <= 1e-10 * x.abs().max(1.0),
            "{what}: parameter {i}: {x} vs {y}"
        );
    }
}

#[test]
fn double_double_agrees_with_f64_early_in_training() {
    let l = 12;
    let spec = MarkovSpec {
        n_seqs: 40,
        seq_len: l,
        ..MarkovSpec::default()
    };
    let data = generate(&spec, 3).unwrap();
    let t = &data.tokens;
    let cfg = SimplifiedConfig::default();
    agree_early(
        "induction simplified",
        &mut Simplified::<f64>::new(&cfg),
        &mut Simplified::<F64x2>::new(&cfg),
        |m| m.loss(t, l, true),
        |m| m.loss(t, l, true).as_f64(),
    );
    let cfg = FullConfig::default();
    agree_early(
        "induction full",
        &mut Full::<f64>::new(&cfg),
        &mut Full::<F64x2>::new(&cfg),
        |m| m.loss(t, l, true),
        |m| m.loss(t, l, true).as_f64(),
    );
    let cfg = DirectConfig::default();
    agree_early(
        "induction direct",
        &mut Direct::<f64>::new(&cfg),
        &mut Direct::<F64x2>::new(&cfg),
        |m| m.loss(t, l, true),
        |m| m.loss(t, l, true).as_f64(),
    );

    let spec = ChainSpec {
        vocab: 3,
        order: 2,
        prior: Prior::Dirichlet,
        alpha: 1.0,
        len: 17,
        first: mechlab::papers::markov_icl::data::FirstToken::Stationary,
    };
    let chain = sample(&spec, 6, &mut stream(4, Stream::Data)).unwrap();
    let dims = Dims {
        vocab: 3,
        max_len: 16,
        d_model: 8,
        n_heads: 2,
        init_std: 0.3,
        proj_std: 0.3,
        dropout: 0.0,
    };
    let (ct, cl) = (&chain.tokens, chain.len);
    agree_early(
        "markov transformer",
        &mut RpeTransformer::<f64>::new(&dims, &mut stream(4, Stream::Init)).unwrap(),
        &mut RpeTransformer::<F64x2>::new(&dims, &mut stream(4, Stream::Init)).unwrap(),
        |m| m.loss(ct, cl, true),
        |m| m.loss(ct, cl, true).as_f64(),
    );
    agree_early(
        "markov minimal",
        &mut MinimalModel::<f64>::new(3, 16, Layer1::Softmax),
        &mut MinimalModel::<F64x2>::new(3, 16, Layer1::Softmax),
        |m| m.loss(ct, cl, true),
        |m| m.loss(ct, cl, true).as_f64(),
    );

    let (n, tt, v, d) = (8, 6, 10, 4);
    let seqs = Arc::new(tiny_reviews(n, tt, v));
    let cfg = ModelConfig {
        d_model: d,
        e_orthogonal_to_v: false,
        ..ModelConfig::default()
    };
    agree_early(
        "selection",
        &mut SelectionModel::<f64>::new(&cfg, seqs.clone(), 3),
        &mut SelectionModel::<F64x2>::new(&cfg, seqs.clone(), 3),
        |m| m.train_step(0),
        |m| m.train_step(0).as_f64(),
    );

    let (v, d) = (6, 4);
    let cfg = TopicMlmConfig {
        dtype: mechlab::experiment::Dtype::F64,
        d_model: d,
        embedding: EmbedKind::Trained,
        attention: AttnKind::Trained,
        value: ValueKind::Trained,
        decoder: DecoderKind::Trained,
        residual: true,
        layer_norm: true,
        ..TopicMlmConfig::default()
    };
    let set = tiny_docs(v, &[5, 7, 6], 2);
    let topics: Vec<usize> = (0..v).map(|i| i % 2).collect();
    let docs: Vec<u32> = (0..set.len() as u32).collect();
    agree_early(
        "topic",
        &mut TopicMlm::<f64>::new(&cfg, v, &topics, set.max_len(), 4).unwrap(),
        &mut TopicMlm::<F64x2>::new(&cfg, v, &topics, set.max_len(), 4).unwrap(),
        |m| m.forward_backward(&set, &docs),
        |m| m.forward_backward(&set, &docs).as_f64(),
    );

    use mechlab::papers::attention_svm::data::{generate as svm_data, DataConfig};
    use mechlab::papers::attention_svm::model::{ModelConfig as SvmConfig, Param2, SvmModel};
    let (svm, vv) = svm_data(
        &DataConfig {
            n: 5,
            t: 4,
            d: 3,
            twins: 0,
        },
        2,
    );
    let svm = Arc::new(svm);
    for param in [Param2::W, Param2::Kq] {
        let cfg = SvmConfig {
            param,
            init: 0.5,
            ..SvmConfig::default()
        };
        agree_early(
            &format!("attention-svm {param:?}"),
            &mut SvmModel::<f64>::new(&cfg, svm.clone(), vv.clone(), 2),
            &mut SvmModel::<F64x2>::new(&cfg, svm.clone(), vv.clone(), 2),
            |m| m.train_step(0),
            |m| m.train_step(0).as_f64(),
        );
    }
}
