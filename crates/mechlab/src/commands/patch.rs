//! `mechlab patch`: an activation-patching sweep and its attribution-patching
//! estimate on a run's model, from the command line.
//!
//! The clean and corrupted inputs are `[batch, pos]` integer `.npy` files. Each
//! cell of the sweep (a layer and a position, a layer and a head, or all three)
//! patches the clean activation into the corrupted run and reports the
//! normalised metric `(patched − corrupted) / (clean − corrupted)`
//! ([`crate::patching::patching_effect`]); attribution patching estimates every
//! cell from one forward and backward on the corrupted input, `(clean −
//! corrupted activation) · ∂metric/∂activation`, with the model's own backward
//! ([`HookedModel::run_with_grads`]). Python's `Model.patch` / `Model.attribute`
//! compute the same (`python/mechlab/_patch.py`); this is the same analysis for
//! a shell or a batch job, written as `patching.json` and a `patching.html`
//! page of heatmaps, and as a section of the run's report. The model is a
//! run's or a pretrained encoder's (whose output is hidden states, so its
//! metric is `logit-diff` on two of their entries).

use crate::patching::{patching_effect, pearson};
use mechlab_engine::hooks::{Ablation, Batch, Hook, HookError, HookedModel, Tensor};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One cell of a sweep: its heads and positions (`None`: all).
type Cell = (Option<Vec<usize>>, Option<Vec<usize>>);

/// What the sweep measures on the output logits `[batch, pos, d_vocab]`.
#[derive(Clone, Debug, PartialEq)]
pub enum Metric {
    /// The mean next-token cross-entropy of the clean tokens over every position but the last.
    Loss,
    /// The mean over the batch of `logits[pos, correct] − logits[pos, incorrect]`.
    LogitDiff {
        correct: usize,
        incorrect: usize,
        pos: usize,
    },
}

impl Metric {
    /// `loss`, or `logit-diff:CORRECT,INCORRECT@POS`.
    pub fn parse(s: &str) -> Result<Metric, String> {
        if s == "loss" {
            return Ok(Metric::Loss);
        }
        let bad = || {
            format!("--metric {s:?}: expected `loss` or `logit-diff:CORRECT,INCORRECT@POS` (token ids, a position)")
        };
        let rest = s.strip_prefix("logit-diff:").ok_or_else(bad)?;
        let (ids, pos) = rest.split_once('@').ok_or_else(bad)?;
        let (a, b) = ids.split_once(',').ok_or_else(bad)?;
        let num = |x: &str| x.trim().parse::<usize>().map_err(|_| bad());
        Ok(Metric::LogitDiff {
            correct: num(a)?,
            incorrect: num(b)?,
            pos: num(pos)?,
        })
    }

    fn check(&self, shape: &[usize]) -> Result<(), String> {
        let (t, v) = (shape[1], shape[2]);
        match self {
            Metric::Loss if t < 2 => {
                Err("--metric loss: a sequence of one position has no next token".into())
            }
            Metric::LogitDiff { pos, .. } if *pos >= t => Err(format!(
                "--metric: position {pos} is past the sequence of {t} positions"
            )),
            Metric::LogitDiff {
                correct, incorrect, ..
            } if *correct >= v || *incorrect >= v => Err(format!(
                "--metric: token ids {correct}, {incorrect}: the vocabulary has {v}"
            )),
            _ => Ok(()),
        }
    }

    /// The metric and its gradient w.r.t. the logits `y`, the targets of
    /// `Loss` being `tokens` shifted by one.
    fn eval(&self, y: &Tensor, tokens: &Batch) -> (f64, Tensor) {
        let (b, t, v) = (y.shape[0], y.shape[1], y.shape[2]);
        let mut g = Tensor::zeros(y.shape.clone());
        match *self {
            Metric::Loss => {
                let n = (b * (t - 1)) as f64;
                let mut sum = 0.0;
                for s in 0..b {
                    for p in 0..t - 1 {
                        let row = &y.data[(s * t + p) * v..][..v];
                        let target = tokens.seq(s)[p + 1] as usize;
                        let mx = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                        let z: f64 = row.iter().map(|x| (x - mx).exp()).sum();
                        sum += mx + z.ln() - row[target];
                        let gr = &mut g.data[(s * t + p) * v..][..v];
                        for (k, (gk, &x)) in gr.iter_mut().zip(row).enumerate() {
                            *gk = ((x - mx).exp() / z - f64::from(u8::from(k == target))) / n;
                        }
                    }
                }
                (sum / n, g)
            }
            Metric::LogitDiff {
                correct,
                incorrect,
                pos,
            } => {
                let mut sum = 0.0;
                for s in 0..b {
                    let at = (s * t + pos) * v;
                    sum += y.data[at + correct] - y.data[at + incorrect];
                    g.data[at + correct] += 1.0 / b as f64;
                    g.data[at + incorrect] -= 1.0 / b as f64;
                }
                (sum / b as f64, g)
            }
        }
    }
}

/// Which activations a sweep patches, as TransformerLens's `get_act_patch_*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `blocks.{l}.hook_resid_pre` by layer × position.
    ResidPre,
    /// `blocks.{l}.hook_attn_out` by layer × position.
    AttnOut,
    /// `blocks.{l}.hook_mlp_out` by layer × position.
    MlpOut,
    /// Each head's `hook_z` at every position, layer × head.
    HeadOut,
    /// Each head's `hook_z` by layer × position × head.
    HeadOutByPos,
}

impl Kind {
    pub const ALL: [(&'static str, Kind); 5] = [
        ("resid_pre", Kind::ResidPre),
        ("attn_out", Kind::AttnOut),
        ("mlp_out", Kind::MlpOut),
        ("head_out", Kind::HeadOut),
        ("head_out_by_pos", Kind::HeadOutByPos),
    ];

    pub fn parse(s: &str) -> Result<Kind, String> {
        Kind::ALL
            .iter()
            .find(|(n, _)| *n == s)
            .map(|(_, k)| *k)
            .ok_or_else(|| {
                let names: Vec<&str> = Kind::ALL.iter().map(|(n, _)| *n).collect();
                format!("--kind {s:?}: expected one of {}", names.join(", "))
            })
    }

    fn name(self) -> &'static str {
        Kind::ALL
            .iter()
            .find(|(_, k)| *k == self)
            .expect("listed")
            .0
    }

    fn leaf(self) -> &'static str {
        match self {
            Kind::ResidPre => "hook_resid_pre",
            Kind::AttnOut => "hook_attn_out",
            Kind::MlpOut => "hook_mlp_out",
            Kind::HeadOut | Kind::HeadOutByPos => "attn.hook_z",
        }
    }
}

/// One sweep's result: `patching` and `attribution` row-major over `shape`
/// (`axes`), normalised; the metric on the clean and the corrupted run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Sweep {
    pub kind: String,
    pub axes: Vec<String>,
    pub shape: Vec<usize>,
    pub patching: Vec<f64>,
    pub attribution: Vec<f64>,
    pub clean: f64,
    pub corrupted: f64,
    /// Pearson's r between the two over the cells.
    pub correlation: f64,
    pub seconds_patching: f64,
    pub seconds_attribution: f64,
    /// Each position's tick on the heatmaps: `"p token"` where every clean
    /// sequence has the same token there, else `"p"`.
    #[serde(default)]
    pub positions: Vec<String>,
}

/// The heatmaps' position ticks of the clean batch `c`, naming a token
/// (`name(id)`) where every sequence has the same one.
fn position_ticks(c: &Batch, name: &dyn Fn(u32) -> String) -> Vec<String> {
    (0..c.seq_len)
        .map(|p| {
            let first = c.tokens[p];
            let same = (0..c.batch).all(|s| c.tokens[s * c.seq_len + p] == first);
            if same {
                format!("{p} {}", name(first))
            } else {
                p.to_string()
            }
        })
        .collect()
}

/// The sweep of `kind` on `model`; the inputs must have one shape.
pub fn sweep(
    model: &mut dyn HookedModel,
    clean: &Batch,
    corrupted: &Batch,
    metric: &Metric,
    kind: Kind,
) -> Result<Sweep, HookError> {
    let points: Vec<String> = model.hook_points().into_iter().map(|p| p.name).collect();
    let names: Vec<String> = (0..)
        .map(|l| format!("blocks.{l}.{}", kind.leaf()))
        .take_while(|n| points.contains(n))
        .collect();
    if names.is_empty() {
        return Err(HookError::Invalid {
            name: format!("blocks.0.{}", kind.leaf()),
            reason: format!("--kind {}: this model has no such point", kind.name()),
        });
    }
    let refs: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
    let t0 = std::time::Instant::now();
    let (y_clean, cache) = model.run_with_cache(clean, &refs)?;
    metric.check(&y_clean.shape).map_err(HookError::Input)?;
    let (m_clean, _) = metric.eval(&y_clean, clean);
    let (y_corr, _) = model.run_with_cache(corrupted, &[])?;
    let (m_corr, _) = metric.eval(&y_corr, clean);
    let act0 = &cache[&names[0]];
    let per_head = matches!(kind, Kind::HeadOut | Kind::HeadOutByPos);
    // a residual-stream point has one "head": its whole [pos, d_model] row
    let t = act0.shape[1];
    let heads = if per_head { act0.shape[2] } else { 1 };
    let by_pos = !matches!(kind, Kind::HeadOut);
    let mut shape = vec![names.len()];
    if by_pos {
        shape.push(t);
    }
    if per_head {
        shape.push(heads);
    }
    let cells: Vec<Cell> = match (by_pos, per_head) {
        (true, true) => (0..t)
            .flat_map(|p| (0..heads).map(move |h| (Some(vec![h]), Some(vec![p]))))
            .collect(),
        (true, false) => (0..t).map(|p| (None, Some(vec![p]))).collect(),
        (false, _) => (0..heads).map(|h| (Some(vec![h]), None)).collect(),
    };
    let mut patching = Vec::with_capacity(names.len() * cells.len());
    for name in &names {
        let patch = Ablation::patch(cache[name].clone());
        let jobs: Vec<(&Batch, Vec<Hook>)> = cells
            .iter()
            .map(|(h, p)| {
                let hook = Hook {
                    name: name.clone(),
                    ablation: patch.clone(),
                    heads: h.clone(),
                    positions: p.clone(),
                };
                (corrupted, vec![hook])
            })
            .collect();
        // each output reduced to its metric as it comes
        let values = std::sync::Mutex::new(vec![Ok(f64::NAN); jobs.len()]);
        model.run_many_each(&jobs, &|i, y| {
            let v = y.map(|y| metric.eval(&y, clean).0);
            values.lock().expect("patching values")[i] = v;
        });
        for v in values.into_inner().expect("patching values") {
            patching.push(patching_effect(m_clean, m_corr, v?));
        }
    }
    let seconds_patching = t0.elapsed().as_secs_f64();
    let t1 = std::time::Instant::now();
    let (_, acts, grads) =
        model.run_with_grads(corrupted, &refs, &mut |y| Ok(metric.eval(y, clean).1))?;
    let gap = m_clean - m_corr;
    let mut attribution = Vec::with_capacity(patching.len());
    for name in &names {
        let (c, x, g) = (&cache[name], &acts[name], &grads[name]);
        let (_, _, cell) = crate::patching::attribution_cells(name, c, x, g);
        match (by_pos, per_head) {
            (true, _) => attribution.extend(cell.iter().map(|v| v / gap)),
            (false, _) => attribution
                .extend((0..heads).map(|h| (0..t).map(|p| cell[p * heads + h]).sum::<f64>() / gap)),
        }
    }
    let mut axes = vec!["layer".to_string()];
    if by_pos {
        axes.push("pos".into());
    }
    if per_head {
        axes.push("head".into());
    }
    Ok(Sweep {
        kind: kind.name().into(),
        correlation: pearson(&patching, &attribution),
        axes,
        shape,
        patching,
        attribution,
        clean: m_clean,
        corrupted: m_corr,
        seconds_patching,
        seconds_attribution: t1.elapsed().as_secs_f64(),
        positions: Vec::new(),
    })
}

/// `[batch, pos]` token ids from an integer `.npy` file.
pub fn read_tokens(path: &Path, flag: &str) -> Result<Batch, String> {
    let bad = |e: String| format!("{flag} {}: {e}", path.display());
    let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let npy = npyz::NpyFile::new(&bytes[..]).map_err(|e| bad(format!("not a .npy file ({e})")))?;
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    if shape.len() != 2 || shape.contains(&0) {
        return Err(bad(format!("shape {shape:?}: token ids are [batch, pos]")));
    }
    let descr = npy.dtype().descr();
    let io = |e: std::io::Error| bad(e.to_string());
    let ids: Vec<i64> = match descr.trim_matches('\'').trim_start_matches(['<', '|', '=']) {
        "i8" => npy.into_vec::<i64>().map_err(io)?,
        "i4" => npy
            .into_vec::<i32>()
            .map_err(io)?
            .into_iter()
            .map(i64::from)
            .collect(),
        other => return Err(bad(format!("dtype {other}: token ids are int64 or int32"))),
    };
    let ids = ids
        .into_iter()
        .map(|x| u32::try_from(x).map_err(|_| bad(format!("token id {x} is not a vocabulary id"))))
        .collect::<Result<Vec<u32>, String>>()?;
    Ok(Batch::new(ids, shape[0], shape[1]))
}

/// `mechlab patch`: the sweeps of `kinds` on the model of run `dir` at
/// checkpoint `step`, written into `out` as `patching.json` and
/// `patching.html`; returns the folder.
#[allow(clippy::too_many_arguments)]
pub fn run(
    reg: &crate::experiment::Registry,
    dir: &Path,
    step: Option<u64>,
    clean: &Path,
    corrupted: &Path,
    metric: &Metric,
    kinds: &[Kind],
    out: Option<&Path>,
) -> anyhow::Result<PathBuf> {
    let c = read_tokens(clean, "--clean").map_err(anyhow::Error::msg)?;
    let x = read_tokens(corrupted, "--corrupted").map_err(anyhow::Error::msg)?;
    if (c.batch, c.seq_len) != (x.batch, x.seq_len) {
        anyhow::bail!(
            "--clean {} is [{}, {}] and --corrupted {} is [{}, {}]: a patch needs one shape",
            clean.display(),
            c.batch,
            c.seq_len,
            corrupted.display(),
            x.batch,
            x.seq_len
        );
    }
    // a run's folder, or a pretrained encoder (a Hugging Face folder or a
    // model name in the shared models folder)
    let is_run = dir.join("config.toml").is_file();
    // a token as the heatmaps name it: a run's by id, an encoder's by its piece
    let mut token: Box<dyn Fn(u32) -> String> = Box::new(|id| id.to_string());
    let mut model: Box<dyn HookedModel + Send> = if is_run {
        crate::inspect::load_model(reg, dir, step)?
    } else {
        if step.is_some() {
            anyhow::bail!(
                "--step: {} is not a run, so it has no checkpoints",
                dir.display()
            );
        }
        if *metric == Metric::Loss {
            anyhow::bail!(
                "--metric loss: {} is an encoder whose output is hidden states [batch, pos, d_model], not next-token logits; use logit-diff:I,J@POS (the output's entries I and J at POS)",
                dir.display()
            );
        }
        let p = crate::pretrained::Pretrained::load_at(&dir.to_string_lossy(), "run")?;
        let pieces = p.tokenizer.pieces;
        token = Box::new(move |id| pieces.id_to_token(id).unwrap_or_else(|| id.to_string()));
        Box::new(p.model)
    };
    let ticks = position_ticks(&c, &token);
    let mut sweeps = Vec::new();
    for &k in kinds {
        let mut s = sweep(model.as_mut(), &c, &x, metric, k).map_err(|e| anyhow::anyhow!("{e}"))?;
        s.positions = ticks.clone();
        sweeps.push(s);
    }
    let default = if is_run {
        dir.join("patching")
    } else {
        PathBuf::from("patching")
    };
    let out = out.map_or(default, Path::to_path_buf);
    std::fs::create_dir_all(&out)?;
    let json = serde_json::json!({
        "run": dir.display().to_string(),
        "step": step,
        "clean": clean.display().to_string(),
        "corrupted": corrupted.display().to_string(),
        "metric": format!("{metric:?}"),
        "sweeps": sweeps,
    });
    crate::run::atomic::write(
        &out.join("patching.json"),
        serde_json::to_string_pretty(&json)?.as_bytes(),
    )?;
    let (section, figures) = section(sweeps.iter());
    let report =
        mechlab_report::Report::new(&format!("Patching {}", dir.display())).with_section(section);
    let html = mechlab_report::render_html(&report, &figures)?;
    crate::run::atomic::write(&out.join("patching.html"), html.as_bytes())?;
    if is_run && out == dir.join("patching") {
        // the run's own report gains the section (see `report_section`)
        super::report::build(reg, dir)?;
    }
    Ok(out)
}

/// The "Patching" section of the run's report, from the sweeps the last
/// `mechlab patch` wrote into `<run>/patching/patching.json` (none: `None`).
pub fn report_section(
    dir: &Path,
) -> Option<(mechlab_report::Section, Vec<mechlab_report::Figure>)> {
    let text = std::fs::read_to_string(dir.join("patching").join("patching.json")).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    let sweeps: Vec<Sweep> = serde_json::from_value(json.get("sweeps")?.clone()).ok()?;
    let (mut section, figures) = section(sweeps.iter());
    let inputs = |k: &str| json[k].as_str().unwrap_or("?").to_string();
    section.blocks.insert(
        0,
        mechlab_report::Block::Markdown(format!(
            "`mechlab patch` with `--clean {}` and `--corrupted {}`, metric `{}` (`patching/patching.json`).",
            inputs("clean"),
            inputs("corrupted"),
            inputs("metric")
        )),
    );
    Some((section, figures))
}

/// A section of heatmaps: each sweep's patching and attribution side by side.
fn section<'a>(
    sweeps: impl Iterator<Item = &'a Sweep>,
) -> (mechlab_report::Section, Vec<mechlab_report::Figure>) {
    use mechlab_report::{Figure, Section};
    let mut figures = Vec::new();
    let mut section = Section::new("Patching");
    for s in sweeps {
        let rows = if s.shape.len() == 3 {
            s.shape[0] * s.shape[2]
        } else {
            s.shape[0]
        };
        let cols = s.patching.len() / rows;
        section = section.markdown(&format!(
            "`{}`: metric clean {:.4}, corrupted {:.4}; attribution against patching r = {:.3}; {:.2} s patching, {:.3} s attribution.",
            s.kind, s.clean, s.corrupted, s.correlation, s.seconds_patching, s.seconds_attribution
        ));
        for (what, values) in [("patching", &s.patching), ("attribution", &s.attribution)] {
            // [layer, pos, head] drawn as (layer, head) rows × position columns
            let v: Vec<f64> = if s.shape.len() == 3 {
                let (l, t, h) = (s.shape[0], s.shape[1], s.shape[2]);
                (0..l)
                    .flat_map(|li| {
                        (0..h).flat_map(move |hi| (0..t).map(move |p| (li * t + p) * h + hi))
                    })
                    .map(|i| values[i])
                    .collect()
            } else {
                values.clone()
            };
            let id = format!("{what}_{}", s.kind);
            let by_head = s.shape.len() == 2 && s.axes[1] == "head";
            let fig = Figure::heatmap(
                &id,
                &format!("{} — {what}", s.kind),
                if by_head { "head" } else { "position" },
                if s.shape.len() == 3 {
                    "layer·head"
                } else {
                    "layer"
                },
                rows,
                cols,
                v,
                true,
            );
            let row_ticks = if s.shape.len() == 3 {
                let h = s.shape[2];
                (0..rows).map(|r| format!("L{}H{}", r / h, r % h)).collect()
            } else {
                (0..rows).map(|l| format!("L{l}")).collect()
            };
            let col_ticks = if by_head || s.positions.len() != cols {
                (0..cols).map(|c| c.to_string()).collect()
            } else {
                s.positions.clone()
            };
            figures.push(fig.with_ticks(row_ticks, col_ticks));
            section = section.figure(&id);
        }
    }
    (section, figures)
}
