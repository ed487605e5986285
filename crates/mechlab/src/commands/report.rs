//! `mechlab report <run>`: rebuilds a run's figures and reports from its folder.
//!
//! Reads only the folder: `config.toml`, `summary.json`, `figures/*.json`,
//! `notes.md` and `timing.json`; renders each figure to SVG and PNG, and writes
//! `report.html` (self-contained) and `report.md`.

use crate::experiment::Registry;
use crate::run::{atomic, io_err, read_origin, read_summary, RunError};
use mechlab_report::{Block, Report, Section};
use std::path::Path;

fn report_err(path: &Path) -> impl FnOnce(mechlab_report::ReportError) -> RunError + '_ {
    move |e| RunError::Folder {
        path: path.display().to_string(),
        reason: e.to_string(),
    }
}

/// The rules a run's claims are judged by: its paper's, in the run's setting
/// (its `config.toml`); none when the folder or its paper is not known.
pub fn claim_rules(reg: &Registry, dir: &Path) -> &'static [crate::claims::Claim] {
    let Some(table) = std::fs::read_to_string(dir.join("config.toml"))
        .ok()
        .and_then(|t| toml::from_str::<toml::Table>(&t).ok())
    else {
        return &[];
    };
    table
        .get("experiment")
        .and_then(|e| e.as_str())
        .and_then(|e| reg.find(e))
        .map_or(&[], |e| e.claims(&table))
}

/// The run's report document (also used by the combined reproduce report).
pub fn document(
    reg: &Registry,
    dir: &Path,
) -> Result<(Report, Vec<mechlab_report::Figure>), RunError> {
    if !dir.join("summary.json").exists() && dir.join("checkpoints").is_dir() {
        return Err(RunError::Folder {
            path: dir.display().to_string(),
            reason: format!(
                "the run has not finished (no summary.json yet); continue it with \
                 `mechlab resume {}`, which writes the report when it ends",
                dir.display()
            ),
        });
    }
    let summary = read_summary(dir)?;
    let fig_dir = dir.join("figures");
    let figures = if fig_dir.exists() {
        mechlab_report::load_figures(&fig_dir).map_err(report_err(&fig_dir))?
    } else {
        Vec::new()
    };
    let cfg_path = dir.join("config.toml");
    let config_text = std::fs::read_to_string(&cfg_path).map_err(io_err(&cfg_path))?;
    let command = read_origin(dir)
        .map(|o| o.command.join(" "))
        .unwrap_or_default();
    let description = toml::from_str::<toml::Table>(&config_text)
        .ok()
        .and_then(|t| {
            t.get("description")
                .and_then(|d| d.as_str())
                .map(String::from)
        })
        .unwrap_or_default();
    let seconds = std::fs::read_to_string(dir.join("timing.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v["seconds"].as_f64());
    let citation = reg
        .find(&summary.experiment)
        .map(|e| e.citation())
        .unwrap_or("");

    let mut meta = vec![
        ("experiment".to_string(), summary.experiment.clone()),
        ("seed".to_string(), summary.seed.to_string()),
    ];
    if !citation.is_empty() {
        meta.push(("paper".into(), citation.to_string()));
    }
    if let Some(s) = seconds {
        meta.push(("wall time".into(), format!("{s:.1} s")));
    }
    if !command.is_empty() {
        meta.push(("command".into(), command));
    }
    let passed = summary.verdicts.iter().filter(|v| v.pass).count();
    // A failure the claim's rule allows (the authors' code fails it on some seeds
    // too) is marked as `reproduce` marks it.
    let rules = claim_rules(reg, dir);
    let mut verdicts = summary.verdicts.clone();
    crate::claims::annotate(rules, &mut verdicts);
    let mut sections = vec![Section {
        title: format!("Verdicts ({passed}/{} pass)", summary.verdicts.len()),
        blocks: vec![Block::Verdicts(verdicts)],
        folded: false,
    }];
    if !summary.measurements.is_empty() {
        sections.push(Section {
            folded: false,
            title: "Measurements (no prediction to judge them by)".into(),
            blocks: vec![measurements_table(&summary.measurements)],
        });
    }
    if let Ok(notes) = std::fs::read_to_string(dir.join("notes.md")) {
        sections.push(Section {
            folded: false,
            title: "Notes".into(),
            blocks: vec![Block::Markdown(notes)],
        });
    }
    // the patching section's figures are written beside the run's own
    // (`figures/patching_*`): listed once, under that section
    let patching = super::patch::report_section(dir);
    let mut figures = figures;
    if let Some((_, pf)) = &patching {
        figures.retain(|f| pf.iter().all(|p| p.id != f.id));
    }
    if !figures.is_empty() {
        sections.push(Section {
            folded: false,
            title: "Figures".into(),
            blocks: figures
                .iter()
                .map(|f| Block::Figure(f.id.clone()))
                .collect(),
        });
    }
    if let Some((section, patch_figures)) = patching {
        sections.push(section);
        figures.extend(patch_figures);
    }
    sections.push(Section {
        folded: false,
        title: "Metrics".into(),
        blocks: vec![Block::Table {
            headers: vec!["metric".into(), "value".into()],
            rows: summary
                .metrics
                .iter()
                .map(|(k, v)| vec![k.clone(), fmt_num(*v)])
                .collect(),
        }],
    });
    sections.push(Section {
        folded: false,
        title: "Config".into(),
        blocks: vec![Block::Code(config_text)],
    });
    let title = if description.is_empty() {
        format!("mechlab: {}", summary.experiment)
    } else {
        format!("mechlab: {description}")
    };
    Ok((
        Report {
            headline: None,
            title,
            meta,
            sections,
        },
        figures,
    ))
}

/// A number as a report shows it.
pub fn fmt_num(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == v.trunc() && v.abs() < 1e9 {
        format!("{v:.0}")
    } else if v.abs() >= 1e-3 && v.abs() < 1e5 {
        format!("{v:.4}")
    } else {
        format!("{v:.3e}")
    }
}

/// Rebuilds `figures/*.{svg,png}`, `report.html` and `report.md` of the run in `dir`.
pub fn build(reg: &Registry, dir: &Path) -> Result<(), RunError> {
    let (report, figures) = document(reg, dir)?;
    let fig_dir = dir.join("figures");
    mechlab_report::write_figures(&fig_dir, &figures).map_err(report_err(&fig_dir))?;
    write_report(dir, &report, &figures, "figures")
}

/// Writes `report.html` and `report.md` into `dir`; the Markdown links figures
/// as `<figure_dir>/<id>.svg`.
pub fn write_report(
    dir: &Path,
    report: &Report,
    figures: &[mechlab_report::Figure],
    figure_dir: &str,
) -> Result<(), RunError> {
    let html = mechlab_report::render_html(report, figures).map_err(report_err(dir))?;
    let p = dir.join("report.html");
    atomic::write(&p, html.as_bytes()).map_err(io_err(&p))?;
    let md = mechlab_report::render_markdown(report, figure_dir);
    let p = dir.join("report.md");
    atomic::write(&p, md.as_bytes()).map_err(io_err(&p))
}

/// The run's measurements as a table: id, quantity, value, and why no verdict.
pub fn measurements_table(ms: &[mechlab_report::Measurement]) -> Block {
    Block::Table {
        headers: ["measurement", "id", "value", "why no pass/fail"]
            .map(String::from)
            .to_vec(),
        rows: ms
            .iter()
            .map(|m| {
                vec![
                    m.quantity.clone(),
                    format!("`{}`", m.id),
                    m.value.clone(),
                    m.note.clone(),
                ]
            })
            .collect(),
    }
}
