//! `summary.json`: the stable, machine-readable result of a run.
//!
//! Its shape never changes between experiments:
//! `{"experiment", "seed", "metrics": {name: value}, "verdicts": [{"claim",
//! "prediction", "measured", "pass"}]}`, so sweeps, the combined reproduce report
//! and a user's notebook read every run the same way.
//!
//! ```
//! use mechlab::run::summary::Summary;
//! let mut s = Summary::new("selection", 0);
//! s.metric("test_acc", 0.91);
//! s.verdict("attention selects the signal token", "mass > 0.9", 0.97, 0.97 > 0.9);
//! assert!(s.all_pass());
//! assert!(serde_json::to_string(&s).unwrap().contains("\"verdicts\""));
//! ```

pub use mechlab_report::Verdict;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A run's result.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    pub experiment: String,
    pub seed: u64,
    pub metrics: BTreeMap<String, f64>,
    pub verdicts: Vec<Verdict>,
}

impl Summary {
    pub fn new(experiment: &str, seed: u64) -> Self {
        Summary {
            experiment: experiment.to_string(),
            seed,
            metrics: BTreeMap::new(),
            verdicts: Vec::new(),
        }
    }

    pub fn metric(&mut self, name: &str, value: f64) {
        self.metrics.insert(name.to_string(), value);
    }

    /// Records a claim, the theory's prediction, what was measured, and whether it held.
    pub fn verdict(
        &mut self,
        claim: &str,
        prediction: &str,
        measured: impl std::fmt::Display,
        pass: bool,
    ) {
        self.verdicts.push(Verdict {
            claim: claim.to_string(),
            prediction: prediction.to_string(),
            measured: measured.to_string(),
            pass,
        });
    }

    pub fn all_pass(&self) -> bool {
        self.verdicts.iter().all(|v| v.pass)
    }
}
