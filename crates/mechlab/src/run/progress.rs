//! A progress counter that a caller outside the training loop can watch.
//!
//! The CLI draws its bars inside the loop; an embedding program (the Python
//! package) runs the job on a worker thread and polls this counter from its own
//! thread to draw its own bar, so the loop never calls back into foreign code and
//! pays only two relaxed atomic stores per step.
//!
//! A run also says which [`Phase`] it is in, so that the seconds to minutes
//! spent before and after training (data, probes, figures, report) are named
//! rather than shown as a bar stuck at 0 or 100 %.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// What a run is doing, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Generating or reading data, building the model (before the first step).
    Setup,
    /// The training loop (the bar counts steps).
    Training,
    /// Probes, interventions and verdicts after training.
    Measuring,
    /// The summary, figures and report.
    Report,
    Done,
}

impl Phase {
    /// The name a progress bar shows.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Setup => "data and model",
            Phase::Training => "training",
            Phase::Measuring => "probes and verdicts",
            Phase::Report => "figures and report",
            Phase::Done => "done",
        }
    }
}

/// Units done out of a total (training steps for a run; runs for a sweep or a
/// reproduce). Both start at zero; the total is known once the job has planned.
#[derive(Debug, Default)]
pub struct Progress {
    done: AtomicU64,
    total: AtomicU64,
    /// Every phase entered, in order (a handful per run); the last is the
    /// current one.
    seen: Mutex<Vec<Phase>>,
}

impl Progress {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn set_total(&self, total: u64) {
        self.total.store(total, Ordering::Relaxed);
    }
    pub fn set_done(&self, done: u64) {
        self.done.store(done, Ordering::Relaxed);
    }
    pub fn inc(&self) {
        self.done.fetch_add(1, Ordering::Relaxed);
    }
    pub fn set_phase(&self, phase: Phase) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.last() != Some(&phase) {
            seen.push(phase);
        }
    }
    /// The current phase ([`Phase::Setup`] until one is set). A lock, not an
    /// atomic: watchers ask a few times a second, the loop never.
    pub fn phase(&self) -> Phase {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.last().copied().unwrap_or(Phase::Setup)
    }
    /// The phases entered so far, in order.
    pub fn phases(&self) -> Vec<Phase> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
    /// `(done, total)`.
    pub fn get(&self) -> (u64, u64) {
        (
            self.done.load(Ordering::Relaxed),
            self.total.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts() {
        let p = super::Progress::new();
        p.set_total(3);
        p.inc();
        p.inc();
        assert_eq!(p.get(), (2, 3));
        p.set_done(0);
        assert_eq!(p.get(), (0, 3));
    }

    #[test]
    fn the_current_phase_is_the_last_entered() {
        use super::Phase::*;
        let p = super::Progress::new();
        assert_eq!(p.phase(), Setup);
        for ph in [Setup, Training, Training, Measuring, Training, Measuring] {
            p.set_phase(ph);
        }
        assert_eq!(p.phase(), Measuring);
        assert_eq!(
            p.phases(),
            [Setup, Training, Measuring, Training, Measuring]
        );
    }
}
