//! Softmax attention's hand-written backward against finite differences (f64),
//! one to three layers, one and two heads, near the start and at saturation
//! (patterns within 1e-6 of one-hot); its predictions against the dense hooked
//! model; its sensitivity against a finite difference; its chunked step across
//! thread counts.

use super::data::{DataConfig, Prompts, Task};
use super::hooked::HookedLsa;
use super::model::{Attention, Lsa, ModelConfig};
use super::model_tests::step_on_threads;
use super::softmax::{self, Shape, SoftWork};
use crate::rng::{stream, Stream};
use mechlab_engine::gradcheck::{check_params, DEFAULT_H};
use mechlab_engine::hooks::{Batch, HookedModel};

const N: usize = 4;
/// The factor on `Q` that saturates layer 0's patterns in the gradient check.
const SATURATE: f64 = 12.0;

fn setup(layers: usize, heads: usize, scale: f64) -> (Lsa, Prompts) {
    let cfg = DataConfig {
        d: 3,
        n: N,
        cov_eigs: vec![0.5, 1.0, 2.0],
        cov_rotate: true,
        noise: 0.1,
        ..DataConfig::default()
    };
    let task = Task::new(&cfg, 5);
    let pr = Prompts::draw(&task, &mut stream(6, Stream::Sample), 7, N);
    let mc = ModelConfig {
        layers,
        attention: Attention::Softmax,
        heads,
        init_scale: scale,
        ..ModelConfig::default()
    };
    mc.check().unwrap();
    (Lsa::new(&mc, task, 7, 5), pr)
}

fn mean_loss(m: &Lsa, pr: &Prompts) -> f64 {
    let p = m.predict(&pr.z, N, None);
    p.iter()
        .zip(&pr.y)
        .map(|(a, b)| 0.5 * (a - b).powi(2))
        .sum::<f64>()
        / pr.len() as f64
}

/// The largest attention weight of layer 0 over every prompt, head and row.
fn max_weight(m: &Lsa, pr: &Prompts, heads: usize) -> f64 {
    let shape = Shape {
        layers: m.blocks.len(),
        heads,
        m: N,
        dd: m.dd,
    };
    let mut wk = SoftWork::new(shape);
    let mut mx: f64 = 0.0;
    for p in pr.z.chunks_exact((N + 1) * m.dd) {
        softmax::forward(&m.blocks, p, &mut wk);
        // layer 0, every head and row (layer 0 computes every row when L > 1)
        let rows = if shape.layers > 1 { N + 1 } else { 1 };
        for h in 0..heads {
            for i in (N + 1 - rows)..=N {
                let row = &wk.pattern[(h * (N + 1) + i) * N..][..N];
                mx = mx.max(row.iter().cloned().fold(0.0, f64::max));
            }
        }
    }
    mx
}

#[test]
fn the_softmax_backward_matches_finite_differences() {
    for layers in 1..=3 {
        for heads in [1, 2] {
            // near the start; far from it; Q scaled up until layer 0's patterns
            // saturate (a weight within 1e-3 of 1, where a backward that forms
            // x_t − Σ a_s x_s would cancel) while P keeps the values moderate
            for (scale, q_gain) in [(0.3, 1.0), (0.9, 1.0), (0.5, SATURATE)] {
                let (mut m, pr) = setup(layers, heads, scale);
                for b in m.blocks.iter_mut() {
                    b.q.value_mut().iter_mut().for_each(|v| *v *= q_gain);
                }
                if q_gain == SATURATE {
                    let w = max_weight(&m, &pr, heads);
                    assert!(
                        w > 1.0 - 1e-3,
                        "L = {layers}, H = {heads}: max weight {w}, not saturated"
                    );
                }
                let pr2 = pr.clone();
                let loss = |m: &Lsa| mean_loss(m, &pr);
                let grads = |m: &mut Lsa| {
                    m.loss_and_grad(&pr2.z, &pr2.y, N);
                };
                // saturated, the loss is steep in Q, and the central difference's
                // own error reaches 1e-6 of the gradient's scale (three layers)
                let tol = if q_gain == SATURATE { 1e-5 } else { 1e-6 };
                for (name, r) in check_params(&mut m, loss, grads, DEFAULT_H) {
                    r.assert_below(
                        tol,
                        &format!("L = {layers}, H = {heads}, scale {scale} × {q_gain}: {name}"),
                    );
                }
            }
        }
    }
}

/// The query-only last layer gives the dense model's prediction, every row of
/// every layer computed (and the pattern it shows is a distribution).
#[test]
fn the_softmax_prediction_matches_the_dense_hooked_model() {
    for (layers, heads) in [(1, 1), (2, 2), (3, 1)] {
        let (m, pr) = setup(layers, heads, 0.9);
        let dd = m.dd;
        let mut hooked = HookedLsa {
            layers: m
                .blocks
                .iter()
                .map(|b| (b.p.value().to_vec(), b.q.value().to_vec()))
                .collect(),
            softmax_heads: Some(heads),
            dd,
            table: pr.z.clone(),
            per_prompt: N + 1,
        };
        let count = pr.len();
        let ids: Vec<u32> = (0..count).flat_map(|p| hooked.prompt(p)).collect();
        let batch = Batch::new(ids, count, N + 1);
        let (dense, cache) = hooked
            .run_with_cache(&batch, &["blocks.0.attn.hook_pattern"])
            .unwrap();
        let pattern = &cache["blocks.0.attn.hook_pattern"];
        assert_eq!(pattern.shape, vec![count, heads, N + 1, N]);
        for row in pattern.data.chunks_exact(N) {
            assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        }
        let ours = m.predict(&pr.z, N, None);
        for (k, (a, b)) in ours.iter().zip(&dense.data).enumerate() {
            assert!(
                (a - b).abs() <= 1e-12 * (1.0 + b.abs()),
                "L = {layers}, H = {heads}, prompt {k}: {a} vs {b}"
            );
        }
    }
}

#[test]
fn the_softmax_sensitivity_is_the_derivative_of_the_prediction() {
    let (m, pr) = setup(2, 2, 1.0);
    let q = pr.prompt(2).to_vec();
    let s = m.sensitivity(&q, N);
    let (h, dd) = (1e-5, m.dd);
    for (r, &sr) in s.iter().enumerate() {
        let (mut up, mut dn) = (q.clone(), q.clone());
        up[N * dd + r] += h;
        dn[N * dd + r] -= h;
        let fd = (m.predict(&up, N, None)[0] - m.predict(&dn, N, None)[0]) / (2.0 * h);
        assert!(
            (fd - sr).abs() < 1e-7 * (1.0 + sr.abs()),
            "x_q[{r}]: {fd} vs {sr}"
        );
    }
}

#[test]
fn the_softmax_step_is_bit_identical_for_any_thread_count() {
    let mc = ModelConfig {
        attention: Attention::Softmax,
        heads: 2,
        ..ModelConfig::default()
    };
    let (a, b) = (step_on_threads(&mc, 1), step_on_threads(&mc, 4));
    assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
}

/// The config's rules: heads need softmax, softmax needs the full form.
#[test]
fn softmax_configs_are_checked() {
    let bad = [
        ModelConfig {
            heads: 2,
            ..ModelConfig::default()
        },
        ModelConfig {
            attention: Attention::Softmax,
            param: super::model::Param2::Blocks,
            ..ModelConfig::default()
        },
        ModelConfig {
            attention: Attention::Softmax,
            heads: 9,
            ..ModelConfig::default()
        },
    ];
    for c in bad {
        assert!(c.check().is_err(), "{c:?} passed");
    }
}
