//! Times full-batch training epochs of the simplified induction model (3 000
//! sequences of L = 100, S = 3) through the generic trainer, without any
//! intervention and with a training-time intervention configured that never
//! fires (`freeze` of `W` from a step past the end), in alternating rounds.
//! The two must cost the same: the trainer's per-update check is one call per
//! parameter group.
//!
//! `cargo run --release --example bench_intervention [epochs] [rounds]`

use mechlab::papers::induction::data::{generate, MarkovSpec};
use mechlab::papers::induction::interventions::{Freezes, HeadInterventions, Intervention};
use mechlab::papers::induction::simplified::{Simplified, SimplifiedConfig};
use mechlab::papers::induction::{ModelKind, Task};
use mechlab::run::{RunConfig, RunCtx};
use mechlab::train::{fit, TrainConfig};
use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let epochs: u64 = args.first().map_or(Ok(60), |s| s.parse())?;
    let rounds: usize = args.get(1).map_or(Ok(5), |s| s.parse())?;
    let data = generate(
        &MarkovSpec {
            n_seqs: 3000,
            ..MarkovSpec::default()
        },
        2024,
    )
    .map_err(anyhow::Error::msg)?;
    let unused: Intervention =
        toml::from_str("kind = 'freeze'\nparams = 'W'\nfrom_step = 1000000000")?;
    let cfg = TrainConfig {
        lr: 1.0,
        steps: epochs,
        log_every: 0,
        ..TrainConfig::default()
    };
    let table: toml::Table = toml::from_str(
        "experiment = \"bench\"\nseed = 0\n[run]\ncheckpoints = false\nprobe_every = 1000000000\n",
    )?;
    let tmp = tempfile::tempdir()?;
    let mut times: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut losses = [0.0; 2];
    for r in 0..rounds {
        // Alternate which variant goes first, so that drift on a shared machine
        // does not favour one.
        let order = if r % 2 == 0 { [0, 1] } else { [1, 0] };
        for v in order {
            let entries = if v == 0 { vec![] } else { vec![unused.clone()] };
            let mut task = Task {
                model: Simplified::<f64>::new(&SimplifiedConfig::default()),
                tokens: data.tokens.clone(),
                seq_len: 100,
                freezes: Freezes::new(&entries, ModelKind::Simplified)
                    .map_err(anyhow::Error::msg)?,
                heads: HeadInterventions::default(),
            };
            let mut ctx = RunCtx::create(
                &tmp.path().join(format!("r{r}v{v}")),
                table.clone(),
                "bench",
                true,
            )?;
            ctx.set_run_config(RunConfig {
                checkpoints: false,
                probe_every: 1_000_000_000,
                ..RunConfig::default()
            });
            let t0 = Instant::now();
            let f = fit(&mut task, &cfg, &mut ctx, &mut |_, _, _| Ok(()))?;
            times[v].push(t0.elapsed().as_secs_f64() / epochs as f64);
            losses[v] = f.final_loss;
        }
    }
    assert_eq!(
        losses[0].to_bits(),
        losses[1].to_bits(),
        "an unused intervention changes nothing"
    );
    for (name, t) in ["no intervention", "unused freeze"]
        .iter()
        .zip(times.iter_mut())
    {
        t.sort_by(f64::total_cmp);
        println!("{name:>16}: median {:.3} ms/epoch over {rounds} rounds of {epochs} epochs (min {:.3}, max {:.3})",
            1e3 * t[t.len() / 2], 1e3 * t[0], 1e3 * t[t.len() - 1]);
    }
    Ok(())
}
