//! Helpers for the tests that run a model in f64 and in the double-double.

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
