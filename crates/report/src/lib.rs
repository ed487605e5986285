//! mechlab's figures and reports.
//!
//! Experiments record [`spec::Figure`]s as data; this crate renders them (SVG and
//! PNG, [`render`]), stores them in a run's `figures/` folder
//! ([`write_figures`], [`load_figures`]), and assembles the run's report from a
//! [`doc::Report`]: `report.html`, one self-contained offline page
//! ([`html::render_html`]), and `report.md` ([`markdown::render_markdown`]).
//!
//! ```
//! use mechlab_report::{load_figures, render_html, write_figures, Report, Section, Series};
//! use mechlab_report::spec::Figure;
//! let dir = std::env::temp_dir().join(format!("mechlab-doc-{}", std::process::id()));
//! let fig = Figure::lines("loss", "Loss", "step", "loss")
//!     .with_series(Series::new("train", vec![1.0, 2.0, 3.0], vec![1.0, 0.6, 0.4]));
//! write_figures(&dir, &[fig]).unwrap();
//! let figures = load_figures(&dir).unwrap();
//! assert!(dir.join("loss.png").exists() && dir.join("loss.svg").exists());
//! let report = Report::new("Run").with_section(Section::new("Results").figure("loss"));
//! let html = render_html(&report, &figures).unwrap();
//! assert!(html.contains("<svg"));
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```

pub mod doc;
pub mod html;
pub mod markdown;
pub mod render;
pub mod spec;
mod viewer;

pub use doc::{Block, Headline, Measurement, Report, Section, Verdict};
pub use html::{render_html, render_viewer_fragment};
pub use markdown::{render_markdown, render_markdown_with};
pub use render::{render_png, render_svg};
pub use spec::{
    AttentionCheckpoint, AttentionHead, AttentionSource, Figure, Plot, Point, RefLine, Series,
};

use std::io::Write;
use std::path::{Path, PathBuf};

/// Everything that can go wrong while rendering or storing figures and reports.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The plotting backend or the PNG encoder failed.
    #[error("figure `{figure}`: rendering failed: {message}")]
    Render { figure: String, message: String },
    /// The figure's data is inconsistent (e.g. a heatmap of the wrong size).
    #[error("figure `{figure}` is invalid: {reason}")]
    InvalidFigure { figure: String, reason: String },
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A figure file is not valid figure JSON.
    #[error("{}: not a valid figure: {source}", path.display())]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// A figure id cannot be used as a file name.
    #[error("figure id `{0}` cannot be a file name (use letters, digits, `-`, `_`, `.`)")]
    BadId(String),
}

/// Writes `<id>.json`, `<id>.svg` and `<id>.png` for each figure into `dir`
/// (created if missing). Each file is written to a temporary file in `dir` and
/// renamed into place, so a reader never sees a half-written figure.
pub fn write_figures(dir: &Path, figures: &[Figure]) -> Result<(), ReportError> {
    std::fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
    for fig in figures {
        check_id(&fig.id)?;
        let json = serde_json::to_vec_pretty(fig).map_err(|e| ReportError::Json {
            path: dir.join(format!("{}.json", fig.id)),
            source: e,
        })?;
        let svg = render_svg(fig)?;
        let png = render_png(fig)?;
        write_atomic(&dir.join(format!("{}.json", fig.id)), &json)?;
        write_atomic(&dir.join(format!("{}.svg", fig.id)), svg.as_bytes())?;
        write_atomic(&dir.join(format!("{}.png", fig.id)), &png)?;
    }
    Ok(())
}

/// Reads every `*.json` figure in `dir`, sorted by id. A file that is not a
/// valid figure gives [`ReportError::Json`] naming it.
pub fn load_figures(dir: &Path) -> Result<Vec<Figure>, ReportError> {
    let mut figures = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| io_err(dir, e))? {
        let path = entry.map_err(|e| io_err(dir, e))?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") || !path.is_file() {
            continue;
        }
        let text = std::fs::read_to_string(&path).map_err(|e| io_err(&path, e))?;
        let fig: Figure =
            serde_json::from_str(&text).map_err(|source| ReportError::Json { path, source })?;
        figures.push(fig);
    }
    figures.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(figures)
}

/// Ids become file stems: keep them to a safe, portable alphabet.
fn check_id(id: &str) -> Result<(), ReportError> {
    let ok = !id.is_empty()
        && !id.starts_with('.')
        && id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(ReportError::BadId(id.to_string()))
    }
}

/// Writes `bytes` to a temporary file beside `path`, then renames it over `path`.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ReportError> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("out");
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let result = std::fs::File::create(&tmp)
        .and_then(|mut f| {
            f.write_all(bytes)?;
            f.sync_all()
        })
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(io_err(path, e));
    }
    Ok(())
}

fn io_err(path: &Path, source: std::io::Error) -> ReportError {
    ReportError::Io {
        path: path.to_path_buf(),
        source,
    }
}
