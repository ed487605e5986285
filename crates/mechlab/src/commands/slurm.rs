//! Slurm glue for cluster sweeps: the `sbatch` scripts, their submission, and
//! the queue's view of a sweep's tasks.
//!
//! mechlab drives Slurm and schedules nothing itself. [`write_scripts`] writes
//! `slurm/array.sbatch` (one array task per shard, logs `logs/%A_%a.out`,
//! `--requeue`, the exact binary and version that planned the sweep) and
//! `slurm/merge.sbatch`; [`submit`] submits the array and then the merge with
//! `--dependency=afterany:<array>` so it runs whatever became of the tasks.
//! [`queue_states`] and [`accounting_states`] ask `squeue` and `sacct` (which needs
//! accounting, so its failure is reported, not fatal).

use super::cluster::{ClusterError, Plan, TaskState};
use crate::experiment::Registry;
use crate::run::{atomic, io_err};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The array tasks' log files, relative to the sweep folder (`%A`: array job id,
/// `%a`: task id); [`super::cluster::task_log`] rebuilds the same name.
pub const TASK_LOG: &str = "logs/%A_%a.out";
/// The merge job's log file, relative to the sweep folder.
pub const MERGE_LOG: &str = "logs/merge_%j.out";

/// The `sbatch` options a user chose.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SlurmOptions {
    pub partition: Option<String>,
    /// `--time`, e.g. `01:30:00`.
    pub time: Option<String>,
    pub cpus_per_task: Option<usize>,
    /// `--mem`, e.g. `4G`.
    pub mem: Option<String>,
    /// At most this many tasks at once (`--array=0-N%K`).
    pub array_parallelism: Option<usize>,
    /// Passed verbatim as `#SBATCH` lines (e.g. `--account=lab`).
    pub sbatch_args: Vec<String>,
}

impl SlurmOptions {
    /// Rejects values that would break the script or that Slurm would misread,
    /// naming the flag.
    pub fn validate(&self) -> Result<(), ClusterError> {
        let bad = |flag: &str, v: &str, want: &str| {
            Err(ClusterError::Arg(format!("{flag} {v}: expected {want}")))
        };
        if let Some(p) = &self.partition {
            if p.is_empty() || p.chars().any(|c| c.is_whitespace()) {
                return bad("--partition", p, "a partition name");
            }
        }
        if let Some(t) = &self.time {
            let ok = !t.is_empty()
                && t.chars()
                    .all(|c| c.is_ascii_digit() || c == ':' || c == '-')
                && t.chars().next().is_some_and(|c| c.is_ascii_digit());
            if !ok {
                return bad(
                    "--time",
                    t,
                    "a Slurm time such as 30:00, 01:30:00 or 2-00:00:00",
                );
            }
        }
        if let Some(m) = &self.mem {
            let digits = m.trim_end_matches(['K', 'M', 'G', 'T']);
            if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
                return bad("--mem", m, "a size such as 4000, 500M or 4G");
            }
        }
        if self.cpus_per_task == Some(0) {
            return bad("--cpus-per-task", "0", "at least 1");
        }
        if self.array_parallelism == Some(0) {
            return bad("--array-parallelism", "0", "at least 1");
        }
        for a in &self.sbatch_args {
            if !a.starts_with('-') || a.contains(['\n', '\r']) {
                return bad(
                    "--sbatch-arg",
                    a,
                    "one sbatch option on one line, e.g. --account=lab",
                );
            }
        }
        Ok(())
    }

    fn common_lines(&self, s: &mut String) {
        if let Some(p) = &self.partition {
            let _ = writeln!(s, "#SBATCH --partition={p}");
        }
        if let Some(t) = &self.time {
            let _ = writeln!(s, "#SBATCH --time={t}");
        }
        if let Some(m) = &self.mem {
            let _ = writeln!(s, "#SBATCH --mem={m}");
        }
        for a in &self.sbatch_args {
            let _ = writeln!(s, "#SBATCH {a}");
        }
    }
}

/// `'text'` for the shell.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The job name: the sweep folder's name.
fn job_name(sweep: &Path) -> String {
    let name = sweep
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "sweep".into());
    format!("mechlab-{name}")
}

/// `#SBATCH` lines cannot quote a path, so a folder with spaces or `%` (Slurm's
/// filename patterns) is refused up front rather than misread at submission.
fn check_path(sweep: &Path) -> Result<String, ClusterError> {
    let s = sweep.display().to_string();
    if s.chars().any(|c| c.is_whitespace() || c == '%') {
        return Err(ClusterError::Arg(format!(
            "{s}: a sweep folder for Slurm cannot contain spaces or `%` (choose another --out)"
        )));
    }
    Ok(s)
}

/// The lines both scripts end with: check that the binary is the one that planned
/// the sweep, then run it.
fn run_lines(s: &mut String, plan: &Plan, args: &str) {
    let bin = quote(&plan.mechlab.binary);
    let version = quote(&format!("mechlab {}", plan.mechlab.version));
    let _ = writeln!(s, "set -euo pipefail");
    let _ = writeln!(s, "MECHLAB={bin}");
    let _ = writeln!(s, "WANT={version}");
    let _ = writeln!(
        s,
        "GOT=\"$(\"$MECHLAB\" --version 2>/dev/null || true)\"\n\
         if [ \"$GOT\" != \"$WANT\" ]; then\n  \
         echo \"error: $MECHLAB is '$GOT', but $WANT planned this sweep\" >&2\n  \
         exit 2\n\
         fi"
    );
    let _ = writeln!(s, "exec \"$MECHLAB\" --quiet {args}");
}

/// The array script: task `i` of `n` runs shard `i/n` of the sweep in `sweep`
/// (an absolute path).
pub fn array_script(
    sweep: &Path,
    plan: &Plan,
    opts: &SlurmOptions,
) -> Result<String, ClusterError> {
    opts.validate()?;
    let dir = check_path(sweep)?;
    let mut s = String::from("#!/bin/bash\n");
    let _ = writeln!(s, "#SBATCH --job-name={}", job_name(sweep));
    let cap = opts
        .array_parallelism
        .map(|k| format!("%{k}"))
        .unwrap_or_default();
    let _ = writeln!(s, "#SBATCH --array=0-{}{cap}", plan.shards - 1);
    let _ = writeln!(s, "#SBATCH --output={dir}/{TASK_LOG}");
    // Append, so a requeued attempt does not erase the log of the one it replaces.
    let _ = writeln!(s, "#SBATCH --open-mode=append");
    let _ = writeln!(s, "#SBATCH --requeue");
    let _ = writeln!(
        s,
        "#SBATCH --cpus-per-task={}",
        opts.cpus_per_task.unwrap_or(1)
    );
    opts.common_lines(&mut s);
    let _ = writeln!(
        s,
        "\n# Written by mechlab {} ({}) for the sweep in {dir}.\n\
         # Task i of the array runs the runs whose index is i modulo {} (see sweep.json);\n\
         # a requeued task resumes its unfinished runs from their checkpoints.",
        plan.mechlab.version, plan.mechlab.binary, plan.shards
    );
    let _ = writeln!(
        s,
        "echo \"task ${{SLURM_ARRAY_TASK_ID}} of ${{SLURM_ARRAY_TASK_COUNT}}, \
         attempt $(( ${{SLURM_RESTART_COUNT:-0}} + 1 )), on $(hostname), $(date -u +%FT%TZ)\""
    );
    run_lines(
        &mut s,
        plan,
        &format!(
            "sweep-shard {} --shard \"${{SLURM_ARRAY_TASK_ID}}/${{SLURM_ARRAY_TASK_COUNT}}\" \
             --jobs \"${{SLURM_CPUS_PER_TASK:-1}}\"",
            quote(&dir)
        ),
    );
    Ok(s)
}

/// The merge script, submitted to run after the array whatever its outcome.
pub fn merge_script(
    sweep: &Path,
    plan: &Plan,
    opts: &SlurmOptions,
) -> Result<String, ClusterError> {
    opts.validate()?;
    let dir = check_path(sweep)?;
    let mut s = String::from("#!/bin/bash\n");
    let _ = writeln!(s, "#SBATCH --job-name={}-merge", job_name(sweep));
    let _ = writeln!(s, "#SBATCH --output={dir}/{MERGE_LOG}");
    let _ = writeln!(s, "#SBATCH --cpus-per-task=1");
    opts.common_lines(&mut s);
    let _ = writeln!(
        s,
        "\n# Written by mechlab {} ({}): merges the runs of {dir} into index.csv,\n\
         # summary.csv and summary.json, and lists failed or missing runs in failed.csv.",
        plan.mechlab.version, plan.mechlab.binary
    );
    run_lines(&mut s, plan, &format!("sweep-merge {}", quote(&dir)));
    Ok(s)
}

/// The two scripts' paths in a sweep folder.
pub fn script_paths(sweep: &Path) -> (PathBuf, PathBuf) {
    let d = sweep.join("slurm");
    (d.join("array.sbatch"), d.join("merge.sbatch"))
}

/// Writes `slurm/array.sbatch` and `slurm/merge.sbatch` into the (absolute) sweep
/// folder; returns their paths.
pub fn write_scripts(
    sweep: &Path,
    plan: &Plan,
    opts: &SlurmOptions,
) -> Result<(PathBuf, PathBuf), ClusterError> {
    let (a, m) = script_paths(sweep);
    for (path, text) in [
        (&a, array_script(sweep, plan, opts)?),
        (&m, merge_script(sweep, plan, opts)?),
    ] {
        std::fs::create_dir_all(sweep.join("slurm")).map_err(io_err(sweep))?;
        atomic::write(path, text.as_bytes()).map_err(io_err(path))?;
    }
    Ok((a, m))
}

/// The job ids of a submitted sweep, kept in `slurm/jobs.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Jobs {
    pub array: String,
    pub merge: String,
}

impl Jobs {
    pub fn read(sweep: &Path) -> Option<Jobs> {
        let text = std::fs::read_to_string(sweep.join("slurm").join("jobs.json")).ok()?;
        serde_json::from_str(&text).ok()
    }
}

/// Runs a Slurm command; its stdout, or an error naming it with its stderr.
fn slurm(program: &str, args: &[&str]) -> Result<String, ClusterError> {
    let command = std::iter::once(program)
        .chain(args.iter().copied())
        .collect::<Vec<_>>()
        .join(" ");
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| ClusterError::Slurm {
            command: command.clone(),
            reason: format!("{e} (is Slurm installed and on PATH?)"),
        })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(ClusterError::Slurm {
            command,
            reason: format!("{} ({})", err.trim().replace('\n', "; "), out.status),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The job id `sbatch --parsable` printed (`id` or `id;cluster`).
fn parse_job_id(stdout: &str) -> Option<String> {
    let id = stdout.trim().split(';').next()?.trim();
    (!id.is_empty() && id.chars().all(|c| c.is_ascii_digit())).then(|| id.to_string())
}

/// Submits the array, then the merge after it (`afterany`), and records the ids.
pub fn submit(sweep: &Path) -> Result<Jobs, ClusterError> {
    let (a, m) = script_paths(sweep);
    let (a, m) = (a.display().to_string(), m.display().to_string());
    let id = |out: String, what: &str| {
        parse_job_id(&out).ok_or_else(|| ClusterError::Slurm {
            command: format!("sbatch --parsable {what}"),
            reason: format!("no job id in its output `{}`", out.trim()),
        })
    };
    let array = id(slurm("sbatch", &["--parsable", &a])?, &a)?;
    let dep = format!("--dependency=afterany:{array}");
    let merge = id(slurm("sbatch", &["--parsable", &dep, &m])?, &m)?;
    let jobs = Jobs { array, merge };
    let path = sweep.join("slurm").join("jobs.json");
    let text = serde_json::to_string_pretty(&jobs).expect("serialises");
    atomic::write(&path, text.as_bytes()).map_err(io_err(&path))?;
    Ok(jobs)
}

/// Array task id -> state of each task of `job` still in the queue (`squeue`).
pub fn queue_states(job: &str) -> Result<BTreeMap<usize, TaskState>, ClusterError> {
    let out = slurm(
        "squeue",
        &["--noheader", "--array", "--jobs", job, "--format=%K %T"],
    );
    // squeue exits non-zero for a job id it has forgotten: nothing is queued.
    let out = match out {
        Ok(o) => o,
        Err(ClusterError::Slurm { reason, .. }) if reason.contains("Invalid job id") => {
            String::new()
        }
        Err(e) => return Err(e),
    };
    Ok(parse_queue(&out))
}

/// Parses `squeue --array --format="%K %T"` lines.
pub fn parse_queue(out: &str) -> BTreeMap<usize, TaskState> {
    out.lines()
        .filter_map(|l| {
            let (task, state) = l.trim().split_once(' ')?;
            let task: usize = task.parse().ok()?;
            let state = match state.trim() {
                "RUNNING" | "COMPLETING" | "CONFIGURING" | "STAGE_OUT" => TaskState::Running,
                "PENDING" | "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" | "SUSPENDED"
                | "RESIZING" | "SIGNALING" => TaskState::Pending,
                _ => TaskState::Ended,
            };
            Some((task, state))
        })
        .collect()
}

/// Array task id -> final state (`COMPLETED`, `FAILED`, `TIMEOUT`...) from
/// `sacct`, which fails where accounting is off.
pub fn accounting_states(job: &str) -> Result<BTreeMap<usize, String>, ClusterError> {
    let out = slurm(
        "sacct",
        &[
            "--noheader",
            "--parsable2",
            "--allocations",
            "--jobs",
            job,
            "--format=JobID,State",
        ],
    )?;
    Ok(out
        .lines()
        .filter_map(|l| {
            let (id, state) = l.split_once('|')?;
            let task = id.split_once('_')?.1.parse().ok()?;
            Some((task, state.split_whitespace().next()?.to_string()))
        })
        .collect())
}

/// What `mechlab sweep --slurm` did.
#[derive(Clone, Debug, PartialEq)]
pub struct Launched {
    /// The sweep folder, absolute.
    pub sweep: PathBuf,
    pub runs: usize,
    pub shards: usize,
    pub array_script: PathBuf,
    pub merge_script: PathBuf,
    /// `None` with `--dry-run`.
    pub jobs: Option<Jobs>,
}

/// Plans the sweep into `out` (`replace`: over another sweep there), writes its
/// scripts and, unless `dry_run`, submits them.
#[allow(clippy::too_many_arguments)]
pub fn launch(
    reg: &Registry,
    spec: &super::sweep::SweepSpec,
    out: &Path,
    shards: Option<usize>,
    opts: &SlurmOptions,
    writer: super::cluster::Writer,
    dry_run: bool,
    replace: bool,
) -> Result<Launched, ClusterError> {
    // Before any folder is made: a bad option should leave nothing behind.
    opts.validate()?;
    let plan = super::cluster::prepare(reg, spec, out, shards, writer, replace)?;
    let sweep = out.canonicalize().map_err(io_err(out))?;
    let (array_script, merge_script) = write_scripts(&sweep, &plan, opts)?;
    let jobs = if dry_run { None } else { Some(submit(&sweep)?) };
    Ok(Launched {
        runs: plan.runs().len(),
        shards: plan.shards,
        sweep,
        array_script,
        merge_script,
        jobs,
    })
}

/// `mechlab sweep-status`: the run counts from the folder, refined by `squeue`
/// (running, pending, or ended without finishing) and `sacct` when they answer.
pub fn status_report(sweep: &Path) -> Result<String, ClusterError> {
    let mut notes = Vec::new();
    let jobs = Jobs::read(sweep);
    let queue = match &jobs {
        None => {
            notes.push(
                "no slurm/jobs.json (not submitted, or --dry-run): counts from the folder alone"
                    .to_string(),
            );
            None
        }
        Some(j) => match queue_states(&j.array) {
            Ok(q) => Some(q),
            Err(e) => {
                notes.push(format!(
                    "squeue unavailable ({e}): counts from the folder alone"
                ));
                None
            }
        },
    };
    let s = super::cluster::status(sweep, queue.as_ref())?;
    let mut out = String::new();
    let _ = writeln!(out, "{}: {} runs", sweep.display(), s.planned);
    for (what, n) in [
        ("done", s.done),
        ("running", s.running),
        ("pending", s.pending),
        ("failed", s.failed),
    ] {
        let _ = writeln!(out, "  {what:8} {n}");
    }
    for (run, why, log) in &s.failures {
        let log = log.as_deref().unwrap_or("no log");
        let _ = writeln!(out, "  failed: {run}: {why} (log: {log})");
    }
    if let Some(j) = &jobs {
        let _ = writeln!(out, "array job {}, merge job {}", j.array, j.merge);
        match accounting_states(&j.array) {
            Ok(states) if !states.is_empty() => {
                let mut by: BTreeMap<&str, usize> = BTreeMap::new();
                for st in states.values() {
                    *by.entry(st.as_str()).or_default() += 1;
                }
                let list: Vec<String> = by.iter().map(|(k, v)| format!("{v} {k}")).collect();
                let _ = writeln!(out, "sacct: tasks {}", list.join(", "));
            }
            Ok(_) => notes.push("sacct knows no task of the array yet".into()),
            Err(e) => notes.push(format!("sacct unavailable: {e}")),
        }
    }
    if queue.is_none() {
        notes.push("without squeue, `running` means started and unfinished".into());
    }
    if sweep.join("summary.csv").is_file() {
        let _ = writeln!(out, "merged: {}", sweep.join("summary.csv").display());
    }
    for n in notes {
        let _ = writeln!(out, "note: {n}");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_ids_and_queue_lines_parse() {
        assert_eq!(parse_job_id("1234\n").as_deref(), Some("1234"));
        assert_eq!(parse_job_id("77;cluster\n").as_deref(), Some("77"));
        assert_eq!(parse_job_id("Submitted batch job 5"), None);
        let q = parse_queue("0 RUNNING\n3 PENDING\n4 REQUEUED\n5 COMPLETED\nbad line\n");
        assert_eq!(q.get(&0), Some(&TaskState::Running));
        assert_eq!(q.get(&3), Some(&TaskState::Pending));
        assert_eq!(q.get(&4), Some(&TaskState::Pending));
        assert_eq!(q.get(&5), Some(&TaskState::Ended));
        assert_eq!(q.len(), 4);
    }

    #[test]
    fn options_that_would_break_the_script_are_refused() {
        let ok = SlurmOptions {
            time: Some("01:30:00".into()),
            mem: Some("4G".into()),
            ..Default::default()
        };
        assert!(ok.validate().is_ok());
        for o in [
            SlurmOptions {
                time: Some("1h".into()),
                ..Default::default()
            },
            SlurmOptions {
                mem: Some("lots".into()),
                ..Default::default()
            },
            SlurmOptions {
                partition: Some("a b".into()),
                ..Default::default()
            },
            SlurmOptions {
                array_parallelism: Some(0),
                ..Default::default()
            },
            SlurmOptions {
                sbatch_args: vec!["--x\n#SBATCH --y".into()],
                ..Default::default()
            },
            SlurmOptions {
                sbatch_args: vec!["account=lab".into()],
                ..Default::default()
            },
        ] {
            assert!(o.validate().is_err(), "{o:?}");
        }
    }
}
