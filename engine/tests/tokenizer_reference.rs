//! Our tokenizer and chat templates against the captured reference data
//! (reference-data/, see its README):
//! - `<model>/tokenizer.json`: llama.cpp's `llama_tokenize` of every line of
//!   `prompts/tokenizer.txt` and of the whole file, add_special on,
//!   parse_special off (`plain`) and on (`special`). Ids must be equal.
//! - `chat/<model>.json`: Python Jinja2's renders (set up as transformers
//!   does) of `prompts/conversations.json` and of the `*.chat.json`
//!   prompts through the model's template. Text must be byte-identical.
//!
//! `SHARPI_REFERENCE_DATA` points elsewhere than `<repo>/reference-data`.
//! Missing data fails the test (it never passes by skipping).

use crate::tokenizer_support;

use std::path::PathBuf;

use engine::chat::ChatTemplate;
use engine::tokenizer::Tokenizer;
use serde_json::Value;
use tokenizer_support::*;

fn reference_dir() -> PathBuf {
    std::env::var_os("SHARPI_REFERENCE_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_dir().join("reference-data"))
}

fn read(rel: &str) -> Vec<u8> {
    let path = reference_dir().join(rel);
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "reference data {} is missing ({e}): capture it with the harness, or set SHARPI_REFERENCE_DATA",
            path.display()
        )
    })
}

fn json(rel: &str) -> Value {
    serde_json::from_slice(&read(rel)).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| u32::try_from(x.as_i64().unwrap()).unwrap())
        .collect()
}

/// Compares every captured tokenization; returns (texts compared, mismatches).
fn compare_tokenizer(tok: &Tokenizer, model_id: &str) -> (usize, Vec<String>) {
    let cap = json(&format!("{model_id}/tokenizer.json"));
    assert_eq!(cap["add_special"], Value::Bool(true));
    let corpus = String::from_utf8(read(cap["corpus"].as_str().unwrap())).unwrap();
    let mut lines: Vec<&str> = corpus.split('\n').collect();
    if lines.last() == Some(&"") {
        lines.pop();
    }
    let captured = cap["lines"].as_array().unwrap();
    assert_eq!(captured.len(), lines.len(), "{model_id}: line count");

    let mut texts: Vec<(&str, &Value)> = lines.into_iter().zip(captured).collect();
    texts.push((corpus.as_str(), &cap["whole"]));
    let mut bad = Vec::new();
    for (i, (text, want)) in texts.iter().enumerate() {
        for (key, parse_special) in [("plain", false), ("special", true)] {
            let got = tok.encode(text, true, parse_special).unwrap();
            if got != ids(&want[key]) {
                bad.push(format!(
                    "{model_id} line {} {key}: {:?}\n  llama.cpp {:?}\n  ours      {:?}",
                    i + 1,
                    text,
                    ids(&want[key]),
                    got
                ));
            }
        }
    }
    (texts.len(), bad)
}

#[test]
fn tokenizer_ids_equal_llama_cpps_on_the_corpus() {
    let mut report = Vec::new();
    let mut total = 0;
    for (model_id, tok) in [
        ("smollm2-135m-instruct-q4_1", smollm2()),
        ("gemma-3-270m-q4_k_m", gemma3()),
    ] {
        let (n, bad) = compare_tokenizer(tok, model_id);
        total += 2 * n;
        report.extend(bad);
    }
    assert!(
        report.is_empty(),
        "{} of {total} tokenizations differ:\n{}",
        report.len(),
        report[..report.len().min(10)].join("\n")
    );
}

#[test]
fn chat_renders_equal_jinja2s() {
    let cap = json("chat/smollm2-135m-instruct-q4_1.json");
    // The capture froze strftime_now at 2026-01-01T00:00:00.
    assert_eq!(cap["renderer"]["strftime_now"], "2026-01-01T00:00:00");
    let template = ChatTemplate::from_gguf(&open(SMOLLM2), smollm2())
        .unwrap()
        .with_fixed_time(1_767_225_600);

    let conversations = json("prompts/conversations.json");
    let messages_of = |id: &str| -> String {
        let c = conversations
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .unwrap_or_else(|| panic!("conversation {id} not in conversations.json"));
        c["messages"].to_string()
    };
    let mut n = 0;
    for r in cap["conversations"].as_array().unwrap() {
        let id = r["id"].as_str().unwrap();
        let agp = r["add_generation_prompt"].as_bool().unwrap();
        let got = template.render_json(&messages_of(id), agp).unwrap();
        assert_eq!(
            got,
            r["text"].as_str().unwrap(),
            "conversation {id}, add_generation_prompt={agp}"
        );
        n += 1;
    }
    for r in cap["prompts"].as_array().unwrap() {
        let id = r["id"].as_str().unwrap();
        let prompt = json(&format!("prompts/{id}.chat.json"));
        let agp = prompt["add_generation_prompt"].as_bool().unwrap();
        assert_eq!(r["add_generation_prompt"].as_bool(), Some(agp));
        let got = template
            .render_json(&prompt["messages"].to_string(), agp)
            .unwrap();
        assert_eq!(got, r["text"].as_str().unwrap(), "prompt {id}");
        n += 1;
    }
    assert_eq!(n, 26, "renders compared");
}
