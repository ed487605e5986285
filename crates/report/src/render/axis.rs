//! Numeric axes for line and scatter plots: range, round ticks and tick labels.
//!
//! A log axis is drawn in log10 space (the data are transformed, the labels show
//! the original values), so one linear coordinate type serves all four
//! combinations of log and linear axes.

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};

/// The coordinate type of line and scatter plots (log axes are drawn in log10 space).
pub(super) type Coord = Axis;

/// Largest magnitude drawn; beyond it a value counts as non-finite (keeps the
/// axis arithmetic finite).
pub(super) const LIMIT: f64 = 1e100;

/// One numeric axis: its range and ticks, in drawing space (log10 of the value
/// on a log axis). Also the plotters coordinate of that axis.
#[derive(Clone)]
pub(super) struct Axis {
    pub log: bool,
    pub lo: f64,
    pub hi: f64,
    pub ticks: Vec<f64>,
    light: Vec<f64>,
    /// Tick spacing in drawing space, for label precision.
    step: f64,
}

impl Axis {
    /// A value in drawing space, or `None` if it cannot be drawn on this axis.
    pub fn fwd(log: bool, v: f64) -> Option<f64> {
        if !v.is_finite() || v.abs() > LIMIT {
            None
        } else if log {
            (v > 1.0 / LIMIT).then(|| v.log10())
        } else {
            Some(v)
        }
    }

    /// An axis covering `vals` (already in drawing space), padded by `pad` of its span.
    pub fn new(log: bool, vals: impl Iterator<Item = f64>, pad: f64) -> Axis {
        let (mut lo, mut hi) = vals.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
            (a.min(v), b.max(v))
        });
        if lo > hi {
            (lo, hi) = (0.0, 1.0);
        }
        let mag = lo.abs().max(hi.abs());
        if hi - lo <= mag * 1e-9 || hi - lo < 1e-200 {
            let d = if mag > 1e-200 { mag * 0.1 } else { 1.0 };
            let d = if log { 0.5 } else { d };
            (lo, hi) = (lo - d, hi + d);
        } else {
            let d = (hi - lo) * pad;
            (lo, hi) = (lo - d, hi + d);
        }
        Axis::span(log, lo, hi)
    }

    /// An axis over exactly `[lo, hi]` (drawing space), with its ticks.
    fn span(log: bool, lo: f64, hi: f64) -> Axis {
        let (ticks, light, step) = if log {
            log_ticks(lo, hi)
        } else {
            let (t, step) = linear_ticks(lo, hi, 7);
            (t, Vec::new(), step)
        };
        Axis {
            log,
            lo,
            hi,
            ticks,
            light,
            step,
        }
    }

    /// The same axis, extended upwards so that its current range fills only the
    /// bottom `1 - frac` of it (room for a legend above the data).
    pub fn extend_top(&self, frac: f64) -> Axis {
        let frac = frac.clamp(0.0, 0.9);
        Axis::span(
            self.log,
            self.lo,
            self.lo + (self.hi - self.lo) / (1.0 - frac),
        )
    }

    pub fn coord(&self) -> Coord {
        self.clone()
    }

    /// The tick label of drawing-space value `t`.
    pub fn label(&self, t: f64) -> String {
        if self.log {
            fmt_num(10f64.powf(t), 0.0)
        } else {
            fmt_num(t, self.step)
        }
    }

    /// Where `v` falls in the axis, 0 at `lo` and 1 at `hi`.
    pub fn frac(&self, t: f64) -> f64 {
        (t - self.lo) / (self.hi - self.lo)
    }
}

impl Ranged for Axis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        // Clamped so that far-off values cannot overflow pixel arithmetic.
        let f = self.frac(*v).clamp(-4.0, 5.0);
        let f = if f.is_nan() { 0.0 } else { f };
        limit.0 + (f64::from(limit.1 - limit.0) * f).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            self.light.clone()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.lo..self.hi
    }
}

/// About `target` round ticks (1, 2, 2.5, 5 times a power of ten) in `[lo, hi]`.
pub(super) fn linear_ticks(lo: f64, hi: f64, target: usize) -> (Vec<f64>, f64) {
    let raw = (hi - lo) / target as f64;
    let p = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * p);
    let first = (lo / step).ceil();
    let ticks = (0..50)
        .map(|i| (first + f64::from(i)) * step)
        .take_while(|t| *t <= hi + step * 1e-9)
        .map(|t| if t.abs() < step * 1e-9 { 0.0 } else { t })
        .collect();
    (ticks, step)
}

/// Log-axis ticks in log10 space: decades, or 1-2-5 steps on a short range.
fn log_ticks(lo: f64, hi: f64) -> (Vec<f64>, Vec<f64>, f64) {
    let (d0, d1) = (lo.floor() as i64, hi.ceil() as i64);
    let in_range = |t: &f64| *t >= lo - 1e-12 && *t <= hi + 1e-12;
    let decades: Vec<f64> = (d0..=d1).map(|d| d as f64).filter(in_range).collect();
    let with = |ms: &[f64]| -> Vec<f64> {
        (d0..=d1)
            .flat_map(|d| ms.iter().map(move |m| d as f64 + m.log10()))
            .filter(in_range)
            .collect()
    };
    let light = if d1 - d0 <= 8 {
        with(&[2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0])
    } else {
        Vec::new()
    };
    if decades.len() >= 2 {
        // Thin out decades on very wide ranges.
        let every = decades.len().div_ceil(8);
        let ticks = decades.into_iter().step_by(every).collect();
        return (ticks, light, every as f64);
    }
    for ms in [
        &[1.0, 2.0, 5.0][..],
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
    ] {
        let t = with(ms);
        if t.len() >= 3 {
            return (t, Vec::new(), 0.0);
        }
    }
    // Less than a factor of two: round values, placed in log space.
    let (vlo, vhi) = (10f64.powf(lo), 10f64.powf(hi));
    let (t, _) = linear_ticks(vlo, vhi, 5);
    let t = t.into_iter().filter(|v| *v > 0.0).map(f64::log10).collect();
    (t, Vec::new(), 0.0)
}

/// A compact number: `step` (tick spacing, 0 if unknown) sets the precision.
pub(super) fn fmt_num(v: f64, step: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    if v == 0.0 {
        return "0".into();
    }
    let a = v.abs();
    if !(1e-3..1e5).contains(&a) {
        let s = format!("{v:.2e}");
        // 1.00e-4 -> 1e-4, 2.50e6 -> 2.5e6
        let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
        let m = m.trim_end_matches('0').trim_end_matches('.');
        return format!("{m}e{e}");
    }
    let decimals = if step > 0.0 {
        (-(step.log10().floor()) as i32 + 1).clamp(0, 6)
    } else {
        (3 - a.log10().floor() as i32).clamp(0, 6)
    } as usize;
    let s = format!("{v:.decimals$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    if s == "-0" {
        "0".into()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_compact() {
        assert_eq!(fmt_num(0.5, 0.1), "0.5");
        assert_eq!(fmt_num(2.0, 1.0), "2");
        assert_eq!(fmt_num(1e-4, 0.0), "1e-4");
        assert_eq!(fmt_num(2.5e6, 0.0), "2.5e6");
        assert_eq!(fmt_num(-0.0001, 0.1), "-1e-4");
        assert_eq!(fmt_num(1234.4, 0.0), "1234");
    }

    #[test]
    fn ticks_are_round_and_inside() {
        let (t, step) = linear_ticks(0.03, 0.97, 7);
        assert_eq!(step, 0.2);
        assert!(t.iter().all(|v| (0.03..=0.97).contains(v)));
        let (t, _, _) = log_ticks(0.0, 3.0);
        assert_eq!(t, vec![0.0, 1.0, 2.0, 3.0]);
        // A narrow log range still gets several ticks.
        let (t, _, _) = log_ticks(0.3, 0.9);
        assert!(t.len() >= 2, "{t:?}");
    }

    #[test]
    fn degenerate_ranges_widen() {
        let a = Axis::new(false, [3.0, 3.0].into_iter(), 0.05);
        assert!(a.lo < 3.0 && a.hi > 3.0);
        let a = Axis::new(true, std::iter::empty(), 0.05);
        assert!(a.lo < a.hi && !a.ticks.is_empty());
    }
}
