//! Every `sharpi` command with its stdout a pipe whose reader is gone
//! (`sharpi inspect --json m | head -c 10`): exit code 0 and nothing about
//! it on stderr. The read end is closed before the process starts, so
//! every write to stdout fails with EPIPE (Rust ignores SIGPIPE).

use crate::cli_support::greedy;
use crate::gguf_support::model_path;

use std::process::{Command, Stdio};

const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// Runs sharpi with a closed stdout pipe; returns (exit code, stderr).
fn closed_stdout(args: &[&str]) -> (Option<i32>, String) {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let o = Command::new(env!("CARGO_BIN_EXE_sharpi"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("run sharpi");
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn every_command_exits_0_on_a_closed_stdout() {
    let m = model_path(SMOLLM2);
    let m = m.to_str().unwrap();
    let synth_in = model_path("synth-qwen3.gguf");
    let dir = std::env::temp_dir().join(format!("sharpi-pipe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = dir.join("text.txt");
    std::fs::write(
        &text,
        "The quick brown fox jumps over the lazy dog. ".repeat(40),
    )
    .unwrap();
    let (text, q, s) = (
        text.to_str().unwrap(),
        dir.join("q.gguf"),
        dir.join("s.gguf"),
    );
    let runs: Vec<Vec<&str>> = vec![
        vec!["--help"],
        vec!["--version"],
        vec!["tokenize", "--help"],
        vec!["--list-devices"],
        vec!["inspect", m],
        vec!["inspect", "--json", m],
        vec!["tokenize", "-m", m, "-p", "Hello world"],
        vec!["tokenize", "-m", m, "-p", "Hello world", "--ids"],
        greedy(m, "4"),
        vec![
            "run", "-m", m, "-p", "Hi", "--temp", "0", "-n", "4", "--json",
        ],
        vec!["bench", "-m", m, "-p", "8", "-n", "2", "-r", "1", "-t", "1"],
        vec![
            "bench", "-m", m, "-p", "8", "-n", "2", "-r", "1", "-t", "1", "-o", "json",
        ],
        vec![
            "perplexity",
            "-m",
            m,
            "-f",
            text,
            "-c",
            "64",
            "--chunks",
            "2",
        ],
        vec![
            "quantize",
            synth_in.to_str().unwrap(),
            q.to_str().unwrap(),
            "--type",
            "q8_0",
        ],
        vec![
            "synth",
            "--arch",
            "qwen3",
            "--seed",
            "1",
            "--tokenizer-from",
            m,
            s.to_str().unwrap(),
        ],
    ];
    let mut bad = Vec::new();
    for args in &runs {
        let (code, err) = closed_stdout(args);
        if code != Some(0) || err.to_lowercase().contains("broken pipe") || err.contains("panic") {
            bad.push(format!(
                "sharpi {}: exit {code:?}, stderr {err:?}",
                args.join(" ")
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
