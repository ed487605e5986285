//! Runs an induction preset the way the CLI will, until the CLI lands:
//! `cargo run --release -p mechlab --example run_induction -- <preset> <out dir> [key=value ...]`.
//! With the preset `reproduce`, runs what `mechlab reproduce induction` runs.

use mechlab::config::{apply_override, overlay, parse, presets};
use mechlab::run::RunCtx;
use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (name, out) = match (args.first(), args.get(1)) {
        (Some(n), Some(o)) => (n.clone(), o.clone()),
        _ => anyhow::bail!("usage: run_induction <preset|reproduce> <out dir> [key=value ...]"),
    };
    let exp = mechlab::experiments::find("induction").expect("registered");
    let mut items = Vec::new();
    if name == "reproduce" {
        for it in exp.reproduce() {
            items.push((it.preset.to_string(), it.overrides.clone()));
        }
    } else {
        items.push((name.clone(), Vec::new()));
    }
    for (preset, mut overrides) in items {
        overrides.extend(args[2..].iter().cloned());
        let p = presets::find(&preset).ok_or_else(|| anyhow::anyhow!("no preset {preset}"))?;
        let mut table = exp.default_config();
        overlay(&mut table, &parse(p.text, &preset)?, &preset)?;
        for o in &overrides {
            apply_override(&mut table, o)?;
        }
        exp.validate(&table, &preset)?;
        let dir = std::path::Path::new(&out).join(&preset);
        let t = Instant::now();
        let mut ctx = RunCtx::create(
            &dir,
            table,
            &format!("run_induction {preset} {overrides:?}"),
            false,
        )?;
        let summary = exp.run(&mut ctx)?;
        ctx.finish(&summary)?;
        println!("{preset}: {:.1} s", t.elapsed().as_secs_f64());
        println!("{}", serde_json::to_string_pretty(&summary)?);
    }
    Ok(())
}
