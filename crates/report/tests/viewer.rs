//! The attention viewer's page: the data travel intact and inert, the page
//! reads without JavaScript, and a malformed figure is a note, not a broken page.
//! (The viewer's behaviour in a browser is tested by `python/ci/browser_test.py`.)

use mechlab_report::doc::{Report, Section};
use mechlab_report::spec::{AttentionCheckpoint, AttentionHead, Figure, Plot, Series};
use mechlab_report::{render_html, render_png, render_svg};

fn viewer() -> Figure {
    Figure::attention(
        "attn",
        "Attention",
        vec!["a".into(), "</script><b>x".into(), "c & d".into()],
        vec![AttentionHead::of_layer(0, 0), AttentionHead::of_layer(1, 1)],
        vec![
            1.0, 0.0, 0.0, 0.5, 0.5, 0.0, 0.2, 0.3, 0.5, // L0H0
            1.0, 0.0, 0.0, 0.25, 0.75, 0.0, 0.1, 0.1, 0.8, // L1H1
        ],
    )
    .with_source("activations.safetensors", 2)
    .caption("Where each token looks.")
}

fn page(figs: &[Figure]) -> String {
    let mut s = Section::new("Attention");
    for f in figs {
        s = s.figure(&f.id);
    }
    render_html(&Report::new("Viewer").with_section(s), figs).unwrap()
}

#[test]
fn the_viewer_is_inline_and_its_data_inert() {
    let html = page(&[viewer()]);
    // One executable script (the viewer) and one JSON block; nothing fetched.
    assert_eq!(html.matches("<script>").count(), 1, "{html}");
    assert_eq!(
        html.matches("<script type=\"application/json\" class=\"attn-data\">")
            .count(),
        1
    );
    assert_eq!(
        html.matches("</script>").count(),
        2,
        "a token ended a script"
    );
    for bad in ["src=", "<link", "@import", "url(", "https://"] {
        assert!(!html.contains(bad), "found {bad}");
    }
    // The token text is in the JSON, escaped, and reads back exactly.
    let start = html.find("class=\"attn-data\">").unwrap() + "class=\"attn-data\">".len();
    let end = start + html[start..].find("</script>").unwrap();
    let data: serde_json::Value = serde_json::from_str(&html[start..end]).unwrap();
    assert_eq!(data["tokens"][1], "</script><b>x");
    assert_eq!(data["tokens"][2], "c & d");
    assert_eq!(data["pattern"][13], 0.75);
    assert_eq!(data["heads"][1]["hook"], "blocks.1.attn.hook_pattern");
    assert_eq!(data["source"]["batch"], 2);
}

#[test]
fn without_javascript_the_first_head_and_the_source_show() {
    let html = page(&[viewer()]);
    let still = html
        .find("class=\"plot attn-still\"><svg")
        .expect("a still");
    assert!(html[still..].contains("L0H0"), "the still names its head");
    assert!(html.contains("every head (L0H0, L1H1)"), "{html}");
    assert!(html.contains("<code>activations.safetensors</code> (sequence 2)"));
    assert!(html.contains("<div class=\"attn-view\" hidden></div>"));
    assert!(html.contains("Where each token looks."));
}

#[test]
fn a_malformed_viewer_is_a_note_and_no_script() {
    let mut bad = viewer();
    if let Plot::Attention { pattern, .. } = &mut bad.plot {
        pattern.truncate(3);
    }
    let html = page(&[bad]);
    assert!(
        html.contains("pattern has 3 values, expected heads × queries × keys = 2 × 3 × 3 = 18"),
        "{html}"
    );
    assert!(!html.contains("<script"), "{html}");
    let empty = Figure::attention("e", "Empty", vec![], vec![], vec![]);
    assert!(page(&[empty]).contains("needs at least one token and one head"));
}

#[test]
fn a_viewer_over_checkpoints_carries_them_and_checks_their_shape() {
    let early = |step, w: f64| AttentionCheckpoint {
        step,
        pattern: vec![w; 18],
    };
    let fig = viewer().with_history(vec![early(0, 0.1), early(50, 0.2)], 100);
    let html = page(std::slice::from_ref(&fig));
    let start = html.find("class=\"attn-data\">").unwrap() + "class=\"attn-data\">".len();
    let end = start + html[start..].find("</script>").unwrap();
    let data: serde_json::Value = serde_json::from_str(&html[start..end]).unwrap();
    assert_eq!(data["step"], 100);
    assert_eq!(data["history"][1]["step"], 50);
    assert_eq!(data["history"][1]["pattern"][17], 0.2);
    assert!(
        html.contains("Slide through 3 checkpoints, steps 0 to 100."),
        "{html}"
    );
    assert!(
        html.contains("L0H0 at step 100"),
        "the still names its step"
    );
    // through the figure's JSON and back
    let back: Figure = serde_json::from_str(&serde_json::to_string(&fig).unwrap()).unwrap();
    assert_eq!(back, fig);

    let short = viewer().with_history(
        vec![AttentionCheckpoint {
            step: 0,
            pattern: vec![0.0; 3],
        }],
        100,
    );
    assert!(page(&[short]).contains("the checkpoint at step 0 has 3 values, expected 18"));
    let late = viewer().with_history(vec![early(100, 0.1)], 100);
    assert!(page(&[late]).contains("the checkpoint at step 100 is not before"));
}

#[test]
fn pages_without_a_viewer_have_no_script() {
    let fig = Figure::lines("loss", "Loss", "step", "loss").with_series(Series::new(
        "train",
        vec![1.0, 2.0],
        vec![1.0, 0.5],
    ));
    assert!(!page(&[fig]).contains("<script"));
}

#[test]
fn pictures_show_the_first_head_and_cross_attention_names_its_queries() {
    let svg = render_svg(&viewer()).unwrap();
    assert!(svg.contains("L0H0") && svg.contains("2 heads in the HTML report"));
    assert_eq!(&render_png(&viewer()).unwrap()[..4], b"\x89PNG");
    let cls = Figure::attention(
        "cls",
        "cls",
        vec!["good".into(), "film".into()],
        vec![AttentionHead::of_layer(0, 0)],
        vec![0.9, 0.1],
    )
    .with_queries(vec!["<cls>".into()]);
    let still = cls.still();
    let Plot::Heatmap {
        rows,
        cols,
        row_ticks,
        ..
    } = &still.plot
    else {
        panic!("a still is a heatmap")
    };
    assert_eq!((*rows, *cols), (1, 2));
    assert_eq!(row_ticks, &vec!["0:<cls>".to_string()]);
    let back: Figure = serde_json::from_str(&serde_json::to_string(&cls).unwrap()).unwrap();
    assert_eq!(back, cls);
    assert!(page(&[cls]).contains("<script>"));
}

#[test]
fn a_viewer_fragment_stands_alone_in_another_page() {
    let html = mechlab_report::render_viewer_fragment(&viewer(), 7).unwrap();
    assert!(html.starts_with("<div class=\"mechlab-attn\""), "{html}");
    assert!(
        html.contains("<figure id=\"fig-attn-7\" class=\"attn\">"),
        "{html}"
    );
    assert_eq!(html.matches("<script>").count(), 1);
    assert!(html.contains("<style>") && html.contains("--accent"));
    assert!(
        html.contains("data-started"),
        "the script skips viewers already started"
    );
    for bad in ["src=", "<link", "@import", "https://"] {
        assert!(!html.contains(bad), "found {bad}");
    }
    let lines = Figure::lines("loss", "Loss", "step", "loss");
    assert!(mechlab_report::render_viewer_fragment(&lines, 1).is_err());
    let mut short = viewer();
    if let Plot::Attention { pattern, .. } = &mut short.plot {
        pattern.truncate(3);
    }
    let e = mechlab_report::render_viewer_fragment(&short, 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("pattern has 3 values"), "{e}");
}
