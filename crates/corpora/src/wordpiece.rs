//! A pretrained model's own tokenizer (WordPiece for BERT), read offline from its
//! Hugging Face folder, with every sub-word piece mapped back to its word.
//!
//! The folder's `tokenizer.json` is read by the `tokenizers` crate (built without
//! its network features); a folder with only a `vocab.txt` gets the standard BERT
//! uncased pipeline around that vocabulary (clean text, lower-case, strip accents,
//! split on whitespace and punctuation, WordPiece, `[CLS] … [SEP]`). A missing or
//! unreadable file is an error naming it. Padding and truncation settings stored in
//! `tokenizer.json` are switched off: [`PretrainedTokenizer::encode`] truncates. [`Encoded::words`] gives each piece's
//! word index within the text (the pre-tokenizer's words: `rome's` is the three
//! words `rome`, `'`, `s`), `None` for `[CLS]` and `[SEP]`.
//!
//! ```no_run
//! use mechlab_corpora::wordpiece::PretrainedTokenizer;
//! let tok = PretrainedTokenizer::from_dir("../shared/models/all-MiniLM-L6-v2".as_ref()).unwrap();
//! let e = tok.encode("Tokenization works", 16).unwrap();
//! assert_eq!(e.ids.first(), Some(&101)); // [CLS]
//! assert_eq!(e.words[1], Some(0));       // "token" belongs to word 0
//! ```

use std::path::{Path, PathBuf};
use thiserror::Error;
use tokenizers::models::wordpiece::WordPiece;
use tokenizers::normalizers::bert::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::processors::bert::BertProcessing;
use tokenizers::Tokenizer;

/// Why a tokenizer could not be loaded or used; the message names the file.
#[derive(Debug, Error)]
pub enum TokenizerError {
    #[error("{}: missing (and no {} beside it to fall back on)", .json.display(), .vocab.display())]
    Missing { json: PathBuf, vocab: PathBuf },
    #[error("{}: {reason}", .file.display())]
    Bad { file: PathBuf, reason: String },
}

/// The pieces of one text.
#[derive(Clone, Debug, PartialEq)]
pub struct Encoded {
    /// Vocabulary ids, `[CLS]` first and `[SEP]` last.
    pub ids: Vec<u32>,
    /// The pieces as strings (`##` marks a continuation).
    pub tokens: Vec<String>,
    /// The word each piece belongs to (`None` for special tokens).
    pub words: Vec<Option<u32>>,
}

/// A model folder's tokenizer.
pub struct PretrainedTokenizer {
    inner: Tokenizer,
    file: PathBuf,
    sep: u32,
}

impl PretrainedTokenizer {
    /// Reads `dir/tokenizer.json`, or builds the BERT pipeline on `dir/vocab.txt`.
    pub fn from_dir(dir: &Path) -> Result<Self, TokenizerError> {
        let (json, vocab) = (dir.join("tokenizer.json"), dir.join("vocab.txt"));
        let bad = |file: &Path, e: &dyn std::fmt::Display| TokenizerError::Bad {
            file: file.to_path_buf(),
            reason: one_line(e),
        };
        let (inner, file) = if json.is_file() {
            // The `tokenizers` crate panics on some malformed files (a JSON error
            // inside a decoder, found by fuzzing): check the JSON first, and turn
            // any panic left into this error.
            let text = std::fs::read(&json).map_err(|e| bad(&json, &e))?;
            let value = serde_json::from_slice::<serde_json::Value>(&text)
                .map_err(|e| bad(&json, &format!("not valid JSON: {e}")))?;
            check_templates(&value["post_processor"]).map_err(|e| bad(&json, &e))?;
            let read = no_panic(|| Tokenizer::from_bytes(&text)).map_err(|e| bad(&json, &e))?;
            (read.map_err(|e| bad(&json, &e))?, json)
        } else if vocab.is_file() {
            (bert_from_vocab(&vocab).map_err(|e| bad(&vocab, &e))?, vocab)
        } else {
            return Err(TokenizerError::Missing { json, vocab });
        };
        // A tokenizer.json may pad every text to a fixed length and truncate it
        // (all-MiniLM-L6-v2's pads to 128): callers pad batches themselves and
        // choose the length in `encode`.
        let mut inner = inner;
        inner.with_padding(None);
        inner.with_truncation(None).map_err(|e| bad(&file, &e))?;
        let sep = inner
            .token_to_id("[SEP]")
            .ok_or_else(|| bad(&file, &"no [SEP] token in the vocabulary"))?;
        Ok(PretrainedTokenizer { inner, file, sep })
    }

    /// The file the tokenizer was read from.
    pub fn file(&self) -> &Path {
        &self.file
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Tokenizes `text` with `[CLS]`/`[SEP]`, keeping at most `max_len` pieces (the
    /// last one always `[SEP]`).
    pub fn encode(&self, text: &str, max_len: usize) -> Result<Encoded, TokenizerError> {
        let bad = |e: &dyn std::fmt::Display| TokenizerError::Bad {
            file: self.file.clone(),
            reason: format!("encoding {:?}: {}", truncate(text), one_line(e)),
        };
        // A post-processor naming a special token the vocabulary lacks panics
        // inside `tokenizers` (found by fuzzing).
        let e = no_panic(|| self.inner.encode(text, true))
            .map_err(|e| bad(&e))?
            .map_err(|e| bad(&e))?;
        let mut out = Encoded {
            ids: e.get_ids().to_vec(),
            tokens: e.get_tokens().to_vec(),
            words: e.get_word_ids().to_vec(),
        };
        // A post-processor whose special token lists more pieces than ids makes
        // `tokenizers` return lists of different lengths (found by fuzzing).
        if out.tokens.len() != out.ids.len() || out.words.len() != out.ids.len() {
            return Err(bad(&format!(
                "{} ids but {} pieces and {} word indices (are a special token's \"ids\" and \"tokens\" in the post-processor of the same length?)",
                out.ids.len(),
                out.tokens.len(),
                out.words.len()
            )));
        }
        if out.ids.len() > max_len && max_len >= 2 {
            out.ids.truncate(max_len - 1);
            out.tokens.truncate(max_len - 1);
            out.words.truncate(max_len - 1);
            out.ids.push(self.sep);
            out.tokens.push("[SEP]".into());
            out.words.push(None);
        }
        Ok(out)
    }
}

fn bert_from_vocab(vocab: &Path) -> tokenizers::Result<Tokenizer> {
    let wp = WordPiece::from_file(&vocab.to_string_lossy())
        .unk_token("[UNK]".into())
        .build()?;
    let mut tok = Tokenizer::new(wp);
    let id = |t: &str| {
        tok.token_to_id(t)
            .ok_or_else(|| format!("no {t} token in the vocabulary"))
    };
    let (sep, cls) = (id("[SEP]")?, id("[CLS]")?);
    tok.with_normalizer(Some(BertNormalizer::new(true, true, None, true)));
    tok.with_pre_tokenizer(Some(BertPreTokenizer));
    tok.with_post_processor(Some(BertProcessing::new(
        ("[SEP]".into(), sep),
        ("[CLS]".into(), cls),
    )));
    Ok(tok)
}

/// Refuses a `TemplateProcessing` post-processor (also inside a `Sequence` of
/// processors) that `tokenizers` accepts but then panics on when it encodes (found
/// by fuzzing): a template naming a special token that `special_tokens` lacks, a
/// `single` template with the second sequence `B`, or a special token whose `ids`
/// and `tokens` differ in length.
///
/// The processor is recognised by its fields, not its `type`: `tokenizers` reads
/// post-processors untagged, so a misspelt `type` still loads as a template.
fn check_templates(pp: &serde_json::Value) -> Result<(), String> {
    if let Some(ps) = pp["processors"].as_array() {
        ps.iter().try_for_each(check_templates)?;
    }
    match pp
        .get("single")
        .or(pp.get("pair"))
        .or(pp.get("special_tokens"))
    {
        None => Ok(()),
        Some(_) => {
            let special = &pp["special_tokens"];
            for (key, tok) in special.as_object().into_iter().flatten() {
                let len = |k: &str| tok[k].as_array().map(Vec::len);
                if len("ids") != len("tokens") {
                    return Err(format!(
                        "post_processor: special token `{}` has {} ids but {} tokens",
                        excerpt_str(key),
                        len("ids").unwrap_or(0),
                        len("tokens").unwrap_or(0)
                    ));
                }
            }
            for which in ["single", "pair"] {
                for piece in pp[which].as_array().into_iter().flatten() {
                    if let Some(id) = piece["SpecialToken"]["id"].as_str() {
                        if special.get(id).is_none() {
                            return Err(format!(
                                "post_processor.{which}: special token `{}` is not in special_tokens",
                                excerpt_str(id)
                            ));
                        }
                    }
                    if which == "single" && piece["Sequence"]["id"].as_str() == Some("B") {
                        return Err(
                            "post_processor.single: a single-text template cannot use sequence B"
                                .into(),
                        );
                    }
                }
            }
            Ok(())
        }
    }
}

fn excerpt_str(s: &str) -> String {
    crate::error::excerpt(s, 60)
}

/// A message on one line, control characters escaped, cut short.
fn one_line(e: &dyn std::fmt::Display) -> String {
    crate::error::excerpt(&e.to_string().replace('\n', " "), 300)
}

/// Runs `f`, turning a panic inside the `tokenizers` crate into an error message.
fn no_panic<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| {
        let msg = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        format!("the tokenizers library failed on it ({msg})")
    })
}

fn truncate(text: &str) -> String {
    text.chars().take(40).collect()
}
