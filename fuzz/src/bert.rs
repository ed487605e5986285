//! Targets for a pretrained model's folder: the Hugging Face `config.json` with its
//! `model.safetensors` weights, and the tokenizer (`tokenizer.json` or `vocab.txt`).
//!
//! A folder a user points `topic-bert` at is untrusted input: a config may claim
//! any size, a safetensors header any offsets and shapes. The weights target
//! checks that loading never panics or allocates what the file does not hold, and
//! that a model small enough to run gives finite activations of the right shape.

use mechlab_corpora::wordpiece::PretrainedTokenizer;
use mechlab_engine::bert::{Bert, BertConfig, BertWeights};
use mechlab_engine::hooks::{Batch, HookedModel};

use crate::corpora::assert_one_line;
use crate::scratch;

/// Largest model (parameters) the target runs a forward pass through; bigger
/// valid models only load, so one input stays far below AFL's time limit.
const MAX_RUN_PARAMS: usize = 1 << 16;

/// `config.json` up to the first NUL, `model.safetensors` after it. The config is
/// parsed from a file (as `Bert::load` does); weights that load are run on a short
/// sequence of in-vocabulary tokens.
pub fn bert_model(data: &[u8]) {
    let (config, weights) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let dir = scratch::fresh_dir("bert");
    std::fs::write(dir.join("config.json"), config).expect("the scratch folder is writable");
    std::fs::write(dir.join("model.safetensors"), weights).expect("the scratch folder is writable");
    let cfg = match BertConfig::from_file(&dir.join("config.json")) {
        Ok(c) => c,
        Err(e) => return assert_one_line(&e.to_string()),
    };
    let w = match BertWeights::from_bytes(weights, &cfg, "model.safetensors") {
        Ok(w) => w,
        Err(e) => return assert_one_line(&e.to_string()),
    };
    // Loading from the folder must agree with loading from bytes.
    let loaded = Bert::load(&dir).expect("a folder whose parts parse loads");
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(
        bits(&loaded.weights().word),
        bits(&w.word),
        "folder and bytes loads differ"
    );
    let params = w.word.len()
        + w.pos.len()
        + w.layers
            .iter()
            .map(|l| l.wq.len() * 4 + l.w_in.len() * 2)
            .sum::<usize>();
    if params > MAX_RUN_PARAMS {
        return;
    }
    let t = cfg.n_ctx.min(4);
    let tokens: Vec<u32> = (0..t).map(|i| (i % cfg.d_vocab) as u32).collect();
    let mut bert = Bert::new(cfg.clone(), w);
    match bert.run_with_cache(&Batch::new(tokens, 1, t), &[]) {
        Ok((out, _)) => {
            assert_eq!(out.shape, [1, t, cfg.d_model], "output shape");
        }
        Err(e) => assert_one_line(&e.to_string()),
    }
}

/// A tokenizer folder: the first byte picks `tokenizer.json` (odd) or `vocab.txt`
/// (even); the rest up to the next NUL is that file, and what follows is text to
/// encode. An encoding must respect `max_len` and give one piece and one word
/// index per id.
pub fn bert_tokenizer(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let (file, text) = match rest.iter().position(|&b| b == 0) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &[][..]),
    };
    let dir = scratch::fresh_dir("tokenizer");
    let name = if pick % 2 == 1 {
        "tokenizer.json"
    } else {
        "vocab.txt"
    };
    std::fs::write(dir.join(name), file).expect("the scratch folder is writable");
    let tok = match PretrainedTokenizer::from_dir(&dir) {
        Ok(t) => t,
        Err(e) => return assert_one_line(&e.to_string()),
    };
    let text = String::from_utf8_lossy(text);
    match tok.encode(&text, 64) {
        Ok(e) => {
            assert!(e.ids.len() <= 64, "encode ignored max_len");
            assert_eq!(
                e.ids.len(),
                e.tokens.len(),
                "ids and pieces differ in length"
            );
            assert_eq!(e.ids.len(), e.words.len(), "ids and words differ in length");
        }
        Err(e) => assert_one_line(&e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn seed(target: &str, name: &str) -> Vec<u8> {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("corpus/{target}/{name}"));
        std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    /// The seeds reach the deep end of each target (a forward pass, an encoding),
    /// so the fuzzer starts from inputs that pass every check.
    #[test]
    fn seeds_are_valid_models_and_tokenizers() {
        for name in ["seed-tiny", "seed-prefixed"] {
            let data = seed("bert_model", name);
            let i = data.iter().position(|&b| b == 0).unwrap();
            let text = std::str::from_utf8(&data[..i]).unwrap();
            let cfg = BertConfig::from_json_str(text, "config.json").unwrap();
            let w = BertWeights::from_bytes(&data[i + 1..], &cfg, name).unwrap();
            let mut bert = Bert::new(cfg, w);
            let (out, _) = bert
                .run_with_cache(&Batch::new(vec![1, 2, 3], 1, 3), &[])
                .unwrap();
            assert!(out.data.iter().all(|x| x.is_finite()), "{name}");
            bert_model(&data);
        }
        for name in ["seed-vocab", "seed-json"] {
            let data = seed("bert_tokenizer", name);
            let rest = &data[1..];
            let i = rest.iter().position(|&b| b == 0).unwrap();
            let file = if data[0] % 2 == 1 {
                "tokenizer.json"
            } else {
                "vocab.txt"
            };
            let dir = scratch::fresh_dir("seed");
            std::fs::write(dir.join(file), &rest[..i]).unwrap();
            let tok = PretrainedTokenizer::from_dir(&dir).unwrap();
            let e = tok
                .encode(std::str::from_utf8(&rest[i + 1..]).unwrap(), 64)
                .unwrap();
            assert_eq!(
                e.tokens.first().map(String::as_str),
                Some("[CLS]"),
                "{name}"
            );
            assert!(
                e.tokens.iter().any(|t| t == "rome"),
                "{name}: {:?}",
                e.tokens
            );
            bert_tokenizer(&data);
        }
    }

    /// AFL findings: a NaN in a tensor is refused naming the tensor; a damaged
    /// dtype or tensor name is quoted escaped.
    #[test]
    fn findings_are_clear_errors() {
        for (name, want) in [
            ("finding-nan-weight", "holds NaN"),
            ("finding-escaped-dtype", "\\u{7f}"),
            ("finding-escaped-tensor-name", "\\u{c}"),
        ] {
            let data = seed("bert_model", name);
            let i = data.iter().position(|&b| b == 0).unwrap();
            let text = std::str::from_utf8(&data[..i]).unwrap();
            let cfg = BertConfig::from_json_str(text, "config.json").unwrap();
            let e = BertWeights::from_bytes(&data[i + 1..], &cfg, "model.safetensors")
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{name}: {e}");
            assert!(!e.chars().any(char::is_control), "{name}: {e:?}");
            bert_model(&data);
        }
    }

    /// AFL findings on `bert_tokenizer`: panics inside the `tokenizers` crate (a
    /// JSON error in a decoder, a template's special token missing, a single-text
    /// template using sequence B, also under a misspelt `type`), a control character in its message, and a special
    /// token whose ids and tokens differ in length are each an error naming the file,
    /// found before the crate gets to panic.
    #[test]
    fn tokenizer_findings_are_clear_errors() {
        for (name, want) in [
            ("finding-decoder", "tokenizer.json: not valid JSON"),
            ("finding-template", "is not in special_tokens"),
            ("finding-single-b", "cannot use sequence B"),
            ("finding-untagged-type", "is not in special_tokens"),
            ("finding-control", "\\u{7f}"),
            ("finding-length", "ids but"),
        ] {
            let data = seed("bert_tokenizer", name);
            let rest = &data[1..];
            let i = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
            let file = if data[0] % 2 == 1 {
                "tokenizer.json"
            } else {
                "vocab.txt"
            };
            let dir = scratch::fresh_dir("finding");
            std::fs::write(dir.join(file), &rest[..i]).unwrap();
            let text = String::from_utf8_lossy(rest.get(i + 1..).unwrap_or(&[])).to_string();
            let e = PretrainedTokenizer::from_dir(&dir)
                .and_then(|t| t.encode(&text, 64))
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{name}: {e}");
            assert!(!e.chars().any(char::is_control), "{name}: {e:?}");
            bert_tokenizer(&data);
        }
    }

    /// A weights file cut short is a one-line error, not a panic.
    #[test]
    fn truncated_weights_are_an_error() {
        let data = seed("bert_model", "seed-tiny");
        let i = data.iter().position(|&b| b == 0).unwrap();
        let text = std::str::from_utf8(&data[..i]).unwrap();
        let cfg = BertConfig::from_json_str(text, "config.json").unwrap();
        let cut = &data[i + 1..data.len() - 7];
        let e = BertWeights::from_bytes(cut, &cfg, "model.safetensors").unwrap_err();
        assert!(e.to_string().contains("model.safetensors"), "{e}");
    }
}
