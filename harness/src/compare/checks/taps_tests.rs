//! Tests of `taps.rs` (its child module `tests`, kept in a file of its own).

use super::*;
use crate::compare::sample;

#[test]
fn selectors_pick_the_node_holding_our_value() {
    assert_eq!(reference_sel("Qcur"), TapSel::Op("ROPE"));
    assert_eq!(reference_sel("Kcur"), TapSel::Op("ROPE"));
    assert_eq!(reference_sel("Vcur"), TapSel::Op("MUL_MAT"));
    assert_eq!(reference_sel("ffn_out"), TapSel::Op("MUL_MAT"));
    assert_eq!(reference_sel("l_out"), TapSel::Last);
}

#[test]
fn taps_worse_and_an_earlier_first_divergence() {
    let p = &sample::report().models[0].prompts;
    let (cpu, gpu) = (
        p[0].checks.get::<TapsResult>().unwrap(),
        p[1].checks.get::<TapsResult>().unwrap(),
    );
    assert!(cpu.regressions(cpu).is_empty());
    // gpu's taps are 200x cpu's and diverge where cpu does not.
    let found = gpu.regressions(cpu);
    let figures: Vec<&str> = found.iter().map(|f| f.figure.name).collect();
    assert_eq!(figures, ["tap_nmse", "first_divergence"]);
    assert!(
        found[0].detail.starts_with("9 of 10 taps above 2x"),
        "{}",
        found[0].detail
    );
    assert!(
        found[1].detail.contains("the baseline's none"),
        "{}",
        found[1].detail
    );
    // The other way round: better, nothing.
    assert!(cpu.regressions(gpu).is_empty());
    // Divergence earlier than the baseline's.
    let mut later = gpu.clone();
    later.first_divergence = Some(later.rows[7].clone());
    let found = gpu.regressions(&later);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].figure, FIRST_DIVERGENCE);
    // Layers 2 and 1.
    assert_eq!((found[0].baseline, found[0].now), (2.0, 1.0));
    assert!(later.regressions(gpu).is_empty());
    assert_eq!(TAP_NMSE.rule(), "each tap 2x (floor 1e-12)");
}
