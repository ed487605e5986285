//! The topic paper's causal check (`papers/topic/causal.rs`): the dev loss with
//! the trained attention pattern replaced by uniform attention, its controls, and
//! the machinery broken on purpose.

use mechlab::papers::topic::causal::{
    hooked_dev_loss, permute_rows, uniform_attention, uniform_pattern, PatternPatch,
    UniformAttention,
};
use mechlab::papers::topic::data::{generate, mask_docs, LdaConfig, LdaModel, MlmSet};
use mechlab::papers::topic::model::*;
use mechlab::rng::{stream, substream, Stream};
use mechlab::run::summary::Summary;
use mechlab::run::RunCtx;
use mechlab_engine::hooks::{Batch, Tensor};
use std::path::Path;

fn table(preset: &str, overrides: &[&str]) -> toml::Table {
    let exp = mechlab::papers::registry().find("topic").unwrap();
    let p = mechlab::papers::registry().find_preset(preset).unwrap();
    let mut t = exp.default_config();
    mechlab::config::overlay(
        &mut t,
        &mechlab::config::parse(p.text, preset).unwrap(),
        preset,
    )
    .unwrap();
    for o in [
        "data.n_train=1200",
        "data.n_dev=300",
        "data.n_test=100",
        "probe.docs=60",
        "run.probe_every=100",
    ]
    .iter()
    .chain(overrides)
    {
        mechlab::config::apply_override(&mut t, o).unwrap();
    }
    t
}

fn run(dir: &Path, t: toml::Table) -> Summary {
    let exp = mechlab::papers::registry().find("topic").unwrap();
    let prepared = exp.prepare(&t, "test").unwrap();
    let mut ctx = RunCtx::create(dir, t, "test", true).unwrap();
    let s = prepared.run(&mut ctx).unwrap();
    ctx.finish(&s).unwrap();
    s
}

/// A tiny topic-attention run: the verdict is in the summary, its metrics are
/// consistent with its pass flag, the hooked loss is the fused one, the identity
/// patch is exact and trained attention beats uniform attention.
#[test]
fn tiny_topic_attention_run_has_the_uniform_attention_verdict() {
    let tmp = tempfile::tempdir().unwrap();
    let s = run(
        &tmp.path().join("a"),
        table("topic-attention", &["train.steps=300"]),
    );
    let k = |n: &str| s.metrics[&format!("causal.uniform_attention.{n}")];
    let v: Vec<_> = s
        .verdicts
        .iter()
        .filter(|v| v.id == "topic.causal-uniform-attention")
        .collect();
    assert_eq!(v.len(), 1, "one uniform-attention verdict");
    let r = UniformAttention {
        docs: k("docs") as usize,
        fused: k("fused"),
        trained: k("trained"),
        uniform: k("uniform"),
        own: k("own"),
        permuted: k("permuted"),
        se_uniform: k("se_uniform"),
        se_permuted: k("se_permuted"),
    };
    assert_eq!(v[0].pass, r.holds());
    assert_eq!(r.docs, 200);
    assert!(
        (r.trained - r.fused).abs() <= 1e-4 * r.fused,
        "hooked {} vs fused {}",
        r.trained,
        r.fused
    );
    assert_eq!(r.own, r.trained, "own pattern is the identity");
    assert!(r.uniform > r.trained, "{r:?}");
    // Broken on purpose: a "uniform" patch that writes the model's own pattern
    // has Δ exactly 0 and the verdict fails.
    let broken = UniformAttention {
        uniform: r.own,
        ..r
    };
    assert_eq!(broken.delta_uniform(), 0.0);
    assert!(!broken.holds());
    // A control that moved as little as the identity fails it too.
    let weak = UniformAttention {
        permuted: r.trained,
        ..r
    };
    assert!(!weak.holds());
    // Frozen uniform attention has no such verdict.
    let u = run(
        &tmp.path().join("u"),
        table("topic-value", &["train.steps=50"]),
    );
    assert!(!u.metrics.contains_key("causal.uniform_attention.trained"));
}

fn tiny_set(seed: u64) -> (LdaModel, MlmSet) {
    let cfg = LdaConfig {
        n_topics: 3,
        words_per_topic: 4,
        min_len: 8,
        max_len: 12,
        mask_prob: 0.3,
        ..LdaConfig::default()
    };
    let lda = LdaModel::new(&cfg).unwrap();
    let mut rng = stream(seed, Stream::Data);
    let mut set = generate(&lda, &cfg, 7, &mut rng).to_mlm();
    mask_docs(&mut set, &cfg, lda.d_vocab(), &mut rng);
    (lda, set)
}

/// On a model with frozen uniform attention the uniform patch writes the model's
/// own pattern (Δ exactly 0); on a trained-attention model with random Q, K it
/// does not. The fused loss and the hooked one agree in f64.
#[test]
fn uniform_patch_is_the_identity_on_uniform_attention_and_not_on_trained() {
    let (lda, set) = tiny_set(2);
    let mk = |attention| {
        let cfg = TopicMlmConfig {
            dtype: mechlab::experiment::Dtype::F64,
            attention,
            value: ValueKind::Trained,
            residual: true,
            ..TopicMlmConfig::default()
        };
        TopicMlm::<f64>::new(&cfg, lda.d_vocab(), &lda.topic_of_token(), set.max_len(), 5).unwrap()
    };
    let mut u = mk(AttnKind::Uniform);
    let base = hooked_dev_loss(&mut u, &set, 7, 3, PatternPatch::None, 1).unwrap();
    let uni = hooked_dev_loss(&mut u, &set, 7, 3, PatternPatch::Uniform, 1).unwrap();
    assert_eq!(uni, base);
    let mut t = mk(AttnKind::Trained);
    // Sharpen the random attention so that it is far from uniform.
    for s in [W_Q, W_K] {
        t.p[s].value_mut().iter_mut().for_each(|x| *x *= 30.0);
    }
    let r = uniform_attention(&mut t, &set, 3, 1).unwrap();
    assert!((r.trained - r.fused).abs() < 1e-12, "{r:?}");
    assert_eq!(r.own, r.trained);
    assert_ne!(r.uniform, r.trained);
    assert_ne!(r.permuted, r.trained);
}

/// The patterns themselves: uniform rows over the visible keys; a permuted row
/// keeps its multiset of weights and its zeros on hidden keys.
#[test]
fn uniform_and_permuted_patterns() {
    let b = Batch::new(vec![4, 5, 1, 4], 1, 4).with_targets(vec![-1, -1, 5, -1]);
    let u = uniform_pattern(&b);
    assert_eq!(&u.data[..4], &[1.0 / 3.0, 1.0 / 3.0, 0.0, 1.0 / 3.0]);
    let row = [0.5, 0.3, 0.0, 0.2];
    let p = Tensor::new(vec![1, 1, 4, 4], row.repeat(4));
    let mut rng = substream(1, Stream::Sample, 40);
    let q = permute_rows(&p, &b, &mut rng);
    let mut moved = false;
    for i in 0..4 {
        let r = &q.data[i * 4..(i + 1) * 4];
        assert_eq!(r[2], 0.0);
        let mut s = r.to_vec();
        s.sort_by(f64::total_cmp);
        assert_eq!(s, vec![0.0, 0.2, 0.3, 0.5]);
        moved |= r != row;
    }
    assert!(moved, "4 row permutations of 3 keys all the identity");
}
