//! birth's verdicts, one per claim, built from [`super::report::Measured`].

use super::config::BirthConfig;
use super::report::{Measured, MAJORITY};
use crate::run::summary::Summary;

pub mod ids {
    pub const FORMS: &str = "induction-head-forms";
    pub const MEMORIES: &str = "output-and-key-memories";
    pub const ONE_LAYER: &str = "one-layer-fails";
}

const SOURCE: &str = "Bietti et al. 2023 (arXiv:2306.00802), Sections 3–5 and the authors' ihead_basic_main.py probes; level 1/2: docs/birth.md";

/// The rule of `one-layer-fails`, from the accuracy at a trigger's second
/// occurrence. It says what a mechanism's absence looks like, so its control is
/// a model that has the mechanism: read on a trained two-layer run it fails
/// (`tests/it/birth.rs`).
pub fn one_layer_fails(acc2: f64) -> bool {
    acc2 <= MAJORITY
}

pub fn summary(cfg: &BirthConfig, m: &Measured) -> Summary {
    let mut s = Summary::new("birth", cfg.seed);
    let f = &m.fin;
    s.metric("final_train_loss", m.final_train_loss);
    for (k, v) in f.record() {
        if v.is_finite() {
            s.metric(k, v);
        }
    }
    s.metric("acc_init", m.init.acc);
    if cfg.model.n_layers == 1 {
        s.verdict(
            ids::ONE_LAYER,
            "a one-layer transformer trained the same way does not predict the in-context outputs",
            "accuracy at a trigger's second occurrence (its output seen once before) ≤ 1/2",
            SOURCE,
            format!(
                "accuracy at the second occurrence {:.3}; from the second occurrence on {:.3} (at initialisation {:.3})",
                f.acc2, f.acc, m.init.acc
            ),
            one_layer_fails(f.acc2),
        )
        .scored(f.acc2, Some(MAJORITY));
        return s;
    }
    s.verdict(
        ids::FORMS,
        "the two-layer model predicts the in-context outputs through an induction head",
        "accuracy at a trigger's second occurrence (its output seen once before) > 1/2, and layer 1's attention argmax on the token after an earlier occurrence of the trigger > 1/2",
        SOURCE,
        format!(
            "accuracy at the second occurrence {:.3}, from the second occurrence on {:.3} (at initialisation {:.3}); layer-1 attention probe {:.3}; layer-0 previous-token probe {:.3}",
            f.acc2, f.acc, m.init.acc, f.attn1, f.attn0
        ),
        f.acc2 > MAJORITY && f.attn1 > MAJORITY,
    )
    .scored(f.acc2, Some(MAJORITY));
    s.verdict(
        ids::MEMORIES,
        "the trained matrices store the head's associations: W_O² maps each token to itself, W_K² each trigger to its previous-token copy",
        "memory recall of W_O² > 1/2 and of W_K² > 1/2",
        SOURCE,
        format!(
            "W_O² {:.3}, W_K² {:.3} (at initialisation {:.3}, {:.3}); W_K¹ {:.3} (first 64 positions {:.3})",
            f.wo1, f.wk1, m.init.wo1, m.init.wk1, f.wk0, f.wk0_64
        ),
        f.wo1 > MAJORITY && f.wk1 > MAJORITY,
    )
    .scored(f.wo1, Some(MAJORITY));
    s
}
