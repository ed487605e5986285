//! `mechlab encode <model> --text …`: a pretrained encoder's activations on
//! texts, under TransformerLens hook names, without a run.
//!
//! Prints each text's pieces and each recorded activation's shape; `--out`
//! writes them to one safetensors file (`input_ids` `[batch, seq]` as int64,
//! every hook as float64, the texts and pieces in the metadata), which
//! `safetensors.numpy.load_file` reads; `--html` writes a self-contained page
//! with the report's attention viewer of every head on each text.

use crate::pretrained::{Pretrained, PretrainedError};
use crate::run::{atomic, io_err, RunError};
use mechlab_engine::hooks::{ActivationCache, HookError, HookedModel};
use mechlab_report::{AttentionHead, Figure, Report, Section};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Why `mechlab encode` failed.
#[derive(Debug, Error)]
pub enum EncodeError {
    #[error(transparent)]
    Pretrained(#[from] PretrainedError),
    #[error("--hook: {0}")]
    Hook(#[from] HookError),
    #[error(transparent)]
    Write(#[from] RunError),
}

/// What to encode and where the results go.
pub struct Request {
    pub model: String,
    pub texts: Vec<String>,
    /// Hook points to record (every one when empty).
    pub hooks: Vec<String>,
    pub out: Option<PathBuf>,
    pub html: Option<PathBuf>,
}

/// What one `encode` computed.
pub struct Encoded {
    /// Each text's pieces.
    pub pieces: Vec<Vec<String>>,
    /// The recorded activations by hook name (`[batch, …]`, padded to the longest text).
    pub cache: ActivationCache,
    pub input_ids: Vec<u32>,
    pub seq_len: usize,
}

/// Runs the encoder on the texts and writes what `req` asks for.
pub fn run(req: &Request) -> Result<Encoded, EncodeError> {
    let mut p = Pretrained::load(&req.model)?;
    let texts: Vec<&str> = req.texts.iter().map(String::as_str).collect();
    let (batch, enc) = p.encode(&texts)?;
    let nl = p.model.config.n_layers;
    let patterns: Vec<String> = (0..nl)
        .map(|l| format!("blocks.{l}.attn.hook_pattern"))
        .collect();
    let mut names: Vec<String> = if req.hooks.is_empty() {
        p.model.hook_points().into_iter().map(|h| h.name).collect()
    } else {
        req.hooks.clone()
    };
    // The viewer needs every layer's pattern; record them too.
    if req.html.is_some() {
        for n in &patterns {
            if !names.contains(n) {
                names.push(n.clone());
            }
        }
    }
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let (_, cache) = p.model.run_with_cache(&batch, &refs)?;
    let pieces: Vec<Vec<String>> = enc.iter().map(|e| e.tokens.clone()).collect();
    if let Some(out) = &req.out {
        write_safetensors(out, req, &p, &batch.tokens, batch.seq_len, &pieces, &cache)?;
    }
    if let Some(html) = &req.html {
        write_html(html, req, &p, &pieces, &cache, nl)?;
    }
    Ok(Encoded {
        pieces,
        cache,
        input_ids: batch.tokens,
        seq_len: batch.seq_len,
    })
}

fn write_safetensors(
    out: &Path,
    req: &Request,
    p: &Pretrained,
    ids: &[u32],
    seq_len: usize,
    pieces: &[Vec<String>],
    cache: &ActivationCache,
) -> Result<(), RunError> {
    use safetensors::tensor::TensorView;
    let bad = |reason: String| RunError::Folder {
        path: out.display().to_string(),
        reason,
    };
    let id_bytes: Vec<u8> = ids
        .iter()
        .flat_map(|&i| i64::from(i).to_le_bytes())
        .collect();
    let data: Vec<(String, Vec<usize>, Vec<u8>)> = cache
        .iter()
        .map(|(k, t)| {
            let b = t.data.iter().flat_map(|x| x.to_le_bytes()).collect();
            (k.clone(), t.shape.clone(), b)
        })
        .collect();
    let mut views = vec![(
        "input_ids".to_string(),
        TensorView::new(
            safetensors::Dtype::I64,
            vec![req.texts.len(), seq_len],
            &id_bytes,
        )
        .map_err(|e| bad(e.to_string()))?,
    )];
    for (k, shape, b) in &data {
        let v = TensorView::new(safetensors::Dtype::F64, shape.clone(), b)
            .map_err(|e| bad(format!("{k}: {e}")))?;
        views.push((k.clone(), v));
    }
    let meta: std::collections::HashMap<String, String> = [
        ("model".to_string(), p.dir.display().to_string()),
        (
            "texts".to_string(),
            serde_json::json!(req.texts).to_string(),
        ),
        ("pieces".to_string(), serde_json::json!(pieces).to_string()),
    ]
    .into_iter()
    .collect();
    let bytes = safetensors::serialize(views, Some(meta)).map_err(|e| bad(e.to_string()))?;
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    }
    atomic::write(out, &bytes).map_err(io_err(out))
}

/// One viewer per text: every head of every layer over the text's pieces.
fn write_html(
    html: &Path,
    req: &Request,
    p: &Pretrained,
    pieces: &[Vec<String>],
    cache: &ActivationCache,
    nl: usize,
) -> Result<(), RunError> {
    let nh = p.model.config.n_heads;
    // The activation file, when it sits beside the page (a viewer names it relative to the page).
    let source = req.out.as_ref().and_then(|o| {
        let same = o.parent().map(Path::to_path_buf).unwrap_or_default()
            == html.parent().map(Path::to_path_buf).unwrap_or_default();
        same.then(|| o.file_name()?.to_str().map(String::from))
            .flatten()
    });
    let mut figures = Vec::new();
    let mut section = Section::new("Attention");
    for (b, toks) in pieces.iter().enumerate() {
        let t = toks.len();
        let mut pattern = Vec::with_capacity(nl * nh * t * t);
        for l in 0..nl {
            let c = &cache[&format!("blocks.{l}.attn.hook_pattern")];
            let seq = c.shape[2];
            for h in 0..nh {
                for q in 0..t {
                    let at = ((b * nh + h) * seq + q) * seq;
                    pattern.extend_from_slice(&c.data[at..at + t]);
                }
            }
        }
        let heads = (0..nl)
            .flat_map(|l| (0..nh).map(move |h| AttentionHead::of_layer(l, h)))
            .collect();
        let id = format!("text{b}");
        let mut fig = Figure::attention(&id, &format!("Text {b}"), toks.clone(), heads, pattern)
            .caption(&format!("“{}”", req.texts[b]));
        if let Some(s) = &source {
            fig = fig.with_source(s, b);
        }
        section = section.figure(&id);
        figures.push(fig);
    }
    let report = Report::new(&format!("mechlab encode: {}", p.dir.display()))
        .with_meta("model", &p.dir.display().to_string())
        .with_section(section);
    let page = mechlab_report::render_html(&report, &figures).map_err(|e| RunError::Folder {
        path: html.display().to_string(),
        reason: e.to_string(),
    })?;
    if let Some(dir) = html.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    }
    atomic::write(html, page.as_bytes()).map_err(io_err(html))
}
