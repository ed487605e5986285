//! A progress counter that a caller outside the training loop can watch.
//!
//! The CLI draws its bars inside the loop; an embedding program (the Python
//! package) runs the job on a worker thread and polls this counter from its own
//! thread to draw its own bar, so the loop never calls back into foreign code and
//! pays only two relaxed atomic stores per step.

use std::sync::atomic::{AtomicU64, Ordering};

/// Units done out of a total (training steps for a run; runs for a sweep or a
/// reproduce). Both start at zero; the total is known once the job has planned.
#[derive(Debug, Default)]
pub struct Progress {
    done: AtomicU64,
    total: AtomicU64,
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
