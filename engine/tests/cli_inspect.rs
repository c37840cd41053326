//! `sharpi inspect` as a process: the real models' tensor tables, and
//! malformed files giving one-line errors with exit code 1.

use crate::cli_support::{repo, sharpi};
use std::path::{Path, PathBuf};
use std::process::Output;

fn model(name: &str) -> PathBuf {
    let p = repo().join("models").join(name);
    assert!(
        p.exists(),
        "{} is missing: run scripts/fetch-models first",
        p.display()
    );
    p
}

fn inspect_json(path: &Path) -> serde_json::Value {
    let out = sharpi(&["inspect", path.to_str().unwrap(), "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

fn type_counts(v: &serde_json::Value) -> Vec<(String, u64)> {
    let mut c: Vec<(String, u64)> = v["totals_by_type"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, t)| (k.clone(), t["tensors"].as_u64().unwrap()))
        .collect();
    c.sort();
    c
}

fn counts(pairs: &[(&str, u64)]) -> Vec<(String, u64)> {
    let mut c: Vec<(String, u64)> = pairs.iter().map(|(k, n)| (k.to_string(), *n)).collect();
    c.sort();
    c
}

#[test]
fn smollm2_tensor_table() {
    let v = inspect_json(&model("SmolLM2-135M-Instruct.Q4_1.gguf"));
    assert_eq!(v["tensor_count"], 272);
    assert_eq!(v["tensors"].as_array().unwrap().len(), 272);
    assert_eq!(
        type_counts(&v),
        counts(&[("Q4_1", 210), ("F32", 61), ("Q8_0", 1)])
    );
    assert_eq!(v["metadata"]["general.architecture"]["value"], "llama");
    // 49152 tokens are summarised, not dumped.
    let tokens = &v["metadata"]["tokenizer.ggml.tokens"]["value"];
    assert_eq!(tokens["len"], 49152);
    assert!(tokens["head"].as_array().unwrap().len() < 49152);
}

#[test]
fn gemma3_tensor_table() {
    let v = inspect_json(&model("gemma-3-270m-q4_k_m.gguf"));
    assert_eq!(v["tensor_count"], 236);
    assert_eq!(
        type_counts(&v),
        counts(&[
            ("F32", 109),
            ("Q5_0", 81),
            ("Q4_K", 27),
            ("Q8_0", 10),
            ("Q6_K", 9)
        ])
    );
    assert_eq!(v["metadata"]["general.architecture"]["value"], "gemma3");
}

#[test]
fn text_report_has_table_and_totals() {
    let p = model("SmolLM2-135M-Instruct.Q4_1.gguf");
    let out = sharpi(&["inspect", p.to_str().unwrap()]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("tensors (272):"));
    assert!(text.contains("token_embd.weight"));
    assert!(text.contains("[string; 49152]"));
    assert!(text
        .lines()
        .any(|l| l.trim_start().starts_with("Q4_1") && l.contains(" 210 tensors")));
}

/// Writes `bytes` to a fresh temp file and runs `sharpi inspect` on it.
fn inspect_bytes(tag: &str, bytes: &[u8]) -> Output {
    let dir = std::env::temp_dir().join(format!("sharpi-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(format!("{}.gguf", tag.replace(' ', "_")));
    std::fs::write(&p, bytes).unwrap();
    let out = sharpi(&["inspect", p.to_str().unwrap()]);
    let _ = std::fs::remove_file(&p);
    out
}

fn assert_one_line_failure(tag: &str, out: &Output) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{tag}: exit code, stderr: {err}"
    );
    assert!(!err.contains("panicked"), "{tag}: panic: {err}");
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "{tag}: not one line: {err}"
    );
    assert!(err.starts_with("sharpi: error: "), "{tag}: {err}");
}

#[test]
fn malformed_files_fail_with_one_line() {
    let real = std::fs::read(model("SmolLM2-135M-Instruct.Q4_1.gguf")).unwrap();
    // Truncations: inside the magic, the counts, the metadata, the tensor
    // infos, and the tensor data.
    for cut in [
        0usize,
        3,
        10,
        20,
        1000,
        100_000,
        1_500_000,
        real.len() / 2,
        real.len() - 1,
    ] {
        let out = inspect_bytes(&format!("cut{cut}"), &real[..cut]);
        assert_one_line_failure(&format!("truncated at {cut}"), &out);
    }
    // Corruptions: magic, version, a huge tensor count, a huge kv count, the
    // first key's length claimed enormous.
    let patches: Vec<(&str, usize, Vec<u8>)> = vec![
        ("magic", 0, b"GGUX".to_vec()),
        ("version", 4, 99u32.to_le_bytes().to_vec()),
        ("tensor count", 8, u64::MAX.to_le_bytes().to_vec()),
        ("kv count", 16, (1u64 << 40).to_le_bytes().to_vec()),
        ("key length", 24, (1u64 << 62).to_le_bytes().to_vec()),
    ];
    for (tag, at, bytes) in patches {
        let mut b = real.clone();
        b[at..at + bytes.len()].copy_from_slice(&bytes);
        let out = inspect_bytes(tag, &b);
        assert_one_line_failure(tag, &out);
    }
}

#[test]
fn missing_file_and_bad_flag() {
    let out = sharpi(&["inspect", "/nonexistent/model.gguf"]);
    assert_one_line_failure("missing file", &out);
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/model.gguf"));

    let out = sharpi(&["inspect", "--no-such-flag", "x.gguf"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}
