//! Times one normalised-GD step (forward, ∂L/∂W, update) of the attention-svm
//! model `f(X) = vᵀ Xᵀ softmax(X W z)` on the logistic loss, f64, in both
//! parameterisations (`W`, and `W = K Qᵀ` with m = d).
//! `bench_attention_svm N T D STEPS [DIR [SEED]]`: for each parameterisation prints the
//! loss of each of the first three steps (for the PyTorch cross-check), the mean
//! seconds per step and its share of the f64 matrix-product peak; with `DIR`, writes the data (`x.f64` `[n, T, d]`, `z.f64`
//! `[n, d]`, `y.f64` `[n]`, `v.f64` `[d]`) and the initial parameters (`w.f64`
//! `[d, d]`, `k.f64`, `q.f64` `[d, d]`), little-endian, there; `SEED` (default 0)
//! picks the data of `mechlab run attention-svm-* --seed SEED` at these sizes, so
//! `bench/attention_svm/authors_port.py --from DIR` can run the authors' algorithm
//! on exactly our data.

use mechlab::papers::attention_svm::data::{generate, DataConfig};
use mechlab::papers::attention_svm::model::{ModelConfig, Param2, SvmModel};
use mechlab::train::optim::{Hyper, Optimizer};
use mechlab::train::{OptimizerKind, Trainable};
use mechlab_engine::Parameters;
use std::sync::Arc;
use std::time::Instant;

mod common;

fn write(dir: &str, name: &str, x: &[f64]) {
    let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(format!("{dir}/{name}"), bytes).expect("write bench file");
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d: usize| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let (n, t, d, steps) = (num(0, 6), num(1, 8), num(2, 10), num(3, 2000));
    let dc = DataConfig { n, t, d, twins: 0 };
    dc.check().expect("valid sizes");
    let seed = num(5, 0) as u64;
    let (data, v) = generate(&dc, seed);
    let data = Arc::new(data);
    for param in [Param2::W, Param2::Kq] {
        let cfg = ModelConfig {
            param,
            ..ModelConfig::default()
        };
        let mut m = SvmModel::<f64>::new(&cfg, data.clone(), v.clone(), 0);
        if let Some(dir) = args.get(4) {
            if param == Param2::W {
                write(dir, "x.f64", &data.x);
                write(dir, "z.f64", &data.z);
                write(dir, "y.f64", &data.y);
                write(dir, "v.f64", &v);
                write(dir, "w.f64", m.w.value());
            } else {
                write(dir, "k.f64", m.k.value());
                write(dir, "q.f64", m.q.value());
            }
        }
        let mut opt = Optimizer::new(OptimizerKind::NormalizedGd, Hyper::default(), &m);
        let mut step = |m: &mut SvmModel<f64>, s: u64| {
            m.zero_grad();
            let loss = m.train_step(s);
            opt.step(m, 0.1, &[]);
            loss
        };
        let name = format!("{param:?}").to_lowercase();
        for s in 0..3 {
            println!("{name} step {s} loss {:.15}", step(&mut m, s));
        }
        let clock = Instant::now();
        for s in 0..steps {
            step(&mut m, 3 + s as u64);
        }
        let per = clock.elapsed().as_secs_f64() / steps.max(1) as f64;
        println!(
            "{name} threads {} seconds_per_step {per:.9}",
            rayon::current_num_threads()
        );
        let flops = step_flops(n, t, d, param == Param2::Kq);
        println!("{name} {}", common::share_line::<f64>(flops, per));
    }
}

/// FLOPs of one step, 2 per multiply-add of the products (elementwise work not
/// counted): per sample `W z` (`d²`) and the scores `X (W z)` (`T·d`) forward,
/// `∂/∂(W z) = Xᵀ ∂s` (`T·d`) and `∂W += ∂(Wz) zᵀ` (`d²`) backward; with
/// `W = K Qᵀ`, the product and its two gradients (`3·d³`) once per step.
fn step_flops(n: usize, t: usize, d: usize, kq: bool) -> f64 {
    let per_sample = 2 * (2 * d * d + 2 * t * d);
    let kq = if kq { 2 * 3 * d * d * d } else { 0 };
    (n * per_sample + kq) as f64
}
