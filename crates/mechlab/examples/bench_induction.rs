//! Times one full-batch epoch (forward + backward + SGD update) of the simplified
//! induction model on 9 000 sequences of L = 100, S = 3 (the paper's setting).
//! `bench_induction [epochs] [tokens_out]`: prints the loss after each of the first
//! three epochs (for the PyTorch cross-check), the mean seconds per epoch and its
//! share of the f64 matrix-product peak in model FLOPs (`common`); with
//! `tokens_out`, writes the training tokens (`u8`, `[9000, 101]`) there.

use mechlab::papers::induction::data::{generate, MarkovSpec};
use mechlab::papers::induction::simplified::{Simplified, SimplifiedConfig};
use mechlab_engine::Parameters;
use std::time::Instant;

mod common;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let epochs: usize = args.first().and_then(|s| s.parse().ok()).unwrap_or(200);
    let spec = MarkovSpec {
        n_seqs: 9000,
        ..MarkovSpec::default()
    };
    let data = generate(&spec, 2024).expect("valid spec");
    if let Some(path) = args.get(1) {
        std::fs::write(path, &data.tokens).expect("write tokens");
    }
    let mut m = Simplified::<f64>::new(&SimplifiedConfig::default());
    let lr = 1.0;
    let step = |m: &mut Simplified<f64>| {
        m.zero_grad();
        let loss = m.loss(&data.tokens, 100, true);
        m.visit_mut(&mut |p| {
            let (v, g) = p.value_and_grad_mut();
            v.iter_mut().zip(g.iter()).for_each(|(v, g)| *v -= lr * g);
        });
        loss
    };
    for e in 0..3 {
        println!("epoch {e} loss {:.12}", step(&mut m));
    }
    let t = Instant::now();
    for _ in 0..epochs {
        step(&mut m);
    }
    let per = t.elapsed().as_secs_f64() / epochs as f64;
    println!(
        "threads {} seconds_per_epoch {per:.6}",
        rayon::current_num_threads()
    );
    let flops = common::induction_epoch_flops(data.len(), 100, 3, &m.subsets);
    println!("{}", common::share_line::<f64>(flops, per));
}
