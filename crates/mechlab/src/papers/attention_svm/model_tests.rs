//! The attention-SVM model's tests: gradients against finite differences and
//! against the double-double at saturation, the chunked step, the sequence output
//! and the (K, Q) regulariser.

use super::*;
use crate::papers::attention_svm::data::{generate, DataConfig};
use mechlab_engine::gradcheck::{check_params, DEFAULT_H};

fn model(p: Param2, output: Output) -> SvmModel<f64> {
    let (data, v) = generate(
        &DataConfig {
            n: 3,
            t: 4,
            d: 5,
            twins: 0,
        },
        7,
    );
    let data = match output {
        Output::Cls => data,
        Output::Sequence => data.token_queries(),
    };
    let cfg = ModelConfig {
        param: p,
        m: 3,
        init: 0.5,
        output,
        ..ModelConfig::default()
    };
    SvmModel::new(&cfg, Arc::new(data), v, 7)
}

fn grads(m: &mut SvmModel<f64>) -> Vec<u64> {
    m.visit_mut(&mut |p| p.grad_mut().iter_mut().for_each(|g| *g = 0.0));
    let loss = m.train_step(0);
    let mut out = vec![loss.to_bits()];
    m.visit(&mut |p| out.extend(p.grad().iter().map(|g| g.to_bits())));
    out
}

/// Past `CHUNK_ITEMS` (512) sequences the step splits into chunks: the result is the
/// same bits on 1 and 2 threads, and matches one serial chunk to rounding.
#[test]
fn chunked_step_is_thread_count_free_and_matches_one_chunk() {
    for p in [Param2::W, Param2::Kq] {
        let (data, v) = generate(
            &DataConfig {
                n: 1100,
                t: 4,
                d: 5,
                twins: 0,
            },
            3,
        );
        let cfg = ModelConfig {
            param: p,
            m: 3,
            init: 0.5,
            ..ModelConfig::default()
        };
        let mut m = SvmModel::<f64>::new(&cfg, Arc::new(data), v, 3);
        assert_eq!(m.work.len(), 3);
        let pool = |k| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(k)
                .build()
                .unwrap()
        };
        let one = pool(1).install(|| grads(&mut m));
        let two = pool(2).install(|| grads(&mut m));
        assert_eq!(one, two, "{p:?}");
        let (t, d) = (m.data.t, m.data.d);
        m.work = vec![Work::new(1100, 1, t, d)];
        let serial = grads(&mut m);
        assert_ne!(serial, one, "{p:?}: one chunk should round differently");
        for (a, b) in serial.iter().zip(&one) {
            let (a, b) = (f64::from_bits(*a), f64::from_bits(*b));
            assert!(
                (a - b).abs() <= 1e-12 * (1.0 + a.abs()),
                "{p:?}: {a} vs {b}"
            );
        }
    }
}

#[test]
fn gradients_match_finite_differences() {
    for p in [Param2::W, Param2::Kq] {
        for output in [Output::Cls, Output::Sequence] {
            let mut m = model(p, output);
            let loss = |m: &SvmModel<f64>| m.forward(&m.w_eff()).0;
            let grads = |m: &mut SvmModel<f64>| {
                m.train_step(0);
            };
            for (name, r) in check_params(&mut m, loss, grads, DEFAULT_H) {
                r.assert_below(1e-6, &format!("{p:?} {output:?} {name}"));
            }
        }
    }
}

/// The sequence output is the mean over the sequence's token queries of the
/// per-query outputs, and the loss is taken on that mean: rebuilt here from the
/// per-query attention of the same items read one by one (`group = 1`).
#[test]
fn the_sequence_output_is_the_mean_over_token_queries() {
    let m = model(Param2::W, Output::Sequence);
    let q = m.data().clone();
    let single = SvmData {
        group: 1,
        ..(*q).clone()
    };
    let one = SvmModel::<f64>::new(
        &ModelConfig {
            param: Param2::W,
            m: 3,
            init: 0.5,
            output: Output::Cls,
            ..ModelConfig::default()
        },
        Arc::new(single),
        m.v.clone(),
        7,
    );
    let w = m.w_eff();
    let (loss, att) = m.forward(&w);
    let (_, att1) = one.forward(&w);
    assert_eq!(att, att1);
    let (t, n_seq) = (q.t, q.n / q.t);
    let mut want = 0.0;
    for i in 0..n_seq {
        let f: f64 = (0..t)
            .map(|k| {
                let item = i * t + k;
                (0..t)
                    .map(|j| att[item * t + j] * dot(&m.v, q.token(item, j)))
                    .sum::<f64>()
            })
            .sum::<f64>()
            / t as f64;
        want += softplus(-q.y[i * t] * f);
    }
    want /= n_seq as f64;
    assert!((loss - want).abs() < 1e-12, "{loss} vs {want}");
}

/// Scales the parameters until every item's largest attention weight is 1 in
/// f64 (returns the f64 model; `scale` is applied to W, or √scale to K and Q).
fn saturated(p: Param2, output: Output) -> SvmModel<f64> {
    let mut m = model(p, output);
    let mut c = 1.0;
    while m
        .attention()
        .1
        .chunks(m.data.t)
        .any(|r| r.iter().all(|&a| a < 1.0))
    {
        let f = if p == Param2::W { 2.0 } else { 2f64.sqrt() };
        m.visit_mut(&mut |q| q.value_mut().iter_mut().for_each(|x| *x *= f));
        c *= 2.0;
        assert!(c < 1e6, "{p:?} {output:?}: no saturation");
    }
    m
}

/// Where the softmax has saturated in f64 (the largest weight of every item
/// is exactly 1), the f64 gradient points where the double-double's does, for
/// every parameter, both outputs and both parameterisations. The textbook
/// `a_t (u_t − f)` fails this: its selected-token term is rounding noise.
#[test]
fn gradient_keeps_its_direction_at_saturation() {
    use mechlab_engine::precision::{assert_direction, MIN_COSINE};
    use mechlab_engine::F64x2;
    for p in [Param2::W, Param2::Kq] {
        for output in [Output::Cls, Output::Sequence] {
            let mut m = saturated(p, output);
            let mut hi = SvmModel::<F64x2>::new(
                &ModelConfig {
                    param: p,
                    m: 3,
                    init: 0.5,
                    output,
                    ..ModelConfig::default()
                },
                m.data.clone(),
                m.v.clone(),
                7,
            );
            let mut vals = Vec::new();
            m.visit(&mut |q| vals.push(q.value().to_vec()));
            let mut i = 0;
            hi.visit_mut(&mut |q| {
                for (x, &y) in q.value_mut().iter_mut().zip(&vals[i]) {
                    *x = F64x2::of(y);
                }
                i += 1;
            });
            m.zero_grad();
            m.train_step(0);
            hi.zero_grad();
            hi.train_step(0);
            let mut want = Vec::new();
            hi.visit(&mut |q| want.push(q.grad().iter().map(|g| g.as_f64()).collect::<Vec<_>>()));
            let mut k = 0;
            m.visit(&mut |q| {
                if !q.grad().is_empty() {
                    let what = format!("{p:?} {output:?} {}", q.name());
                    assert_direction(&what, q.grad(), &want[k], MIN_COSINE);
                }
                k += 1;
            });
        }
    }
}

/// `model.kq_reg = λ` adds `λ(‖K‖² + ‖Q‖²)` to the loss, and its gradient
/// matches finite differences of that loss.
#[test]
fn the_kq_regulariser_is_in_loss_and_gradient() {
    let (data, v) = generate(
        &DataConfig {
            n: 3,
            t: 4,
            d: 5,
            twins: 0,
        },
        7,
    );
    let cfg = ModelConfig {
        param: Param2::Kq,
        m: 3,
        init: 0.5,
        kq_reg: 0.05,
        ..ModelConfig::default()
    };
    let mut m = SvmModel::<f64>::new(&cfg, Arc::new(data), v, 7);
    let loss = |m: &SvmModel<f64>| {
        let sq = |p: &Param<f64>| p.value().iter().map(|x| x * x).sum::<f64>();
        m.forward(&m.w_eff()).0 + 0.05 * (sq(&m.k) + sq(&m.q))
    };
    let want = loss(&m);
    m.zero_grad();
    assert!((m.train_step(0) - want).abs() < 1e-14);
    let grads = |m: &mut SvmModel<f64>| {
        m.train_step(0);
    };
    for (name, r) in check_params(&mut m, loss, grads, DEFAULT_H) {
        r.assert_below(1e-6, &format!("kq_reg {name}"));
    }
}
