//! `harness compare --baseline OLD.json` as a command: a run held against
//! its own report finds nothing worse and passes, with
//! `--fail-on-regression` too; an injected fault held against the clean
//! report is worse, and fails only with `--fail-on-regression`; an
//! unreadable baseline is one line and exit 2, before any run.

use std::path::PathBuf;

const SMOLLM2: &str = "smollm2-135m-instruct-q4_1";

fn harness(args: &[&str]) -> (i32, String, String) {
    let selection = [
        "compare",
        "--model",
        SMOLLM2,
        "--prompt",
        "once-upon",
        "--no-corpus",
    ];
    crate::cli_support::run_harness(&[&selection[..], args].concat())
}

fn temp_dir() -> PathBuf {
    crate::cli_support::temp_dir("baseline")
}

#[test]
fn a_run_against_its_own_report_and_an_injected_fault_against_it() {
    let dir = temp_dir();
    let clean = dir.join("clean.json");
    let clean = clean.to_str().unwrap();
    let (code, out, err) = harness(&["--json", clean]);
    assert_eq!(code, 0, "{out}\n{err}");

    let (code, out, err) = harness(&["--baseline", clean, "--fail-on-regression"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("no figure worse than the baseline"), "{out}");
    assert!(out.contains("vs baseline"), "{out}");

    if cfg!(feature = "fault-injection") {
        let junit = dir.join("fault.junit.xml");
        let args = [
            "--inject",
            "rope-style",
            "--baseline",
            clean,
            "--junit",
            junit.to_str().unwrap(),
        ];
        // The fault fails its limits either way; the regressions are
        // failing checks only with --fail-on-regression.
        let (code, out, _) = harness(&args);
        assert_eq!(code, 1, "{out}");
        assert!(out.contains("WORSE: tap_nmse, first_divergence"), "{out}");
        assert!(!out.contains(": regression: "), "{out}");
        let (code, out, _) = harness(&[&args[..], &["--fail-on-regression"]].concat());
        assert_eq!(code, 1, "{out}");
        assert!(
            out.contains("once-upon/cpu: regression: first_divergence: first divergence at Qcur-0"),
            "{out}"
        );
        let xml = std::fs::read_to_string(&junit).unwrap();
        assert!(xml.contains("name=\"once-upon/cpu/regression\""), "{xml}");
        assert!(xml.contains("<property name=\"faults_injected\" value=\"rope-style\"/>"));
    }

    // Unreadable baselines: one line, exit 2, nothing run.
    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{").unwrap();
    for file in [bad, dir.join("missing.json")] {
        let (code, out, err) = harness(&["--baseline", file.to_str().unwrap()]);
        assert_eq!(code, 2, "{err}");
        assert!(out.is_empty(), "{out}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("harness compare: --baseline "), "{err}");
    }
    let (code, _, err) = harness(&["--fail-on-regression"]);
    assert_eq!(code, 2, "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
