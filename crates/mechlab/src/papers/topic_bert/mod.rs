//! Topic structure in a real pretrained encoder: the topic paper's Wikipedia
//! probes on a BERT-family model loaded offline.
//!
//! Li, Li & Risteski (2023) report that in a pretrained BERT, words of the same
//! topic have larger embedding inner products and receive more attention than words
//! of different topics. This experiment loads the encoder at `model.path`
//! ([`mechlab_engine::bert`]) and its tokenizer
//! ([`mechlab_corpora::wordpiece`]), fits our LDA on the Wikipedia lead sections as
//! `topic-wikipedia` does ([`crate::papers::topic::wiki_data`]), and measures the probes of
//! [`probes`] with our LDA's word topics, with gold topics from the
//! article labels, and with shuffled topics as the control. Attention is read from
//! `blocks.{l}.attn.hook_pattern` on held-out lead sections; sub-word pieces take
//! their word's topic.

pub mod analysis;
pub mod probes;
mod run;
pub use run::shuffle_shows_no_gap;

use crate::config::presets::Preset;
use crate::experiment::{ExperimentError, Paper};
use crate::papers::topic::wiki_data::{build, WikiCorpus, STOP_WORDS};
use crate::papers::topic::WikiConfig;
use crate::rng::{substream, Stream};
use crate::run::summary::Summary;
use crate::run::{RunConfig, RunCtx};
use mechlab_corpora::lda::fit as lda_fit;
use mechlab_corpora::wordpiece::Encoded;
use mechlab_engine::hooks::Batch;
use mechlab_report::{Figure, Series};
use probes::{histograms, AttentionProbe, EmbeddingProbe, CLASS_NAMES, EXCLUDED, NO_TOPIC};
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;

/// The `[model]` section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BertModelConfig {
    /// A Hugging Face folder (`config.json`, `model.safetensors`, `tokenizer.json`
    /// or `vocab.txt`): absolute, or relative to the working directory; when
    /// that is not a folder, its last component in the shared models folder
    /// (`shared/models`, beside the data folder), so the default works from any
    /// working directory. Not found: a config error naming `model.path`.
    pub path: String,
    /// Pieces per lead section, `[CLS]` and `[SEP]` included.
    pub max_len: usize,
    pub batch_size: usize,
}

impl Default for BertModelConfig {
    fn default() -> Self {
        BertModelConfig {
            path: "../shared/models/all-MiniLM-L6-v2".into(),
            max_len: 128,
            batch_size: 16,
        }
    }
}

/// The `[probe]` section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BertProbeConfig {
    /// Held-out lead sections whose attention is averaged.
    pub docs: usize,
    /// Random embedding pairs with at least one topic-less word.
    pub random_pairs: usize,
    /// A shuffled control is "near zero" when |control| < control_max · gap.
    pub control_max: f64,
    /// Sentences drawn as attention heatmaps, and their length in pieces.
    pub sentences: usize,
    pub sentence_len: usize,
}

impl Default for BertProbeConfig {
    fn default() -> Self {
        BertProbeConfig {
            docs: 300,
            random_pairs: 200_000,
            control_max: 0.25,
            sentences: 3,
            sentence_len: 24,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TopicBertConfig {
    pub experiment: String,
    pub description: String,
    pub seed: u64,
    pub run: RunConfig,
    pub model: BertModelConfig,
    /// The text and the LDA, as in `topic-wikipedia` (`enabled` must stay true).
    pub wiki: WikiConfig,
    pub probe: BertProbeConfig,
}

crate::common_config!(TopicBertConfig, no_train);

impl Default for TopicBertConfig {
    fn default() -> Self {
        TopicBertConfig {
            experiment: "topic-bert".into(),
            description: "topic probes on a pretrained BERT-family encoder".into(),
            seed: 0,
            run: RunConfig::default(),
            model: BertModelConfig::default(),
            wiki: WikiConfig {
                enabled: true,
                ..WikiConfig::default()
            },
            probe: BertProbeConfig::default(),
        }
    }
}

impl TopicBertConfig {
    /// Value checks, before any run folder exists.
    pub fn validate(&self) -> Result<(), String> {
        let p = &self.probe;
        if p.docs == 0 {
            return Err("probe.docs = 0: must be at least 1".into());
        }
        if !(p.control_max.is_finite() && p.control_max > 0.0) {
            return Err(format!(
                "probe.control_max = {}: must be a positive number",
                p.control_max
            ));
        }
        if !self.wiki.enabled {
            return Err(
                "wiki.enabled = false: topic-bert probes Wikipedia text; keep it true".into(),
            );
        }
        if self.wiki.lda_topics == 0 || self.wiki.lda_burn_in >= self.wiki.lda_iterations {
            return Err(format!(
                "wiki.lda_topics = {}, wiki.lda_iterations = {}, wiki.lda_burn_in = {}: need at least one topic and burn_in < iterations",
                self.wiki.lda_topics, self.wiki.lda_iterations, self.wiki.lda_burn_in
            ));
        }
        Ok(())
    }
}

fn data_err(e: impl std::fmt::Display) -> ExperimentError {
    ExperimentError::Data(e.to_string())
}

/// The Wikipedia text with its word topics: our LDA's, the gold labels', and the
/// held-out articles to probe.
pub struct WikiTopics {
    pub corpus: WikiCorpus,
    pub texts: Vec<String>,
    pub dev_idx: Vec<usize>,
    /// Topic per corpus vocabulary id (`usize::MAX`: none).
    pub lda: Vec<usize>,
    pub gold: Vec<usize>,
    pub top_words: Vec<Vec<String>>,
    pub lda_seconds: f64,
}

/// The order `topic-wikipedia` shuffles `n` articles into: the first `wiki.n_dev`
/// are held out.
pub fn article_order(n: usize, seed: u64) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..n).collect();
    idx.shuffle(&mut substream(seed, Stream::Data, 20));
    idx
}

/// Loads `w.file`, splits it as `topic-wikipedia` does and fits the same LDA.
pub fn wiki_topics(w: &WikiConfig, seed: u64) -> Result<WikiTopics, ExperimentError> {
    let path = if Path::new(&w.file).is_absolute() {
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
    let corpus = build(
        &articles,
        w.n_words,
        w.min_count,
        w.max_len,
        &w.exclude_topics,
    );
    let idx = article_order(corpus.docs.len(), seed);
    let (dev_idx, train_idx) = idx.split_at(w.n_dev);
    let t0 = std::time::Instant::now();
    let (lda_docs, dense_to_vocab) = corpus.content_docs(train_idx);
    let gibbs = w.gibbs(seed);
    let lda = lda_fit(&lda_docs, dense_to_vocab.len(), &gibbs)
        .map_err(|e| data_err(format!("wiki LDA: {e}")))?;
    let mut lda_topics = vec![usize::MAX; corpus.vocab.len()];
    for (k, t) in lda.word_topics(w.topic_min_count).into_iter().enumerate() {
        if let Some(t) = t {
            lda_topics[dense_to_vocab[k]] = t;
        }
    }
    let top_words = (0..w.lda_topics)
        .map(|k| {
            lda.top_words(k, 8)
                .iter()
                .map(|&d| corpus.vocab[dense_to_vocab[d as usize]].clone())
                .collect()
        })
        .collect();
    let gold = corpus.gold_word_topics(train_idx, w.topic_min_count);
    Ok(WikiTopics {
        texts: articles.into_iter().map(|a| a.text).collect(),
        dev_idx: dev_idx.to_vec(),
        lda: lda_topics,
        gold,
        top_words,
        lda_seconds: t0.elapsed().as_secs_f64(),
        corpus,
    })
}

/// Sequences grouped into batches of similar length (less padding), in order of
/// length: each batch is the indices of its sequences.
pub fn batches_by_length(lens: &[usize], batch_size: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lens.len()).collect();
    order.sort_by_key(|&i| (lens[i], i));
    order
        .chunks(batch_size.max(1))
        .map(<[usize]>::to_vec)
        .collect()
}

/// The batch of `seqs` padded with `pad` to the longest.
pub fn pad_batch(seqs: &[&[u32]], pad: u32) -> Batch {
    let t = seqs.iter().map(|s| s.len()).max().unwrap_or(1);
    let mut tokens = vec![pad; seqs.len() * t];
    for (b, s) in seqs.iter().enumerate() {
        tokens[b * t..b * t + s.len()].copy_from_slice(s);
    }
    Batch::new(tokens, seqs.len(), t)
}

/// Per piece: its word's key (pieces of one word and repeats of a word share it)
/// and the corpus vocabulary id of the word, `None` for pieces in no class.
pub fn piece_words(e: &Encoded, index: &HashMap<&str, usize>) -> (Vec<usize>, Vec<Option<usize>>) {
    let mut text: HashMap<u32, String> = HashMap::new();
    for (tok, w) in e.tokens.iter().zip(&e.words) {
        if let Some(w) = w {
            text.entry(*w)
                .or_default()
                .push_str(tok.strip_prefix("##").unwrap_or(tok));
        }
    }
    let mut keys: HashMap<&str, usize> = HashMap::new();
    let mut key = Vec::with_capacity(e.ids.len());
    let mut vocab = Vec::with_capacity(e.ids.len());
    for (i, w) in e.words.iter().enumerate() {
        match w.map(|w| text[&w].as_str()) {
            Some(s) if s.chars().any(char::is_alphanumeric) && !STOP_WORDS.contains(&s) => {
                let n = keys.len();
                key.push(*keys.entry(s).or_insert(n));
                vocab.push(Some(index.get(s).copied().unwrap_or(usize::MAX)));
            }
            _ => {
                key.push(usize::MAX - i);
                vocab.push(None);
            }
        }
    }
    (key, vocab)
}

/// The probe topic of each piece under a word-topic table.
pub fn piece_topics(vocab: &[Option<usize>], topics: &[usize]) -> Vec<usize> {
    vocab
        .iter()
        .map(|v| match v {
            None => EXCLUDED,
            Some(usize::MAX) => NO_TOPIC,
            Some(id) => topics[*id],
        })
        .collect()
}

pub struct TopicBert;

/// The preset.
pub const PRESETS: &[Preset] = &[crate::preset!("topic-bert")];

impl Paper for TopicBert {
    type Config = TopicBertConfig;
    fn name(&self) -> &'static str {
        "topic-bert"
    }
    fn citation(&self) -> &'static str {
        "Yuchen Li, Yuanzhi Li, Andrej Risteski. How Do Transformers Learn Topic Structure: Towards a Mechanistic Understanding. ICML 2023 (arXiv 2303.04245)"
    }
    fn presets(&self) -> &'static [Preset] {
        PRESETS
    }
    fn validate(&self, cfg: &TopicBertConfig) -> Result<(), String> {
        cfg.validate()
    }
    fn run(&self, cfg: &TopicBertConfig, ctx: &mut RunCtx) -> Result<Summary, ExperimentError> {
        run::run(ctx, cfg)
    }
    fn data_key(&self) -> Option<&'static str> {
        Some("wiki.file")
    }
    // No `reproduce` items: it reads a pretrained model from shared storage, and
    // `mechlab reproduce` runs on built-in synthetic data only.
    crate::analysis_half!(analysis);
}

/// The figures of one topic source.
pub(super) fn gap_figures(
    ctx: &mut RunCtx,
    tag: &str,
    real: &AttentionProbe,
    control: &AttentionProbe,
    emb: &EmbeddingProbe,
) -> Result<(), ExperimentError> {
    let (nl, nh) = (real.n_layers, real.n_heads);
    let rows: Vec<String> = (0..nl).map(|l| format!("layer {l}")).collect();
    let cols: Vec<String> = (0..nh).map(|h| format!("head {h}")).collect();
    for (id, p, what) in [
        (format!("attention_gap_{tag}"), real, "topics"),
        (
            format!("attention_gap_{tag}_shuffled"),
            control,
            "shuffled topics (control)",
        ),
    ] {
        ctx.figure(
            &Figure::heatmap(
                &id,
                &format!("Attention gap (same − different topic), {tag} {what}"),
                "head",
                "layer",
                nl,
                nh,
                p.gaps(),
                true,
            )
            .with_ticks(rows.clone(), cols.clone())
            .caption("Average attention between pieces of same-topic words minus different-topic words, per layer and head, on held-out Wikipedia lead sections."),
        )?;
    }
    let (x, dens) = histograms(&emb.samples, 60);
    let mut fig = Figure::lines(
        &format!("embedding_dot_{tag}"),
        &format!("Word-embedding inner products by class ({tag} topics)"),
        "⟨e_i, e_j⟩",
        "density",
    );
    for c in 1..4 {
        fig = fig.with_series(Series::new(CLASS_NAMES[c], x.clone(), dens[c].clone()));
    }
    ctx.figure(&fig.caption("Rows of the word-embedding matrix: all pairs of topic words (same / different topic) and random pairs with a topic-less word."))?;
    Ok(())
}
