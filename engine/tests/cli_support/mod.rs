//! What the command-line tests share: running the binary and reading what
//! it printed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::gguf_support::model_path;

/// The arguments of a greedy continuation of "The capital of France is" by
/// model file `m`: `n` tokens.
pub fn greedy<'a>(m: &'a str, n: &'a str) -> Vec<&'a str> {
    vec![
        "-m",
        m,
        "-p",
        "The capital of France is",
        "--raw",
        "--temp",
        "0",
        "-n",
        n,
    ]
}

/// `sharpi ARGS` run to completion, stdin empty, stdout and stderr kept.
pub fn sharpi(args: &[&str]) -> Output {
    sharpi_env(args, &[])
}

/// [`sharpi`] with the environment variables `vars` (name, value) set.
pub fn sharpi_env(args: &[&str], vars: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sharpi"))
        .args(args)
        .envs(vars.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run sharpi")
}

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The path of model file `name` (fetched by scripts/fetch-models), as an
/// argument.
pub fn path(name: &str) -> String {
    model_path(name).to_str().unwrap().to_string()
}

/// Stdout of a run that must have succeeded.
pub fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "exit {:?}: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).expect("stdout is UTF-8")
}
