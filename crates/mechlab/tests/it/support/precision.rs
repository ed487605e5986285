//! Helpers for the tests that run a model in f64 and in the double-double.

use mechlab::papers::selection::data::SeqData;
use mechlab::papers::topic::data::{MlmSet, NO_LABEL};
use mechlab_engine::{F64x2, Float, Parameters};

/// Copies `a`'s parameters into `b` (same visit order), exactly.
pub fn copy_params(a: &dyn Parameters<f64>, b: &mut dyn Parameters<F64x2>) {
    let mut vals = Vec::new();
    a.visit(&mut |p| vals.push(p.value().to_vec()));
    let mut i = 0;
    b.visit_mut(&mut |p| {
        for (x, &y) in p.value_mut().iter_mut().zip(&vals[i]) {
            *x = F64x2::of(y);
        }
        i += 1;
    });
}

/// `n` padded review-like sequences of `t` tokens over `v` ids, lengths 3..=6,
/// labels ±1 (for the selection model).
pub fn tiny_reviews(n: usize, t: usize, v: usize) -> SeqData {
    SeqData {
        n,
        n_ctx: t,
        d_vocab: v,
        ids: (0..n * t).map(|i| ((i * 7 + i / t) % v) as u32).collect(),
        lens: (0..n).map(|k| (3 + k % 4) as u32).collect(),
        y: (0..n)
            .map(|k| if k % 3 == 0 { -1.0 } else { 1.0 })
            .collect(),
        signal: vec![],
    }
}

/// Documents of the given lengths over `v` ids, token `(doc + stride·i) mod v`,
/// every third position masked (a hidden key) and labelled with the next id.
pub fn tiny_docs(v: usize, lens: &[usize], stride: usize) -> MlmSet {
    let (mut input, mut label, mut hidden, mut offsets) = (vec![], vec![], vec![], vec![0]);
    for (doc, &len) in lens.iter().enumerate() {
        for i in 0..len {
            let tok = ((doc + stride * i) % v) as u32;
            let masked = (i + doc) % 3 == 0;
            input.push(tok);
            hidden.push(masked);
            label.push(if masked {
                (tok + 1) % v as u32
            } else {
                NO_LABEL
            });
        }
        offsets.push(input.len());
    }
    MlmSet {
        offsets,
        original: input.clone(),
        input,
        label,
        hidden,
    }
}
