//! Attention-svm's measurements after training: the singular values and
//! numerical ranks of the final `W` and of the SVM solutions (Frobenius and
//! nuclear), and the regularisation path (claim d, [`super::regpath`]).

use super::data::SvmData;
use super::regpath::{self, RegPath};
use super::train::Trained;
use super::{svm, AttentionSvmConfig};
use std::sync::Arc;

/// What the verdicts, figures and notes read besides the training's last probe.
pub(super) struct Measured {
    pub d: usize,
    /// Singular values of the final `W`, of the Frobenius SVM of the selected
    /// tokens and of the nuclear-norm SVM (K, Q only), largest first.
    pub sv: Vec<f64>,
    pub mm_sv: Option<Vec<f64>>,
    pub nuc_sv: Option<Vec<f64>>,
    /// Their numerical ranks (σ_i > `probe.rank_tol` σ_1).
    pub rank_w: usize,
    pub rank_mm: Option<usize>,
    pub rank_nuc: Option<usize>,
    pub reg: Option<RegPath>,
}

pub(super) fn measure(
    cfg: &AttentionSvmConfig,
    data: &Arc<SvmData>,
    v: &[f64],
    seed: u64,
    tr: &Trained,
) -> Measured {
    let d = data.d;
    let sv = svm::singular_values(&tr.w, d);
    let rank = |sv: &[f64]| {
        sv.iter()
            .filter(|&&s| s > cfg.probe.rank_tol * sv[0].max(1e-300))
            .count()
    };
    let mm_sv = tr.sel.w_mm.as_ref().map(|m| svm::singular_values(m, d));
    let nuc_sv = tr.nuc.w_mm.as_ref().map(|m| svm::singular_values(m, d));
    Measured {
        d,
        rank_w: rank(&sv),
        rank_mm: mm_sv.as_ref().map(|s| rank(s)),
        rank_nuc: nuc_sv.as_ref().map(|s| rank(s)),
        sv,
        mm_sv,
        nuc_sv,
        reg: regpath::against_svm(cfg, data, v, seed),
    }
}
