//! Heatmaps: a matrix of cells (row 0 at the top, as a matrix is written), tick
//! labels on both axes, and a colour bar.
//!
//! Laid out by hand in pixels rather than through a chart mesh, so that cells
//! stay close to square, tick labels sit on cell centres (rotated when the column
//! labels are words), and the colour bar lines up with the grid. Signed data
//! (`diverging`) uses a blue–white–red map centred on zero; other data a
//! perceptually uniform sequential map (viridis). Non-finite cells are grey.
//!
//! Cell values are written with two significant digits of the largest value,
//! all with the same decimals; values far from 1 (largest below 0.01 or from
//! 10 000) are written as multiples of a shared power of ten that the colour bar
//! states (`×1e-3`). Labels are drawn only when the widest fits its cell: the
//! colour bar carries the scale on its own.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::FontTransform;

use super::axis::{fmt_num, linear_ticks, Axis};
use super::{clean, Area, Ctx, Theme, INK, MUTED, NAN_GREY};
use crate::ReportError;

/// The heatmap fields of a [`crate::spec::Plot::Heatmap`].
pub(super) struct Heat<'a> {
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub rows: usize,
    pub cols: usize,
    pub values: &'a [f64],
    pub row_ticks: &'a [String],
    pub col_ticks: &'a [String],
    pub diverging: bool,
}

/// ColorBrewer RdBu (7 classes), blue for negative, near-white at zero.
const DIVERGING: [(u8, u8, u8); 7] = [
    (33, 102, 172),
    (103, 169, 207),
    (209, 229, 240),
    (247, 247, 247),
    (253, 219, 199),
    (239, 138, 98),
    (178, 24, 43),
];

/// Viridis, sampled at ten evenly spaced points.
const SEQUENTIAL: [(u8, u8, u8); 10] = [
    (68, 1, 84),
    (72, 40, 120),
    (62, 73, 137),
    (49, 104, 142),
    (38, 130, 142),
    (31, 158, 137),
    (53, 183, 121),
    (110, 206, 88),
    (181, 222, 43),
    (253, 231, 37),
];

/// Piecewise-linear colour map over `stops` at `f` in [0, 1].
fn colour_at(stops: &[(u8, u8, u8)], f: f64) -> RGBColor {
    let f = if f.is_finite() {
        f.clamp(0.0, 1.0)
    } else {
        0.5
    };
    let pos = f * (stops.len() - 1) as f64;
    let i = (pos.floor() as usize).min(stops.len() - 2);
    let w = pos - i as f64;
    let mix = |a: u8, b: u8| (f64::from(a) * (1.0 - w) + f64::from(b) * w).round() as u8;
    let (a, b) = (stops[i], stops[i + 1]);
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

/// In SVG, heatmaps with more cells than this draw them as one embedded PNG
/// (scaled without smoothing) instead of one rectangle per run of cells, which
/// keeps large matrices from producing megabytes of SVG.
const RASTER_CELLS: usize = 2500;

/// The cells of a large heatmap as a PNG, and where the SVG must place it
/// (pixels from the top-left corner of the figure).
pub(super) struct CellImage {
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
    pub png: Vec<u8>,
}

/// Tick labels longer than this are cut with an ellipsis.
const TICK_CHARS: usize = 24;

fn tick_text(ticks: &[String], i: usize) -> String {
    match ticks.get(i) {
        Some(s) if s.chars().count() > TICK_CHARS => {
            let cut: String = s.chars().take(TICK_CHARS - 1).collect();
            clean(&format!("{cut}…"))
        }
        Some(s) => clean(s),
        None => i.to_string(),
    }
}

/// How a heatmap's values are written: as multiples of `10^exp`, with
/// `decimals` digits after the point.
#[derive(Clone, Copy, Debug, PartialEq)]
struct CellFormat {
    exp: i32,
    decimals: usize,
}

impl CellFormat {
    /// Two significant digits of the largest finite magnitude; a shared power of
    /// ten when that magnitude is below 0.01 or from 10 000.
    fn of(values: &[f64]) -> Self {
        let m = values
            .iter()
            .filter(|v| v.is_finite())
            .fold(0.0f64, |m, v| m.max(v.abs()));
        if m == 0.0 {
            return CellFormat {
                exp: 0,
                decimals: 0,
            };
        }
        let mag = m.log10().floor() as i32;
        let exp = if (-2..4).contains(&mag) { 0 } else { mag };
        let decimals = (1 - (mag - exp)).clamp(0, 3) as usize;
        CellFormat { exp, decimals }
    }

    fn scale(&self) -> f64 {
        10f64.powi(self.exp)
    }

    fn label(&self, v: f64) -> String {
        let s = format!("{:.*}", self.decimals, v / self.scale());
        // A value that rounds to zero reads as zero, not minus zero.
        if s.trim_start_matches('-')
            .chars()
            .all(|c| c == '0' || c == '.')
        {
            s.trim_start_matches('-').to_string()
        } else {
            s
        }
    }

    /// What the colour bar says the values are multiplied by, if anything.
    fn caption(&self) -> Option<String> {
        (self.exp != 0).then(|| format!("×1e{}", self.exp))
    }
}

/// The font size (in unscaled points) at which every cell's label fits its
/// `cw` × `ch` pixel cell, if any size from 14 down to 9 does; `width` measures
/// a text at a size.
fn cell_font(
    labels: &[String],
    (cw, ch): (f64, f64),
    s: f64,
    width: &dyn Fn(&str, f64) -> f64,
) -> Option<f64> {
    let mut size = (ch / s * 0.5).min(14.0);
    while size >= 9.0 {
        let widest = labels.iter().map(|l| width(l, size)).fold(0.0, f64::max);
        if widest + 6.0 * s <= cw {
            return Some(size);
        }
        size -= 1.0;
    }
    None
}

/// Every how many cells to label so that `n` labels of `each` pixels fit in `room`.
fn label_step(n: usize, each: f64, room: f64) -> usize {
    let fits = |k: usize| (n.div_ceil(k) as f64) * each <= room;
    [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000]
        .into_iter()
        .find(|k| fits(*k))
        .unwrap_or(n.max(1))
}

pub(super) fn draw<DB: DrawingBackend>(
    area: &Area<DB>,
    t: &Theme,
    h: &Heat,
) -> Result<Option<CellImage>, ReportError> {
    let (rows, cols) = (h.rows, h.cols);
    if rows.checked_mul(cols) != Some(h.values.len()) {
        return Err(ReportError::InvalidFigure {
            figure: t.id.to_string(),
            reason: format!(
                "heatmap has {} values but rows * cols = {rows} * {cols}",
                h.values.len()
            ),
        });
    }
    let (w, ht) = area.dim_in_pixel();
    let (w, ht) = (f64::from(w), f64::from(ht));
    if rows == 0 || cols == 0 {
        area.draw_text(
            "no data",
            &t.text(18.0)
                .color(&MUTED)
                .pos(Pos::new(HPos::Center, VPos::Center)),
            ((w / 2.0) as i32, (ht / 2.0) as i32),
        )
        .ctx(t.id)?;
        return Ok(None);
    }

    let font = 14.0;
    let line_h = t.px(font * 1.35);

    // Colour scale.
    let finite = || {
        h.values
            .iter()
            .copied()
            .filter(|v| Axis::fwd(false, *v).is_some())
    };
    let (mut vmin, mut vmax) = finite().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
        (a.min(v), b.max(v))
    });
    if vmin > vmax {
        (vmin, vmax) = (0.0, 1.0);
    }
    if h.diverging {
        let m = vmin.abs().max(vmax.abs());
        let m = if m > 0.0 { m } else { 1.0 };
        (vmin, vmax) = (-m, m);
    } else if vmax - vmin <= vmax.abs().max(vmin.abs()) * 1e-12 {
        let d = if vmax.abs() > 0.0 {
            vmax.abs() * 0.5
        } else {
            0.5
        };
        (vmin, vmax) = (vmin - d, vmax + d);
    }
    let stops: &[(u8, u8, u8)] = if h.diverging { &DIVERGING } else { &SEQUENTIAL };
    let colour = |v: f64| -> RGBColor {
        match Axis::fwd(false, v) {
            Some(v) => colour_at(stops, (v - vmin) / (vmax - vmin)),
            None => NAN_GREY,
        }
    };
    let (bar_ticks, bar_step) = linear_ticks(vmin, vmax, 5);
    let format = CellFormat::of(h.values);
    let bar_text = |v: f64| fmt_num(v / format.scale(), bar_step / format.scale());

    // Horizontal budget: [y desc | row labels | grid | gap | bar | bar labels].
    let row_labels: Vec<String> = (0..rows).map(|r| tick_text(h.row_ticks, r)).collect();
    let col_labels: Vec<String> = (0..cols).map(|c| tick_text(h.col_ticks, c)).collect();
    let widest = |v: &[String]| {
        v.iter()
            .map(|s| t.text_width(area, s, font))
            .fold(0.0, f64::max)
    };
    let bar_label_w = bar_ticks
        .iter()
        .map(|v| t.text_width(area, &bar_text(*v), font))
        .fold(0.0, f64::max)
        .max(
            format
                .caption()
                .map_or(0.0, |c| t.text_width(area, &c, font) - t.px(18.0 + 16.0)),
        );
    let left = t.px(30.0) + widest(&row_labels) + t.px(8.0);
    let right = t.px(18.0 + 16.0 + 8.0) + bar_label_w + t.px(16.0);
    let room_w = (w - left - right).max(t.px(40.0));

    // Column labels: horizontal if they fit, else rotated words, else thinned.
    let col_w = widest(&col_labels);
    let mut rotate = false;
    let mut col_step = label_step(cols, col_w + t.px(10.0), room_w);
    if col_step > 1 && !h.col_ticks.is_empty() && label_step(cols, line_h, room_w) == 1 {
        rotate = true;
        col_step = 1;
    }
    let bottom_labels = if rotate {
        col_w + t.px(8.0)
    } else {
        line_h + t.px(6.0)
    };
    let top = t.px(8.0);
    let bottom = bottom_labels + t.px(30.0);
    let room_h = (ht - top - bottom).max(t.px(40.0));

    // Cells close to square, the grid centred in the room left for it.
    let (cw, ch) = (room_w / cols.max(1) as f64, room_h / rows.max(1) as f64);
    let (cw, ch) = (cw.min(ch * 2.5), ch.min(cw * 2.5));
    let (gw, gh) = (cw * cols as f64, ch * rows as f64);
    let gx = left + (room_w - gw) / 2.0;
    let gy = top + (room_h - gh) / 2.0;
    let px = |v: f64| v.round() as i32;

    let mut image = None;
    if t.svg && rows * cols > RASTER_CELLS {
        // Each cell becomes a k × k block, so that viewers which smooth scaled
        // images (ignoring `image-rendering`) blur only a sliver of each cell.
        let budget = (4e6 / (rows * cols) as f64).sqrt().floor();
        let k = (2.0 * cw.max(ch)).ceil().min(12.0).min(budget).max(1.0) as usize;
        let mut rgb = Vec::with_capacity(rows * cols * k * k * 3);
        for row in h.values.chunks(cols) {
            let line: Vec<u8> = row
                .iter()
                .flat_map(|v| {
                    let RGBColor(r, g, b) = colour(*v);
                    [r, g, b].repeat(k)
                })
                .collect();
            for _ in 0..k {
                rgb.extend_from_slice(&line);
            }
        }
        let (bx, by) = area.get_base_pixel();
        image = Some(CellImage {
            x: gx + f64::from(bx),
            y: gy + f64::from(by),
            w: gw,
            h: gh,
            png: super::encode_png(&rgb, (cols * k) as u32, (rows * k) as u32).ctx(t.id)?,
        });
    } else {
        draw_cells(area, t, h, &colour, (gx, gy, cw, ch))?;
    }
    area.draw(&Rectangle::new(
        [(px(gx) - 1, px(gy) - 1), (px(gx + gw), px(gy + gh))],
        MUTED.stroke_width(1),
    ))
    .ctx(t.id)?;

    // Values written in cells when every label fits its cell.
    let labels: Vec<String> = h
        .values
        .iter()
        .map(|v| match Axis::fwd(false, *v) {
            Some(v) => format.label(v),
            None => String::new(),
        })
        .collect();
    let width = |s: &str, size: f64| t.text_width(area, s, size);
    let fits = (rows * cols <= 400)
        .then(|| cell_font(&labels, (cw, ch), t.s, &width))
        .flatten();
    if let Some(size) = fits {
        for (i, v) in h.values.iter().enumerate() {
            let Some(v) = Axis::fwd(false, *v) else {
                continue;
            };
            let RGBColor(r, g, b) = colour(v);
            let lum = 0.299 * f64::from(r) + 0.587 * f64::from(g) + 0.114 * f64::from(b);
            let ink = if lum < 140.0 { WHITE } else { INK };
            let (cx, cy) = (
                gx + ((i % cols) as f64 + 0.5) * cw,
                gy + ((i / cols) as f64 + 0.5) * ch,
            );
            area.draw_text(
                &labels[i],
                &t.text(size)
                    .color(&ink)
                    .pos(Pos::new(HPos::Center, VPos::Center)),
                (px(cx), px(cy)),
            )
            .ctx(t.id)?;
        }
    }

    // Tick labels on cell centres.
    let row_step = label_step(rows, line_h, gh.max(line_h));
    let label = t.text(font).color(&INK);
    for r in (0..rows).step_by(row_step) {
        let cy = gy + (r as f64 + 0.5) * ch;
        area.draw_text(
            &row_labels[r],
            &label.pos(Pos::new(HPos::Right, VPos::Center)),
            (px(gx - t.px(6.0)), px(cy)),
        )
        .ctx(t.id)?;
    }
    for c in (0..cols).step_by(col_step) {
        let cx = gx + (c as f64 + 0.5) * cw;
        let style = if rotate {
            label
                .transform(FontTransform::Rotate270)
                .pos(Pos::new(HPos::Right, VPos::Center))
        } else {
            label.pos(Pos::new(HPos::Center, VPos::Top))
        };
        area.draw_text(&col_labels[c], &style, (px(cx), px(gy + gh + t.px(5.0))))
            .ctx(t.id)?;
    }

    // Axis descriptions.
    let desc = t.text(16.5).color(&INK);
    area.draw_text(
        &clean(h.x_label),
        &desc.pos(Pos::new(HPos::Center, VPos::Top)),
        (px(gx + gw / 2.0), px(gy + gh + bottom_labels + t.px(6.0))),
    )
    .ctx(t.id)?;
    area.draw_text(
        &clean(h.y_label),
        &desc
            .transform(FontTransform::Rotate270)
            .pos(Pos::new(HPos::Center, VPos::Top)),
        (px(t.px(6.0)), px(gy + gh / 2.0)),
    )
    .ctx(t.id)?;

    // Colour bar, as tall as the grid (at least 120 px), centred on it.
    let bh = gh.max(t.px(120.0)).min(room_h);
    let (bx, by) = (gx + gw + t.px(18.0), gy + gh / 2.0 - bh / 2.0);
    let bw = t.px(16.0);
    let steps = 96;
    for i in 0..steps {
        let f0 = i as f64 / steps as f64;
        let f1 = (i + 1) as f64 / steps as f64;
        let col = colour_at(stops, (f0 + f1) / 2.0);
        area.draw(&Rectangle::new(
            [
                (px(bx), px(by + bh * (1.0 - f1)) - i32::from(i + 1 < steps)),
                (px(bx + bw), px(by + bh * (1.0 - f0))),
            ],
            col.filled(),
        ))
        .ctx(t.id)?;
    }
    area.draw(&Rectangle::new(
        [(px(bx), px(by)), (px(bx + bw), px(by + bh))],
        MUTED.stroke_width(1),
    ))
    .ctx(t.id)?;
    for v in &bar_ticks {
        let yv = by + bh * (1.0 - (v - vmin) / (vmax - vmin));
        area.draw(&PathElement::new(
            vec![(px(bx + bw), px(yv)), (px(bx + bw + t.px(4.0)), px(yv))],
            MUTED.stroke_width(1),
        ))
        .ctx(t.id)?;
        area.draw_text(
            &bar_text(*v),
            &label.pos(Pos::new(HPos::Left, VPos::Center)),
            (px(bx + bw + t.px(7.0)), px(yv)),
        )
        .ctx(t.id)?;
    }
    if let Some(caption) = format.caption() {
        area.draw_text(
            &caption,
            &label.pos(Pos::new(HPos::Left, VPos::Bottom)),
            (px(bx), px(by - t.px(4.0))),
        )
        .ctx(t.id)?;
    }
    if finite().count() < h.values.len() {
        area.draw_text(
            "grey: not finite",
            &t.text(12.5)
                .color(&MUTED)
                .pos(Pos::new(HPos::Right, VPos::Top)),
            (px(w - t.px(8.0)), px(by + bh + t.px(6.0))),
        )
        .ctx(t.id)?;
    }
    Ok(image)
}

/// One rectangle per run of equal colour along a row, the grid at `(gx, gy)`
/// with cells of `cw` × `ch` pixels.
fn draw_cells<DB: DrawingBackend>(
    area: &Area<DB>,
    t: &Theme,
    h: &Heat,
    colour: &dyn Fn(f64) -> RGBColor,
    (gx, gy, cw, ch): (f64, f64, f64, f64),
) -> Result<(), ReportError> {
    let (rows, cols) = (h.rows, h.cols);
    let px = |v: f64| v.round() as i32;
    let gap = if cw >= t.px(14.0) && ch >= t.px(14.0) {
        1
    } else {
        0
    };
    for r in 0..rows {
        let (y0, y1) = (px(gy + r as f64 * ch), px(gy + (r + 1) as f64 * ch));
        let mut c = 0;
        while c < cols {
            let col = colour(h.values[r * cols + c]);
            let mut end = c + 1;
            while gap == 0 && end < cols && colour(h.values[r * cols + end]) == col {
                end += 1;
            }
            let (x0, x1) = (px(gx + c as f64 * cw), px(gx + end as f64 * cw));
            // Without gaps, cells overlap their right and lower neighbours by a
            // pixel so that a scaled SVG shows no hairline seams between them.
            let (ox, oy) = match gap {
                0 => (i32::from(end < cols), i32::from(r + 1 < rows)),
                _ => (-gap, -gap),
            };
            area.draw(&Rectangle::new(
                [(x0, y0), (x1 + ox, y1 + oy)],
                col.filled(),
            ))
            .ctx(t.id)?;
            c = end;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diverging_map_is_white_in_the_middle_and_blue_below() {
        assert_eq!(colour_at(&DIVERGING, 0.5), RGBColor(247, 247, 247));
        let RGBColor(r, _, b) = colour_at(&DIVERGING, 0.0);
        assert!(b > r);
        assert_eq!(
            colour_at(&SEQUENTIAL, f64::NAN),
            colour_at(&SEQUENTIAL, 0.5)
        );
    }

    #[test]
    fn cell_labels_share_decimals_and_a_power_of_ten() {
        let f = CellFormat::of(&[0.005733, -3.97e-4, f64::NAN]);
        assert_eq!((f.exp, f.caption().as_deref()), (-3, Some("×1e-3")));
        assert_eq!(
            (f.label(0.005733), f.label(-3.97e-4)),
            ("5.7".into(), "-0.4".into())
        );
        let f = CellFormat::of(&[0.85, 0.12, -0.0004]);
        assert_eq!(f.caption(), None);
        assert_eq!(
            [f.label(0.85), f.label(0.12), f.label(-0.0004)],
            ["0.85", "0.12", "0.00"]
        );
        let f = CellFormat::of(&[23.4, 7.0]);
        assert_eq!([f.label(23.4), f.label(7.0)], ["23", "7"]);
        let f = CellFormat::of(&[123456.0]);
        assert_eq!(
            (f.label(123456.0), f.caption().as_deref()),
            ("1.2".into(), Some("×1e5"))
        );
        assert_eq!(CellFormat::of(&[0.0, f64::NAN]).label(0.0), "0");
    }

    #[test]
    fn cell_labels_shrink_to_fit_or_are_left_out() {
        let width = |s: &str, size: f64| s.chars().count() as f64 * size * 0.6;
        let labels = vec!["-0.4".to_string(), "5.7".into()];
        // A wide, tall cell takes the full size; a narrow one a smaller size.
        assert_eq!(cell_font(&labels, (80.0, 40.0), 1.0, &width), Some(14.0));
        assert_eq!(cell_font(&labels, (30.0, 40.0), 1.0, &width), Some(10.0));
        // Too narrow (a 50 × 50 Gram matrix) or too flat for 9 pt: no labels.
        assert_eq!(cell_font(&labels, (20.0, 40.0), 1.0, &width), None);
        assert_eq!(cell_font(&labels, (80.0, 16.0), 1.0, &width), None);
    }

    #[test]
    fn label_steps_thin_out() {
        assert_eq!(label_step(10, 10.0, 200.0), 1);
        assert_eq!(label_step(100, 10.0, 200.0), 5);
        assert_eq!(label_step(0, 10.0, 200.0), 1);
    }
}
