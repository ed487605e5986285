//! Topic structure (Li, Li, Risteski 2023): gradient checks of every flag
//! combination the presets use, fast paths against the general path, and the
//! mechanism tests with their shuffled-label controls.

use mechlab::data::lda::{generate, mask_docs, LdaConfig, LdaModel, MlmSet};
use mechlab::models::topic_mlm::*;
use mechlab::rng::{stream, Stream};
use mechlab_engine::gradcheck::{check, DEFAULT_H};
use mechlab_engine::Parameters;

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
    let mut set = generate(&lda, &cfg, 5, &mut rng).to_mlm();
    mask_docs(&mut set, &cfg, lda.d_vocab(), &mut rng);
    (lda, set)
}

fn flat(m: &TopicMlm<f64>) -> (Vec<f64>, Vec<f64>) {
    let (mut x, mut g) = (Vec::new(), Vec::new());
    m.visit(&mut |p| {
        x.extend_from_slice(p.value());
        g.extend_from_slice(p.grad());
    });
    (x, g)
}

fn set_flat(m: &mut TopicMlm<f64>, x: &[f64]) {
    let mut i = 0;
    m.visit_mut(&mut |p| {
        let n = p.numel();
        p.value_mut().copy_from_slice(&x[i..i + n]);
        i += n;
    });
}

fn gradcheck(name: &str, cfg: TopicMlmConfig) {
    let (lda, set) = tiny_set(1);
    let mut m =
        TopicMlm::<f64>::new(&cfg, lda.d_vocab(), &lda.topic_of_token(), set.max_len(), 3).unwrap();
    let docs = [0u32, 1, 2, 3, 4];
    m.zero_grad();
    m.forward_backward(&set, &docs);
    let (x, g) = flat(&m);
    assert!(!x.is_empty(), "{name}: nothing trains");
    let mut f = |x: &[f64]| {
        set_flat(&mut m, x);
        m.loss(&set, &docs)
    };
    let r = check(&mut f, &x, &g, DEFAULT_H);
    assert!(r.max_rel_err < 1e-6, "{name}: {r:?}");
}

fn base() -> TopicMlmConfig {
    TopicMlmConfig {
        dtype: "f64".into(),
        ..TopicMlmConfig::default()
    }
}

#[test]
fn gradients_of_every_preset_configuration() {
    gradcheck("topic-value", base());
    gradcheck(
        "topic-value faithful",
        TopicMlmConfig {
            bert_embedding_ln: true,
            ..base()
        },
    );
    gradcheck(
        "topic-embedding",
        TopicMlmConfig {
            embedding: EmbedKind::Trained,
            value: ValueKind::Identity,
            decoder: DecoderKind::Tied,
            ..base()
        },
    );
    gradcheck(
        "topic-attention",
        TopicMlmConfig {
            attention: AttnKind::Trained,
            value: ValueKind::Blocks,
            ..base()
        },
    );
    gradcheck(
        "topic-two-stage",
        TopicMlmConfig {
            attention: AttnKind::Trained,
            init: InitKind::NearZero,
            init_noise: 0.3,
            ..base()
        },
    );
    for loss in [LossKind::CrossEntropy, LossKind::Mse] {
        gradcheck(
            "everything trained",
            TopicMlmConfig {
                embedding: EmbedKind::Trained,
                attention: AttnKind::Trained,
                decoder: DecoderKind::Trained,
                residual: true,
                layer_norm: true,
                bert_embedding_ln: true,
                d_model: 6,
                loss,
                ..base()
            },
        );
        gradcheck(
            "uniform + residual + LN + MSE",
            TopicMlmConfig {
                residual: true,
                layer_norm: true,
                loss,
                ..base()
            },
        );
        gradcheck(
            "wikipedia-like",
            TopicMlmConfig {
                embedding: EmbedKind::Trained,
                attention: AttnKind::Trained,
                decoder: DecoderKind::Tied,
                d_model: 5,
                loss,
                ..base()
            },
        );
    }
}

/// Uniform attention's shortcut (one averaged row per document) equals trained
/// attention with zero queries and keys.
#[test]
fn uniform_shortcut_matches_the_general_path() {
    let (lda, set) = tiny_set(2);
    let docs = [0u32, 1, 2, 3, 4];
    let mk = |attention| {
        TopicMlm::<f64>::new(
            &TopicMlmConfig {
                attention,
                ..base()
            },
            lda.d_vocab(),
            &lda.topic_of_token(),
            set.max_len(),
            5,
        )
        .unwrap()
    };
    let mut a = mk(AttnKind::Uniform);
    let mut b = mk(AttnKind::Trained);
    for s in [W_Q, B_Q, W_K, B_K] {
        b.p[s].value_mut().iter_mut().for_each(|x| *x = 0.0);
    }
    for s in [W_V, B_V] {
        let v = a.p[s].value().to_vec();
        b.p[s].value_mut().copy_from_slice(&v);
    }
    let (la, lb) = (
        a.forward_backward(&set, &docs),
        b.forward_backward(&set, &docs),
    );
    assert!((la - lb).abs() < 1e-12, "{la} vs {lb}");
    for s in [W_V, B_V] {
        for (x, y) in a.p[s].grad().iter().zip(b.p[s].grad()) {
            assert!((x - y).abs() < 1e-12);
        }
    }
}
