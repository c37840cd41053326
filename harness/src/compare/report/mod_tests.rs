//! Tests of `report/mod.rs` (its child module `tests`, kept in a file of its own).

use crate::compare::checks::logits::LogitsResult;
use crate::compare::checks::split::SplitResult;
use crate::compare::checks::taps::TapsResult;
use crate::compare::{report::baseline, sample, Path};

#[test]
fn the_baseline_column_sits_on_its_rows() {
    let old = sample::report();
    assert!(!old.table_rows()[0].contains(&"vs baseline".to_string()));
    let mut r = old.clone();
    r.models[0].prompts[1]
        .checks
        .get_mut::<LogitsResult>()
        .unwrap()
        .kld
        .mean *= 2.0;
    baseline::apply(&mut r, &old, "old.json", false);
    let rows = r.table_rows();
    let last: Vec<&str> = rows.iter().map(|r| r.last().unwrap().as_str()).collect();
    // Header; cpu; gpu (worse); gpu~cpu; tokenizer; chat; mamba skipped.
    assert_eq!(
        last,
        ["vs baseline", "ok", "WORSE: kld_mean", "ok", "", "", ""]
    );
    assert_eq!(rows[2][2], "gpu");
    assert_eq!(rows[3][2], "gpu~cpu");
    let table = r.table();
    assert!(table.contains("1 figure worse than the baseline old.json (commit ):"));
    assert!(table.contains("smol/capital/gpu: kld_mean: KLD mean"));
    assert!(table
        .contains("\nfirst divergence: smol / capital / gpu against llama.cpp / layer 1, l_out"));
}

/// A hybrid path's split row ("hybrid:1@1~gpu") has a baseline cell
/// (empty: the split is not compared) and the rows after it keep
/// theirs.
#[test]
fn a_split_row_has_its_baseline_cell() {
    let mut old = sample::report();
    let taps = old.models[0].prompts[1]
        .checks
        .get::<TapsResult>()
        .unwrap()
        .clone();
    old.models[0].prompts[1].checks.put(SplitResult {
        against: Path::Gpu,
        layer: 1,
        taps,
    });
    let mut r = old.clone();
    r.models[0].prompts[1]
        .checks
        .get_mut::<LogitsResult>()
        .unwrap()
        .kld
        .mean *= 2.0;
    baseline::apply(&mut r, &old, "old.json", false);
    let rows = r.table_rows();
    assert!(rows.iter().all(|row| row.len() == rows[0].len()));
    let last: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r[2].as_str(), r.last().unwrap().as_str()))
        .collect();
    assert_eq!(
        last[..5],
        [
            ("path", "vs baseline"),
            ("cpu", "ok"),
            ("gpu", "WORSE: kld_mean"),
            ("gpu~cpu", "ok"),
            ("gpu@1~gpu", "")
        ]
    );
    assert!(r.table().contains("gpu@1~gpu"));
}
