//! `sharpi`: the engine's command line, thin over the library.

use clap::{Parser, Subcommand};
use engine::cli::{self, CliError};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "sharpi", version, about = "GGUF inference engine")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print a GGUF file's metadata, tensor table and totals per type.
    Inspect {
        /// Path to a .gguf file.
        model: PathBuf,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

fn run(cli: Cli) -> Result<(), CliError> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    match cli.command {
        Command::Inspect { model, json } => cli::inspect::run(&model, json, &mut out)?,
    }
    out.flush()?;
    Ok(())
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => return cli::exit_for_parse_error(e, "sharpi"),
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        // A closed pipe (`sharpi inspect m | head`) is not an error.
        Err(CliError::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sharpi: error: {e}");
            ExitCode::FAILURE
        }
    }
}
