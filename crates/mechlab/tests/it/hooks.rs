//! Named hook points of every model: the analysis forward against each model's
//! fused prediction / loss and its probes, pattern rows, unknown names, and the
//! interventions (zero, mean, patch) of `run_with_hooks`.

use mechlab::papers::induction::data::{generate, MarkovSpec};
use mechlab::papers::induction::full::{Full, FullConfig};
use mechlab::papers::induction::simplified::{Simplified, SimplifiedConfig};
use mechlab::papers::selection::data::SeqData;
use mechlab::papers::selection::hooks::PAD;
use mechlab::papers::selection::model::{ModelConfig, SelectionModel};
use mechlab::papers::topic::data::{self as tdata, LdaConfig, LdaModel, MlmSet, NO_LABEL};
use mechlab::papers::topic::model::*;
use mechlab::rng::{stream, Stream};
use mechlab_engine::hooks::{Ablation, Batch, Hook, HookError, HookFn, HookedModel, Tensor};
use mechlab_engine::{Float, Parameters};
use std::sync::Arc;

/// Moves every parameter to a generic point (away from the symmetric inits).
fn perturb<T: Float>(m: &mut dyn Parameters<T>, scale: f64) {
    let mut i = 0usize;
    m.visit_mut(&mut |p| {
        for v in p.value_mut() {
            *v = T::of(v.as_f64() + scale * ((i as f64 * 1.7).sin() + 0.2));
            i += 1;
        }
    });
}

fn close(a: &[f64], b: &[f64], tol: f64, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "{what}[{i}]: {x} vs {y}"
        );
    }
}

fn hook(name: &str, ablation: Ablation) -> Hook {
    Hook {
        name: name.into(),
        ablation,
        heads: None,
        positions: None,
    }
}

/// The checks every model shares: empty cache, unknown names, pattern rows,
/// and each intervention kind on every point.
pub(crate) fn common(
    m: &mut dyn HookedModel,
    batch: &Batch,
    corrupt: &Batch,
    exact_points: &[&str],
) {
    let names: Vec<String> = m.hook_points().iter().map(|p| p.name.clone()).collect();
    let refs: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
    let (y, empty) = m.run_with_cache(batch, &[]).unwrap();
    assert!(empty.is_empty());
    let (y2, cache) = m.run_with_cache(batch, &refs).unwrap();
    assert_eq!(y, y2, "a cache changes nothing");
    assert_eq!(cache.len(), names.len());
    // unknown names are errors naming the valid ones, for reads and for hooks
    let err = m
        .run_with_cache(batch, &["blocks.7.attn.hook_pattern"])
        .unwrap_err();
    assert!(matches!(err, HookError::Unknown { .. }), "{err}");
    let err = m
        .run_with_hooks(batch, &[hook("blocks.0.hook_nothing", Ablation::Zero)])
        .unwrap_err();
    assert!(
        err.to_string().contains("blocks.0.attn.hook_pattern"),
        "{err}"
    );
    // every pattern row sums to 1 (or is empty: a query with no key)
    for (n, t) in cache.iter().filter(|(n, _)| n.ends_with("hook_pattern")) {
        let k = *t.shape.last().unwrap();
        for row in t.data.chunks(k) {
            let s: f64 = row.iter().sum();
            assert!((s - 1.0).abs() < 1e-12 || s == 0.0, "{n}: row sums to {s}");
        }
    }
    let (y_bad, bad_cache) = m.run_with_cache(corrupt, &refs).unwrap();
    assert_ne!(y, y_bad, "the corrupted input changes the output");
    for name in &refs {
        let clean = &cache[*name];
        // patching an activation with itself is exactly the identity
        let same = m
            .run_with_hooks(batch, &[hook(name, Ablation::patch(clean.clone()))])
            .unwrap();
        assert_eq!(same, y, "{name}: self-patch");
        // zero and mean ablations change the output
        let zero = m
            .run_with_hooks(batch, &[hook(name, Ablation::Zero)])
            .unwrap();
        assert_ne!(zero, y, "{name}: zero ablation");
        let mean = m
            .run_with_hooks(batch, &[hook(name, Ablation::Mean)])
            .unwrap();
        let per = clean.numel() / clean.shape[0];
        if clean.data.chunks(per).any(|c| c != &clean.data[..per]) {
            assert_ne!(mean, y, "{name}: mean ablation");
        } else {
            assert_eq!(mean, y, "{name}: the mean of a constant is itself");
        }
        // patching the clean activation into the corrupted run moves its output
        let patched = m
            .run_with_hooks(corrupt, &[hook(name, Ablation::patch(clean.clone()))])
            .unwrap();
        if bad_cache[*name] != *clean {
            assert_ne!(patched, y_bad, "{name}: clean patch into the corrupted run");
        }
        if exact_points.contains(name) {
            assert_eq!(
                patched, y,
                "{name}: patching every position recovers the clean run"
            );
        }
        // a patch of the wrong shape is an error, not a panic
        let mut wrong = bad_cache[*name].clone();
        wrong.shape.push(1);
        assert!(m
            .run_with_hooks(batch, &[hook(name, Ablation::patch(wrong))])
            .is_err());
        hook_functions(m, batch, name, clean, &y);
    }
}

fn call(f: impl Fn(&Tensor) -> Result<Tensor, String> + Send + Sync + 'static) -> Ablation {
    Ablation::Call(HookFn(Arc::new(f)))
}

/// A hook function (Python's `fwd_hooks`) gets the activation and its result
/// replaces it: the identity changes nothing, doubling is the patch of the
/// doubled activation, and a failing or misshapen function is an error naming
/// the hook.
fn hook_functions(m: &mut dyn HookedModel, batch: &Batch, name: &str, clean: &Tensor, y: &Tensor) {
    let same = m
        .run_with_hooks(batch, &[hook(name, call(|t| Ok(t.clone())))])
        .unwrap();
    assert_eq!(&same, y, "{name}: the identity function");
    let twice = |t: &Tensor| Tensor::new(t.shape.clone(), t.data.iter().map(|x| 2.0 * x).collect());
    let by_fn = m
        .run_with_hooks(batch, &[hook(name, call(move |t| Ok(twice(t))))])
        .unwrap();
    let by_patch = m
        .run_with_hooks(batch, &[hook(name, Ablation::patch(twice(clean)))])
        .unwrap();
    assert_eq!(
        by_fn, by_patch,
        "{name}: a function is the patch of its result"
    );
    let e = m
        .run_with_hooks(
            batch,
            &[hook(name, call(|_| Err("it raised: boom".into())))],
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains(name) && e.contains("boom"), "{e}");
    let e = m
        .run_with_hooks(batch, &[hook(name, call(|_| Ok(Tensor::zeros(vec![1]))))])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(name) && e.contains("the hook function returned shape [1]"),
        "{e}"
    );
}

fn markov(n: usize, l: usize, seed: u64) -> (Vec<u8>, Batch) {
    let spec = MarkovSpec {
        n_seqs: n,
        seq_len: l,
        ..MarkovSpec::default()
    };
    let data = generate(&spec, seed).unwrap();
    let ctx: Vec<u32> = data
        .tokens
        .chunks(l + 1)
        .flat_map(|s| s[..l].iter().map(|&t| t as u32))
        .collect();
    (data.tokens.clone(), Batch::new(ctx, n, l))
}

/// ŷ and both patterns against the fused `predict` and the probes' `patterns`.
fn induction_matches<M>(m: &mut M, s: usize, h: usize)
where
    M: HookedModel + mechlab::papers::induction::probes::InductionModel<f64>,
{
    let (l, n) = (12, 6);
    let (tokens, batch) = markov(n, l, 5);
    let mut fused = vec![0.0; n * s];
    m.predict(&tokens, l, &mut fused);
    let names = ["blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern"];
    let (y, cache) = m.run_with_cache(&batch, &names).unwrap();
    assert_eq!(y.shape, vec![n, s]);
    close(&y.data, &fused, 1e-12, "ŷ vs predict");
    let (p1, p2) = (&cache[names[0]], &cache[names[1]]);
    let np = l + 1;
    assert_eq!(p1.shape, vec![n, h, np, np]);
    assert_eq!(p2.shape, vec![n, 1, 1, l]);
    for b in 0..n {
        let (q1, q2) = m.patterns(&tokens[b * np..(b + 1) * np], l);
        close(&p2.data[b * l..(b + 1) * l], &q2, 1e-12, "layer-2 pattern");
        for i in 0..np {
            for hd in 0..h {
                for r in 0..2 * h {
                    let probe = q1[(i * h + hd) * 2 * h + r];
                    let ours = if r <= i {
                        p1.data[((b * h + hd) * np + i) * np + i - r]
                    } else {
                        0.0
                    };
                    assert!((probe - ours).abs() < 1e-14, "layer 1 b{b} i{i} h{hd} r{r}");
                }
            }
        }
    }
}

#[test]
fn simplified_model_matches_its_fused_path_and_takes_hooks() {
    let mut m = Simplified::<f64>::new(&SimplifiedConfig::default());
    perturb(&mut m, 0.4);
    m.a.value_mut()[0] = 3.0;
    induction_matches(&mut m, 3, 3);
    let (_, batch) = markov(4, 10, 7);
    let (_, corrupt) = markov(4, 10, 8);
    common(&mut m, &batch, &corrupt, &["hook_embed"]);
}

#[test]
fn full_model_matches_its_fused_path_and_takes_hooks() {
    let mut m = Full::<f64>::new(&FullConfig::default());
    perturb(&mut m, 0.5);
    m.a.value_mut()[0] = 3.0;
    induction_matches(&mut m, 3, 3);
    let (_, batch) = markov(4, 10, 7);
    let (_, corrupt) = markov(4, 10, 8);
    common(&mut m, &batch, &corrupt, &["hook_embed"]);
}

#[test]
fn f32_induction_model_widens_to_its_own_prediction() {
    let mut m = Simplified::<f32>::new(&SimplifiedConfig::default());
    let (tokens, batch) = markov(3, 10, 2);
    let mut fused = vec![0f32; 9];
    m.predict(&tokens, 10, &mut fused);
    let (y, _) = m.run_with_cache(&batch, &[]).unwrap();
    let f: Vec<f64> = fused.iter().map(|v| *v as f64).collect();
    close(&y.data, &f, 1e-5, "f32 ŷ");
}

#[test]
fn head_and_position_restrictions_touch_only_their_entries() {
    let mut m = Simplified::<f64>::new(&SimplifiedConfig::default());
    perturb(&mut m, 0.4);
    let (_, batch) = markov(2, 10, 3);
    let name = "blocks.0.attn.hook_z";
    let y = m.run_with_cache(&batch, &[]).unwrap().0;
    // one head at the query position alone (position 10) reaches the output
    let only_query = Hook {
        heads: Some(vec![1]),
        positions: Some(vec![10]),
        ..hook(name, Ablation::Zero)
    };
    assert_ne!(m.run_with_hooks(&batch, &[only_query]).unwrap(), y);
    // a head index past the axis and a head restriction on a point without heads are errors
    let bad = Hook {
        heads: Some(vec![3]),
        ..hook(name, Ablation::Zero)
    };
    assert!(matches!(
        m.run_with_hooks(&batch, &[bad]),
        Err(HookError::Invalid { .. })
    ));
    let no_heads = Hook {
        heads: Some(vec![0]),
        ..hook("blocks.1.ffn.hook_kernel", Ablation::Zero)
    };
    assert!(matches!(
        m.run_with_hooks(&batch, &[no_heads]),
        Err(HookError::Invalid { .. })
    ));
    // the kernel of one subset at every key, patched from another run, equals the
    // output of a run where only that entry moved: hooks compose in order
    let (_, cache) = m
        .run_with_cache(&batch, &["blocks.1.ffn.hook_kernel"])
        .unwrap();
    let k = cache["blocks.1.ffn.hook_kernel"].clone();
    let mut k2 = k.clone();
    k2.data.iter_mut().for_each(|v| *v *= 2.0);
    let twice = m
        .run_with_hooks(
            &batch,
            &[
                hook("blocks.1.ffn.hook_kernel", Ablation::Zero),
                hook("blocks.1.ffn.hook_kernel", Ablation::patch(k2)),
            ],
        )
        .unwrap();
    let direct = m
        .run_with_hooks(
            &batch,
            &[hook(
                "blocks.1.ffn.hook_kernel",
                Ablation::patch(Tensor::new(
                    k.shape.clone(),
                    k.data.iter().map(|v| v * 2.0).collect(),
                )),
            )],
        )
        .unwrap();
    assert_eq!(twice, direct);
}

fn selection_model() -> SelectionModel<f64> {
    let data = Arc::new(SeqData {
        n: 0,
        n_ctx: 1,
        d_vocab: 6,
        ids: vec![],
        lens: vec![],
        y: vec![],
        signal: vec![],
    });
    let mut m = SelectionModel::<f64>::new(
        &ModelConfig {
            d_model: 5,
            ..ModelConfig::default()
        },
        data,
        1,
    );
    perturb(&mut m, 0.7);
    m
}

#[test]
fn selection_model_matches_attend_and_evaluate_and_takes_hooks() {
    let mut m = selection_model();
    let ids = vec![0, 1, 2, 3, 4, 5, PAD, PAD, 1, 1, 3, PAD, 2, 5, 4, 3];
    let lens = vec![4, 2, 3, 4];
    let y = vec![1.0, -1.0, 1.0, -1.0];
    let data = SeqData {
        n: 4,
        n_ctx: 4,
        d_vocab: 6,
        ids: ids.iter().map(|&t| if t == PAD { 0 } else { t }).collect(),
        lens,
        y: y.clone(),
        signal: vec![],
    };
    let (pattern, logits) = m.attend(&data);
    let (loss, _) = m.evaluate(&data);
    let batch = Batch::new(ids, 4, 4).with_targets(vec![1, -1, 1, -1]);
    let (f, cache) = m
        .run_with_cache(&batch, &["blocks.0.attn.hook_pattern"])
        .unwrap();
    close(&f.data, &logits, 1e-12, "logit vs attend");
    close(
        &cache["blocks.0.attn.hook_pattern"].data,
        &pattern,
        1e-14,
        "pattern",
    );
    let ours: f64 = f
        .data
        .iter()
        .zip(&y)
        .map(|(f, y)| mechlab::papers::selection::model::softplus(-y * f))
        .sum::<f64>()
        / 4.0;
    assert!((ours - loss).abs() < 1e-12, "{ours} vs {loss}");
    let corrupt = Batch::new(
        vec![5, 4, 3, 2, 0, 0, PAD, PAD, 2, 2, 1, PAD, 4, 1, 0, 0],
        4,
        4,
    );
    // padding differs between the runs, so only the downstream hook_z recovers exactly
    common(&mut m, &batch, &corrupt, &["blocks.0.attn.hook_z"]);
    let bad = Batch::new(vec![0, PAD, 1, 2], 1, 4);
    assert!(matches!(
        m.run_with_cache(&bad, &[]),
        Err(HookError::Input(_))
    ));
}

fn tiny_topic(seed: u64) -> (LdaModel, MlmSet) {
    let cfg = LdaConfig {
        n_topics: 3,
        words_per_topic: 4,
        min_len: 8,
        max_len: 8,
        mask_prob: 0.3,
        ..LdaConfig::default()
    };
    let lda = LdaModel::new(&cfg).unwrap();
    let mut rng = stream(seed, Stream::Data);
    let mut set = tdata::generate(&lda, &cfg, 4, &mut rng).to_mlm();
    tdata::mask_docs(&mut set, &cfg, lda.d_vocab(), &mut rng);
    (lda, set)
}

/// The documents of `set` (all of one length) as a batch with their labels.
fn topic_batch(set: &MlmSet) -> Batch {
    let l = set.range(0).len();
    assert!(
        (0..set.len()).all(|d| set.range(d).len() == l),
        "one length per batch"
    );
    let targets = set
        .label
        .iter()
        .map(|&t| if t == NO_LABEL { -1 } else { t as i64 })
        .collect();
    Batch::new(set.input.clone(), set.len(), l).with_targets(targets)
}

fn topic_configs() -> Vec<TopicMlmConfig> {
    let base = TopicMlmConfig {
        dtype: mechlab::experiment::Dtype::F64,
        ..TopicMlmConfig::default()
    };
    vec![
        base.clone(),
        TopicMlmConfig {
            attention: AttnKind::Trained,
            embedding: EmbedKind::Trained,
            residual: true,
            layer_norm: true,
            decoder: DecoderKind::Trained,
            d_model: 7,
            ..base.clone()
        },
        TopicMlmConfig {
            attention: AttnKind::Trained,
            embedding: EmbedKind::Trained,
            decoder: DecoderKind::Tied,
            bert_embedding_ln: true,
            loss: LossKind::Mse,
            ..base.clone()
        },
        TopicMlmConfig {
            value: ValueKind::Blocks,
            residual: true,
            ..base
        },
    ]
}

#[test]
fn topic_model_matches_its_loss_and_attention_probe_and_takes_hooks() {
    let (lda, set) = tiny_topic(2);
    let (_, other) = tiny_topic(9);
    let v = lda.d_vocab();
    for (ci, cfg) in topic_configs().iter().enumerate() {
        let mut m = TopicMlm::<f64>::new(cfg, v, &lda.topic_of_token(), set.max_len(), 4).unwrap();
        perturb(&mut m, 0.3);
        let batch = topic_batch(&set);
        let (logits, cache) = m
            .run_with_cache(&batch, &["blocks.0.attn.hook_pattern"])
            .unwrap();
        let l = batch.seq_len;
        assert_eq!(logits.shape, vec![set.len(), l, v]);
        for d in 0..set.len() {
            let r = set.range(d);
            let probe = m.attention_pattern(&set.input[r.clone()], &set.hidden[r.clone()]);
            let ours = &cache["blocks.0.attn.hook_pattern"].data[d * l * l..(d + 1) * l * l];
            close(ours, &probe, 1e-13, &format!("config {ci} doc {d} pattern"));
            // the fused loss of this document from our logits
            let (mut sum, mut n) = (0.0, 0);
            for (j, &lab) in set.label[r.clone()].iter().enumerate() {
                if lab == NO_LABEL {
                    continue;
                }
                let row = &logits.data[(d * l + j) * v..][..v];
                n += 1;
                sum += match cfg.loss {
                    LossKind::CrossEntropy => {
                        let mx = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                        mx + row.iter().map(|x| (x - mx).exp()).sum::<f64>().ln()
                            - row[lab as usize]
                    }
                    LossKind::Mse => {
                        row.iter()
                            .enumerate()
                            .map(|(i, x)| (x - (i == lab as usize) as u8 as f64).powi(2))
                            .sum::<f64>()
                            / v as f64
                    }
                };
            }
            let fused = m.loss(&set, &[d as u32]);
            let ours = sum / n.max(1) as f64;
            assert!(
                (ours - fused).abs() < 1e-12 * (1.0 + fused.abs()),
                "config {ci} doc {d}: {ours} vs {fused}"
            );
        }
        // same masks, other words: the embedding carries the whole input
        let mut corrupt = topic_batch(&other);
        corrupt.targets = batch.targets.clone();
        let exact: &[&str] = if cfg.residual {
            &["hook_embed"]
        } else {
            &["hook_embed", "blocks.0.attn.hook_z"]
        };
        common(&mut m, &batch, &corrupt, exact);
    }
}

#[test]
fn topic_inputs_are_checked() {
    let (lda, _) = tiny_topic(2);
    let v = lda.d_vocab();
    let mut m = TopicMlm::<f64>::new(&topic_configs()[0], v, &lda.topic_of_token(), 4, 0).unwrap();
    let all_masked = Batch::new(vec![4, 5], 1, 2).with_targets(vec![4, 5]);
    let too_big = Batch::new(vec![4, v as u32], 1, 2);
    let short_targets = Batch::new(vec![4, 5], 1, 2).with_targets(vec![-1]);
    for b in [all_masked, too_big, short_targets] {
        assert!(matches!(
            m.run_with_cache(&b, &[]),
            Err(HookError::Input(_))
        ));
    }
}

/// The general transformer: every hook point, with MLPs and LayerNorm.
#[test]
fn gpt_takes_every_kind_of_hook() {
    use mechlab_engine::gpt::{Gpt, GptConfig};
    let cfg = GptConfig {
        n_layers: 2,
        d_model: 8,
        n_heads: 2,
        d_head: 4,
        d_mlp: 16,
        attn_only: false,
        n_ctx: 6,
        d_vocab: 7,
        ..GptConfig::default()
    };
    let mut m = Gpt::<f64>::new(&cfg, &mut stream(3, Stream::Init)).unwrap();
    perturb(&mut m, 0.1);
    let batch = Batch::new(vec![1, 2, 3, 1, 2, 4, 0, 5, 6, 0, 5, 3], 2, 6);
    let corrupt = Batch::new(vec![3, 2, 1, 6, 2, 4, 0, 1, 6, 0, 2, 3], 2, 6);
    common(&mut m, &batch, &corrupt, &["hook_embed"]);
    // the gradient pass's chunked, parallel forward records what the one-chunk
    // hooked forward does (to rounding), on a batch that spans every chunk
    let big = Batch::new((0..24 * 6).map(|i| (i * 5 % 7) as u32).collect(), 24, 6);
    let names: Vec<String> = m.hook_points().iter().map(|p| p.name.clone()).collect();
    let refs: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
    let (y1, c1) = m.run_with_cache(&big, &refs).unwrap();
    let (y2, c2, _) = m
        .run_with_grads(&big, &refs, &mut |y| Ok(y.clone()))
        .unwrap();
    close(&y1.data, &y2.data, 1e-12, "logits");
    for n in &refs {
        assert_eq!(c1[*n].shape, c2[*n].shape, "{n}");
        close(&c1[*n].data, &c2[*n].data, 1e-12, n);
    }
}
