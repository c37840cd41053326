//! A model and prompts named by path, `harness calibrate` writing limits
//! that `compare --thresholds` then gates with (and that an injected RoPE
//! fault fails at layer 0 Qcur), and `harness capture --model`'s argument
//! checks. On the repository's SmolLM2 capture, cpu path, two prompts.

use std::path::{Path, PathBuf};

use crate::cli_support::{run_harness as harness, temp_dir as fresh_dir};

fn temp_dir(tag: &str) -> PathBuf {
    fresh_dir(&format!("adhoc-{tag}"))
}

const MODEL: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

#[test]
fn calibrated_limits_gate_a_model_named_by_path() {
    let dir = temp_dir("calibrate");
    let limits = dir.join("limits.toml");
    let limits = limits.to_str().unwrap();
    let sel = [
        "--model",
        MODEL,
        "--prompt",
        "reference-data/prompts/capital-france.txt",
        "--prompt",
        "once-upon",
        "--greedy-steps",
        "4",
    ];
    let (code, _, err) = harness(
        &[
            &["calibrate"][..],
            &sel,
            &["--paths", "cpu", "--out", limits],
        ]
        .concat(),
    );
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(limits).unwrap();
    let t = harness::compare::Thresholds::parse(&text, "limits").unwrap();
    let l = t
        .limits("smollm2-135m-instruct-q4_1", harness::compare::Path::Cpu)
        .unwrap_or_else(|| panic!("{text}"));
    // The cpu path's layer-0 rule (Qcur measured <= 2e-15 there).
    assert_eq!(l.tap_nmse("Qcur", Some(0), false), 1e-10, "{text}");
    assert!(text.contains("# measured"), "{text}");

    let (code, out, err) = harness(
        &[
            &["compare"][..],
            &sel,
            &["--no-corpus", "--thresholds", limits],
        ]
        .concat(),
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("all checks passed"), "{out}");

    #[cfg(feature = "fault-injection")]
    {
        let (code, out, err) = harness(
            &[
                &["compare"][..],
                &sel,
                &[
                    "--no-corpus",
                    "--thresholds",
                    limits,
                    "--inject",
                    "rope-style",
                ],
            ]
            .concat(),
        );
        assert_eq!(code, 1, "{out}\n{err}");
        assert!(out.contains("first divergence: layer 0 Qcur"), "{out}");
    }

    // A model file that is not in the reference data, a prompt file that
    // differs from the captured one: exit 2, one line each.
    let other = dir.join("other.gguf");
    std::fs::write(&other, b"not this model").unwrap();
    let (code, _, err) = harness(&["compare", "--model", other.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("is no model of") && err.lines().count() == 1,
        "{err}"
    );
    let prompt = dir.join("capital-france.txt");
    std::fs::write(&prompt, b"The capital of Spain is").unwrap();
    let (code, _, err) = harness(&["compare", "--prompt", prompt.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("differs from the captured"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn capture_of_any_model_checks_its_arguments() {
    let dir = temp_dir("capture");
    let out = dir.join("out");
    let out = out.to_str().unwrap();
    // --model needs --out; -p needs --model.
    let (code, _, err) = harness(&["capture", "--model", MODEL]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = harness(&["capture", "-p", "hi", "--out", out]);
    assert_eq!(code, 2, "{err}");
    let bad = dir.join("prompts.jsonl");
    std::fs::write(&bad, "{\"text\": \"a\"}\n{\"txt\": \"b\"}\n").unwrap();
    let (code, _, err) = harness(&[
        "capture",
        "--model",
        MODEL,
        "--prompts",
        bad.to_str().unwrap(),
        "--out",
        out,
    ]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("prompts.jsonl:2"), "{err}");
    #[cfg(not(feature = "llama-cpp"))]
    {
        let (code, _, err) = harness(&["capture", "--model", MODEL, "-p", "Hello", "--out", out]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("--features llama-cpp"), "{err}");
        assert!(
            !Path::new(out).exists(),
            "nothing written without llama.cpp"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
