//! Token windows the researcher brings: read from `.npy`, `.safetensors` or
//! text files, checked, split into training and held-out sets, and drawn into
//! batches.
//!
//! A file holds either windows, `[N, L]` (each row one sequence; the model
//! reads `T = L − 1` positions and predicts tokens `1..L`), or a flat stream
//! `[N]` cut into windows of `data.seq_len + 1` tokens at random offsets each
//! step (nanoGPT's `get_batch`). A loss mask has the token file's shape; a
//! nonzero entry marks a token to predict, so a classification-style task
//! marks only its answer token (column 0 is never a target: nothing precedes
//! it). Training rows are drawn uniformly with replacement from the data
//! stream. Errors name the key, the file and the offending value.
//!
//! `.npy` files go through the `npyz` crate and `.safetensors` through
//! `safetensors`; a text file is one token per byte, the `tokenizer.json`
//! that `data.tokenizer_file` names (Hugging Face `tokenizers`), or a BPE
//! trained on `data.file` ([`crate::bpe`]) and kept in the run folder.

use super::config::{Tokenizer, TransformerConfig};
use rand::Rng;
use std::borrow::Cow;
use std::path::Path;

/// Where a run keeps the BPE `data.tokenizer = "bpe"` trained.
pub const BPE_FILE: &str = "tokenizer.json";

/// `cfg` reading text through a `tokenizer.json`: with `data.tokenizer =
/// "bpe"`, the BPE trained on `data.file` and written to the run folder `dir`
/// as [`BPE_FILE`] the first time (a resumed run and its analysis read that
/// file back, never retrain); otherwise `cfg` itself.
pub fn resolve_tokenizer<'a>(
    cfg: &'a TransformerConfig,
    dir: &Path,
) -> Result<Cow<'a, TransformerConfig>, String> {
    if cfg.data.tokenizer != Tokenizer::Bpe || is_id_file(&cfg.data.file) {
        return Ok(Cow::Borrowed(cfg));
    }
    let path = dir.join(BPE_FILE);
    if !path.exists() {
        let file = &cfg.data.file;
        let text = std::fs::read(file).map_err(|e| format!("data.file = {file:?}: {e}"))?;
        let text = String::from_utf8_lossy(&text);
        let key = format!("data.tokenizer = \"bpe\" on data.file = {file:?}");
        let tk = crate::bpe::train(std::iter::once(text.as_ref()), cfg.data.bpe_vocab, &key)?;
        let json = tk.to_string(false).map_err(|e| format!("{key}: {e}"))?;
        crate::run::atomic::write(&path, json.as_bytes())
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let mut c = cfg.clone();
    c.data.tokenizer = Tokenizer::Json;
    c.data.tokenizer_file = path.display().to_string();
    Ok(Cow::Owned(c))
}

fn is_id_file(path: &str) -> bool {
    matches!(ext(path).as_str(), "npy" | "safetensors")
}

/// Each id's text under the tokenizer of text file `file` (empty for id
/// files): a byte as itself when printable ASCII, else `\xNN`; a tokenizer's
/// tokens as it spells them.
pub fn token_names(file: &str, cfg: &TransformerConfig) -> Result<Vec<String>, String> {
    if file.is_empty() || is_id_file(file) {
        return Ok(Vec::new());
    }
    Ok(match cfg.data.tokenizer {
        Tokenizer::Bytes => (0..=255u8)
            .map(|b| match b {
                b' '..=b'~' => (b as char).to_string(),
                b'\n' => "\\n".into(),
                _ => format!("\\x{b:02x}"),
            })
            .collect(),
        Tokenizer::Json | Tokenizer::Bpe => {
            let tf = &cfg.data.tokenizer_file;
            let tok = tokenizers::Tokenizer::from_file(tf)
                .map_err(|e| format!("data.tokenizer_file = {tf:?}: {e}"))?;
            (0..tok.get_vocab_size(true) as u32)
                .map(|i| tok.id_to_token(i).unwrap_or_else(|| i.to_string()))
                .collect()
        }
    })
}

/// Token ids with an optional loss mask.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenSet {
    pub tokens: Vec<u32>,
    /// Same length as `tokens`: which tokens are targets (`None`: every one).
    pub mask: Option<Vec<bool>>,
    /// `Some(L)`: rows of `L` tokens; `None`: one flat stream.
    pub width: Option<usize>,
}

/// An integer array read from a file, as `i64`, with its shape.
struct Array {
    data: Vec<i64>,
    shape: Vec<usize>,
}

fn ext(path: &str) -> String {
    Path::new(path)
        .extension()
        .map(|e| e.to_string_lossy().to_lowercase())
        .unwrap_or_default()
}

fn read_npy(path: &str, key: &str) -> Result<Array, String> {
    let bad = |e: String| format!("{key} = {path:?}: {e}");
    let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let npy = npyz::NpyFile::new(&bytes[..]).map_err(|e| bad(format!("not a .npy file ({e})")))?;
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    if npy.order() != npyz::Order::C {
        return Err(bad(
            "a Fortran-ordered array; save it with np.ascontiguousarray".into(),
        ));
    }
    let descr = npy.dtype().descr();
    let io = |e: std::io::Error| bad(e.to_string());
    let data: Vec<i64> = match descr.trim_matches('\'').trim_start_matches(['<', '|', '=']) {
        "i8" => npy.into_vec::<i64>().map_err(io)?,
        "i4" => npy.into_vec::<i32>().map_err(io)?.into_iter().map(i64::from).collect(),
        "i2" => npy.into_vec::<i16>().map_err(io)?.into_iter().map(i64::from).collect(),
        "i1" => npy.into_vec::<i8>().map_err(io)?.into_iter().map(i64::from).collect(),
        "u8" => npy
            .into_vec::<u64>()
            .map_err(io)?
            .into_iter()
            .map(|x| i64::try_from(x).unwrap_or(i64::MAX))
            .collect(),
        "u4" => npy.into_vec::<u32>().map_err(io)?.into_iter().map(i64::from).collect(),
        "u2" => npy.into_vec::<u16>().map_err(io)?.into_iter().map(i64::from).collect(),
        "u1" => npy.into_vec::<u8>().map_err(io)?.into_iter().map(i64::from).collect(),
        "b1" => npy.into_vec::<bool>().map_err(io)?.into_iter().map(i64::from).collect(),
        other => {
            return Err(bad(format!(
                "dtype {other}: token ids and masks must be integers (or bool); cast with .astype(np.int64)"
            )))
        }
    };
    Ok(Array { data, shape })
}

fn read_safetensors(path: &str, key: &str) -> Result<Array, String> {
    use safetensors::Dtype;
    let bad = |e: String| format!("{key} = {path:?}: {e}");
    let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| bad(e.to_string()))?;
    let names = st.names();
    let name = if names.len() == 1 {
        names[0].to_string()
    } else if names.contains(&"tokens") {
        "tokens".to_string()
    } else {
        return Err(bad(format!(
            "holds {} tensors ({}): name the token tensor `tokens`",
            names.len(),
            names
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    };
    let t = st.tensor(&name).map_err(|e| bad(e.to_string()))?;
    let raw = t.data();
    let le = |n: usize| raw.chunks_exact(n);
    let data: Vec<i64> = match t.dtype() {
        Dtype::I64 => le(8)
            .map(|c| i64::from_le_bytes(c.try_into().expect("8")))
            .collect(),
        Dtype::I32 => le(4)
            .map(|c| i32::from_le_bytes(c.try_into().expect("4")) as i64)
            .collect(),
        Dtype::U32 => le(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4")) as i64)
            .collect(),
        Dtype::I16 => le(2)
            .map(|c| i16::from_le_bytes(c.try_into().expect("2")) as i64)
            .collect(),
        Dtype::U16 => le(2)
            .map(|c| u16::from_le_bytes(c.try_into().expect("2")) as i64)
            .collect(),
        Dtype::U8 | Dtype::BOOL => raw.iter().map(|&b| b as i64).collect(),
        Dtype::I8 => raw.iter().map(|&b| b as i8 as i64).collect(),
        other => {
            return Err(bad(format!(
                "tensor `{name}` has dtype {other:?}: token ids and masks must be integers"
            )))
        }
    };
    Ok(Array {
        data,
        shape: t.shape().to_vec(),
    })
}

fn read_text(path: &str, key: &str, cfg: &TransformerConfig) -> Result<Array, String> {
    let bad = |e: String| format!("{key} = {path:?}: {e}");
    let text = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let data: Vec<i64> = match cfg.data.tokenizer {
        Tokenizer::Bytes => text.iter().map(|&b| b as i64).collect(),
        Tokenizer::Json | Tokenizer::Bpe => {
            // (`bpe` reaches here as the `json` of its trained file: resolve_tokenizer)
            let tf = &cfg.data.tokenizer_file;
            let tok = tokenizers::Tokenizer::from_file(tf)
                .map_err(|e| format!("data.tokenizer_file = {tf:?}: {e}"))?;
            let s = String::from_utf8_lossy(&text);
            let enc = tok
                .encode(s.as_ref(), false)
                .map_err(|e| bad(format!("tokenizing: {e}")))?;
            enc.get_ids().iter().map(|&x| x as i64).collect()
        }
    };
    let n = data.len();
    Ok(Array {
        data,
        shape: vec![n],
    })
}

fn read_array(path: &str, key: &str, cfg: &TransformerConfig) -> Result<Array, String> {
    match ext(path).as_str() {
        "npy" => read_npy(path, key),
        "safetensors" => read_safetensors(path, key),
        _ => read_text(path, key, cfg),
    }
}

/// The vocabulary the tokenizer of text file `file` defines (`None` for id files).
pub fn text_vocab(file: &str, cfg: &TransformerConfig) -> Result<Option<usize>, String> {
    if is_id_file(file) {
        return Ok(None);
    }
    Ok(Some(match cfg.data.tokenizer {
        Tokenizer::Bytes => 256,
        Tokenizer::Json | Tokenizer::Bpe => {
            let tf = &cfg.data.tokenizer_file;
            tokenizers::Tokenizer::from_file(tf)
                .map_err(|e| format!("data.tokenizer_file = {tf:?}: {e}"))?
                .get_vocab_size(true)
        }
    }))
}

/// The token set in `path` (`key` names it in errors) with the loss mask in
/// `mask_path` (empty: none).
pub fn read_set(
    path: &str,
    key: &str,
    mask_path: &str,
    mask_key: &str,
    cfg: &TransformerConfig,
) -> Result<TokenSet, String> {
    let a = read_array(path, key, cfg)?;
    let bad = |e: String| format!("{key} = {path:?}: {e}");
    let width = match a.shape.len() {
        1 => None,
        2 => Some(a.shape[1]),
        r => {
            return Err(bad(format!(
                "an array of rank {r} {:?}: token ids are [N, L] windows or a flat [N] stream",
                a.shape
            )))
        }
    };
    if a.data.is_empty() || width == Some(0) {
        return Err(bad(format!("holds no tokens (shape {:?})", a.shape)));
    }
    if let Some((i, &x)) = a
        .data
        .iter()
        .enumerate()
        .find(|(_, &x)| !(0..=u32::MAX as i64).contains(&x))
    {
        return Err(bad(format!(
            "token {x} at {}: token ids are ≥ 0",
            index(i, &a.shape)
        )));
    }
    let tokens: Vec<u32> = a.data.iter().map(|&x| x as u32).collect();
    let mask = if mask_path.is_empty() {
        None
    } else {
        let m = read_array(mask_path, mask_key, cfg)?;
        if m.shape != a.shape {
            return Err(format!(
                "{mask_key} = {mask_path:?}: shape {:?}, but {key} has shape {:?}",
                m.shape, a.shape
            ));
        }
        let m: Vec<bool> = m.data.iter().map(|&x| x != 0).collect();
        let any = match width {
            Some(w) => m.chunks(w).any(|r| r[1..].iter().any(|&x| x)),
            None => m.iter().any(|&x| x),
        };
        if !any {
            return Err(format!(
                "{mask_key} = {mask_path:?}: marks no token to predict (column 0 never is one)"
            ));
        }
        Some(m)
    };
    Ok(TokenSet {
        tokens,
        mask,
        width,
    })
}

/// `[i, j]` (or `[i]`) of a flat index.
fn index(i: usize, shape: &[usize]) -> String {
    match shape {
        [_, w] => format!("[{}, {}]", i / w, i % w),
        _ => format!("[{i}]"),
    }
}

impl TokenSet {
    /// Rows (windows) or stream tokens.
    pub fn len(&self) -> usize {
        match self.width {
            Some(w) => self.tokens.len() / w,
            None => self.tokens.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The largest token id.
    pub fn max_id(&self) -> u32 {
        self.tokens.iter().copied().max().unwrap_or(0)
    }

    /// A token at or past `d_vocab` is an error naming `key`, the id and where.
    pub fn check_vocab(&self, d_vocab: usize, key: &str) -> Result<(), String> {
        match self.tokens.iter().position(|&x| x as usize >= d_vocab) {
            None => Ok(()),
            Some(i) => {
                let shape = match self.width {
                    Some(w) => vec![self.tokens.len() / w, w],
                    None => vec![self.tokens.len()],
                };
                Err(format!(
                    "{key}: token {} at {} is at or past model.d_vocab = {d_vocab}",
                    self.tokens[i],
                    index(i, &shape)
                ))
            }
        }
    }

    /// Splits off the last `frac` of the rows (or of the stream) as a held-out set.
    pub fn split(self, frac: f64, min_stream: usize) -> Result<(TokenSet, TokenSet), String> {
        let unit = self.width.unwrap_or(1);
        let n = self.len();
        let mut held = ((n as f64) * frac).ceil() as usize;
        if self.width.is_none() {
            held = held.max(min_stream);
        }
        if held == 0 || held >= n {
            return Err(format!(
                "data.heldout_frac = {frac}: leaves no training or no held-out data of {n} {}",
                if self.width.is_some() {
                    "windows"
                } else {
                    "tokens"
                }
            ));
        }
        let cut = (n - held) * unit;
        let mut a = self.tokens;
        let b2 = a.split_off(cut);
        let (ma, mb) = match self.mask {
            Some(mut m) => {
                let mb = m.split_off(cut);
                (Some(m), Some(mb))
            }
            None => (None, None),
        };
        Ok((
            TokenSet {
                tokens: a,
                mask: ma,
                width: self.width,
            },
            TokenSet {
                tokens: b2,
                mask: mb,
                width: self.width,
            },
        ))
    }

    /// One batch of windows of `w` tokens into `tokens` and `mask` (`[B, w]`):
    /// rows drawn uniformly, or stream offsets drawn uniformly.
    pub fn draw(&self, tokens: &mut [u32], mask: &mut [bool], w: usize, rng: &mut impl Rng) {
        for (row, m) in tokens.chunks_exact_mut(w).zip(mask.chunks_exact_mut(w)) {
            let start = match self.width {
                Some(l) => {
                    debug_assert_eq!(l, w);
                    rng.random_range(0..self.len()) * w
                }
                None => rng.random_range(0..=self.tokens.len() - w),
            };
            self.copy_window(start, row, m);
        }
    }

    fn copy_window(&self, start: usize, row: &mut [u32], m: &mut [bool]) {
        let w = row.len();
        row.copy_from_slice(&self.tokens[start..start + w]);
        match &self.mask {
            Some(mk) => m.copy_from_slice(&mk[start..start + w]),
            None => m.iter_mut().for_each(|x| *x = true),
        }
        m[0] = false;
    }

    /// Up to `n` held-out windows of `w` tokens: the first `n` rows, or `n`
    /// evenly spaced windows of the stream.
    pub fn windows(&self, n: usize, w: usize) -> (Vec<u32>, Vec<bool>) {
        let count = match self.width {
            Some(_) => n.min(self.len()),
            None => n.min(self.tokens.len() - w + 1),
        };
        let (mut tok, mut mask) = (vec![0; count * w], vec![false; count * w]);
        for (i, (row, m)) in tok
            .chunks_exact_mut(w)
            .zip(mask.chunks_exact_mut(w))
            .enumerate()
        {
            let start = match self.width {
                Some(_) => i * w,
                None => (self.tokens.len() - w) * i / count.max(1),
            };
            self.copy_window(start, row, m);
        }
        (tok, mask)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_npy_i64(path: &Path, data: &[i64], shape: &[u64]) {
        use npyz::WriterBuilder;
        let mut w = npyz::WriteOptions::new()
            .default_dtype()
            .shape(shape)
            .writer(std::fs::File::create(path).unwrap())
            .begin_nd()
            .unwrap();
        w.extend(data.iter().copied()).unwrap();
        w.finish().unwrap();
    }

    #[test]
    fn windows_masks_splits_and_errors() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.npy");
        let data: Vec<i64> = (0..40).map(|i| i % 7).collect();
        write_npy_i64(&p, &data, &[8, 5]);
        let cfg = TransformerConfig::default();
        let ps = p.display().to_string();
        let s = read_set(&ps, "data.file", "", "", &cfg).unwrap();
        assert_eq!((s.width, s.len(), s.max_id()), (Some(5), 8, 6));
        assert!(s
            .check_vocab(6, "data.file")
            .unwrap_err()
            .contains("token 6 at [1, 1]"));
        let (tr, he) = s.clone().split(0.25, 0).unwrap();
        assert_eq!((tr.len(), he.len()), (6, 2));
        assert_eq!(
            &he.tokens[..],
            &data[30..].iter().map(|&x| x as u32).collect::<Vec<_>>()[..]
        );
        let (w, m) = he.windows(10, 5);
        assert_eq!(w.len(), 10);
        assert_eq!(
            m,
            vec![false, true, true, true, true, false, true, true, true, true]
        );
        // a mask of the wrong shape, a mask with no target, a float array, rank 3
        let mp = dir.path().join("m.npy");
        write_npy_i64(&mp, &[0; 40], &[8, 5]);
        let e = read_set(
            &ps,
            "data.file",
            &mp.display().to_string(),
            "data.loss_mask_file",
            &cfg,
        );
        assert!(e.unwrap_err().contains("marks no token"));
        write_npy_i64(&mp, &[1; 40], &[5, 8]);
        let e = read_set(
            &ps,
            "data.file",
            &mp.display().to_string(),
            "data.loss_mask_file",
            &cfg,
        );
        assert!(e.unwrap_err().contains("shape [5, 8]"));
        let fp = dir.path().join("f.npy");
        npyz::to_file_1d(&fp, vec![1.5f64, 2.0]).unwrap();
        let e = read_set(&fp.display().to_string(), "data.file", "", "", &cfg).unwrap_err();
        assert!(e.contains("dtype f8") && e.contains("data.file"), "{e}");
        write_npy_i64(&fp, &[1; 8], &[2, 2, 2]);
        assert!(
            read_set(&fp.display().to_string(), "data.file", "", "", &cfg)
                .unwrap_err()
                .contains("rank 3")
        );
    }

    #[test]
    fn streams_are_cut_into_windows_at_random_offsets() {
        let s = TokenSet {
            tokens: (0..100).collect(),
            mask: None,
            width: None,
        };
        let (mut t, mut m) = (vec![0; 3 * 10], vec![false; 3 * 10]);
        s.draw(
            &mut t,
            &mut m,
            10,
            &mut crate::rng::stream(0, crate::rng::Stream::Data),
        );
        for row in t.chunks(10) {
            assert!(row.windows(2).all(|p| p[1] == p[0] + 1));
        }
        assert!(m.chunks(10).all(|r| !r[0] && r[1..].iter().all(|&x| x)));
        let (w, _) = s.windows(4, 10);
        assert_eq!(&w[..10], &(0..10).collect::<Vec<u32>>()[..]);
    }
}
