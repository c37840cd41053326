//! The models pinned in reference-data/generated-models.json: each recipe
//! command, run twice in a temporary directory (with 1 and with 2 worker
//! threads), gives identical bytes whose SHA-256 is the pinned one.

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

struct Pinned {
    id: String,
    file: String,
    command: String,
    sha256: String,
}

fn manifest() -> Vec<Pinned> {
    let text = std::fs::read_to_string(repo().join("reference-data/generated-models.json"))
        .expect("read generated-models.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let field = |m: &serde_json::Value, k: &str| m[k].as_str().expect(k).to_string();
    v["models"]
        .as_array()
        .expect("models array")
        .iter()
        .map(|m| Pinned {
            id: field(m, "id"),
            file: field(m, "file"),
            command: field(m, "command"),
            sha256: field(m, "sha256"),
        })
        .collect()
}

fn pinned(id: &str) -> Pinned {
    manifest()
        .into_iter()
        .find(|m| m.id == id)
        .unwrap_or_else(|| panic!("no model {id:?} in generated-models.json"))
}

/// Runs `m.command` from the repository root, writing to `out` instead of
/// `m.file`, with `threads` worker threads.
fn make(m: &Pinned, out: &Path, threads: usize) {
    let words: Vec<&str> = m.command.split(' ').collect();
    assert_eq!(words[0], "sharpi", "{}", m.command);
    assert!(
        words.contains(&m.file.as_str()),
        "{} does not name {}",
        m.command,
        m.file
    );
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sharpi"));
    cmd.current_dir(repo());
    for w in &words[1..] {
        if *w == m.file {
            cmd.arg(out);
        } else {
            cmd.arg(w);
        }
    }
    cmd.args(["--threads", &threads.to_string()]);
    let o = cmd.output().expect("run sharpi");
    assert!(
        o.status.success(),
        "{}: {}",
        m.command,
        String::from_utf8_lossy(&o.stderr)
    );
}

fn check(id: &str) {
    let m = pinned(id);
    let dir = std::env::temp_dir().join(format!("sharpi-gen-{id}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (a, b) = (dir.join("a.gguf"), dir.join("b.gguf"));
    make(&m, &a, 1);
    make(&m, &b, 2);
    let (a_bytes, b_bytes) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        a_bytes == b_bytes,
        "{id}: 1 and 2 threads give different bytes"
    );
    let got = format!("{:x}", Sha256::digest(&a_bytes));
    assert_eq!(got, m.sha256, "{id}: SHA-256 differs from the pin");
}

#[test]
fn synth_qwen3_is_reproducible_and_pinned() {
    check("synth-qwen3");
}

#[test]
fn synth_qwen3moe_is_reproducible_and_pinned() {
    check("synth-qwen3moe");
}

#[test]
fn synth_qwen3moe_ties_is_reproducible_and_pinned() {
    check("synth-qwen3moe-ties");
}

#[test]
fn smollm2_q4_k_m_is_reproducible_and_pinned() {
    check("smollm2-135m-instruct-q4_k_m");
}

#[test]
fn smollm2_moe_is_reproducible_and_pinned() {
    check("smollm2-moe");
}

#[test]
fn synth_qwen3_bigscores_is_reproducible_and_pinned() {
    check("synth-qwen3-bigscores");
}

#[test]
fn manifest_lists_the_six_models_with_sha256s() {
    let ids: Vec<String> = manifest().into_iter().map(|m| m.id).collect();
    assert_eq!(
        ids,
        [
            "smollm2-135m-instruct-q4_k_m",
            "synth-qwen3",
            "synth-qwen3moe",
            "smollm2-moe",
            "synth-qwen3-bigscores",
            "synth-qwen3moe-ties"
        ]
    );
    for m in manifest() {
        assert_eq!(m.sha256.len(), 64, "{}", m.id);
        assert!(m.sha256.bytes().all(|c| c.is_ascii_hexdigit()));
        assert!(m.file.starts_with("models/"), "{}", m.file);
    }
}
