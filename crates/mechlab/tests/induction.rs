//! Induction heads (Chen et al. 2024): gradient checks and mechanism tests.

use mechlab::data::markov::{generate, MarkovSpec};
use mechlab::models::induction_simplified::{LossKind, Simplified, SimplifiedConfig};
use mechlab_engine::gradcheck::{check, DEFAULT_H};
use mechlab_engine::Parameters;

fn flat(m: &Simplified<f64>) -> Vec<f64> {
    let mut v = Vec::new();
    m.visit(&mut |p| v.extend_from_slice(p.value()));
    v
}

fn set(m: &mut Simplified<f64>, x: &[f64]) {
    let mut o = 0;
    m.visit_mut(&mut |p| {
        let n = p.numel();
        p.value_mut().copy_from_slice(&x[o..o + n]);
        o += n;
    });
}

fn gradcheck_simplified(loss: LossKind, heads: usize, degree: usize) {
    let spec = MarkovSpec {
        n_seqs: 70,
        seq_len: 12,
        ..MarkovSpec::default()
    };
    let data = generate(&spec, 11).unwrap();
    let cfg = SimplifiedConfig {
        loss,
        n_heads: heads,
        degree,
        ..SimplifiedConfig::default()
    };
    let mut m = Simplified::<f64>::new(&cfg);
    // a generic point, away from the symmetric init
    let x0: Vec<f64> = flat(&m)
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v + 0.3 * ((i as f64 * 1.7).sin()) + if i + 1 == flat(&m).len() { 1.5 } else { 0.0 }
        })
        .collect();
    set(&mut m, &x0);
    m.zero_grad();
    m.loss(&data.tokens, 12, true);
    let mut g = Vec::new();
    m.visit(&mut |p| g.extend_from_slice(p.grad()));
    let mut f = |x: &[f64]| {
        set(&mut m, x);
        m.loss(&data.tokens, 12, false)
    };
    check(&mut f, &x0, &g, DEFAULT_H)
        .assert_below(1e-6, &format!("simplified {loss:?} H={heads} D={degree}"));
}

#[test]
fn simplified_gradients_code_loss() {
    gradcheck_simplified(LossKind::Code, 3, 2);
    gradcheck_simplified(LossKind::Code, 3, 3);
}

#[test]
fn simplified_gradients_true_loss() {
    gradcheck_simplified(LossKind::Nll, 3, 2);
    gradcheck_simplified(LossKind::Nll, 2, 2);
}
