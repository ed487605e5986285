//! Claims judged the way papers state them: over seeds, by a rule that belongs
//! to the claim.
//!
//! A verdict is one seed's evidence; a claim is judged over the seeds of a
//! setting (`mechlab reproduce` runs each preset on several). Each claim (a
//! verdict id) has a [`Rule`], stated with its source:
//! - [`Rule::EverySeed`], the default: the paper proves the claim, so it must hold
//!   on every seed;
//! - [`Rule::NotBelowAuthors`]: the authors' code is the reference. It was run here
//!   in the same setting and held the claim on `passed` of `seeds` seeds; ours must
//!   not hold it significantly less often (one-sided Fisher exact test at 5 %).
//!
//! A claim that holds at the authors' rate while their code also fails it on
//! some seeds is a *finding* about the claim, reported with both rates; one that
//! holds significantly less often than theirs is a defect, never a finding. The
//! same rule marks a single run's failure as "FAIL, known" wherever it is printed
//! (`mechlab run`, a run's report, `reproduce`), because the failure is one the
//! authors' code shows too.
//!
//! ```
//! use mechlab::claims::{judge, Claim, Status};
//! use mechlab_report::Verdict;
//! let claims = [Claim::authors("p.c", 4, 5, "docs/p.md")];
//! let seeds: Vec<(u64, Verdict)> = (0..5)
//!     .map(|s| (s, Verdict::new("c", "x > 1", "…", s != 1).with_id("p.c")))
//!     .collect();
//! let j = judge("p", "preset", &claims, &seeds);
//! assert_eq!((j[0].passed, j[0].seeds, j[0].status), (4, 5, Status::Finding));
//! ```

use mechlab_report::Verdict;
use serde::Serialize;

/// How a claim is judged over seeds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Rule {
    /// The paper proves it: it must hold on every seed.
    EverySeed,
    /// The authors' code is the reference: run here in the same setting it held
    /// the claim on `passed` of `seeds` seeds, and ours must not hold it
    /// significantly less often (one-sided Fisher exact test, [`ALPHA`]).
    NotBelowAuthors { passed: u32, seeds: u32 },
}

/// The level of the test that tells our rate from the authors'.
pub const ALPHA: f64 = 0.05;

/// A claim's rule and where its evidence is written up.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Claim {
    /// The verdict id it judges.
    pub id: &'static str,
    pub rule: Rule,
    /// The doc with the evidence (the authors' code's runs, per seed).
    pub doc: &'static str,
}

impl Claim {
    /// A claim whose reference is the authors' code, which held it on `passed` of
    /// `seeds` seeds here (see [`Rule::NotBelowAuthors`]).
    pub const fn authors(id: &'static str, passed: u32, seeds: u32, doc: &'static str) -> Self {
        Claim {
            id,
            rule: Rule::NotBelowAuthors { passed, seeds },
            doc,
        }
    }

    /// Whether the rule allows some seeds to fail: the authors' code fails it too.
    pub fn allows_failures(&self) -> bool {
        matches!(self.rule, Rule::NotBelowAuthors { passed, seeds } if passed < seeds)
    }

    /// The rule in words, with its source.
    pub fn rule_text(&self) -> String {
        match self.rule {
            Rule::EverySeed => "every seed (the paper's claim)".into(),
            Rule::NotBelowAuthors { passed, seeds } => format!(
                "not less often than the authors' code, {passed}/{seeds} here \
                 (one-sided Fisher exact test at 5 %; {})",
                self.doc
            ),
        }
    }
}

/// The claim `id` is judged by: its entry in `claims`, or every seed.
pub fn claim_for(claims: &[Claim], id: &str) -> Claim {
    claims
        .iter()
        .find(|c| c.id == id)
        .copied()
        .unwrap_or(Claim {
            id: "",
            rule: Rule::EverySeed,
            doc: "",
        })
}

/// Marks the failures the claims' rules allow as known (see [`Verdict::known`]).
pub fn annotate(claims: &[Claim], verdicts: &mut [Verdict]) {
    for v in verdicts {
        v.known = !v.pass && claim_for(claims, &v.id).allows_failures();
    }
}

/// How a claim came out over its seeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// It holds by its rule, on every seed or at the authors' rate.
    Held,
    /// It holds at the authors' rate, and their code fails it on some seeds too: a
    /// finding about the claim.
    Finding,
    /// It fails its rule: a defect (or a run that did not finish).
    Failed,
}

impl Status {
    pub fn word(self) -> &'static str {
        match self {
            Status::Held => "held",
            Status::Finding => "finding",
            Status::Failed => "FAILED",
        }
    }
}

/// One seed's verdict on a claim.
#[derive(Clone, Debug, Serialize)]
pub struct SeedVerdict {
    pub seed: u64,
    pub pass: bool,
    pub measured: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
}

/// A claim judged over the seeds of one setting.
#[derive(Clone, Debug, Serialize)]
pub struct Judgement {
    pub paper: String,
    /// The setting: the reproduce run's name, without its seed.
    pub setting: String,
    pub id: String,
    pub claim: String,
    pub prediction: String,
    pub source: String,
    /// The rule, in words with its source.
    pub rule: String,
    pub passed: usize,
    pub seeds: usize,
    pub per_seed: Vec<SeedVerdict>,
    /// The bar the per-seed values are judged against, when there is one: the
    /// first seed's (a bar measured on the run itself, such as a fraction of its
    /// uniform-to-Bayes span, differs a little from seed to seed; each seed's own
    /// is in its run's `summary.json`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
    /// The median, least and greatest per-seed value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spread: Option<[f64; 3]>,
    /// The authors' code's (passed, seeds), for a claim judged against it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authors: Option<[u32; 2]>,
    /// The one-sided Fisher exact test's p-value, ours below theirs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p_value: Option<f64>,
    pub status: Status,
    /// Why, in one sentence.
    pub reason: String,
    /// Where the evidence is written up.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub doc: String,
}

impl Judgement {
    /// The per-seed values in seed order, each failing one starred, with the bar:
    /// `0.91 0.93 0.88* (bar 0.9)`.
    pub fn strip(&self) -> String {
        let mut parts: Vec<String> = self
            .per_seed
            .iter()
            .map(|s| {
                let v = s.value.map_or("–".to_string(), short);
                if s.pass {
                    v
                } else {
                    format!("{v}*")
                }
            })
            .collect();
        if let Some(t) = self.threshold {
            parts.push(format!("(bar {})", short(t)));
        }
        parts.join(" ")
    }
}

/// A number in four significant digits at most.
pub fn short(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let a = x.abs();
    if !(1e-3..1e4).contains(&a) {
        return format!("{x:.2e}");
    }
    let digits = (3 - a.log10().floor() as i32).max(0) as usize;
    let s = format!("{x:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Judges every claim of one setting over its seeds' verdicts, in the order the
/// claims first appear. `seeds` holds each seed's verdicts (several per seed).
pub fn judge(
    paper: &str,
    setting: &str,
    claims: &[Claim],
    seeds: &[(u64, Verdict)],
) -> Vec<Judgement> {
    let mut ids: Vec<&str> = Vec::new();
    for (_, v) in seeds {
        if !ids.contains(&v.id.as_str()) {
            ids.push(&v.id);
        }
    }
    ids.into_iter()
        .map(|id| {
            let per: Vec<&(u64, Verdict)> = seeds.iter().filter(|(_, v)| v.id == id).collect();
            judge_one(paper, setting, claim_for(claims, id), &per)
        })
        .collect()
}

fn judge_one(paper: &str, setting: &str, claim: Claim, per: &[&(u64, Verdict)]) -> Judgement {
    let first = &per[0].1;
    let per_seed: Vec<SeedVerdict> = per
        .iter()
        .map(|(seed, v)| SeedVerdict {
            seed: *seed,
            pass: v.pass,
            measured: v.measured.clone(),
            value: v.value,
        })
        .collect();
    let (n, k) = (per_seed.len(), per_seed.iter().filter(|s| s.pass).count());
    let mut values: Vec<f64> = per_seed.iter().filter_map(|s| s.value).collect();
    values.sort_by(f64::total_cmp);
    let spread = (!values.is_empty()).then(|| {
        let m = values.len();
        let median = if m % 2 == 1 {
            values[m / 2]
        } else {
            0.5 * (values[m / 2 - 1] + values[m / 2])
        };
        [median, values[0], values[m - 1]]
    });
    let failed: Vec<String> = per_seed
        .iter()
        .filter(|s| !s.pass)
        .map(|s| s.seed.to_string())
        .collect();
    let on = |seeds: &[String]| match seeds.len() {
        1 => format!("seed {}", seeds[0]),
        _ => format!("seeds {}", seeds.join(", ")),
    };
    let (status, reason, authors, p_value) = match claim.rule {
        Rule::EverySeed if k == n => (Status::Held, format!("holds on all {n} seeds"), None, None),
        Rule::EverySeed => (
            Status::Failed,
            format!(
                "fails on {} ({k}/{n} hold; the claim is for every seed): {}",
                on(&failed),
                per_seed
                    .iter()
                    .find(|s| !s.pass)
                    .map_or("", |s| s.measured.as_str())
            ),
            None,
            None,
        ),
        Rule::NotBelowAuthors { passed, seeds } => {
            let p = fisher_below(k as u32, n as u32, passed, seeds);
            let theirs = format!("the authors' code {passed}/{seeds}");
            let (status, reason) = if p < ALPHA {
                (
                    Status::Failed,
                    format!(
                        "holds on {k}/{n} seeds, less often than {theirs} \
                         (one-sided Fisher exact p = {p:.3})"
                    ),
                )
            } else if k == n {
                (Status::Held, format!("holds on all {n} seeds ({theirs})"))
            } else if passed < seeds {
                (
                    Status::Finding,
                    format!(
                        "fails on {} ({k}/{n} hold), as {theirs} fails it too \
                         (p = {p:.2}: no significant difference)",
                        on(&failed)
                    ),
                )
            } else {
                (
                    Status::Held,
                    format!(
                        "holds on {k}/{n} seeds, not significantly less often than \
                         {theirs} (p = {p:.2})"
                    ),
                )
            };
            (status, reason, Some([passed, seeds]), Some(p))
        }
    };
    Judgement {
        paper: paper.to_string(),
        setting: setting.to_string(),
        id: first.id.clone(),
        claim: first.claim.clone(),
        prediction: first.prediction.clone(),
        source: first.source.clone(),
        rule: claim.rule_text(),
        passed: k,
        seeds: n,
        per_seed,
        threshold: first.threshold,
        spread,
        authors,
        p_value,
        status,
        reason,
        doc: claim.doc.to_string(),
    }
}

/// The one-sided Fisher exact test of "ours holds less often than theirs": the
/// probability, with the 2 × 2 table's margins fixed, of our count `k1` of `n1`
/// being `k1` or fewer when both come from one rate (`k2` of `n2` theirs). The
/// hypergeometric terms are summed from log-factorials, exact to rounding at
/// these sizes.
pub fn fisher_below(k1: u32, n1: u32, k2: u32, n2: u32) -> f64 {
    let (n1, n2, k) = (n1 as u64, n2 as u64, (k1 + k2) as u64);
    let ln_fact = |m: u64| (1..=m).map(|i| (i as f64).ln()).sum::<f64>();
    let ln_choose = |n: u64, r: u64| ln_fact(n) - ln_fact(r) - ln_fact(n - r);
    let total = ln_choose(n1 + n2, k);
    let lo = k.saturating_sub(n2);
    (lo..=(k1 as u64).min(k))
        .filter(|&x| x <= n1 && k - x <= n2)
        .map(|x| (ln_choose(n1, x) + ln_choose(n2, k - x) - total).exp())
        .sum::<f64>()
        .min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seeds(pass: &[bool]) -> Vec<(u64, Verdict)> {
        pass.iter()
            .enumerate()
            .map(|(s, &p)| {
                let mut v = Verdict::new("c", "x > 0.5", "m", p).with_id("p.c");
                v.scored(if p { 0.9 } else { 0.1 } + s as f64 / 100.0, Some(0.5));
                (s as u64, v)
            })
            .collect()
    }

    #[test]
    fn fisher_matches_hand_computed_tables() {
        // ours 0/5 against 4/5: C(5,0) C(5,4) / C(10,4) = 5/210
        assert!((fisher_below(0, 5, 4, 5) - 5.0 / 210.0).abs() < 1e-12);
        // ours 1/5 against 4/5: (C(5,0)C(5,5) + C(5,1)C(5,4)) / C(10,5) = 26/252
        assert!((fisher_below(1, 5, 4, 5) - 26.0 / 252.0).abs() < 1e-12);
        // equal rates, and ours above theirs, are never significant
        assert!(fisher_below(4, 5, 4, 5) > 0.5);
        assert!((fisher_below(5, 5, 0, 5) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn every_seed_rule_fails_on_one_failing_seed() {
        let all = judge("p", "s", &[], &seeds(&[true; 5]));
        assert_eq!(all[0].status, Status::Held);
        let [m, lo, hi] = all[0].spread.unwrap();
        assert!((m - 0.92).abs() + (lo - 0.9).abs() + (hi - 0.94).abs() < 1e-12);
        let one = judge("p", "s", &[], &seeds(&[true, false, true, true, true]));
        assert_eq!(one[0].status, Status::Failed);
        assert!(one[0].reason.contains("seed 1"), "{}", one[0].reason);
        assert_eq!(one[0].strip(), "0.9 0.11* 0.92 0.93 0.94 (bar 0.5)");
    }

    #[test]
    fn authors_rule_allows_their_rate_and_fails_below_it() {
        let claims = [Claim::authors("p.c", 4, 5, "docs/p.md")];
        let at = judge("p", "s", &claims, &seeds(&[true, false, true, true, true]));
        assert_eq!(at[0].status, Status::Finding);
        assert_eq!(at[0].authors, Some([4, 5]));
        let below = judge("p", "s", &claims, &seeds(&[false; 5]));
        assert_eq!(below[0].status, Status::Failed, "{}", below[0].reason);
        // their code always holds it: ours failing once is within the test's
        // reach of their rate, so it holds, and it is no finding
        let always = [Claim::authors("p.c", 5, 5, "docs/p.md")];
        let j = judge("p", "s", &always, &seeds(&[true, false, true, true, true]));
        assert_eq!(j[0].status, Status::Held, "{}", j[0].reason);
    }

    #[test]
    fn annotate_marks_only_failures_the_rule_allows() {
        let claims = [Claim::authors("p.c", 4, 5, "docs/p.md")];
        let mut vs: Vec<Verdict> = seeds(&[true, false]).into_iter().map(|s| s.1).collect();
        vs.push(Verdict::new("d", "", "", false).with_id("p.d"));
        annotate(&claims, &mut vs);
        let known: Vec<bool> = vs.iter().map(|v| v.known).collect();
        assert_eq!(known, [false, true, false]);
    }
}
