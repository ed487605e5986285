//! A run names its phases in order, so that no part of it is a silent wait.

use mechlab::commands::{resolve, resume_with_progress, run_with_progress};
use mechlab::run::progress::{Phase, Progress};
use std::sync::Arc;

#[test]
fn a_run_and_a_resume_name_every_phase_in_order() {
    let tmp = tempfile::tempdir().unwrap();
    let small = [
        "synthetic.n_train=128".to_string(),
        "synthetic.n_test=64".into(),
    ];
    let reg = mechlab::papers::registry();
    let r = resolve(&reg, "selection-synthetic", &small, Some(0)).unwrap();
    let p = Arc::new(Progress::new());
    let dir = tmp.path().join("r");
    run_with_progress(&reg, &r, &dir, "test", true, Some(p.clone())).unwrap();
    use Phase::*;
    assert_eq!(p.phases(), [Setup, Training, Measuring, Report, Done]);
    let (done, total) = p.get();
    assert!(total > 0 && done == total, "{done}/{total}");
    // A finished run resumed goes through the same phases, its steps at the end.
    std::fs::remove_file(dir.join("summary.json")).unwrap();
    let q = Arc::new(Progress::new());
    resume_with_progress(&reg, &dir, true, Some(q.clone())).unwrap();
    assert_eq!(q.phases(), [Setup, Training, Measuring, Report, Done]);
    assert_eq!(q.get(), (total, total));
}
