//! [`CliError`]: what ends a `sharpi` run, and how a parse error is
//! printed.

use engine::chat::ChatError;
use engine::gguf::{GgufError, WriteError};
use engine::model::ModelError;
use engine::quantize::QuantizeError;
use engine::sampler::SamplerError;
use engine::session::SessionError;
use engine::synth::SynthError;
use engine::tokenizer::TokenizerError;
use std::io;

/// An error that ends a `sharpi` run: printed as one line, exit code 1.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The file could not be read at all (the message names the path).
    #[error("{0}")]
    Gguf(#[from] GgufError),
    /// The file was read and is malformed.
    #[error("{path}: {source}")]
    Malformed { path: String, source: GgufError },
    #[error("writing output: {0}")]
    Output(#[from] io::Error),
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    #[error("{0}")]
    Quantize(#[from] QuantizeError),
    #[error("{0}")]
    Synth(#[from] SynthError),
    #[error("{0}")]
    Write(#[from] WriteError),
    #[error("thread pool: {0}")]
    ThreadPool(#[from] rayon::ThreadPoolBuildError),
    /// The file is a GGUF that sharpi cannot run.
    #[error("{path}: {source}")]
    Model { path: String, source: ModelError },
    #[error("tokenizer: {0}")]
    Tokenizer(#[from] TokenizerError),
    #[error("{0}")]
    Chat(#[from] ChatError),
    #[error("{0}")]
    Session(#[from] SessionError),
    #[error("{0}")]
    Sampler(#[from] SamplerError),
    /// Arguments that parse but do not fit together.
    #[error("{0}")]
    Usage(String),
    /// `--list-devices` found no Vulkan loader, or the loader failed.
    #[error("listing Vulkan devices: {0}")]
    ListDevices(engine::vulkan::VkError),
}

impl CliError {
    /// Whether this is a write to a closed pipe (`sharpi inspect m | head`):
    /// an `io::Error` of kind `BrokenPipe` anywhere in the source chain, or
    /// inside a serde_json error (whose `source()` skips its `io::Error`).
    /// The reader has all it wanted, so it is not a failure.
    pub fn is_broken_pipe(&self) -> bool {
        let mut next: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(e) = next {
            let kind = e
                .downcast_ref::<io::Error>()
                .map(io::Error::kind)
                .or_else(|| e.downcast_ref::<serde_json::Error>()?.io_error_kind());
            if kind == Some(io::ErrorKind::BrokenPipe) {
                return true;
            }
            next = e.source();
        }
        false
    }
}

/// Prints a command-line parse error as one line (help and version requests
/// print normally) and returns the exit code: 0 for help/version, 2 otherwise
/// (a missing subcommand prints the help, still with 2).
pub fn exit_for_parse_error(e: clap::Error, program: &str) -> std::process::ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            // Printing help can only fail on a closed stdout; nothing to add then.
            let _ = e.print();
            std::process::ExitCode::SUCCESS
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            std::process::ExitCode::from(2)
        }
        _ => {
            let rendered = e.render().to_string();
            let first = rendered
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("invalid arguments");
            let msg = first.trim_start_matches("error: ");
            eprintln!("{program}: error: {msg} (try --help)");
            std::process::ExitCode::from(2)
        }
    }
}
