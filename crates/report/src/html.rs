//! A report as one self-contained HTML file.
//!
//! [`render_html`] writes a single page that opens offline and can be mailed or
//! archived alone: the stylesheet is inline, there are no web fonts and no
//! external resources, and every figure is inlined as SVG. The one script is
//! the attention viewer's (`viewer.rs`), inline and only on pages that
//! have an attention figure; everything else reads the same without it. All text from
//! the report and the figures is HTML-escaped; prose goes through a small
//! Markdown subset (see [`crate::doc::Block::Markdown`]) whose links are kept
//! only for `http(s)`, `mailto` and relative targets.
//!
//! ```
//! use mechlab_report::doc::{Report, Section, Verdict};
//! use mechlab_report::html::render_html;
//! use mechlab_report::spec::{Figure, Series};
//! let fig = Figure::lines("loss", "Loss", "step", "loss")
//!     .with_series(Series::new("train", vec![1.0, 2.0], vec![1.0, 0.5]));
//! let report = Report::new("Demo").with_section(
//!     Section::new("Results")
//!         .verdicts(vec![Verdict::new("loss falls", "< 0.6", "0.5", true)])
//!         .figure("loss"),
//! );
//! let html = render_html(&report, &[fig]).unwrap();
//! assert!(html.contains("<svg") && html.contains("PASS"));
//! ```

use std::fmt::Write as _;

use crate::doc::{Block, Report, Verdict};
use crate::render::render_svg;
use crate::spec::{Figure, Plot};
use crate::viewer::{self, CSS as VIEWER_CSS};
use crate::ReportError;

/// Renders `report` as a standalone HTML page; figures referenced by id are
/// looked up in `figures` and inlined (a missing or undrawable one is shown as
/// a note saying why), and figures the report does not mention are appended
/// under "More figures".
pub fn render_html(report: &Report, figures: &[Figure]) -> Result<String, ReportError> {
    let mut out = String::with_capacity(64 * 1024);
    let title = esc(&report.title);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta name=\"generator\" content=\"mechlab\">\n<title>{title}</title>\n\
         <style>{CSS}{VIEWER_CSS}</style>\n</head>\n<body>\n<main>\n<header>\n<h1>{title}</h1>\n"
    );
    if !report.meta.is_empty() {
        out.push_str("<dl class=\"meta\">\n");
        for (k, v) in &report.meta {
            let _ = writeln!(out, "<div><dt>{}</dt><dd>{}</dd></div>", esc(k), inline(v));
        }
        out.push_str("</dl>\n");
    }
    let (passed, total) = report.verdict_counts();
    if let Some(h) = &report.headline {
        let class = if h.pass { "pass" } else { "fail" };
        let _ = writeln!(
            out,
            "<p class=\"summary\"><span class=\"badge {class}\">{}</span> {}</p>",
            esc(&h.badge),
            inline(&h.text)
        );
    } else if total > 0 {
        let class = if passed == total { "pass" } else { "fail" };
        let _ = writeln!(
            out,
            "<p class=\"summary\"><span class=\"badge {class}\">{passed} / {total}</span> \
             claims borne out by the measurements.</p>"
        );
    }
    out.push_str("</header>\n");

    let mentioned = report.figure_ids();
    let extra: Vec<&Figure> = figures
        .iter()
        .filter(|f| !mentioned.contains(&f.id.as_str()))
        .collect();
    let mut sections: Vec<(&str, Vec<Block>, bool)> = report
        .sections
        .iter()
        .map(|s| (s.title.as_str(), s.blocks.clone(), s.folded))
        .collect();
    if !extra.is_empty() {
        let blocks = extra.iter().map(|f| Block::Figure(f.id.clone())).collect();
        sections.push(("More figures", blocks, false));
    }

    // Folded sections are detail under a summary: the contents lists the others,
    // when there are enough of them to need a list (a report that opens on a
    // summary table keeps that table on its first screen).
    let open = sections.iter().filter(|s| !s.2).count();
    let folded = sections.len() - open;
    if open >= 3 || (open == 2 && folded == 0) {
        out.push_str("<nav class=\"toc\"><h2>Contents</h2>\n<ol>\n");
        for (i, (name, _, folded)) in sections.iter().enumerate() {
            if !folded {
                let _ = writeln!(out, "<li><a href=\"#s{}\">{}</a></li>", i + 1, esc(name));
            }
        }
        out.push_str("</ol></nav>\n");
    }

    let mut fig_no = 0;
    let mut viewers = 0;
    for (i, (name, blocks, folded)) in sections.iter().enumerate() {
        if *folded {
            let _ = writeln!(
                out,
                "<section id=\"s{}\">\n<details>\n<summary><h2>{}</h2></summary>",
                i + 1,
                esc(name)
            );
        } else {
            let _ = writeln!(out, "<section id=\"s{}\">\n<h2>{}</h2>", i + 1, esc(name));
        }
        for block in blocks {
            match block {
                Block::Markdown(text) => out.push_str(&markdown(text)),
                Block::Table { headers, rows } => table(&mut out, headers, rows),
                Block::Verdicts(v) => verdicts(&mut out, v),
                Block::Code(text) => {
                    let _ = writeln!(out, "<pre><code>{}</code></pre>", esc(text));
                }
                Block::Figure(id) => {
                    fig_no += 1;
                    let fig = figures.iter().find(|f| &f.id == id);
                    viewers += usize::from(figure(&mut out, id, fig, fig_no));
                }
            }
        }
        if *folded {
            out.push_str("</details>\n");
        }
        out.push_str("</section>\n");
    }
    if viewers > 0 {
        let _ = writeln!(out, "<script>{}</script>", viewer::SCRIPT);
    }
    out.push_str("<footer>Generated by mechlab. Figures are inline SVG; their data are in <code>figures/*.json</code>.</footer>\n</main>\n</body>\n</html>\n");
    Ok(out)
}

/// One attention viewer as an HTML fragment that works on its own inside
/// another page (a notebook cell's output): its styles scoped to the fragment,
/// the colours the report page defines, and the viewer's script, which skips
/// viewers already started so that several fragments share a page. `n`
/// numbers the figure and makes its anchor unique on that page.
pub fn render_viewer_fragment(fig: &Figure, n: usize) -> Result<String, ReportError> {
    if !matches!(fig.plot, Plot::Attention { .. }) {
        return Err(ReportError::InvalidFigure {
            figure: fig.id.clone(),
            reason: "a fragment holds an attention viewer".into(),
        });
    }
    viewer::check(fig).map_err(|reason| ReportError::InvalidFigure {
        figure: fig.id.clone(),
        reason,
    })?;
    let mut body = String::new();
    if !figure(&mut body, &format!("{}-{n}", fig.id), Some(fig), n) {
        return Err(ReportError::InvalidFigure {
            figure: fig.id.clone(),
            reason: body,
        });
    }
    Ok(format!(
        "<div class=\"mechlab-attn\" style=\"--ink: #1f2328; --muted: #59636e; --line: #d1d9e0; \
         --accent: #0b5cad; color: var(--ink); font-family: system-ui, sans-serif;\">\n\
         <style>{VIEWER_CSS}</style>\n{body}<script>{}</script>\n</div>\n",
        viewer::SCRIPT
    ))
}

fn table(out: &mut String, headers: &[String], rows: &[Vec<String>]) {
    let width = rows
        .iter()
        .map(Vec::len)
        .chain([headers.len()])
        .max()
        .unwrap_or(0);
    out.push_str("<div class=\"scroll\"><table>\n");
    if !headers.is_empty() {
        out.push_str("<thead><tr>");
        for i in 0..width {
            let h = headers.get(i).map(String::as_str).unwrap_or("");
            let _ = write!(out, "<th>{}</th>", inline(h));
        }
        out.push_str("</tr></thead>\n");
    }
    out.push_str("<tbody>\n");
    for row in rows {
        out.push_str("<tr>");
        for i in 0..width {
            let c = row.get(i).map(String::as_str).unwrap_or("");
            let _ = write!(out, "<td>{}</td>", inline(c));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table></div>\n");
}

fn verdicts(out: &mut String, vs: &[Verdict]) {
    out.push_str(
        "<div class=\"scroll\"><table class=\"verdicts\">\n<thead><tr><th>Claim</th>\
         <th>Prediction</th><th>Measured</th><th>Verdict</th></tr></thead>\n<tbody>\n",
    );
    for v in vs {
        let class = match (v.pass, v.known) {
            (true, _) => "pass",
            (false, true) => "known",
            (false, false) => "fail",
        };
        let word = v.mark();
        let id = if v.id.is_empty() {
            String::new()
        } else {
            format!("<br><code class=\"vid\">{}</code>", esc(&v.id))
        };
        let source = if v.source.is_empty() {
            String::new()
        } else {
            format!("<br><small>source: {}</small>", inline(&v.source))
        };
        let _ = writeln!(
            out,
            "<tr><td>{}{id}</td><td>{}{source}</td><td>{}</td><td><span class=\"badge {class}\">{word}</span></td></tr>",
            inline(&v.claim),
            inline(&v.prediction),
            inline(&v.measured),
        );
    }
    out.push_str("</tbody></table></div>\n");
}

/// Writes one figure; true when it is an interactive attention viewer.
fn figure(out: &mut String, id: &str, fig: Option<&Figure>, n: usize) -> bool {
    let anchor = anchor_id(id);
    let Some(fig) = fig else {
        let _ = writeln!(
            out,
            "<figure id=\"fig-{anchor}\" class=\"missing\"><p>Figure {n}: <code>{}</code> \
             is missing from this run.</p></figure>",
            esc(id)
        );
        return false;
    };
    let svg = match viewer::check(fig).and_then(|()| render_svg(fig).map_err(|e| e.to_string())) {
        Ok(svg) => svg,
        Err(e) => {
            // One bad figure should not cost the reader the whole report.
            let _ = writeln!(
                out,
                "<figure id=\"fig-{anchor}\" class=\"missing\"><p>Figure {n}: {}</p></figure>",
                esc(&e)
            );
            return false;
        }
    };
    // Inline SVG in HTML needs no namespace or XML prolog; label it for screen readers.
    let svg = svg.replacen(" xmlns=\"http://www.w3.org/2000/svg\"", "", 1);
    let svg = svg.replacen(
        "<svg ",
        &format!("<svg role=\"img\" aria-label=\"{}\" ", esc(&fig.title)),
        1,
    );
    if let Plot::Attention { .. } = fig.plot {
        viewer::figure(out, &anchor, fig, &svg, n);
        return true;
    }
    let _ = write!(
        out,
        "<figure id=\"fig-{anchor}\">\n<div class=\"plot\">{svg}</div>\n"
    );
    let _ = write!(
        out,
        "<figcaption><span class=\"fig-no\">Figure {n}.</span> <strong>{}</strong>",
        esc(&fig.title)
    );
    if !fig.caption.is_empty() {
        let _ = write!(out, " {}", inline(&fig.caption));
    }
    out.push_str("</figcaption>\n</figure>\n");
    false
}

/// An id usable in `id="..."` and `href="#..."`.
fn anchor_id(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// Escapes text for HTML element content and attribute values.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() && c != '\n' && c != '\t' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// Markdown prose (CommonMark with GFM tables and strikethrough) to HTML. Raw
/// HTML in the text is shown as text, headings sit two levels below the
/// report's, and links keep only safe URLs, so notes cannot break the page.
fn markdown(text: &str) -> String {
    use pulldown_cmark::{CowStr, Event, HeadingLevel, Options, Parser, Tag, TagEnd};
    let shift = |l: HeadingLevel| match l {
        HeadingLevel::H1 => HeadingLevel::H3,
        HeadingLevel::H2 => HeadingLevel::H4,
        HeadingLevel::H3 => HeadingLevel::H5,
        _ => HeadingLevel::H6,
    };
    let events =
        Parser::new_ext(text, Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH).map(|e| {
            match e {
                Event::Html(h) | Event::InlineHtml(h) => Event::Text(h),
                Event::Start(Tag::Heading {
                    level,
                    id,
                    classes,
                    attrs,
                }) => Event::Start(Tag::Heading {
                    level: shift(level),
                    id,
                    classes,
                    attrs,
                }),
                Event::End(TagEnd::Heading(level)) => Event::End(TagEnd::Heading(shift(level))),
                Event::Start(Tag::Link {
                    link_type,
                    dest_url,
                    title,
                    id,
                }) if !safe_url(&dest_url) => Event::Start(Tag::Link {
                    link_type,
                    dest_url: CowStr::Borrowed("#"),
                    title,
                    id,
                }),
                e => e,
            }
        });
    let mut out = String::with_capacity(text.len() * 3 / 2);
    pulldown_cmark::html::push_html(&mut out, events);
    out
}

/// Inline Markdown subset to escaped HTML: `**bold**`, `*italic*`, `` `code` ``,
/// `[text](url)` and backslash escapes; anything else is literal text.
pub(crate) fn inline(s: &str) -> String {
    let c: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len() + 16);
    let text = |a: usize, b: usize| c[a..b].iter().collect::<String>();
    let find = |from: usize, pat: &[char]| {
        (from..c.len().saturating_sub(pat.len() - 1)).find(|&j| c[j..j + pat.len()] == *pat)
    };
    let mut i = 0;
    while i < c.len() {
        match c[i] {
            '\\' if i + 1 < c.len() && c[i + 1].is_ascii_punctuation() => {
                out.push_str(&esc(&c[i + 1].to_string()));
                i += 2;
                continue;
            }
            '`' => {
                if let Some(j) = find(i + 1, &['`']) {
                    let _ = write!(out, "<code>{}</code>", esc(&text(i + 1, j)));
                    i = j + 1;
                    continue;
                }
            }
            '*' if c.get(i + 1) == Some(&'*') => {
                if let Some(j) = find(i + 2, &['*', '*']).filter(|j| *j > i + 2) {
                    let _ = write!(out, "<strong>{}</strong>", inline(&text(i + 2, j)));
                    i = j + 2;
                    continue;
                }
            }
            '*' if c.get(i + 1).is_some_and(|n| !n.is_whitespace()) => {
                if let Some(j) = find(i + 1, &['*']).filter(|j| *j > i + 1) {
                    let _ = write!(out, "<em>{}</em>", inline(&text(i + 1, j)));
                    i = j + 1;
                    continue;
                }
            }
            '[' => {
                if let Some(mid) = find(i + 1, &[']', '(']) {
                    if let Some(end) = find(mid + 2, &[')']) {
                        let (label, url) = (text(i + 1, mid), text(mid + 2, end));
                        let label = inline(&label);
                        if safe_url(&url) {
                            let _ = write!(out, "<a href=\"{}\">{label}</a>", esc(url.trim()));
                        } else {
                            out.push_str(&label);
                        }
                        i = end + 1;
                        continue;
                    }
                }
            }
            _ => {}
        }
        out.push_str(&esc(&c[i].to_string()));
        i += 1;
    }
    out
}

/// Links are kept for web, mail and relative targets; `javascript:`, `data:`
/// and other schemes are dropped (the link text stays).
fn safe_url(url: &str) -> bool {
    let u = url.trim().to_ascii_lowercase();
    if u.starts_with("http://") || u.starts_with("https://") || u.starts_with("mailto:") {
        return true;
    }
    // Relative: no scheme before the first path, query or fragment delimiter.
    let head = u.split(['/', '?', '#']).next().unwrap_or("");
    !u.is_empty() && !head.contains(':') && !u.chars().any(char::is_whitespace)
}

const CSS: &str = r#"
:root { --ink: #1f2328; --muted: #59636e; --line: #d1d9e0; --zebra: #f6f8fa;
  --accent: #0b5cad; --pass: #1a7f37; --pass-bg: #dafbe1; --fail: #cf222e; --fail-bg: #ffebe9; }
* { box-sizing: border-box; }
html { -webkit-text-size-adjust: 100%; }
body { margin: 0; background: #fff; color: var(--ink);
  font: 16px/1.6 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, "Noto Sans", sans-serif; }
main { max-width: 1000px; margin: 0 auto; padding: 2.5rem 1.5rem 4rem; }
h1 { font-size: 2rem; line-height: 1.25; margin: 0 0 .75rem; }
h2 { font-size: 1.45rem; margin: 2.5rem 0 1rem; padding-bottom: .3rem; border-bottom: 1px solid var(--line); }
h3, h4, h5, h6 { margin: 1.5rem 0 .5rem; }
p, ul { margin: 0 0 1rem; }
a { color: var(--accent); }
code, pre { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace; font-size: .88em; }
code { background: var(--zebra); padding: .1em .35em; border-radius: 4px; }
pre { background: var(--zebra); border: 1px solid var(--line); border-radius: 6px; padding: .9rem 1rem; overflow-x: auto; line-height: 1.45; }
pre code { background: none; padding: 0; }
.meta { display: flex; flex-wrap: wrap; gap: .35rem 1.75rem; margin: 0 0 1rem; color: var(--muted); font-size: .92rem; }
.meta div { display: flex; gap: .4rem; }
.meta dt { font-weight: 600; } .meta dt::after { content: ":"; }
.meta dd { margin: 0; }
.summary { font-size: 1.05rem; }
.toc { background: var(--zebra); border: 1px solid var(--line); border-radius: 6px; padding: .6rem 1.25rem; margin: 1.5rem 0; }
.toc h2 { font-size: .85rem; text-transform: uppercase; letter-spacing: .05em; color: var(--muted); border: 0; margin: .4rem 0; padding: 0; }
.toc ol { margin: 0 0 .4rem; padding-left: 1.4rem; }
.scroll { overflow-x: auto; margin: 0 0 1.25rem; }
table { border-collapse: collapse; min-width: 60%; font-size: .95rem; }
table.verdicts { width: 100%; }
th, td { border: 1px solid var(--line); padding: .45rem .75rem; text-align: left; vertical-align: top; }
th { background: #eef1f4; font-weight: 600; }
tbody tr:nth-child(even) { background: var(--zebra); }
table.verdicts td:last-child, table.verdicts th:last-child { text-align: center; width: 6.5rem; }
.badge { display: inline-block; min-width: 3.6rem; padding: .1rem .55rem; border-radius: 999px; font-weight: 700;
  font-size: .8rem; letter-spacing: .04em; text-align: center; border: 1px solid currentColor; }
.badge.pass { color: var(--pass); background: var(--pass-bg); }
.badge.fail { color: var(--fail); background: var(--fail-bg); }
.badge.known { color: #7a4d00; background: #fff3d6; }
details > summary { cursor: pointer; }
details > summary h2 { display: inline; }
figure { margin: 1.5rem 0 2rem; }
.plot { border: 1px solid var(--line); border-radius: 6px; padding: .5rem; background: #fff; }
.plot svg { display: block; width: 100%; height: auto; margin: 0 auto; }
figcaption { color: var(--muted); font-size: .93rem; margin-top: .5rem; }
figcaption strong { color: var(--ink); }
.fig-no { font-weight: 600; color: var(--ink); }
figure.missing { border: 1px dashed var(--fail); border-radius: 6px; padding: .75rem 1rem; color: var(--fail); }
footer { margin-top: 3rem; padding-top: 1rem; border-top: 1px solid var(--line); color: var(--muted); font-size: .85rem; }
@media print { main { max-width: none; padding: 0; } figure, table { break-inside: avoid; } .toc { display: none; } }
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_markup() {
        assert_eq!(inline("a **b** c"), "a <strong>b</strong> c");
        assert_eq!(inline("`x<y`"), "<code>x&lt;y</code>");
        assert_eq!(inline("*it*"), "<em>it</em>");
        assert_eq!(
            inline("[doc](https://e.org/a?b=1&c=2)"),
            "<a href=\"https://e.org/a?b=1&amp;c=2\">doc</a>"
        );
        assert_eq!(inline("[x](javascript:alert(1))"), "x)");
        assert_eq!(inline("2 * 3 * 4"), "2 * 3 * 4");
        assert_eq!(inline("\\*not\\*"), "*not*");
        assert_eq!(inline("**unclosed"), "**unclosed");
        assert_eq!(inline("<b>"), "&lt;b&gt;");
    }

    #[test]
    fn blocks() {
        let html = markdown("para one\nstill one\n\n- a\n- b\n  more b\n\n## Sub\ntext");
        assert!(html.contains("<p>para one\nstill one</p>"), "{html}");
        assert!(html.contains("<li>a</li>"), "{html}");
        assert!(html.contains("more b"), "{html}");
        assert!(html.contains("<h4>Sub</h4>"), "{html}");
    }

    #[test]
    fn markdown_tables_become_tables_and_raw_html_is_text() {
        let html = markdown(
            "| a | b |\n|---|---|\n| 1 | 2 |\n\n<script>x</script>\n\nsee [l](javascript:alert(1)) and [ok](https://e.org)",
        );
        assert!(
            html.contains("<table>") && html.contains("<td>1</td>"),
            "{html}"
        );
        assert!(!html.contains("| a |"), "{html}");
        assert!(
            html.contains("&lt;script&gt;") && !html.contains("<script>"),
            "{html}"
        );
        assert!(!html.contains("javascript:"), "{html}");
        assert!(html.contains("href=\"https://e.org\""), "{html}");
    }

    #[test]
    fn urls() {
        assert!(safe_url("figures/loss.svg"));
        assert!(safe_url("#fig-loss"));
        assert!(!safe_url("JavaScript:alert(1)"));
        assert!(!safe_url("data:text/html,x"));
    }
}
