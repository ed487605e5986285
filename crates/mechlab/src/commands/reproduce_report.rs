//! The combined report of `mechlab reproduce`: `report.html`, `report.md` and
//! `summary.json` in its folder. It opens with the claims per paper (held,
//! failed with the reason, findings with both rates), then one row per claim and
//! setting (its rate, rule and per-seed values), and keeps each run's table, its
//! verdicts and its figures folded below.

use super::report;
use super::reproduce::Reproduction;
use crate::claims::{Judgement, Status};
use crate::experiment::Registry;
use crate::run::{atomic, io_err, RunError};
use mechlab_report::{Block, Headline, Report, Section};
use std::path::Path;

/// The combined report and `summary.json`; `total` is the wall time of all the
/// runs, `jobs` of them at a time (less than the sum of their times when more
/// than one ran side by side).
pub(super) fn write_combined(
    reg: &Registry,
    out: &Path,
    r: &Reproduction,
    total: f64,
    jobs: usize,
) -> Result<(), RunError> {
    std::fs::create_dir_all(out).map_err(io_err(out))?;
    let (outcomes, judged) = (&r.outcomes, &r.claims);
    let count = |st: Status| judged.iter().filter(|j| j.status == st).count();
    let (held, findings, failed) = (
        count(Status::Held),
        count(Status::Finding),
        count(Status::Failed),
    );
    let settings = {
        let mut v: Vec<&str> = outcomes.iter().map(|o| o.setting.as_str()).collect();
        v.dedup();
        v.len()
    };
    let headline = Headline {
        pass: failed == 0,
        badge: if failed == 0 {
            format!("{} / {}", held + findings, judged.len())
        } else {
            format!("{failed} FAILED")
        },
        text: format!(
            "{}claims pass their rule over seeds ({findings} of them {}: failing on some \
             seeds as the authors' code does), {failed} failed; {} runs over {settings} \
             settings.",
            if failed == 0 {
                String::new()
            } else {
                format!("{} of {} ", held + findings, judged.len())
            },
            if findings == 1 {
                "a finding"
            } else {
                "findings"
            },
            outcomes.len(),
        ),
    };
    let mut sections = vec![
        Section::new("Claims by paper").table(
            [
                "paper",
                "held",
                "failed, and why",
                "findings, with their evidence",
            ]
            .map(String::from)
            .to_vec(),
            paper_rows(judged),
        ),
        Section::new("Every claim over its seeds")
            .markdown(
                "One row per claim and setting: how many seeds it held on, the rule it is \
                 judged by, and each seed's value in seed order (a star marks a seed where \
                 it failed) with the bar.",
            )
            .table(
                [
                    "claim",
                    "setting",
                    "held",
                    "rule",
                    "per seed",
                    "median [range]",
                    "status",
                ]
                .map(String::from)
                .to_vec(),
                judged.iter().map(claim_row).collect(),
            ),
    ];
    let mut runs_rows = Vec::new();
    let mut verdict_blocks = Vec::new();
    let mut json_runs = Vec::new();
    for o in outcomes {
        let (status, n_pass, n) = match &o.result {
            Ok(s) => {
                verdict_blocks.push(Block::Markdown(format!("**{}** ({})", o.name, o.paper)));
                verdict_blocks.push(Block::Verdicts(o.verdicts(reg)));
                if !s.measurements.is_empty() {
                    verdict_blocks.push(report::measurements_table(&s.measurements));
                }
                let np = s.verdicts.iter().filter(|v| v.pass).count();
                ("ok".to_string(), np, s.verdicts.len())
            }
            Err(e) => {
                verdict_blocks.push(Block::Markdown(format!(
                    "**{}** ({}): error: {e}",
                    o.name, o.paper
                )));
                (format!("error: {e}"), 0, 1)
            }
        };
        runs_rows.push(vec![
            o.paper.clone(),
            format!("[{0}]({0}/report.html)", o.name),
            o.seed.to_string(),
            format!("{:.1} s", o.seconds),
            format!("{n_pass}/{n}"),
            status.clone(),
        ]);
        json_runs.push(serde_json::json!({
            "paper": o.paper, "preset": o.name, "setting": o.setting, "seed": o.seed,
            "seconds": o.seconds, "status": status, "summary": o.result.as_ref().ok(),
        }));
    }
    sections.push(
        Section::new(&format!("Runs ({total:.1} s in total)"))
            .table(
                ["paper", "run", "seed", "time", "verdicts", "status"]
                    .map(String::from)
                    .to_vec(),
                runs_rows,
            )
            .fold(),
    );
    sections.push(Section {
        title: "Each run's verdicts".into(),
        blocks: verdict_blocks,
        folded: true,
    });
    // Each setting's first seed's figures, under the run's own heading, ids
    // prefixed by the run; the other seeds' are in their own reports.
    let mut figures = Vec::new();
    for o in outcomes
        .iter()
        .filter(|o| o.result.is_ok() && o.name == o.setting)
    {
        if let Ok((_, figs)) = report::document(reg, &o.dir) {
            let mut blocks = Vec::new();
            for mut f in figs {
                f.id = format!("{}/figures/{}", o.name, f.id);
                // A viewer's activation file, as seen from the combined report.
                if let mechlab_report::Plot::Attention {
                    source: Some(src), ..
                } = &mut f.plot
                {
                    src.file = format!("{}/{}", o.name, src.file);
                }
                blocks.push(Block::Figure(f.id.clone()));
                figures.push(f);
            }
            sections.push(Section {
                title: format!("Figures: {} ({})", o.name, o.paper),
                blocks,
                folded: true,
            });
        }
    }
    let report = Report {
        title: "mechlab reproduce".into(),
        meta: vec![
            ("runs".into(), outcomes.len().to_string()),
            ("total time".into(), format!("{total:.1} s")),
            ("runs at a time".into(), jobs.to_string()),
        ],
        headline: Some(headline),
        sections,
    };
    report::write_report(out, &report, &figures, ".")?;
    let p = out.join("summary.json");
    let json = serde_json::json!({
        "total_seconds": total, "jobs": jobs,
        "claims_held": held, "claims_findings": findings, "claims_failed": failed,
        "claims": judged, "runs": json_runs,
    });
    atomic::write(
        &p,
        serde_json::to_string_pretty(&json)
            .expect("serialises")
            .as_bytes(),
    )
    .map_err(io_err(&p))
}

/// One row per paper: its claims held, failed (each with its reason) and findings
/// (each with the authors' rate beside ours and where it is written up).
fn paper_rows(judged: &[Judgement]) -> Vec<Vec<String>> {
    let mut papers: Vec<&str> = judged.iter().map(|j| j.paper.as_str()).collect();
    papers.dedup();
    papers
        .into_iter()
        .map(|p| {
            let mine: Vec<&Judgement> = judged.iter().filter(|j| j.paper == p).collect();
            let list = |st: Status| -> String {
                let v: Vec<String> = mine
                    .iter()
                    .filter(|j| j.status == st)
                    .map(|j| {
                        let doc = if j.doc.is_empty() {
                            String::new()
                        } else {
                            format!("; {}", j.doc)
                        };
                        // A failure with its reason; a finding with both rates.
                        let why = match (j.status, j.authors, j.p_value) {
                            (Status::Finding, Some([a, b]), Some(p)) => format!(
                                "{}/{} seeds, the authors' code {a}/{b} (p = {p:.2})",
                                j.passed, j.seeds
                            ),
                            _ => j.reason.clone(),
                        };
                        format!("`{}` ({}): {why}{doc}", j.id, j.setting)
                    })
                    .collect();
                if v.is_empty() {
                    "none".into()
                } else {
                    v.join("; ")
                }
            };
            let held = mine.iter().filter(|j| j.status == Status::Held).count();
            vec![
                p.to_string(),
                format!("{held}/{}", mine.len()),
                list(Status::Failed),
                list(Status::Finding),
            ]
        })
        .collect()
}

fn claim_row(j: &Judgement) -> Vec<String> {
    let spread = j
        .spread
        .map(|[m, lo, hi]| format!("{} [{}, {}]", num(m), num(lo), num(hi)))
        .unwrap_or_default();
    let status = match j.status {
        Status::Held => "held".to_string(),
        Status::Finding => "**finding**".to_string(),
        Status::Failed => format!("**FAILED**: {}", j.reason),
    };
    vec![
        format!("`{}`", j.id),
        j.setting.clone(),
        format!("{}/{}", j.passed, j.seeds),
        j.rule.clone(),
        j.strip(),
        spread,
        status,
    ]
}

fn num(x: f64) -> String {
    crate::claims::short(x)
}
