//! Topic-bert's analysis half. The run trains nothing: its model is the
//! pretrained encoder at `model.path`, at "step" 0.
//!
//! The causal question: do the heads that attend to same-topic words carry the
//! topic structure downstream? On the run's held-out lead sections (its LDA
//! topics, refitted from the run's config and seed), the heads of every layer
//! but the last are ranked by their attention gap (same-topic minus
//! different-topic weight, [`super::probes::AttentionProbe`]); the `n_heads`
//! with the largest gap have `blocks.{l}.attn.hook_z` zeroed, and the control
//! zeroes the `n_heads` whose gap is closest to 0. Two gaps are watched: the last
//! layer's mean attention gap, and the contextual embedding gap (mean cosine of
//! same-topic minus different-topic piece pairs in one section, on the last
//! layer's output `blocks.{L−1}.hook_normalized_resid_post`). A second question
//! acts on the attention itself: every layer's pattern is patched with its clean
//! self minus the weight on each query's same-topic keys (rows renormalised,
//! [`crate::patching::drop_keys`]); the control removes as many different-topic
//! keys; the output cosine gap is watched.

use super::probes::{class_of, AttentionProbe, Class, ClassStats};
use super::{
    batches_by_length, pad_batch, piece_topics, piece_words, wiki_topics, TopicBertConfig,
};
use crate::analysis::{Effect, InterveneError, Interventions, LoadError, Model, Request, RunDir};
use crate::papers::topic::data::N_SPECIAL;
use crate::patching::{control_keys, drop_keys, hook};
use crate::pretrained::Pretrained;
use mechlab_engine::bert::Bert;
use mechlab_engine::hooks::{Ablation, Hook, HookedModel};
use serde_json::json;
use std::collections::HashMap;

pub fn load(cfg: &TopicBertConfig, run: &RunDir, step: Option<u64>) -> Result<Model, LoadError> {
    if let Some(s) = step.filter(|&s| s != 0) {
        return Err(LoadError::NoStep {
            path: format!("{}: model.path", run.file),
            step: s,
            available: vec![0],
        });
    }
    let key = format!("{}: model.path", run.file);
    let p = Pretrained::load_at(&cfg.model.path, &key)?;
    Ok(Box::new(p.model))
}

/// The two gaps of the module doc over the held-out sections, with `hooks` applied.
struct Gaps {
    /// `[layer, head]` attention gaps.
    heads: Vec<f64>,
    last_layer: f64,
    embedding: f64,
}

pub fn intervene(
    cfg: &TopicBertConfig,
    run: &RunDir,
    req: &Request,
) -> Result<Interventions, InterveneError> {
    req.fixed_suite(
        "topic-bert",
        "the heads with the largest topic gap zeroed, against the heads with the smallest",
    )?;
    if req.step.is_some_and(|s| s != 0) {
        load(cfg, run, req.step)?;
    }
    let bad = |e: String| InterveneError::Invalid(format!("{}: {e}", run.file));
    let p = Pretrained::load_at(&cfg.model.path, &format!("{}: model.path", run.file))
        .map_err(LoadError::from)?;
    let mut bert = p.model;
    let (nl, nh) = (bert.config.n_layers, bert.config.n_heads);
    let wt = wiki_topics(&cfg.wiki, cfg.seed).map_err(|e| bad(e.to_string()))?;
    let index: HashMap<&str, usize> = wt
        .corpus
        .vocab
        .iter()
        .enumerate()
        .skip(N_SPECIAL + 1)
        .map(|(i, w)| (w.as_str(), i))
        .collect();
    let tok = &p.tokenizer.pieces;
    let docs = wt
        .dev_idx
        .iter()
        .take(cfg.probe.docs)
        .map(|&i| tok.encode(&wt.texts[i], cfg.model.max_len))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(e.to_string()))?;
    let pieces: Vec<(Vec<usize>, Vec<usize>)> = docs
        .iter()
        .map(|e| {
            let (word, voc) = piece_words(e, &index);
            (word, piece_topics(&voc, &wt.lda))
        })
        .collect();
    let ids: Vec<&[u32]> = docs.iter().map(|e| &e.ids[..]).collect();
    let mut gaps = |mode: Mode<'_>| -> Result<Gaps, InterveneError> {
        gaps_of(&mut bert, &ids, &pieces, cfg.model.batch_size, mode)
    };
    let clean = gaps(Mode::Hooks(&[]))?;
    // Heads of every layer but the last, ranked by their clean gap.
    let mut ranked: Vec<usize> = (0..(nl - 1) * nh).collect();
    ranked.sort_by(|&a, &b| clean.heads[b].total_cmp(&clean.heads[a]));
    let top: Vec<usize> = ranked[..nh].to_vec();
    ranked.sort_by(|&a, &b| clean.heads[a].abs().total_cmp(&clean.heads[b].abs()));
    let flat: Vec<usize> = ranked[..nh].to_vec();
    let zero = |heads: &[usize]| -> Vec<Hook> {
        (0..nl)
            .filter_map(|l| {
                let hs: Vec<usize> = heads
                    .iter()
                    .filter(|&&k| k / nh == l)
                    .map(|k| k % nh)
                    .collect();
                (!hs.is_empty()).then(|| {
                    hook(
                        &format!("blocks.{l}.attn.hook_z"),
                        Ablation::Zero,
                        Some(hs),
                        None,
                    )
                })
            })
            .collect()
    };
    let hit = gaps(Mode::Hooks(&zero(&top)))?;
    let ctl = gaps(Mode::Hooks(&zero(&flat)))?;
    let drop_same = gaps(Mode::DropKeys { same: true })?;
    let drop_other = gaps(Mode::DropKeys { same: false })?;
    let name = |ks: &[usize]| {
        ks.iter()
            .map(|k| format!("L{}H{}", k / nh, k % nh))
            .collect::<Vec<_>>()
    };
    let (lt, lf) = (name(&top), name(&flat));
    let labels = (
        format!("zero the {nh} largest-gap heads ({})", lt.join(" ")),
        format!("zero the {nh} heads of gap nearest 0 ({})", lf.join(" ")),
    );
    let mut extra = serde_json::Map::new();
    extra.insert("head_gaps".into(), json!(clean.heads));
    extra.insert("ablated".into(), json!(lt));
    extra.insert("control".into(), json!(lf));
    Ok(Interventions {
        data: format!("{} held-out lead sections (LDA topics)", docs.len()),
        effects: vec![
            Effect::new(
                "topic-heads-attention",
                "do the topic heads set up the last layer's same-topic attention?",
                &format!("layer-{} mean attention gap", nl - 1),
            )
            .values(clean.last_layer, hit.last_layer, ctl.last_layer)
            .labels(&labels.0, &labels.1),
            Effect::new(
                "topic-heads-embedding",
                "do the topic heads make same-topic words' contextual embeddings alike?",
                "output cosine gap (same − different topic)",
            )
            .values(clean.embedding, hit.embedding, ctl.embedding)
            .labels(&labels.0, &labels.1),
            Effect::new(
                "same-topic-attention-embedding",
                "does attending to same-topic words make their contextual embeddings alike?",
                "output cosine gap (same − different topic)",
            )
            .values(clean.embedding, drop_same.embedding, drop_other.embedding)
            .labels(
                "every layer's attention on same-topic keys removed (rows renormalised)",
                "as many different-topic keys removed",
            ),
        ],
        extra,
        ..Interventions::default()
    })
}

/// What a forward of [`gaps_of`] changes.
enum Mode<'a> {
    /// These hooks on every batch.
    Hooks(&'a [Hook]),
    /// Every layer's pattern patched with its clean self, minus the attention on
    /// each query's same-topic keys (`false`: on as many different-topic keys).
    DropKeys { same: bool },
}

fn gaps_of(
    bert: &mut Bert,
    ids: &[&[u32]],
    pieces: &[(Vec<usize>, Vec<usize>)],
    batch_size: usize,
    mode: Mode<'_>,
) -> Result<Gaps, InterveneError> {
    let (nl, nh) = (bert.config.n_layers, bert.config.n_heads);
    let mut names: Vec<String> = (0..nl)
        .map(|l| format!("blocks.{l}.attn.hook_pattern"))
        .collect();
    names.push(format!("blocks.{}.hook_normalized_resid_post", nl - 1));
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let lens: Vec<usize> = ids.iter().map(|s| s.len()).collect();
    let mut att = AttentionProbe::new(nl, nh);
    let mut emb = ClassStats::default();
    for idx in batches_by_length(&lens, batch_size) {
        let seqs: Vec<&[u32]> = idx.iter().map(|&i| ids[i]).collect();
        let batch = pad_batch(&seqs, bert.config.pad_token_id);
        let hooks = match mode {
            Mode::Hooks(h) => h.to_vec(),
            Mode::DropKeys { same } => {
                let (_, clean) = bert.run_with_cache(&batch, &refs[..nl])?;
                let keys = |b: usize, q: usize, want: Class| -> Vec<usize> {
                    let (word, topic) = &pieces[idx[b]];
                    let n = lens[idx[b]];
                    if q >= n {
                        return Vec::new();
                    }
                    (0..n)
                        .filter(|&k| class_of(topic[q], topic[k], word[q] == word[k]) == Some(want))
                        .collect()
                };
                refs[..nl]
                    .iter()
                    .map(|name| {
                        let p = drop_keys(&clean[*name], |b, q| {
                            let hit = keys(b, q, Class::SameTopic);
                            if same {
                                hit
                            } else {
                                control_keys(keys(b, q, Class::DifferentTopic), hit.len(), q)
                            }
                        });
                        hook(name, Ablation::patch(p), None, None)
                    })
                    .collect()
            }
        };
        let (_, cache) = bert.run_hooked(&batch, &hooks, &refs)?;
        let t = batch.seq_len;
        let per = nh * t * t;
        let resid = &cache[refs[nl]];
        let d = resid.shape[2];
        for (b, &i) in idx.iter().enumerate() {
            let pats: Vec<&[f64]> = refs[..nl]
                .iter()
                .map(|n| &cache[*n].data[b * per..(b + 1) * per])
                .collect();
            let (word, topic) = &pieces[i];
            att.add(&pats, t, lens[i], topic, word);
            let row = |k: usize| &resid.data[(b * t + k) * d..(b * t + k + 1) * d];
            let norm = |x: &[f64]| x.iter().map(|v| v * v).sum::<f64>().sqrt().max(1e-300);
            for a in 0..lens[i] {
                for c in a + 1..lens[i] {
                    if let Some(cl) = class_of(topic[a], topic[c], word[a] == word[c]) {
                        if cl == Class::SameTopic || cl == Class::DifferentTopic {
                            let (x, y) = (row(a), row(c));
                            let dot: f64 = x.iter().zip(y).map(|(p, q)| p * q).sum();
                            emb.add(cl, dot / (norm(x) * norm(y)));
                        }
                    }
                }
            }
        }
    }
    let heads = att.gaps();
    let last = &heads[(nl - 1) * nh..];
    Ok(Gaps {
        last_layer: last.iter().sum::<f64>() / nh as f64,
        heads,
        embedding: emb.gap(),
    })
}
