//! The `harness` binary's own command line: the repository root found
//! from any directory inside it (`--repo` defaults to the nearest
//! directory up holding ci/thresholds.toml and reference-data/), one line
//! outside it; and the subcommands of a cargo feature this build lacks
//! (`capture` without llama-cpp, `mutants` without fault-injection): known
//! subcommands that exit 2 with one line naming the feature.

use std::path::Path;
use std::process::Command;

use crate::cli_support::{repo, temp_dir};

/// `harness ARGS...` run in `dir`: exit code, stdout, stderr.
fn harness_in(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Exit code 2, nothing on stdout, one stderr line holding `needle`.
fn assert_one_line_2(got: (i32, String, String), needle: &str) {
    let (code, out, err) = got;
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(out.is_empty(), "{out}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(needle), "{err}");
}

#[test]
fn the_repository_is_found_from_any_directory_inside_it() {
    let dry = ["compare", "--dry-run", "--quick"];
    let (code, at_root, err) = harness_in(&repo(), &dry);
    assert_eq!(code, 0, "{err}");
    assert!(at_root.contains(" items, "), "{at_root}");
    let below = repo().join("engine").join("src");
    let (code, from_below, err) = harness_in(&below, &dry);
    assert_eq!(code, 0, "{err}");
    assert_eq!(from_below, at_root);

    let outside = temp_dir("harness-outside");
    assert_one_line_2(harness_in(&outside, &dry), "pass --repo");
    let root = repo().canonicalize().unwrap();
    let with_repo = [&dry[..], &["--repo", root.to_str().unwrap()]].concat();
    let (code, given, err) = harness_in(&outside, &with_repo);
    assert_eq!(code, 0, "{err}");
    assert_eq!(given, at_root);
    let _ = std::fs::remove_dir_all(&outside);
}

#[cfg(not(feature = "llama-cpp"))]
#[test]
fn capture_without_llama_cpp_names_the_feature() {
    for cmd in ["capture", "capture-sampling"] {
        assert_one_line_2(
            harness_in(&repo(), &[cmd]),
            &format!("harness: error: {cmd} needs the llama-cpp feature: cargo run -p harness"),
        );
    }
}

#[cfg(not(feature = "fault-injection"))]
#[test]
fn mutants_without_fault_injection_names_the_feature() {
    assert_one_line_2(
        harness_in(&repo(), &["mutants", "--fault", "x"]),
        "harness: error: mutants needs the fault-injection feature",
    );
}
