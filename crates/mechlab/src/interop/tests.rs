//! Export then import, both formats, bit for bit.

use super::*;
use mechlab_engine::gpt::{ActFn, Gpt, GptConfig, Normalization, PositionalEmbedding};
use mechlab_engine::Float;
use serde_json::{json, Value};
use std::collections::BTreeMap;

fn model<T: Float>(cfg: &GptConfig) -> Gpt<T> {
    let mut m = Gpt::<T>::new(cfg, &mut rand_chacha::ChaCha8Rng::seed_from_u64(4)).unwrap();
    // nonzero biases and gains, so a swapped layout cannot pass
    let mut k = 0.0;
    for p in m.params.iter_mut() {
        for x in p.value_mut() {
            k += 1.0;
            *x += T::of((k * 0.37f64).sin() * 0.1);
        }
    }
    m
}

#[test]
fn export_then_import_is_bit_exact_and_computes_the_same_logits() {
    use mechlab_engine::hooks::{Batch, HookedModel};
    for (mlp, act, ln) in [
        (0, ActFn::GeluNew, true),
        (7, ActFn::Relu, false),
        (7, ActFn::GeluNew, true),
    ] {
        let cfg = GptConfig {
            n_layers: 2,
            d_model: 6,
            n_heads: 2,
            d_head: 3,
            d_mlp: mlp,
            attn_only: mlp == 0,
            act_fn: act,
            n_ctx: 5,
            d_vocab: 7,
            normalization: if ln {
                Normalization::LN
            } else {
                Normalization::None
            },
            ..GptConfig::default()
        };
        let mut m = model::<f32>(&cfg);
        let (t, j) = to_transformer_lens(&m).unwrap();
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &t, &j).unwrap();
        let (j2, t2) = read::<f32>(dir.path()).unwrap();
        let mut back = from_transformer_lens(&j2, &t2).unwrap();
        for (a, b) in m.params.iter().zip(&back.params) {
            assert_eq!(a.name(), b.name());
            assert!(
                a.value()
                    .iter()
                    .zip(b.value())
                    .all(|(x, y)| x.to_bits() == y.to_bits()),
                "{}",
                a.name()
            );
        }
        let batch = Batch::new(vec![1, 3, 0, 6, 2], 1, 5);
        assert_eq!(
            m.run_with_cache(&batch, &[]).unwrap().0,
            back.run_with_cache(&batch, &[]).unwrap().0
        );
        // and from a checkpoint's tensors (shapes plus the head count)
        let map: BTreeMap<String, (Vec<usize>, Vec<f32>)> = m
            .params
            .iter()
            .map(|p| {
                (
                    p.name().to_string(),
                    (p.shape().to_vec(), p.value().to_vec()),
                )
            })
            .collect();
        let g = gpt_from_tensors(&map, 2, act).unwrap();
        assert_eq!(g.cfg, cfg);
    }
}

#[test]
fn nanogpt_round_trips_bit_for_bit_and_names_what_it_cannot_hold() {
    use mechlab_engine::hooks::{Batch, HookedModel};
    let cfg = GptConfig {
        n_layers: 2,
        d_model: 8,
        n_heads: 2,
        d_head: 4,
        d_mlp: 32,
        attn_only: false,
        act_fn: ActFn::Gelu,
        n_ctx: 5,
        d_vocab: 7,
        tied_embeddings: true,
        ..GptConfig::default()
    };
    let mut m = model::<f32>(&cfg);
    m.param_mut("unembed.b_U")
        .unwrap()
        .value_mut()
        .iter_mut()
        .for_each(|x| *x = 0.0);
    let (t, j) = to_nanogpt(&m).unwrap();
    assert_eq!(j["n_layer"], 2);
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), &t, &j).unwrap();
    let (j2, t2) = read::<f32>(dir.path()).unwrap();
    let mut back = from_export(&j2, &t2).unwrap();
    assert_eq!(back.cfg, cfg);
    for (a, b) in m.params.iter().zip(&back.params) {
        assert!(
            a.value()
                .iter()
                .zip(b.value())
                .all(|(x, y)| x.to_bits() == y.to_bits()),
            "{}",
            a.name()
        );
    }
    let batch = Batch::new(vec![1, 3, 0, 6, 2], 1, 5);
    assert_eq!(
        m.run_with_cache(&batch, &[]).unwrap().0,
        back.run_with_cache(&batch, &[]).unwrap().0
    );
    // what nanoGPT cannot hold
    let relu = GptConfig {
        act_fn: ActFn::Relu,
        ..cfg.clone()
    };
    assert!(to_nanogpt(&model::<f32>(&relu))
        .unwrap_err()
        .contains("exact GELU"));
    let b_u = model::<f32>(&cfg);
    assert!(to_nanogpt(&b_u).unwrap_err().contains("unembed.b_U"));
}

/// The per-head layouts by hand: TransformerLens's `W_Q[h][i][c]` is our
/// row `h·d_head + c`, column `i`; `W_O[h][c][i]` our row `i`, column `h·d_head + c`.
#[test]
fn per_head_layouts_are_transformer_lens_s() {
    let cfg = GptConfig {
        n_layers: 1,
        d_model: 4,
        n_heads: 2,
        d_head: 3,
        n_ctx: 2,
        d_vocab: 3,
        ..GptConfig::default()
    };
    let m = model::<f64>(&cfg);
    let (t, j) = to_transformer_lens(&m).unwrap();
    let get = |n: &str| t.iter().find(|x| x.0 == n).unwrap().2.clone();
    let (wq, wo) = (
        m.param("blocks.0.attn.W_Q").unwrap().value(),
        m.param("blocks.0.attn.W_O").unwrap().value(),
    );
    let (tq, to) = (get("blocks.0.attn.W_Q"), get("blocks.0.attn.W_O"));
    for h in 0..2 {
        for c in 0..3 {
            for i in 0..4 {
                assert_eq!(tq[(h * 4 + i) * 3 + c], wq[(h * 3 + c) * 4 + i]);
                assert_eq!(to[(h * 3 + c) * 4 + i], wo[i * 6 + h * 3 + c]);
            }
        }
    }
    assert_eq!(j["attn_only"], true);
    assert_eq!(j["d_mlp"], Value::Null);
    let rpe = GptConfig {
        positional_embedding_type: PositionalEmbedding::Rpe,
        ..cfg
    };
    assert!(to_transformer_lens(&model::<f64>(&rpe))
        .unwrap_err()
        .contains("rpe"));
    let mut bad = j.clone();
    bad["act_fn"] = json!("silu");
    bad["attn_only"] = json!(false);
    bad["d_mlp"] = json!(8);
    assert!(gpt_config(&bad).unwrap_err().contains("act_fn"));
}
