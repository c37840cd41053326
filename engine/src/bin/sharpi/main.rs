//! `sharpi`: the engine's command line, thin over the library. Argument
//! parsing (clap) lives here, in the binary, each subcommand's work in a
//! module of its own; a program that uses the engine as a library compiles
//! none of it.

mod args;
mod bench;
mod chat;
mod decode;
mod device;
mod error;
mod escape;
mod generate;
mod inspect;
mod interrupt;
mod list_devices;
mod llama_flags;
mod load;
mod perplexity;
mod prompt;
mod quantize;
mod synth;
mod tokenize;

use args::GenerateArgs;
use bench::BenchArgs;
use clap::{Parser, Subcommand};
use engine::gguf::GgufFile;
use engine::quantize::FileType;
use error::{exit_for_parse_error, CliError};
use perplexity::PerplexityArgs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use synth::SynthArgs;
use tokenize::TokenizeArgs;

/// Every allocation goes through the budgeted allocator, so that a chat
/// template from a model file renders within a memory budget
/// (`engine::bounded`).
#[global_allocator]
static ALLOC: engine::bounded::BudgetAlloc = engine::bounded::BudgetAlloc;

/// `sharpi -m MODEL -p PROMPT [options]` generates text (the same as
/// `sharpi run ...`); the subcommands do the rest.
#[derive(Parser)]
#[command(
    name = "sharpi",
    version,
    about = "GGUF inference engine",
    args_conflicts_with_subcommands = true,
    arg_required_else_help = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// List the Vulkan devices (index for --device, type, device-local
    /// memory, Vulkan version, driver) and exit.
    #[arg(long)]
    list_devices: bool,
    #[command(flatten)]
    generate: GenerateArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Generate text (what `sharpi -m MODEL -p PROMPT` does).
    Run(GenerateArgs),
    /// Prefill and decode speed as llama-bench measures it (pp, tg, depth; its lists and output formats).
    Bench(BenchArgs),
    /// Perplexity of a text, and KL divergence against a base logits file
    /// (llama-perplexity's modes and file format).
    Perplexity(PerplexityArgs),
    /// Print a GGUF file's metadata, tensor table and totals per type.
    Inspect {
        /// Path to a .gguf file.
        model: PathBuf,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Quantize a GGUF model with llama.cpp's recipe for a file type.
    Quantize {
        /// The model to quantize (any type sharpi can dequantize).
        input: PathBuf,
        /// Where to write the quantized model.
        output: PathBuf,
        /// File type: f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_k,
        /// q3_k_s, q3_k_m, q3_k_l, q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k.
        #[arg(long = "type", value_name = "TYPE")]
        ftype: FileType,
        /// Worker threads (default: all cores; at most 4 per core). The
        /// output does not depend on it.
        #[arg(long, value_parser = args::threads)]
        threads: Option<usize>,
    },
    /// Write a synthetic model, deterministic from a seed: drawn from
    /// scratch, or experts made from a dense llama model.
    Synth(SynthArgs),
    /// Print a text's tokens as llama-tokenize does (`<id> -> '<piece>'`,
    /// or `[1, 2, 3]` with --ids); special-token texts stay text unless
    /// --special.
    Tokenize(TokenizeArgs),
}

fn run(cli: Cli) -> Result<(), CliError> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if cli.list_devices {
        list_devices::run(&mut out)?;
        out.flush()?;
        return Ok(());
    }
    let Some(command) = cli.command else {
        generate::run(&cli.generate, &mut out)?;
        out.flush()?;
        return Ok(());
    };
    match command {
        Command::Run(args) => generate::run(&args, &mut out)?,
        Command::Bench(args) => bench::run(&args, &mut out)?,
        Command::Perplexity(args) => perplexity::run(&args, &mut out)?,
        Command::Inspect { model, json } => inspect::run(&model, json, &mut out)?,
        Command::Quantize {
            input,
            output,
            ftype,
            threads,
        } => quantize::run(&input, &output, ftype, threads, &mut out)?,
        Command::Synth(args) => synth::run(&args, &mut out)?,
        Command::Tokenize(args) => tokenize::run(&args, &mut out)?,
    }
    out.flush()?;
    Ok(())
}

fn main() -> ExitCode {
    // llama-cli's flags: rewritten to sharpi's, or one line on what to use.
    let args = match llama_flags::translate(std::env::args_os().collect()) {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("sharpi: error: {msg}");
            return ExitCode::from(2);
        }
    };
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => return exit_for_parse_error(e, "sharpi"),
    };
    let result = run(cli);
    if let Some(table) = engine::vulkan::profile::report() {
        eprintln!("sharpi: device time per shader (SHARPI_VK_PROFILE)\n{table}");
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // A closed pipe (`sharpi inspect m | head`) is not an error.
        Err(e) if e.is_broken_pipe() => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sharpi: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Opens a GGUF file; a parse error is prefixed with the path.
fn open_model(path: &Path) -> Result<GgufFile, CliError> {
    GgufFile::open(path).map_err(|e| {
        if e.is_io() {
            CliError::Gguf(e)
        } else {
            CliError::Malformed {
                path: path.display().to_string(),
                source: e,
            }
        }
    })
}

/// A rayon pool of `threads` threads (all cores when `None`).
fn thread_pool(threads: Option<usize>) -> Result<rayon::ThreadPool, CliError> {
    let mut b = rayon::ThreadPoolBuilder::new();
    if let Some(n) = threads {
        b = b.num_threads(n);
    }
    Ok(b.build()?)
}
