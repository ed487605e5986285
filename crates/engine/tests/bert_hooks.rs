//! The BERT encoder's hook points on a tiny random model written as a Hugging Face
//! safetensors file: loading by name, interventions that must change the output,
//! patches that must be exactly the identity, and errors for names and shapes.

use mechlab_engine::bert::{Bert, BertConfig, BertError, BertWeights};
use mechlab_engine::hooks::{Ablation, Batch, Hook, HookError, HookedModel};
use rand::{Rng, SeedableRng};
use safetensors::tensor::{serialize, Dtype, TensorView};

const CONFIG: &str = r#"{"hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 2,
  "intermediate_size": 16, "vocab_size": 20, "max_position_embeddings": 10,
  "type_vocab_size": 2, "hidden_act": "gelu", "layer_norm_eps": 1e-12, "pad_token_id": 0}"#;

/// Every tensor of the tiny model, Hugging Face names, random values.
fn tensors(skip: &str, reshape: &str) -> Vec<(String, Vec<usize>, Vec<u8>)> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let (d, m) = (8, 16);
    let mut names: Vec<(String, Vec<usize>)> = vec![
        ("embeddings.word_embeddings.weight".into(), vec![20, d]),
        ("embeddings.position_embeddings.weight".into(), vec![10, d]),
        ("embeddings.token_type_embeddings.weight".into(), vec![2, d]),
        ("embeddings.LayerNorm.weight".into(), vec![d]),
        ("embeddings.LayerNorm.bias".into(), vec![d]),
    ];
    for l in 0..2 {
        for (n, s) in [
            ("attention.self.query", vec![d, d]),
            ("attention.self.key", vec![d, d]),
            ("attention.self.value", vec![d, d]),
            ("attention.output.dense", vec![d, d]),
            ("intermediate.dense", vec![m, d]),
            ("output.dense", vec![d, m]),
        ] {
            names.push((format!("encoder.layer.{l}.{n}.bias"), vec![s[0]]));
            names.push((format!("encoder.layer.{l}.{n}.weight"), s));
        }
        for n in ["attention.output.LayerNorm", "output.LayerNorm"] {
            names.push((format!("encoder.layer.{l}.{n}.weight"), vec![d]));
            names.push((format!("encoder.layer.{l}.{n}.bias"), vec![d]));
        }
    }
    names
        .into_iter()
        .filter(|(n, _)| n != skip)
        .map(|(n, mut s)| {
            if n == reshape {
                s[0] += 1;
            }
            let k: usize = s.iter().product();
            let bytes = (0..k)
                .flat_map(|_| (rng.random::<f32>() - 0.5).to_le_bytes())
                .collect();
            (n, s, bytes)
        })
        .collect()
}

fn file_bytes(skip: &str, reshape: &str) -> Vec<u8> {
    let t = tensors(skip, reshape);
    let views: Vec<(String, TensorView)> = t
        .iter()
        .map(|(n, s, b)| {
            (
                n.clone(),
                TensorView::new(Dtype::F32, s.clone(), b).unwrap(),
            )
        })
        .collect();
    serialize(views, None).unwrap()
}

fn tiny() -> Bert {
    let cfg = BertConfig::from_json_str(CONFIG, "config.json").unwrap();
    let w = BertWeights::from_bytes(&file_bytes("", ""), &cfg, "model.safetensors").unwrap();
    Bert::new(cfg, w)
}

/// Three sequences of length 6, the last padded after 4 tokens.
fn batch() -> Batch {
    Batch::new(
        vec![1, 5, 7, 9, 3, 2, 1, 4, 4, 8, 11, 2, 1, 6, 13, 2, 0, 0],
        3,
        6,
    )
}

fn hook(name: &str, ablation: Ablation) -> Hook {
    Hook {
        name: name.into(),
        ablation,
        heads: None,
        positions: None,
    }
}

#[test]
fn loader_names_the_missing_and_misshapen_tensor() {
    let cfg = BertConfig::from_json_str(CONFIG, "config.json").unwrap();
    let name = "encoder.layer.1.attention.self.key.weight";
    let e =
        BertWeights::from_bytes(&file_bytes(name, ""), &cfg, "m/model.safetensors").unwrap_err();
    assert!(matches!(e, BertError::MissingTensor { .. }));
    assert_eq!(
        e.to_string(),
        format!("m/model.safetensors: missing tensor `{name}`")
    );
    let e =
        BertWeights::from_bytes(&file_bytes("", name), &cfg, "m/model.safetensors").unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("m/model.safetensors: tensor `{name}` has shape [9, 8], the config needs [8, 8]")
    );
    let bytes = file_bytes("", "");
    let e = BertWeights::from_bytes(&bytes[..bytes.len() / 2], &cfg, "m/model.safetensors")
        .unwrap_err();
    assert!(e
        .to_string()
        .starts_with("m/model.safetensors: not a readable safetensors file"));
}

#[test]
fn patching_the_original_activation_is_exactly_the_identity() {
    let mut bert = tiny();
    let b = batch();
    let names = [
        "blocks.0.attn.hook_pattern",
        "blocks.1.attn.hook_z",
        "blocks.0.hook_resid_post",
        "blocks.1.mlp.hook_post",
    ];
    let (out, cache) = bert.run_with_cache(&b, &names).unwrap();
    assert_eq!(cache["blocks.0.attn.hook_pattern"].shape, [3, 2, 6, 6]);
    assert_eq!(cache["blocks.1.attn.hook_z"].shape, [3, 6, 2, 4]);
    assert_eq!(cache["blocks.0.hook_resid_post"].shape, [3, 6, 8]);
    for n in names {
        let h = hook(n, Ablation::patch(cache[n].clone()));
        assert_eq!(bert.run_with_hooks(&b, &[h]).unwrap(), out, "{n}");
    }
    // No hooks, and the mean over a batch of one, are the identity too.
    assert_eq!(bert.run_with_hooks(&b, &[]).unwrap(), out);
    let one = Batch::new(b.seq(0).to_vec(), 1, 6);
    let (o1, _) = bert.run_with_cache(&one, &[]).unwrap();
    let m = hook("blocks.0.attn.hook_pattern", Ablation::Mean);
    assert_eq!(bert.run_with_hooks(&one, &[m]).unwrap(), o1);
    // A sequence's result does not depend on its batch, up to f32 rounding (a
    // chunk's sequences share stacked products with more rows).
    for (a, b) in out.data[..6 * 8].iter().zip(&o1.data) {
        assert!((a - b).abs() < 1e-6, "{a} vs {b}");
    }
}

#[test]
fn interventions_change_the_output_where_they_should() {
    let mut bert = tiny();
    let b = batch();
    let (out, cache) = bert
        .run_with_cache(&b, &["blocks.1.attn.hook_pattern"])
        .unwrap();
    let differs = |o: &mechlab_engine::hooks::Tensor, rows: std::ops::Range<usize>| {
        o.data[rows.start * 8..rows.end * 8]
            .iter()
            .zip(&out.data[rows.start * 8..rows.end * 8])
            .any(|(a, b)| (a - b).abs() > 1e-6)
    };
    for (name, abl) in [
        ("blocks.0.attn.hook_pattern", Ablation::Zero),
        ("blocks.1.attn.hook_z", Ablation::Mean),
        ("blocks.0.hook_resid_post", Ablation::Zero),
        ("hook_embed", Ablation::Mean),
    ] {
        let o = bert.run_with_hooks(&b, &[hook(name, abl.clone())]).unwrap();
        assert!(
            differs(&o, 0..18),
            "{name} {abl:?} left the output unchanged"
        );
    }
    // Zeroing head 1's pattern at query 2 of the last layer changes only position 2.
    let h = Hook {
        heads: Some(vec![1]),
        positions: Some(vec![2]),
        ..hook("blocks.1.attn.hook_pattern", Ablation::Zero)
    };
    let o = bert.run_with_hooks(&b, &[h]).unwrap();
    for s in 0..3 {
        for p in 0..6 {
            assert_eq!(
                differs(&o, s * 6 + p..s * 6 + p + 1),
                p == 2,
                "seq {s} pos {p}"
            );
        }
    }
    // A patch from another batch moves the output.
    let other = Batch::new(
        vec![1, 9, 9, 9, 9, 2, 1, 3, 3, 3, 3, 2, 1, 5, 5, 2, 0, 0],
        3,
        6,
    );
    let (_, c2) = bert
        .run_with_cache(&other, &["blocks.1.attn.hook_pattern"])
        .unwrap();
    let p = hook(
        "blocks.1.attn.hook_pattern",
        Ablation::patch(c2["blocks.1.attn.hook_pattern"].clone()),
    );
    assert!(differs(&bert.run_with_hooks(&b, &[p]).unwrap(), 0..18));
    assert_ne!(
        cache["blocks.1.attn.hook_pattern"],
        c2["blocks.1.attn.hook_pattern"]
    );
}

#[test]
fn padding_is_masked_and_never_attended() {
    let mut bert = tiny();
    let b = batch();
    let (out, cache) = bert
        .run_with_cache(&b, &["blocks.0.attn.hook_pattern"])
        .unwrap();
    let pat = &cache["blocks.0.attn.hook_pattern"];
    // Sequence 2, keys 4 and 5 are [PAD]: zero attention from every query.
    for h in 0..2 {
        for q in 0..6 {
            let row = &pat.data[((2 * 2 + h) * 6 + q) * 6..][..6];
            assert_eq!((row[4], row[5]), (0.0, 0.0));
            assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-6);
        }
    }
    // The real positions equal the unpadded sequence's.
    let short = Batch::new(vec![1, 6, 13, 2], 1, 4);
    let (o, _) = bert.run_with_cache(&short, &[]).unwrap();
    for (a, b) in o.data.iter().zip(&out.data[12 * 8..16 * 8]) {
        assert!((a - b).abs() < 1e-5, "{a} vs {b}");
    }
}

#[test]
fn bad_requests_are_errors() {
    let mut bert = tiny();
    let b = batch();
    let e = bert
        .run_with_cache(&b, &["blocks.2.attn.hook_pattern"])
        .unwrap_err();
    assert!(matches!(e, HookError::Unknown { .. }), "{e}");
    assert!(e
        .to_string()
        .contains("did you mean `blocks.0.attn.hook_pattern`"));
    let e = bert
        .run_with_hooks(&b, &[hook("blocks.0.attn.hook_q_typo", Ablation::Zero)])
        .unwrap_err();
    assert!(matches!(e, HookError::Unknown { .. }));
    let e = bert
        .run_with_hooks(
            &b,
            &[Hook {
                heads: Some(vec![0]),
                ..hook("blocks.0.hook_resid_post", Ablation::Zero)
            }],
        )
        .unwrap_err();
    assert!(e.to_string().contains("no head axis"), "{e}");
    let e = bert
        .run_with_hooks(
            &b,
            &[Hook {
                heads: Some(vec![2]),
                ..hook("blocks.0.attn.hook_z", Ablation::Zero)
            }],
        )
        .unwrap_err();
    assert!(e.to_string().contains("head 2"), "{e}");
    let bad = mechlab_engine::hooks::Tensor::zeros(vec![3, 6, 7]);
    let e = bert
        .run_with_hooks(
            &b,
            &[hook("blocks.0.hook_resid_post", Ablation::patch(bad))],
        )
        .unwrap_err();
    assert!(e.to_string().contains("patch has shape [3, 6, 7]"), "{e}");
    let e = bert
        .run_with_cache(&Batch::new(vec![1, 25], 1, 2), &[])
        .unwrap_err();
    assert!(e.to_string().contains("token id 25"), "{e}");
    let e = bert
        .run_with_cache(&Batch::new(vec![1; 11], 1, 11), &[])
        .unwrap_err();
    assert!(e.to_string().contains("max_position_embeddings"), "{e}");
    // Every standard name has the standard layout.
    for p in bert.hook_points() {
        if let Some(l) = mechlab_engine::hooks::layout_of(&p.name) {
            assert_eq!(p.layout, l, "{}", p.name);
        }
    }
}

/// A hook function (resolved into a patch by a forward up to its point) is the
/// patch of its result: the identity changes nothing, and doubling one head's
/// output is the patch of the doubled activation at that head alone.
#[test]
fn hook_functions_are_the_patch_of_their_result() {
    use mechlab_engine::hooks::{HookFn, Tensor};
    use std::sync::Arc;
    let mut bert = tiny();
    let b = batch();
    let name = "blocks.0.attn.hook_z";
    let (out, cache) = bert.run_with_cache(&b, &[name]).unwrap();
    let call = |f: fn(&Tensor) -> Result<Tensor, String>| Ablation::Call(HookFn(Arc::new(f)));
    let same = bert
        .run_with_hooks(&b, &[hook(name, call(|t| Ok(t.clone())))])
        .unwrap();
    assert_eq!(same, out);
    let twice = |t: &Tensor| {
        Ok(Tensor::new(
            t.shape.clone(),
            t.data.iter().map(|x| 2.0 * x).collect(),
        ))
    };
    let mut h = hook(name, call(twice));
    h.heads = Some(vec![1]);
    let by_fn = bert.run_with_hooks(&b, &[h.clone()]).unwrap();
    h.ablation = Ablation::patch(twice(&cache[name]).unwrap());
    assert_eq!(bert.run_with_hooks(&b, &[h]).unwrap(), by_fn);
    assert_ne!(by_fn, out);
    let e = bert
        .run_with_hooks(&b, &[hook(name, call(|_| Ok(Tensor::zeros(vec![2]))))])
        .unwrap_err()
        .to_string();
    assert!(e.contains(name) && e.contains("returned shape [2]"), "{e}");
}

/// The tiny model with its attention sharpened `scale` times (scale 1: itself).
fn tiny_scaled(scale: f32) -> Bert {
    let cfg = BertConfig::from_json_str(CONFIG, "config.json").unwrap();
    let mut w = BertWeights::from_bytes(&file_bytes("", ""), &cfg, "model.safetensors").unwrap();
    for l in &mut w.layers {
        l.wq.iter_mut().for_each(|x| *x *= scale);
        l.wk.iter_mut().for_each(|x| *x *= scale);
    }
    Bert::new(cfg, w)
}

/// Gradients at every hook point of the encoder (`run_with_grads`, its `f64`
/// forward and backward) against central finite differences taken through the
/// same forward, on a batch with a padded sequence; generic and with
/// saturated attention; and the `f64` forward is the fused one to f32 rounding.
#[test]
fn encoder_gradients_at_every_hook_point_are_the_finite_differences() {
    for scale in [1.0f32, 40.0] {
        let mut bert = tiny_scaled(scale);
        let b = batch();
        let (fused, _) = bert.run_with_cache(&b, &[]).unwrap();
        let names: Vec<String> = bert.hook_points().iter().map(|p| p.name.clone()).collect();
        let refs: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let w: Vec<f64> = (0..fused.numel())
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let wt = mechlab_engine::hooks::Tensor::new(fused.shape.clone(), w.clone());
        let (y, acts, grads) = bert
            .run_with_grads(&b, &refs, &mut |_| Ok(wt.clone()))
            .unwrap();
        for (a, f) in y.data.iter().zip(&fused.data) {
            assert!((a - f).abs() < 1e-4, "scale {scale}: f64 {a} vs fused {f}");
        }
        assert_eq!(grads.len(), names.len());
        let mut saturated = false;
        for (si, name) in refs.iter().enumerate() {
            let site = mechlab_engine::bert::Site::from_index(si, 2).unwrap();
            assert_eq!(site.name(), *name);
            let (a, g) = (&acts[*name], &grads[*name]);
            assert_eq!(a.shape, g.shape, "{name}");
            if name.ends_with("hook_pattern") {
                saturated |= a.data.contains(&1.0);
            }
            for _ in 0..5 {
                let i = rng.random_range(0..a.numel());
                let eps = 1e-6;
                let metric = |sign: f64| {
                    let f = bert.forward_f64(&b.tokens, b.batch, b.seq_len, &mut |s, x| {
                        if s == site {
                            x[i] += sign * eps;
                        }
                    });
                    f.output.iter().zip(&w).map(|(o, c)| o * c).sum::<f64>()
                };
                let fd = (metric(1.0) - metric(-1.0)) / (2.0 * eps);
                let tol = 1e-6 * (1.0 + fd.abs().max(g.data[i].abs()));
                assert!(
                    (fd - g.data[i]).abs() < tol,
                    "scale {scale} {name}[{i}]: finite difference {fd}, backward {}",
                    g.data[i]
                );
            }
        }
        if scale > 1.0 {
            assert!(saturated, "some attention weight rounds to 1");
        }
    }
}

/// One model's buffers are resized, not reallocated, when the batch shape changes:
/// after longer and shorter batches (and more and fewer sequences) every output and
/// pattern is bit for bit what a fresh model gives on the same batch.
#[test]
fn a_model_reused_across_batch_shapes_gives_a_fresh_models_bits() {
    let long = batch();
    let short = Batch::new(vec![1, 9, 3, 1, 0, 0], 2, 3);
    let one = Batch::new(vec![1, 5, 7, 9, 3, 2, 4, 8, 2], 1, 9);
    let names = ["blocks.0.attn.hook_pattern", "blocks.1.mlp.hook_post"];
    let mut reused = tiny();
    for b in [&long, &short, &one, &short, &long] {
        let (out, cache) = reused.run_with_cache(b, &names).unwrap();
        let (fresh_out, fresh_cache) = tiny().run_with_cache(b, &names).unwrap();
        assert_eq!(out, fresh_out, "batch {} × {}", b.batch, b.seq_len);
        for n in names {
            assert_eq!(
                cache[n], fresh_cache[n],
                "{n}, batch {} × {}",
                b.batch, b.seq_len
            );
        }
    }
}
