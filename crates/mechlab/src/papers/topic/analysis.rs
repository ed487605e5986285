//! Topic's analysis half: the run's model at a checkpoint, and the causal
//! questions of its attention on the run's own dev documents.
//!
//! Loading, without the corpus: on LDA documents the vocabulary and each
//! token's topic (the frozen block value matrix) come from the run's `[data]`
//! generator config, exactly as training built them; on Wikipedia
//! (`wiki.enabled`) the vocabulary size is the first axis of `embed.W_E` when
//! embeddings are trained, else (`d_model = d_vocab`) of any stored parameter,
//! and `model.value = "blocks"` is refused, since its frozen matrix comes from an
//! LDA fit of the corpus that no checkpoint holds.
//!
//! Interventions (dev MLM loss, [`super::causal`]'s documents and loss):
//! - **same-topic attention** (LDA runs): in every query row, the weight on the
//!   visible keys whose word shares the query word's topic is removed and the
//!   row renormalised over the other visible keys; the control removes the same
//!   number of visible keys of other topics (picked by a fixed hash). The paper
//!   says attention reads same-topic words, so the first must cost more.
//! - **uniform attention**: every row uniform over the visible keys, against the
//!   model's own pattern written back (the identity, which must change nothing).

use super::causal::{self, patched_dev_losses, uniform_pattern, N_DOCS};
use super::config::TopicConfig;
use super::data::LdaModel;
use super::model::{TopicMlm, ValueKind};
use super::training::make_set;
use crate::analysis::{
    first_axis, restore, Effect, InterveneError, Interventions, LoadError, Model, Request, RunDir,
};
use crate::patching::{control_keys, drop_keys};
use mechlab_engine::hooks::{Batch, Tensor};
use mechlab_engine::Float;

pub fn load(cfg: &TopicConfig, run: &RunDir, step: Option<u64>) -> Result<Model, LoadError> {
    if cfg.model.dtype.analysis_f32(run)? {
        let (m, loaded) = build::<f32>(cfg, run, step, 1)?;
        restore(m, &loaded)
    } else {
        let (m, loaded) = build::<f64>(cfg, run, step, 1)?;
        restore(m, &loaded)
    }
}

type Built<T> = (TopicMlm<T>, crate::run::checkpoint::Loaded<T>);

fn build<T: Float>(
    cfg: &TopicConfig,
    run: &RunDir,
    step: Option<u64>,
    max_len: usize,
) -> Result<Built<T>, LoadError> {
    let loaded = run.read::<T>(step)?;
    let (d_vocab, topics) = if cfg.wiki.enabled {
        if cfg.model.value == ValueKind::Blocks {
            return Err(run.unsupported(
                "model.value = \"blocks\" on Wikipedia: the frozen block matrix comes from the run's \
                 LDA fit, which no checkpoint stores",
            ));
        }
        let v = if loaded.tensors.contains_key("embed.W_E") {
            first_axis(&loaded, "embed.W_E")?
        } else {
            // d_model = d_vocab here: every stored parameter's first axis is it.
            let any = loaded.tensors.keys().next().cloned().unwrap_or_default();
            first_axis(&loaded, &any)?
        };
        (v, vec![usize::MAX; v])
    } else {
        let lda = LdaModel::new(&cfg.data).map_err(|r| run.unsupported(r))?;
        (lda.d_vocab(), lda.topic_of_token())
    };
    let model = TopicMlm::<T>::new(&cfg.model, d_vocab, &topics, max_len, cfg.seed)
        .map_err(|r| run.unsupported(r))?;
    Ok((model, loaded))
}

pub fn intervene(
    cfg: &TopicConfig,
    run: &RunDir,
    req: &Request,
) -> Result<Interventions, InterveneError> {
    req.fixed_suite(
        "topic",
        "same-topic attention removed against other-topic attention, and uniform attention",
    )?;
    if cfg.wiki.enabled {
        return Err(InterveneError::Invalid(format!(
            "{}: wiki.enabled = true: topic's interventions read the run's synthetic LDA dev \
             documents and each word's topic, which a Wikipedia run does not have",
            run.file
        )));
    }
    if cfg.model.dtype.analysis_f32(run)? {
        intervene_typed::<f32>(cfg, run, req)
    } else {
        intervene_typed::<f64>(cfg, run, req)
    }
}

fn intervene_typed<T: Float>(
    cfg: &TopicConfig,
    run: &RunDir,
    req: &Request,
) -> Result<Interventions, InterveneError> {
    let lda = LdaModel::new(&cfg.data).map_err(InterveneError::Invalid)?;
    let dev = make_set(&lda, &cfg.data, cfg.data.n_dev, cfg.seed, 12);
    let (mut m, loaded) = build::<T>(cfg, run, req.step, dev.max_len())?;
    loaded.apply_params(&mut m).map_err(LoadError::from)?;
    let topics = lda.topic_of_token();
    let topic = |i: usize, j: usize| topics[dev.original[dev.offsets[i] + j] as usize];
    // The visible keys k ≠ q of query q that share (or do not share) its topic.
    let keys = |b: &Batch, i: usize, q: usize, same: bool| -> Vec<usize> {
        (0..b.seq_len)
            .filter(|&k| k != q && b.targets[k] < 0 && (topic(i, q) == topic(i, k)) == same)
            .collect()
    };
    let mut patcher = |k: usize, own: &Tensor, b: &Batch, i: usize| match k {
        0 => None,
        1 => Some(drop_keys(own, |_, q| keys(b, i, q, true))),
        2 => Some(drop_keys(own, |_, q| {
            let n = keys(b, i, q, true).len();
            control_keys(keys(b, i, q, false), n, q)
        })),
        3 => Some(uniform_pattern(b)),
        _ => Some(own.clone()),
    };
    let batch = cfg.mlm.batch_size;
    let l = patched_dev_losses(&mut m, &dev, N_DOCS, batch, 5, &mut patcher)?;
    let n = N_DOCS.min(dev.len());
    let metric = "dev MLM loss";
    Ok(Interventions {
        data: format!("{n} dev documents (their fixed masks)"),
        effects: vec![
            Effect::new(
                "same-topic-attention",
                "does the prediction read the words of the query word's topic?",
                metric,
            )
            .values(l[0], l[1], l[2])
            .labels(
                "attention on same-topic keys removed, rows renormalised",
                "as many other-topic keys removed",
            ),
            Effect::new(
                "uniform-attention",
                "does the trained pattern matter at all?",
                metric,
            )
            .values(l[0], l[3], l[4])
            .labels("uniform attention", "own pattern written back (identity)"),
        ],
        notes: format!(
            "Patched at `{}` on each document, one forward per patch; the loss is the dev \
             curve's (mean over chunks of {batch} documents).\n",
            causal::PATTERN
        ),
        ..Interventions::default()
    })
}
