//! Line plots: curves against a shared x axis, optional log axes, dashed
//! (theory) curves, a legend, and labelled horizontal reference lines.
//!
//! A curve is broken wherever a point cannot be drawn (NaN, infinite, or
//! non-positive on a log axis), so a gap in the data shows as a gap in the line.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::axis::Axis;
use super::frame::{legend_sample, no_data, trace};
use super::{clean, palette, Area, Ctx, Theme, REF_COLOURS};
use crate::spec::{RefLine, Series};
use crate::ReportError;

/// Curves with at most this many points get a marker on each point.
const MARKER_MAX: usize = 40;

struct Curve {
    name: String,
    dashed: bool,
    colour: RGBColor,
    /// Maximal stretches of drawable points, in drawing space.
    runs: Vec<Vec<(f64, f64)>>,
}

/// Splits a series into runs of drawable points.
fn runs(s: &Series, log_x: bool, log_y: bool) -> Vec<Vec<(f64, f64)>> {
    let mut out = Vec::new();
    let mut cur = Vec::new();
    for (x, y) in s.x.iter().zip(&s.y) {
        match (Axis::fwd(log_x, *x), Axis::fwd(log_y, *y)) {
            (Some(x), Some(y)) => cur.push((x, y)),
            _ => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

pub(super) fn draw<DB: DrawingBackend>(
    area: &Area<DB>,
    t: &Theme,
    x_label: &str,
    y_label: &str,
    (log_x, log_y): (bool, bool),
    series: &[Series],
    hlines: &[RefLine],
) -> Result<(), ReportError> {
    let curves: Vec<Curve> = series
        .iter()
        .enumerate()
        .map(|(i, s)| Curve {
            name: clean(&s.name),
            dashed: s.dashed,
            colour: palette(i),
            runs: runs(s, log_x, log_y),
        })
        .collect();
    let refs: Vec<(String, f64, RGBColor)> = hlines
        .iter()
        .filter_map(|h| Axis::fwd(log_y, h.y).map(|y| (clean(&h.name), y)))
        .enumerate()
        .map(|(i, (n, y))| (n, y, REF_COLOURS[i % REF_COLOURS.len()]))
        .collect();
    let points = || curves.iter().flat_map(|c| c.runs.iter().flatten());
    let x = Axis::new(log_x, points().map(|p| p.0), 0.02);
    let mut y = Axis::new(
        log_y,
        points().map(|p| p.1).chain(refs.iter().map(|r| r.1)),
        0.06,
    );

    // Legend: a free corner, or room made above the data.
    let labels: Vec<String> = curves
        .iter()
        .filter(|c| !c.name.is_empty())
        .map(|c| match c.runs.is_empty() {
            true => format!("{} (no data)", c.name),
            false => c.name.clone(),
        })
        .collect();
    let mut legend = None;
    if !labels.is_empty() {
        let size = t.legend_size(area, &labels);
        let dim = t.chart(area, &x, &y)?.plotting_area().dim_in_pixel();
        let mut occupied = Vec::new();
        for run in curves.iter().flat_map(|c| &c.runs) {
            trace(run, &x, &y, &mut occupied);
        }
        for r in &refs {
            trace(&[(x.lo, r.1), (x.hi, r.1)], &x, &y, &mut occupied);
            // The reference line's label sits above its right end.
            occupied.push((0.9, y.frac(r.1) + 0.05));
        }
        let (corner, room) = t.place_legend(dim, size, &occupied);
        if let Some(frac) = room {
            y = y.extend_top(frac);
        }
        legend = Some((size, corner));
    }

    let mut chart = t.chart(area, &x, &y)?;
    t.mesh(&mut chart, &x, &y, x_label, y_label)?;

    let width = (t.px(2.0).round() as u32).max(1);
    let (dash, gap) = (t.px(7.0) as i32, t.px(5.0) as i32);
    for (name, yv, colour) in &refs {
        chart
            .draw_series(DashedLineSeries::new(
                vec![(x.lo, *yv), (x.hi, *yv)],
                dash,
                gap,
                colour.stroke_width((t.px(1.5).round() as u32).max(1)),
            ))
            .ctx(t.id)?;
        if !name.is_empty() {
            let style = t
                .text(14.0)
                .color(colour)
                .pos(Pos::new(HPos::Right, VPos::Bottom));
            let (w, h) = (t.text_width(area, name, 14.0), t.px(16.0));
            let (dx, dy) = (t.px(6.0), t.px(4.0));
            let label = EmptyElement::at((x.hi, *yv))
                + Rectangle::new(
                    [
                        ((-dx - w - t.px(3.0)) as i32, (-dy - h) as i32),
                        ((-dx + t.px(3.0)) as i32, (-dy + t.px(1.0)) as i32),
                    ],
                    WHITE.mix(0.8).filled(),
                )
                + Text::new(name.clone(), (-dx as i32, -dy as i32), style);
            chart.draw_series(std::iter::once(label)).ctx(t.id)?;
        }
    }

    for c in &curves {
        let style = c.colour.stroke_width(width);
        let mut labelled = false;
        let n_points: usize = c.runs.iter().map(Vec::len).sum();
        for run in &c.runs {
            let anno = if c.dashed {
                chart.draw_series(DashedLineSeries::new(run.clone(), dash, gap, style))
            } else {
                chart.draw_series(LineSeries::new(run.clone(), style))
            }
            .ctx(t.id)?;
            if !labelled && !c.name.is_empty() {
                let (colour, dashed, s) = (c.colour, c.dashed, t.s);
                anno.label(c.name.clone())
                    .legend(move |p| legend_sample(p, s, colour, dashed));
                labelled = true;
            }
        }
        // Markers on short measured curves, and on isolated points of any curve.
        let marked =
            |run: &&Vec<(f64, f64)>| run.len() == 1 || (!c.dashed && n_points <= MARKER_MAX);
        if c.runs.iter().any(|r| marked(&r)) {
            let r = t.px(3.0) as i32;
            chart
                .draw_series(
                    c.runs
                        .iter()
                        .filter(marked)
                        .flatten()
                        .map(|p| Circle::new(*p, r, c.colour.filled())),
                )
                .ctx(t.id)?;
        }
        if !labelled && !c.name.is_empty() {
            // Keep every named series in the legend, and say it had nothing to show.
            let (colour, dashed, s) = (c.colour, c.dashed, t.s);
            chart
                .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())
                .ctx(t.id)?
                .label(format!("{} (no data)", c.name))
                .legend(move |p| legend_sample(p, s, colour, dashed));
        }
    }

    if points().next().is_none() && refs.is_empty() {
        no_data(&chart, t)?;
    }
    if let Some((size, corner)) = legend {
        t.legend(&mut chart, size, corner)?;
    }
    Ok(())
}
