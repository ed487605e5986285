//! Times one full-batch training step (forward and backward for E, p and v) of the
//! token-selection model on IMDB-sized data, and writes the data, parameters, loss
//! and gradient norms for `bench/selection/torch_step.py` to compare against, with
//! the step's share of the f32 matrix-product peak.
//!
//! `cargo run --release --example bench_selection -- OUT_DIR [n T vocab d reps]`
//! (defaults 25000 256 20000 256 20). Run with `RAYON_NUM_THREADS=2`.

use mechlab::papers::selection::data::SeqData;
use mechlab::papers::selection::model::{ModelConfig, SelectionModel};
use mechlab::train::Trainable;
use mechlab_engine::Parameters;
use rand::Rng;
use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

mod common;

/// A plain little-endian dump that numpy reads with `fromfile`.
fn write_raw<T: Copy, const B: usize>(
    path: &std::path::Path,
    x: &[T],
    le: fn(T) -> [u8; B],
) -> std::io::Result<()> {
    let bytes: Vec<u8> = x.iter().flat_map(|&v| le(v)).collect();
    std::fs::File::create(path)?.write_all(&bytes)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let out = std::path::PathBuf::from(
        a.first()
            .cloned()
            .unwrap_or_else(|| "/tmp/bench_selection".into()),
    );
    let num = |i: usize, d: usize| a.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let (n, t, vocab, d, reps) = (
        num(1, 25_000),
        num(2, 256),
        num(3, 20_000),
        num(4, 256),
        num(5, 20),
    );
    std::fs::create_dir_all(&out)?;

    // IMDB-like data: lengths in [T/2, T], Zipf-ish token ids, labels ±1.
    let mut rng = mechlab::rng::stream(0, mechlab::rng::Stream::Data);
    let mut data = SeqData {
        n,
        n_ctx: t,
        d_vocab: vocab,
        ..SeqData::default()
    };
    for _ in 0..n {
        let len = rng.random_range(t / 2..=t);
        for i in 0..t {
            let u: f64 = rng.random();
            let id = ((vocab as f64).powf(u) as usize)
                .saturating_sub(1)
                .min(vocab - 1);
            data.ids.push(if i < len { id as u32 } else { 0 });
        }
        data.lens.push(len as u32);
        data.y.push(if rng.random::<bool>() { 1.0 } else { -1.0 });
    }
    let data = Arc::new(data);
    let cfg = ModelConfig {
        d_model: d,
        dtype: mechlab::experiment::Dtype::F32,
        e_orthogonal_to_v: false,
        ..ModelConfig::default()
    };
    let mut m = SelectionModel::<f32>::new(&cfg, data.clone(), 0);
    // a non-zero ⟨cls⟩ so that attention is not uniform
    let pv: Vec<f32> = (0..d).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    m.p.value_mut().copy_from_slice(&pv);

    write_raw(&out.join("ids.u32"), &data.ids, u32::to_le_bytes)?;
    write_raw(&out.join("lens.u32"), &data.lens, u32::to_le_bytes)?;
    let y32: Vec<f32> = data.y.iter().map(|&y| y as f32).collect();
    write_raw(&out.join("y.f32"), &y32, f32::to_le_bytes)?;
    write_raw(&out.join("E.f32"), m.w_e.value(), f32::to_le_bytes)?;
    write_raw(&out.join("p.f32"), m.p.value(), f32::to_le_bytes)?;
    write_raw(&out.join("v.f32"), m.v.value(), f32::to_le_bytes)?;

    let mut times = Vec::new();
    let mut loss = 0.0f32;
    for _ in 0..reps + 2 {
        m.zero_grad();
        let t0 = Instant::now();
        loss = m.train_step(0);
        times.push(t0.elapsed().as_secs_f64());
    }
    let mut timed = times[2..].to_vec(); // two warm-up steps
    timed.sort_by(f64::total_cmp);
    let median = timed[timed.len() / 2];
    let norm = |g: &[f32]| {
        g.iter()
            .map(|&x| (x as f64) * (x as f64))
            .sum::<f64>()
            .sqrt()
    };
    // 2 per multiply-add of the step's products (elementwise work not counted):
    // E·[p v] forward, the rank-2 ∂E and Eᵀ·[c_p c_v] backward (model.rs)
    let flops = 12.0 * (vocab * d) as f64;
    let share = common::share_line::<f32>(flops, median);
    let result = serde_json::json!({
        "n": n, "T": t, "vocab": vocab, "d": d, "share": share,
        "threads": rayon::current_num_threads(),
        "loss": loss, "grad_norm_E": norm(m.w_e.grad()), "grad_norm_p": norm(m.p.grad()), "grad_norm_v": norm(m.v.grad()),
        "median_s": median, "min_s": timed[0],
    });
    std::fs::write(out.join("rust.json"), result.to_string())?;
    println!("{result}");
    Ok(())
}
