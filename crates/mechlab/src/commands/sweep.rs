//! `mechlab sweep`: a grid of overrides times a list of seeds, run in parallel.
//!
//! Runs go to `<out>/runs/p<point>-s<seed>/`; `index.csv` has one row per run (its
//! grid values, status and every summary metric) and `summary.csv` / `summary.json`
//! give each metric's mean, std (sample), min and max over the seeds of each grid
//! point, with `n` (the runs averaged) and `missing` (the point's runs without a
//! value), and `summary.json` counts the planned, ok, failed and missing runs.
//! `--shard i/n` runs only the runs whose index is `i` modulo `n` (`i` from 0), so
//! a cluster job array can split a sweep; [`merge`] combines the shards' folders
//! into the summary an unsharded sweep would have written. The folder records its
//! sweep in `sweep.json`; the same sweep again continues it and another is
//! refused (see [`super::sweep_folder`]). `--slurm` (see
//! [`super::cluster`] and [`super::slurm`]) does that split on a Slurm cluster.
//!
//! ```
//! use mechlab::commands::sweep::{parse_grid, parse_seeds, parse_shard};
//! assert_eq!(parse_grid("model.parents=[1,2],[1,3]").unwrap().1, vec!["[1,2]", "[1,3]"]);
//! assert_eq!(parse_seeds("0..3").unwrap(), vec![0, 1, 2]);
//! assert_eq!(parse_shard("1/4").unwrap(), (1, 4));
//! ```

use super::cluster::Writer;
use super::{resolve, sweep_folder, ExperimentError, Resolved};
use crate::experiment::Registry;
use crate::run::progress::Progress;
use crate::run::{atomic, io_err, RunError};
use rayon::prelude::*;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Why a sweep could not run or be summarised.
#[derive(Debug, Error)]
pub enum SweepError {
    #[error("{0}")]
    Arg(String),
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error(transparent)]
    Experiment(#[from] ExperimentError),
    #[error("{path}: {reason}")]
    Index { path: String, reason: String },
    /// The output folder holds another sweep (or unrecorded results).
    #[error("{path}: {reason}")]
    Folder { path: String, reason: String },
}

/// Splits `key=v1,v2,...` (commas inside brackets or quotes do not split).
pub fn parse_grid(arg: &str) -> Result<(String, Vec<String>), SweepError> {
    let (k, vals) = arg
        .split_once('=')
        .ok_or_else(|| SweepError::Arg(format!("--grid {arg}: expected key=v1,v2,...")))?;
    let mut out = Vec::new();
    let (mut depth, mut quoted, mut cur) = (0i32, false, String::new());
    for ch in vals.chars() {
        match ch {
            '"' => quoted = !quoted,
            '[' if !quoted => depth += 1,
            ']' if !quoted => depth -= 1,
            ',' if !quoted && depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(ch);
    }
    out.push(cur);
    let out: Vec<String> = out.into_iter().map(|v| v.trim().to_string()).collect();
    if k.trim().is_empty() || out.iter().any(|v| v.is_empty()) {
        return Err(SweepError::Arg(format!("--grid {arg}: empty key or value")));
    }
    Ok((k.trim().to_string(), out))
}

/// `a..b` (b excluded) or `a,b,c`.
pub fn parse_seeds(arg: &str) -> Result<Vec<u64>, SweepError> {
    let bad = || SweepError::Arg(format!("--seeds {arg}: expected a..b or a,b,c"));
    if let Some((a, b)) = arg.split_once("..") {
        let (a, b): (u64, u64) = (
            a.trim().parse().map_err(|_| bad())?,
            b.trim().parse().map_err(|_| bad())?,
        );
        if a >= b {
            return Err(bad());
        }
        return Ok((a..b).collect());
    }
    arg.split(',')
        .map(|s| s.trim().parse().map_err(|_| bad()))
        .collect()
}

/// `i/n` with `0 <= i < n`.
pub fn parse_shard(arg: &str) -> Result<(usize, usize), SweepError> {
    let bad = || SweepError::Arg(format!("--shard {arg}: expected i/n with 0 <= i < n"));
    let (i, n) = arg.split_once('/').ok_or_else(bad)?;
    let (i, n): (usize, usize) = (
        i.trim().parse().map_err(|_| bad())?,
        n.trim().parse().map_err(|_| bad())?,
    );
    if n == 0 || i >= n {
        return Err(bad());
    }
    Ok((i, n))
}

/// What to sweep.
pub struct SweepSpec {
    pub source: String,
    pub overrides: Vec<String>,
    pub grid: Vec<(String, Vec<String>)>,
    pub seeds: Vec<u64>,
    pub shard: Option<(usize, usize)>,
}

/// One row of `index.csv`.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub point: usize,
    pub seed: u64,
    pub values: Vec<String>,
    pub status: String,
    pub metrics: BTreeMap<String, f64>,
}

impl Row {
    fn id(&self) -> String {
        format!("p{}-s{}", self.point, self.seed)
    }
}

/// Every grid point (the cartesian product, first key slowest).
fn points(grid: &[(String, Vec<String>)]) -> Vec<Vec<String>> {
    grid.iter().fold(vec![Vec::new()], |acc, (_, vals)| {
        acc.iter()
            .flat_map(|p| {
                vals.iter().map(move |v| {
                    let mut q = p.clone();
                    q.push(v.clone());
                    q
                })
            })
            .collect()
    })
}

/// Every run of a sweep as `(grid point, grid values, seed)`, in the order whose
/// index `--shard i/n` takes modulo `n`: points slowest, seeds fastest.
pub fn plan(grid: &[(String, Vec<String>)], seeds: &[u64]) -> Vec<(usize, Vec<String>, u64)> {
    let mut plan = Vec::new();
    for (pi, vals) in points(grid).into_iter().enumerate() {
        for &seed in seeds {
            plan.push((pi, vals.clone(), seed));
        }
    }
    plan
}

/// The resolved config of one run: the sweep's overrides, then its grid values.
pub(crate) fn resolve_run(
    reg: &Registry,
    spec: &SweepSpec,
    keys: &[String],
    vals: &[String],
    seed: u64,
) -> Result<Resolved, SweepError> {
    let mut ov = spec.overrides.clone();
    ov.extend(keys.iter().zip(vals).map(|(k, v)| format!("{k}={v}")));
    Ok(resolve(reg, &spec.source, &ov, Some(seed))?)
}

/// Runs the sweep into `out` with `jobs` runs at a time; returns its rows. A
/// folder that already holds this sweep is continued (see [`sweep_folder`]).
pub fn sweep(
    reg: &Registry,
    spec: &SweepSpec,
    out: &Path,
    jobs: usize,
    command: &str,
) -> Result<Vec<Row>, SweepError> {
    sweep_with_progress(reg, spec, out, jobs, command, None, false)
}

/// [`sweep`], counting finished runs into `progress` (which replaces the
/// terminal bar); `replace` starts the folder over when it holds another sweep.
pub fn sweep_with_progress(
    reg: &Registry,
    spec: &SweepSpec,
    out: &Path,
    jobs: usize,
    command: &str,
    progress: Option<&Progress>,
    replace: bool,
) -> Result<Vec<Row>, SweepError> {
    let writer = Writer {
        binary: std::env::current_exe()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        version: env!("CARGO_PKG_VERSION").to_string(),
    };
    let plan = sweep_folder::open(reg, spec, out, 1, writer, replace)?;
    let (spec, keys, runs) = (plan.spec(), plan.keys(), plan.runs());
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(jobs.max(1))
        .build()
        .map_err(|e| SweepError::Arg(format!("thread pool: {e}")))?;
    let bar = match progress {
        Some(p) => {
            p.set_total(runs.len() as u64);
            indicatif::ProgressBar::hidden()
        }
        None => indicatif::ProgressBar::new(runs.len() as u64),
    };
    let rows: Vec<Row> = pool.install(|| {
        runs.par_iter()
            .map(|r| {
                let res = sweep_folder::run_or_resume(reg, &spec, &keys, r, &r.dir(out), command);
                bar.inc(1);
                if let Some(p) = progress {
                    p.inc();
                }
                let (status, metrics) = match res {
                    Ok(m) => ("ok".to_string(), m),
                    Err(e) => (format!("error: {e}"), BTreeMap::new()),
                };
                Row {
                    point: r.point,
                    seed: r.seed,
                    values: r.values.clone(),
                    status,
                    metrics,
                }
            })
            .collect()
    });
    bar.finish_and_clear();
    write_all(out, &keys, &rows)?;
    Ok(rows)
}

/// Writes `index.csv`, `summary.csv` and `summary.json` for `rows` (every planned
/// run, whatever its status, so that the summary can count the missing ones).
pub(crate) fn write_all(out: &Path, keys: &[String], rows: &[Row]) -> Result<(), SweepError> {
    let mut rows = rows.to_vec();
    rows.sort_by_key(|r| (r.point, r.seed));
    let names: BTreeSet<String> = rows
        .iter()
        .flat_map(|r| r.metrics.keys().cloned())
        .collect();
    let mut w = csv::Writer::from_writer(Vec::new());
    let mut header = vec!["run".to_string(), "point".into(), "seed".into()];
    header.extend(keys.iter().map(|k| format!("grid:{k}")));
    header.push("status".into());
    header.extend(names.iter().cloned());
    let csv_err = |e: csv::Error| SweepError::Index {
        path: out.join("index.csv").display().to_string(),
        reason: e.to_string(),
    };
    w.write_record(&header).map_err(csv_err)?;
    for r in &rows {
        let mut rec = vec![r.id(), r.point.to_string(), r.seed.to_string()];
        rec.extend(r.values.iter().cloned());
        rec.push(r.status.clone());
        rec.extend(names.iter().map(|n| {
            r.metrics
                .get(n)
                .map(|v| format!("{v:?}"))
                .unwrap_or_default()
        }));
        w.write_record(&rec).map_err(csv_err)?;
    }
    let bytes = w.into_inner().map_err(|e| SweepError::Arg(e.to_string()))?;
    let p = out.join("index.csv");
    atomic::write(&p, &bytes).map_err(io_err(&p))?;

    let stats = summarize(keys, &rows);
    let mut w = csv::Writer::from_writer(Vec::new());
    let mut header: Vec<String> = keys.iter().map(|k| format!("grid:{k}")).collect();
    header.extend(["metric", "n", "mean", "std", "min", "max", "missing"].map(String::from));
    w.write_record(&header).map_err(csv_err)?;
    for s in &stats {
        let mut rec = s.values.clone();
        rec.push(s.metric.clone());
        rec.push(s.n.to_string());
        rec.extend([s.mean, s.std, s.min, s.max].map(|v| format!("{v:?}")));
        rec.push(s.missing.to_string());
        w.write_record(&rec).map_err(csv_err)?;
    }
    let bytes = w.into_inner().map_err(|e| SweepError::Arg(e.to_string()))?;
    let p = out.join("summary.csv");
    atomic::write(&p, &bytes).map_err(io_err(&p))?;
    let p = out.join("summary.json");
    let json = serde_json::json!({ "grid": keys, "runs": RunCounts::of(&rows), "stats": stats });
    atomic::write(
        &p,
        serde_json::to_string_pretty(&json)
            .expect("serialises")
            .as_bytes(),
    )
    .map_err(io_err(&p))?;
    super::sweep_phase::write(out, keys, &rows, &stats)
}

/// How many of a sweep's planned runs finished (`ok`), failed (`error: ...`) or
/// left no result (`missing`: their task was killed or never ran).
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
pub struct RunCounts {
    pub planned: usize,
    pub ok: usize,
    pub failed: usize,
    pub missing: usize,
}

impl RunCounts {
    pub fn of(rows: &[Row]) -> Self {
        let ok = rows.iter().filter(|r| r.status == "ok").count();
        let missing = rows.iter().filter(|r| r.status == MISSING).count();
        RunCounts {
            planned: rows.len(),
            ok,
            failed: rows.len() - ok - missing,
            missing,
        }
    }
}

/// The status of a planned run that left neither a result nor an error.
pub const MISSING: &str = "missing";

/// One metric's statistics over the seeds of one grid point.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Stat {
    pub point: usize,
    pub values: Vec<String>,
    pub metric: String,
    /// Runs the statistics are over.
    pub n: usize,
    /// Planned runs of this grid point that gave no value (failed, missing, or
    /// without this metric): a mean over fewer seeds says so here.
    pub missing: usize,
    pub mean: f64,
    pub std: f64,
    pub min: f64,
    pub max: f64,
}

/// Mean, sample standard deviation, min and max of every metric per grid point,
/// over the runs whose status is `ok`, in (point, metric) order; `missing` counts
/// the point's other rows.
pub fn summarize(_keys: &[String], rows: &[Row]) -> Vec<Stat> {
    let mut by: BTreeMap<(usize, String), (Vec<String>, Vec<f64>)> = BTreeMap::new();
    let mut planned: BTreeMap<usize, usize> = BTreeMap::new();
    for r in rows {
        *planned.entry(r.point).or_default() += 1;
    }
    let mut sorted = rows.to_vec();
    sorted.sort_by_key(|r| (r.point, r.seed));
    for r in sorted.iter().filter(|r| r.status == "ok") {
        for (m, v) in &r.metrics {
            by.entry((r.point, m.clone()))
                .or_insert_with(|| (r.values.clone(), Vec::new()))
                .1
                .push(*v);
        }
    }
    by.into_iter()
        .map(|((point, metric), (values, xs))| {
            let n = xs.len();
            let mean = xs.iter().sum::<f64>() / n as f64;
            let std = if n > 1 {
                (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
            } else {
                0.0
            };
            Stat {
                missing: planned[&point] - n,
                point,
                values,
                metric,
                n,
                mean,
                std,
                min: xs.iter().copied().fold(f64::INFINITY, f64::min),
                max: xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            }
        })
        .collect()
}

/// Reads a sweep folder's `index.csv` back: (grid keys, rows).
pub fn read_index(dir: &Path) -> Result<(Vec<String>, Vec<Row>), SweepError> {
    let path = dir.join("index.csv");
    let err = |reason: String| SweepError::Index {
        path: path.display().to_string(),
        reason,
    };
    let mut r = csv::Reader::from_path(&path).map_err(|e| err(e.to_string()))?;
    let header: Vec<String> = r
        .headers()
        .map_err(|e| err(e.to_string()))?
        .iter()
        .map(String::from)
        .collect();
    let keys: Vec<String> = header
        .iter()
        .filter_map(|h| h.strip_prefix("grid:").map(String::from))
        .collect();
    let status_col = header
        .iter()
        .position(|h| h == "status")
        .ok_or_else(|| err("no status column".into()))?;
    let mut rows = Vec::new();
    for (i, rec) in r.records().enumerate() {
        let rec = rec.map_err(|e| err(format!("row {}: {e}", i + 2)))?;
        let field = |j: usize| rec.get(j).unwrap_or_default().to_string();
        let num = |j: usize| -> Result<u64, SweepError> {
            field(j)
                .parse()
                .map_err(|_| err(format!("row {}: bad number in column {}", i + 2, header[j])))
        };
        let mut metrics = BTreeMap::new();
        for (j, name) in header.iter().enumerate().skip(status_col + 1) {
            let f = field(j);
            if !f.is_empty() {
                let v: f64 = f
                    .parse()
                    .map_err(|_| err(format!("row {}: bad value `{f}` for {name}", i + 2)))?;
                metrics.insert(name.clone(), v);
            }
        }
        rows.push(Row {
            point: num(1)? as usize,
            seed: num(2)?,
            values: (3..3 + keys.len()).map(field).collect(),
            status: field(status_col),
            metrics,
        });
    }
    Ok((keys, rows))
}

/// Merges the index files of several sweep folders (shards) into `out`.
pub fn merge(dirs: &[PathBuf], out: &Path) -> Result<Vec<Row>, SweepError> {
    let mut keys: Option<Vec<String>> = None;
    let mut rows: BTreeMap<(usize, u64), Row> = BTreeMap::new();
    for d in dirs {
        let (k, rs) = read_index(d)?;
        if keys.as_ref().is_some_and(|k0| *k0 != k) {
            return Err(SweepError::Index {
                path: d.join("index.csv").display().to_string(),
                reason: "its grid keys differ from the other shards'".into(),
            });
        }
        keys = Some(k);
        for r in rs {
            rows.insert((r.point, r.seed), r);
        }
    }
    let rows: Vec<Row> = rows.into_values().collect();
    std::fs::create_dir_all(out).map_err(io_err(out))?;
    write_all(out, &keys.unwrap_or_default(), &rows)?;
    Ok(rows)
}
