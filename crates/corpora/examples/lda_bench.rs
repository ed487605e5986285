//! Times `lda::fit` on one core.
//!
//! `cargo run --release -p mechlab-corpora --example lda_bench` fits K = 20 topics to
//! 10 000 synthetic documents of 50 tokens over V = 5 000 words (200 sweeps);
//! `-- vital` fits the 10 033 vital-article lead sections instead (lower-cased
//! letter runs, words seen at least 5 times, the 100 most frequent dropped) and
//! prints each topic's top words and the gold topic label it is most common in.

use std::collections::HashMap;
use std::time::Instant;

use mechlab_corpora::lda::{fit, HeldOutConfig, LdaConfig};
use mechlab_corpora::wikipedia::{data_root, vital::load_vital};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn synthetic(n_docs: usize, len: usize, vocab: usize, topics: usize) -> Vec<Vec<u32>> {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let per_topic = vocab / topics;
    (0..n_docs)
        .map(|_| {
            let (a, b) = (rng.random_range(0..topics), rng.random_range(0..topics));
            let mix: f64 = rng.random();
            (0..len)
                .map(|_| {
                    let t = if rng.random::<f64>() < mix { a } else { b };
                    (t * per_topic + rng.random_range(0..per_topic)) as u32
                })
                .collect()
        })
        .collect()
}

fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphabetic())
        .filter(|w| w.chars().count() > 2)
        .map(str::to_lowercase)
}

fn main() {
    let vital = std::env::args().nth(1).as_deref() == Some("vital");
    let (docs, vocab, names, labels) = if vital {
        let articles = load_vital(&data_root().join("wikipedia/vital_articles_en.json")).unwrap();
        let mut counts: HashMap<String, usize> = HashMap::new();
        for a in &articles {
            for w in words(&a.text) {
                *counts.entry(w).or_insert(0) += 1;
            }
        }
        let mut by_freq: Vec<(String, usize)> = counts.into_iter().collect();
        by_freq.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let kept: Vec<String> = by_freq
            .into_iter()
            .skip(100)
            .filter(|(_, c)| *c >= 5)
            .map(|(w, _)| w)
            .collect();
        let ids: HashMap<&str, u32> = kept
            .iter()
            .enumerate()
            .map(|(i, w)| (w.as_str(), i as u32))
            .collect();
        let docs: Vec<Vec<u32>> = articles
            .iter()
            .map(|a| {
                words(&a.text)
                    .filter_map(|w| ids.get(w.as_str()).copied())
                    .collect()
            })
            .collect();
        let labels: Vec<String> = articles
            .iter()
            .map(|a| a.topic.clone().unwrap_or_default())
            .collect();
        (docs, kept.len(), kept, labels)
    } else {
        (
            synthetic(10_000, 50, 5_000, 20),
            5_000,
            Vec::new(),
            Vec::new(),
        )
    };
    let tokens: usize = docs.iter().map(Vec::len).sum();
    let config = LdaConfig {
        seed: 3,
        ..LdaConfig::new(20)
    };
    let (train, held_out) = docs.split_at(docs.len() * 9 / 10);
    let start = Instant::now();
    let model = fit(train, vocab, &config).unwrap();
    let secs = start.elapsed().as_secs_f64();
    let train_tokens: usize = train.iter().map(Vec::len).sum();
    println!(
        "{} docs ({} tokens in all), V = {vocab}, K = 20, {} sweeps: {secs:.1} s, {:.1} ns per token-sweep",
        train.len(),
        tokens,
        config.iterations,
        secs * 1e9 / (train_tokens * config.iterations) as f64
    );
    let trace = model.loglik();
    println!(
        "log p(w,z): first {:?}, last {:?}",
        trace.first(),
        trace.last()
    );
    let start = Instant::now();
    let ppl = model
        .perplexity(held_out, &HeldOutConfig::default())
        .unwrap();
    println!(
        "held-out perplexity (document completion) {:.1} on {} tokens in {:.1} s",
        ppl.perplexity,
        ppl.tokens,
        start.elapsed().as_secs_f64()
    );
    if vital {
        for k in 0..model.n_topics() {
            let mut votes: HashMap<&str, f64> = HashMap::new();
            for (d, label) in labels.iter().enumerate().take(model.n_docs()) {
                *votes.entry(label.as_str()).or_insert(0.0) += model.theta_row(d)[k];
            }
            let best = votes
                .iter()
                .max_by(|a, b| a.1.total_cmp(b.1))
                .map(|(l, _)| *l)
                .unwrap_or("");
            let top: Vec<&str> = model
                .top_words(k, 8)
                .iter()
                .map(|&w| names[w as usize].as_str())
                .collect();
            println!("topic {k:2} [{best}]: {}", top.join(" "));
        }
    }
}
