//! The `topic-bert` run: load, fit topics, probe, judge, draw (see
//! [`super`] for what and why).

use super::probes::{embedding_probe, AttentionProbe, Class, EmbeddingProbe, EXCLUDED, NO_TOPIC};
use super::{
    batches_by_length, gap_figures, pad_batch, piece_topics, piece_words, wiki_topics,
    TopicBertConfig,
};
use crate::experiment::ExperimentError;
use crate::papers::topic::data::N_SPECIAL;
use crate::papers::topic::permutation::{self, PairSums, Permuted, RELABELLINGS};
use crate::papers::topic::probes::shuffled_topics;
use crate::papers::topic::wiki_data::STOP_WORDS;
use crate::rng::{substream, Stream};
use crate::run::summary::Summary;
use crate::run::{Activation, RunCtx};
use mechlab_corpora::wordpiece::PretrainedTokenizer;
use mechlab_engine::bert::Bert;
use mechlab_engine::hooks::HookedModel;
use mechlab_report::Figure;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

fn data_err(e: impl std::fmt::Display) -> ExperimentError {
    ExperimentError::Data(e.to_string())
}

/// The encoder's folder for `model.path` ([`crate::pretrained::model_dir`]).
fn model_dir(path: &str) -> Result<PathBuf, ExperimentError> {
    crate::pretrained::model_dir(path, "model.path").map_err(ExperimentError::Config)
}

/// Topic per model vocabulary id for the embedding probe: whole-word tokens take
/// their word's topic; `[..]` specials, stop words and punctuation are excluded;
/// `##` continuations and words outside the corpus vocabulary have none.
fn vocab_topics(
    tok: &PretrainedTokenizer,
    n: usize,
    index: &HashMap<&str, usize>,
    topics: &[usize],
) -> Vec<usize> {
    (0..n as u32)
        .map(|id| {
            let t = tok.id_to_token(id).unwrap_or_default();
            if t.is_empty()
                || t.starts_with('[')
                || !t.chars().any(char::is_alphanumeric)
                || STOP_WORDS.contains(&t.as_str())
            {
                EXCLUDED
            } else {
                match index.get(t.as_str()) {
                    Some(&v) if !t.starts_with("##") && topics[v] != usize::MAX => topics[v],
                    _ => NO_TOPIC,
                }
            }
        })
        .collect()
}

/// The layers whose heads mostly show a positive gap.
fn positive_layers(p: &AttentionProbe) -> Vec<usize> {
    let g = p.gaps();
    (0..p.n_layers)
        .filter(|&l| {
            2 * g[l * p.n_heads..(l + 1) * p.n_heads]
                .iter()
                .filter(|&&x| x > 0.0)
                .count()
                > p.n_heads
        })
        .collect()
}

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len().max(1) as f64
}

/// The four topic labellings every probe runs with: our LDA's, the gold
/// article labels', and a shuffled control of each.
type Sources<'a> = [(&'static str, &'a Vec<usize>); 4];

/// The attention probes over the held-out sections, and what the forward cost.
struct AttentionRun {
    probes: Vec<AttentionProbe>,
    /// Head-averaged attention per pair of topic words, for the LDA and gold
    /// labellings' permutation tests.
    tables: [PairSums; 2],
    docs: usize,
    n_tokens: usize,
    fwd_secs: f64,
}

pub(super) fn run(ctx: &mut RunCtx, cfg: &TopicBertConfig) -> Result<Summary, ExperimentError> {
    if !cfg.wiki.enabled {
        return Err(data_err(
            "wiki.enabled = false: topic-bert probes Wikipedia text, keep it true",
        ));
    }
    let seed = cfg.seed;
    let dir = &model_dir(&cfg.model.path)?;
    let t_load = Instant::now();
    let mut bert = Bert::load(dir).map_err(data_err)?;
    let tok = PretrainedTokenizer::from_dir(dir).map_err(data_err)?;
    let load_secs = t_load.elapsed().as_secs_f64();
    let wt = wiki_topics(&cfg.wiki, seed)?;
    let index: HashMap<&str, usize> = wt
        .corpus
        .vocab
        .iter()
        .enumerate()
        .skip(N_SPECIAL + 1)
        .map(|(i, w)| (w.as_str(), i))
        .collect();
    let lda_ctrl = shuffled_topics(&wt.lda, &mut substream(seed, Stream::Sample, 1));
    let gold_ctrl = shuffled_topics(&wt.gold, &mut substream(seed, Stream::Sample, 3));
    let sources: [(&str, &Vec<usize>); 4] = [
        ("lda", &wt.lda),
        ("lda_shuffled", &lda_ctrl),
        ("gold", &wt.gold),
        ("gold_shuffled", &gold_ctrl),
    ];
    let emb = embeddings(cfg, &bert, &tok, &index, &sources, seed);
    let ar = attention(cfg, &mut bert, &tok, &wt, &index, &sources)?;
    // Each labelling's tests, and the same tests with its shuffled control as
    // the labels, where no topic can be: the measurement on which the gap
    // verdicts must fail.
    let [lda, gold] = [
        (&wt.lda, &lda_ctrl, &ar.tables[0]),
        (&wt.gold, &gold_ctrl, &ar.tables[1]),
    ]
    .map(|(topics, ctrl, t)| {
        let [e, ec] = embedding_tests(&bert, &tok, &index, [topics, ctrl], seed);
        let attn = |l: &[usize]| permutation::test(l, RELABELLINGS, seed, |x| t.gap(x));
        [(e, attn(topics)), (ec, attn(ctrl))]
    });
    let (mut s, table) = summary(
        cfg,
        seed,
        &emb,
        &ar,
        &[lda[0], gold[0]],
        load_secs,
        wt.lda_seconds,
    );
    for (src, (e, a)) in [("lda_shuffled", lda[1]), ("gold_shuffled", gold[1])] {
        s.metric(&format!("{src}_perm.embedding_dot_gap_p"), e.p);
        s.metric(&format!("{src}_perm.attention_gap_mean_p"), a.p);
    }
    for (src, (e, a, ac)) in [
        ("lda", (&emb[0], &ar.probes[0], &ar.probes[1])),
        ("gold", (&emb[2], &ar.probes[2], &ar.probes[3])),
    ] {
        gap_figures(ctx, src, a, ac, e)?;
    }
    let (docs, n_tokens, fwd_secs, cm) = (ar.docs, ar.n_tokens, ar.fwd_secs, cfg.probe.control_max);
    sentence_figures(ctx, cfg, &mut bert, &tok, &wt, &index, &ar.probes[0])?;
    ctx.artifact(
        "lda_topics.json",
        &serde_json::json!({ "top_words": wt.top_words, "gold_topics": wt.corpus.gold_names }),
    )?;
    ctx.notes(&format!(
        "## Topic probes on `{}`\n\n{} held-out lead sections ({} pieces, at most {} each) of `{}`; our LDA ({} topics, {} Gibbs sweeps, {:.0} s) on the other articles' content words; \
         {} words with an LDA topic and {} with a gold topic. Embedding probe: all pairs of topic words in the model's vocabulary plus {} random pairs with a topic-less word. \
         \"Near zero\" for a shuffled control means below {} × the real gap. Forward pass with the attention cache: {:.0} tokens/s.\n\n{table}\nLDA top words: {}\n",
        cfg.model.path, docs, n_tokens, cfg.model.max_len, cfg.wiki.file, cfg.wiki.lda_topics, cfg.wiki.lda_iterations, wt.lda_seconds,
        wt.lda.iter().filter(|&&t| t != usize::MAX).count(), wt.gold.iter().filter(|&&t| t != usize::MAX).count(),
        cfg.probe.random_pairs, cm, n_tokens as f64 / fwd_secs.max(1e-9),
        wt.top_words.iter().map(|t| t[..5.min(t.len())].join(" ")).collect::<Vec<_>>().join(" | "),
    ))?;
    Ok(s)
}

/// The embedding probe of each topic labelling on the model's word embeddings.
fn embeddings(
    cfg: &TopicBertConfig,
    bert: &Bert,
    tok: &PretrainedTokenizer,
    index: &HashMap<&str, usize>,
    sources: &Sources<'_>,
    seed: u64,
) -> Vec<EmbeddingProbe> {
    let v = bert.config.d_vocab.min(tok.vocab_size());
    sources
        .iter()
        .enumerate()
        .map(|(k, (_, topics))| {
            embedding_probe(
                &bert.weights().word,
                bert.config.d_model,
                &vocab_topics(tok, v, index, topics),
                cfg.probe.random_pairs,
                20_000,
                &mut substream(seed, Stream::Sample, 10 + k as u64),
            )
        })
        .collect()
}

/// The embedding gap of a labelling and of its shuffled control against their
/// relabellings ([`crate::papers::topic::permutation`]), over the rows of the
/// model-vocabulary words that have a topic: the same pairs as
/// [`embedding_probe`]'s two topic classes. A shuffle keeps which words have a
/// topic, so both read one Gram table.
fn embedding_tests(
    bert: &Bert,
    tok: &PretrainedTokenizer,
    index: &HashMap<&str, usize>,
    [topics, ctrl]: [&[usize]; 2],
    seed: u64,
) -> [Permuted; 2] {
    let v = bert.config.d_vocab.min(tok.vocab_size());
    let d = bert.config.d_model;
    let vt = vocab_topics(tok, v, index, topics);
    let vc = vocab_topics(tok, v, index, ctrl);
    let ids: Vec<usize> = (0..v).filter(|&i| vt[i] < EXCLUDED).collect();
    let w = &bert.weights().word;
    let rows: Vec<f64> = ids
        .iter()
        .flat_map(|&i| w[i * d..(i + 1) * d].iter().map(|&x| f64::from(x)))
        .collect();
    let compact: Vec<usize> = ids.iter().map(|&i| vt[i]).collect();
    let g = PairSums::gram(&rows, ids.len(), d, &compact);
    [compact, ids.iter().map(|&i| vc[i]).collect::<Vec<_>>()]
        .map(|l| permutation::test(&l, RELABELLINGS, seed, |x| g.gap(x)))
}

/// The attention probe of each topic labelling on the held-out lead sections.
fn attention(
    cfg: &TopicBertConfig,
    bert: &mut Bert,
    tok: &PretrainedTokenizer,
    wt: &super::WikiTopics,
    index: &HashMap<&str, usize>,
    sources: &Sources<'_>,
) -> Result<AttentionRun, ExperimentError> {
    let (nl, nh) = (bert.config.n_layers, bert.config.n_heads);
    let docs = wt
        .dev_idx
        .iter()
        .take(cfg.probe.docs)
        .map(|&i| tok.encode(&wt.texts[i], cfg.model.max_len))
        .collect::<Result<Vec<_>, _>>()
        .map_err(data_err)?;
    let words: Vec<_> = docs.iter().map(|e| piece_words(e, index)).collect();
    let mut att: Vec<AttentionProbe> = (0..4).map(|_| AttentionProbe::new(nl, nh)).collect();
    let mut tables = [PairSums::pairs(&wt.lda), PairSums::pairs(&wt.gold)];
    let names: Vec<String> = (0..nl)
        .map(|l| format!("blocks.{l}.attn.hook_pattern"))
        .collect();
    let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let lens: Vec<usize> = docs.iter().map(|e| e.ids.len()).collect();
    let (mut fwd_secs, mut n_tokens) = (0.0, 0usize);
    for idx in batches_by_length(&lens, cfg.model.batch_size) {
        let seqs: Vec<&[u32]> = idx.iter().map(|&i| &docs[i].ids[..]).collect();
        let batch = pad_batch(&seqs, bert.config.pad_token_id);
        let t0 = Instant::now();
        let (_, cache) = bert.run_with_cache(&batch, &name_refs).map_err(data_err)?;
        fwd_secs += t0.elapsed().as_secs_f64();
        let t = batch.seq_len;
        let per = nh * t * t;
        for (b, &i) in idx.iter().enumerate() {
            n_tokens += lens[i];
            let pats: Vec<&[f64]> = names
                .iter()
                .map(|n| &cache[n].data[b * per..(b + 1) * per])
                .collect();
            let (key, voc) = &words[i];
            for (p, (_, topics)) in att.iter_mut().zip(sources) {
                p.add(&pats, t, lens[i], &piece_topics(voc, topics), key);
            }
            add_pairs(&mut tables, &pats, t, nh, lens[i], key, voc);
        }
    }
    Ok(AttentionRun {
        probes: att,
        tables,
        docs: docs.len(),
        n_tokens,
        fwd_secs,
    })
}

/// Adds one sequence's head-averaged attention between pieces of different
/// words (`key`) to each table (pieces without a corpus word are left out, and
/// so, by the tables, are words without a topic).
fn add_pairs(
    tables: &mut [PairSums; 2],
    pats: &[&[f64]],
    t: usize,
    nh: usize,
    n: usize,
    key: &[usize],
    voc: &[Option<usize>],
) {
    let scale = 1.0 / (pats.len() * nh) as f64;
    for i in 0..n {
        let Some(a) = voc[i] else { continue };
        for j in 0..n {
            let Some(b) = voc[j] else { continue };
            if key[i] == key[j] {
                continue;
            }
            let x: f64 = pats
                .iter()
                .map(|pat| (0..nh).map(|h| pat[(h * t + i) * t + j]).sum::<f64>())
                .sum();
            for tb in tables.iter_mut() {
                tb.add_pair(a, b, x * scale);
            }
        }
    }
}

/// The rule of the `*-control` verdicts: the real gap is positive and the
/// shuffled labelling's stays below `cm` times it. It fails when the "shuffle"
/// kept the topics (a control gap as large as the real one), which
/// `tests/it/topic_bert.rs` checks with the real labels in its place.
pub fn shuffle_shows_no_gap(gap: f64, control: f64, cm: f64) -> bool {
    gap > 0.0 && control.abs() < cm * gap
}

/// The metrics and verdicts (embedding and attention gaps, each with its
/// shuffled control), and the per-layer table of the notes.
fn summary(
    cfg: &TopicBertConfig,
    seed: u64,
    emb: &[EmbeddingProbe],
    ar: &AttentionRun,
    tests: &[(Permuted, Permuted); 2],
    load_secs: f64,
    lda_seconds: f64,
) -> (Summary, String) {
    let att = &ar.probes;
    let (nl, nh) = (att[0].n_layers, att[0].n_heads);
    let (docs, n_tokens, fwd_secs) = (ar.docs, ar.n_tokens, ar.fwd_secs);
    let mut s = Summary::new("topic-bert", seed);
    let cm = cfg.probe.control_max;
    for (k, x) in [
        ("docs", docs as f64),
        ("tokens", n_tokens as f64),
        (
            "forward_tokens_per_second",
            n_tokens as f64 / fwd_secs.max(1e-9),
        ),
        ("load_seconds", load_secs),
        ("lda_seconds", lda_seconds),
    ] {
        s.metric(k, x);
    }
    let mut table = String::from("| topics | layer | mean gap | heads with gap > 0 | mean shuffled gap |\n|---|---|---|---|---|\n");
    for ((src, (e, ec, a, ac)), (te, ta)) in [
        ("lda", (&emb[0], &emb[1], &att[0], &att[1])),
        ("gold", (&emb[2], &emb[3], &att[2], &att[3])),
    ]
    .into_iter()
    .zip(tests)
    {
        for (k, t) in [("embedding_dot_gap", te), ("attention_gap_mean", ta)] {
            s.metric(&format!("{src}_perm.{k}_p"), t.p);
            s.metric(&format!("{src}_perm.{k}_null_q95"), t.null_q95);
        }
        for (c, name) in [
            (Class::SameTopic, "same"),
            (Class::DifferentTopic, "different"),
            (Class::NoTopic, "none"),
        ] {
            s.metric(&format!("{src}_embedding_dot_{name}"), e.dot.mean(c));
            s.metric(
                &format!("{src}_embedding_pairs_{name}"),
                e.dot.count[c as usize] as f64,
            );
        }
        for (m, x) in [
            ("embedding_dot_gap", e.dot.gap()),
            ("embedding_dot_gap_control", ec.dot.gap()),
            ("embedding_cos_gap", e.cos.gap()),
            ("embedding_cos_gap_control", ec.cos.gap()),
        ] {
            s.metric(&format!("{src}_{m}"), x);
        }
        let (g, gc) = (a.gaps(), ac.gaps());
        for l in 0..nl {
            let (gl, gcl) = (&g[l * nh..(l + 1) * nh], &gc[l * nh..(l + 1) * nh]);
            s.metric(&format!("{src}_attention_gap_layer{l}"), mean(gl));
            s.metric(&format!("{src}_attention_gap_control_layer{l}"), mean(gcl));
            table += &format!(
                "| {src} | {l} | {:.2e} | {}/{nh} | {:.2e} |\n",
                mean(gl),
                gl.iter().filter(|&&x| x > 0.0).count(),
                mean(gcl)
            );
        }
        let pos = g.iter().filter(|&&x| x > 0.0).count();
        let (mg, mc) = (mean(&g), mean(&gc));
        s.metric(&format!("{src}_attention_heads_positive"), pos as f64);
        s.metric(&format!("{src}_attention_gap_mean"), mg);
        s.metric(&format!("{src}_attention_gap_control_mean"), mc);
        let counts = a.counts();
        s.metric(
            &format!("{src}_attention_pairs_same"),
            counts[Class::SameTopic as usize] as f64,
        );
        s.metric(
            &format!("{src}_attention_pairs_different"),
            counts[Class::DifferentTopic as usize] as f64,
        );
        let (eg, egc) = (e.dot.gap(), ec.dot.gap());
        s.verdict(
            &format!("topic-bert.{src}.embedding-gap"),
            &format!("{src} topics: same-topic words have larger embedding inner products than different-topic words"),
            "mean ⟨e_i, e_j⟩ same topic > different topic, more than relabelled topics allow: permutation p ≤ 0.05 (199 relabellings keeping the topic sizes)",
            "Li, Li, Risteski 2023, their pretrained-BERT analysis: same-topic words have larger embedding inner products (the sign is the prediction); the relabellings give the gap's null distribution, an exact test (docs/topic.md, \"Verdicts\")",
            format!("{:.4} vs {:.4} (gap {}; cosine gap {:.4})", e.dot.mean(Class::SameTopic), e.dot.mean(Class::DifferentTopic), te.line(), e.cos.gap()),
            eg > 0.0 && te.holds(),
        )
        .scored(eg, Some(te.null_q95.max(0.0)));
        s.verdict(
            &format!("topic-bert.{src}.embedding-control"),
            &format!("{src} topics: shuffled topics show no embedding gap"),
            &format!("|shuffled gap| < {cm} · real gap"),
            "derivation: shuffled topic labels have expected gap 0; the margin (control_max) for sampling noise is ours (docs/topic.md)",
            format!("{egc:.4} vs {eg:.4}"),
            shuffle_shows_no_gap(eg, egc, cm),
        )
        .scored(egc.abs(), Some(cm * eg));
        s.verdict(
            &format!("topic-bert.{src}.attention-gap"),
            &format!("{src} topics: same-topic words get more attention than different-topic words, in most heads"),
            "gap > 0 in more than half of the layer × head pairs, and the mean gap over heads above its relabellings (permutation p ≤ 0.05)",
            "Li, Li, Risteski 2023, their pretrained-BERT analysis: attention favours same-topic words in most heads (\"most\" read as a majority); a majority of positive heads is a coin flip when the gaps are noise, so the mean gap is also tested against 199 relabellings (docs/topic.md)",
            format!("{pos}/{} heads (mean gap {mg:.2e}; relabelled 95th percentile {:.2e}, p = {:.3}); layers with most heads positive: {:?}", nl * nh, ta.null_q95, ta.p, positive_layers(a)),
            2 * pos > nl * nh && ta.holds(),
        )
        .scored(pos as f64 / (nl * nh) as f64, Some(0.5));
        s.verdict(
            &format!("topic-bert.{src}.attention-control"),
            &format!("{src} topics: shuffled topics show no attention gap"),
            &format!("|mean shuffled gap over heads| < {cm} · mean real gap"),
            "derivation: shuffled topic labels have expected gap 0; the margin (control_max) for sampling noise is ours (docs/topic.md)",
            format!("{mc:.2e} vs {mg:.2e}"),
            shuffle_shows_no_gap(mg, mc, cm),
        )
        .scored(mc.abs(), Some(cm * mg));
    }
    (s, table)
}

/// Attention heatmaps of a few held-out first sentences with several topic words,
/// in the head with the largest LDA gap; topic words are marked `word·k`.
fn sentence_figures(
    ctx: &mut RunCtx,
    cfg: &TopicBertConfig,
    bert: &mut Bert,
    tok: &PretrainedTokenizer,
    wt: &super::WikiTopics,
    index: &HashMap<&str, usize>,
    lda: &AttentionProbe,
) -> Result<(), ExperimentError> {
    let g = lda.gaps();
    let best = (0..g.len())
        .max_by(|&a, &b| g[a].total_cmp(&g[b]))
        .unwrap_or(0);
    let (layer, head) = (best / lda.n_heads, best % lda.n_heads);
    let name = format!("blocks.{layer}.attn.hook_pattern");
    let mut drawn = 0;
    for &i in &wt.dev_idx {
        if drawn == cfg.probe.sentences {
            break;
        }
        let first = wt.texts[i].split(". ").next().unwrap_or("");
        let e = tok
            .encode(first, cfg.probe.sentence_len)
            .map_err(data_err)?;
        let (_, voc) = piece_words(&e, index);
        let topic: Vec<Option<usize>> = voc
            .iter()
            .map(|v| {
                v.filter(|&id| id != usize::MAX && wt.lda[id] != usize::MAX)
                    .map(|id| wt.lda[id])
            })
            .collect();
        if topic.iter().flatten().count() < 3 {
            continue;
        }
        let batch = pad_batch(&[&e.ids], bert.config.pad_token_id);
        let (_, cache) = bert.run_with_cache(&batch, &[&name]).map_err(data_err)?;
        let t = e.ids.len();
        let pat = cache[&name].data[head * t * t..(head + 1) * t * t].to_vec();
        let ticks: Vec<String> = e
            .tokens
            .iter()
            .zip(&topic)
            .map(|(s, k)| match k {
                Some(k) => format!("{s}·{k}"),
                None => s.clone(),
            })
            .collect();
        if drawn == 0 {
            sentence_viewer(ctx, bert, &batch, ticks.clone(), (layer, head))?;
        }
        ctx.figure(
            &Figure::heatmap(
                &format!("sentence{drawn}"),
                &format!("Attention, layer {layer} head {head} (largest LDA gap)"),
                "key piece",
                "query piece",
                t,
                t,
                pat,
                false,
            )
            .with_ticks(ticks.clone(), ticks)
            .caption("Rows: queries, columns: keys. `word·k` marks a word whose LDA topic is k."),
        )?;
        drawn += 1;
    }
    Ok(())
}

/// The report's attention viewer of one sentence (`batch`, one sequence of
/// `tokens`) with every head of every layer, opening on the head with the
/// largest LDA gap (`best`, as `(layer, head)`); the patterns are recorded as the run's
/// activations `blocks.{l}.attn.hook_pattern` `[1, heads, T, T]`.
fn sentence_viewer(
    ctx: &mut RunCtx,
    bert: &mut Bert,
    batch: &mechlab_engine::hooks::Batch,
    tokens: Vec<String>,
    best: (usize, usize),
) -> Result<(), ExperimentError> {
    let (nl, nh) = (bert.config.n_layers, bert.config.n_heads);
    let names: Vec<String> = (0..nl)
        .map(|l| format!("blocks.{l}.attn.hook_pattern"))
        .collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let (_, cache) = bert.run_with_cache(batch, &refs).map_err(data_err)?;
    // Every head in layer order: each hook's [1, heads, T, T] is already [head, q, k].
    let pattern: Vec<f64> = names
        .iter()
        .flat_map(|n| cache[n].data.iter().copied())
        .collect();
    let heads = (0..nl)
        .flat_map(|l| (0..nh).map(move |h| mechlab_report::AttentionHead::of_layer(l, h)))
        .collect();
    let acts: Vec<Activation> = names
        .iter()
        .map(|n| Activation {
            name: n.clone(),
            shape: cache[n].shape.clone(),
            data: cache[n].data.clone(),
        })
        .collect();
    ctx.record_activations(&acts)?;
    ctx.figure(
        &Figure::attention(
            "attention",
            &format!("Every head on a held-out sentence (opening on L{}H{}, the largest LDA gap)", best.0, best.1),
            tokens,
            heads,
            pattern,
        )
        .with_source("activations.safetensors", 0)
        .with_first_head(best.0 * nh + best.1)
        .caption("`word·k` marks a word whose LDA topic is k: in a head with a topic gap, such words attend to words of the same topic."),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_model_path_resolves_from_any_working_directory() {
        // Unit tests run in crates/mechlab, where `../shared/...` is not a folder:
        // the shared models folder supplies it.
        let default = super::super::BertModelConfig::default().path;
        assert!(!std::path::Path::new(&default).is_dir());
        if mechlab_corpora::datadir::data_dir().is_ok() {
            let d = model_dir(&default).unwrap();
            assert!(d.join("config.json").is_file(), "{}", d.display());
        }
        match model_dir("nowhere/at-all") {
            Err(ExperimentError::Config(e)) => {
                let e = e.to_string();
                assert!(
                    e.starts_with("model.path: `nowhere/at-all` is not a folder"),
                    "{e}"
                );
            }
            other => panic!("expected a config error, got {other:?}"),
        }
    }
}
