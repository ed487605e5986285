//! The LSA's hand-written backward against finite differences (f64), both
//! parameterisations, one to three layers, at initialisation and far from it,
//! for the training path (the last layer's rank-one form) and the reference
//! (every layer in full), and the two against each other; its chunked sums
//! against thread counts; and the sensitivity against a finite difference of
//! the prediction.

use super::data::{DataConfig, Prompts, Task};
use super::model::{Init, Lsa, ModelConfig, Param2, TrainPath};
use crate::rng::{stream, Stream};
use crate::train::Trainable;
use mechlab_engine::gradcheck::{check_params, DEFAULT_H};
use mechlab_engine::Parameters;

pub(super) fn setup(layers: usize, param: Param2, scale: f64) -> (Lsa, Prompts) {
    setup_batch(layers, param, scale, 7)
}

/// [`setup`] with `batch` training prompts a step.
fn setup_batch(layers: usize, param: Param2, scale: f64, batch: usize) -> (Lsa, Prompts) {
    let cfg = DataConfig {
        d: 3,
        n: 4,
        cov_eigs: vec![0.5, 1.0, 2.0],
        cov_rotate: true,
        noise: 0.1,
        ..DataConfig::default()
    };
    let task = Task::new(&cfg, 5);
    let pr = Prompts::draw(&task, &mut stream(6, Stream::Sample), 7, cfg.n);
    let mc = ModelConfig {
        layers,
        param,
        init: Init::Normal,
        init_scale: scale,
        ..ModelConfig::default()
    };
    (Lsa::new(&mc, task, batch, 5), pr)
}

#[test]
fn the_backward_matches_finite_differences() {
    for layers in 1..=3 {
        for param in [Param2::Full, Param2::Blocks] {
            // 0.3: near the start; 1.5: far from it, where the layers' products
            // are of order one and every term of the backward matters.
            for (scale, reference) in [(0.3, false), (1.5, false), (0.3, true), (1.5, true)] {
                let (mut m, pr) = setup(layers, param, scale);
                m.path = if reference {
                    TrainPath::Full
                } else {
                    TrainPath::Fastest
                };
                let (z, y) = (pr.z.clone(), pr.y.clone());
                let loss = |m: &Lsa| {
                    let p = m.predict(&z, 4, None);
                    p.iter()
                        .zip(&y)
                        .map(|(a, b)| 0.5 * (a - b).powi(2))
                        .sum::<f64>()
                        / 7.0
                };
                let (z2, y2) = (pr.z.clone(), pr.y.clone());
                let grads = |m: &mut Lsa| {
                    m.loss_and_grad(&z2, &y2, 4);
                };
                for (name, r) in check_params(&mut m, loss, grads, DEFAULT_H) {
                    if param == Param2::Blocks {
                        // The held entries have zero gradient by design; the
                        // check covers the trained x-blocks (the rest compare
                        // 0 with a finite difference and are skipped).
                        continue;
                    }
                    r.assert_below(
                        1e-6,
                        &format!("L = {layers}, scale {scale}, reference {reference}: {name}"),
                    );
                }
            }
        }
    }
}

/// The training path's loss and gradients equal the reference's to rounding.
#[test]
fn the_rank_one_last_layer_matches_the_full_reference() {
    for layers in 1..=3 {
        let grads = |reference: bool| {
            let (mut m, pr) = setup(layers, Param2::Full, 0.9);
            m.path = if reference {
                TrainPath::Full
            } else {
                TrainPath::Fastest
            };
            m.zero_grad();
            let loss = m.loss_and_grad(&pr.z, &pr.y, 4);
            let mut g = vec![loss];
            m.visit(&mut |p| g.extend_from_slice(p.grad()));
            g
        };
        let (fast, full) = (grads(false), grads(true));
        let big = full.iter().fold(0.0f64, |a, x| a.max(x.abs()));
        for (k, (a, b)) in fast.iter().zip(&full).enumerate() {
            assert!(
                (a - b).abs() <= 1e-12 * big,
                "L = {layers}, entry {k}: {a} vs {b}"
            );
        }
    }
}

/// The gradients of a fully trained model (two layers) at `m`'s values.
fn full_grads_at(m: &Lsa, pr: &Prompts) -> Vec<Vec<f64>> {
    let (mut full, _) = setup(2, Param2::Full, 0.8);
    let mut vals = Vec::new();
    m.visit(&mut |p| vals.push(p.value().to_vec()));
    let mut k = 0;
    full.visit_mut(&mut |p| {
        p.value_mut().copy_from_slice(&vals[k]);
        k += 1;
    });
    full.zero_grad();
    full.loss_and_grad(&pr.z, &pr.y, 4);
    let mut g = Vec::new();
    full.visit(&mut |p| g.push(p.grad().to_vec()));
    g
}

/// With `Param2::Blocks` only the x-blocks get a gradient, and it is the full
/// gradient's there.
#[test]
fn the_blocks_parameterisation_masks_the_gradient() {
    let (mut m, pr) = setup(2, Param2::Blocks, 0.8);
    m.zero_grad();
    m.loss_and_grad(&pr.z, &pr.y, 4);
    let mut masked = Vec::new();
    m.visit(&mut |p| masked.push(p.grad().to_vec()));
    for (k, full) in full_grads_at(&m, &pr).iter().enumerate() {
        for (i, (a, b)) in masked[k].iter().zip(full).enumerate() {
            let inside = i / 4 < 3 && i % 4 < 3;
            assert_eq!(*a, if inside { *b } else { 0.0 }, "tensor {k} entry {i}");
        }
    }
    assert!(masked.iter().flatten().any(|g| *g != 0.0));
}

/// With `Param2::Steps` `P` gets no gradient and starts as `e_D e_Dᵀ`, `Q` only
/// its x-block: the full gradient's there.
#[test]
fn the_steps_parameterisation_holds_p() {
    let (mut m, pr) = setup(2, Param2::Steps, 0.8);
    for b in &m.blocks {
        let p = b.p.value();
        assert!(p
            .iter()
            .enumerate()
            .all(|(k, v)| *v == if k == 15 { 1.0 } else { 0.0 }));
    }
    m.zero_grad();
    m.loss_and_grad(&pr.z, &pr.y, 4);
    let mut g = Vec::new();
    m.visit(&mut |p| g.push(p.grad().to_vec()));
    // tensors alternate P, Q per layer
    for (k, full) in full_grads_at(&m, &pr).iter().enumerate() {
        for (i, (a, b)) in g[k].iter().zip(full).enumerate() {
            let trains = k % 2 == 1 && i / 4 < 3 && i % 4 < 3;
            assert_eq!(*a, if trains { *b } else { 0.0 }, "tensor {k} entry {i}");
        }
    }
    assert!(g[1].iter().any(|v| *v != 0.0));
}

/// The losses, gradients and parameters of 40 SGD steps on fresh batches of 19 prompts
/// (two groups of [`super::lanes::LANES`] and three alone), small enough steps
/// that every loss stays finite (bits past an overflow would compare nothing).
fn trained(layers: usize, param: Param2, path: TrainPath, nudge: bool) -> (bool, Vec<u64>) {
    let (mut m, _) = setup_batch(layers, param, 0.2, 19);
    m.path = path;
    if nudge {
        // a held entry off the form: the short path must not apply
        let dd = m.dd;
        m.blocks[0].p.value_mut()[dd * dd - 1] = 1.0 + 1e-3;
    }
    let took = m.takes_steps_path();
    let mut bits = Vec::new();
    for step in 0..40 {
        m.zero_grad();
        let loss = m.train_step(step);
        assert!(
            loss.is_finite(),
            "L = {layers}, {param:?}, step {step}: {loss}"
        );
        bits.push(loss.to_bits());
        // the gradients' bits too: a step of 0.002 can round a last-bit
        // difference in a gradient away from the parameters
        m.visit_mut(&mut |p| {
            let g = p.grad().to_vec();
            bits.extend(g.iter().map(|v| v.to_bits()));
            p.value_mut()
                .iter_mut()
                .zip(g)
                .for_each(|(v, g)| *v -= 0.002 * g);
        });
    }
    m.visit(&mut |p| bits.extend(p.value().iter().map(|v| v.to_bits())));
    (took, bits)
}

/// In the `P = 0` form (`Param2::Steps`, and one layer of `Param2::Blocks`) the
/// short path trains to the same bits as the general one, layer by layer, and
/// is not taken once a held entry leaves the form.
#[test]
fn the_p0_form_path_trains_to_the_general_paths_bits() {
    for (layers, param) in [
        (1, Param2::Steps),
        (2, Param2::Steps),
        (3, Param2::Steps),
        (1, Param2::Blocks),
    ] {
        let (took, fast) = trained(layers, param, TrainPath::Fastest, false);
        let (took_general, general) = trained(layers, param, TrainPath::RankOne, false);
        assert!(took && !took_general, "L = {layers}, {param:?}");
        assert!(fast == general, "L = {layers}, {param:?}: the bits differ");
        let (took, _) = trained(layers, param, TrainPath::Fastest, true);
        assert!(!took, "L = {layers}, {param:?}: taken off the form");
    }
    // more than one layer of Blocks trains P's x-blocks: the general path
    let (took, _) = trained(2, Param2::Blocks, TrainPath::Fastest, false);
    assert!(!took);
}

/// One layer's prompts eight at a time train to the one-prompt path's bits.
#[test]
fn one_layer_in_lanes_trains_to_the_one_prompt_paths_bits() {
    for param in [Param2::Full, Param2::Gdpp] {
        let (_, lanes) = trained(1, param, TrainPath::Fastest, false);
        let (_, one) = trained(1, param, TrainPath::RankOne, false);
        assert!(lanes == one, "{param:?}: the bits differ");
    }
}

/// The loss and gradients of one training step of `mc` (1 500 prompts) on
/// `threads` threads.
pub(super) fn step_on_threads(mc: &ModelConfig, threads: usize) -> Vec<f64> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    pool.install(|| {
        let cfg = DataConfig {
            batch: 1500,
            ..DataConfig::default()
        };
        let task = Task::new(&cfg, 2);
        let mut m = Lsa::new(mc, task, cfg.batch, 2);
        m.zero_grad();
        let loss = m.train_step(3);
        let mut g = vec![loss];
        m.visit(&mut |p| g.extend_from_slice(p.grad()));
        g
    })
}

/// The chunked gradient is the same bits on one thread and on four.
#[test]
fn the_step_is_bit_identical_for_any_thread_count() {
    let mc = ModelConfig::default();
    let (a, b) = (step_on_threads(&mc, 1), step_on_threads(&mc, 4));
    assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
}

#[test]
fn the_sensitivity_is_the_derivative_of_the_prediction() {
    let (m, pr) = setup(3, Param2::Full, 1.0);
    let q = pr.prompt(2).to_vec();
    let s = m.sensitivity(&q, 4);
    let h = 1e-5;
    for (r, &sr) in s.iter().enumerate() {
        let (mut up, mut dn) = (q.clone(), q.clone());
        up[4 * 4 + r] += h;
        dn[4 * 4 + r] -= h;
        let fd = (m.predict(&up, 4, None)[0] - m.predict(&dn, 4, None)[0]) / (2.0 * h);
        assert!(
            (fd - sr).abs() < 1e-7 * (1.0 + sr.abs()),
            "x_q[{r}]: {fd} vs {sr}"
        );
    }
}
