//! Attention-svm's training stage: normalised GD on `W` or `(K, Q)` with a probe
//! that follows the direction of `W(t)` against the attention-SVM solutions of
//! the selected tokens, the highest-score tokens and a wrong selection (the
//! control), and for `(K, Q)` the nuclear-norm SVM; each SVM is solved again only
//! when its selection changes ([`Target`]).

use super::data::{argmax_rows, SvmData};
use super::model::{Param2, SvmModel};
use super::{nuclear, svm, AttentionSvmConfig};
use crate::experiment::ExperimentError;
use crate::run::{RunCtx, RunError};
use crate::train::{fit, Fitted};
use mechlab_engine::Float;
use std::sync::Arc;

/// The wrong selection of the control: each sequence's next token after `sel`.
pub(super) fn shifted(sel: &[usize], t: usize) -> Vec<usize> {
    sel.iter().map(|&s| (s + 1) % t).collect()
}

/// An SVM solver for a selection: [`svm::w_mm`] or [`nuclear::w_mm_nuclear`].
pub(super) type SolveSvm = fn(&SvmData, &[usize]) -> Result<Vec<f64>, svm::SvmError>;

/// Correlation of `w` with the SVM of `sel`, solving only when `sel` changed.
pub(super) struct Target {
    pub sel: Vec<usize>,
    pub w_mm: Option<Vec<f64>>,
    pub err: String,
    /// The last selection's SVM has no feasible point: its tokens cannot be separated.
    pub infeasible: bool,
    /// The SVM solved for a new selection: Frobenius or nuclear norm.
    solve: SolveSvm,
}

impl Target {
    pub fn new(solve: SolveSvm) -> Self {
        Target {
            sel: vec![],
            w_mm: None,
            err: String::new(),
            infeasible: false,
            solve,
        }
    }
    /// The correlation of `w` with the SVM of `sel`, solved again only when the
    /// selection changes.
    pub fn corr(&mut self, data: &SvmData, sel: &[usize], w: &[f64]) -> Option<f64> {
        if self.sel != sel {
            self.sel = sel.to_vec();
            let solved = (self.solve)(data, sel);
            self.infeasible = matches!(solved, Err(svm::SvmError::Infeasible(_)));
            self.w_mm = solved.map_err(|e| self.err = e.to_string()).ok();
        }
        self.w_mm.as_ref().map(|m| svm::corr(w, m))
    }
}

/// What the last probe saw.
#[derive(Default)]
pub(super) struct Last {
    pub corr_sel: Option<f64>,
    pub corr_opt: Option<f64>,
    pub corr_ctrl: Option<f64>,
    /// corr(W, W^mm_*) ((K, Q) only), and its largest value with the step.
    pub corr_nuc: Option<f64>,
    pub corr_nuc_max: Option<(f64, u64)>,
    pub w_norm: f64,
    pub attn_max: f64,
    pub sel_is_opt: f64,
}

/// What training leaves for measurement and verdicts.
pub(super) struct Trained {
    pub fitted: Fitted,
    /// The last probe.
    pub last: Last,
    /// The SVM targets of the selected tokens, the highest-score tokens, the
    /// wrong selection and (K, Q only) the nuclear norm, as the last probe left them.
    pub sel: Target,
    pub opt: Target,
    pub ctrl: Target,
    pub nuc: Target,
    /// The final effective `W`, `[d, d]`.
    pub w: Vec<f64>,
}

/// Trains the model on `data` with the probe of the module doc.
pub(super) fn train<T: Float>(
    cfg: &AttentionSvmConfig,
    data: &Arc<SvmData>,
    v: &[f64],
    seed: u64,
    ctx: &mut RunCtx,
) -> Result<Trained, ExperimentError> {
    let opt = data.optimal(v);
    let t = data.t;
    let mut model = SvmModel::<T>::new(&cfg.model, data.clone(), v.to_vec(), seed);
    let new = || Target::new(svm::w_mm);
    let (mut tgt_sel, mut tgt_opt, mut tgt_ctrl) = (new(), new(), new());
    let mut tgt_nuc = Target::new(nuclear::w_mm_nuclear);
    let kq = cfg.model.param == Param2::Kq;
    let mut last = Last::default();
    let swap = cfg.probe.swap_selected;
    let dref = &**data;
    let opt_ref = &opt;
    let mut probe = |m: &mut SvmModel<T>, step: u64, ctx: &mut RunCtx| -> Result<(), RunError> {
        let w = m.w_eff();
        let (loss, att) = m.attention();
        let mut sel = argmax_rows(&att, t);
        let ctrl = shifted(&sel, t);
        if swap {
            sel = ctrl.clone();
        }
        last.corr_sel = tgt_sel.corr(dref, &sel, &w);
        last.corr_opt = tgt_opt.corr(dref, opt_ref, &w);
        last.corr_ctrl = tgt_ctrl.corr(dref, &ctrl, &w);
        if kq {
            last.corr_nuc = tgt_nuc.corr(dref, &sel, &w);
            if let Some(c) = last.corr_nuc {
                if last.corr_nuc_max.is_none_or(|(m, _)| c > m) {
                    last.corr_nuc_max = Some((c, step));
                }
            }
        }
        last.w_norm = w.iter().map(|x| x * x).sum::<f64>().sqrt();
        last.attn_max = att
            .chunks(t)
            .map(|r| r.iter().cloned().fold(0.0, f64::max))
            .sum::<f64>()
            / dref.n as f64;
        last.sel_is_opt =
            sel.iter().zip(opt_ref).filter(|(a, b)| a == b).count() as f64 / dref.n as f64;
        let mut rec = vec![
            ("loss", loss),
            ("w_norm", last.w_norm),
            ("attn_max", last.attn_max),
            ("sel_is_opt", last.sel_is_opt),
        ];
        for (k, c) in [
            ("corr_sel", last.corr_sel),
            ("corr_opt", last.corr_opt),
            ("corr_ctrl", last.corr_ctrl),
            ("corr_nuc", last.corr_nuc),
        ] {
            if let Some(c) = c {
                rec.push((k, c));
            }
        }
        ctx.log("probe", step, &rec)
    };
    let fitted = fit(&mut model, &cfg.train, ctx, &mut probe)?;
    Ok(Trained {
        fitted,
        last,
        sel: tgt_sel,
        opt: tgt_opt,
        ctrl: tgt_ctrl,
        nuc: tgt_nuc,
        w: model.w_eff(),
    })
}
