//! `harness compare` catches a RoPE pairing bug where it happens: SmolLM2
//! (llama: NORM RoPE, adjacent pairs) run with NEOX pairing (halves) must
//! fail, with the first divergence at layer 0's post-RoPE Q or K
//! (llama.cpp's `Qcur-0#2` / `Kcur-0#2`), while the same run unedited
//! passes. The swap goes through the engine's `ModelOptions::spec_edit`
//! hook, so no model code knows about it. Uses the real thresholds
//! (ci/thresholds.toml), so it also proves they are tight enough for this
//! bug class.

use std::path::{Path, PathBuf};

use engine::model::{ArchSpec, ModelOptions};
use engine::ops::RopeStyle;
use harness::compare::{self, Options, Thresholds};

const SMOLLM2: &str = "smollm2-135m-instruct-q4_1";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn options() -> Options {
    let repo = repo();
    let thresholds = Thresholds::load(&repo.join("ci/thresholds.toml")).unwrap();
    let mut o = Options::new(&repo, thresholds);
    o.models = vec![SMOLLM2.into()];
    // 5 tokens: RoPE rotates the last position's Q and K by angles up to
    // 4 radians, so the pairing matters.
    o.prompts = vec!["capital-france".into()];
    o.corpus = false;
    o.verify_files = false;
    o.greedy_steps = 4;
    o
}

fn neox(spec: &mut ArchSpec) {
    spec.rope = RopeStyle::Neox;
}

#[test]
fn wrong_rope_pairing_diverges_first_at_layer_0_post_rope() {
    let mut o = options();
    o.model_options = ModelOptions {
        spec_edit: Some(neox),
    };
    let report = compare::run(&o).unwrap();
    eprintln!("{}", report.table());
    assert!(!report.passed(), "{}", report.table());
    let p = &report.models[0].prompts[0];
    let taps = p.taps.as_ref().expect("capital-france has taps");
    let first = taps.first_divergence.as_ref().expect("a divergence");
    assert_eq!(first.layer, Some(0), "{}", report.table());
    assert!(
        first.reference == "Qcur-0#2" || first.reference == "Kcur-0#2",
        "first divergence at {} ({}), expected layer 0's post-RoPE Q or K\n{}",
        first.reference,
        first.name,
        report.table()
    );
    assert_eq!(first.op, "ROPE");
    // What comes before it in layer 0 still agrees.
    let attn_norm = taps
        .rows
        .iter()
        .find(|r| r.reference == "attn_norm-0#0")
        .unwrap();
    assert!(attn_norm.pass);
    // The failure is reported as a taps failure naming the tensor.
    assert!(p
        .failures
        .iter()
        .any(|f| f.check == "taps" && f.detail.contains(&first.reference)));
}

#[test]
fn the_unedited_model_passes_the_same_comparison() {
    let report = compare::run(&options()).unwrap();
    assert!(report.passed(), "{}", report.table());
    let p = &report.models[0].prompts[0];
    assert!(p.tokens.as_ref().unwrap().exact());
    assert_eq!(p.greedy.as_ref().unwrap().agree, 4);
}
