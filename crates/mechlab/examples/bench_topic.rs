//! Times whole training epochs of the topic presets (f32, batch 40, AdamW) and
//! writes, per preset, the data, the epoch order, the initial parameters and the
//! first losses for `bench/topic/torch_topic.py`, which computes the same thing the
//! authors' PyTorch code computes and checks it gets the same losses.
//!
//! `RAYON_NUM_THREADS=2 cargo run --release --example bench_topic -- OUT_DIR [preset ...]`

use mechlab::papers::topic::data::{LdaModel, MlmSet};
use mechlab::papers::topic::model::TopicMlm;
use mechlab::papers::topic::{make_set, TopicConfig, TopicRun};
use mechlab::run::RunCtx;
use mechlab_engine::matmul::{matmul, measured_peak_gflops, Op};
use mechlab_engine::Parameters;
use rayon::prelude::*;
use std::io::Write;
use std::path::Path;
use std::time::Instant;

fn table(preset: &str, extra: &[&str]) -> anyhow::Result<toml::Table> {
    let exp = mechlab::papers::registry().find("topic").unwrap();
    let p = mechlab::papers::registry().find_preset(preset).unwrap();
    let mut t = exp.default_config();
    mechlab::config::overlay(&mut t, &mechlab::config::parse(p.text, preset)?, preset)?;
    for o in [
        "model.dtype=\"f32\"",
        "run.checkpoints=false",
        "run.checkpoint_log_until=0",
        "run.checkpoint_every=0",
        "run.probe_every=0",
        "mlm.patience=0",
        "data.fresh_masks=false",
    ]
    .iter()
    .chain(extra)
    {
        mechlab::config::apply_override(&mut t, o)?;
    }
    Ok(t)
}

fn build(cfg: &TopicConfig, seed: u64) -> anyhow::Result<(TopicRun<f32>, MlmSet)> {
    let lda = LdaModel::new(&cfg.data).map_err(anyhow::Error::msg)?;
    let train = make_set(&lda, &cfg.data, cfg.data.n_train, seed, 10);
    let topics = lda.topic_of_token();
    let model = TopicMlm::<f32>::new(&cfg.model, lda.d_vocab(), &topics, train.max_len(), seed)
        .map_err(anyhow::Error::msg)?;
    let copy = train.clone();
    Ok((
        TopicRun::new(
            model,
            train,
            &cfg.data,
            lda.d_vocab(),
            cfg.mlm.batch_size,
            0,
            seed,
        ),
        copy,
    ))
}

/// Trains `steps` updates through the generic loop; returns (seconds, logged losses).
fn train(
    dir: &Path,
    t: toml::Table,
    steps: u64,
    log_every: u64,
) -> anyhow::Result<(f64, Vec<f64>, TopicRun<f32>)> {
    let mut t = t;
    mechlab::config::apply_override(&mut t, &format!("train.steps={steps}"))?;
    mechlab::config::apply_override(&mut t, &format!("train.log_every={log_every}"))?;
    let _ = std::fs::remove_dir_all(dir);
    let cfg: TopicConfig = mechlab::config::typed(&t, "bench")?;
    let mut ctx = RunCtx::create(dir, t, "bench", true)?;
    ctx.set_run_config(cfg.run.clone());
    let (mut run, _) = build(&cfg, cfg.seed)?;
    let mut probe = |_: &mut TopicRun<f32>, _: u64, _: &mut RunCtx| Ok(());
    let t0 = Instant::now();
    mechlab::train::fit(&mut run, &cfg.train, &mut ctx, &mut probe)?;
    let secs = t0.elapsed().as_secs_f64();
    let rec = mechlab::run::metrics::read(ctx.metrics().path()).map_err(anyhow::Error::msg)?;
    Ok((
        secs,
        mechlab::run::metrics::series(&rec, "train", "loss").1,
        run,
    ))
}

fn write_bin(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    std::fs::File::create(path)?.write_all(bytes)?;
    Ok(())
}

/// FLOPs mechlab executes in one epoch (its skipped work not counted; `dv`:
/// whether the head's backward computes `Pᵀ dz`).
fn our_flops(cfg: &TopicConfig, set: &MlmSet, d: usize, dv: bool) -> f64 {
    let trained_attn = cfg.model.attention == mechlab::papers::topic::model::AttnKind::Trained;
    let head_products = if dv { 12.0 } else { 10.0 };
    let mut f = 0.0;
    for i in 0..set.len() {
        let r = set.range(i);
        let l = r.len() as f64;
        let s = set.label[r].iter().filter(|&&x| x != u32::MAX).count() as f64;
        let d = d as f64;
        f += if trained_attn {
            head_products * s * l * d
        } else {
            4.0 * d * d
        };
        if cfg.model.decoder != mechlab::papers::topic::model::DecoderKind::Identity {
            f += 6.0 * s.min(if trained_attn { s } else { 1.0 }) * d * d;
        }
    }
    f
}

/// Seconds for the trained head's matrix products alone (six, or five without
/// `Pᵀ dz` when `!dv`), over every document of `set` at its shapes (S labelled
/// rows, L tokens, d), documents spread over the threads with nothing else
/// between them (best of 3): how fast an epoch could be if everything but the
/// products cost nothing, the ceiling of its share of peak.
fn products_alone(set: &MlmSet, d: usize, dv: bool) -> f64 {
    let shapes: Vec<(usize, usize)> = (0..set.len())
        .map(|i| {
            let r = set.range(i);
            let s = set.label[r.clone()]
                .iter()
                .filter(|&&x| x != u32::MAX)
                .count();
            (s, r.len())
        })
        .collect();
    let lmax = shapes.iter().map(|x| x.1).max().unwrap_or(0);
    let fill = |n: usize| -> Vec<f32> { (0..n).map(|i| ((i % 7) as f32 - 3.0) * 0.1).collect() };
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let t0 = Instant::now();
        shapes.par_iter().for_each_init(
            || {
                [
                    fill(lmax * d),
                    fill(lmax * d),
                    fill(lmax * d),
                    fill(lmax * lmax),
                    fill(lmax * d),
                    fill(lmax * d),
                ]
            },
            |b, &(s, l)| {
                let [q, k, v, pat, dz, out] = b;
                // forward: scores = q kᵀ, z = P v
                matmul(
                    &mut pat[..s * l],
                    &q[..s * d],
                    Op::N,
                    &k[..l * d],
                    Op::T,
                    s,
                    d,
                    l,
                    false,
                );
                matmul(
                    &mut out[..s * d],
                    &pat[..s * l],
                    Op::N,
                    &v[..l * d],
                    Op::N,
                    s,
                    l,
                    d,
                    false,
                );
                // backward: dP = dz vᵀ, dv = Pᵀ dz, dq = dP k, dk = dPᵀ q
                matmul(
                    &mut pat[..s * l],
                    &dz[..s * d],
                    Op::N,
                    &v[..l * d],
                    Op::T,
                    s,
                    d,
                    l,
                    false,
                );
                if dv {
                    matmul(
                        &mut out[..l * d],
                        &pat[..s * l],
                        Op::T,
                        &dz[..s * d],
                        Op::N,
                        l,
                        s,
                        d,
                        false,
                    );
                }
                matmul(
                    &mut dz[..s * d],
                    &pat[..s * l],
                    Op::N,
                    &k[..l * d],
                    Op::N,
                    s,
                    l,
                    d,
                    false,
                );
                matmul(
                    &mut out[..l * d],
                    &pat[..s * l],
                    Op::T,
                    &q[..s * d],
                    Op::N,
                    l,
                    s,
                    d,
                    false,
                );
            },
        );
        best = best.min(t0.elapsed().as_secs_f64());
    }
    best
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let out = Path::new(
        args.first()
            .map(String::as_str)
            .unwrap_or("/tmp/bench-topic"),
    )
    .to_path_buf();
    let presets: Vec<String> = if args.len() > 1 {
        args[1..].to_vec()
    } else {
        [
            "topic-value",
            "topic-embedding",
            "topic-attention",
            "topic-two-stage",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    std::fs::create_dir_all(&out)?;
    let peak = measured_peak_gflops::<f32>(1024, rayon::current_num_threads(), 8);
    println!(
        "threads {}, measured f32 matmul peak {peak:.1} GFLOP/s",
        rayon::current_num_threads()
    );
    let mut summary = serde_json::Map::new();
    for preset in &presets {
        let dir = out.join(preset);
        std::fs::create_dir_all(&dir)?;
        let t = table(preset, &[])?;
        // 1. the first 5 losses, for the cross-check
        let (_, losses, _) = train(&dir.join("check"), t.clone(), 5, 1)?;
        // 2. one whole epoch, timed (best of 2)
        let cfg: TopicConfig = mechlab::config::typed(&t, preset)?;
        let spe = (cfg.data.n_train as u64).div_ceil(cfg.mlm.batch_size as u64);
        let mut best = f64::INFINITY;
        let mut last = None;
        for rep in 0..2 {
            let (secs, _, run) =
                train(&dir.join(format!("epoch{rep}")), t.clone(), spe, 1_000_000)?;
            best = best.min(secs);
            last = Some(run);
        }
        let run = last.expect("ran");
        // 3. the data, the order and the initial parameters for PyTorch
        let (init, set) = build(&cfg, cfg.seed)?;
        let u32s = |v: &[u32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        write_bin(&dir.join("input.bin"), &u32s(&set.input))?;
        write_bin(&dir.join("label.bin"), &u32s(&set.label))?;
        write_bin(
            &dir.join("hidden.bin"),
            &set.hidden.iter().map(|&h| h as u8).collect::<Vec<u8>>(),
        )?;
        write_bin(
            &dir.join("offsets.bin"),
            &set.offsets
                .iter()
                .flat_map(|x| (*x as u64).to_le_bytes())
                .collect::<Vec<u8>>(),
        )?;
        write_bin(&dir.join("order.bin"), &u32s(run.order()))?;
        let mut params = serde_json::Map::new();
        for p in init.model.p.iter() {
            params.insert(
                p.name().to_string(),
                serde_json::json!({"shape": p.shape(), "value": p.value()}),
            );
        }
        let mut trained = Vec::new();
        init.model
            .visit(&mut |p| trained.push(p.name().to_string()));
        let dv = init.model.head_computes_dv();
        let flops = our_flops(&cfg, &set, init.model.d_model(), dv);
        let trained_attn = cfg.model.attention == mechlab::papers::topic::model::AttnKind::Trained;
        let alone = trained_attn.then(|| products_alone(&set, init.model.d_model(), dv));
        if let Some(a) = alone {
            println!(
                "{preset}: the head's {} products alone, every document at its shapes: {a:.3} s = {:.1}% of peak (the ceiling of the epoch's share)",
                if dv { "six" } else { "five" },
                100.0 * flops / a / 1e9 / peak
            );
        }
        let meta = serde_json::json!({
            "preset": preset, "model": cfg.model, "lr": cfg.train.lr, "optimizer": cfg.train.optimizer,
            "batch_size": cfg.mlm.batch_size, "steps_per_epoch": spe, "d_vocab": init.model.d_vocab(),
            "params": params, "trained": trained, "first_losses": losses,
            "epoch_seconds": best, "products_alone_seconds": alone, "flops": flops, "gflops": flops / best / 1e9, "peak_gflops": peak,
        });
        std::fs::write(dir.join("meta.json"), serde_json::to_string(&meta)?)?;
        println!("{preset}: epoch {best:.3} s ({spe} steps), {:.2} GFLOP/s executed = {:.1}% of peak; first losses {losses:?}", flops / best / 1e9, 100.0 * flops / best / 1e9 / peak);
        summary.insert(
            preset.clone(),
            serde_json::json!({"epoch_seconds": best, "gflops": flops / best / 1e9}),
        );
    }
    summary.insert("peak_gflops".into(), peak.into());
    std::fs::write(
        out.join("mechlab.json"),
        serde_json::to_string_pretty(&summary)?,
    )?;
    Ok(())
}
