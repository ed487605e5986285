//! Vocabulary: word ids built from token counts, encoding with truncation and
//! padding, and a JSON file format a run's checkpoint can be read back with.
//!
//! Ids [`PAD`] = 0 (`<pad>`) and [`UNK`] = 1 (`<unk>`) are reserved; words follow
//! from most to least frequent, ties broken alphabetically (byte order), so the
//! same counts always give the same ids. Words rarer than `min_count` are left
//! out, and at most `max_size` ids are made (the two reserved ones included, so
//! `max_size` is the embedding table's row count). Each id keeps its training
//! count (`<unk>`: the total count of the words left out) so a probe can report
//! word frequencies.
//!
//! ```
//! use mechlab_corpora::{Vocab, PAD, UNK};
//! let docs = [vec!["good", "movie"], vec!["bad", "movie"], vec!["good", "plot"]];
//! let counts = Vocab::count_tokens(docs.iter().map(|d| d.iter().copied()));
//! let v = Vocab::build(&counts, 1, Some(5));
//! assert_eq!(v.words(), ["<pad>", "<unk>", "good", "movie", "bad"]);
//! assert_eq!(v.encode(&["good", "plot", "movie"], 4), (vec![2, UNK, 3, PAD], 3));
//! assert_eq!(v.count(UNK), 1); // "plot" did not fit
//! ```

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::CorpusError;

/// Id of the padding token `<pad>`.
pub const PAD: u32 = 0;
/// Id of the unknown-word token `<unk>`.
pub const UNK: u32 = 1;
/// Words of the reserved ids.
pub const RESERVED: [&str; 2] = ["<pad>", "<unk>"];

const FORMAT: &str = "mechlab-vocab";
const VERSION: u32 = 1;

/// A word <-> id map with training counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vocab {
    words: Vec<String>,
    counts: Vec<u64>,
    index: HashMap<String, u32>,
    min_count: u64,
    max_size: Option<usize>,
}

/// The saved form.
#[derive(Serialize, Deserialize)]
struct VocabFile {
    format: String,
    version: u32,
    min_count: u64,
    max_size: Option<usize>,
    words: Vec<String>,
    counts: Vec<u64>,
}

impl Vocab {
    /// Counts tokens over documents.
    pub fn count_tokens<D, T>(docs: D) -> HashMap<String, u64>
    where
        D: IntoIterator,
        D::Item: IntoIterator<Item = T>,
        T: AsRef<str>,
    {
        let mut counts: HashMap<String, u64> = HashMap::new();
        for doc in docs {
            for tok in doc {
                let tok = tok.as_ref();
                match counts.get_mut(tok) {
                    Some(c) => *c += 1,
                    None => {
                        counts.insert(tok.to_string(), 1);
                    }
                }
            }
        }
        counts
    }

    /// Builds a vocabulary from token counts: words with count >= `min_count`,
    /// most frequent first (ties alphabetical), at most `max_size` ids including
    /// the two reserved ones. Reserved words in `counts` are ignored.
    pub fn build(counts: &HashMap<String, u64>, min_count: u64, max_size: Option<usize>) -> Self {
        let mut ranked: Vec<(&str, u64)> = counts
            .iter()
            .filter(|(w, _)| !RESERVED.contains(&w.as_str()))
            .map(|(w, &c)| (w.as_str(), c))
            .collect();
        ranked.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        let room = max_size.map_or(usize::MAX, |m| m.saturating_sub(RESERVED.len()));
        let kept = ranked
            .iter()
            .take_while(|(_, c)| *c >= min_count.max(1))
            .take(room)
            .count();
        let unk_count: u64 = ranked[kept..].iter().map(|(_, c)| c).sum();
        let mut words: Vec<String> = RESERVED.iter().map(|w| w.to_string()).collect();
        let mut cs = vec![0, unk_count];
        for (w, c) in &ranked[..kept] {
            words.push(w.to_string());
            cs.push(*c);
        }
        Self::from_parts(words, cs, min_count, max_size)
    }

    fn from_parts(
        words: Vec<String>,
        counts: Vec<u64>,
        min_count: u64,
        max_size: Option<usize>,
    ) -> Self {
        let index = words
            .iter()
            .enumerate()
            .map(|(i, w)| (w.clone(), i as u32))
            .collect();
        Vocab {
            words,
            counts,
            index,
            min_count,
            max_size,
        }
    }

    /// Number of ids, reserved ones included.
    pub fn len(&self) -> usize {
        self.words.len()
    }

    /// Whether only the reserved ids exist.
    pub fn is_empty(&self) -> bool {
        self.words.len() <= RESERVED.len()
    }

    /// All words by id.
    pub fn words(&self) -> &[String] {
        &self.words
    }

    /// The id of `word`, [`UNK`] if it is not in the vocabulary.
    pub fn id(&self, word: &str) -> u32 {
        self.index.get(word).copied().unwrap_or(UNK)
    }

    /// The id of `word`, `None` if it is not in the vocabulary.
    pub fn get(&self, word: &str) -> Option<u32> {
        self.index.get(word).copied()
    }

    /// The word of `id`.
    pub fn word(&self, id: u32) -> Option<&str> {
        self.words.get(id as usize).map(String::as_str)
    }

    /// The training count of `id` (0 for an unknown id and for `<pad>`).
    pub fn count(&self, id: u32) -> u64 {
        self.counts.get(id as usize).copied().unwrap_or(0)
    }

    /// The `min_count` and `max_size` the vocabulary was built with.
    pub fn settings(&self) -> (u64, Option<usize>) {
        (self.min_count, self.max_size)
    }

    /// Ids of the first `max_len` tokens, padded with [`PAD`] to `max_len`, and
    /// the number of real tokens (`min(tokens.len(), max_len)`).
    pub fn encode<T: AsRef<str>>(&self, tokens: &[T], max_len: usize) -> (Vec<u32>, usize) {
        let len = tokens.len().min(max_len);
        let mut ids: Vec<u32> = tokens[..len].iter().map(|t| self.id(t.as_ref())).collect();
        ids.resize(max_len, PAD);
        (ids, len)
    }

    /// Words of `ids` (`<unk>`'s word for ids out of range).
    pub fn decode(&self, ids: &[u32]) -> Vec<&str> {
        ids.iter()
            .map(|&i| self.word(i).unwrap_or(RESERVED[UNK as usize]))
            .collect()
    }

    /// The JSON text of this vocabulary.
    pub fn to_json(&self) -> String {
        let file = VocabFile {
            format: FORMAT.into(),
            version: VERSION,
            min_count: self.min_count,
            max_size: self.max_size,
            words: self.words.clone(),
            counts: self.counts.clone(),
        };
        serde_json::to_string(&file).expect("a vocabulary always serialises")
    }

    /// Reads a vocabulary from JSON text; `path` only names the source in errors.
    pub fn from_json(text: &str, path: &Path) -> Result<Self, CorpusError> {
        let bad = |reason: String| CorpusError::CorruptVocab {
            path: path.to_path_buf(),
            reason,
        };
        let f: VocabFile = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
        if f.format != FORMAT || f.version != VERSION {
            return Err(bad(format!(
                "format {:?} version {}, expected {FORMAT:?} version {VERSION}",
                f.format, f.version
            )));
        }
        if f.words.len() != f.counts.len() {
            return Err(bad(format!(
                "{} words but {} counts",
                f.words.len(),
                f.counts.len()
            )));
        }
        if f.words.len() < RESERVED.len() || f.words[..RESERVED.len()] != RESERVED {
            return Err(bad(format!("ids 0 and 1 must be {RESERVED:?}")));
        }
        if f.words.len() > u32::MAX as usize {
            return Err(bad("too many words for u32 ids".into()));
        }
        let v = Self::from_parts(f.words, f.counts, f.min_count, f.max_size);
        if v.index.len() != v.words.len() {
            return Err(bad("duplicate words".into()));
        }
        if let Some(i) = v.words.iter().position(|w| w.is_empty()) {
            return Err(bad(format!("empty word at id {i}")));
        }
        Ok(v)
    }

    /// Writes the vocabulary as JSON to `path`.
    pub fn save(&self, path: &Path) -> Result<(), CorpusError> {
        std::fs::write(path, self.to_json()).map_err(|e| CorpusError::io(path, e))
    }

    /// Reads a vocabulary saved by [`Vocab::save`].
    pub fn load(path: &Path) -> Result<Self, CorpusError> {
        let bytes = std::fs::read(path).map_err(|e| CorpusError::io(path, e))?;
        let text = String::from_utf8(bytes).map_err(|e| CorpusError::CorruptVocab {
            path: path.to_path_buf(),
            reason: format!("invalid UTF-8 at byte {}", e.utf8_error().valid_up_to()),
        })?;
        Self::from_json(&text, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(pairs: &[(&str, u64)]) -> HashMap<String, u64> {
        pairs.iter().map(|(w, c)| (w.to_string(), *c)).collect()
    }

    #[test]
    fn order_is_count_then_alphabet_and_deterministic() {
        let c = counts(&[
            ("b", 3),
            ("a", 3),
            ("z", 5),
            ("c", 1),
            ("d", 2),
            ("<unk>", 9),
        ]);
        let v = Vocab::build(&c, 2, None);
        assert_eq!(v.words(), ["<pad>", "<unk>", "z", "a", "b", "d"]);
        assert_eq!(v.count(UNK), 1);
        assert_eq!(v.count(PAD), 0);
        assert_eq!(v.count(2), 5);
        for _ in 0..5 {
            assert_eq!(Vocab::build(&c, 2, None), v);
        }
        let small = Vocab::build(&c, 1, Some(4));
        assert_eq!(small.words(), ["<pad>", "<unk>", "z", "a"]);
        assert_eq!(small.count(UNK), 3 + 1 + 2);
        assert_eq!(Vocab::build(&c, 1, Some(1)).len(), 2);
        assert!(Vocab::build(&c, 100, None).is_empty());
    }

    #[test]
    fn encode_truncates_and_pads() {
        let v = Vocab::build(&counts(&[("a", 2), ("b", 1)]), 1, None);
        assert_eq!(v.encode(&["a", "b", "a", "b"], 3), (vec![2, 3, 2], 3));
        assert_eq!(v.encode(&["b", "x"], 5), (vec![3, UNK, PAD, PAD, PAD], 2));
        assert_eq!(v.encode::<&str>(&[], 2), (vec![PAD, PAD], 0));
        assert_eq!(v.encode(&["a"], 0), (vec![], 0));
        assert_eq!(
            v.decode(&[2, 3, UNK, PAD, 99]),
            ["a", "b", "<unk>", "<pad>", "<unk>"]
        );
        assert_eq!((v.get("x"), v.id("x"), v.word(3)), (None, UNK, Some("b")));
    }

    #[test]
    fn save_load_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vocab.json");
        let toks = [vec!["é", "x", "\"q\""], vec!["x"]];
        let v = Vocab::build(
            &Vocab::count_tokens(toks.iter().map(|d| d.iter())),
            1,
            Some(10),
        );
        v.save(&path).unwrap();
        let back = Vocab::load(&path).unwrap();
        assert_eq!(back, v);
        assert_eq!(back.settings(), (1, Some(10)));
        assert_eq!(back.id("é"), v.id("é"));
    }

    #[test]
    fn corrupt_files_are_typed_errors_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.json");
        let good = Vocab::build(&counts(&[("a", 1)]), 1, None).to_json();
        let cases = [
            (good[..good.len() / 2].to_string(), "EOF"),
            (good.replace("mechlab-vocab", "other"), "format"),
            (good.replace("\"<unk>\"", "\"<unq>\""), "ids 0 and 1"),
            (good.replace("[0,0,1]", "[0,0]"), "3 words but 2 counts"),
            (good.replace("\"a\"", "\"<unk>\""), "duplicate"),
            (good.replace("\"a\"", "\"\""), "empty word at id 2"),
        ];
        for (text, why) in cases {
            std::fs::write(&path, text).unwrap();
            let e = Vocab::load(&path).unwrap_err();
            let msg = e.to_string();
            assert!(matches!(e, CorpusError::CorruptVocab { .. }), "{msg}");
            assert!(
                msg.contains("v.json") && msg.contains(why),
                "{msg} lacks {why}"
            );
        }
        std::fs::write(&path, b"\xff\xfe").unwrap();
        assert!(Vocab::load(&path)
            .unwrap_err()
            .to_string()
            .contains("invalid UTF-8 at byte 0"));
        assert!(matches!(
            Vocab::load(&dir.path().join("none.json")),
            Err(CorpusError::NotFound { .. })
        ));
    }
}
