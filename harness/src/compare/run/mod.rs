//! Running the comparison: every selected model, prompt and path.
//!
//! By phase: [`run`] opens the reference data and takes each model in
//! turn; `model.rs` opens one model, makes the checks that need no forward
//! pass (`text_checks.rs`: chat template, end-of-generation tokens,
//! tokenizer) and runs each prompt on each path; `engine_checks.rs` runs
//! the engine on one prompt and path and holds its outputs against
//! llama.cpp's and the first path's.

mod engine_checks;
mod model;
mod text_checks;

use std::path::{Path as FsPath, PathBuf};
use std::time::Instant;

use engine::model::ModelOptions;
use engine::vulkan::DeviceSelector;

use super::report::Report;
use super::thresholds::Thresholds;
use super::{Path, Paths};
use crate::reference::ReferenceData;

/// Rows per forward pass by default. Each pass returns the logits of all
/// its rows (every position's next-token distribution is compared), so
/// this bounds the logits buffer: 128 × 262,144 × 4 bytes = 128 MiB for
/// Gemma.
pub const CHUNK: usize = 128;

/// What to compare.
#[derive(Clone, Debug)]
pub struct Options {
    /// The reference data (reference-data/).
    pub reference_dir: PathBuf,
    /// Model files are relative to it.
    pub repo: PathBuf,
    /// Model ids; empty: every captured model (unsupported architectures
    /// skipped). A model named here fails when it cannot be compared.
    pub models: Vec<String>,
    /// Prompt ids; empty: every captured prompt.
    pub prompts: Vec<String>,
    /// The paths per model, the first the reference of the others.
    pub paths: Paths,
    pub thresholds: Thresholds,
    /// Passed to the engine's model loader (tests edit the architecture
    /// table through it).
    pub model_options: ModelOptions,
    /// Greedy tokens compared at most (the capture has up to 32).
    pub greedy_steps: usize,
    /// Compare the tokenizer corpus and the chat-template renders.
    pub corpus: bool,
    /// CPU threads (0: one per core).
    pub threads: usize,
    /// Prompt rows per forward pass ([`CHUNK`]).
    pub chunk: usize,
    /// Check every reference file's size and SHA-256 first.
    pub verify_files: bool,
    /// A line on stderr per prompt.
    pub progress: bool,
    /// The Vulkan device of the GPU paths.
    pub device: DeviceSelector,
    /// Run the GPU paths with the Vulkan validation layer (synchronization
    /// validation on); any message fails the prompt.
    pub validation: bool,
}

impl Options {
    /// Everything, on the CPU, for the repository at `repo`.
    pub fn new(repo: &FsPath, thresholds: Thresholds) -> Options {
        Options {
            reference_dir: repo.join("reference-data"),
            repo: repo.to_path_buf(),
            models: Vec::new(),
            prompts: Vec::new(),
            paths: Paths::List(vec![Path::Cpu]),
            thresholds,
            model_options: ModelOptions::default(),
            greedy_steps: usize::MAX,
            corpus: true,
            threads: 0,
            chunk: CHUNK,
            verify_files: true,
            progress: false,
            device: DeviceSelector::Auto,
            validation: engine::vulkan::validation_layer_present(),
        }
    }
}

/// Runs the comparison. Errors are about the setup (unreadable reference
/// data, an unknown model id); everything about a model is in the report.
pub fn run(opts: &Options) -> Result<Report, String> {
    let start = Instant::now();
    let data =
        ReferenceData::open_models(&opts.reference_dir, &opts.models).map_err(|e| e.to_string())?;
    if opts.verify_files {
        data.verify_files_of(&opts.models)
            .map_err(|e| format!("reference data: {e}"))?;
    }
    let manifest = data.manifest();
    if let Some(unknown) = opts
        .models
        .iter()
        .find(|id| !manifest.models.iter().any(|m| &m.id == *id))
    {
        let known: Vec<&str> = manifest.models.iter().map(|m| m.id.as_str()).collect();
        return Err(format!(
            "no model {unknown:?} in {}; known: {}",
            opts.reference_dir.join("manifest.json").display(),
            known.join(", ")
        ));
    }
    if let Some(unknown) = opts
        .prompts
        .iter()
        .find(|id| !manifest.prompts.iter().any(|p| &p.id == *id))
    {
        let known: Vec<&str> = manifest.prompts.iter().map(|p| p.id.as_str()).collect();
        return Err(format!(
            "no prompt {unknown:?} in the reference data; known: {}",
            known.join(", ")
        ));
    }
    let mut report = Report {
        reference_dir: opts.reference_dir.display().to_string(),
        thresholds: opts.thresholds.source.clone(),
        paths: opts.paths.clone(),
        models: Vec::new(),
        seconds: 0.0,
    };
    for entry in &manifest.models {
        if !opts.models.is_empty() && !opts.models.contains(&entry.id) {
            continue;
        }
        report.models.push(model::run_model(opts, &data, entry));
    }
    report.seconds = start.elapsed().as_secs_f64();
    Ok(report)
}
