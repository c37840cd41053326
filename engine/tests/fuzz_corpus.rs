//! The committed fuzz corpora (engine/fuzz/corpus/) replayed on the stable
//! toolchain, so that every seed, and every finding turned into a seed,
//! stays a regression test in `cargo test` where cargo-fuzz is not run.

#[path = "../fuzz/checks/chat_template.rs"]
mod chat_template_check;

use std::path::{Path, PathBuf};

fn seeds(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
}

#[test]
fn chat_template_corpus_renders_or_fails_in_one_line() {
    let files = seeds("chat_template");
    assert!(files.len() >= 30, "{} seeds", files.len());
    for f in files {
        chat_template_check::check(&std::fs::read(&f).unwrap());
    }
}

#[test]
fn gguf_corpus_parses_or_fails_in_one_line() {
    let files = seeds("gguf_parse");
    assert!(files.len() >= 8, "{} seeds", files.len());
    for f in files {
        let bytes = std::fs::read(&f).unwrap();
        let len = bytes.len() as u64;
        match engine::gguf::GgufFile::from_bytes(bytes) {
            Ok(file) => assert!(file.file_size() == len, "{}", f.display()),
            Err(e) => {
                assert!(!e.to_string().contains('\n'), "{}: {e}", f.display());
                assert!(e.offset <= len, "{}: {e}", f.display());
            }
        }
    }
}
