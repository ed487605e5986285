//! A byte-level BPE (GPT-2's kind of tokenizer) trained on a run's own text,
//! for the experiments that read text (`lm-induction`, `transformer`).
//!
//! Training and encoding are the Hugging Face `tokenizers` crate's, a well-kept
//! implementation; this module only fixes its settings: a byte-level
//! pre-tokenizer and decoder, all 256 bytes in the initial alphabet (so every
//! byte string encodes), merges that occur at least twice, and `vocab` tokens
//! at most. The trained tokenizer is written as a `tokenizer.json` that
//! `tokenizers` (Rust or Python) reads back.

use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::{
    DecoderWrapper, NormalizerWrapper, PostProcessorWrapper, PreTokenizerWrapper, TokenizerBuilder,
    TokenizerImpl,
};

/// A trained byte-level BPE.
pub type Bpe = TokenizerImpl<
    BPE,
    NormalizerWrapper,
    PreTokenizerWrapper,
    PostProcessorWrapper,
    DecoderWrapper,
>;

/// A BPE of at most `vocab` tokens trained on `texts`; errors start with `key`
/// (the config key that asked for it).
pub fn train<S: AsRef<str> + Send>(
    texts: impl Iterator<Item = S> + Send,
    vocab: usize,
    key: &str,
) -> Result<Bpe, String> {
    let err = |e: tokenizers::Error| format!("{key}: {e}");
    let mut tk: Bpe = TokenizerBuilder::default()
        .with_model(BPE::default())
        .with_pre_tokenizer(Some(PreTokenizerWrapper::ByteLevel(ByteLevel::default())))
        .with_decoder(Some(DecoderWrapper::ByteLevel(ByteLevel::default())))
        .build()
        .map_err(err)?;
    let mut trainer = BpeTrainerBuilder::new()
        .vocab_size(vocab)
        .min_frequency(2)
        .show_progress(false)
        .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
        .build();
    tk.train(&mut trainer, texts).map_err(err)?;
    Ok(tk)
}

/// The ids of `texts` one after another.
pub fn encode<S: AsRef<str>>(tk: &Bpe, texts: &[S], key: &str) -> Result<Vec<u32>, String> {
    let mut out = Vec::new();
    for t in texts {
        let e = tk
            .encode(t.as_ref(), false)
            .map_err(|e| format!("{key}: {e}"))?;
        out.extend_from_slice(e.get_ids());
    }
    Ok(out)
}

/// The ids and pieces of `text` under the `tokenizer.json` at `path` (a run's
/// trained BPE, or the file a run names), for `Model.to_tokens`.
pub fn encode_with(path: &std::path::Path, text: &str) -> Result<(Vec<u32>, Vec<String>), String> {
    let tk =
        tokenizers::Tokenizer::from_file(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let e = tk
        .encode(text, false)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((e.get_ids().to_vec(), e.get_tokens().to_vec()))
}

/// The text of `ids` under the `tokenizer.json` at `path` (its decoder).
pub fn decode_with(path: &std::path::Path, ids: &[u32]) -> Result<String, String> {
    let tk =
        tokenizers::Tokenizer::from_file(path).map_err(|e| format!("{}: {e}", path.display()))?;
    tk.decode(ids, false)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Each id's piece under the `tokenizer.json` at `path` (`None` past the vocabulary).
pub fn pieces_with(path: &std::path::Path, ids: &[u32]) -> Result<Vec<Option<String>>, String> {
    let tk =
        tokenizers::Tokenizer::from_file(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(ids.iter().map(|&i| tk.id_to_token(i)).collect())
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_byte_string_encodes_and_decodes_back() {
        let text = "the cat sat on the mat; the cat sat on the hat.\n".repeat(20);
        let tk = super::train([text.as_str()].into_iter(), 300, "data.tokenizer").unwrap();
        assert!(tk.get_vocab_size(true) > 256, "some merges");
        // (the byte-level pre-tokenizer puts a space before a text that has none)
        let odd = " zebra ✓ \u{1}";
        let ids = super::encode(&tk, &[odd], "k").unwrap();
        assert_eq!(tk.decode(&ids, false).unwrap(), odd);
        // merges shorten the training text
        assert!(super::encode(&tk, &[text.as_str()], "k").unwrap().len() < text.len() / 2);
    }
}
