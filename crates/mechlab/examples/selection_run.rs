//! Runs a `selection` preset the way the CLI does, into a fresh folder, and prints
//! its summary and wall time:
//! `cargo run --release --example selection_run -- selection-imdb runs/imdb [key=value ...]`.
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let preset = args
        .first()
        .map(String::as_str)
        .unwrap_or("selection-synthetic");
    let dir = std::path::PathBuf::from(
        args.get(1)
            .cloned()
            .unwrap_or_else(|| format!("/tmp/{preset}")),
    );
    let exp = mechlab::experiments::find("selection").expect("registered");
    let mut table = exp.default_config();
    let text = mechlab::config::presets::find(preset)
        .ok_or("no such preset")?
        .text;
    mechlab::config::overlay(&mut table, &mechlab::config::parse(text, preset)?, preset)?;
    for o in args.iter().skip(2) {
        mechlab::config::apply_override(&mut table, o)?;
    }
    exp.validate(&table, preset)?;
    let _ = std::fs::remove_dir_all(&dir);
    let mut ctx = mechlab::run::RunCtx::create(&dir, table, "selection_run", true)?;
    let t0 = Instant::now();
    let summary = exp.run(&mut ctx)?;
    ctx.finish(&summary)?;
    println!("{}", serde_json::to_string_pretty(&summary)?);
    println!("wall {:.2} s", t0.elapsed().as_secs_f64());
    Ok(())
}
