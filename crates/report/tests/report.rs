//! Report assembly: the HTML page is self-contained and escapes user text, the
//! Markdown tables are well-formed, and figure folders round-trip with typed
//! errors that name the offending file.

use std::path::PathBuf;

use mechlab_report::doc::{Report, Section, Verdict};
use mechlab_report::spec::{Figure, Point, Series};
use mechlab_report::{
    load_figures, render_html, render_markdown, render_markdown_with, write_figures, ReportError,
};

const EVIL: &str = "<script>alert('x')</script>";

/// A fresh, empty scratch folder for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mechlab-report-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn figures() -> Vec<Figure> {
    vec![
        Figure::lines("loss", &format!("Loss {EVIL}"), "step", "loss")
            .caption(&format!("What to see: the **drop**. {EVIL}"))
            .with_series(Series::new(EVIL, vec![1.0, 2.0, 3.0], vec![1.0, 0.5, 0.2])),
        Figure::heatmap(
            "gram",
            "Gram",
            "i",
            "j",
            2,
            2,
            vec![1.0, -0.5, -0.5, 1.0],
            true,
        ),
        Figure::scatter(
            "words",
            "Words",
            "u",
            "v",
            vec![Point {
                x: 1.0,
                y: 2.0,
                label: Some("good".into()),
                group: None,
            }],
        ),
    ]
}

fn report() -> Report {
    Report::new(&format!("Run {EVIL}"))
        .with_meta("seed", "7")
        .with_meta(EVIL, "a & b")
        .with_section(
            Section::new("Claims")
                .markdown(&format!(
                    "The model **copies**; see [the paper](https://example.org/p) and `code`.\n\n{EVIL}\n\n- one\n- two"
                ))
                .verdicts(vec![
                    Verdict::new("copies", "acc > 0.9", "0.97", true),
                    Verdict::new(EVIL, "x | y", "line\nbreak", false),
                ]),
        )
        .with_section(
            Section::new("Data")
                .table(
                    vec!["k".into(), "value".into()],
                    vec![
                        vec!["a|b".into(), "1".into()],
                        vec!["short row".into()],
                        vec!["x".into(), "y".into(), "extra".into()],
                    ],
                )
                .figure("loss")
                .figure("absent")
                .code("cargo run -- <args> ```"),
        )
}

#[test]
fn html_is_self_contained() {
    let html = render_html(&report(), &figures()).unwrap();
    let lower = html.to_ascii_lowercase();
    assert!(lower.starts_with("<!doctype html>"));
    for bad in [
        "<script", "<link", "<iframe", "<img", "@import", "url(", "src=",
    ] {
        assert!(!lower.contains(bad), "found {bad}");
    }
    // The only absolute URL is the user's own link.
    let absolute = lower.matches("http://").count() + lower.matches("https://").count();
    assert_eq!(absolute, 1, "unexpected absolute URLs");
    assert!(html.contains("<a href=\"https://example.org/p\">the paper</a>"));
}

#[test]
fn html_escapes_user_text_everywhere() {
    let html = render_html(&report(), &figures()).unwrap();
    assert!(!html.contains(EVIL));
    assert!(html.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"));
    assert!(html.contains("a &amp; b"));
}

#[test]
fn html_shows_verdicts_figures_and_missing_figures() {
    let html = render_html(&report(), &figures()).unwrap();
    assert!(html.contains("<span class=\"badge pass\">PASS</span>"));
    assert!(html.contains("<span class=\"badge fail\">FAIL</span>"));
    assert!(html.contains("1 / 2</span>"));
    // loss is referenced, gram and words are appended, absent is reported.
    assert_eq!(html.matches("<svg role=\"img\"").count(), 3);
    assert!(html.contains("More figures"));
    assert!(html.contains("<code>absent</code> is missing"));
    assert!(html.contains("<strong>drop</strong>"));
    assert!(html.contains("<pre><code>cargo run -- &lt;args&gt; ```</code></pre>"));
}

/// Counts the `|` that delimit cells (not the escaped `\|`).
fn cells(line: &str) -> usize {
    let mut n = 0;
    let mut prev = ' ';
    for c in line.chars() {
        if c == '|' && prev != '\\' {
            n += 1;
        }
        prev = if prev == '\\' && c == '\\' { ' ' } else { c };
    }
    n
}

#[test]
fn markdown_tables_are_well_formed() {
    let md = render_markdown_with(&report(), &figures(), "figures");
    let lines: Vec<&str> = md.lines().collect();
    let mut tables = 0;
    let mut i = 0;
    while i < lines.len() {
        if lines[i].starts_with('|') {
            tables += 1;
            let width = cells(lines[i]);
            assert!(
                lines[i + 1].starts_with("| ---"),
                "no separator after {}",
                lines[i]
            );
            while i < lines.len() && lines[i].starts_with('|') {
                assert!(lines[i].ends_with('|'), "open row: {}", lines[i]);
                assert_eq!(cells(lines[i]), width, "ragged row: {}", lines[i]);
                i += 1;
            }
            assert!(
                i == lines.len() || lines[i].is_empty(),
                "no blank line after table"
            );
        }
        i += 1;
    }
    assert_eq!(tables, 2);
    assert!(md.contains("| ✅ PASS | copies | acc > 0.9 | 0.97 |"));
    assert!(md.contains("| ❌ FAIL |"));
    assert!(md.contains("x \\| y") && md.contains("line<br>break"));
    assert!(md.contains("````text\ncargo run -- <args> ```\n````"));
}

#[test]
fn markdown_links_figures_with_captions() {
    let md = render_markdown_with(&report(), &figures(), "figures/");
    assert!(md.starts_with("# Run "));
    assert!(md.contains("- **seed:** 7"));
    assert!(md.contains("](figures/loss.svg)"));
    assert!(md.contains("*Figure 1. Loss"));
    assert!(md.contains("What to see: the **drop**."));
    assert!(md.contains("![absent](figures/absent.svg)"));
    assert!(md.contains("## More figures") && md.contains("](figures/gram.svg)"));
    // Without figures, ids stand in for titles.
    let plain = render_markdown(&report(), "figs");
    assert!(plain.contains("![loss](figs/loss.svg)"));
    assert!(!plain.contains("More figures"));
}

#[test]
fn figures_round_trip_through_a_folder() {
    let dir = scratch("roundtrip").join("nested/figures");
    let figs = figures();
    write_figures(&dir, &figs).unwrap();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "gram.json",
            "gram.png",
            "gram.svg",
            "loss.json",
            "loss.png",
            "loss.svg",
            "words.json",
            "words.png",
            "words.svg"
        ]
    );
    let back = load_figures(&dir).unwrap();
    let ids: Vec<&str> = back.iter().map(|f| f.id.as_str()).collect();
    assert_eq!(ids, ["gram", "loss", "words"]);
    assert_eq!(
        back.iter().find(|f| f.id == "loss"),
        figs.iter().find(|f| f.id == "loss")
    );
    // Rewriting replaces files in place.
    write_figures(&dir, &figs[..1]).unwrap();
    assert_eq!(load_figures(&dir).unwrap().len(), 3);
}

#[test]
fn corrupt_figure_json_names_the_file() {
    let dir = scratch("corrupt");
    write_figures(&dir, &figures()[..1]).unwrap();
    std::fs::write(dir.join("broken.json"), "{\"id\": \"broken\", ").unwrap();
    match load_figures(&dir) {
        Err(e @ ReportError::Json { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("broken.json"), "{msg}");
        }
        other => panic!("expected a JSON error, got {other:?}"),
    }
}

#[test]
fn missing_folder_and_bad_ids_are_typed_errors() {
    let dir = scratch("missing").join("nope");
    assert!(matches!(load_figures(&dir), Err(ReportError::Io { .. })));
    let bad = Figure::lines("../escape", "t", "x", "y");
    assert!(matches!(
        write_figures(&scratch("badid"), &[bad]),
        Err(ReportError::BadId(_))
    ));
}

#[test]
fn non_finite_values_survive_the_json_file() {
    let dir = scratch("nan");
    let fig = Figure::lines("gaps", "Gaps", "x", "y")
        .with_series(Series::new(
            "s",
            vec![1.0, 2.0, 3.0],
            vec![1.0, f64::NAN, f64::INFINITY],
        ))
        .with_hline("undefined", f64::NAN);
    write_figures(&dir, &[fig]).unwrap();
    let back = load_figures(&dir).unwrap();
    let mechlab_report::Plot::Lines { series, hlines, .. } = &back[0].plot else {
        panic!("not a line plot");
    };
    assert_eq!(series[0].y[0], 1.0);
    assert!(series[0].y[1].is_nan() && series[0].y[2].is_nan());
    assert!(hlines[0].y.is_nan());
}

#[test]
fn an_undrawable_figure_is_a_note_not_a_failed_report() {
    let bad = Figure::heatmap("bad", "Bad", "c", "r", 2, 2, vec![1.0], false);
    let report = Report::new("r").with_section(Section::new("s").figure("bad"));
    let html = render_html(&report, &[bad]).unwrap();
    assert!(html.contains("class=\"missing\"") && html.contains("rows * cols"));
}
