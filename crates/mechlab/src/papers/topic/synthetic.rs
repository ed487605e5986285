//! The topic experiment on synthetic LDA documents (the paper's setting).

use super::config::TopicConfig;
use super::measure::FinalProbes;
use super::report::report;
use super::training::{
    dev_loss, log_probes, make_set, measure, pattern_viewer, permutation_tests, record_patterns,
    value_rows, TopicRun,
};
use crate::experiment::ExperimentError;
use crate::papers::topic::data::{bayes_bound, LdaModel};
use crate::papers::topic::model::{AttnKind, TopicMlm};
use crate::papers::topic::probes::shuffled_topics;
use crate::rng::{substream, Stream};
use crate::run::summary::Summary;
use crate::run::{RunCtx, RunError};
use crate::train::fit;
use mechlab_engine::Float;

pub(super) fn run_typed<T: Float>(
    ctx: &mut RunCtx,
    cfg: &TopicConfig,
) -> Result<Summary, ExperimentError> {
    let lda = LdaModel::new(&cfg.data).map_err(ExperimentError::Data)?;
    let seed = cfg.seed;
    let train = make_set(&lda, &cfg.data, cfg.data.n_train, seed, 10);
    let dev = make_set(&lda, &cfg.data, cfg.data.n_dev, seed, 12);
    let test = make_set(&lda, &cfg.data, cfg.data.n_test.max(1), seed, 14);
    let topics = lda.topic_of_token();
    let control = shuffled_topics(&topics, &mut substream(seed, Stream::Sample, 1));
    let bound = bayes_bound(
        &lda,
        cfg.data.overlap,
        20_000,
        &mut substream(seed, Stream::Sample, 2),
    );
    let max_len = train.max_len().max(dev.max_len()).max(test.max_len());
    let model = TopicMlm::<T>::new(&cfg.model, lda.d_vocab(), &topics, max_len, seed)
        .map_err(ExperimentError::Data)?;
    let mut run = TopicRun::new(
        model,
        train,
        &cfg.data,
        lda.d_vocab(),
        cfg.mlm.batch_size,
        cfg.mlm.patience,
        seed,
    );
    let every = run.eval_interval(cfg.mlm.eval_every);
    let total = cfg.train.total_steps();
    let (batch, docs, nt) = (cfg.mlm.batch_size, cfg.probe.docs, lda.n_topics);
    let attn_trained = cfg.model.attention == AttnKind::Trained;
    let mut probe = |r: &mut TopicRun<T>, s: u64, ctx: &mut RunCtx| -> Result<(), RunError> {
        let p = measure(
            &r.model,
            &dev,
            if attn_trained { docs } else { 0 },
            nt,
            &topics,
            &control,
        );
        log_probes(ctx, s, &p)?;
        if r.eval_due(s, every, total) {
            let dl = dev_loss(&mut r.model, &dev, batch);
            r.observe(s, dl);
            let epoch = s as f64 / r.spe as f64;
            ctx.log(
                "dev",
                s,
                &[
                    ("dev_loss", dl),
                    ("epoch", epoch),
                    ("best_dev_loss", r.early.best_loss),
                ],
            )?;
        }
        Ok(())
    };
    let fitted = fit(&mut run, &cfg.train, ctx, &mut probe)?;
    run.restore_best();
    let final_probes = measure(&run.model, &dev, docs, nt, &topics, &control);
    let [perm, perm_control] = permutation_tests(
        &run.model,
        &dev,
        if attn_trained { docs } else { 0 },
        [&topics, &control],
        seed,
    );
    let pats = record_patterns(&run.model, &dev, 8);
    ctx.record_activations(std::slice::from_ref(&pats))?;
    ctx.figure(&pattern_viewer(&pats, &dev, cfg.data.words_per_topic))?;
    let test_loss = dev_loss(&mut run.model, &test, batch);
    // The causal check reads the best checkpoint and a fixed sub-stream only.
    let causal = if attn_trained {
        Some(
            super::causal::uniform_attention(&mut run.model, &dev, batch, seed)
                .map_err(|e| ExperimentError::Data(format!("uniform-attention check: {e}")))?,
        )
    } else {
        None
    };
    let fin = FinalProbes {
        probes: final_probes,
        perm,
        perm_control,
        bound,
        test_loss,
        early: run.early.clone(),
        spe: run.spe,
        stopped_at: fitted.steps,
        value_rows: value_rows(&run.model),
        embeddings: run.model.token_embeddings(),
        d_model: run.model.d_model(),
        causal,
    };
    report(ctx, cfg, &lda, &fin)
}
