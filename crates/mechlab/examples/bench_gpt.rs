//! Times a training step (forward, backward, AdamW) of the general causal
//! transformer (`engine::gpt`) at lm-induction's real-text size, writes its
//! initial parameters and batches for `bench/gpt/torch_gpt.py`, and prints the
//! first losses (which the PyTorch side must reproduce), the time per step, the
//! FLOPs executed and their share of this machine's measured matmul peak.
//!
//! Usage: `bench_gpt DIR [steps] [d_mlp] [n_layers] [d_model] [mask]` (d_mlp
//! 0: attention-only; heads of 32; `mask = last`: the loss on each sequence's
//! last position only, a classification-style task through the loss mask).
//! Built with `--features mechlab-engine/product-clock` it also prints how fast
//! the attention's small products ran inside the steps (`matmul/clock.rs`).

use mechlab::train::config::OptimizerKind;
use mechlab::train::optim::{Hyper, Optimizer};
use mechlab_engine::gpt::{Gpt, GptConfig, Workspace};
use mechlab_engine::layers::attention::CAUSAL_BLOCK;
use mechlab_engine::matmul::measured_peak_gflops;
use mechlab_engine::Parameters;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::io::Write;
use std::path::Path;
use std::time::Instant;

const B: usize = 16;

/// FLOPs of one step as mechlab executes it (attention over the causal row
/// blocks it computes, `engine::layers::attention::CAUSAL_BLOCK`; backward
/// counted as twice the forward).
fn step_flops(c: &GptConfig, t: usize) -> f64 {
    let (rows, d, hd, v) = (
        (B * t) as f64,
        c.d_model as f64,
        (c.n_heads * c.d_head) as f64,
        c.d_vocab as f64,
    );
    // (query, key) cells per head and sequence: each block's rows times its keys
    let cells: usize = (0..t)
        .step_by(CAUSAL_BLOCK)
        .map(|i0| {
            let i1 = (i0 + CAUSAL_BLOCK).min(t);
            (i1 - i0) * i1
        })
        .sum();
    let per_layer = 2.0 * rows * (4.0 * d * hd + 2.0 * d * c.d_mlp as f64)
        + 4.0 * (B * c.n_heads * cells * c.d_head) as f64;
    3.0 * (c.n_layers as f64 * per_layer + 2.0 * rows * d * v)
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = Path::new(args.first().map(String::as_str).unwrap_or("/tmp/bench-gpt")).to_path_buf();
    let steps: usize = args.get(1).map(|s| s.parse()).transpose()?.unwrap_or(30);
    let d_mlp: usize = args.get(2).map(|s| s.parse()).transpose()?.unwrap_or(0);
    let n_layers: usize = args.get(3).map(|s| s.parse()).transpose()?.unwrap_or(2);
    let d_model: usize = args.get(4).map(|s| s.parse()).transpose()?.unwrap_or(128);
    let last_only = args.get(5).map(String::as_str) == Some("last");
    std::fs::create_dir_all(&dir)?;
    let t = 256;
    let cfg = GptConfig {
        n_layers,
        d_model,
        n_heads: d_model / 32,
        d_head: 32,
        d_mlp,
        attn_only: d_mlp == 0,
        n_ctx: t,
        d_vocab: 256,
        ..GptConfig::default()
    };
    let mut m =
        Gpt::<f32>::new(&cfg, &mut ChaCha8Rng::seed_from_u64(0)).map_err(anyhow::Error::msg)?;
    // the initial parameters, in visit order, and their names and shapes
    let mut f = std::fs::File::create(dir.join("params.bin"))?;
    let mut names = Vec::new();
    m.visit(&mut |p| {
        names.push(serde_json::json!({"name": p.name(), "shape": p.shape()}));
        let bytes: Vec<u8> = p.value().iter().flat_map(|v| v.to_le_bytes()).collect();
        f.write_all(&bytes).expect("write params");
    });
    let check = 3;
    let n_batches = check + steps;
    let mut r = ChaCha8Rng::seed_from_u64(1);
    let tokens: Vec<u32> = (0..n_batches * B * (t + 1))
        .map(|_| r.random_range(0..256u32))
        .collect();
    std::fs::File::create(dir.join("tokens.bin"))?.write_all(
        &tokens
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<u8>>(),
    )?;
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_string_pretty(
            &serde_json::json!({"cfg": cfg, "batch": B, "seq_len": t, "params": names, "check": check, "steps": steps,
                "mask": if last_only { "last" } else { "all" }}),
        )?,
    )?;
    let hyper = Hyper {
        beta1: 0.9,
        beta2: 0.99,
        eps: 1e-8,
        ..Hyper::default()
    };
    let mut opt = Optimizer::new(OptimizerKind::Adamw, hyper, &m);
    let mut ws = Workspace::new(&m, B, t);
    let per = B * (t + 1);
    let mask: Vec<bool> = (0..B * t).map(|i| i % t == t - 1).collect();
    let mut losses = Vec::new();
    let mut run = |m: &mut Gpt<f32>, i: usize| {
        m.zero_grad();
        let batch = &tokens[i * per..(i + 1) * per];
        let l = if last_only {
            m.train_step_masked(&mut ws, batch, Some(&mask))
        } else {
            m.train_step(&mut ws, batch)
        };
        opt.step(m, 1e-3, &[]);
        l
    };
    for i in 0..check {
        losses.push(run(&mut m, i));
    }
    let t0 = Instant::now();
    for i in check..n_batches {
        run(&mut m, i);
    }
    let sec = t0.elapsed().as_secs_f64() / steps as f64;
    let peak = measured_peak_gflops::<f32>(1024, rayon::current_num_threads(), 8);
    let flops = step_flops(&cfg, t);
    for (i, l) in losses.iter().enumerate() {
        println!("loss {i} {l:.7}");
    }
    println!(
        "threads {} step {:.2} ms ({:.0} tokens/s) flops {:.3e} executed {:.1} GFLOP/s peak {:.1} GFLOP/s share {:.1}%",
        rayon::current_num_threads(),
        sec * 1e3,
        (B * t) as f64 / sec,
        flops,
        flops / sec / 1e9,
        peak,
        100.0 * flops / sec / 1e9 / peak
    );
    // with the engine's `product-clock` feature: the attention's small products
    // timed inside the steps (warm-up included), by operand layout
    if let Some(clock) = mechlab_engine::matmul::product_clock_report() {
        print!("small products timed in the steps:\n{clock}");
    }
    Ok(())
}
