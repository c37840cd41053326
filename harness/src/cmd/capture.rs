//! `harness capture`: llama.cpp's outputs for reference-data/'s models, or
//! for any model and prompts into a new directory (`--model PATH --out
//! DIR`, [`harness::reference::adhoc`]).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

#[derive(Args)]
pub struct CaptureArgs {
    /// Capture only these model ids of reference-data/models.json.
    #[arg(long, value_delimiter = ',', conflicts_with = "model")]
    models: Vec<String>,
    /// Capture this GGUF file (any model the engine reads) on the prompts
    /// of --prompts and -p into a new, self-contained directory (--out,
    /// required), without touching the repository.
    #[arg(long, value_name = "PATH", requires = "out")]
    model: Option<PathBuf>,
    /// With --model: a prompts file, one JSON object per line:
    /// {"id": ..., "text": ...} or {"id": ..., "messages": [...],
    /// "add_generation_prompt": true} (docs/harness.md).
    #[arg(long, value_name = "FILE.jsonl", requires = "model")]
    prompts: Option<PathBuf>,
    /// With --model: a prompt's text (repeatable; ids p1, p2, ... after the
    /// file's).
    #[arg(short = 'p', long = "prompt", value_name = "TEXT", requires = "model")]
    prompt_texts: Vec<String>,
    /// With --model: the -p texts are chat prompts (one user message each,
    /// through the model's chat template), and the template's renders of
    /// the conversations are captured for the chat-template check.
    #[arg(long, requires = "model")]
    chat: bool,
    /// With --model: the model's id in the directory (default: from the
    /// file name).
    #[arg(long, requires = "model")]
    id: Option<String>,
    /// With --model: greedy continuation length.
    #[arg(long, default_value_t = 32, requires = "model")]
    greedy_steps: usize,
    /// With --model: llama.cpp threads.
    #[arg(long, default_value_t = 2, requires = "model")]
    threads: u32,
    /// Output directory; another directory than <repo>/reference-data gets a
    /// copy of the inputs as well. With --model: a new or empty directory.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Repository root (model paths and inputs are relative to it;
    /// default: the nearest directory from the current one up holding
    /// ci/thresholds.toml and reference-data/).
    #[arg(long, value_name = "DIR")]
    repo: Option<PathBuf>,
    /// Let llama.cpp log to stderr.
    #[arg(long)]
    verbose: bool,
    /// Print every node of each model's compute graph and capture nothing.
    #[arg(long, conflicts_with = "model")]
    list_nodes: bool,
}

/// The request of `capture --model`: the prompts of --prompts, then -p's.
fn adhoc_request(
    args: &CaptureArgs,
    model: &std::path::Path,
) -> Result<harness::reference::adhoc::AdhocRequest, String> {
    use harness::reference::adhoc;
    let mut prompts = match &args.prompts {
        Some(f) => {
            let text = std::fs::read_to_string(f)
                .map_err(|e| format!("--prompts {}: {e}", f.display()))?;
            adhoc::parse_prompts_file(&text, &f.display().to_string())?
        }
        None => Vec::new(),
    };
    let before = prompts.len();
    prompts.extend(adhoc::command_line_prompts(
        &args.prompt_texts,
        args.chat,
        before,
    ));
    if args.greedy_steps == 0 || args.threads == 0 {
        return Err("--greedy-steps and --threads must be positive".into());
    }
    Ok(adhoc::AdhocRequest {
        model: model.to_path_buf(),
        id: args.id.clone(),
        prompts,
        out: args.out.clone().expect("clap: --model requires --out"),
        threads: args.threads,
        top_k: 64,
        greedy_steps: args.greedy_steps,
    })
}

#[cfg(feature = "llama-cpp")]
pub fn capture(args: CaptureArgs) -> ExitCode {
    let repo = match super::repo_root(args.repo.as_deref()) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("harness capture: {e}");
            return ExitCode::from(2);
        }
    };
    let result = match &args.model {
        Some(model) => adhoc_request(&args, model)
            .map_err(harness::capture::CaptureError)
            .and_then(|req| harness::capture::run_adhoc(&req, args.chat, &repo, args.verbose)),
        None => harness::capture::run(&harness::capture::Options {
            input: repo.join("reference-data"),
            out: args
                .out
                .clone()
                .unwrap_or_else(|| repo.join("reference-data")),
            repo: repo.clone(),
            models: args.models.clone(),
            verbose: args.verbose,
            list_nodes: args.list_nodes,
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("harness capture: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(not(feature = "llama-cpp"))]
pub fn capture(args: CaptureArgs) -> ExitCode {
    // The arguments are still checked, so that a bad one is named first.
    if let Some(model) = &args.model {
        if let Err(e) = adhoc_request(&args, model) {
            eprintln!("harness capture: {e}");
            return ExitCode::from(2);
        }
    }
    super::feature_missing("capture", "llama-cpp")
}

#[derive(Args)]
pub struct CaptureSamplingArgs {
    /// The reference directory whose captures to add llama.cpp's sampler
    /// chain to (default: the repository's reference-data/).
    #[arg(long, value_name = "DIR")]
    reference: Option<PathBuf>,
    /// Only these model ids (default: every model of DIR/models.json).
    #[arg(long, value_delimiter = ',')]
    models: Vec<String>,
    /// Let llama.cpp log to stderr.
    #[arg(long)]
    verbose: bool,
}

#[cfg(feature = "llama-cpp")]
pub fn capture_sampling(args: CaptureSamplingArgs) -> ExitCode {
    let reference = match args.reference.map_or_else(
        || super::repo_root(None).map(|r| r.join("reference-data")),
        Ok,
    ) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("harness capture-sampling: {e}");
            return ExitCode::from(2);
        }
    };
    match harness::capture::run_sampling(&reference, &args.models, args.verbose) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("harness capture-sampling: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(not(feature = "llama-cpp"))]
pub fn capture_sampling(args: CaptureSamplingArgs) -> ExitCode {
    let _ = (args.reference, args.models, args.verbose);
    super::feature_missing("capture-sampling", "llama-cpp")
}
