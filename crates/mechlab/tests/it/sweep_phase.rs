//! Where a mechanism forms: a two-key sweep records each claim's pass rate per
//! grid point and draws it as a phase diagram (`commands::sweep_phase`).

use crate::support::cli::ok;
use std::collections::BTreeMap;

/// The `verdict:<id>` rates of `summary.csv`, by (d_model, n_neutral).
fn rates(summary: &str, id: &str) -> BTreeMap<(String, String), (usize, f64)> {
    let metric = format!("verdict:{id}");
    summary
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f[2] == metric).then(|| {
                let key = (f[0].to_string(), f[1].to_string());
                (key, (f[3].parse().unwrap(), f[4].parse().unwrap()))
            })
        })
        .collect()
}

#[test]
fn a_two_key_sweep_records_and_draws_each_claims_pass_rate() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let grid = [
        "--grid",
        "model.d_model=16,64",
        "--grid",
        "synthetic.n_neutral=8,48",
    ];
    let mut args = vec!["sweep", "selection-synthetic", "--seeds", "0..3"];
    args.extend(grid);
    args.extend(["--out", "sw"]);
    ok(d, &args);
    let summary = std::fs::read_to_string(d.join("sw/summary.csv")).unwrap();
    let index = std::fs::read_to_string(d.join("sw/index.csv")).unwrap();

    // each rate is the mean over the point's seeds of index.csv's 0/1 column
    let header: Vec<&str> = index.lines().next().unwrap().split(',').collect();
    let col = header
        .iter()
        .position(|h| *h == "verdict:selection.max-margin")
        .expect("index.csv has a column per verdict");
    let mut from_index: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    for l in index.lines().skip(1) {
        let f: Vec<&str> = l.split(',').collect();
        let v: f64 = f[col].parse().unwrap();
        assert!(v == 0.0 || v == 1.0, "{l}");
        from_index
            .entry((f[3].to_string(), f[4].to_string()))
            .or_default()
            .push(v);
    }
    let rate = rates(&summary, "selection.max-margin");
    assert_eq!(rate.len(), 4, "{summary}");
    for (point, xs) in &from_index {
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        assert_eq!(rate[point], (3, mean), "{point:?}");
    }
    // the phases of this claim: the max-margin direction is reached with room
    // in the embedding (d_model 64) and not when the vocabulary crowds it
    let at = |dm: &str, nn: &str| rate[&(dm.to_string(), nn.to_string())].1;
    assert_eq!(at("64", "8"), 1.0, "{summary}");
    assert_eq!(at("16", "48"), 0.0, "{summary}");

    // the phase diagram: d_model down, n_neutral across, the same rates
    let fig = std::fs::read_to_string(d.join("sw/figures/phase_selection.max-margin.json"))
        .expect("a two-key sweep draws each verdict's rate");
    let fig: serde_json::Value = serde_json::from_str(&fig).unwrap();
    let plot = &fig["plot"];
    assert_eq!(plot["kind"], "heatmap");
    assert_eq!(
        (plot["rows"].as_u64(), plot["cols"].as_u64()),
        (Some(2), Some(2))
    );
    assert_eq!(plot["row_ticks"], serde_json::json!(["16", "64"]));
    assert_eq!(plot["col_ticks"], serde_json::json!(["8", "48"]));
    let cells: Vec<f64> = plot["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    let want = [at("16", "8"), at("16", "48"), at("64", "8"), at("64", "48")];
    assert_eq!(cells, want);
    assert!(d
        .join("sw/figures/phase_selection.max-margin.png")
        .is_file());

    // a one-key sweep records the rates and draws nothing
    ok(
        d,
        &[
            "sweep",
            "selection-synthetic",
            "--grid",
            "model.d_model=16,64",
            "--seeds",
            "0..2",
            "--out",
            "one",
        ],
    );
    let one = std::fs::read_to_string(d.join("one/summary.csv")).unwrap();
    assert!(one.contains(",verdict:selection.max-margin,2,"), "{one}");
    assert!(!d.join("one/figures").exists());
}
