//! Wikipedia articles as masked-LM documents, with word topics from our LDA and
//! from the articles' gold labels.
//!
//! Articles come from [`mechlab_corpora::wikipedia::load_articles`] (any of its
//! formats). [`tokenize`] is the corpora crate's word tokenizer (lower-cased,
//! punctuation dropped, apostrophes inside words kept); the vocabulary keeps the `n_words` most frequent words seen at
//! least `min_count` times (ties by word), the rest become `UNK`. Ids: the four
//! specials of [`crate::papers::topic::data`], then `UNK = 4`, then the words by frequency.
//! Word topics for the probes are given to content words only (not stop words,
//! seen at least `topic_min_count` times): the argmax topic of a seeded collapsed
//! Gibbs LDA ([`mechlab_corpora::lda`]) fitted on the content words, and,
//! separately, the gold topic with the highest lift `P(topic | word) / P(topic)`.
//!
//! ```
//! use mechlab::papers::topic::wiki_data::tokenize;
//! assert_eq!(tokenize("Rome's 2 Forums, e.g."), ["rome's", "2", "forums", "e", "g"]);
//! ```

use crate::papers::topic::data::{MlmSet, NO_LABEL, N_SPECIAL, START};
use mechlab_corpora::article::Article;
use mechlab_corpora::vocab::{Vocab, RESERVED};
use mechlab_corpora::{Punct, Tokenizer};
use std::collections::HashMap;

pub const UNK: u32 = N_SPECIAL as u32;

/// Lower-cased words, punctuation dropped: the tokenizer the review corpora use.
pub fn tokenize(text: &str) -> Vec<String> {
    Tokenizer {
        punct: Punct::Drop,
        ..Tokenizer::default()
    }
    .tokenize(text)
}

/// A small English stop-word list: function words carry no topic.
pub const STOP_WORDS: &[&str] = &[
    "a", "about", "after", "all", "also", "an", "and", "any", "are", "as", "at", "be", "been",
    "before", "being", "between", "both", "but", "by", "can", "could", "did", "do", "does",
    "during", "each", "either", "first", "for", "from", "had", "has", "have", "he", "her", "his",
    "how", "however", "i", "if", "in", "into", "is", "it", "its", "known", "later", "many", "may",
    "more", "most", "much", "no", "not", "now", "of", "on", "one", "only", "or", "other", "over",
    "s", "same", "several", "she", "since", "so", "some", "such", "than", "that", "the", "their",
    "them", "then", "there", "these", "they", "this", "those", "through", "to", "two", "under",
    "until", "up", "used", "very", "was", "we", "were", "what", "when", "where", "which", "while",
    "who", "whom", "whose", "will", "with", "within", "would", "you",
];

/// The tokenized corpus.
pub struct WikiCorpus {
    /// Word of each id (specials and `UNK` first, as `"<pad>"` etc.).
    pub vocab: Vec<String>,
    /// Documents as ids, each starting with `START`, truncated to `max_len`.
    pub docs: Vec<Vec<u32>>,
    /// Gold label index per document (`usize::MAX` when absent or excluded).
    pub gold: Vec<usize>,
    pub gold_names: Vec<String>,
    /// Content word per id (not special, not `UNK`, not a stop word).
    pub content: Vec<bool>,
    pub counts: Vec<u64>,
}

/// Tokenizes `articles`, builds the vocabulary and the documents.
pub fn build(
    articles: &[Article],
    n_words: usize,
    min_count: u64,
    max_len: usize,
    exclude: &[String],
) -> WikiCorpus {
    let toks: Vec<Vec<String>> = articles.iter().map(|a| tokenize(&a.text)).collect();
    // The corpora crate's vocabulary builder ranks the words (count ≥ min_count,
    // most frequent first, ties by word); ours puts the MLM specials before them.
    let ranked = Vocab::build(
        &Vocab::count_tokens(&toks),
        min_count,
        Some(n_words + RESERVED.len()),
    );
    let mut vocab: Vec<String> = ["<pad>", "<mask>", "<start>", "<end>", "<unk>"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    vocab.extend(ranked.words()[RESERVED.len()..].iter().cloned());
    let index: HashMap<&str, u32> = vocab
        .iter()
        .enumerate()
        .skip(N_SPECIAL + 1)
        .map(|(i, w)| (w.as_str(), i as u32))
        .collect();
    let mut counts = vec![0u64; vocab.len()];
    let docs: Vec<Vec<u32>> = toks
        .iter()
        .map(|t| {
            let mut d = vec![START];
            d.extend(
                t.iter()
                    .take(max_len.saturating_sub(1))
                    .map(|w| *index.get(w.as_str()).unwrap_or(&UNK)),
            );
            d.iter().for_each(|&i| counts[i as usize] += 1);
            d
        })
        .collect();
    let mut gold_names: Vec<String> = articles
        .iter()
        .filter_map(|a| a.topic.clone())
        .filter(|t| !exclude.contains(t))
        .collect();
    gold_names.sort();
    gold_names.dedup();
    let gold = articles
        .iter()
        .map(|a| {
            a.topic
                .as_ref()
                .and_then(|t| gold_names.iter().position(|g| g == t))
                .unwrap_or(usize::MAX)
        })
        .collect();
    let content = vocab
        .iter()
        .enumerate()
        .map(|(i, w)| {
            i > N_SPECIAL
                && !STOP_WORDS.contains(&w.as_str())
                && !w.chars().all(|c| c.is_ascii_digit())
        })
        .collect();
    WikiCorpus {
        vocab,
        docs,
        gold,
        gold_names,
        content,
        counts,
    }
}

impl WikiCorpus {
    /// Documents `idx` as an unmasked [`MlmSet`].
    pub fn mlm_set(&self, idx: &[usize]) -> MlmSet {
        let mut set = MlmSet {
            offsets: vec![0],
            ..MlmSet::default()
        };
        for &i in idx {
            set.original.extend_from_slice(&self.docs[i]);
            set.offsets.push(set.original.len());
        }
        set.input = set.original.clone();
        set.label = vec![NO_LABEL; set.original.len()];
        set.hidden = vec![false; set.original.len()];
        set
    }

    /// The content-word documents (ids shifted to a dense content vocabulary) for
    /// LDA, and the map back: `(docs, content id → vocab id)`.
    pub fn content_docs(&self, idx: &[usize]) -> (Vec<Vec<u32>>, Vec<usize>) {
        let ids: Vec<usize> = (0..self.vocab.len()).filter(|&i| self.content[i]).collect();
        let mut dense = vec![u32::MAX; self.vocab.len()];
        for (k, &i) in ids.iter().enumerate() {
            dense[i] = k as u32;
        }
        let docs = idx
            .iter()
            .map(|&i| {
                self.docs[i]
                    .iter()
                    .map(|&t| dense[t as usize])
                    .filter(|&t| t != u32::MAX)
                    .collect()
            })
            .collect();
        (docs, ids)
    }

    /// Gold topic per vocabulary id: the label with the highest lift among the
    /// documents `idx`, for content words seen at least `min_count` times there.
    pub fn gold_word_topics(&self, idx: &[usize], min_count: u64) -> Vec<usize> {
        let (v, k) = (self.vocab.len(), self.gold_names.len());
        let mut c = vec![0u64; v * k];
        let mut per_topic = vec![0u64; k];
        for &i in idx {
            let g = self.gold[i];
            if g == usize::MAX {
                continue;
            }
            for &t in &self.docs[i] {
                c[t as usize * k + g] += 1;
                per_topic[g] += 1;
            }
        }
        let total: u64 = per_topic.iter().sum();
        (0..v)
            .map(|w| {
                let n: u64 = c[w * k..(w + 1) * k].iter().sum();
                if !self.content[w] || n < min_count || total == 0 {
                    return usize::MAX;
                }
                (0..k)
                    .max_by(|&a, &b| {
                        let la = c[w * k + a] as f64 / per_topic[a].max(1) as f64;
                        let lb = c[w * k + b] as f64 / per_topic[b].max(1) as f64;
                        la.total_cmp(&lb).then(b.cmp(&a))
                    })
                    .unwrap_or(usize::MAX)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocabulary_and_gold_topics() {
        let arts = [
            Article::new("a", "Lions hunt zebras. Lions sleep.", Some("Biology"), "t"),
            Article::new(
                "b",
                "Rome is a city; Rome has forums.",
                Some("Geography"),
                "t",
            ),
            Article::new("c", "Lions in Rome", Some("Uncategorized"), "t"),
        ];
        let c = build(&arts, 3, 1, 5, &["Uncategorized".to_string()]);
        assert_eq!(&c.vocab[5..], ["lions", "rome", "a"]);
        assert_eq!(c.docs[0], vec![START, 5, 4, 4, 5]);
        assert_eq!(c.gold, vec![0, 1, usize::MAX]);
        let t = c.gold_word_topics(&[0, 1, 2], 1);
        assert_eq!((t[5], t[6], t[7]), (0, 1, usize::MAX)); // "a" is a stop word
    }
}
