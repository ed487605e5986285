//! Scatter plots: points coloured by group (with a legend), optional text beside
//! each point (e.g. the word it stands for), and lines drawn over the points.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::axis::Axis;
use super::frame::{legend_sample, no_data, trace, Chart};
use super::{clean, palette, Area, Ctx, Theme, INK};
use crate::spec::{Point, Series};
use crate::ReportError;

/// Colour of ungrouped points when other points have groups.
const OTHER: RGBColor = RGBColor(150, 150, 150);

/// A line drawn over the points, in drawing space.
struct Overlay {
    name: String,
    dashed: bool,
    colour: RGBColor,
    pts: Vec<(f64, f64)>,
}

pub(super) fn draw<DB: DrawingBackend>(
    area: &Area<DB>,
    t: &Theme,
    x_label: &str,
    y_label: &str,
    points: &[Point],
    lines: &[Series],
) -> Result<(), ReportError> {
    // Groups in order of first appearance; `None` collects ungrouped points.
    let mut groups: Vec<Option<String>> = Vec::new();
    let mut drawable: Vec<(usize, (f64, f64), Option<String>)> = Vec::new();
    for p in points {
        let (Some(x), Some(y)) = (Axis::fwd(false, p.x), Axis::fwd(false, p.y)) else {
            continue;
        };
        let g = p.group.as_deref().map(clean);
        let gi = match groups.iter().position(|h| *h == g) {
            Some(i) => i,
            None => {
                groups.push(g);
                groups.len() - 1
            }
        };
        drawable.push((gi, (x, y), p.label.as_deref().map(clean)));
    }
    let named_groups = groups.iter().filter(|g| g.is_some()).count();
    let colour_of = |gi: usize| -> RGBColor {
        match &groups[gi] {
            None if named_groups > 0 => OTHER,
            None => palette(0),
            Some(_) => palette(groups[..gi].iter().filter(|g| g.is_some()).count()),
        }
    };
    let overlay: Vec<Overlay> = lines
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let pts =
                s.x.iter()
                    .zip(&s.y)
                    .filter_map(|(x, y)| Some((Axis::fwd(false, *x)?, Axis::fwd(false, *y)?)))
                    .collect();
            Overlay {
                name: clean(&s.name),
                dashed: s.dashed,
                colour: palette(named_groups.max(1) + i),
                pts,
            }
        })
        .collect();

    let all = || {
        drawable
            .iter()
            .map(|d| d.1)
            .chain(overlay.iter().flat_map(|o| o.pts.iter().copied()))
    };
    // Labels extend to the right of their points: leave room for them.
    let has_labels = drawable.iter().any(|d| d.2.is_some());
    let (xmin, xmax) = all().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| {
        (a.min(p.0), b.max(p.0))
    });
    let room = if has_labels && xmax > xmin {
        vec![xmax + 0.1 * (xmax - xmin)]
    } else {
        vec![]
    };
    let x = Axis::new(false, all().map(|p| p.0).chain(room), 0.06);

    let mut y = Axis::new(false, all().map(|p| p.1), 0.08);

    // Legend: a free corner, or room made above the data.
    let mut labels: Vec<String> = overlay
        .iter()
        .filter(|o| !o.name.is_empty())
        .map(|o| o.name.clone())
        .collect();
    if named_groups > 0 {
        labels.extend(
            groups
                .iter()
                .map(|g| g.clone().unwrap_or_else(|| "other".into())),
        );
    }
    let mut legend = None;
    if !labels.is_empty() {
        let size = t.legend_size(area, &labels);
        let dim = t.chart(area, &x, &y)?.plotting_area().dim_in_pixel();
        let mut occupied: Vec<(f64, f64)> = Vec::new();
        for o in &overlay {
            trace(&o.pts, &x, &y, &mut occupied);
        }
        for d in &drawable {
            let p = (x.frac(d.1 .0), y.frac(d.1 .1));
            occupied.push(p);
            if d.2.is_some() {
                occupied.push((p.0 + 0.08, p.1));
            }
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
    for Overlay {
        name,
        dashed,
        colour,
        pts,
    } in &overlay
    {
        let style = colour.stroke_width(width);
        let anno = if *dashed {
            chart.draw_series(DashedLineSeries::new(pts.clone(), dash, gap, style))
        } else {
            chart.draw_series(LineSeries::new(pts.clone(), style))
        }
        .ctx(t.id)?;
        if !name.is_empty() {
            let (colour, dashed, s) = (*colour, *dashed, t.s);
            anno.label(name.clone())
                .legend(move |p| legend_sample(p, s, colour, dashed));
        }
    }

    let r = t.px(4.5) as i32;
    let outline = WHITE.stroke_width((t.px(1.0).round() as u32).max(1));
    for (gi, g) in groups.iter().enumerate() {
        let colour = colour_of(gi);
        let members = || drawable.iter().filter(move |d| d.0 == gi);
        let anno = chart
            .draw_series(members().map(|d| {
                EmptyElement::at(d.1)
                    + Circle::new((0, 0), r, colour.mix(0.9).filled())
                    + Circle::new((0, 0), r, outline)
            }))
            .ctx(t.id)?;
        if named_groups > 0 {
            let name = g.clone().unwrap_or_else(|| "other".into());
            anno.label(name)
                .legend(move |(lx, ly)| Circle::new((lx + r * 2, ly), r, colour.mix(0.9).filled()));
        }
    }

    place_labels(&mut chart, t, area, &drawable, r)?;

    if all().next().is_none() {
        no_data(&chart, t)?;
    }
    if let Some((size, corner)) = legend {
        t.legend(&mut chart, size, corner)?;
    }
    Ok(())
}

/// Writes each point's label beside it: to the right if that space is free,
/// else left, above or below, avoiding other points and labels already placed.
fn place_labels<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    t: &Theme,
    area: &Area<DB>,
    drawable: &[(usize, (f64, f64), Option<String>)],
    r: i32,
) -> Result<(), ReportError> {
    type Box4 = (f64, f64, f64, f64);
    let overlaps = |a: &Box4, b: &Box4| a.0 < b.2 && b.0 < a.2 && a.1 < b.3 && b.1 < a.3;
    let size = 13.5;
    let style = t
        .text(size)
        .color(&INK)
        .pos(Pos::new(HPos::Left, VPos::Top));
    let (r, gap) = (f64::from(r), t.px(3.0));
    let centre = |p: &(f64, f64)| {
        let (px, py) = chart.backend_coord(p);
        (f64::from(px), f64::from(py))
    };
    let (xs, ys) = chart.plotting_area().get_pixel_range();
    let inside = |b: &Box4| {
        b.0 >= f64::from(xs.start)
            && b.2 <= f64::from(xs.end)
            && b.1 >= f64::from(ys.start)
            && b.3 <= f64::from(ys.end)
    };
    // Obstacles: every point, then each label as it is placed.
    let mut taken: Vec<Box4> = drawable
        .iter()
        .map(|d| {
            let (cx, cy) = centre(&d.1);
            (cx - r, cy - r, cx + r, cy + r)
        })
        .collect();
    let crowded = drawable.len() > 400;
    let mut placed = Vec::new();
    for d in drawable {
        let Some(text) = &d.2 else { continue };
        let (cx, cy) = centre(&d.1);
        let w = t.text_width(area, text, size);
        let h = t.px(size * 1.2);
        let candidates = [
            (cx + r + gap, cy - h / 2.0),
            (cx - r - gap - w, cy - h / 2.0),
            (cx - w / 2.0, cy - r - gap - h),
            (cx - w / 2.0, cy + r + gap),
            (cx + r, cy - r - h),
            (cx + r, cy + r),
        ];
        let boxes = candidates.map(|(x0, y0)| (x0, y0, x0 + w, y0 + h));
        let free = |b: &Box4| {
            inside(b)
                && !taken.iter().any(|o| {
                    // A point's own marker is not in its way.
                    overlaps(b, o) && !(o.0 == cx - r && o.1 == cy - r)
                })
        };
        let chosen = if crowded {
            boxes[0]
        } else {
            boxes.iter().copied().find(free).unwrap_or(boxes[0])
        };
        taken.push(chosen);
        let offset = (
            (chosen.0 - cx).round() as i32,
            (chosen.1 - cy).round() as i32,
        );
        placed.push((d.1, text.clone(), offset, w as i32, h as i32));
    }
    chart
        .draw_series(placed.into_iter().map(|(p, text, offset, w, h)| {
            // A faint white backing keeps words legible over lines.
            let back = Rectangle::new(
                [(offset.0 - 1, offset.1), (offset.0 + w + 1, offset.1 + h)],
                WHITE.mix(0.7).filled(),
            );
            EmptyElement::at(p) + back + Text::new(text, offset, style.clone())
        }))
        .ctx(t.id)?;
    Ok(())
}
