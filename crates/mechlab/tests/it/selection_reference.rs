//! The selection model's fused step (rank-2 scatter, precise softmax `f = u₀ + δ`)
//! against a reference assembled from engine layers, llm.c style: the same mean
//! loss and every parameter gradient, in f64, to 1e-10 relative.
//!
//! Per sequence the reference runs `embedding` (rows `E_x`) → two `linear`
//! read-outs (`s = E_x p`, `u = E_x v`) → `softmax` (padding masked) → a `linear`
//! `f = a·u` → `loss::logistic`, and back the same way.

use mechlab::papers::selection::data::SeqData;
use mechlab::papers::selection::model::{ModelConfig, SelectionModel};
use mechlab::train::Trainable;
use mechlab_engine::layers::loss::logistic;
use mechlab_engine::layers::{embedding, linear, softmax};
use mechlab_engine::Parameters;
use std::sync::Arc;

/// Padded sequences over `d_vocab` tokens with lengths 1..=n_ctx and ±1 labels.
fn data(n: usize, n_ctx: usize, d_vocab: usize) -> SeqData {
    let mut ids = vec![0u32; n * n_ctx];
    let mut lens = vec![0u32; n];
    for k in 0..n {
        lens[k] = (1 + (k * 7) % n_ctx) as u32;
        for i in 0..n_ctx {
            // padding rows hold a real id: the mask, not the id, must hide them
            ids[k * n_ctx + i] = ((k * 5 + i * 3 + k * i) % d_vocab) as u32;
        }
    }
    let y = (0..n)
        .map(|k| if k % 3 == 0 { -1.0 } else { 1.0 })
        .collect();
    SeqData {
        n,
        n_ctx,
        d_vocab,
        ids,
        lens,
        y,
        signal: vec![],
    }
}

/// `(loss, [dE, dp, dv])` of the mean logistic loss, from engine layers.
fn reference(data: &SeqData, e: &[f64], p: &[f64], v: &[f64], d: usize) -> (f64, Vec<Vec<f64>>) {
    let t = data.n_ctx;
    let inv_n = 1.0 / data.n as f64;
    let (mut de, mut dp, mut dv) = (vec![0.0; e.len()], vec![0.0; d], vec![0.0; d]);
    let mut total = 0.0;
    for k in 0..data.n {
        let ids: Vec<usize> = data.ids[k * t..(k + 1) * t]
            .iter()
            .map(|&x| x as usize)
            .collect();
        let keep: Vec<bool> = (0..t).map(|i| i < data.lens[k] as usize).collect();
        let mut ex = vec![0.0; t * d];
        embedding::forward(&mut ex, &ids, e, d);
        let (mut s, mut u) = (vec![0.0; t], vec![0.0; t]);
        linear::forward(&mut s, &ex, p, None, t, d, 1);
        linear::forward(&mut u, &ex, v, None, t, d, 1);
        let mut a = vec![0.0; t];
        softmax::forward(&mut a, &s, Some(&keep), 1, t);
        let mut f = [0.0];
        linear::forward(&mut f, &a, &u, None, 1, t, 1);
        let (l, df) = logistic(f[0], data.y[k]);
        total += l;
        let (mut da, mut du) = (vec![0.0; t], vec![0.0; t]);
        linear::backward(Some(&mut da), &mut du, None, &[df * inv_n], &a, &u, 1, t, 1);
        let mut ds = vec![0.0; t];
        softmax::backward(&mut ds, &da, &a, 1, t);
        let mut dex = vec![0.0; t * d];
        linear::backward(Some(&mut dex), &mut dp, None, &ds, &ex, p, t, d, 1);
        linear::backward(Some(&mut dex), &mut dv, None, &du, &ex, v, t, d, 1);
        embedding::backward(&mut de, &ids, &dex, d);
    }
    (total * inv_n, vec![de, dp, dv])
}

#[test]
fn selection_step_matches_engine_layers() {
    let (n, n_ctx, d_vocab, d) = (37, 6, 7, 5);
    let data = Arc::new(data(n, n_ctx, d_vocab));
    let cfg = ModelConfig {
        d_model: d,
        // E ⊥ v would make every value u = 0 and ∂L/∂p vanish
        e_orthogonal_to_v: false,
        ..ModelConfig::default()
    };
    let mut m = SelectionModel::<f64>::new(&cfg, data.clone(), 3);
    // p = 0 at init; a generic p makes the attention non-uniform
    for (j, x) in m.p.value_mut().iter_mut().enumerate() {
        *x = 0.8 * (j as f64 * 2.1).sin();
    }
    let (e, p, v) = (
        m.w_e.value().to_vec(),
        m.p.value().to_vec(),
        m.v.value().to_vec(),
    );
    m.zero_grad();
    let loss = m.train_step(0);
    let (want, grads) = reference(&data, &e, &p, &v, d);
    assert!(
        (loss - want).abs() <= 1e-10 * want.abs(),
        "loss: fused {loss} vs reference {want}"
    );
    for (name, got, want) in [
        ("dE", m.w_e.grad(), &grads[0]),
        ("dp", m.p.grad(), &grads[1]),
        ("dv", m.v.grad(), &grads[2]),
    ] {
        let scale = want.iter().fold(0.0f64, |a, x| a.max(x.abs()));
        let err = got
            .iter()
            .zip(want)
            .fold(0.0f64, |a, (x, y)| a.max((x - y).abs()));
        assert!(scale > 0.0, "{name}: zero reference gradient");
        assert!(err <= 1e-10 * scale, "{name}: {err:e} vs scale {scale:e}");
    }
}
