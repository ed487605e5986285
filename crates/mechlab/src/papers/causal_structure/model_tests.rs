//! The CatFormer kernel against its dense reference and finite differences.

use super::data::{Control, DataConfig, GraphKind, Seqs, Task};
use super::hooked::{last_loss, HookedCat};
use super::model::{CatFormer, ModelConfig};
use crate::rng::{stream, Stream};
use crate::train::Trainable;
use mechlab_engine::hooks::{Batch, HookedModel};
use mechlab_engine::Parameters;
use rand::Rng;

fn task(graph: GraphKind, control: Control) -> Task {
    let cfg = DataConfig {
        vocab: 4,
        seq_len: 7,
        graph,
        control,
        ..DataConfig::default()
    };
    Task::new(&cfg, 1)
}

/// A model with every parameter drawn from `N(0, scale²)`-ish (uniform).
fn model(task: Task, heads: [usize; 2], scale: f64, batch: usize) -> CatFormer {
    let mut m = CatFormer::new(&ModelConfig { heads }, task, batch, 0);
    let mut rng = stream(9, Stream::Init);
    m.visit_mut(&mut |p| {
        p.value_mut()
            .iter_mut()
            .for_each(|v| *v = scale * (rng.random::<f64>() * 2.0 - 1.0));
    });
    m
}

fn reference(m: &CatFormer) -> HookedCat {
    HookedCat {
        s: m.dims.s,
        t: m.dims.t,
        heads: [m.dims.h1, m.dims.h2],
        a: [m.a1.value().to_vec(), m.a2.value().to_vec()],
        w: m.w.value().to_vec(),
    }
}

fn ref_loss(m: &CatFormer, seqs: &Seqs) -> f64 {
    let t = m.dims.t;
    let batch = Batch::new(seqs.x.iter().map(|&v| v as u32).collect(), seqs.n, t);
    let out = reference(m)
        .run_with_hooks(&batch, &[])
        .expect("reference runs");
    last_loss(&out, &seqs.y)
}

fn grads(m: &mut CatFormer, seqs: &Seqs) -> (f64, Vec<Vec<f64>>) {
    m.zero_grad();
    let loss = m.loss_and_grad(seqs);
    let mut g = Vec::new();
    m.visit(&mut |p| g.push(p.grad().to_vec()));
    (loss, g)
}

/// Central differences of the dense reference's loss, every parameter entry.
fn check_against_finite_differences(m: &mut CatFormer, seqs: &Seqs, tol: f64) {
    let (loss, g) = grads(m, seqs);
    assert!(
        (loss - ref_loss(m, seqs)).abs() < 1e-12,
        "fast and dense losses differ"
    );
    let h = 1e-5;
    let mut worst: f64 = 0.0;
    for (pi, gp) in g.iter().enumerate() {
        for (k, &gk) in gp.iter().enumerate() {
            let bump = |m: &mut CatFormer, dx: f64| {
                let mut i = 0;
                m.visit_mut(&mut |p| {
                    if i == pi {
                        p.value_mut()[k] += dx;
                    }
                    i += 1;
                });
            };
            bump(m, h);
            let up = ref_loss(m, seqs);
            bump(m, -2.0 * h);
            let down = ref_loss(m, seqs);
            bump(m, h);
            let fd = (up - down) / (2.0 * h);
            let err = (fd - gk).abs() / (1e-6 + fd.abs().max(gk.abs()));
            worst = worst.max(if (fd - gk).abs() < 1e-9 { 0.0 } else { err });
        }
    }
    assert!(worst < tol, "worst relative gradient error {worst:.2e}");
}

#[test]
fn gradients_match_finite_differences_of_the_dense_reference() {
    for (graph, control, heads) in [
        (GraphKind::Chain, Control::None, [1, 1]),
        (GraphKind::Random, Control::Shuffle, [2, 1]),
        (GraphKind::Icl, Control::Redraw, [1, 2]),
    ] {
        let t = task(graph, control);
        let seqs = Seqs::draw(&t, &mut stream(4, Stream::Data), 5);
        let mut m = model(t, heads, 0.7, 5);
        check_against_finite_differences(&mut m, &seqs, 1e-6);
    }
}

#[test]
fn gradients_hold_at_saturated_attention() {
    // Large weights: every attention row and the read-out saturate, where a
    // softmax backward that forms g − ⟨g, p⟩ directly loses the gradient.
    let t = task(GraphKind::Chain, Control::None);
    let seqs = Seqs::draw(&t, &mut stream(6, Stream::Data), 4);
    let mut m = model(t, [1, 1], 20.0, 4);
    let mut wk = m.workspace();
    m.forward_seq(seqs.seq(0, 7), &seqs.y[..4], &mut wk);
    let saturated = wk
        .a1
        .chunks(7)
        .filter(|r| r.iter().any(|&p| p > 0.999_999))
        .count();
    assert!(
        saturated >= 5,
        "only {saturated} of 7 attention rows saturate"
    );
    check_against_finite_differences(&mut m, &seqs, 1e-5);
}

#[test]
fn the_zero_start_moves_only_the_read_out_first() {
    // Their init: every parameter 0, so A1 and A2 get no gradient while W = 0.
    let t = task(GraphKind::Chain, Control::None);
    let seqs = Seqs::draw(&t, &mut stream(2, Stream::Data), 8);
    let mut m = CatFormer::new(&ModelConfig::default(), t, 8, 0);
    let (loss, g) = grads(&mut m, &seqs);
    assert!((loss - ref_loss(&m, &seqs)).abs() < 1e-12);
    assert!(g[0].iter().chain(&g[1]).all(|&v| v == 0.0));
    assert!(g[2].iter().any(|&v| v != 0.0));
}

#[test]
fn training_steps_are_bit_identical_across_thread_counts() {
    let cfg = DataConfig {
        batch: 200,
        ..DataConfig::default()
    };
    let run = |threads: usize| -> Vec<f64> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let mut m = model(Task::new(&cfg, 3), [1, 1], 0.3, 200);
            let mut out = Vec::new();
            for step in 0..3 {
                m.zero_grad();
                out.push(m.train_step(step));
            }
            m.visit(&mut |p| out.extend_from_slice(p.grad()));
            out
        })
    };
    let one = run(1);
    assert_eq!(one, run(2));
    assert_eq!(one, run(3));
}
