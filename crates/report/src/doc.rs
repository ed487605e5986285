//! The report document: what a run's `report.html` and `report.md` say.
//!
//! A [`Report`] is a title, a few metadata pairs (seed, commit, duration) and
//! sections of [`Block`]s: prose in a small Markdown subset (`**bold**`,
//! `*italic*`, `` `code` ``, `[links](url)`, `- ` lists), tables, verdict tables
//! (a theory's prediction against the measurement), figure references by id and
//! preformatted text. The model is serialisable so an experiment can store it
//! next to its figures and `mechlab report` can render it again later; a
//! [`Verdict`] is also stored alone in `summary.json`.
//!
//! ```
//! use mechlab_report::doc::{Report, Section, Verdict};
//! let report = Report::new("Induction heads")
//!     .with_meta("seed", "7")
//!     .with_section(
//!         Section::new("Results")
//!             .markdown("The **two-layer** model copies; see the loss curve.")
//!             .verdicts(vec![Verdict::new("copies after step 500", "acc > 0.9", "0.97", true)])
//!             .figure("loss"),
//!     );
//! assert_eq!(report.verdict_counts(), (1, 1));
//! let json = serde_json::to_string(&report.sections[0].blocks[1]).unwrap();
//! assert!(json.contains(r#""claim":"copies after step 500""#));
//! ```

use serde::{Deserialize, Serialize};

/// A whole report.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Report {
    pub title: String,
    /// Key–value facts shown under the title (seed, commit, wall time, ...).
    #[serde(default)]
    pub meta: Vec<(String, String)>,
    /// The line under the title; when absent, the count of verdicts that pass.
    /// A report that judges claims over several runs says its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headline: Option<Headline>,
    #[serde(default)]
    pub sections: Vec<Section>,
}

/// A titled part of a report.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Section {
    pub title: String,
    #[serde(default)]
    pub blocks: Vec<Block>,
    /// Shown closed (the HTML page's `<details>`), for detail below a summary.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub folded: bool,
}

/// A report's headline: a badge and a sentence.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Headline {
    /// Whether the badge shows as passed (green) or failed (red).
    pub pass: bool,
    pub badge: String,
    pub text: String,
}

/// One piece of a section.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum Block {
    /// Prose: paragraphs separated by blank lines, `- ` bullet lists, and inline
    /// `**bold**`, `*italic*`, `` `code` `` and `[text](url)`.
    Markdown(String),
    /// A table; rows shorter than `headers` are padded with empty cells.
    Table {
        headers: Vec<String>,
        rows: Vec<Vec<String>>,
    },
    /// Claims checked against measurements, shown with pass/fail badges.
    Verdicts(Vec<Verdict>),
    /// A figure of the run, by its id.
    Figure(String),
    /// Preformatted text (a command line, a config, a log excerpt).
    Code(String),
}

/// A claim of a theory, what it predicts and where the prediction comes from,
/// what was measured, and whether the measurement bears the prediction out.
/// Stored as `{"id", "claim", "prediction", "source", "measured", "pass"}` in
/// `summary.json` (`id` and `source` are empty in files written before they
/// existed), with `value` and `threshold` where the claim is judged on one number
/// and `known` where a failure is one the claim's rule allows.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Verdict {
    /// A stable name (`attention-svm.w-direction`): what known findings, tests and
    /// users refer to, whatever the claim's wording becomes.
    #[serde(default)]
    pub id: String,
    pub claim: String,
    pub prediction: String,
    /// Where the prediction comes from: a theorem, figure or table of the paper,
    /// the authors' code's output in the same setting, or a derivation in our doc.
    #[serde(default)]
    pub source: String,
    pub measured: String,
    pub pass: bool,
    /// The number the prediction judges (a mass, a correlation, a gap), so that
    /// runs over several seeds give its spread; absent where the claim is not one
    /// number or it could not be measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    /// The bar `value` is judged against, where there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
    /// A failure the claim's rule allows on some seeds: the authors' own code
    /// fails it on some seeds in the same setting. Shown as "FAIL, known"; the
    /// claim is judged by its rate over seeds (`mechlab reproduce`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub known: bool,
}

impl Verdict {
    pub fn new(claim: &str, prediction: &str, measured: &str, pass: bool) -> Self {
        Verdict {
            claim: claim.to_string(),
            prediction: prediction.to_string(),
            measured: measured.to_string(),
            pass,
            ..Verdict::default()
        }
    }
    pub fn with_id(mut self, id: &str) -> Self {
        self.id = id.to_string();
        self
    }
    pub fn with_source(mut self, source: &str) -> Self {
        self.source = source.to_string();
        self
    }
    /// Records the number the prediction judges and its bar (see
    /// [`Verdict::value`]); a value that is not finite is left out.
    pub fn scored(&mut self, value: f64, threshold: Option<f64>) -> &mut Self {
        self.value = value.is_finite().then_some(value);
        self.threshold = threshold.filter(|t| t.is_finite());
        self
    }
    /// The badge word: PASS, "FAIL, known" or FAIL.
    pub fn mark(&self) -> &'static str {
        match (self.pass, self.known) {
            (true, _) => "PASS",
            (false, true) => "FAIL, known",
            (false, false) => "FAIL",
        }
    }
}

/// A number a run reports without a prediction to judge it by (the theory gives
/// a limit, not a value at this size): shown beside the verdicts, never a pass or
/// a fail. Stored as `{"id", "quantity", "value", "note"}` in `summary.json`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Measurement {
    pub id: String,
    pub quantity: String,
    pub value: String,
    /// What the theory says about it, and why no pass/fail is given.
    pub note: String,
}

impl Report {
    pub fn new(title: &str) -> Self {
        Report {
            title: title.to_string(),
            ..Report::default()
        }
    }

    pub fn with_meta(mut self, key: &str, value: &str) -> Self {
        self.meta.push((key.to_string(), value.to_string()));
        self
    }

    pub fn with_section(mut self, section: Section) -> Self {
        self.sections.push(section);
        self
    }

    /// Every verdict in the report, in order.
    pub fn verdicts(&self) -> impl Iterator<Item = &Verdict> {
        self.sections
            .iter()
            .flat_map(|s| &s.blocks)
            .filter_map(|b| match b {
                Block::Verdicts(v) => Some(v),
                _ => None,
            })
            .flatten()
    }

    /// (passed, total) over all verdicts.
    pub fn verdict_counts(&self) -> (usize, usize) {
        self.verdicts()
            .fold((0, 0), |(p, n), v| (p + usize::from(v.pass), n + 1))
    }

    /// Ids of the figures the report refers to, in order of first reference.
    pub fn figure_ids(&self) -> Vec<&str> {
        let mut ids: Vec<&str> = Vec::new();
        for b in self.sections.iter().flat_map(|s| &s.blocks) {
            if let Block::Figure(id) = b {
                if !ids.contains(&id.as_str()) {
                    ids.push(id);
                }
            }
        }
        ids
    }
}

impl Section {
    pub fn new(title: &str) -> Self {
        Section {
            title: title.to_string(),
            blocks: Vec::new(),
            folded: false,
        }
    }

    /// Shows the section closed (see [`Section::folded`]).
    pub fn fold(mut self) -> Self {
        self.folded = true;
        self
    }

    pub fn markdown(mut self, text: &str) -> Self {
        self.blocks.push(Block::Markdown(text.to_string()));
        self
    }

    pub fn table(mut self, headers: Vec<String>, rows: Vec<Vec<String>>) -> Self {
        self.blocks.push(Block::Table { headers, rows });
        self
    }

    pub fn verdicts(mut self, verdicts: Vec<Verdict>) -> Self {
        self.blocks.push(Block::Verdicts(verdicts));
        self
    }

    pub fn figure(mut self, id: &str) -> Self {
        self.blocks.push(Block::Figure(id.to_string()));
        self
    }

    pub fn code(mut self, text: &str) -> Self {
        self.blocks.push(Block::Code(text.to_string()));
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdict_json_has_the_summary_shape() {
        let v = Verdict::new("c", "p", "m", false)
            .with_id("x.c")
            .with_source("Thm 1");
        let json = serde_json::to_value(&v).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"id": "x.c", "claim": "c", "prediction": "p", "source": "Thm 1", "measured": "m", "pass": false})
        );
        // a summary written before ids and sources reads back with them empty
        let old: Verdict = serde_json::from_value(
            serde_json::json!({"claim": "c", "prediction": "p", "measured": "m", "pass": true}),
        )
        .unwrap();
        assert!(old.id.is_empty() && old.source.is_empty() && old.pass);
    }

    #[test]
    fn report_round_trips_through_json() {
        let r = Report::new("t").with_meta("seed", "1").with_section(
            Section::new("s")
                .markdown("x")
                .table(vec!["a".into()], vec![vec!["1".into()]])
                .figure("f")
                .figure("f")
                .code("ls"),
        );
        let back: Report = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
        assert_eq!(r.figure_ids(), vec!["f"]);
        assert_eq!(r.verdict_counts(), (0, 0));
    }
}
