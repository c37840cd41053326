//! `harness structure`: the repository's structure checks
//! ([`harness::structure`]), one line per failure; exit 1 on any.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

#[derive(Args)]
pub struct StructureArgs {
    /// The repository root (default: found from the current directory up).
    #[arg(long)]
    repo: Option<PathBuf>,
    /// Also print the uses that make each cycle's edges.
    #[arg(long, short)]
    verbose: bool,
}

pub fn structure(args: StructureArgs) -> ExitCode {
    let repo = match super::repo_root(args.repo.as_deref()) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("harness structure: {e}");
            return ExitCode::from(2);
        }
    };
    let findings = match harness::structure::check(&repo) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("harness structure: {e}");
            return ExitCode::from(2);
        }
    };
    for line in &findings.checked {
        println!("[structure] {line}");
    }
    for line in &findings.failures {
        println!("FAIL {line}");
    }
    if args.verbose || !findings.failures.is_empty() {
        for line in &findings.details {
            println!("{line}");
        }
    }
    if findings.failures.is_empty() {
        println!("[structure] all structure checks passed");
        ExitCode::SUCCESS
    } else {
        println!(
            "[structure] {} structure checks failed",
            findings.failures.len()
        );
        ExitCode::FAILURE
    }
}
