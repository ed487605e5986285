//! Runs one topic preset the way the CLI does, printing the summary and the time:
//! `cargo run --release --example topic_run -- <preset|reproduce> [key=value ...]`.
//! `reproduce` runs every item of `mechlab reproduce topic`.

use std::time::Instant;

fn run_one(preset: &str, overrides: &[String], out: &std::path::Path) -> anyhow::Result<()> {
    let p = mechlab::config::presets::find(preset)
        .ok_or_else(|| anyhow::anyhow!("no preset {preset}"))?;
    let exp = mechlab::experiments::find("topic").expect("registered");
    let mut table = exp.default_config();
    mechlab::config::overlay(&mut table, &mechlab::config::parse(p.text, preset)?, preset)?;
    for o in overrides {
        mechlab::config::apply_override(&mut table, o)?;
    }
    exp.validate(&table, preset)?;
    let dir = out.join(format!(
        "{preset}{}",
        overrides
            .iter()
            .map(|o| format!("_{o}"))
            .collect::<String>()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let t = Instant::now();
    let mut ctx = mechlab::run::RunCtx::create(&dir, table, "topic_run", true)?;
    let s = exp.run(&mut ctx)?;
    ctx.finish(&s)?;
    println!(
        "== {preset} {overrides:?}: {:.1} s, {}",
        t.elapsed().as_secs_f64(),
        dir.display()
    );
    for (k, v) in &s.metrics {
        println!("  {k} = {v:.4}");
    }
    for v in &s.verdicts {
        println!(
            "  [{}] {} | {} | {}",
            if v.pass { "PASS" } else { "FAIL" },
            v.claim,
            v.prediction,
            v.measured
        );
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let out = std::path::PathBuf::from(
        std::env::var("TOPIC_RUNS").unwrap_or_else(|_| "/tmp/topic-runs".into()),
    );
    let t = Instant::now();
    if args.first().map(String::as_str) == Some("reproduce") {
        for item in mechlab::experiments::find("topic").unwrap().reproduce() {
            let mut o = item.overrides.clone();
            o.extend(args[1..].iter().cloned());
            run_one(item.preset, &o, &out)?;
        }
    } else {
        let preset = args.first().map(String::as_str).unwrap_or("topic-value");
        run_one(preset, &args[1.min(args.len())..], &out)?;
    }
    println!("total {:.1} s", t.elapsed().as_secs_f64());
    Ok(())
}
