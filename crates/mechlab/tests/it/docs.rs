//! The docs as a newcomer reads them: every `mechlab ...` command quoted in
//! README.md and docs/ parses with the real command line, docs/cli.md is the
//! command line's own help, and every number the pages quote about `mechlab
//! reproduce` is the one in the committed summary `docs/reproduce.json`.
//!
//! Dated history (`CHANGELOG.md`, `docs/notes/`) is left out on purpose: it
//! quotes the numbers of its day.

use mechlab::papers::registry;
use regex::Regex;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// README.md and every page under docs/ but the dated notes.
fn pages() -> Vec<(String, String)> {
    let mut out = vec![];
    let mut stack = vec![root().join("docs")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).expect("docs/ is readable") {
            let p = e.expect("entry").path();
            if p.is_dir() && p.file_name().is_some_and(|n| n != "notes") {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    out.push(root().join("README.md"));
    out.sort();
    out.into_iter()
        .map(|p| {
            let name = p.strip_prefix(root()).unwrap_or(&p).display().to_string();
            let text = std::fs::read_to_string(&p).expect("page is readable");
            (name, text)
        })
        .collect()
}

/// Splits a shell line into words: quotes group, `#` outside quotes ends it.
fn words(line: &str) -> Vec<String> {
    let (mut out, mut cur, mut quote, mut any) = (vec![], String::new(), None, false);
    for c in line.chars() {
        match (quote, c) {
            (None, '\'' | '"') => (quote, any) = (Some(c), true),
            (Some(q), c) if c == q => quote = None,
            (None, '#') if cur.is_empty() => break,
            (None, c) if c.is_whitespace() => {
                if any {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            (_, c) => (cur, any) = (cur + &c.to_string(), true),
        }
    }
    if any {
        out.push(cur);
    }
    out
}

/// A quoted command, found where a reader would copy it from.
struct Quoted {
    page: String,
    line: usize,
    text: String,
    /// In running text (`mechlab intervene`) rather than a command block: it
    /// may name a command without its arguments.
    inline: bool,
}

/// Every `mechlab ...` (or `cargo run --release -- ...`) in a shell block or
/// an inline code span; Python and TOML blocks are left to their own checks.
fn quoted_commands() -> Vec<Quoted> {
    let span = Regex::new(r"`((?:mechlab|cargo run --release --) [^`]+)`").unwrap();
    let mut out = vec![];
    for (page, text) in pages() {
        let mut block: Option<String> = None;
        let mut pending = String::new();
        for (i, line) in text.lines().enumerate() {
            let t = line.trim_start();
            if let Some(lang) = t.strip_prefix("```") {
                block = match block {
                    None => Some(lang.trim().to_string()),
                    Some(_) => None,
                };
                continue;
            }
            match &block {
                Some(lang) if matches!(lang.as_str(), "sh" | "bash" | "console" | "shell") => {
                    let t = t.strip_prefix("$ ").unwrap_or(t);
                    let joined = pending.clone() + t;
                    if let Some(head) = joined.strip_suffix('\\') {
                        pending = head.to_string();
                        continue;
                    }
                    pending.clear();
                    let cmd = joined.trim();
                    if cmd.starts_with("mechlab ") || cmd.starts_with("cargo run --release -- ") {
                        out.push(Quoted {
                            page: page.clone(),
                            line: i + 1,
                            text: cmd.to_string(),
                            inline: false,
                        });
                    }
                }
                Some(_) => {}
                None => {
                    for c in span.captures_iter(line) {
                        out.push(Quoted {
                            page: page.clone(),
                            line: i + 1,
                            text: c[1].to_string(),
                            inline: true,
                        });
                    }
                }
            }
        }
    }
    out
}

/// Why `q` is not a command `mechlab` accepts, if it is not.
fn check(q: &Quoted) -> Option<String> {
    let text = q.text.replace("cargo run --release --", "mechlab");
    // Placeholders (`<run>`, `<preset|file.toml>`) stand for a value.
    let text = Regex::new(r"<[^<>\s]+>").unwrap().replace_all(&text, "x");
    // Stop at the first shell operator: `mechlab list | head`.
    let text = text.split(['|', ';', '>', '&']).next().unwrap_or("");
    let mut args = words(text);
    // A synopsis (`[--seed N]`, `a.npy...`) shows the shape, not a call: check
    // only that its command exists.
    let synopsis = args.iter().any(|a| a.contains('[') || a.ends_with("..."));
    if synopsis {
        args.truncate(2);
        args.push("--help".into());
    }
    match mechlab::cli::parse_only(&args) {
        Ok(()) => None,
        // `--help` comes back as clap's help text, not as an error.
        Err(e) if !e.starts_with("error:") => None,
        Err(e) if q.inline && e.contains("required arguments were not provided") => None,
        Err(e) => Some(e.lines().next().unwrap_or("").to_string()),
    }
}

#[test]
fn every_quoted_command_parses() {
    let quoted = quoted_commands();
    assert!(
        quoted.len() > 50,
        "found only {} quoted commands: is the scan broken?",
        quoted.len()
    );
    let bad: Vec<String> = quoted
        .iter()
        .filter_map(|q| check(q).map(|e| format!("{}:{}: `{}`: {e}", q.page, q.line, q.text)))
        .collect();
    assert!(
        bad.is_empty(),
        "commands the CLI rejects:\n{}",
        bad.join("\n")
    );
}

/// The check itself, on commands that must fail.
#[test]
fn a_wrong_command_is_caught() {
    for (text, inline) in [
        ("mechlab inspect runs/x", false),
        ("mechlab run induction-simplified --sett a=1", false),
        ("mechlab intervene", false),
        ("mechlab inspect", true),
    ] {
        let q = Quoted {
            page: "t".into(),
            line: 1,
            text: text.into(),
            inline,
        };
        assert!(check(&q).is_some(), "`{text}` passed the check");
    }
}

const GENERATED: &str = "<!-- generated from `mechlab --help`: edit the doc comments in crates/mechlab/src/cli/, then MECHLAB_BLESS=1 cargo test docs -->\n";

#[test]
fn the_cli_page_is_the_cli_help() {
    let path = root().join("docs/cli.md");
    let page = std::fs::read_to_string(&path).expect("docs/cli.md exists");
    let (head, _) = page
        .split_once(GENERATED)
        .expect("docs/cli.md has the generated marker");
    let want = format!("{head}{GENERATED}\n{}", mechlab::cli::reference_markdown());
    if std::env::var_os("MECHLAB_BLESS").is_some() {
        std::fs::write(&path, &want).expect("docs/cli.md is writable");
        return;
    }
    assert!(
        page == want,
        "docs/cli.md differs from `mechlab --help`: run MECHLAB_BLESS=1 cargo test docs"
    );
}

/// The committed numbers (`docs/reproduce.json`).
fn committed() -> serde_json::Value {
    let text = std::fs::read_to_string(root().join("docs/reproduce.json")).expect("exists");
    serde_json::from_str(&text).expect("docs/reproduce.json is JSON")
}

fn num(v: &serde_json::Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("docs/reproduce.json: `{key}` is not a count"))
}

/// Every place a page quotes one of the committed numbers, and what it says.
fn quoted_numbers(page: &str, text: &str, v: &serde_json::Value) -> Vec<String> {
    let patterns: &[(&str, &[&str])] = &[
        (
            r"(\d+) (?:of|/) (\d+) (?:verdicts|claims)",
            &["holding", "claims"],
        ),
        (r"(\d+) measurements", &["measurements"]),
        (r"(\d+) (?:known )?findings", &["findings"]),
        (r"a (\d+) s build", &["build_seconds"]),
        (r"(\d+) s of runs", &["runs_seconds"]),
        (r"(\d+) s in all", &["total_seconds"]),
    ];
    let mut bad = vec![];
    for (pattern, keys) in patterns {
        let re = Regex::new(pattern).unwrap();
        for c in re.captures_iter(text) {
            for (i, key) in keys.iter().enumerate() {
                let got: u64 = c[i + 1].parse().expect("digits");
                if got != num(v, key) {
                    bad.push(format!(
                        "{page}: \"{}\" says {key} = {got}, docs/reproduce.json {}",
                        &c[0],
                        num(v, key)
                    ));
                }
            }
        }
    }
    // Runs, settings and papers are counted on lines about `reproduce` only: "30
    // runs" elsewhere may be a sweep's.
    for line in text.lines().filter(|l| l.contains("reproduce")) {
        for (pattern, key) in [
            (r"(\d+) runs\b", "runs"),
            (r"(\d+) settings\b", "settings"),
            (r"(\d+) papers\b", "papers"),
        ] {
            for c in Regex::new(pattern).unwrap().captures_iter(line) {
                let got: u64 = c[1].parse().expect("digits");
                if got != num(v, key) {
                    bad.push(format!(
                        "{page}: \"{}\" on a line about reproduce, docs/reproduce.json {}",
                        &c[0],
                        num(v, key)
                    ));
                }
            }
        }
    }
    bad
}

#[test]
fn pages_quote_the_committed_reproduce_numbers() {
    let v = committed();
    let bad: Vec<String> = pages()
        .iter()
        .flat_map(|(page, text)| quoted_numbers(page, text, &v))
        .collect();
    assert!(
        bad.is_empty(),
        "pages disagree with docs/reproduce.json:\n{}",
        bad.join("\n")
    );
    // The check catches an edited number.
    let edited = format!(
        "It runs: {} of {} claims hold, {} measurements.",
        num(&v, "holding") - 1,
        num(&v, "claims"),
        num(&v, "measurements") + 1
    );
    let edited = edited.as_str();
    assert_eq!(quoted_numbers("t", edited, &v).len(), 2);
}

/// What the registry itself says: the settings `reproduce` runs, their seeds,
/// the papers they come from, and the claims judged against the authors' code.
#[test]
fn the_committed_summary_matches_the_registry() {
    let v = committed();
    let reg = registry();
    let (mut runs, mut settings, mut papers) = (0, 0, 0);
    for exp in reg.all() {
        let items = exp.reproduce();
        papers += usize::from(!items.is_empty());
        settings += items.len();
        runs += items.iter().map(|i| i.seeds as usize).sum::<usize>();
        let rules = items.iter().flat_map(|i| {
            let r = mechlab::commands::resolve(&reg, i.preset, &i.overrides, None)
                .expect("reproduce items resolve");
            exp.claims(&r.table)
        });
        for c in rules {
            // A rule names its verdict by id (a claim's wording would never match,
            // and the claim would be judged by every seed instead).
            assert!(
                c.id.starts_with(&format!("{}.", exp.name())),
                "{}: claim rule `{}` is not one of its verdict ids",
                exp.name(),
                c.id
            );
            assert!(
                root().join(c.doc).is_file(),
                "{}: {} is missing",
                c.id,
                c.doc
            );
        }
    }
    assert_eq!(num(&v, "runs") as usize, runs, "runs");
    assert_eq!(num(&v, "settings") as usize, settings, "settings");
    assert_eq!(num(&v, "papers") as usize, papers, "papers");
    assert!(num(&v, "holding") <= num(&v, "claims"));
    assert!(num(&v, "findings") <= num(&v, "holding"));
    // With a `reproduce` run at hand, its counts too.
    if let Some(path) = std::env::var_os("MECHLAB_REPRODUCE_SUMMARY") {
        let text = std::fs::read_to_string(&path).expect("MECHLAB_REPRODUCE_SUMMARY is readable");
        let s: serde_json::Value = serde_json::from_str(&text).expect("a reproduce summary");
        let claims = s["claims"].as_array().expect("claims");
        let status = |st: &str| claims.iter().filter(|c| c["status"] == st).count() as u64;
        assert_eq!(num(&v, "claims"), claims.len() as u64, "claims");
        assert_eq!(
            num(&v, "holding"),
            claims.len() as u64 - status("failed"),
            "holding"
        );
        assert_eq!(num(&v, "findings"), status("finding"), "findings");
        // Measurements are counted on each setting's first seed.
        let measurements: u64 = s["runs"]
            .as_array()
            .expect("runs")
            .iter()
            .filter(|r| r["preset"] == r["setting"])
            .map(|r| {
                r["summary"]["measurements"]
                    .as_array()
                    .map_or(0, |m| m.len() as u64)
            })
            .sum();
        assert_eq!(num(&v, "measurements"), measurements, "measurements");
        assert_eq!(
            num(&v, "runs") as usize,
            s["runs"].as_array().unwrap().len()
        );
    }
}
