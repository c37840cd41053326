//! `sharpi`: the engine's command line, thin over the library.

use clap::{Parser, Subcommand};
use engine::cli::bench::BenchArgs;
use engine::cli::generate::GenerateArgs;
use engine::cli::perplexity::PerplexityArgs;
use engine::cli::synth::SynthArgs;
use engine::cli::tokenize::TokenizeArgs;
use engine::cli::{self, CliError};
use engine::quantize::FileType;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

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
        #[arg(long, value_parser = cli::generate::threads)]
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
        cli::list_devices::run(&mut out)?;
        out.flush()?;
        return Ok(());
    }
    let Some(command) = cli.command else {
        cli::generate::run(&cli.generate, &mut out)?;
        out.flush()?;
        return Ok(());
    };
    match command {
        Command::Run(args) => cli::generate::run(&args, &mut out)?,
        Command::Bench(args) => cli::bench::run(&args, &mut out)?,
        Command::Perplexity(args) => cli::perplexity::run(&args, &mut out)?,
        Command::Inspect { model, json } => cli::inspect::run(&model, json, &mut out)?,
        Command::Quantize {
            input,
            output,
            ftype,
            threads,
        } => cli::quantize::run(&input, &output, ftype, threads, &mut out)?,
        Command::Synth(args) => cli::synth::run(&args, &mut out)?,
        Command::Tokenize(args) => cli::tokenize::run(&args, &mut out)?,
    }
    out.flush()?;
    Ok(())
}

fn main() -> ExitCode {
    // llama-cli's flags: rewritten to sharpi's, or one line on what to use.
    let args = match cli::llama_flags::translate(std::env::args_os().collect()) {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("sharpi: error: {msg}");
            return ExitCode::from(2);
        }
    };
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => return cli::exit_for_parse_error(e, "sharpi"),
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
