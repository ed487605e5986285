//! Times one training step (forward + backward + AdamW update) of the markov-icl
//! model in the authors' setting: S = 2, T = 100, batch 64, d_model 16, one head
//! per layer, f64. `bench_markov_icl [steps] [dir] [dropout]`: prints the loss of
//! each of the first three steps (for the PyTorch cross-check), the mean seconds
//! per step and its share of the f64 matrix-product peak; with `dir` (`-` for none), writes the batches of those three steps
//! (`tokens.u8`, `[3, 64, 101]`) and the initial parameters in visit order
//! (`params.f64`, little-endian) there. With `dropout` > 0 the steps train with
//! the authors' dropout and weight decay (0.1, linear weights only), and with `dir` the masks of the first three steps go to
//! `masks.f64` (`RpeTransformer::masks_of`), so the PyTorch side applies the same.

use mechlab::papers::markov_icl::data::{sample, ChainSpec, Prior};
use mechlab::papers::markov_icl::model::{Dims, RpeTransformer};
use mechlab::rng::{stream, Stream};
use mechlab::train::optim::{Hyper, Optimizer};
use mechlab::train::OptimizerKind;
use mechlab_engine::Parameters;
use std::time::Instant;

mod common;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let steps: usize = args.first().and_then(|s| s.parse().ok()).unwrap_or(200);
    let spec = ChainSpec {
        vocab: 2,
        order: 2,
        prior: Prior::Dirichlet,
        alpha: 1.0,
        len: 101,
        first: mechlab::papers::markov_icl::data::FirstToken::Stationary,
    };
    let dims = Dims {
        vocab: 2,
        max_len: 100,
        d_model: 16,
        n_heads: 1,
        init_std: 0.02,
        proj_std: 0.01,
        dropout: args.get(2).and_then(|s| s.parse().ok()).unwrap_or(0.0),
    };
    let mut rng = stream(7, Stream::Data);
    let batches: Vec<Vec<u8>> = (0..3)
        .map(|_| sample(&spec, 64, &mut rng).expect("valid spec").tokens)
        .collect();
    let mut m = RpeTransformer::<f64>::new(&dims, &mut stream(7, Stream::Init))
        .expect("valid dims")
        .with_dropout_seed(7);
    if let Some(dir) = args.get(1).filter(|d| *d != "-") {
        std::fs::write(format!("{dir}/tokens.u8"), batches.concat()).expect("write tokens");
        let mut bytes = Vec::new();
        m.visit(&mut |p| {
            p.value()
                .iter()
                .for_each(|v| bytes.extend_from_slice(&v.to_le_bytes()))
        });
        std::fs::write(format!("{dir}/params.f64"), bytes).expect("write params");
    }
    // With dropout, the rest of the authors' setting too: weight decay 0.1 on
    // the linear weights only (markov-icl preset, `train.weight_decay_on`).
    let authors = dims.dropout > 0.0;
    let hyper = Hyper {
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-8,
        weight_decay: if authors { 0.1 } else { 0.0 },
        ..Hyper::default()
    };
    let linear: Vec<String> = ["W_Q", "W_K", "W_V", "W_O", "W_U"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut opt = Optimizer::new(OptimizerKind::Adamw, hyper, &m)
        .with_decay_on(if authors { &linear } else { &[] }, &m)
        .expect("the model has these parameters");
    let mut t_step = 0u64;
    let mut step = |m: &mut RpeTransformer<f64>, tokens: &[u8]| {
        m.zero_grad();
        m.set_train_step(Some(t_step));
        t_step += 1;
        let loss = m.loss(tokens, 101, true);
        opt.step(m, 5e-4, &[]);
        loss
    };
    // with dropout, the masks of the three checked steps, for the PyTorch side
    if let Some(dir) = args.get(1).filter(|d| *d != "-") {
        if let Some(first) = m.masks_of(0, 100, 64) {
            let mut bytes = Vec::new();
            for st in 0..3 {
                let masks = if st == 0 {
                    first.clone()
                } else {
                    m.masks_of(st, 100, 64).expect("dropout on")
                };
                masks
                    .iter()
                    .for_each(|v| bytes.extend_from_slice(&v.to_le_bytes()));
            }
            std::fs::write(format!("{dir}/masks.f64"), bytes).expect("write masks");
        }
    }
    for (s, b) in batches.iter().enumerate() {
        println!("step {s} loss {:.12}", step(&mut m, b));
    }
    let t = Instant::now();
    for i in 0..steps {
        step(&mut m, &batches[i % 3]);
    }
    let per = t.elapsed().as_secs_f64() / steps as f64;
    println!(
        "threads {} seconds_per_step {per:.6}",
        rayon::current_num_threads()
    );
    println!(
        "{}",
        common::share_line::<f64>(step_flops(64, 100, 16, 2), per)
    );
}

/// FLOPs of one step as mechlab executes it, 2 per multiply-add of the matrix
/// products (elementwise work not counted): per sequence and layer the Q, K, V
/// and output projections (`4·T·d²` multiply-adds) and, over the causal pairs
/// only, the scores, the relative-position term and the value mixing (`3·d`
/// each); the unembedding (`T·d·S`); the backward as twice the forward.
fn step_flops(batch: usize, t: usize, d: usize, s: usize) -> f64 {
    let pairs = t * (t + 1) / 2;
    let layer = 4 * t * d * d + 3 * pairs * d;
    let forward = 2 * (2 * layer + t * d * s);
    3.0 * (batch * forward) as f64
}
