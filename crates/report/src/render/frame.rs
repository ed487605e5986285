//! The frame shared by line and scatter plots: chart layout, grid and axes, and
//! a legend placed where it hides no data.
//!
//! Legend placement: the data (curves traced finely, reference lines across the
//! plot, points) are mapped to fractions of the plot, and the legend goes to the
//! first corner whose box covers none of them. When every corner is taken, the
//! y axis is extended upwards to make an empty band for it.

use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::axis::{Axis, Coord};
use super::{clean, Area, Ctx, Theme, GRID, GRID_LIGHT, MUTED};
use crate::ReportError;

pub(super) type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<Coord, Coord>>;

/// Font size of tick labels and legend entries.
const SMALL: f64 = 14.5;

/// A legend corner.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Corner {
    UpperRight,
    UpperLeft,
    LowerRight,
    LowerLeft,
}

impl Theme<'_> {
    /// A chart filling `area`, with room for the tick labels of `y`.
    pub(super) fn chart<'a, DB: DrawingBackend>(
        &self,
        area: &'a Area<DB>,
        x: &Axis,
        y: &Axis,
    ) -> Result<Chart<'a, DB>, ReportError> {
        let tick_w = y
            .ticks
            .iter()
            .map(|v| self.text_width(area, &y.label(*v), SMALL))
            .fold(0.0, f64::max);
        ChartBuilder::on(area)
            .margin_top(self.px(6.0))
            .margin_right(self.px(28.0))
            .margin_left(self.px(8.0))
            .margin_bottom(self.px(8.0))
            .x_label_area_size(self.px(50.0))
            .y_label_area_size(tick_w + self.px(38.0))
            .build_cartesian_2d(x.coord(), y.coord())
            .ctx(self.id)
    }

    /// Grid, axes, tick labels and axis descriptions.
    pub(super) fn mesh<'b, DB: DrawingBackend>(
        &self,
        chart: &mut Chart<'b, DB>,
        x: &'b Axis,
        y: &'b Axis,
        x_label: &str,
        y_label: &str,
    ) -> Result<(), ReportError> {
        let line = |c: RGBColor| c.stroke_width((self.px(1.0).round() as u32).max(1));
        chart
            .configure_mesh()
            .bold_line_style(line(GRID))
            .light_line_style(line(GRID_LIGHT))
            .axis_style(line(MUTED))
            .set_all_tick_mark_size(self.px(4.0) as u32)
            .label_style(self.text(SMALL))
            .axis_desc_style(self.text(16.5))
            .x_desc(clean(x_label))
            .y_desc(clean(y_label))
            .x_label_formatter(&|v| x.label(*v))
            .y_label_formatter(&|v| y.label(*v))
            .draw()
            .ctx(self.id)
    }

    /// Pixel size of the legend box for `labels`.
    pub(super) fn legend_size<DB: DrawingBackend>(
        &self,
        area: &Area<DB>,
        labels: &[String],
    ) -> (f64, f64) {
        let text_w = labels
            .iter()
            .map(|l| self.text_width(area, l, SMALL))
            .fold(0.0, f64::max);
        let m = self.margin();
        let sample = f64::from(self.px(28.0) as u32);
        let line_h = self.px(SMALL) * 1.25;
        (
            text_w + sample + 2.0 * m,
            labels.len() as f64 * line_h + 2.0 * m,
        )
    }

    fn margin(&self) -> f64 {
        f64::from(self.px(8.0) as u32)
    }

    /// The corner for a legend of `size` pixels on a plot of `dim` pixels over
    /// `occupied` (fractions of the plot, y up), and the fraction of the plot's
    /// height to free at the top when no corner is free.
    pub(super) fn place_legend(
        &self,
        dim: (u32, u32),
        size: (f64, f64),
        occupied: &[(f64, f64)],
    ) -> (Corner, Option<f64>) {
        let off = self.px(8.0);
        let bw = (size.0 + off * 1.5) / f64::from(dim.0.max(1));
        let bh = (size.1 + off * 1.5) / f64::from(dim.1.max(1));
        let corners = [
            Corner::UpperRight,
            Corner::UpperLeft,
            Corner::LowerRight,
            Corner::LowerLeft,
        ];
        let covered = |c: Corner| {
            occupied
                .iter()
                .filter(|(fx, fy)| {
                    let in_x = match c {
                        Corner::UpperRight | Corner::LowerRight => *fx >= 1.0 - bw,
                        _ => *fx <= bw,
                    };
                    let in_y = match c {
                        Corner::UpperRight | Corner::UpperLeft => *fy >= 1.0 - bh,
                        _ => *fy <= bh,
                    };
                    in_x && in_y
                })
                .count()
        };
        let counts: Vec<usize> = corners.iter().map(|c| covered(*c)).collect();
        let best = (0..4).min_by_key(|i| counts[*i]).unwrap_or(0);
        if counts[best] == 0 || bh > 0.45 {
            (corners[best], None)
        } else {
            (Corner::UpperRight, Some(bh + 0.02))
        }
    }

    /// Draws the legend of the labelled series in `corner`.
    pub(super) fn legend<'a, DB: DrawingBackend + 'a>(
        &self,
        chart: &mut Chart<'a, DB>,
        size: (f64, f64),
        corner: Corner,
    ) -> Result<(), ReportError> {
        let (w, h) = chart.plotting_area().dim_in_pixel();
        let off = self.px(8.0);
        let x = match corner {
            Corner::UpperRight | Corner::LowerRight => f64::from(w) - size.0 - off,
            _ => off,
        };
        let y = match corner {
            Corner::UpperRight | Corner::UpperLeft => off,
            _ => f64::from(h) - size.1 - off,
        };
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::Coordinate(x as i32, y as i32))
            .margin(self.margin() as u32)
            .legend_area_size(self.px(28.0) as u32)
            .background_style(WHITE.mix(0.9))
            .border_style(GRID.stroke_width((self.px(1.0).round() as u32).max(1)))
            .label_font(self.text(SMALL))
            .draw()
            .ctx(self.id)
    }
}

/// Adds `run` (drawing space) to `out` as fractions of the axes, with extra
/// points along long segments so that a line crossing a corner is seen there.
pub(super) fn trace(run: &[(f64, f64)], x: &Axis, y: &Axis, out: &mut Vec<(f64, f64)>) {
    let f = |p: &(f64, f64)| (x.frac(p.0), y.frac(p.1));
    if let Some(first) = run.first() {
        out.push(f(first));
    }
    for pair in run.windows(2) {
        let (a, b) = (f(&pair[0]), f(&pair[1]));
        let d = (b.0 - a.0).hypot(b.1 - a.1);
        let k = ((d / 0.01).ceil() as usize).clamp(1, 100);
        out.extend((1..=k).map(|i| {
            let s = i as f64 / k as f64;
            (a.0 + (b.0 - a.0) * s, a.1 + (b.1 - a.1) * s)
        }));
    }
}

/// A legend sample: a short line, dashed or solid, at backend pixel `(x, y)`.
pub(super) fn legend_sample(
    (x, y): (i32, i32),
    s: f64,
    colour: RGBColor,
    dashed: bool,
) -> DashedPathElement<std::vec::IntoIter<(i32, i32)>, i32> {
    let len = (22.0 * s) as i32;
    let (dash, gap) = if dashed {
        ((6.0 * s) as i32, (4.0 * s) as i32)
    } else {
        (len * 4, 0)
    };
    DashedPathElement::new(
        vec![(x, y), (x + len, y)],
        dash,
        gap,
        colour.stroke_width((2.0 * s).round() as u32),
    )
}

/// Writes "no data" in the middle of the plotting area.
pub(super) fn no_data<DB: DrawingBackend>(
    chart: &Chart<'_, DB>,
    t: &Theme,
) -> Result<(), ReportError> {
    let area = chart.plotting_area();
    let (w, h) = area.dim_in_pixel();
    area.strip_coord_spec()
        .draw_text(
            "no data",
            &t.text(18.0)
                .color(&MUTED)
                .pos(Pos::new(HPos::Center, VPos::Center)),
            ((w / 2) as i32, (h / 2) as i32),
        )
        .ctx(t.id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legend_goes_to_a_free_corner_or_makes_room() {
        let t = Theme {
            s: 1.0,
            id: "t",
            svg: true,
        };
        let dim = (600, 400);
        let size = (120.0, 60.0);
        // Data only in the upper right: the legend goes upper left.
        let pts = [(0.95, 0.95), (0.9, 0.9)];
        assert_eq!(t.place_legend(dim, size, &pts), (Corner::UpperLeft, None));
        // Data in every corner: room is made at the top.
        let pts = [(0.02, 0.02), (0.98, 0.02), (0.02, 0.98), (0.98, 0.98)];
        let (c, room) = t.place_legend(dim, size, &pts);
        assert_eq!(c, Corner::UpperRight);
        assert!(room.unwrap() > 60.0 / 400.0);
    }
}
