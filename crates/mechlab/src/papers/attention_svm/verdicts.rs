//! The attention-SVM verdicts' stable ids and the sources of their predictions:
//! the papers' claims, with the bars taken from the authors' code run in the same
//! setting (`bench/attention_svm/authors_port.py`).

/// The verdicts' stable ids.
pub mod ids {
    pub const W: &str = "attention-svm.w-direction";
    pub const KQ: &str = "attention-svm.kq-low-rank";
    pub const NUC: &str = "attention-svm.kq-nuclear-direction";
    pub const LOCAL: &str = "attention-svm.local-optimality";
    /// A measurement, not a verdict.
    pub const REG: &str = "attention-svm.regularisation-path";
}

/// Where each verdict's prediction comes from (docs/attention-svm.md).
pub(super) mod sources {
    pub const W: &str = "TF-as-SVM (Tarzanagh, Li, Thrampoulidis, Oymak 2023), claim (2): GD on W converges in direction to the Frobenius attention SVM of its selection while ‖W‖ → ∞; the bar is the authors' code (local_converge.ipynb, ported in bench/attention_svm/authors_port.py) in this setting: 0.992–0.998 at 2 000 steps on seeds 0–9";
    pub const KQ: &str = "TF-as-SVM, claim (1): (K, Q) converges to the nuclear-norm SVM, not the Frobenius one, and its solution is low rank; the authors' code in this setting: corr with the Frobenius SVM 0.76–0.91, rank(W) 2–4 against rank(W^mm_F) = 6, seeds 0–9";
    pub const NUC: &str = "TF-as-SVM, claim (1): GD on (K, Q) with vanishing regularisation converges in direction to the nuclear-norm SVM; the bar is the authors' code (with its ε(‖K‖² + ‖Q‖²) term) in this setting: 0.995–0.998 at 2 000 steps on seeds 0–9";
    pub const LOCAL: &str = "TF-as-SVM: Definition 2 (locally optimal tokens) and its local-convergence result; the authors' code in the local setting (n = 24, T = 4, d = 3): corr 0.958–0.9999 and 4 of 5 seeds locally optimal at 2 000 steps";
}
