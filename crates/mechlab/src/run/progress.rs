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

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;

/// What a run is doing, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    /// Generating or reading data, building the model (before the first step).
    Setup = 0,
    /// The training loop (the bar counts steps).
    Training = 1,
    /// Probes, interventions and verdicts after training.
    Measuring = 2,
    /// The summary, figures and report.
    Report = 3,
    Done = 4,
}

impl Phase {
    const ALL: [Phase; 5] = [
        Phase::Setup,
        Phase::Training,
        Phase::Measuring,
        Phase::Report,
        Phase::Done,
    ];

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
    phase: AtomicU8,
    /// Every phase entered, in order (a handful per run).
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
        self.phase.store(phase as u8, Ordering::Relaxed);
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.last() != Some(&phase) {
            seen.push(phase);
        }
    }
    pub fn phase(&self) -> Phase {
        Phase::ALL[usize::from(self.phase.load(Ordering::Relaxed)).min(4)]
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
}
