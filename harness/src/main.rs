//! `harness`: the differential-testing command line.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "harness",
    about = "Differential testing of sharpi against llama.cpp"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Capture llama.cpp's outputs for every model and prompt into
    /// reference-data/ (needs a build with `--features llama-cpp`).
    Capture(CaptureArgs),
    /// Rebuild DIR/manifest.json (file sizes and SHA-256) from what DIR
    /// holds, e.g. after re-rendering the chat templates. No llama.cpp.
    Manifest {
        /// The reference-data directory.
        #[arg(long, default_value = "reference-data")]
        dir: PathBuf,
    },
}

#[derive(Args)]
struct CaptureArgs {
    /// Capture only these model ids of reference-data/models.json.
    #[arg(long, value_delimiter = ',')]
    models: Vec<String>,
    /// Output directory; another directory than <repo>/reference-data gets a
    /// copy of the inputs as well.
    #[arg(long, default_value = "reference-data")]
    out: PathBuf,
    /// Repository root (model paths and inputs are relative to it).
    #[arg(long, default_value = ".")]
    repo: PathBuf,
    /// Let llama.cpp log to stderr.
    #[arg(long)]
    verbose: bool,
    /// Print every node of each model's compute graph and capture nothing.
    #[arg(long)]
    list_nodes: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Capture(args) => capture(args),
        Command::Manifest { dir } => manifest(&dir),
    }
}

fn manifest(dir: &std::path::Path) -> ExitCode {
    use harness::reference::{inputs, writer};
    let result =
        inputs::load_models_file(dir).and_then(|models| writer::write_manifest(dir, &models));
    match result {
        Ok(m) => {
            eprintln!(
                "harness manifest: {} files, {:.2} MiB",
                m.files.len(),
                m.total_bytes as f64 / (1024.0 * 1024.0)
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("harness manifest: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(feature = "llama-cpp")]
fn capture(args: CaptureArgs) -> ExitCode {
    let opts = harness::capture::Options {
        repo: args.repo,
        out: args.out,
        models: args.models,
        verbose: args.verbose,
        list_nodes: args.list_nodes,
    };
    match harness::capture::run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("harness capture: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(not(feature = "llama-cpp"))]
fn capture(args: CaptureArgs) -> ExitCode {
    let _ = (
        args.models,
        args.out,
        args.repo,
        args.verbose,
        args.list_nodes,
    );
    eprintln!(
        "harness capture: this harness was built without llama.cpp; rebuild with `--features llama-cpp` \
         (cargo run -p harness --release --features llama-cpp -- capture)"
    );
    ExitCode::FAILURE
}
