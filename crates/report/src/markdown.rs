//! A report as GitHub-flavoured Markdown, for a terminal or a repository.
//!
//! Same content as the HTML page: metadata, a verdict summary, GitHub tables
//! (verdicts marked ✅/❌), fenced code, and figures as image links to the SVGs
//! in the run's figure folder with their captions. Prose blocks are already
//! Markdown and pass through unchanged; table cells are escaped so that a `|`
//! or a line break in a value cannot break the table.
//!
//! ```
//! use mechlab_report::doc::{Report, Section, Verdict};
//! use mechlab_report::markdown::render_markdown;
//! let report = Report::new("Demo").with_section(
//!     Section::new("Results")
//!         .verdicts(vec![Verdict::new("loss falls", "< 0.6", "0.5", true)])
//!         .figure("loss"),
//! );
//! let md = render_markdown(&report, "figures");
//! assert!(md.contains("| ✅ PASS | loss falls | < 0.6 | 0.5 |"));
//! assert!(md.contains("![loss](figures/loss.svg)"));
//! ```

use std::fmt::Write as _;

use crate::doc::{Block, Report, Verdict};
use crate::spec::Figure;

/// Renders `report`; figure links point to `<figure_dir_rel>/<id>.svg` and use
/// the id as title (see [`render_markdown_with`] for titles and captions).
pub fn render_markdown(report: &Report, figure_dir_rel: &str) -> String {
    render_markdown_with(report, &[], figure_dir_rel)
}

/// Like [`render_markdown`], taking figure titles and captions from `figures`
/// and appending those the report does not mention under "More figures".
pub fn render_markdown_with(report: &Report, figures: &[Figure], figure_dir_rel: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# {}\n", one_line(&report.title));
    for (k, v) in &report.meta {
        let _ = writeln!(out, "- **{}:** {}", one_line(k), one_line(v));
    }
    if !report.meta.is_empty() {
        out.push('\n');
    }
    let (passed, total) = report.verdict_counts();
    if let Some(h) = &report.headline {
        let mark = if h.pass { "✅" } else { "❌" };
        let _ = writeln!(out, "{mark} **{}** {}\n", one_line(&h.badge), h.text.trim());
    } else if total > 0 {
        let mark = if passed == total { "✅" } else { "❌" };
        let _ = writeln!(
            out,
            "{mark} **{passed} / {total}** claims borne out by the measurements.\n"
        );
    }

    let mentioned = report.figure_ids();
    let mut n = 0;
    for section in &report.sections {
        let _ = writeln!(out, "## {}\n", one_line(&section.title));
        for block in &section.blocks {
            match block {
                Block::Markdown(text) => {
                    let _ = writeln!(out, "{}\n", text.trim_end());
                }
                Block::Table { headers, rows } => table(&mut out, headers, rows),
                Block::Verdicts(v) => verdicts(&mut out, v),
                Block::Code(text) => code(&mut out, text),
                Block::Figure(id) => {
                    n += 1;
                    let fig = figures.iter().find(|f| &f.id == id);
                    figure(&mut out, id, fig, n, figure_dir_rel);
                }
            }
        }
    }
    let extra: Vec<&Figure> = figures
        .iter()
        .filter(|f| !mentioned.contains(&f.id.as_str()))
        .collect();
    if !extra.is_empty() {
        out.push_str("## More figures\n\n");
        for f in extra {
            n += 1;
            figure(&mut out, &f.id, Some(f), n, figure_dir_rel);
        }
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    out
}

fn table(out: &mut String, headers: &[String], rows: &[Vec<String>]) {
    let width = rows
        .iter()
        .map(Vec::len)
        .chain([headers.len()])
        .max()
        .unwrap_or(0);
    if width == 0 {
        return;
    }
    let line = |cells: &[String]| {
        let mut s = String::from("|");
        for i in 0..width {
            let c = cells.get(i).map(String::as_str).unwrap_or("");
            let _ = write!(s, " {} |", cell(c));
        }
        s
    };
    let _ = writeln!(out, "{}", line(headers));
    let _ = writeln!(out, "|{}", " --- |".repeat(width));
    for row in rows {
        let _ = writeln!(out, "{}", line(row));
    }
    out.push('\n');
}

fn verdicts(out: &mut String, vs: &[Verdict]) {
    out.push_str("| Verdict | Claim | Prediction | Measured |\n| --- | --- | --- | --- |\n");
    for v in vs {
        let mark = match (v.pass, v.known) {
            (true, _) => "✅ PASS",
            (false, true) => "⚠️ FAIL, known",
            (false, false) => "❌ FAIL",
        };
        let id = if v.id.is_empty() {
            String::new()
        } else {
            format!(" (`{}`)", v.id.replace('`', "'"))
        };
        let source = if v.source.is_empty() {
            String::new()
        } else {
            format!(" — source: {}", cell(&v.source))
        };
        let _ = writeln!(
            out,
            "| {mark} | {}{id} | {}{source} | {} |",
            cell(&v.claim),
            cell(&v.prediction),
            cell(&v.measured)
        );
    }
    out.push('\n');
}

/// A fenced block whose fence is longer than any backtick run inside.
fn code(out: &mut String, text: &str) {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat((longest + 1).max(3));
    let _ = writeln!(out, "{fence}text\n{}\n{fence}\n", text.trim_end());
}

fn figure(out: &mut String, id: &str, fig: Option<&Figure>, n: usize, dir: &str) {
    let dir = dir.trim_end_matches('/');
    let path = if dir.is_empty() {
        format!("{id}.svg")
    } else {
        format!("{dir}/{id}.svg")
    };
    let title = fig.map_or(id, |f| f.title.as_str());
    let alt = escape_inline(&one_line(title));
    let _ = writeln!(out, "![{alt}]({})\n", url_path(&path));
    match fig {
        Some(f) if !f.caption.trim().is_empty() => {
            let _ = writeln!(
                out,
                "*Figure {n}. {}* {}\n",
                escape_inline(&one_line(&f.title)),
                one_line(&f.caption)
            );
        }
        Some(f) => {
            let _ = writeln!(
                out,
                "*Figure {n}. {}*\n",
                escape_inline(&one_line(&f.title))
            );
        }
        None => {
            let _ = writeln!(out, "*Figure {n}: `{}`*\n", one_line(id).replace('`', "'"));
        }
    }
}

/// Table cell text: one line, pipes escaped.
fn cell(s: &str) -> String {
    s.trim()
        .replace('\\', "\\\\")
        .replace('|', "\\|")
        .replace("\r\n", "<br>")
        .replace(['\n', '\r'], "<br>")
}

/// Plain text (a figure title) that must not turn into Markdown markup.
fn escape_inline(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '\\' | '*' | '_' | '`' | '[' | ']') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Headings, list items and captions must stay on one line.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Percent-encodes the characters that would end or break a Markdown link target.
fn url_path(p: &str) -> String {
    let mut out = String::with_capacity(p.len());
    for c in p.chars() {
        match c {
            ' ' => out.push_str("%20"),
            '(' => out.push_str("%28"),
            ')' => out.push_str("%29"),
            '<' => out.push_str("%3C"),
            '>' => out.push_str("%3E"),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_cannot_break_tables() {
        assert_eq!(cell("a|b\nc"), "a\\|b<br>c");
    }

    #[test]
    fn code_fence_outlasts_backticks() {
        let mut s = String::new();
        code(&mut s, "a ``` b");
        assert!(s.starts_with("````text\n"));
    }
}
