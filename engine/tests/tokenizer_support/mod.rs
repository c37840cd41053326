//! The real models' tokenizers, loaded once per test binary, and the
//! reference data other tests compare against.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use engine::gguf::GgufFile;
use engine::tokenizer::{TokenId, Tokenizer};

pub const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
pub const GEMMA3: &str = "gemma-3-270m-q4_k_m.gguf";

/// `<repo>/`.
pub fn repo_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The path of a test model; panics with instructions when it is absent
/// (tests must not pass by skipping).
pub fn model_path(name: &str) -> PathBuf {
    let p = repo_dir().join("models").join(name);
    assert!(
        p.is_file(),
        "test model {} is missing: run scripts/fetch-models first (expected at {})",
        name,
        p.display()
    );
    p
}

pub fn open(name: &str) -> GgufFile {
    GgufFile::open(&model_path(name)).unwrap()
}

fn load(name: &str) -> Tokenizer {
    Tokenizer::from_gguf(&open(name)).unwrap()
}

pub fn smollm2() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| load(SMOLLM2))
}

pub fn gemma3() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| load(GEMMA3))
}

/// One expected tokenization: `text` with `parse_special`, from llama.cpp.
pub struct Case {
    pub text: &'static str,
    pub parse_special: bool,
    pub ids: &'static [TokenId],
}

/// Checks every case with `add_special` off and on (`bos` prepended when
/// the model adds it).
pub fn check_cases(tok: &Tokenizer, cases: &[Case]) {
    for c in cases {
        let got = tok.encode(c.text, false, c.parse_special).unwrap();
        assert_eq!(got, c.ids, "{:?} parse_special={}", c.text, c.parse_special);
        let mut with_bos = Vec::new();
        if tok.add_bos() {
            with_bos.push(tok.bos().unwrap());
        }
        with_bos.extend_from_slice(c.ids);
        let got = tok.encode(c.text, true, c.parse_special).unwrap();
        assert_eq!(got, with_bos, "{:?} add_special", c.text);
    }
}

/// Feeds `ids` to a stream decoder one at a time and returns what each
/// push gave back.
pub fn stream(tok: &Tokenizer, ids: &[TokenId]) -> Vec<String> {
    let mut d = tok.stream_decoder(false);
    let mut out: Vec<String> = ids.iter().map(|&id| d.push(id).unwrap()).collect();
    out.push(d.finish());
    out
}
