//! `mechlab intervene <run>`: a paper's causal questions on a trained run, each
//! beside its control, through the registry ([`crate::experiment::Paper::intervene`]).
//!
//! The paper loads the run's checkpoint and regenerates its own evaluation data
//! from the run's config and seed; this command writes what every paper returns
//! the same way: `intervene.json` (the effects, then the paper's extra tables),
//! `figures/intervene_effects.json` plus the paper's figures, and an
//! "Interventions" section of `notes.md` (replacing an earlier one); the report
//! is then rebuilt.

use crate::analysis::{effects_section, InterveneError, Request, RunDir};
use crate::config;
use crate::experiment::Registry;
use crate::run::RunError;
use mechlab_report::Figure;
use serde_json::json;
use std::path::Path;

fn io(path: &Path) -> impl Fn(std::io::Error) -> InterveneError + '_ {
    move |e| {
        InterveneError::Run(RunError::Io {
            path: path.display().to_string(),
            source: e,
        })
    }
}

/// `mechlab measure <run>`: what the run's paper measures at a probe step, on
/// checkpoint `step` (the latest when `None`), through the registry
/// ([`crate::experiment::Paper::measure`]); returns `{"experiment", "run",
/// "step", "values": {key: value}}` and writes nothing.
pub fn measure(
    registry: &Registry,
    run_dir: &Path,
    step: Option<u64>,
) -> Result<serde_json::Value, InterveneError> {
    let run = RunDir::new(run_dir);
    let table = config::read_file(&run_dir.join("config.toml"))?;
    let exp = crate::inspect::experiment_of(registry, &table, &run)?;
    let step = match step {
        Some(s) => s,
        None => {
            crate::run::checkpoint::verify(&run.checkpoint(None)?)
                .map_err(crate::analysis::LoadError::from)?
                .step
        }
    };
    let values = exp.measure(&table, &run, Some(step))?;
    Ok(json!({
        "experiment": exp.name(),
        "run": run_dir.display().to_string(),
        "step": step,
        "values": values,
    }))
}

/// Runs the request on `run_dir` with the paper of `registry` the run names,
/// writes its files and returns the JSON written.
pub fn run(
    registry: &Registry,
    run_dir: &Path,
    req: &Request,
) -> Result<serde_json::Value, InterveneError> {
    let run = RunDir::new(run_dir);
    let table = config::read_file(&run_dir.join("config.toml"))?;
    let exp = crate::inspect::experiment_of(registry, &table, &run)?;
    let found = exp.intervene(&table, &run, req)?;
    let mut out = json!({
        "experiment": exp.name(),
        "run": run_dir.display().to_string(),
        "step": req.step,
        "data": found.data,
        "effects": found.effects,
    });
    for (k, v) in &found.extra {
        out[k] = v.clone();
    }
    let (table_md, fig) = effects_section(&found.effects);
    for f in fig.iter().chain(&found.figures) {
        write_figure(run_dir, f)?;
    }
    let notes = format!(
        "\n## Interventions\n\n`mechlab intervene` on {}.\n\n{table_md}\n{}",
        found.data, found.notes
    );
    let json_path = run_dir.join("intervene.json");
    std::fs::write(
        &json_path,
        serde_json::to_string_pretty(&out).expect("JSON serialises"),
    )
    .map_err(io(&json_path))?;
    let notes_path = run_dir.join("notes.md");
    let old = std::fs::read_to_string(&notes_path).unwrap_or_default();
    let kept = old
        .split("\n## Interventions\n")
        .next()
        .unwrap_or("")
        .to_string();
    std::fs::write(&notes_path, kept + &notes).map_err(io(&notes_path))?;
    super::report::build(registry, run_dir)?;
    Ok(out)
}

fn write_figure(run_dir: &Path, fig: &Figure) -> Result<(), InterveneError> {
    let dir = run_dir.join("figures");
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    let path = dir.join(format!("{}.json", fig.id));
    std::fs::write(
        &path,
        serde_json::to_string_pretty(fig).expect("figures serialise"),
    )
    .map_err(io(&path))
}
