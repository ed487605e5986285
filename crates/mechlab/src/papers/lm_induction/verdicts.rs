//! lm-induction's verdicts, one per claim, each built from [`super::measure`].

use super::config::LmConfig;
use super::measure::{Measured, INDUCTION_THRESHOLD};
use crate::run::summary::Summary;

pub mod ids {
    pub const FORMS: &str = "induction-head-forms";
    pub const NONE_1L: &str = "one-layer-forms-none";
    pub const WINDOW: &str = "icl-drop-in-phase-change";
    pub const ABLATION: &str = "ablation-removes-icl";
    pub const COPIES: &str = "induction-heads-copy";
}

const SOURCE: &str = "Olsson et al. 2022 (arXiv:2209.11895), Arguments 1 and 3; threshold and window: docs/lm-induction.md";

fn heads(hs: &[(usize, usize)]) -> String {
    let v: Vec<String> = hs.iter().map(|(l, h)| format!("L{l}H{h}")).collect();
    v.join(", ")
}

/// The rule of `one-layer-forms-none`, from the best head's induction score.
/// It says what a mechanism's absence looks like, so its control is a model that
/// has the mechanism: read on a trained two-layer run it fails
/// (`tests/it/lm_induction.rs`).
pub fn forms_none(best: f64) -> bool {
    best <= INDUCTION_THRESHOLD
}

pub fn summary(cfg: &LmConfig, m: &Measured) -> Summary {
    let mut s = Summary::new("lm-induction", cfg.seed);
    s.metric("final_train_loss", m.final_train_loss);
    s.metric("heldout_loss", m.fin.loss);
    s.metric("icl_score", m.fin.icl);
    s.metric("icl_score_init", m.init.icl);
    if let (Some(a), Some(b)) = (m.init.icl_text, m.fin.icl_text) {
        s.metric("icl_score_text", b);
        s.metric("icl_score_text_init", a);
    }
    s.metric("rep_loss", m.fin.rep_loss);
    s.metric("induction_heads", m.heads.len() as f64);
    let (bl, bh, best) = m.fin.best_induction();
    s.metric("induction_best", best);
    s.metric("uniform_induction", m.uniform_induction);
    if let Some(t) = m.t_form {
        s.metric("t_form", t as f64);
    }
    for (l, hs) in m.fin.induction.iter().enumerate() {
        for (h, v) in hs.iter().enumerate() {
            s.metric(&format!("induction.l{l}.h{h}"), *v);
            s.metric(&format!("prev_token.l{l}.h{h}"), m.fin.prev_token[l][h]);
            s.metric(&format!("copying.l{l}.h{h}"), m.fin.copying[l][h]);
        }
    }
    let best_line = format!(
        "best head L{bl}H{bh}: {best:.3} (at init {:.3}; uniform attention {:.3}); heads above {INDUCTION_THRESHOLD}: {}",
        m.init.induction[bl][bh],
        m.uniform_induction,
        m.heads.len()
    );
    if cfg.model.n_layers == 1 {
        s.verdict(
            ids::NONE_1L,
            "a one-layer model trained the same way forms no induction head",
            &format!("no head's induction score above {INDUCTION_THRESHOLD}"),
            SOURCE,
            best_line,
            forms_none(best),
        )
        .scored(best, Some(INDUCTION_THRESHOLD));
        return s;
    }
    s.verdict(
        ids::FORMS,
        "an induction head forms in the two-layer model",
        &format!("some head's induction score above {INDUCTION_THRESHOLD} (the token after the earlier occurrence outweighs every other key)"),
        SOURCE,
        best_line.clone(),
        best > INDUCTION_THRESHOLD,
    )
    .scored(best, Some(INDUCTION_THRESHOLD));
    let copies: Vec<String> = m
        .heads
        .iter()
        .map(|&(l, h)| format!("L{l}H{h} {:.3}", m.fin.copying[l][h]))
        .collect();
    s.verdict(
        ids::COPIES,
        "the induction heads copy: their OV circuits raise the logit of the token they attend to",
        "every induction head's copying score (Σλ / Σ|λ| over the eigenvalues of W_U W_O W_V W_E, LayerNorm folded) above the largest |score| of any head at initialisation",
        "Olsson et al. 2022 (arXiv:2209.11895), \"Definitions\" (copying); the score: Elhage et al. 2021, \"A Mathematical Framework for Transformer Circuits\"; baseline: docs/lm-induction.md",
        if copies.is_empty() {
            "no induction head".to_string()
        } else {
            format!(
                "{}; largest |score| at initialisation {:.3}",
                copies.join(", "),
                m.copying_init
            )
        },
        !m.heads.is_empty()
            && m
                .heads
                .iter()
                .all(|&(l, h)| m.fin.copying[l][h] > m.copying_init),
    )
    .scored(
        m.heads
            .iter()
            .map(|&(l, h)| m.fin.copying[l][h])
            .fold(f64::INFINITY, f64::min),
        Some(m.copying_init),
    );
    let window = m
        .rise
        .map(|(a, b)| (a.saturating_sub(m.probe_gap), b + m.probe_gap));
    // Its precondition is a head that formed: without one, a "rise" of the
    // strongest head and a "largest drop" exist in any run, and would overlap by
    // chance. So it is not judged (it fails) then, and a drop must be a fall.
    let (pass, measured) = match (window, m.icl_drop) {
        _ if m.heads.is_empty() => (
            false,
            format!("not judged: no induction head formed ({best_line})"),
        ),
        (Some((lo, hi)), Some((from, to, drop))) => (
            drop > 0.0 && from < hi && to > lo,
            format!("largest drop {drop:.3} nats between steps {from} and {to}; induction rise window {lo}–{hi}"),
        ),
        (None, _) => (false, "the induction score never rose".into()),
        (_, None) => (false, "fewer than two probes".into()),
    };
    s.verdict(
        ids::WINDOW,
        "the in-context learning score drops while the induction head forms",
        "an induction head forms, and the largest fall of the ICL score between consecutive probes lies in the strongest head's 10–90 % rise, widened by one probe interval",
        SOURCE,
        measured,
        pass,
    );
    let gain = m.init.icl - m.fin.icl;
    let (pass, measured) = match (m.icl_ablated, m.icl_control) {
        (Some(a), Some(c)) => {
            let (ga, gc) = (m.init.icl - a, m.init.icl - c);
            (
                ga < gain / 2.0 && gc > gain / 2.0,
                format!(
                    "ICL gain from init {gain:.3} nats; with the induction heads {} ablated {ga:.3}; their partners (ablating one alone halves their score): {}; with {} heads outside the circuit {} ablated {gc:.3}",
                    heads(&m.heads),
                    heads(&m.partners),
                    m.control_heads.len(),
                    heads(&m.control_heads)
                ),
            )
        }
        _ => (
            false,
            "no induction head (or too few other heads) to ablate".into(),
        ),
    };
    s.verdict(
        ids::ABLATION,
        "ablating the induction heads removes most of the in-context learning gain; ablating as many heads outside the circuit does not",
        "gain with the induction heads zero-ablated (hook_z) < half the trained gain < gain with as many heads outside the circuit ablated (neither induction heads nor heads whose ablation alone halves their score)",
        SOURCE,
        measured,
        pass,
    )
    .scored(
        m.icl_ablated.map_or(f64::NAN, |a| m.init.icl - a),
        Some(gain / 2.0),
    );
    s
}
