//! Every plot kind renders to well-formed SVG and to a decodable PNG, including
//! the awkward inputs experiments produce: zeros on log axes, NaN and infinite
//! values, empty series, extreme and degenerate ranges, and hostile text.

use mechlab_report::spec::{Figure, Point, Series};
use mechlab_report::{render_png, render_svg, ReportError};

/// Renders both ways and checks the outputs; returns the SVG text.
fn check(fig: &Figure) -> String {
    let svg = render_svg(fig).unwrap_or_else(|e| panic!("{}: {e}", fig.id));
    let doc = roxmltree::Document::parse(&svg).unwrap_or_else(|e| panic!("{}: {e}", fig.id));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let png = render_png(fig).unwrap_or_else(|e| panic!("{}: {e}", fig.id));
    assert!(png.len() > 1000, "{}: PNG of {} bytes", fig.id, png.len());
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let decoder = png::Decoder::new(std::io::Cursor::new(png));
    let reader = decoder.read_info().expect("PNG header decodes");
    let info = reader.info();
    assert_eq!((info.width, info.height), (1600, 1000));
    svg
}

fn words(ws: &[&str]) -> Vec<String> {
    ws.iter().map(|w| w.to_string()).collect()
}

#[test]
fn line_plot_renders_with_legend_and_reference_lines() {
    let fig = Figure::lines("loss", "Training loss", "step", "loss")
        .with_series(Series::new(
            "train",
            vec![1.0, 2.0, 3.0],
            vec![3.0, 2.0, 1.5],
        ))
        .with_series(Series::new("theory", vec![1.0, 3.0], vec![3.0, 1.0]).dashed())
        .with_hline("Bayes bound", 0.5);
    let svg = check(&fig);
    for text in ["Training loss", "train", "theory", "Bayes bound", "step"] {
        assert!(svg.contains(text), "missing {text}");
    }
}

#[test]
fn log_axes_skip_zeros_and_negatives() {
    let fig = Figure::lines("log", "Log axes", "n", "error")
        .log_x()
        .log_y()
        .with_series(Series::new(
            "err",
            vec![0.0, 1.0, 10.0, 100.0, -5.0],
            vec![1.0, 0.0, 0.1, 0.01, 1.0],
        ))
        .with_hline("zero line", 0.0);
    let svg = check(&fig);
    // Decade ticks label the original values.
    assert!(svg.contains(">100<") || svg.contains(">\n100\n<") || svg.contains("100"));
}

#[test]
fn narrow_log_range_still_has_ticks() {
    let fig = Figure::lines("narrow", "Narrow", "x", "y")
        .log_y()
        .with_series(Series::new("s", vec![1.0, 2.0], vec![2.0, 3.0]));
    let svg = check(&fig);
    // the y axis's labels (right-aligned): several, inside the data's range,
    // though no decade falls in it
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let ticks: Vec<f64> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text") && n.attribute("text-anchor") == Some("end"))
        .filter_map(|n| n.text()?.trim().parse().ok())
        .collect();
    assert!(ticks.len() >= 3, "y ticks {ticks:?}");
    assert!(
        ticks.iter().all(|t| (2.0..=3.0).contains(t)),
        "y ticks {ticks:?}"
    );
    assert!(ticks.windows(2).all(|w| w[0] < w[1]), "y ticks {ticks:?}");
}

#[test]
fn nan_and_infinite_values_are_skipped() {
    let nan = f64::NAN;
    let inf = f64::INFINITY;
    let fig = Figure::lines("nan", "NaNs", "x", "y")
        .with_series(Series::new(
            "s",
            vec![0.0, 1.0, nan, 3.0, 4.0],
            vec![1.0, nan, 2.0, inf, 0.5],
        ))
        .with_series(Series::new("all nan", vec![nan, nan], vec![nan, nan]))
        .with_hline("nan line", nan);
    check(&fig);
    let hm = Figure::heatmap(
        "hm_nan",
        "NaN cells",
        "c",
        "r",
        2,
        2,
        vec![nan, 1.0, -inf, 2.0],
        true,
    );
    check(&hm);
    let all_nan = Figure::heatmap(
        "hm_all_nan",
        "All NaN",
        "c",
        "r",
        1,
        2,
        vec![nan, nan],
        false,
    );
    check(&all_nan);
    let sc = Figure::scatter(
        "sc_nan",
        "NaN points",
        "x",
        "y",
        vec![
            Point {
                x: nan,
                y: 1.0,
                label: Some("gone".into()),
                group: None,
            },
            Point {
                x: 1.0,
                y: 2.0,
                label: Some("kept".into()),
                group: Some("g".into()),
            },
        ],
    );
    let svg = check(&sc);
    assert!(svg.contains("kept") && !svg.contains("gone"));
}

#[test]
fn empty_figures_say_no_data() {
    let lines =
        Figure::lines("empty", "Empty", "x", "y").with_series(Series::new("s", vec![], vec![]));
    assert!(check(&lines).contains("no data"));
    let nothing = Figure::lines("nothing", "Nothing at all", "x", "y");
    assert!(check(&nothing).contains("no data"));
    let sc = Figure::scatter("sc_empty", "Empty scatter", "x", "y", vec![]);
    assert!(check(&sc).contains("no data"));
    let hm = Figure::heatmap("hm_empty", "Empty heatmap", "x", "y", 0, 0, vec![], false);
    assert!(check(&hm).contains("no data"));
}

#[test]
fn mismatched_series_lengths_do_not_panic() {
    let fig = Figure::lines("mismatch", "Mismatch", "x", "y").with_series(Series::new(
        "s",
        vec![1.0, 2.0, 3.0],
        vec![1.0],
    ));
    check(&fig);
}

#[test]
fn extreme_and_degenerate_ranges_render() {
    let cases = [
        vec![1e300, -1e300],
        vec![1e10, 1e10 + 1e-6],
        vec![5.0, 5.0],
        vec![0.0, 0.0],
        vec![1e-300, 2e-300],
        vec![f64::MAX, f64::MIN_POSITIVE],
    ];
    for (i, ys) in cases.into_iter().enumerate() {
        for log in [false, true] {
            let mut fig = Figure::lines(&format!("ext{i}"), "Extreme", "x", "y")
                .with_series(Series::new("s", vec![1.0, 2.0], ys.clone()));
            if log {
                fig = fig.log_y();
            }
            check(&fig);
        }
        let hm = Figure::heatmap("hm_ext", "Extreme", "c", "r", 1, 2, ys.clone(), false);
        check(&hm);
    }
}

#[test]
fn heatmaps_render_both_colour_maps_with_ticks() {
    let vals: Vec<f64> = (0..12).map(|i| f64::from(i) - 6.0).collect();
    let div = Figure::heatmap("div", "Signed", "col", "row", 3, 4, vals.clone(), true)
        .with_ticks(words(&["a", "b", "c"]), words(&["w", "x", "y", "z"]));
    let svg = check(&div);
    assert!(svg.contains(">\nw\n<") || svg.contains("w"));
    let seq = Figure::heatmap("seq", "Unsigned", "col", "row", 3, 4, vals, false);
    check(&seq);
    // Many long column words are rotated rather than overlapping; many cells thin labels.
    let long: Vec<String> = (0..30).map(|i| format!("token_number_{i}")).collect();
    let rot = Figure::heatmap("rot", "Rotated", "col", "row", 1, 30, vec![0.5; 30], false)
        .with_ticks(vec![], long);
    check(&rot);
    // Large heatmaps embed their cells as one image: the SVG stays small.
    let vals: Vec<f64> = (0..12000).map(|i| f64::from(i % 97)).collect();
    let big = Figure::heatmap("big", "Big", "col", "row", 100, 120, vals, false);
    let svg = check(&big);
    assert!(svg.contains("<image ") && svg.contains("href=\"data:image/png;base64,"));
    assert!(svg.len() < 400_000, "{} bytes", svg.len());
}

#[test]
fn heatmap_of_wrong_size_is_a_typed_error() {
    let fig = Figure::heatmap("bad", "Bad", "c", "r", 2, 3, vec![1.0; 5], false);
    match render_svg(&fig) {
        Err(ReportError::InvalidFigure { figure, reason }) => {
            assert_eq!(figure, "bad");
            assert!(reason.contains('5'), "{reason}");
        }
        other => panic!("expected InvalidFigure, got {other:?}"),
    }
    assert!(matches!(
        render_png(&fig),
        Err(ReportError::InvalidFigure { .. })
    ));
}

#[test]
fn scatter_renders_labels_groups_and_overlay_lines() {
    let pts = vec![
        Point {
            x: 1.0,
            y: 1.0,
            label: Some("good".into()),
            group: Some("positive".into()),
        },
        Point {
            x: 1.1,
            y: 1.05,
            label: Some("great".into()),
            group: Some("positive".into()),
        },
        Point {
            x: -1.0,
            y: -1.0,
            label: Some("bad".into()),
            group: Some("negative".into()),
        },
        Point {
            x: 0.0,
            y: 0.1,
            label: Some("the".into()),
            group: None,
        },
    ];
    let fig = Figure::scatter("words", "Words", "u", "v", pts)
        .with_series(Series::new("slope", vec![-2.0, 2.0], vec![-2.0, 2.0]).dashed());
    let svg = check(&fig);
    for text in [
        "good", "great", "bad", "the", "positive", "negative", "other", "slope",
    ] {
        assert!(svg.contains(text), "missing {text}");
    }
}

#[test]
fn hostile_text_is_escaped_in_svg() {
    let fig = Figure::lines("x", "<script>alert(1)</script> & \"q\"", "a\u{0}b", "y")
        .with_series(Series::new("</svg>", vec![1.0, 2.0], vec![1.0, 2.0]));
    let svg = check(&fig);
    assert!(!svg.contains("<script>"));
    assert!(svg.contains("&lt;script&gt;"));
}

#[test]
fn heatmap_cells_read_cleanly_at_twelve_heads_and_stay_bare_when_small() {
    // Layer × head gaps as topic-bert draws them: small signed values.
    let vals: Vec<f64> = (0..72)
        .map(|i| (f64::from(i) - 30.0) * 1.9e-4 + if i == 5 { 0.005733 } else { 0.0 })
        .collect();
    let heads: Vec<String> = (0..12).map(|h| format!("h{h}")).collect();
    let layers: Vec<String> = (0..6).map(|l| format!("layer {l}")).collect();
    let fig =
        Figure::heatmap("gap", "Gap", "head", "layer", 6, 12, vals, true).with_ticks(layers, heads);
    let svg = check(&fig);
    // One shared power of ten on the colour bar, short labels in the cells.
    assert!(svg.contains("×1e-3"), "no shared exponent");
    assert!(
        svg.contains(">6.7<") || svg.contains("6.7\n"),
        "no cell label 6.7"
    );
    assert!(
        !svg.contains("0.0057") && !svg.contains("e-4"),
        "long labels"
    );
    // A 50 × 50 Gram matrix has no room for numbers: the colour bar carries them.
    let gram: Vec<f64> = (0..2500)
        .map(|i| f64::from(i % 50) / 49.0 + 0.123)
        .collect();
    let svg = check(&Figure::heatmap(
        "gram", "Gram", "j", "i", 50, 50, gram, false,
    ));
    assert!(
        !svg.contains("0.12<") && !svg.contains("0.12\n"),
        "labels in tiny cells"
    );
}
