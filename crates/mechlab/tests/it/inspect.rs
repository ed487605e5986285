//! `load_model`: tiny runs of each experiment trained through the library, loaded
//! back from their folders, against a model restored in process from the same
//! checkpoint (its fused prediction or loss); and the load errors.

use mechlab::inspect::{load_model, LoadError};
use mechlab::papers::induction::data::{generate, MarkovSpec};
use mechlab::papers::induction::full::{Full, FullConfig};
use mechlab::papers::induction::simplified::{Simplified, SimplifiedConfig};
use mechlab::papers::selection::data::SeqData;
use mechlab::papers::selection::model::{ModelConfig, SelectionModel};
use mechlab::papers::topic::data::{LdaConfig, LdaModel, NO_LABEL};
use mechlab::papers::topic::model::{TopicMlm, TopicMlmConfig};
use mechlab::run::checkpoint;
use mechlab::run::RunCtx;
use mechlab_engine::hooks::{Batch, HookedModel};
use mechlab_engine::Parameters;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::support::viewer;
use viewer::viewer_matches_activations;

fn train(experiment: &str, preset: &str, overrides: &[&str], dir: &Path) -> PathBuf {
    let exp = mechlab::papers::registry().find(experiment).unwrap();
    let mut t = exp.default_config();
    let p = mechlab::papers::registry().find_preset(preset).unwrap();
    mechlab::config::overlay(
        &mut t,
        &mechlab::config::parse(p.text, preset).unwrap(),
        preset,
    )
    .unwrap();
    for o in overrides {
        mechlab::config::apply_override(&mut t, o).unwrap();
    }
    let prepared = exp.prepare(&t, preset).unwrap();
    let run = dir.join(preset);
    let mut ctx = RunCtx::create(&run, t, "test", true).unwrap();
    let s = prepared.run(&mut ctx).unwrap();
    ctx.finish(&s).unwrap();
    run
}

fn restore<M: Parameters<f64>>(m: &mut M, run: &Path) {
    let ckpt = checkpoint::latest(&run.join("checkpoints")).unwrap();
    checkpoint::load::<f64>(&ckpt)
        .unwrap()
        .apply_params(m)
        .unwrap();
}

const INDUCTION: &[&str] = &[
    "data.n_train=64",
    "data.n_val=32",
    "data.seq_len=12",
    "train.steps=4",
    "probe.gen_lengths=[12]",
    "probe.gen_alphas=[0.1]",
    "probe.gen_n=16",
];

#[test]
fn induction_runs_load_as_their_trained_models() {
    let tmp = tempfile::tempdir().unwrap();
    let (l, n) = (12, 5);
    let data = generate(
        &MarkovSpec {
            n_seqs: n,
            seq_len: l,
            ..MarkovSpec::default()
        },
        3,
    )
    .unwrap();
    let ctx: Vec<u32> = data
        .tokens
        .chunks(l + 1)
        .flat_map(|s| s[..l].iter().map(|&t| t as u32))
        .collect();
    let batch = Batch::new(ctx, n, l);
    for (preset, full) in [("induction-simplified", false), ("induction-full", true)] {
        let mut over = INDUCTION.to_vec();
        if full {
            // a large rate, so that four steps move the parameters visibly
            over.push("train.lr=1.0");
        }
        let run = train("induction", preset, &over, tmp.path());
        // The report's viewers: the three copier heads, and the classifier's query.
        assert_eq!(viewer_matches_activations(&run, "attention"), 3);
        assert_eq!(viewer_matches_activations(&run, "attention_l2"), 1);
        let mut loaded = load_model(&mechlab::papers::registry(), &run, None).unwrap();
        let (y, _) = loaded.run_with_cache(&batch, &[]).unwrap();
        let (mut fused, mut fresh) = (vec![0.0; n * 3], vec![0.0; n * 3]);
        if full {
            let cfg = FullConfig {
                w_plus: 1.0,
                w_minus: 0.01,
                ..FullConfig::default()
            };
            let mut m = Full::<f64>::new(&cfg);
            m.predict(&data.tokens, l, &mut fresh);
            restore(&mut m, &run);
            m.predict(&data.tokens, l, &mut fused);
        } else {
            let mut m = Simplified::<f64>::new(&SimplifiedConfig::default());
            m.predict(&data.tokens, l, &mut fresh);
            restore(&mut m, &run);
            m.predict(&data.tokens, l, &mut fused);
        }
        for (i, (a, b)) in y.data.iter().zip(&fused).enumerate() {
            assert!((a - b).abs() < 1e-12, "{preset} ŷ[{i}]: {a} vs {b}");
        }
        assert!(
            fused.iter().zip(&fresh).any(|(a, b)| (a - b).abs() > 1e-9),
            "{preset}: training moved nothing, the test would not see a wrong checkpoint"
        );
        // an earlier step loads other parameters
        let (y0, _) = load_model(&mechlab::papers::registry(), &run, Some(0))
            .unwrap()
            .run_with_cache(&batch, &[])
            .unwrap();
        assert_ne!(y0, y);
    }
}

#[test]
fn selection_run_loads_with_the_vocabulary_of_its_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let run = train(
        "selection",
        "selection-synthetic",
        &["synthetic.n_train=128", "synthetic.n_test=64"],
        tmp.path(),
    );
    assert_eq!(viewer_matches_activations(&run, "attention"), 1);
    let mut loaded = load_model(&mechlab::papers::registry(), &run, None).unwrap();
    // the preset's vocabulary: 4 + 4 + 24 tokens, d_model 64
    let data = Arc::new(SeqData {
        n: 0,
        n_ctx: 1,
        d_vocab: 32,
        ids: vec![],
        lens: vec![],
        y: vec![],
        signal: vec![],
    });
    let cfg = ModelConfig::default();
    let mut m = SelectionModel::<f64>::new(&cfg, data, 0);
    restore(&mut m, &run);
    let seqs = SeqData {
        n: 3,
        n_ctx: 5,
        d_vocab: 32,
        ids: vec![0, 9, 17, 30, 2, 4, 5, 6, 7, 8, 31, 1, 12, 0, 0],
        lens: vec![5, 5, 3],
        y: vec![1.0, -1.0, 1.0],
        signal: vec![],
    };
    let (_, logits) = m.attend(&seqs);
    let pad = mechlab::papers::selection::hooks::PAD;
    let batch = Batch::new(
        vec![0, 9, 17, 30, 2, 4, 5, 6, 7, 8, 31, 1, 12, pad, pad],
        3,
        5,
    );
    let (f, _) = loaded.run_with_cache(&batch, &[]).unwrap();
    for (a, b) in f.data.iter().zip(&logits) {
        assert!((a - b).abs() < 1e-12 * (1.0 + b.abs()), "{a} vs {b}");
    }
    assert!(
        logits.iter().any(|v| v.abs() > 1e-6),
        "trained logits are not all 0"
    );
}

#[test]
fn topic_run_loads_in_f32_and_matches_the_fused_loss() {
    let tmp = tempfile::tempdir().unwrap();
    let run = train(
        "topic",
        "topic-attention",
        &[
            "data.n_train=40",
            "data.n_dev=10",
            "data.n_test=10",
            "data.min_len=10",
            "data.max_len=10",
            "train.steps=5",
            "mlm.batch_size=10",
            "probe.docs=5",
        ],
        tmp.path(),
    );
    // f32 weights, widened exactly into the file and the viewer alike.
    assert_eq!(viewer_matches_activations(&run, "attention"), 1);
    let mut loaded = load_model(&mechlab::papers::registry(), &run, None).unwrap();
    let cfg_text = std::fs::read_to_string(run.join("config.toml")).unwrap();
    assert!(
        cfg_text.contains("dtype = \"f32\""),
        "the preset runs in f32"
    );
    let data_cfg = LdaConfig {
        min_len: 10,
        max_len: 10,
        n_train: 40,
        n_dev: 10,
        n_test: 10,
        ..LdaConfig::default()
    };
    let lda = LdaModel::new(&data_cfg).unwrap();
    let set = mechlab::papers::topic::make_set(&lda, &data_cfg, 3, 5, 30);
    let model_cfg = TopicMlmConfig {
        attention: mechlab::papers::topic::model::AttnKind::Trained,
        value: mechlab::papers::topic::model::ValueKind::Blocks,
        ..TopicMlmConfig::default()
    };
    let mut m = TopicMlm::<f32>::new(
        &model_cfg,
        lda.d_vocab(),
        &lda.topic_of_token(),
        set.max_len(),
        0,
    )
    .unwrap();
    let fresh = m.loss(&set, &[0, 1, 2]);
    let ckpt = checkpoint::latest(&run.join("checkpoints")).unwrap();
    checkpoint::load::<f32>(&ckpt)
        .unwrap()
        .apply_params(&mut m)
        .unwrap();
    let fused = m.loss(&set, &[0, 1, 2]);
    assert!((fused - fresh).abs() > 1e-6, "training moved the loss");
    let l = set.range(0).len();
    let targets = set
        .label
        .iter()
        .map(|&t| if t == NO_LABEL { -1 } else { t as i64 })
        .collect();
    let batch = Batch::new(set.input.clone(), 3, l).with_targets(targets);
    let (logits, _) = loaded.run_with_cache(&batch, &[]).unwrap();
    assert_eq!(logits, m.run_with_cache(&batch, &[]).unwrap().0);
    let v = lda.d_vocab();
    let (mut sum, mut n) = (0.0, 0);
    for (j, &lab) in set.label.iter().enumerate() {
        if lab != NO_LABEL {
            let row = &logits.data[j * v..(j + 1) * v];
            let mx = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            sum += mx + row.iter().map(|x| (x - mx).exp()).sum::<f64>().ln() - row[lab as usize];
            n += 1;
        }
    }
    let ours = sum / n as f64;
    assert!((ours - fused).abs() < 1e-5, "{ours} vs fused f32 {fused}");
}

#[test]
fn missing_steps_and_corrupt_files_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let run = train("induction", "induction-simplified", INDUCTION, tmp.path());
    let err = load_model(&mechlab::papers::registry(), &run, Some(3))
        .err()
        .unwrap();
    assert!(matches!(err, LoadError::NoStep { .. }), "{err}");
    assert!(err.to_string().contains("step_000003.safetensors"), "{err}");
    let ckpt = run.join("checkpoints").join(checkpoint::file_name(2));
    std::fs::write(&ckpt, b"not a checkpoint").unwrap();
    let err = load_model(&mechlab::papers::registry(), &run, Some(2))
        .err()
        .unwrap();
    assert!(err.to_string().contains("step_000002.safetensors"), "{err}");
    let err = load_model(
        &mechlab::papers::registry(),
        &tmp.path().join("nowhere"),
        None,
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("config.toml"), "{err}");
    let cfg = run.join("config.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        text.replace("kind = \"simplified\"", "kind = \"other\""),
    )
    .unwrap();
    let err = load_model(&mechlab::papers::registry(), &run, None)
        .err()
        .unwrap();
    assert!(err.to_string().contains("model.kind"), "{err}");
}
