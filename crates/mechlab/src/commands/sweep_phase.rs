//! Where a mechanism forms: each claim's pass rate over a sweep's grid.
//!
//! Every run of a sweep adds one `verdict:<id>` value per verdict to its row
//! (1 passed, 0 failed), so `summary.csv`'s mean of it at a grid point is the
//! claim's pass rate over the seeds there, with `n` the seeds it is over. A
//! sweep over two keys also draws each rate as a heatmap, the first key down
//! and the second across: `figures/phase_<id>.{json,svg,png}`.

use super::sweep::{Row, Stat, SweepError};
use crate::run::summary::Summary;
use mechlab_report::Figure;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The prefix of the row metrics that hold a run's verdicts.
pub const VERDICT: &str = "verdict:";

/// A run's row in a sweep: its summary's metrics, and `verdict:<id>` = 1 or 0
/// for each verdict (a verdict id given twice passes only if both pass).
pub fn row_metrics(s: &Summary) -> BTreeMap<String, f64> {
    let mut m = s.metrics.clone();
    for v in &s.verdicts {
        let pass = if v.pass { 1.0 } else { 0.0 };
        m.entry(format!("{VERDICT}{}", v.id))
            .and_modify(|x: &mut f64| *x = x.min(pass))
            .or_insert(pass);
    }
    m
}

/// The phase diagrams of a two-key sweep (nothing for other sweeps): one
/// heatmap of pass rates per verdict id, a grid point with no finished run
/// left empty (NaN).
pub fn figures(keys: &[String], rows: &[Row], stats: &[Stat]) -> Vec<Figure> {
    if keys.len() != 2 {
        return Vec::new();
    }
    // each key's values in plan order (the first key slowest)
    let mut sorted: Vec<&Row> = rows.iter().collect();
    sorted.sort_by_key(|r| (r.point, r.seed));
    let mut axes: [Vec<String>; 2] = Default::default();
    for r in sorted {
        for (axis, value) in axes.iter_mut().zip(&r.values) {
            if !axis.contains(value) {
                axis.push(value.clone());
            }
        }
    }
    let (n_rows, n_cols) = (axes[0].len(), axes[1].len());
    let ids: BTreeSet<&str> = stats
        .iter()
        .filter_map(|s| s.metric.strip_prefix(VERDICT))
        .collect();
    ids.into_iter()
        .map(|id| {
            let mut rate = vec![f64::NAN; n_rows * n_cols];
            let metric = format!("{VERDICT}{id}");
            for s in stats.iter().filter(|s| s.metric == metric) {
                let at = |a: usize| axes[a].iter().position(|v| *v == s.values[a]);
                if let (Some(i), Some(j)) = (at(0), at(1)) {
                    rate[i * n_cols + j] = s.mean;
                }
            }
            let title = format!("{id}: the share of seeds where it holds");
            Figure::heatmap(
                &format!("phase_{id}"),
                &title,
                &keys[1],
                &keys[0],
                n_rows,
                n_cols,
                rate,
                false,
            )
            .with_ticks(axes[0].clone(), axes[1].clone())
        })
        .collect()
}

/// Writes [`figures`] into `out/figures/`.
pub fn write(out: &Path, keys: &[String], rows: &[Row], stats: &[Stat]) -> Result<(), SweepError> {
    let figs = figures(keys, rows, stats);
    if figs.is_empty() {
        return Ok(());
    }
    let dir = out.join("figures");
    mechlab_report::write_figures(&dir, &figs).map_err(|e| SweepError::Index {
        path: dir.display().to_string(),
        reason: e.to_string(),
    })
}
