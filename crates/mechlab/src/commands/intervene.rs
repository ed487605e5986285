//! `mechlab intervene <run>`: ablations and activation patching on a trained
//! run's checkpoint, on the run's own validation data.
//!
//! The model comes from [`crate::inspect::load_model`]; the validation set is
//! regenerated from the run's `config.toml` and seed exactly as training made
//! it. `--ablate zero|mean|resample` (repeatable; default all three) ablates
//! each layer-1 head's output in turn and reports the validation loss;
//! `--patch` runs the (head × position) activation-patching grid of
//! [`crate::papers::induction::causal`]. Results go to `intervene.json`, the
//! figures `figures/intervene_ablation.json` and `figures/intervene_patching.json`,
//! and an "Interventions" section of `notes.md`; the report is then rebuilt.
//! Only induction runs are supported for now.

use crate::config::{self, ConfigError};
use crate::inspect::{self, LoadError};
use crate::papers::induction::causal::{self, N_CAUSAL};
use crate::papers::induction::{data, spec_of, InductionConfig};
use crate::run::RunError;
use mechlab_engine::hooks::HookError;
use mechlab_report::Figure;
use serde_json::json;
use std::path::Path;
use thiserror::Error;

/// Why `intervene` could not run.
#[derive(Debug, Error)]
pub enum InterveneError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Hook(#[from] HookError),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("{0}")]
    Invalid(String),
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> InterveneError + '_ {
    move |e| {
        InterveneError::Run(RunError::Io {
            path: path.display().to_string(),
            source: e,
        })
    }
}

/// What to run.
#[derive(Clone, Debug, Default)]
pub struct Request {
    pub step: Option<u64>,
    /// Ablation kinds among zero, mean, resample (empty: all three).
    pub ablate: Vec<String>,
    pub patch: bool,
}

/// Runs the request on `run_dir`, writes its files and returns the JSON written.
pub fn run(run_dir: &Path, req: &Request) -> Result<serde_json::Value, InterveneError> {
    let cfg_path = run_dir.join("config.toml");
    let file = cfg_path.display().to_string();
    let table = config::read_file(&cfg_path)?;
    let exp = table
        .get("experiment")
        .and_then(|v| v.as_str())
        .unwrap_or("");
    if exp != "induction" {
        return Err(InterveneError::Invalid(format!(
            "{file}: experiment = `{exp}`: intervene supports induction runs"
        )));
    }
    for k in &req.ablate {
        if !["zero", "mean", "resample"].contains(&k.as_str()) {
            return Err(InterveneError::Invalid(format!(
                "--ablate {k}: allowed: zero, mean, resample"
            )));
        }
    }
    let cfg: InductionConfig = config::typed(&table, &file)?;
    let mut model = inspect::load_model(run_dir, req.step)?;
    let all = data::generate(&spec_of(&cfg, cfg.data.n_train + cfg.data.n_val), cfg.seed)
        .map_err(InterveneError::Invalid)?;
    let val = all.slice(cfg.data.n_train, all.len());
    let (batch, targets) = causal::batch_of(&val, N_CAUSAL);
    let floor = cfg.model.nll_floor;
    let h = cfg.model.n_heads;
    let clean = causal::mean_nll_of(model.as_mut(), &batch, &targets, floor)?;
    let uniform = data::baseline_losses(&val, &data::Baseline::Uniform).1;
    let mut out = json!({
        "run": run_dir.display().to_string(),
        "step": req.step,
        "hook": causal::HEAD_OUT,
        "sequences": batch.batch,
        "val_nll": clean,
        "uniform_nll": uniform,
    });
    let mut notes = format!(
        "\n## Interventions\n\n`mechlab intervene` on {} validation sequences: clean −log ŷ_y {clean:.4}, \
         uniform attention {uniform:.4}.\n\n",
        batch.batch
    );
    let kinds: Vec<String> = if req.ablate.is_empty() && !req.patch {
        vec!["zero".into(), "mean".into(), "resample".into()]
    } else {
        req.ablate.clone()
    };
    if !kinds.is_empty() {
        let abl = causal::head_ablations(model.as_mut(), &batch, &targets, h, floor)?;
        let abl: Vec<_> = abl
            .into_iter()
            .filter(|(k, _)| kinds.iter().any(|x| x == k))
            .collect();
        notes.push_str("| ablation of `blocks.0.attn.hook_z` |");
        notes.push_str(&(0..h).map(|hd| format!(" head {hd} |")).collect::<String>());
        notes.push_str(&format!("\n|---|{}\n", "---|".repeat(h)));
        let mut vals = Vec::new();
        for (k, v) in &abl {
            notes.push_str(&format!(
                "| {k} |{}\n",
                v.iter().map(|x| format!(" {x:.4} |")).collect::<String>()
            ));
            vals.extend(v.iter().map(|x| x - clean));
        }
        let mut map = serde_json::Map::new();
        for (k, v) in &abl {
            map.insert(k.to_string(), json!(v));
        }
        out["ablation"] = serde_json::Value::Object(map);
        let fig = Figure::heatmap("intervene_ablation", "Head ablation: rise of the validation loss", "layer-1 head", "ablation", abl.len(), h, vals, false)
            .with_ticks(abl.iter().map(|(k, _)| k.to_string()).collect(), (0..h).map(|hd| format!("head {hd}")).collect())
            .caption("Validation −log ŷ_y with one head's output ablated at every position, minus the clean loss.");
        write_figure(run_dir, &fig)?;
    }
    if req.patch {
        let setup = causal::patch_setup(model.as_mut(), &batch, cfg.data.vocab, &cfg.data.parents)?;
        if setup.a.is_empty() {
            return Err(InterveneError::Invalid(
                "--patch: corrupting the query's parents changes no prediction of this model"
                    .into(),
            ));
        }
        let g = causal::patch_grid(model.as_mut(), &setup)?;
        out["patching"] = json!({
            "sequences": setup.a.len(),
            "metric": "mean ŷ[clean argmax] − ŷ[corrupted argmax]",
            "clean": g.baselines.clean,
            "corrupted": g.baselines.corrupted,
            "rows": "head", "cols": "position",
            "effect": g.effect.chunks(g.cols).map(|r| r.to_vec()).collect::<Vec<_>>(),
        });
        let best = (0..g.effect.len())
            .max_by(|&a, &b| g.effect[a].total_cmp(&g.effect[b]))
            .unwrap_or(0);
        notes.push_str(&format!(
            "\nActivation patching of `blocks.0.attn.hook_z` from clean into parent-corrupted sequences ({} sequences): \
             the largest effect, {:.3}, is head {} at position {}.\n",
            setup.a.len(), g.effect[best], best / g.cols, best % g.cols
        ));
        let fig = Figure::heatmap("intervene_patching", "Activation patching: effect per head and position", "position", "layer-1 head", g.rows, g.cols, g.effect.clone(), true)
            .caption("(patched − corrupted) / (clean − corrupted) of ŷ[a] − ŷ[b], patching one head's output at one position from the clean run.");
        write_figure(run_dir, &fig)?;
    }
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
    super::report::build(run_dir)?;
    Ok(out)
}

fn write_figure(run_dir: &Path, fig: &Figure) -> Result<(), InterveneError> {
    let path = run_dir.join("figures").join(format!("{}.json", fig.id));
    std::fs::write(
        &path,
        serde_json::to_string_pretty(fig).expect("figures serialise"),
    )
    .map_err(io(&path))
}
