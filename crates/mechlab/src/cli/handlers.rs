//! One function per `mechlab` command: call the command, print what it did,
//! return the exit status. The dispatch and the argument definitions are in
//! [`super`].

use super::SlurmArgs;
use crate::claims::Status;
use crate::commands::{self, cluster, slurm, sweep};
use crate::experiment::Registry;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// `mechlab list`.
pub(super) fn list(reg: &Registry) -> Result<i32> {
    let rows = commands::list(reg);
    let w = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    for (name, exp, desc) in rows {
        println!("{name:w$}  [{exp}]  {desc}");
    }
    Ok(0)
}

/// `mechlab run`: `--data PATH` becomes the paper's data key.
#[allow(clippy::too_many_arguments)]
pub(super) fn run_source(
    reg: &Registry,
    source: &str,
    mut set: Vec<String>,
    seed: Option<u64>,
    out: Option<PathBuf>,
    data: Option<PathBuf>,
    command: &str,
    quiet: bool,
) -> Result<i32> {
    let mut resolved = commands::resolve(reg, source, &set, seed)?;
    if let Some(d) = data {
        let Some(key) = resolved.experiment.data_key() else {
            bail!(
                "--data: the {} experiment reads no data files",
                resolved.experiment.name()
            );
        };
        set.push(format!(
            "{key}={}",
            toml::Value::String(d.display().to_string())
        ));
        resolved = commands::resolve(reg, source, &set, seed)?;
    }
    let seed = resolved.prepared.seed();
    let dir = commands::run_dir(out.as_deref(), &resolved.label, seed);
    let summary = commands::run(reg, &resolved, &dir, command, quiet)?;
    print_verdicts(reg, &dir, &summary);
    println!("report: {}", dir.join("report.html").display());
    Ok(0)
}

/// `mechlab intervene`: one line per effect.
pub(super) fn intervene(
    reg: &Registry,
    run: &Path,
    step: Option<u64>,
    ablate: Vec<String>,
    patch: bool,
) -> Result<i32> {
    let req = crate::analysis::Request {
        step,
        ablate,
        patch,
    };
    let out = commands::intervene::run(reg, run, &req)?;
    for e in out["effects"].as_array().into_iter().flatten() {
        let num = |k: &str| e[k].as_f64().unwrap_or(f64::NAN);
        println!(
            "{}: {} clean {:.4}, intervention {:.4}, control {:.4}",
            e["id"].as_str().unwrap_or(""),
            e["metric"].as_str().unwrap_or(""),
            num("clean"),
            num("intervened"),
            num("control")
        );
    }
    println!("interventions: {}", run.join("intervene.json").display());
    println!("report: {}", run.join("report.html").display());
    Ok(0)
}

/// `mechlab encode`: the pieces of each text and the shape of each activation.
pub(super) fn encode(req: commands::encode::Request) -> Result<i32> {
    let enc = commands::encode::run(&req)?;
    for (b, pieces) in enc.pieces.iter().enumerate() {
        println!("text {b} ({} pieces): {}", pieces.len(), pieces.join(" "));
    }
    for (name, t) in &enc.cache {
        println!("{name} {:?}", t.shape);
    }
    for f in req.out.iter().chain(&req.html) {
        println!("wrote {}", f.display());
    }
    Ok(0)
}

/// `mechlab sweep` on this machine, `jobs` runs at a time (default: one per core).
pub(super) fn run_sweep(
    reg: &Registry,
    spec: &sweep::SweepSpec,
    out: &Path,
    jobs: Option<usize>,
    command: &str,
    replace: bool,
) -> Result<i32> {
    let jobs = jobs.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let rows = sweep::sweep_with_progress(reg, spec, out, jobs, command, None, replace)?;
    let failed = rows.iter().filter(|r| r.status != "ok").count();
    println!(
        "{} runs ({failed} failed): {}",
        rows.len(),
        out.join("summary.csv").display()
    );
    Ok(if failed > 0 { 1 } else { 0 })
}

/// `mechlab sweep-shard`: one array task's share of a planned sweep.
pub(super) fn sweep_shard(
    reg: &Registry,
    sweep: &Path,
    shard: &str,
    jobs: usize,
    command: &str,
) -> Result<i32> {
    let shard = sweep::parse_shard(shard)?;
    let rows = cluster::run_shard(reg, sweep, shard, jobs, command)?;
    let failed = rows.iter().filter(|r| r.status != "ok").count();
    println!(
        "shard {}/{}: {} runs ({failed} failed)",
        shard.0,
        shard.1,
        rows.len()
    );
    Ok(if failed > 0 { 1 } else { 0 })
}

/// `mechlab sweep-merge`: the shards' rows, and what failed or never ran.
pub(super) fn sweep_merge(sweep: &Path) -> Result<i32> {
    let report = cluster::merge_sweep(sweep)?;
    let counts = sweep::RunCounts::of(&report.rows);
    println!(
        "{} of {} runs ok, {} failed, {} missing: {}",
        counts.ok,
        counts.planned,
        counts.failed,
        counts.missing,
        sweep.join("summary.csv").display()
    );
    for p in &report.problems {
        let log = p
            .log
            .as_deref()
            .unwrap_or("no log (its task never started)");
        println!("  {} (shard {}): {} — log: {log}", p.run, p.shard, p.status);
    }
    if !report.problems.is_empty() {
        println!("rerun: see docs/cluster.md (failed.csv lists them)");
        return Ok(1);
    }
    Ok(0)
}

/// `mechlab reproduce`: one line per claim, judged over its seeds by its rule;
/// `--check` exits 2 when a claim fails its rule or a run fails.
pub(super) fn reproduce(
    reg: &Registry,
    papers: &[String],
    check: bool,
    out: &Path,
    opts: &commands::reproduce::Options,
) -> Result<i32> {
    let r = commands::reproduce::reproduce(reg, papers, out, opts)?;
    for o in &r.outcomes {
        if let Err(e) = &o.result {
            println!("== {} ({:.1} s): error: {e}", o.name, o.seconds);
        }
    }
    let mut setting = "";
    for j in &r.claims {
        if j.setting != setting {
            setting = &j.setting;
            let runs: Vec<&commands::reproduce::Outcome> =
                r.outcomes.iter().filter(|o| o.setting == setting).collect();
            let secs: f64 = runs.iter().map(|o| o.seconds).sum();
            println!(
                "== {setting} ({}, {} seeds, {secs:.1} s)",
                j.paper,
                runs.len()
            );
        }
        println!("  {}", claim_line(j));
    }
    // The measurements (no prediction to judge) of each setting's first seed.
    for o in r.outcomes.iter().filter(|o| o.name == o.setting) {
        if let Ok(s) = &o.result {
            if !s.measurements.is_empty() {
                println!("== {} (measurements, seed {})", o.name, o.seed);
                print_measurements(s);
            }
        }
    }
    let count = |st: Status| r.claims.iter().filter(|j| j.status == st).count();
    println!(
        "{} of {} claims pass their rule over seeds ({} of them findings the authors' code \
         shares), {} failed; report: {}",
        count(Status::Held) + count(Status::Finding),
        r.claims.len(),
        count(Status::Finding),
        count(Status::Failed),
        out.join("report.html").display()
    );
    Ok(if check && !r.passed() { 2 } else { 0 })
}

/// `[held 5/5] id: claim — every seed; 0.97 [0.95, 0.99]`, or the reason it failed.
fn claim_line(j: &crate::claims::Judgement) -> String {
    let spread = j
        .spread
        .map(|[m, lo, hi]| {
            format!(
                "; median {} [{}, {}]",
                crate::claims::short(m),
                crate::claims::short(lo),
                crate::claims::short(hi)
            )
        })
        .unwrap_or_default();
    match j.status {
        Status::Held => format!(
            "[held {}/{}] {}: {} — by rule: {}{spread}",
            j.passed, j.seeds, j.id, j.claim, j.rule
        ),
        st => format!(
            "[{} {}/{}] {}: {} — {}{spread}",
            st.word(),
            j.passed,
            j.seeds,
            j.id,
            j.claim,
            j.reason
        ),
    }
}

/// `mechlab sweep --slurm`: plan, write the scripts, submit (unless --dry-run).
pub(super) fn submit_sweep(
    reg: &Registry,
    spec: &sweep::SweepSpec,
    out: &Path,
    a: SlurmArgs,
    replace: bool,
) -> Result<i32> {
    let opts = slurm::SlurmOptions {
        partition: a.partition,
        time: a.time,
        cpus_per_task: a.cpus_per_task,
        mem: a.mem,
        array_parallelism: a.array_parallelism,
        sbatch_args: a.sbatch_arg,
    };
    let binary = std::env::current_exe()
        .and_then(|p| p.canonicalize())
        .context("finding the mechlab binary for the sbatch script")?;
    let writer = cluster::Writer {
        binary: binary.display().to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
    };
    let l = slurm::launch(reg, spec, out, a.shards, &opts, writer, a.dry_run, replace)?;
    println!(
        "{} runs in {} array tasks: {}",
        l.runs,
        l.shards,
        l.sweep.display()
    );
    println!("  {}", l.array_script.display());
    println!("  {}", l.merge_script.display());
    match l.jobs {
        Some(j) => println!(
            "submitted array job {} and merge job {} (afterany); follow with `mechlab sweep-status {}`",
            j.array,
            j.merge,
            l.sweep.display()
        ),
        None => println!(
            "dry run, nothing submitted; to submit: id=$(sbatch --parsable {}) && sbatch --dependency=afterany:$id {}",
            l.array_script.display(),
            l.merge_script.display()
        ),
    }
    Ok(0)
}

/// A run's verdicts, a failure its claim's rule allows marked as `FAIL, known`
/// with the rule (as `reproduce` and the run's report mark it).
pub(super) fn print_verdicts(reg: &Registry, dir: &Path, s: &crate::run::summary::Summary) {
    let rules = commands::report::claim_rules(reg, dir);
    let mut vs = s.verdicts.clone();
    crate::claims::annotate(rules, &mut vs);
    for v in &vs {
        let mark = match v.mark() {
            "PASS" => "pass",
            m => m,
        };
        print_verdict(mark, v);
        if v.known {
            let c = crate::claims::claim_for(rules, &v.id);
            println!(
                "      a failure the claim allows on some seeds: judged over seeds, {}",
                c.rule_text()
            );
        }
    }
    print_measurements(s);
}

pub(super) fn print_verdict(mark: &str, v: &mechlab_report::Verdict) {
    println!(
        "  [{mark}] {}: {} — predicted {} (source: {}), measured {}",
        v.id, v.claim, v.prediction, v.source, v.measured
    );
}

pub(super) fn print_measurements(s: &crate::run::summary::Summary) {
    for m in &s.measurements {
        println!(
            "  [measured] {}: {} = {} ({})",
            m.id, m.quantity, m.value, m.note
        );
    }
}
