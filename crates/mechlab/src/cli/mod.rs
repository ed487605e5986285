//! The `mechlab` command line, as a library entry point that takes the registry.
//!
//! `src/main.rs` is `mechlab::cli::main(mechlab::papers::registry())`; a crate that
//! adds its own paper calls the same with `papers::registry().with(&MyPaper)` and gets
//! every command (`list`, `run`, `resume`, `report`, `sweep`, `merge`, `export`,
//! `reproduce`, `encode`) for it unchanged. Errors become one line on stderr and an exit
//! code here, and only here (`anyhow` at the edge; typed errors below).

mod handlers;

use crate::commands::{self, slurm, sweep};
use crate::experiment::Registry;
use crate::train::INTERRUPTED;
use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::sync::atomic::Ordering;

#[derive(Parser)]
#[command(
    name = "mechlab",
    version,
    about = "A lab for the provable mechanisms of transformers"
)]
struct Cli {
    /// No progress bars (for scripts and CI).
    #[arg(long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

// Parsed once per process, so a large variant costs nothing worth boxing for.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Cmd {
    /// List the presets.
    List,
    /// Run a preset or a config file.
    Run {
        /// A preset name (see `mechlab list`) or a TOML file.
        source: String,
        /// Override a config key, e.g. --set train.lr=0.5 (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        /// The run's seed (default: the config's `seed`).
        #[arg(long)]
        seed: Option<u64>,
        /// Run folder (default runs/<preset>-s<seed>).
        #[arg(long)]
        out: Option<PathBuf>,
        /// A corpus file or folder for the presets that read real text (sets the
        /// experiment's data key: data.path for selection, wiki.file for topic).
        #[arg(long)]
        data: Option<PathBuf>,
    },
    /// Continue an interrupted run from its latest checkpoint.
    Resume { run: PathBuf },
    /// Rebuild a run's figures and report from its folder.
    Report { run: PathBuf },
    /// Run a grid of overrides over several seeds in parallel.
    Sweep {
        source: String,
        /// key=v1,v2,... (repeatable; the grid is their product).
        #[arg(long = "grid", value_name = "KEY=V1,V2")]
        grid: Vec<String>,
        /// Seeds: a..b (b excluded) or a,b,c.
        #[arg(long, default_value = "0..2")]
        seeds: String,
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        /// Run only slice i of n (i from 0), for job arrays; merge with `mechlab merge`.
        #[arg(long)]
        shard: Option<String>,
        /// Sweep folder (default sweeps/<preset>). The same sweep into it again
        /// continues it (finished runs are kept); another sweep is refused.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Delete the sweep results already in the folder and start over.
        #[arg(long)]
        replace: bool,
        /// Runs at a time (default: the number of cores).
        #[arg(long, conflicts_with = "slurm")]
        jobs: Option<usize>,
        #[command(flatten)]
        slurm: SlurmArgs,
    },
    /// Run one shard of a cluster sweep (what each Slurm array task runs):
    /// resumes unfinished runs from their checkpoints, skips finished ones.
    SweepShard {
        sweep: PathBuf,
        /// i/n: run the runs whose index is i modulo n.
        #[arg(long)]
        shard: String,
        /// Runs at a time within the shard.
        #[arg(long, default_value_t = 1)]
        jobs: usize,
    },
    /// Merge a cluster sweep's runs into index.csv and summary.csv / summary.json,
    /// reporting failed and missing runs with their logs.
    SweepMerge { sweep: PathBuf },
    /// How many runs of a cluster sweep are done, running, pending and failed.
    SweepStatus { sweep: PathBuf },
    /// Merge the folders of a sharded sweep into one index and summary.
    Merge {
        /// The shards' sweep folders.
        shards: Vec<PathBuf>,
        /// The merged sweep's folder.
        #[arg(long)]
        out: PathBuf,
    },
    /// Export a run's parameters and recorded activations for numpy, or its
    /// transformer as a TransformerLens state dict and config.
    Export {
        run: PathBuf,
        /// Write .npy files into <run>/export.
        #[arg(long)]
        npy: bool,
        /// Write model.safetensors and config.json for TransformerLens's
        /// HookedTransformer (runs of the engine's transformer: transformer, lm-induction).
        #[arg(long)]
        transformer_lens: bool,
        /// Write model.safetensors and config.json as karpathy/nanoGPT's GPT
        /// state dict and GPTConfig (a model nanoGPT can hold: tied, exact GELU, ...).
        #[arg(long)]
        nanogpt: bool,
        /// Checkpoint step (default: the latest).
        #[arg(long)]
        step: Option<u64>,
        /// Folder for --transformer-lens or --nanogpt (default: <run>/export/<format>).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// A trained run's causal questions, each beside a control, on the run's own
    /// evaluation data (every paper): intervene.json, figures and a report section.
    Intervene {
        run: PathBuf,
        /// Checkpoint step (default: the latest).
        #[arg(long)]
        step: Option<u64>,
        /// Induction runs: each head's ablation table, kind zero, mean or resample
        /// (repeatable; default all three when --patch is not given).
        #[arg(long, value_name = "KIND")]
        ablate: Vec<String>,
        /// Induction runs: patch each head's output at each position from clean
        /// into parent-corrupted sequences.
        #[arg(long)]
        patch: bool,
    },
    /// Activation patching and attribution patching on a run's model or a
    /// pretrained encoder: each cell's clean activation patched into the
    /// corrupted run, and its first-order estimate from one backward
    /// (patching.json, patching.html, and a section of the run's report).
    Patch {
        /// A run's folder, or a pretrained encoder (a Hugging Face BERT folder
        /// or a model name in the shared models folder).
        run: PathBuf,
        /// Clean token ids, a [batch, pos] integer .npy file.
        #[arg(long)]
        clean: PathBuf,
        /// Corrupted token ids of the same shape.
        #[arg(long)]
        corrupted: PathBuf,
        /// `loss` (the clean tokens' next-token loss) or
        /// `logit-diff:CORRECT,INCORRECT@POS`.
        #[arg(long, default_value = "loss")]
        metric: String,
        /// resid_pre, attn_out, mlp_out, head_out or head_out_by_pos (repeatable).
        #[arg(long = "kind", default_value = "head_out")]
        kind: Vec<String>,
        /// Checkpoint step (default: the latest).
        #[arg(long)]
        step: Option<u64>,
        /// Output folder (default: <run>/patching; for a pretrained model,
        /// ./patching).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// What the run's experiment measures at a probe step (the transformer's
    /// detectors, composition scores, lens, ...) on any checkpoint, as JSON.
    Measure {
        run: PathBuf,
        /// Checkpoint step (default: the latest).
        #[arg(long)]
        step: Option<u64>,
    },
    /// A pretrained encoder's activations on texts, under TransformerLens hook
    /// names (no run needed): prints the pieces and shapes, --out writes them,
    /// --html shows every head's attention in the report's viewer.
    Encode {
        /// A Hugging Face BERT folder, or a model name in the shared models folder.
        model: String,
        /// A text to encode (repeatable; the texts form one padded batch).
        #[arg(long = "text", required = true)]
        text: Vec<String>,
        /// A hook point to record (repeatable; default: every one; --html adds
        /// every layer's attention pattern).
        #[arg(long = "hook", value_name = "NAME")]
        hook: Vec<String>,
        /// A safetensors file for input_ids and the activations.
        #[arg(long)]
        out: Option<PathBuf>,
        /// A self-contained HTML page with the attention viewer.
        #[arg(long)]
        html: Option<PathBuf>,
    },
    /// Run every registered paper experiment and write one combined report.
    Reproduce {
        /// Papers to run: induction, markov-icl, selection, topic, topic-bert,
        /// attention-svm, lm-induction, birth, icl-regression, causal-structure
        /// (default: all).
        papers: Vec<String>,
        /// Exit non-zero when a claim fails its rule over its seeds (or a run fails).
        #[arg(long)]
        check: bool,
        /// The combined report's folder (each run in a subfolder).
        #[arg(long, default_value = "runs/reproduce")]
        out: PathBuf,
        /// Seeds per setting (default: each setting's own, 1 to 5): the preset's
        /// seed and the ones after it. Each claim is judged over them by its rule.
        #[arg(long)]
        seeds: Option<u32>,
        /// Runs at a time, sharing the cores (default: 2, or 1 on one core); the
        /// results do not depend on it.
        #[arg(long)]
        jobs: Option<usize>,
    },
}

/// `mechlab sweep --slurm` and its sbatch options.
#[derive(clap::Args)]
struct SlurmArgs {
    /// Submit the sweep as a Slurm job array (one task per shard) plus a merge job.
    #[arg(long, conflicts_with = "shard")]
    slurm: bool,
    /// Write the sbatch scripts but submit nothing.
    #[arg(long, requires = "slurm")]
    dry_run: bool,
    /// Array tasks (default: one per run).
    #[arg(long, requires = "slurm")]
    shards: Option<usize>,
    /// The Slurm partition (default: the cluster's).
    #[arg(long, requires = "slurm")]
    partition: Option<String>,
    /// Time limit per task, e.g. 01:30:00.
    #[arg(long, requires = "slurm", value_name = "HH:MM:SS")]
    time: Option<String>,
    /// CPUs per task (also the runs each task runs at a time; default 1).
    #[arg(long, requires = "slurm")]
    cpus_per_task: Option<usize>,
    /// Memory per task, e.g. 4G.
    #[arg(long, requires = "slurm")]
    mem: Option<String>,
    /// At most K tasks at once (--array=0-N%K).
    #[arg(long, requires = "slurm", value_name = "K")]
    array_parallelism: Option<usize>,
    /// Any other sbatch option, written as an #SBATCH line (repeatable).
    #[arg(
        long = "sbatch-arg",
        requires = "slurm",
        value_name = "ARG",
        allow_hyphen_values = true
    )]
    sbatch_arg: Vec<String>,
}

/// Runs the command line with `registry`'s papers and exits with its status.
pub fn main(registry: Registry) -> ! {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let _ = ctrlc::set_handler(|| {
        if INTERRUPTED.swap(true, Ordering::SeqCst) {
            std::process::exit(130);
        }
        eprintln!("\ninterrupt: writing a checkpoint (Ctrl-C again to quit at once)");
    });
    match run(registry, std::env::args()) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("error: {}", error_line(&e));
            std::process::exit(1);
        }
    }
}

/// The error and its causes on one line, each cause once: most of our typed
/// errors already name their source in their own message (`{path}: {source}`),
/// and anyhow's `{:#}` would print it a second time.
pub fn error_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !line.contains(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
    }
    line
}

/// Parses a command line as `mechlab` would (`args[0]` is the program name)
/// without running it: `Err` holds clap's message. The docs' test checks every
/// `mechlab ...` line quoted in README.md and docs/ with it.
pub fn parse_only<I, S>(args: I) -> std::result::Result<(), String>
where
    I: IntoIterator<Item = S>,
    S: Into<std::ffi::OsString> + Clone,
{
    Cli::try_parse_from(args)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The command-line reference as Markdown: `mechlab --help`, then each
/// command's `--help`, as clap prints them. docs/cli.md holds this text, and a
/// test fails when the two differ (`MECHLAB_BLESS=1` rewrites the page).
pub fn reference_markdown() -> String {
    use clap::CommandFactory;
    let mut cli = Cli::command();
    cli.build();
    let mut out = String::new();
    let block = |out: &mut String, title: &str, help: String| {
        let help: Vec<&str> = help.trim_end().lines().map(str::trim_end).collect();
        out.push_str(&format!(
            "## `{title}`\n\n```text\n{}\n```\n\n",
            help.join("\n")
        ));
    };
    block(&mut out, "mechlab", cli.render_long_help().to_string());
    let names: Vec<String> = cli
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .filter(|n| n != "help")
        .collect();
    for name in names {
        let sub = cli.find_subcommand_mut(&name).expect("listed above");
        block(
            &mut out,
            &format!("mechlab {name}"),
            sub.render_long_help().to_string(),
        );
    }
    out
}

/// Runs one command line (`args[0]` is the program name) with `registry`'s
/// papers; returns the exit status.
pub fn run<I, S>(registry: Registry, args: I) -> Result<i32>
where
    I: IntoIterator<Item = S>,
    S: Into<std::ffi::OsString> + Clone,
{
    let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    let command = args
        .iter()
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        // --help, --version and usage errors: clap prints them as it always does.
        Err(e) => {
            let _ = e.print();
            return Ok(e.exit_code());
        }
    };
    dispatch(&registry, cli.cmd, &command, cli.quiet)
}

/// One command, each in its own function below.
fn dispatch(reg: &Registry, cmd: Cmd, command: &str, quiet: bool) -> Result<i32> {
    match cmd {
        Cmd::List => handlers::list(reg),
        Cmd::Run {
            source,
            set,
            seed,
            out,
            data,
        } => handlers::run_source(reg, &source, set, seed, out, data, command, quiet),
        Cmd::Resume { run } => {
            let summary = commands::resume(reg, &run, quiet)?;
            handlers::print_verdicts(reg, &run, &summary);
            println!("report: {}", run.join("report.html").display());
            Ok(0)
        }
        Cmd::Intervene {
            run,
            step,
            ablate,
            patch,
        } => handlers::intervene(reg, &run, step, ablate, patch),
        Cmd::Patch {
            run,
            clean,
            corrupted,
            metric,
            kind,
            step,
            out,
        } => {
            let metric = commands::patch::Metric::parse(&metric).map_err(anyhow::Error::msg)?;
            let kinds = kind
                .iter()
                .map(|k| commands::patch::Kind::parse(k))
                .collect::<Result<Vec<_>, _>>()
                .map_err(anyhow::Error::msg)?;
            let dir = commands::patch::run(
                reg,
                &run,
                step,
                &clean,
                &corrupted,
                &metric,
                &kinds,
                out.as_deref(),
            )
            .with_context(|| format!("patching {}", run.display()))?;
            println!("{}", dir.join("patching.json").display());
            Ok(0)
        }
        Cmd::Measure { run, step } => {
            let v = commands::intervene::measure(reg, &run, step)
                .with_context(|| format!("measuring {}", run.display()))?;
            println!(
                "{}",
                serde_json::to_string_pretty(&v).expect("JSON serialises")
            );
            Ok(0)
        }
        Cmd::Encode {
            model,
            text,
            hook,
            out,
            html,
        } => handlers::encode(commands::encode::Request {
            model,
            texts: text,
            hooks: hook,
            out,
            html,
        }),
        Cmd::Report { run } => {
            commands::report::build(reg, &run)?;
            println!("report: {}", run.join("report.html").display());
            Ok(0)
        }
        Cmd::Sweep {
            source,
            grid,
            seeds,
            set,
            shard,
            out,
            replace,
            jobs,
            slurm: sl,
        } => {
            let spec = sweep::SweepSpec {
                source: source.clone(),
                overrides: set,
                grid: grid
                    .iter()
                    .map(|g| sweep::parse_grid(g))
                    .collect::<Result<_, _>>()?,
                seeds: sweep::parse_seeds(&seeds)?,
                shard: shard.as_deref().map(sweep::parse_shard).transpose()?,
            };
            let stem = std::path::Path::new(&source)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or(source.clone());
            let out = out.unwrap_or_else(|| PathBuf::from("sweeps").join(stem));
            if sl.slurm {
                return handlers::submit_sweep(reg, &spec, &out, sl, replace);
            }
            handlers::run_sweep(reg, &spec, &out, jobs, command, replace)
        }
        Cmd::SweepShard { sweep, shard, jobs } => {
            handlers::sweep_shard(reg, &sweep, &shard, jobs, command)
        }
        Cmd::SweepMerge { sweep } => handlers::sweep_merge(&sweep),
        Cmd::SweepStatus { sweep } => {
            print!("{}", slurm::status_report(&sweep)?);
            Ok(0)
        }
        Cmd::Merge { shards, out } => {
            let rows = sweep::merge(&shards, &out)?;
            println!(
                "{} runs merged: {}",
                rows.len(),
                out.join("summary.csv").display()
            );
            Ok(0)
        }
        Cmd::Export {
            run,
            npy,
            transformer_lens,
            nanogpt,
            step,
            out,
        } => {
            use commands::export::Format;
            let format = match (npy, transformer_lens, nanogpt) {
                (true, false, false) => None,
                (false, true, false) => Some((Format::TransformerLens, "transformer_lens")),
                (false, false, true) => Some((Format::NanoGpt, "nanogpt")),
                _ => bail!("choose one format: --npy, --transformer-lens or --nanogpt"),
            };
            let files = match format {
                None => commands::export::export(&run, step)
                    .with_context(|| format!("exporting {}", run.display()))?,
                Some((f, name)) => {
                    let out = out.unwrap_or_else(|| run.join("export").join(name));
                    commands::export::model(&run, step, &out, f)
                        .with_context(|| format!("exporting {}", run.display()))?
                }
            };
            for f in &files {
                println!("{}", f.display());
            }
            Ok(0)
        }
        Cmd::Reproduce {
            papers,
            check,
            out,
            jobs,
            seeds,
        } => {
            if jobs == Some(0) {
                bail!("reproduce --jobs 0: expected at least 1 run at a time");
            }
            if seeds == Some(0) {
                bail!("reproduce --seeds 0: expected at least 1 seed per setting");
            }
            let opts = commands::reproduce::Options {
                quiet,
                command: command.to_string(),
                jobs: jobs.unwrap_or_else(commands::reproduce::default_jobs),
                seeds,
            };
            handlers::reproduce(reg, &papers, check, &out, &opts)
        }
    }
}
