//! markov-icl: the mechanism through the whole experiment, a control that breaks
//! it on purpose, and determinism.
//!
//! A shortened bigram run (T = 50, batch 32, 1 500 AdamW steps, as the preset
//! `mechlab reproduce` uses) must go uniform → unigram → bigram and form a
//! previous-token head in layer 0 and a statistical induction head in layer 1.
//! Shuffling each sequence's tokens keeps the in-context unigram counts and
//! removes every transition: the same run then has no bigram to find, and the
//! head verdicts must fail. The same seed gives bit-identical results, whatever
//! the number of threads.

use mechlab::papers::markov_icl::data::{sample, ChainSpec, Prior};
use mechlab::papers::markov_icl::model::{Dims, RpeTransformer};
use mechlab::rng::{stream, Stream};
use mechlab::run::summary::{Summary, Verdict};
use mechlab_engine::Parameters;

fn run_short(overrides: &[&str]) -> Summary {
    let exp = mechlab::experiment::find("markov-icl").expect("registered");
    let mut table = exp.default_config();
    let preset = mechlab::config::presets::find("markov-icl-bigram").unwrap();
    mechlab::config::overlay(
        &mut table,
        &mechlab::config::parse(preset.text, "preset").unwrap(),
        "preset",
    )
    .unwrap();
    for o in [
        "probe.compare_prior=false",
        "run.checkpoints=false",
        "run.probe_every=100",
    ]
    .iter()
    .chain(overrides)
    {
        mechlab::config::apply_override(&mut table, o).unwrap();
    }
    let prepared = exp.prepare(&table, "test").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut ctx =
        mechlab::run::RunCtx::create(&dir.path().join("run"), table, "test", true).unwrap();
    let summary = prepared.run(&mut ctx).unwrap();
    ctx.finish(&summary).unwrap();
    summary
}

fn verdict<'a>(s: &'a Summary, prefix: &str) -> &'a Verdict {
    s.verdicts
        .iter()
        .find(|v| v.claim.starts_with(prefix))
        .unwrap()
}

#[test]
fn bigram_data_grows_both_heads_and_reaches_bayes_and_shuffled_data_does_not() {
    let s = run_short(&[]);
    for p in [
        "the final loss",
        "the model ends nearest",
        "phases:",
        "layer 0 forms",
        "layer 1 forms",
    ] {
        assert!(verdict(&s, p).pass, "{p}: {:?}", verdict(&s, p));
    }
    assert!(
        s.metrics["kl.bigram"] < s.metrics["kl.unigram"],
        "{:?}",
        s.metrics
    );

    // Control: the same run on shuffled sequences (no transitions to learn).
    let c = run_short(&["data.shuffle=true"]);
    assert!(!verdict(&c, "layer 0 forms").pass, "{:?}", c.verdicts);
    assert!(!verdict(&c, "layer 1 forms").pass, "{:?}", c.verdicts);
    assert!(
        c.metrics["kl.unigram"] < c.metrics["kl.bigram"],
        "{:?}",
        c.metrics
    );
    assert!(c.metrics["induction"] < s.metrics["induction"]);
}

#[test]
fn same_seed_same_bits_for_any_thread_count() {
    let a = run_short(&["train.steps=60", "run.probe_every=20"]);
    let b = run_short(&["train.steps=60", "run.probe_every=20"]);
    assert_eq!(a.metrics, b.metrics);

    let dims = Dims {
        vocab: 3,
        max_len: 20,
        d_model: 8,
        n_heads: 2,
        init_std: 0.3,
        proj_std: 0.3,
    };
    let spec = ChainSpec {
        vocab: 3,
        order: 2,
        prior: Prior::DoublyStochastic,
        alpha: 1.0,
        len: 21,
    };
    let batch = sample(&spec, 37, &mut stream(9, Stream::Data)).unwrap();
    let grads = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let mut m = RpeTransformer::<f32>::new(&dims, &mut stream(9, Stream::Init)).unwrap();
            let loss = m.loss(&batch.tokens, batch.len, true);
            let mut g = vec![loss];
            m.visit(&mut |p| g.extend_from_slice(p.grad()));
            g.iter().map(|v| v.to_bits()).collect::<Vec<u32>>()
        })
    };
    assert_eq!(grads(1), grads(3));
}
