//! Topic structure on real text: the topic experiment on Wikipedia articles.
//!
//! With `wiki.enabled`, `topic` reads articles from `wiki.file` (any
//! format of [`mechlab_corpora::wikipedia`]), builds documents and a vocabulary
//! ([`crate::papers::topic::wiki_data`]), fits a seeded collapsed-Gibbs LDA on the training
//! articles' content words (its held-out perplexity by document completion is
//! reported beside a unigram baseline), trains the same MLM transformer with the
//! same loop, and measures the same-minus-different-topic gaps of the embeddings,
//! the value vectors and the attention twice: with the LDA word topics and with
//! gold topics from the articles' labels. A shuffled assignment is the control.

use super::config::TopicConfig;
use super::permutation::Tests;
use super::training::{dev_loss, measure, permutation_tests, Probes, TopicRun};
use crate::experiment::ExperimentError;
use crate::papers::topic::data::{mask_docs, MlmSet};
use crate::papers::topic::probes::shuffled_topics;
use crate::papers::topic::wiki_data::{build, WikiCorpus};
use crate::rng::{substream, Stream};
use crate::run::metrics::series;
use crate::run::summary::Summary;
use crate::run::{RunCtx, RunError};
use crate::train::fit;
use mechlab_corpora::lda::{fit as lda_fit, HeldOutConfig};
use mechlab_engine::Float;
use mechlab_report::{Figure, Series};
use rand::seq::SliceRandom;

fn data_err(e: impl std::fmt::Display) -> ExperimentError {
    ExperimentError::Data(e.to_string())
}

fn log(ctx: &mut RunCtx, event: &str, step: u64, tag: &str, p: &Probes) -> Result<(), RunError> {
    let k = |s: &str| format!("{tag}{s}");
    let names = [
        k("embedding_gap"),
        k("embedding_gap_control"),
        k("value_gap"),
        k("value_gap_control"),
        k("attention_gap"),
        k("attention_gap_control"),
        k("attention_same_mass"),
        k("attention_same_mass_uniform"),
        k("attention_entropy"),
    ];
    let vals = [
        p.embedding.gap,
        p.embedding_control.gap,
        p.value.gap,
        p.value_control.gap,
        p.attention.pairs.gap,
        p.attention_control.pairs.gap,
        p.attention.same_mass,
        p.attention.same_mass_uniform,
        p.attention.entropy,
    ];
    let rec: Vec<(&str, f64)> = names.iter().map(String::as_str).zip(vals).collect();
    ctx.log(event, step, &rec)
}

/// Unigram perplexity of `docs` under the add-one unigram of `train`.
fn unigram_perplexity(train: &[Vec<u32>], docs: &[Vec<u32>], v: usize) -> f64 {
    let mut c = vec![1.0; v];
    train.iter().flatten().for_each(|&w| c[w as usize] += 1.0);
    let z: f64 = c.iter().sum();
    // Score the second halves, as the LDA's document completion does.
    let (mut ll, mut n) = (0.0, 0usize);
    for d in docs.iter().filter(|d| d.len() >= 2) {
        for &w in &d[d.len().div_ceil(2)..] {
            ll += (c[w as usize] / z).ln();
            n += 1;
        }
    }
    (-ll / n.max(1) as f64).exp()
}

/// The articles split into training and dev documents, masked.
struct WikiData {
    path: std::path::PathBuf,
    articles: usize,
    corpus: WikiCorpus,
    train_idx: Vec<usize>,
    dev_idx: Vec<usize>,
    train: MlmSet,
    dev: MlmSet,
}

fn wiki_data(cfg: &TopicConfig, seed: u64) -> Result<WikiData, ExperimentError> {
    let w = &cfg.wiki;
    let path = if std::path::Path::new(&w.file).is_absolute() {
        std::path::PathBuf::from(&w.file)
    } else {
        mechlab_corpora::wikipedia::data_root().join(&w.file)
    };
    let articles = mechlab_corpora::wikipedia::load_articles(&path).map_err(data_err)?;
    if articles.len() <= w.n_dev + 1 {
        return Err(data_err(format!(
            "{}: {} articles, need more than wiki.n_dev = {}",
            path.display(),
            articles.len(),
            w.n_dev
        )));
    }
    let corpus: WikiCorpus = build(
        &articles,
        w.n_words,
        w.min_count,
        w.max_len,
        &w.exclude_topics,
    );
    let mut idx: Vec<usize> = (0..corpus.docs.len()).collect();
    idx.shuffle(&mut substream(seed, Stream::Data, 20));
    let (dev_idx, train_idx) = idx.split_at(w.n_dev);
    let v = corpus.vocab.len();
    let mut train = corpus.mlm_set(train_idx);
    let mut dev = corpus.mlm_set(dev_idx);
    mask_docs(
        &mut train,
        &cfg.data,
        v,
        &mut substream(seed, Stream::Data, 21),
    );
    mask_docs(
        &mut dev,
        &cfg.data,
        v,
        &mut substream(seed, Stream::Data, 22),
    );
    Ok(WikiData {
        path,
        articles: articles.len(),
        train_idx: train_idx.to_vec(),
        dev_idx: dev_idx.to_vec(),
        corpus,
        train,
        dev,
    })
}

/// Our LDA on the training articles, its word topics and the gold ones, each
/// with its shuffled control.
struct WikiTopics {
    lda_topics: Vec<usize>,
    gold_topics: Vec<usize>,
    lda_control: Vec<usize>,
    gold_control: Vec<usize>,
    top: Vec<Vec<String>>,
    perplexity: f64,
    unigram: f64,
    seconds: f64,
}

fn wiki_topics(
    cfg: &TopicConfig,
    seed: u64,
    d: &WikiData,
    ctx: &mut RunCtx,
) -> Result<WikiTopics, ExperimentError> {
    let w = &cfg.wiki;
    let (corpus, train_idx, dev_idx) = (&d.corpus, &d.train_idx[..], &d.dev_idx[..]);
    let v = corpus.vocab.len();
    let t0 = std::time::Instant::now();
    let (lda_docs, dense_to_vocab) = corpus.content_docs(train_idx);
    let (held_docs, _) = corpus.content_docs(dev_idx);
    let gibbs = w.gibbs(seed);
    let lda = lda_fit(&lda_docs, dense_to_vocab.len(), &gibbs)
        .map_err(|e| data_err(format!("wiki LDA: {e}")))?;
    let ppl = lda
        .perplexity(
            &held_docs,
            &HeldOutConfig {
                seed,
                ..HeldOutConfig::default()
            },
        )
        .map_err(|e| data_err(format!("wiki LDA perplexity: {e}")))?;
    let uni = unigram_perplexity(&lda_docs, &held_docs, dense_to_vocab.len());
    let lda_secs = t0.elapsed().as_secs_f64();
    let mut lda_topics = vec![usize::MAX; v];
    for (k, t) in lda.word_topics(w.topic_min_count).into_iter().enumerate() {
        if let Some(t) = t {
            lda_topics[dense_to_vocab[k]] = t;
        }
    }
    let gold_topics = corpus.gold_word_topics(train_idx, w.topic_min_count);
    let lda_control = shuffled_topics(&lda_topics, &mut substream(seed, Stream::Sample, 1));
    let gold_control = shuffled_topics(&gold_topics, &mut substream(seed, Stream::Sample, 3));
    let top: Vec<Vec<String>> = (0..w.lda_topics)
        .map(|k| {
            lda.top_words(k, 12)
                .iter()
                .map(|&d| corpus.vocab[dense_to_vocab[d as usize]].clone())
                .collect()
        })
        .collect();
    ctx.artifact("lda_topics.json", &serde_json::json!({ "perplexity": ppl.perplexity, "unigram_perplexity": uni, "top_words": top, "gold_topics": corpus.gold_names }))?;
    Ok(WikiTopics {
        lda_topics,
        gold_topics,
        lda_control,
        gold_control,
        top,
        perplexity: ppl.perplexity,
        unigram: uni,
        seconds: lda_secs,
    })
}

pub fn run_wiki<T: Float>(ctx: &mut RunCtx, cfg: &TopicConfig) -> Result<Summary, ExperimentError> {
    let seed = cfg.seed;
    let mut d = wiki_data(cfg, seed)?;
    let t = wiki_topics(cfg, seed, &d, ctx)?;
    let (run, fitted, pl, pg) = train::<T>(cfg, seed, &mut d, &t, ctx)?;
    let docs = cfg.probe.docs;
    // Each labelling's tests, and the same tests with its shuffled control as the
    // labels, where no topic can be (the measurement on which the verdicts fail).
    let [lda, gold] = [
        [&t.lda_topics[..], &t.lda_control[..]],
        [&t.gold_topics[..], &t.gold_control[..]],
    ]
    .map(|labels| permutation_tests(&run.model, &d.dev, docs, labels, seed));
    let mut s = summary(
        seed,
        &d,
        &t,
        &run,
        fitted.steps,
        [(&pl, &lda[0]), (&pg, &gold[0])],
    );
    for (tag, c) in [("lda_shuffled", &lda[1]), ("gold_shuffled", &gold[1])] {
        for (k, x) in c.metrics(&format!("{tag}_perm.")) {
            s.metric(&k, x);
        }
    }
    figures(ctx)?;
    let (w, v, articles, path) = (&cfg.wiki, d.corpus.vocab.len(), d.articles, &d.path);
    let (ppl, uni, top) = (t.perplexity, t.unigram, &t.top);
    let n_lda = t.lda_topics.iter().filter(|t| **t != usize::MAX).count();
    let n_gold = t.gold_topics.iter().filter(|t| **t != usize::MAX).count();
    ctx.notes(&format!(
        "## Wikipedia setting\n\n{} articles from `{}`; vocabulary {} ({} most frequent words seen ≥ {} times, + specials and UNK), documents truncated to {} tokens, {} dev articles. \
         LDA: {} topics, α = {}, β = {}, {} Gibbs sweeps ({} burn-in), seed {}; held-out perplexity {:.0} (unigram {:.0}), {} words with an LDA topic and {} with a gold topic (≥ {} occurrences). \
         Model: embedding {}, attention {}, value {}, decoder {}; d_model {}. Best dev loss {:.3} (uniform prediction: {:.3}).\n\nLDA top words: {}\n",
        articles, path.display(), v, w.n_words, w.min_count, w.max_len, w.n_dev,
        w.lda_topics, w.lda_alpha, w.lda_beta, w.lda_iterations, w.lda_burn_in, seed, ppl, uni, n_lda, n_gold, w.topic_min_count,
        crate::config::name_of(&cfg.model.embedding), crate::config::name_of(&cfg.model.attention),
        crate::config::name_of(&cfg.model.value), crate::config::name_of(&cfg.model.decoder), run.model.d_model(), run.early.best_loss, (v as f64).ln(),
        top.iter().map(|t| t[..6.min(t.len())].join(" ")).collect::<Vec<_>>().join(" | "),
    ))?;
    Ok(s)
}

/// The MLM, trained with the LDA- and gold-topic probes, at its best checkpoint,
/// and the final probes. The training set moves into the run (`d.train` is
/// left empty: nothing after training reads it).
fn train<T: Float>(
    cfg: &TopicConfig,
    seed: u64,
    d: &mut WikiData,
    t: &WikiTopics,
    ctx: &mut RunCtx,
) -> Result<(TopicRun<T>, crate::train::Fitted, Probes, Probes), ExperimentError> {
    let w = &cfg.wiki;
    let train = std::mem::take(&mut d.train);
    let (corpus, dev) = (&d.corpus, &d.dev);
    let v = corpus.vocab.len();
    let (lda_topics, gold_topics) = (&t.lda_topics, &t.gold_topics);
    let (lda_control, gold_control) = (&t.lda_control, &t.gold_control);
    let max_len = train.max_len().max(dev.max_len());
    let model =
        crate::papers::topic::model::TopicMlm::<T>::new(&cfg.model, v, lda_topics, max_len, seed)
            .map_err(data_err)?;
    let mut run = TopicRun::new(
        model,
        train,
        &cfg.data,
        v,
        cfg.mlm.batch_size,
        cfg.mlm.patience,
        seed,
    );
    let every = run.eval_interval(cfg.mlm.eval_every);
    let total = cfg.train.total_steps();
    let (nl, ng) = (w.lda_topics, corpus.gold_names.len().max(1));
    let (batch, docs) = (cfg.mlm.batch_size, cfg.probe.docs);
    let mut probe = |r: &mut TopicRun<T>, s: u64, ctx: &mut RunCtx| -> Result<(), RunError> {
        log(
            ctx,
            "probe",
            s,
            "lda_",
            &measure(&r.model, dev, docs, nl, lda_topics, lda_control),
        )?;
        log(
            ctx,
            "probe",
            s,
            "gold_",
            &measure(&r.model, dev, docs, ng, gold_topics, gold_control),
        )?;
        if r.eval_due(s, every, total) {
            let dl = dev_loss(&mut r.model, dev, batch);
            r.observe(s, dl);
            ctx.log(
                "dev",
                s,
                &[("dev_loss", dl), ("epoch", s as f64 / r.spe as f64)],
            )?;
        }
        Ok(())
    };
    let fitted = fit(&mut run, &cfg.train, ctx, &mut probe)?;
    run.restore_best();
    let pl = measure(&run.model, dev, docs, nl, lda_topics, lda_control);
    let pg = measure(&run.model, dev, docs, ng, gold_topics, gold_control);
    Ok((run, fitted, pl, pg))
}

/// The metrics, the gap verdicts with both topic labellings, and the LDA check.
#[allow(clippy::too_many_arguments)]
fn summary<T: Float>(
    seed: u64,
    d: &WikiData,
    t: &WikiTopics,
    run: &TopicRun<T>,
    stopped: u64,
    [(pl, tl), (pg, tg)]: [(&Probes, &Tests); 2],
) -> Summary {
    let (v, articles) = (d.corpus.vocab.len(), d.articles);
    let (lda_topics, gold_topics) = (&t.lda_topics, &t.gold_topics);
    let (ppl_value, uni, lda_secs) = (t.perplexity, t.unigram, t.seconds);
    let mut s = Summary::new("topic", seed);
    let n_lda = lda_topics.iter().filter(|t| **t != usize::MAX).count();
    let n_gold = gold_topics.iter().filter(|t| **t != usize::MAX).count();
    for (k, x) in [
        ("articles", articles as f64),
        ("vocab", v as f64),
        ("words_with_lda_topic", n_lda as f64),
        ("words_with_gold_topic", n_gold as f64),
        ("lda_perplexity", ppl_value),
        ("unigram_perplexity", uni),
        ("lda_seconds", lda_secs),
        ("dev_loss_best", run.early.best_loss),
        ("stopped_step", stopped as f64),
        ("unigram_mlm_loss", (v as f64).ln()),
    ] {
        s.metric(k, x);
    }
    for (tag, p, perm) in [("lda", pl, tl), ("gold", pg, tg)] {
        for (k, x) in p.gap_metrics() {
            s.metric(&format!("{tag}_{k}"), x);
        }
        for (k, x) in perm.metrics(&format!("{tag}_perm.")) {
            s.metric(&k, x);
        }
        for (key, what, t) in [
            ("embedding-gap", "embedding Gram", perm.embedding),
            ("attention-gap", "attention", perm.attention_gap),
        ] {
            s.verdict(
                &format!("topic.wikipedia.{tag}.{key}"),
                &format!("Wikipedia, {tag} topics: {what} same-topic > different-topic, more than relabelled topics allow"),
                "gap > 0 and permutation p ≤ 0.05 (199 relabellings keeping the topic sizes)",
                "Li, Li, Risteski 2023 (their Wikipedia experiments): same-topic words get closer embeddings and more attention; the relabellings give the gap's null distribution, an exact test (docs/topic.md, \"Verdicts\")",
                format!("gap {}", t.line()),
                t.holds(),
            )
            .scored(t.observed, Some(t.null_q95.max(0.0)));
        }
    }
    s.verdict(
        "topic.wikipedia.lda-perplexity",
        "our LDA explains held-out articles better than a unigram model",
        "LDA perplexity < unigram perplexity (document completion, content words)",
        "a check of our Gibbs LDA, not of the paper: a topic model that fits must beat the unigram model it contains (Blei, Ng, Jordan 2003)",
        format!("{ppl_value:.0} vs {uni:.0}"),
        ppl_value < uni,
    )
    .scored(ppl_value, Some(uni));
    s
}

/// The loss curves and the gaps over training, with their shuffled controls.
fn figures(ctx: &mut RunCtx) -> Result<(), ExperimentError> {
    let records = ctx.records()?;
    let (dx, dy) = series(&records, "dev", "dev_loss");
    let (tx, ty) = series(&records, "train", "loss");
    ctx.figure(
        &Figure::lines("loss", "Wikipedia MLM loss", "step", "nats")
            .with_series(Series::new("train", tx, ty))
            .with_series(Series::new("dev", dx, dy))
            .caption(
                "Masked-LM loss on Wikipedia lead sections; probes use the best dev checkpoint.",
            ),
    )?;
    let mut gaps = Figure::lines(
        "gaps",
        "Wikipedia: same-minus-different topic gaps",
        "step",
        "gap",
    )
    .log_x();
    for key in [
        "lda_embedding_gap",
        "gold_embedding_gap",
        "lda_attention_gap",
        "gold_attention_gap",
    ] {
        let (x, y) = series(&records, "probe", key);
        let (_, c) = series(&records, "probe", &format!("{key}_control"));
        let scale = if key.contains("attention") {
            1000.0
        } else {
            1.0
        };
        let name = if scale > 1.0 {
            format!("{key} ×1000")
        } else {
            key.to_string()
        };
        gaps = gaps
            .with_series(Series::new(
                &name,
                x.clone(),
                y.iter().map(|v| v * scale).collect(),
            ))
            .with_series(
                Series::new(
                    &format!("{name} (shuffled)"),
                    x,
                    c.iter().map(|v| v * scale).collect(),
                )
                .dashed(),
            );
    }
    ctx.figure(&gaps.caption("Gaps with our LDA's word topics and with gold topics from the article labels; dashed: shuffled-topic controls."))?;
    Ok(())
}
