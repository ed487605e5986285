//! `summary.json`: the stable, machine-readable result of a run.
//!
//! Its shape never changes between experiments:
//! `{"experiment", "seed", "metrics": {name: value}, "verdicts": [{"id", "claim",
//! "prediction", "source", "measured", "pass"}], "measurements": [{"id",
//! "quantity", "value", "note"}]}`, so sweeps, the combined reproduce report and a
//! user's notebook read every run the same way. A verdict names where its
//! prediction comes from (`source`); a number the theory gives no value for at
//! this size is a measurement, reported without a pass or a fail.
//!
//! ```
//! use mechlab::run::summary::Summary;
//! let mut s = Summary::new("selection", 0);
//! s.metric("test_acc", 0.91);
//! s.verdict(
//!     "selection.mass",
//!     "attention selects the signal token",
//!     "mass > 0.9",
//!     "Theorem 1 of the paper",
//!     0.97,
//!     0.97 > 0.9,
//! )
//! .scored(0.97, Some(0.9));
//! assert!(s.all_pass());
//! assert_eq!(s.verdicts[0].value, Some(0.97));
//! assert!(serde_json::to_string(&s).unwrap().contains("\"source\""));
//! ```

pub use mechlab_report::{Measurement, Verdict};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A run's result.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    pub experiment: String,
    pub seed: u64,
    /// A metric that is not a number (a time that never came) is written as
    /// JSON `null` and read back as NaN.
    #[serde(deserialize_with = "metrics_with_nan")]
    pub metrics: BTreeMap<String, f64>,
    pub verdicts: Vec<Verdict>,
    /// Absent in files written before measurements existed.
    #[serde(default)]
    pub measurements: Vec<Measurement>,
}

fn metrics_with_nan<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, f64>, D::Error> {
    let m = BTreeMap::<String, Option<f64>>::deserialize(d)?;
    Ok(m.into_iter()
        .map(|(k, v)| (k, v.unwrap_or(f64::NAN)))
        .collect())
}

impl Summary {
    pub fn new(experiment: &str, seed: u64) -> Self {
        Summary {
            experiment: experiment.to_string(),
            seed,
            metrics: BTreeMap::new(),
            verdicts: Vec::new(),
            measurements: Vec::new(),
        }
    }

    pub fn metric(&mut self, name: &str, value: f64) {
        self.metrics.insert(name.to_string(), value);
    }

    /// Records a claim under its stable `id`, the theory's prediction and where it
    /// comes from (`source`), what was measured, and whether it held. The number
    /// it is judged on, and the bar, follow with [`Verdict::scored`].
    pub fn verdict(
        &mut self,
        id: &str,
        claim: &str,
        prediction: &str,
        source: &str,
        measured: impl std::fmt::Display,
        pass: bool,
    ) -> &mut Verdict {
        assert!(
            !id.is_empty() && !source.is_empty(),
            "verdict `{claim}`: every verdict needs an id and the source of its prediction"
        );
        self.verdicts.push(Verdict {
            id: id.to_string(),
            claim: claim.to_string(),
            prediction: prediction.to_string(),
            source: source.to_string(),
            measured: measured.to_string(),
            pass,
            ..Verdict::default()
        });
        self.verdicts.last_mut().expect("just pushed")
    }

    /// Records a number reported without a prediction (see [`Measurement`]).
    pub fn measurement(
        &mut self,
        id: &str,
        quantity: &str,
        value: impl std::fmt::Display,
        note: &str,
    ) {
        self.measurements.push(Measurement {
            id: id.to_string(),
            quantity: quantity.to_string(),
            value: value.to_string(),
            note: note.to_string(),
        });
    }

    pub fn all_pass(&self) -> bool {
        self.verdicts.iter().all(|v| v.pass)
    }
}

#[cfg(test)]
mod tests {
    use super::Summary;

    /// A time that never came is a NaN metric: written as `null`, it must read back
    /// (a two-stage run where neither structure forms wrote one and then could not
    /// read its own summary).
    #[test]
    fn a_nan_metric_survives_the_round_trip() {
        let mut s = Summary::new("x", 1);
        s.metric("never", f64::NAN);
        s.metric("one", 1.0);
        let text = serde_json::to_string(&s).unwrap();
        assert!(text.contains("\"never\":null"), "{text}");
        let back: Summary = serde_json::from_str(&text).unwrap();
        assert!(back.metrics["never"].is_nan());
        assert_eq!(back.metrics["one"], 1.0);
    }
}
