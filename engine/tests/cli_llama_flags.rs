//! llama.cpp's llama-cli flags on `sharpi`'s command line: the table in
//! engine/src/bin/sharpi/llama_flags/ holds every option of the list
//! engine/tests/data/llama-cli-flags.txt (scripts/llama-cli-flags, from the
//! vendored llama.cpp), docs/llama-cli-flags.md is rendered from it, and
//! every spelling run through the real binary is either taken by clap or
//! answered with one line naming it (exit code 2), never a clap error.

use crate::gguf_support;

use std::collections::{BTreeSet, HashMap};
use std::process::Output;

use crate::cli_support::{repo, sharpi};
use crate::llama_options::{self as llama_flags, Status, OPTIONS};
use gguf_support::{model_path, SMOLLM2};

/// The data file's options: spellings -> value count.
fn data_file() -> HashMap<Vec<String>, u8> {
    let path = repo().join("engine/tests/data/llama-cli-flags.txt");
    let text = std::fs::read_to_string(&path).expect("read the data file");
    let mut options = HashMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let cols: Vec<&str> = line.split('\t').collect();
        assert_eq!(cols.len(), 3, "{line:?}");
        let values = match cols[1] {
            "switch" => 0,
            "value" => 1,
            "values" => 2,
            other => panic!("{line:?}: {other}"),
        };
        let spellings = cols[0].split(' ').map(String::from).collect();
        assert!(
            options.insert(spellings, values).is_none(),
            "{line:?} twice"
        );
    }
    options
}

#[test]
fn table_holds_every_option_of_the_data_file() {
    let data = data_file();
    assert!(data.len() > 200, "{} options", data.len());
    let table: HashMap<Vec<String>, u8> = OPTIONS
        .iter()
        .filter(|o| !o.retired)
        .map(|o| {
            (
                o.spellings.iter().map(|s| s.to_string()).collect(),
                o.values,
            )
        })
        .collect();
    for (spellings, values) in &data {
        assert_eq!(
            table.get(spellings),
            Some(values),
            "data file: {spellings:?}"
        );
    }
    for (spellings, values) in &table {
        assert_eq!(data.get(spellings), Some(values), "table: {spellings:?}");
    }
    // Retired spellings are ones llama.cpp no longer has.
    let current: BTreeSet<&String> = data.keys().flatten().collect();
    for o in OPTIONS.iter().filter(|o| o.retired) {
        for s in o.spellings {
            assert!(!current.contains(&s.to_string()), "{s} is not retired");
        }
    }
}

#[test]
fn doc_matches_the_table() {
    let path = repo().join("docs/llama-cli-flags.md");
    let want = llama_flags::markdown();
    if std::env::var_os("SHARPI_WRITE_DOCS").is_some() {
        std::fs::write(&path, &want).expect("write the doc");
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "docs/llama-cli-flags.md differs from the table; run \
         SHARPI_WRITE_DOCS=1 cargo test --profile ci -p engine --test cli doc_matches_the_table, \
         or write this:\n{want}"
    );
}

/// A value llama.cpp would take for `flag`, that sharpi accepts where it
/// takes the flag.
fn plausible_value(flag: &str) -> &'static str {
    match flag {
        "-co" | "--color" => "on",
        "-ngl" | "--gpu-layers" | "--n-gpu-layers" => "all",
        "-s" | "--seed" | "-t" | "--threads" => "-1",
        _ => "2",
    }
}

/// What clap's errors look like once `exit_for_parse_error` printed them.
fn is_clap_error(o: &Output) -> bool {
    let err = String::from_utf8_lossy(&o.stderr);
    err.contains("(try --help)")
        || err.contains("unexpected argument")
        || err.contains("invalid value")
}

#[test]
fn every_llama_flag_is_taken_or_answered_in_one_line() {
    let missing = "/nonexistent/model.gguf";
    let mut runs = 0;
    for o in OPTIONS {
        for &flag in o.spellings {
            let mut args = vec!["-m", missing, flag];
            args.extend(std::iter::repeat_n(plausible_value(flag), o.values.into()));
            if o.spellings.contains(&"--model") {
                args = vec![flag, missing];
            }
            let out = sharpi(&args);
            runs += 1;
            let err = String::from_utf8_lossy(&out.stderr);
            match o.status {
                Status::Hint { .. } => {
                    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
                    assert_eq!(err.lines().count(), 1, "{args:?}: {err:?}");
                    let head = format!("sharpi: error: {flag}: llama.cpp's option to ");
                    assert!(err.starts_with(&head), "{args:?}: {err:?}");
                    assert!(out.stdout.is_empty(), "{args:?}");
                }
                _ => {
                    assert!(!is_clap_error(&out), "{args:?}: {err}");
                    // Help, version and the device list succeed; the rest
                    // fail on the missing model or prompt, in one line.
                    if out.status.code() != Some(0) {
                        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
                        assert_eq!(err.lines().count(), 1, "{args:?}: {err:?}");
                    }
                }
            }
        }
    }
    assert!(runs > 300, "{runs} runs");
}

#[test]
fn a_llama_cli_command_line_parses() {
    // As a llama.cpp user writes it; fails only on the missing model.
    let o = sharpi(&[
        "-m",
        "/nonexistent/model.gguf",
        "-ngl",
        "99",
        "-c",
        "2048",
        "-n",
        "64",
        "--temp",
        "0.7",
        "-s",
        "-1",
        "-t",
        "2",
        "-sys",
        "You are helpful.",
        "-p",
        "Hi",
        "-no-cnv",
        "--color",
        "on",
        "-e",
        "-r",
        "User:",
        "--ignore-eos",
        "-b",
        "512",
        "-ub",
        "256",
        "--no-display-prompt",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("/nonexistent/model.gguf"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn renamed_flags_generate_with_a_real_model() {
    let m = model_path(SMOLLM2);
    let m = m.to_str().unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec!["-m", m, "-p", "Name a colour.", "-n", "4", "--temp", "0"];
        args.extend_from_slice(extra);
        let o = sharpi(&args);
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        o.stdout
    };
    let llama = run(&[
        "-ngl",
        "0",
        "-sys",
        "Answer in one word.",
        "-no-cnv",
        "-s",
        "-1",
    ]);
    let sharpi_own = run(&["-g", "0", "--system-prompt", "Answer in one word."]);
    assert_eq!(llama, sharpi_own);
}

#[test]
fn subcommand_list_matches_the_binary() {
    let o = sharpi(&["--help"]);
    let help = String::from_utf8_lossy(&o.stdout);
    let listed: BTreeSet<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let known: BTreeSet<&str> = llama_flags::SUBCOMMANDS.iter().copied().collect();
    assert_eq!(listed, known, "{help}");
}
