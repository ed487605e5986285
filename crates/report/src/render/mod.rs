//! Figures to pictures: the one place that knows the plotting crate.
//!
//! [`render_svg`] and [`render_png`] turn a [`Figure`] (plain data, see
//! [`crate::spec`]) into a standalone SVG document or PNG bytes. Everything that
//! touches `plotters` lives under this module, so swapping the plotting crate
//! means rewriting these files and nothing else. Text is laid out with DejaVu Sans,
//! embedded in the binary, so PNGs render identically on machines without system
//! fonts; SVGs name DejaVu Sans first and fall back to the viewer's sans-serif.
//!
//! Bad data never panics: NaN and infinite values are skipped (line plots break
//! the curve there), non-positive values are skipped on log axes, values beyond
//! ±1e100 are treated as non-finite, and a figure without any drawable data
//! renders its axes with a "no data" note. Only a figure whose shape is
//! inconsistent (a heatmap whose `values` is not `rows * cols` long) is an error.
//!
//! ```
//! use mechlab_report::spec::{Figure, Series};
//! use mechlab_report::render::{render_png, render_svg};
//! let fig = Figure::lines("loss", "Training loss", "step", "loss")
//!     .log_y()
//!     .with_series(Series::new("train", vec![0.0, 1.0, 2.0], vec![1.0, 0.0, 0.25]));
//! let svg = render_svg(&fig).unwrap();
//! assert!(svg.contains("Training loss"));
//! let png = render_png(&fig).unwrap();
//! assert_eq!(&png[..4], b"\x89PNG");
//! ```

mod axis;
mod frame;
mod heatmap;
mod lines;
mod scatter;

use std::fmt::Display;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::spec::{Figure, Plot};
use crate::ReportError;

/// Size of an SVG figure in CSS pixels (width, height).
pub const SVG_SIZE: (u32, u32) = (800, 500);
/// PNGs are drawn at this multiple of [`SVG_SIZE`] (crisp on high-DPI screens).
pub const PNG_SCALE: u32 = 2;

/// Family name used for all text. The embedded font is registered under this
/// name; in SVG output it is a CSS font list (Verdana has nearly the same metrics).
const FONT: &str = "DejaVu Sans, Verdana, sans-serif";

/// Renders a figure as a standalone SVG document.
pub fn render_svg(fig: &Figure) -> Result<String, ReportError> {
    let fig = &*fig.still();
    fonts(&fig.id)?;
    let mut out = String::new();
    let cells;
    {
        let root = SVGBackend::with_string(&mut out, SVG_SIZE).into_drawing_area();
        cells = draw_figure(&root, fig, 1.0, true)?;
        root.present().ctx(&fig.id)?;
    }
    if let Plot::Heatmap { .. } = fig.plot {
        // Cells must tile without anti-aliased seams when the SVG is scaled.
        out = out.replacen("<svg ", "<svg shape-rendering=\"crispEdges\" ", 1);
    }
    if let Some(img) = cells {
        // Right after the background, so the frame and labels are drawn over it.
        let tag = format!(
            "<image x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" \
             preserveAspectRatio=\"none\" style=\"image-rendering:crisp-edges;\
             image-rendering:pixelated\" href=\"data:image/png;base64,{}\"/>\n",
            img.x,
            img.y,
            img.w,
            img.h,
            base64(&img.png)
        );
        let at = out.find("/>\n").map_or(out.len(), |i| i + 3);
        out.insert_str(at, &tag);
    }
    Ok(out)
}

/// Renders a figure as PNG bytes, [`PNG_SCALE`] times the size of the SVG.
pub fn render_png(fig: &Figure) -> Result<Vec<u8>, ReportError> {
    let fig = &*fig.still();
    fonts(&fig.id)?;
    let (w, h) = (SVG_SIZE.0 * PNG_SCALE, SVG_SIZE.1 * PNG_SCALE);
    let mut rgb = vec![0u8; (w * h * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (w, h)).into_drawing_area();
        draw_figure(&root, fig, f64::from(PNG_SCALE), false)?;
        root.present().ctx(&fig.id)?;
    }
    encode_png(&rgb, w, h).ctx(&fig.id)
}

/// Encodes an 8-bit RGB buffer of `w` × `h` pixels as PNG.
fn encode_png(rgb: &[u8], w: u32, h: u32) -> Result<Vec<u8>, png::EncodingError> {
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut writer = enc.write_header()?;
    writer.write_image_data(rgb)?;
    writer.finish()?;
    Ok(out)
}

/// Standard base64 with padding (for the data URI of an embedded image).
fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ABC[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Registers the embedded font once per process.
fn fonts(id: &str) -> Result<(), ReportError> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        let normal =
            plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular());
        let bold = plotters::style::register_font(FONT, FontStyle::Bold, dejavu::sans::bold());
        normal.is_ok() && bold.is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err(ReportError::Render {
            figure: id.to_string(),
            message: "the embedded font could not be loaded".into(),
        })
    }
}

type Area<DB> = DrawingArea<DB, Shift>;

/// Draws the title, then the plot below it.
/// Returns the cells of a large heatmap when they are to be embedded as an
/// image (SVG only).
fn draw_figure<DB: DrawingBackend>(
    root: &Area<DB>,
    fig: &Figure,
    scale: f64,
    svg: bool,
) -> Result<Option<heatmap::CellImage>, ReportError> {
    let t = Theme {
        s: scale,
        id: &fig.id,
        svg,
    };
    root.fill(&WHITE).ctx(t.id)?;
    let (w, _) = root.dim_in_pixel();
    let title = clean(&fig.title);
    // Shrink a long title until it fits the width.
    let mut size = 23.0;
    while size > 12.0 {
        let (tw, _) = root.estimate_text_size(&title, &t.bold(size)).ctx(t.id)?;
        if f64::from(tw) <= f64::from(w) - t.px(40.0) {
            break;
        }
        size -= 1.0;
    }
    let title_h = t.px(size * 1.25 + 18.0) as u32;
    let (head, body) = root.split_vertically(title_h);
    head.draw_text(
        &title,
        &t.bold(size).pos(Pos::new(HPos::Center, VPos::Center)),
        ((w / 2) as i32, (title_h / 2) as i32 + t.px(2.0) as i32),
    )
    .ctx(t.id)?;
    match &fig.plot {
        Plot::Lines {
            x_label,
            y_label,
            log_x,
            log_y,
            series,
            hlines,
        } => lines::draw(
            &body,
            &t,
            x_label,
            y_label,
            (*log_x, *log_y),
            series,
            hlines,
        )
        .map(|()| None),
        Plot::Heatmap {
            x_label,
            y_label,
            rows,
            cols,
            values,
            row_ticks,
            col_ticks,
            diverging,
        } => {
            let hm = heatmap::Heat {
                x_label,
                y_label,
                rows: *rows,
                cols: *cols,
                values,
                row_ticks,
                col_ticks,
                diverging: *diverging,
            };
            heatmap::draw(&body, &t, &hm)
        }
        Plot::Scatter {
            x_label,
            y_label,
            points,
            lines,
        } => scatter::draw(&body, &t, x_label, y_label, points, lines).map(|()| None),
        // `render_svg` and `render_png` draw an attention viewer's still instead.
        Plot::Attention { .. } => Err(ReportError::InvalidFigure {
            figure: fig.id.clone(),
            reason: "an attention viewer is drawn as its still (Figure::still)".into(),
        }),
    }
}

/// Sizes and text styles at the current scale, and the figure id for errors.
struct Theme<'a> {
    s: f64,
    id: &'a str,
    /// Drawing SVG (else a bitmap).
    svg: bool,
}

const INK: RGBColor = RGBColor(34, 34, 34);
const MUTED: RGBColor = RGBColor(90, 90, 90);
const GRID: RGBColor = RGBColor(226, 226, 226);
const GRID_LIGHT: RGBColor = RGBColor(243, 243, 243);
const NAN_GREY: RGBColor = RGBColor(200, 200, 200);

/// Qualitative palette (Tableau 10): distinct, colour-blind-tolerant, print-safe.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// Colours of horizontal reference lines: darker, so they read as annotations.
const REF_COLOURS: [RGBColor; 4] = [
    RGBColor(60, 60, 60),
    RGBColor(150, 40, 40),
    RGBColor(40, 90, 150),
    RGBColor(110, 110, 110),
];

fn palette(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

impl Theme<'_> {
    fn px(&self, v: f64) -> f64 {
        v * self.s
    }
    fn text(&self, size: f64) -> TextStyle<'static> {
        (FONT, size * self.s).into_font().color(&INK)
    }
    fn bold(&self, size: f64) -> TextStyle<'static> {
        FontDesc::new(FontFamily::Name(FONT), size * self.s, FontStyle::Bold).color(&INK)
    }
    fn text_width<DB: DrawingBackend>(&self, area: &Area<DB>, s: &str, size: f64) -> f64 {
        area.estimate_text_size(s, &self.text(size))
            .map(|(w, _)| f64::from(w))
            .unwrap_or(s.chars().count() as f64 * size * self.s * 0.6)
    }
}

/// Text safe to hand to any backend: control characters become spaces.
fn clean(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// Attaches the figure id to a plotting or encoding error.
trait Ctx<T> {
    fn ctx(self, id: &str) -> Result<T, ReportError>;
}

impl<T, E: Display> Ctx<T> for Result<T, E> {
    fn ctx(self, id: &str) -> Result<T, ReportError> {
        self.map_err(|e| ReportError::Render {
            figure: id.to_string(),
            message: e.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::base64;

    #[test]
    fn base64_matches_the_rfc_examples() {
        let cases = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, coded) in cases {
            assert_eq!(base64(plain.as_bytes()), coded);
        }
    }
}
