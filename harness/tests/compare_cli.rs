//! `harness compare` as a command (exit status, table, JSON) and its rules
//! for models it cannot run: an architecture the engine does not implement
//! is skipped (a line, not a failure) unless named with `--model`; a model
//! without limits is measured and fails.

use harness::compare::checks::tokens::CorpusCheck;
use std::path::PathBuf;

use harness::compare::{self, Options, Thresholds};

const GEMMA: &str = "gemma-3-270m-q4_k_m";
const SMOLLM2: &str = "smollm2-135m-instruct-q4_1";

use crate::cli_support::{repo, run_harness};

fn harness(args: &[&str]) -> (i32, String, String) {
    run_harness(&[&["compare"][..], args].concat())
}

fn temp_dir(tag: &str) -> PathBuf {
    crate::cli_support::temp_dir(&format!("compare-{tag}"))
}

#[test]
fn exit_status_table_and_json() {
    let dir = temp_dir("cli");
    let json = dir.join("report.json");
    let junit = dir.join("report.junit.xml");
    let html = dir.join("report.html");
    let (code, out, err) = harness(&[
        "--model",
        SMOLLM2,
        "--prompt",
        "once-upon",
        "--no-corpus",
        "--json",
        json.to_str().unwrap(),
        "--junit",
        junit.to_str().unwrap(),
        "--html",
        html.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("once-upon") && out.contains("PASS"), "{out}");
    assert!(out.contains("all checks passed"), "{out}");
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let p = &report["models"][0]["prompts"][0];
    assert_eq!(p["prompt"], "once-upon");
    assert_eq!(p["path"], "cpu");
    // the 2-token prompt: the same logits as llama.cpp, bit for bit
    assert_eq!(p["logits"]["nmse"], 0.0);
    assert_eq!(p["logits"]["per_position"].as_array().unwrap().len(), 2);
    assert!(p["taps"]["rows"].as_array().unwrap().len() > 300);
    // JUnit: tokens, taps, 4 logits checks and greedy, all passing.
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains("tests=\"7\" failures=\"0\""), "{xml}");
    assert!(xml.contains("classname=\"smollm2-135m-instruct-q4_1\" name=\"once-upon/cpu/taps\""));
    // HTML: a chart per tap name and the KLD chart of the one prompt.
    let page = std::fs::read_to_string(&html).unwrap();
    let mut names: Vec<&str> = Vec::new();
    for r in p["taps"]["rows"].as_array().unwrap() {
        let name = r["name"].as_str().unwrap();
        if !names.contains(&name) {
            names.push(name);
        }
    }
    assert_eq!(page.matches("<svg").count(), names.len() + 1);

    // No limits for the model: measured, reported, exit 1.
    let empty = dir.join("empty.toml");
    std::fs::write(&empty, "").unwrap();
    let (code, out, _) = harness(&[
        "--model",
        SMOLLM2,
        "--prompt",
        "once-upon",
        "--no-corpus",
        "--thresholds",
        empty.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("thresholds: no limits for [smollm2-135m-instruct-q4_1.cpu]"),
        "{out}"
    );

    // Setup errors: exit 2, one line.
    let (code, _, err) = harness(&["--model", "no-such-model"]);
    assert_eq!(code, 2);
    assert!(err.contains("no model \"no-such-model\""), "{err}");
    let (code, _, err) = harness(&["--prompt", "no-such-prompt"]);
    assert_eq!(code, 2);
    assert!(err.contains("no prompt \"no-such-prompt\""), "{err}");
    let (code, _, err) = harness(&["--paths", "vulkan"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unknown path"), "{err}");
    let (code, _, err) = harness(&["--paths", "all,cpu"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--paths all stands alone"), "{err}");

    // A GPU path on a device that does not exist: a failure of the
    // engine check that names the problem, not a skip.
    let (code, out, _) = harness(&[
        "--model",
        SMOLLM2,
        "--prompt",
        "once-upon",
        "--no-corpus",
        "--paths",
        "cpu,gpu",
        "--device",
        "no-such-device",
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("no Vulkan device matches `no-such-device`"),
        "{out}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A copy of reference-data/ (links to its files) whose manifest says
/// Gemma's architecture is `arch`.
fn reference_with_arch(arch: &str) -> PathBuf {
    let src = repo().join("reference-data");
    let dir = temp_dir(&format!("ref-{arch}"));
    for entry in std::fs::read_dir(&src).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name() != "manifest.json" {
            std::os::unix::fs::symlink(entry.path(), dir.join(entry.file_name())).unwrap();
        }
    }
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(src.join("manifest.json")).unwrap()).unwrap();
    for m in manifest["models"].as_array_mut().unwrap() {
        if m["id"] == GEMMA {
            m["architecture"] = arch.into();
        }
    }
    std::fs::write(
        dir.join("manifest.json"),
        serde_json::to_vec(&manifest).unwrap(),
    )
    .unwrap();
    dir
}

#[test]
fn unsupported_architectures_are_skipped_unless_named() {
    let repo = repo();
    let thresholds = Thresholds::load(&repo.join("ci/thresholds.toml")).unwrap();
    let mut o = Options::new(&repo, thresholds);
    o.reference_dir = reference_with_arch("qwen2");
    o.verify_files = false;
    o.prompts = vec!["once-upon".into()];

    let report = compare::run(&o).unwrap();
    let gemma = report.models.iter().find(|m| m.id == GEMMA).unwrap();
    assert_eq!(
        gemma.skipped.as_deref(),
        Some("architecture qwen2 not implemented")
    );
    assert!(gemma.prompts.is_empty() && gemma.failures.is_empty());
    // its tokenizer needs no forward pass: still compared
    let t = gemma.checks.get::<CorpusCheck>().unwrap();
    assert!(t.mismatches.is_empty() && t.compared > 800);
    assert!(report.passed(), "{}", report.table());
    assert!(report
        .table()
        .contains("skipped: architecture qwen2 not implemented"));

    o.models = vec![GEMMA.into()];
    o.corpus = false;
    let report = compare::run(&o).unwrap();
    assert!(!report.passed());
    let f = &report.models[0].failures[0];
    assert_eq!(
        (f.check.as_str(), f.detail.as_str()),
        ("model", "architecture qwen2 not implemented")
    );
    std::fs::remove_dir_all(&o.reference_dir).unwrap();
}
