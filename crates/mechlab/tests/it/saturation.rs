//! Every model's softmax backward at saturation: with the attention (and the
//! output) scaled up until the pattern rows that reach the loss are one-hot in
//! f64, the f64 gradient of every parameter points where the double-double's does
//! (cosine above 0.999, `mechlab_engine::precision`). Finite-difference checks
//! cannot see this regime: the true gradient there is tiny but far from
//! underflow, and a backward that forms `x_t − Σ_s a_s x_s` returns rounding noise
//! for it.
//!
//! Each model is built twice from the same config, in f64 and in `F64x2`; the
//! f64 parameters are copied exactly into the double-double one, both take one
//! forward and backward on the same data, and each parameter's gradient is
//! compared with the reference. Only saturated items go in (one unsaturated item
//! would swamp the rest with an O(1) gradient), and where the cross-entropy is
//! involved the targets are the model's own predictions, the regime of a trained
//! model. Replacing any of the centred backwards by the textbook form makes these
//! fail (checked by hand for the engine softmax, the induction models' layer-1
//! and layer-2 backwards).

use mechlab::papers::induction::data::{generate, MarkovSpec};
use mechlab::papers::induction::direct::{Direct, DirectConfig};
use mechlab::papers::induction::full::{Full, FullConfig};
use mechlab::papers::induction::simplified::{LossKind, Simplified, SimplifiedConfig};
use mechlab::papers::markov_icl::data::{sample, ChainSpec, Prior};
use mechlab::papers::markov_icl::minimal::{Layer1, MinimalModel};
use mechlab::papers::markov_icl::model::{Dims, RpeTransformer};
use mechlab::papers::selection::model::{ModelConfig, SelectionModel};
use mechlab::papers::topic::data::NO_LABEL;
use mechlab::papers::topic::model::{
    AttnKind, DecoderKind, EmbedKind, TopicMlm, TopicMlmConfig, ValueKind,
};
use mechlab::rng::{stream, Stream};
use mechlab::train::Trainable;
use mechlab_engine::hooks::{Batch, HookedModel};
use mechlab_engine::precision::{assert_direction, MIN_COSINE};
use mechlab_engine::{F64x2, Float, Parameters};
use std::sync::Arc;

use crate::support::precision as support;
use support::{copy_params, tiny_docs, tiny_reviews};

/// After one backward each, every nonzero reference gradient is matched in
/// direction; at least `min_compared` parameters must have one. `zero` names
/// parameters whose true gradient is exactly 0 (both sides are rounding noise).
fn assert_same_directions(
    what: &str,
    a: &dyn Parameters<f64>,
    b: &dyn Parameters<F64x2>,
    min_compared: usize,
    zero: &[&str],
) {
    let mut want = Vec::new();
    b.visit(&mut |p| want.push(p.grad().iter().map(|g| g.as_f64()).collect::<Vec<_>>()));
    let (mut i, mut compared) = (0, 0);
    a.visit(&mut |p| {
        if want[i].iter().any(|&g| g != 0.0) && !zero.contains(&p.name()) {
            assert_direction(
                &format!("{what}: {}", p.name()),
                p.grad(),
                &want[i],
                MIN_COSINE,
            );
            compared += 1;
        }
        i += 1;
    });
    assert!(
        compared >= min_compared,
        "{what}: {compared} parameters compared"
    );
}

/// Asserts some row of the `[batch, head, query, key]` pattern is one-hot in f64.
fn assert_saturated(what: &str, m: &mut dyn HookedModel, batch: &Batch, name: &str) {
    let (_, cache) = m.run_with_cache(batch, &[name]).unwrap();
    let pat = &cache[name];
    let k = *pat.shape.last().unwrap();
    let one_hot = pat.data.chunks(k).filter(|r| r.contains(&1.0)).count();
    let top = pat.data.iter().cloned().fold(0.0, f64::max);
    assert!(
        one_hot > 0,
        "{what}: no row of {name} rounds to one-hot (largest weight {top})"
    );
}

/// The sequences of `data` whose prediction is one-hot in f64, each with its
/// target (its token `l`) set to that prediction: every item then sits where a
/// trained model's cross-entropy and softmax backwards would cancel (one
/// unsaturated item would swamp them with an O(1) gradient).
fn saturated_items(
    data: &mechlab::papers::induction::data::MarkovData,
    l: usize,
    mut predict: impl FnMut(&[u8], &mut [f64]),
) -> mechlab::papers::induction::data::MarkovData {
    let (s, n) = (data.vocab, data.len());
    let mut out = vec![0.0; n * s];
    predict(&data.tokens, &mut out);
    let pw = data.pis.len() / n;
    let mut d = data.slice(0, 0);
    for b in 0..n {
        let row = &out[b * s..(b + 1) * s];
        // ŷ sums positions' weights, so one-hot is 1 to within an ulp; a context
        // of one repeated token is one-hot whatever the attention does: skipped
        let ctx = &data.seq(b)[..l];
        let varied = ctx.iter().any(|&t| t != ctx[0]);
        let top = (0..s).find(|&k| (row[k] - 1.0).abs() <= f64::EPSILON);
        if let (true, Some(top)) = (varied, top) {
            d.tokens.extend_from_slice(&data.seq(b)[..l]);
            d.tokens.push(top as u8);
            d.pis.extend_from_slice(&data.pis[b * pw..(b + 1) * pw]);
        }
    }
    assert!(d.len() >= 3, "only {} saturated sequences", d.len());
    d
}

/// 300 steps of full-batch GD at lr 1 (the induction paper's optimiser).
fn train<M: Parameters<f64>>(m: &mut M, mut step: impl FnMut(&mut M)) {
    for _ in 0..300 {
        m.zero_grad();
        step(m);
        m.visit_mut(&mut |p| {
            let (w, g) = p.value_and_grad_mut();
            w.iter_mut().zip(g.iter()).for_each(|(w, g)| *w -= g);
        });
    }
}

fn scale(p: &mut [f64], by: f64) {
    p.iter_mut().for_each(|x| *x *= by);
}

/// One induction model (its f64 and F64x2 types, its config): trained as the
/// paper trains it (full-batch GD, lr 1) until the copier and the selector have
/// formed, then a large `a` and a scaled `W` saturate both softmaxes; each target
/// is set to the model's own prediction, so ŷ_y rounds to 1 where the layer-2
/// softmax saturates: the regime of a trained model, where the cross-entropy and
/// softmax backwards would cancel. The three models share no trait for `loss`,
/// `predict`, `a` and `w`, hence a macro.
macro_rules! induction_at_saturation {
    ($what:expr, $ty:ident, $cfg:expr, $all:expr, $batch:expr, $l:expr) => {{
        let (cfg, all, l) = ($cfg, $all, $l);
        let mut a = $ty::<f64>::new(&cfg);
        train(&mut a, |m| {
            m.loss(&all.tokens, l, true);
        });
        a.a.value_mut()[0] = 300.0;
        scale(a.w.value_mut(), 20.0);
        for layer in ["blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern"] {
            assert_saturated($what, &mut a, $batch, layer);
        }
        let data = saturated_items(all, l, |t, out| {
            a.predict(t, l, out);
        });
        let mut b = $ty::<F64x2>::new(&cfg);
        copy_params(&a, &mut b);
        a.zero_grad();
        b.zero_grad();
        a.loss(&data.tokens, l, true);
        b.loss(&data.tokens, l, true);
        assert_same_directions($what, &a, &b, 2, &[]);
    }};
}

#[test]
fn induction_models_at_saturation() {
    let l = 12;
    let spec = MarkovSpec {
        n_seqs: 200,
        seq_len: l,
        ..MarkovSpec::default()
    };
    let all = generate(&spec, 5).unwrap();
    let batch = mechlab::papers::induction::causal::batch_of(&all, 30).0;
    let loss = LossKind::Nll;
    let simplified = SimplifiedConfig {
        loss,
        ..SimplifiedConfig::default()
    };
    induction_at_saturation!("simplified", Simplified, simplified, &all, &batch, l);
    let full = FullConfig {
        loss,
        ..FullConfig::default()
    };
    induction_at_saturation!("full", Full, full, &all, &batch, l);
    let direct = DirectConfig {
        loss,
        ..DirectConfig::default()
    };
    induction_at_saturation!("direct", Direct, direct, &all, &batch, l);
}

#[test]
fn markov_icl_models_at_saturation() {
    let spec = ChainSpec {
        vocab: 3,
        order: 2,
        prior: Prior::Dirichlet,
        alpha: 1.0,
        len: 17,
        first: mechlab::papers::markov_icl::data::FirstToken::Stationary,
    };
    let data = sample(&spec, 6, &mut stream(9, Stream::Data)).unwrap();
    let dims = Dims {
        vocab: 3,
        max_len: 16,
        d_model: 8,
        n_heads: 2,
        init_std: 0.3,
        proj_std: 0.3,
        dropout: 0.0,
    };
    let mut a = RpeTransformer::<f64>::new(&dims, &mut stream(9, Stream::Init)).unwrap();
    // every query, key, position table and the unembedding scaled up: patterns
    // and next-token distributions saturate
    for p in a.params.iter_mut() {
        let n = p.name().to_string();
        if n.contains("W_Q") || n.contains("W_K") || n.contains("W_pos") {
            scale(p.value_mut(), 30.0);
        } else if n.contains("W_U") {
            scale(p.value_mut(), 60.0);
        }
    }
    // the hook batch: each sequence's inputs (all but its last token)
    let (n, t) = (data.tokens.len() / data.len, data.len - 1);
    let tokens: Vec<u32> = (0..n)
        .flat_map(|b| {
            data.tokens[b * data.len..b * data.len + t]
                .iter()
                .map(|&x| x as u32)
        })
        .collect();
    let batch = Batch::new(tokens, n, t);
    assert_saturated("markov", &mut a, &batch, "blocks.0.attn.hook_pattern");
    let mut b = RpeTransformer::<F64x2>::new(&dims, &mut stream(9, Stream::Init)).unwrap();
    copy_params(&a, &mut b);
    a.zero_grad();
    b.zero_grad();
    a.loss(&data.tokens, data.len, true);
    b.loss(&data.tokens, data.len, true);
    assert_same_directions("markov transformer", &a, &b, 10, &[]);

    let mut a = MinimalModel::<f64>::new(3, 16, Layer1::Softmax);
    for (j, x) in a.params[0].value_mut().iter_mut().enumerate() {
        *x = if j == 1 { 60.0 } else { -(j as f64) };
    }
    for (j, x) in a.params[1].value_mut().iter_mut().enumerate() {
        *x = 25.0 * ((j * 5 % 7) as f64 - 3.0);
    }
    let mut b = MinimalModel::<F64x2>::new(3, 16, Layer1::Softmax);
    copy_params(&a, &mut b);
    a.zero_grad();
    b.zero_grad();
    a.loss(&data.tokens, data.len, true);
    b.loss(&data.tokens, data.len, true);
    assert_same_directions("markov minimal", &a, &b, 2, &[]);
}

#[test]
fn selection_model_at_saturation() {
    let (n, t, v, d) = (8, 6, 10, 4);
    let data = tiny_reviews(n, t, v);
    let cfg = ModelConfig {
        d_model: d,
        e_orthogonal_to_v: false,
        ..ModelConfig::default()
    };
    let data = Arc::new(data);
    let mut a = SelectionModel::<f64>::new(&cfg, data.clone(), 3);
    for (j, x) in a.p.value_mut().iter_mut().enumerate() {
        *x = 400.0 * (j as f64 * 2.1).sin();
    }
    // the top token's weight is exactly 1 in some sequence
    let e = a.w_e.value().to_vec();
    let p = a.p.value().to_vec();
    let saturated = (0..n).any(|k| {
        let len = data.lens[k] as usize;
        let s: Vec<f64> = (0..len)
            .map(|i| {
                let id = data.ids[k * t + i] as usize;
                (0..d).map(|j| e[id * d + j] * p[j]).sum()
            })
            .collect();
        let m = s.iter().cloned().fold(f64::MIN, f64::max);
        let z: f64 = s.iter().map(|x| (x - m).exp()).sum();
        z == 1.0 && s.iter().filter(|&&x| x != m).count() > 0
    });
    assert!(saturated, "no sequence's attention rounds to one-hot");
    let mut b = SelectionModel::<F64x2>::new(&cfg, data, 3);
    copy_params(&a, &mut b);
    a.zero_grad();
    b.zero_grad();
    a.train_step(0);
    b.train_step(0);
    assert_same_directions("selection", &a, &b, 3, &[]);
}

#[test]
fn topic_model_at_saturation() {
    let (v, d) = (6, 4);
    let cfg = TopicMlmConfig {
        dtype: mechlab::experiment::Dtype::F64,
        d_model: d,
        embedding: EmbedKind::Trained,
        attention: AttnKind::Trained,
        value: ValueKind::Trained,
        decoder: DecoderKind::Trained,
        residual: true,
        ..TopicMlmConfig::default()
    };
    // three documents, every third position masked (hidden key, labelled)
    let set = tiny_docs(v, &[5, 7, 6, 8, 5, 9, 6, 7, 5, 8, 6, 7], 1);
    let topics: Vec<usize> = (0..v).map(|i| i % 2).collect();
    let mut a = TopicMlm::<f64>::new(&cfg, v, &topics, set.max_len(), 4).unwrap();
    // queries, keys and the unembedding set large: patterns and predictions saturate
    let mut k = 0;
    for p in a.p.iter_mut() {
        let big = match p.name() {
            n if n.contains("W_Q") || n.contains("W_K") => Some(20.0),
            n if n.contains("W_U") || n.contains("W_E") => Some(8.0),
            _ => None,
        };
        for x in p.value_mut() {
            *x = match big {
                Some(b) => b * (k as f64 * 0.7).sin(),
                None => *x + 0.3 * (k as f64 * 0.7).sin(),
            };
            k += 1;
        }
    }
    let doc0 = mechlab::papers::topic::causal::doc_batch(&set, 1);
    assert_saturated("topic", &mut a, &doc0, "blocks.0.attn.hook_pattern");
    // every label set to the model's own prediction, so the loss saturates too
    let mut set = set;
    for i in 0..set.len() {
        let logits = a
            .run_with_hooks(&mechlab::papers::topic::causal::doc_batch(&set, i), &[])
            .unwrap();
        let r = set.range(i);
        for (p, j) in r.clone().enumerate() {
            if set.label[j] != NO_LABEL {
                let row = &logits.data[p * v..(p + 1) * v];
                set.label[j] = (0..v).max_by(|&x, &y| row[x].total_cmp(&row[y])).unwrap() as u32;
            }
        }
    }
    let mut b = TopicMlm::<F64x2>::new(&cfg, v, &topics, set.max_len(), 4).unwrap();
    copy_params(&a, &mut b);
    // only documents whose labelled positions' attention rows are one-hot in f64
    // (an unsaturated row would swamp W_Q's and W_K's gradients with O(1) terms)
    let docs: Vec<u32> = (0..set.len())
        .filter(|&i| {
            let batch = mechlab::papers::topic::causal::doc_batch(&set, i);
            let (_, cache) = a
                .run_with_cache(&batch, &["blocks.0.attn.hook_pattern"])
                .unwrap();
            // only the labelled positions reach the (one-layer) loss
            let l = batch.seq_len;
            let pat = &cache["blocks.0.attn.hook_pattern"].data;
            set.range(i)
                .enumerate()
                .all(|(p, j)| set.label[j] == NO_LABEL || pat[p * l..(p + 1) * l].contains(&1.0))
        })
        .map(|i| i as u32)
        .collect();
    assert!(!docs.is_empty(), "no document saturates");
    a.zero_grad();
    b.zero_grad();
    a.forward_backward(&set, &docs);
    b.forward_backward(&set, &docs);
    // q·b_K shifts every logit of a row equally: its true gradient is 0
    assert_same_directions("topic", &a, &b, 4, &["blocks.0.attn.b_K"]);
}
