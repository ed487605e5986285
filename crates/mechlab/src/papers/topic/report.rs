//! Figures and notes of the topic experiment; its verdicts are in
//! [`super::verdicts`].
//!
//! Everything here reads the finished run: the best checkpoint's probes
//! ([`FinalProbes`]) and the probe / dev-loss curves logged during training.

use super::config::TopicConfig;
use super::measure::{
    FinalProbes, PAPER_BEST_EPOCH, PAPER_DEV_LOSS_BEST, PAPER_DEV_LOSS_EPOCH0, PAPER_WV_DIFF,
    PAPER_WV_SAME,
};
use crate::config::name_of;
use crate::experiment::ExperimentError;
use crate::papers::topic::data::{LdaModel, N_SPECIAL};
use crate::papers::topic::model::{AttnKind, EmbedKind, ValueKind};
use crate::papers::topic::probes::gram;
use crate::run::metrics::series;
use crate::run::summary::Summary;
use crate::run::RunCtx;
use mechlab_report::{Figure, Series};
use serde_json::{Map, Value};

pub fn report(
    ctx: &mut RunCtx,
    cfg: &TopicConfig,
    lda: &LdaModel,
    f: &FinalProbes,
) -> Result<Summary, ExperimentError> {
    let records = ctx.records()?;
    let dev = series(&records, "dev", "dev_loss");
    let dev0 = dev.1.first().copied().unwrap_or(f64::NAN);
    let best = f.early.best_loss;
    let best_epoch = (f.early.best_step as f64 / f.spe as f64).round();
    let s = super::verdicts::summary(cfg, cfg.seed, f, &records, dev0);
    figures(ctx, cfg, lda, f, &records)?;
    ctx.notes(&notes(cfg, f, dev0, best, best_epoch))?;
    Ok(s)
}

/// The loss curves, the Gram heatmaps, the gaps over training (with their
/// shuffled controls), the attention entropy and the topic-to-topic attention.
fn figures(
    ctx: &mut RunCtx,
    cfg: &TopicConfig,
    lda: &LdaModel,
    f: &FinalProbes,
    records: &[Map<String, Value>],
) -> Result<(), ExperimentError> {
    let p = &f.probes;
    let m = &cfg.model;
    let value_trained = m.value == ValueKind::Trained;
    let emb_trained = m.embedding == EmbedKind::Trained;
    let attn_trained = m.attention == AttnKind::Trained;
    let first_dev = series(records, "dev", "dev_loss");
    let (px, _) = series(records, "probe", "value_gap");
    let (_, ent) = series(records, "probe", "attention_entropy");
    let (_, ent_u) = series(records, "probe", "attention_entropy_uniform");
    let (tx, ty) = series(records, "train", "loss");
    let (dx, dy) = first_dev;
    ctx.figure(
        &Figure::lines("loss", "MLM loss", "step", "cross-entropy (nats)")
            .with_series(Series::new("train (minibatch)", tx, ty))
            .with_series(Series::new("dev", dx, dy))
            .with_hline("Bayes bound", f.bound)
            .caption("Train and dev masked-LM loss; the dashed line is log(words per topic) + E[H(θ)] for this config. The final probes use the best dev checkpoint."),
    )?;
    let words: Vec<usize> = (N_SPECIAL..lda.d_vocab()).collect();
    let nw = words.len();
    let d = f.d_model;
    if value_trained && d == lda.d_vocab() {
        ctx.figure(
            &Figure::heatmap("value_gram", "W_V column Gram (words × words)", "word", "word", nw, nw, gram(&f.value_rows, d, &words), true)
                .caption("Gram of the value matrix's columns (one per input word), words in topic order: a block per topic means same-topic words share value vectors."),
        )?;
    }
    if emb_trained {
        ctx.figure(
            &Figure::heatmap(
                "embedding_gram",
                "Embedding Gram E Eᵀ (words × words)",
                "word",
                "word",
                nw,
                nw,
                gram(&f.embeddings, d, &words),
                true,
            )
            .caption("Gram of the effective token embeddings, words in topic order."),
        )?;
    }
    let mut gaps = Figure::lines(
        "gaps",
        "Same-topic minus different-topic gaps",
        "step",
        "gap",
    )
    .log_x();
    for (key, name, on) in [
        ("value_gap", "W_V column Gram", value_trained),
        ("embedding_gap", "embedding Gram", emb_trained),
        ("attention_gap", "attention (×100)", attn_trained),
    ] {
        if on {
            let (x, mut y) = series(records, "probe", key);
            if key == "attention_gap" {
                y.iter_mut().for_each(|v| *v *= 100.0);
            }
            let (_, mut c) = series(records, "probe", &format!("{key}_control"));
            if key == "attention_gap" {
                c.iter_mut().for_each(|v| *v *= 100.0);
            }
            gaps = gaps
                .with_series(Series::new(name, x.clone(), y))
                .with_series(Series::new(&format!("{name}, shuffled topics"), x, c).dashed());
        }
    }
    ctx.figure(&gaps.caption("Gaps on the training trajectory (log step); dashed: the same probe with word-topic labels shuffled (control)."))?;
    if attn_trained {
        ctx.figure(
            &Figure::lines("attention_entropy", "Attention entropy of word queries", "step", "nats")
                .log_x()
                .with_series(Series::new("attention", px.clone(), ent))
                .with_series(Series::new("uniform over visible keys", px, ent_u).dashed())
                .caption("Mean entropy of a word query's attention row on dev documents; it leaves the uniform level when attention starts to prefer same-topic words."),
        )?;
        let t = lda.n_topics;
        let ticks: Vec<String> = (0..t).map(|i| format!("t{i}")).collect();
        ctx.figure(
            &Figure::heatmap("topic_attention", "Attention mass from topic-a queries to topic-b keys", "key topic", "query topic", t, t, p.attention.topic_matrix.clone(), false)
                .with_ticks(ticks.clone(), ticks)
                .caption("Mean attention mass a word of topic a (row) puts on words of topic b (column), on dev documents."),
        )?;
    }
    Ok(())
}

fn notes(cfg: &TopicConfig, f: &FinalProbes, dev0: f64, best: f64, best_epoch: f64) -> String {
    let m = &cfg.model;
    let p = &f.probes;
    let mut n = format!(
        "## Setting\n\nLDA: {} topics × {} words (overlap {}, {} within a topic), α = {}, N ∈ [{}, {}], {} train / {} dev / {} test documents; \
         masks p = {}, keep {}, random {} ({} masks). Model: embedding {}, attention {}, value {}, decoder {}, residual {}, layer norm {}, loss {}, \
         BERT embedding LayerNorm {}, init {} (noise {}), dtype {}. AdamW lr {}, weight decay {}, batch {}, dev loss every epoch, early stopping patience {}.\n\n",
        cfg.data.n_topics, cfg.data.words_per_topic, cfg.data.overlap, name_of(&cfg.data.word_dist), cfg.data.alpha, cfg.data.min_len, cfg.data.max_len,
        cfg.data.n_train, cfg.data.n_dev, cfg.data.n_test, cfg.data.mask_prob, cfg.data.mask_keep, cfg.data.mask_random,
        if cfg.data.fresh_masks { "fresh per epoch" } else { "static" },
        name_of(&m.embedding), name_of(&m.attention), name_of(&m.value), name_of(&m.decoder), m.residual, m.layer_norm, name_of(&m.loss), m.bert_embedding_ln, name_of(&m.init), m.init_noise, name_of(&m.dtype),
        cfg.train.lr, cfg.train.weight_decay, cfg.mlm.batch_size, cfg.mlm.patience,
    );
    n += &format!(
        "## Numbers (best checkpoint)\n\n| quantity | authors' demo | ours |\n|---|---|---|\n\
         | dev loss after the first update (\"epoch 0\") | {PAPER_DEV_LOSS_EPOCH0} | {dev0:.3} |\n\
         | best dev loss | {PAPER_DEV_LOSS_BEST} | {best:.3} |\n| best epoch | {PAPER_BEST_EPOCH} | {best_epoch} |\n\
         | Bayes bound | 3.149 | {:.3} |\n| W_V column Gram, same-topic mean | {PAPER_WV_SAME} | {:.3} |\n| W_V column Gram, different-topic mean | {PAPER_WV_DIFF} | {:.3} |\n\
         | test loss | — | {:.3} |\n\n",
        f.bound, p.value.same, p.value.diff, f.test_loss
    );
    n += "The authors' numbers come from their committed demo (one-hot embeddings inside Hugging Face's BERT embedding block, \
          frozen uniform attention, decoder frozen to the identity); they are comparable to ours only with `model.bert_embedding_ln = true`. \
          Topics are looked up by word index and special tokens are excluded (the authors' inspection code uses the token id, off by the 4 specials, and keeps the specials).\n";
    if let Some(c) = &f.causal {
        n += &format!(
            "\n## Causal check: uniform attention\n\nDev loss on the first {} dev documents through the hook points, \
             `blocks.0.attn.hook_pattern` patched (prediction: Δ uniform > 0, Δ permuted > 0, Δ own = 0 exactly; the paper gives no size).\n\n\
             | pattern | dev loss | Δ vs trained |\n|---|---|---|\n\
             | trained (no hook; fused kernel {:.5}) | {:.5} | — |\n\
             | uniform over visible keys | {:.5} | {:+.5} |\n\
             | trained weights, keys permuted per row (control) | {:.5} | {:+.5} |\n\
             | the model's own pattern (identity) | {:.5} | {:+e} |\n",
            c.docs, c.fused, c.trained, c.uniform, c.delta_uniform(), c.permuted, c.delta_permuted(), c.own, c.delta_own()
        );
    }
    n
}
