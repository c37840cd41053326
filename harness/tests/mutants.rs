//! `harness mutants` in-process (feature `fault-injection`): the clean
//! selection passes, and every engine fault is detected by its expected
//! check, tap faults at their expected layer and tap.
#![cfg(feature = "fault-injection")]

use std::path::{Path, PathBuf};

use harness::compare::Thresholds;
use harness::mutants::{self, Setup};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

// One test per binary: the injected faults are process-wide.
#[test]
fn every_fault_is_detected_where_expected() {
    let repo = repo();
    let thresholds = Thresholds::load(&repo.join("ci/thresholds.toml")).unwrap();
    let report = mutants::run(&Setup::new(&repo, thresholds)).unwrap();
    eprintln!("{}", report.table());
    assert!(!report.clean.detected, "{}", report.table());
    assert_eq!(report.faults.len(), engine::fault::FAULTS.len());
    for o in &report.faults {
        assert!(o.detected && o.matched, "{}\n{}", o.fault, report.table());
    }
    assert!(report.passed());
    // Nothing stays injected after the run.
    assert!(engine::fault::FAULTS
        .iter()
        .all(|(name, _)| !engine::fault::active(name)));
}
