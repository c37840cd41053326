//! `sharpi tokenize` as a process: `--ids` against llama.cpp's ids on the
//! tokenizer corpus captured in reference-data/ (every model of
//! models.json whose file is in models/, the whole corpus with and without
//! `--special`; each line alone on the two tokenizers there are, SmolLM2's
//! and Gemma's, for a selection), the default `<id> -> '<piece>'` lines,
//! `--show-count`, and special-token texts kept as text unless `--special`.
//!
//! The capture tokenized with add_special on and parse_special off
//! (`plain`) and on (`special`); llama-tokenize adds BOS/EOS as the
//! metadata says, as `sharpi tokenize` does, so `plain` is its default
//! output and `special` its output with `--special`.

use crate::gguf_support::{model_path, GEMMA3, SMOLLM2};

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::cli_support::{repo, sharpi};
use serde_json::Value;

/// Stdout of a run that must succeed with nothing on stderr.
fn ok(o: &Output) -> String {
    assert!(
        o.status.success() && o.stderr.is_empty(),
        "exit {:?}: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).expect("stdout is UTF-8")
}

fn json(path: &Path) -> Value {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap()
}

/// `[1, 2, 3]` as llama-tokenize prints `ids`.
fn id_list(ids: &Value) -> String {
    let ids: Vec<String> = ids
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap().to_string())
        .collect();
    format!("[{}]\n", ids.join(", "))
}

/// Runs `sharpi tokenize -m MODEL ARGS --ids` and compares with `want`;
/// a mismatch is pushed onto `bad`.
fn compare(model: &str, args: &[&str], want: &Value, what: &str, bad: &mut Vec<String>) {
    let all = [&["tokenize", "-m", model, "--ids"][..], args].concat();
    let got = ok(&sharpi(&all));
    let want = id_list(want);
    if got != want {
        bad.push(format!("{what}\n  llama.cpp {want}  sharpi    {got}"));
    }
}

/// The capture of one model: (model file, its tokenizer.json).
fn captured_models() -> Vec<(PathBuf, Value)> {
    let reference = repo().join("reference-data");
    let models = json(&reference.join("models.json"));
    let mut out: Vec<(PathBuf, Value)> = Vec::new();
    for m in models["models"].as_array().unwrap() {
        let file = repo().join(m["file"].as_str().unwrap());
        let cap = reference
            .join(m["id"].as_str().unwrap())
            .join("tokenizer.json");
        // A model captured twice (another KV type) has the same tokenizer.
        if file.is_file() && cap.is_file() && !out.iter().any(|(f, _)| *f == file) {
            out.push((file, json(&cap)));
        }
    }
    out
}

#[test]
fn ids_equal_llama_cpps_on_the_whole_corpus_for_every_model() {
    // Both distinct tokenizers must be there: no passing by skipping.
    model_path(SMOLLM2);
    model_path(GEMMA3);
    let models = captured_models();
    assert!(models.len() >= 2, "{} models", models.len());
    let mut bad = Vec::new();
    for (file, cap) in &models {
        assert_eq!(cap["add_special"], Value::Bool(true));
        let corpus = repo()
            .join("reference-data")
            .join(cap["corpus"].as_str().unwrap());
        let (m, c) = (file.to_str().unwrap(), corpus.to_str().unwrap());
        let name = file.file_name().unwrap().to_string_lossy();
        compare(
            m,
            &["-f", c],
            &cap["whole"]["plain"],
            &format!("{name} whole"),
            &mut bad,
        );
        compare(
            m,
            &["-f", c, "--special"],
            &cap["whole"]["special"],
            &format!("{name} whole --special"),
            &mut bad,
        );
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// Each line alone through `-p`, on SmolLM2's and Gemma's tokenizers:
/// the lines that tokenize differently with special tokens parsed (both
/// ways), those that start with white space or are empty (where a text's
/// start matters), and every 10th line. (Every line, both ways, would be
/// some 1600 processes; the tokenizer's own test compares every line.)
#[test]
fn ids_equal_llama_cpps_on_corpus_lines() {
    let reference = repo().join("reference-data");
    let corpus = std::fs::read_to_string(reference.join("prompts/tokenizer.txt")).unwrap();
    let mut lines: Vec<&str> = corpus.split('\n').collect();
    if lines.last() == Some(&"") {
        lines.pop();
    }
    let mut bad = Vec::new();
    let mut runs = 0;
    for (file, id) in [
        (SMOLLM2, "smollm2-135m-instruct-q4_1"),
        (GEMMA3, "gemma-3-270m-q4_k_m"),
    ] {
        let model = model_path(file);
        let m = model.to_str().unwrap();
        let cap = json(&reference.join(id).join("tokenizer.json"));
        let captured = cap["lines"].as_array().unwrap();
        assert_eq!(captured.len(), lines.len(), "{id}: line count");
        for (i, (text, want)) in lines.iter().zip(captured).enumerate() {
            let what = format!("{id} line {} {text:?}", i + 1);
            if want["plain"] != want["special"] {
                compare(m, &["-p", text], &want["plain"], &what, &mut bad);
                let what = format!("{what} --special");
                compare(
                    m,
                    &["-p", text, "--special"],
                    &want["special"],
                    &what,
                    &mut bad,
                );
                runs += 2;
            } else if i % 10 == 0 || text.is_empty() || text.starts_with(char::is_whitespace) {
                compare(m, &["-p", text], &want["plain"], &what, &mut bad);
                runs += 1;
            }
        }
    }
    assert!(runs > 100, "{runs} runs");
    assert!(
        bad.is_empty(),
        "{} of {runs} differ:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn default_output_is_llama_tokenizes_lines() {
    let m = model_path(GEMMA3);
    let o = sharpi(&[
        "tokenize",
        "-m",
        m.to_str().unwrap(),
        "-p",
        "Hello world",
        "--show-count",
    ]);
    // Gemma adds a BOS, shown as its text.
    assert_eq!(
        ok(&o),
        "     2 -> '<bos>'\n  9259 -> 'Hello'\n  1902 -> ' world'\nTotal number of tokens: 3\n"
    );
    let o = sharpi(&[
        "tokenize",
        "-m",
        m.to_str().unwrap(),
        "-p",
        "Hello world",
        "--no-bos",
        "--ids",
    ]);
    assert_eq!(ok(&o), "[9259, 1902]\n");
}

#[test]
fn special_token_texts_stay_text_unless_special() {
    let m = model_path(SMOLLM2);
    let m = m.to_str().unwrap();
    let text = "<|im_start|>user";
    let default = ok(&sharpi(&["tokenize", "-m", m, "-p", text]));
    // `<|im_start|>` is id 1: as text it is the characters `<`, `|`, `im`...
    assert!(!default.contains("     1 -> "), "{default}");
    assert!(default.starts_with("    44 -> '<'\n"), "{default}");
    // --no-parse-special is llama-tokenize's spelling of the default.
    let spelled = ok(&sharpi(&[
        "tokenize",
        "-m",
        m,
        "-p",
        text,
        "--no-parse-special",
    ]));
    assert_eq!(spelled, default);
    let special = ok(&sharpi(&["tokenize", "-m", m, "-p", text, "--special"]));
    assert_eq!(special, "     1 -> '<|im_start|>'\n  4093 -> 'user'\n");
    // The text from a file or stdin is the same text.
    let mut child = Command::new(env!("CARGO_BIN_EXE_sharpi"))
        .args(["tokenize", "-m", m, "--stdin", "--special"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    assert_eq!(ok(&child.wait_with_output().unwrap()), special);
    let o = sharpi(&[
        "tokenize",
        "-m",
        m,
        "-p",
        text,
        "--special",
        "--no-parse-special",
    ]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn bad_input_is_one_line() {
    let m = model_path(SMOLLM2);
    let m = m.to_str().unwrap();
    let dir = std::env::temp_dir().join(format!("sharpi-tokenize-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let big = dir.join("big.txt");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(17 << 20).unwrap();
    let latin1 = dir.join("latin1.txt");
    std::fs::write(&latin1, b"caf\xe9").unwrap();
    for (args, needle) in [
        (
            vec!["-f", big.to_str().unwrap()],
            "longer than 16777216 bytes",
        ),
        (
            vec!["-f", latin1.to_str().unwrap()],
            "not UTF-8 text (at byte 3)",
        ),
        (vec!["-f", "/nonexistent/x.txt"], "/nonexistent/x.txt"),
    ] {
        let o = sharpi(&[&["tokenize", "-m", m][..], &args].concat());
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with("sharpi: error: ") && err.contains(needle),
            "{err}"
        );
        assert!(o.stdout.is_empty());
    }
    // No text source: clap's usage error.
    let o = sharpi(&["tokenize", "-m", m]);
    assert_eq!(o.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}
