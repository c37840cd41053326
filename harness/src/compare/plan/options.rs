//! What a comparison runs: its [`Options`] (the models, prompts and paths
//! selected, the limits and how to run them).

use std::path::{Path as FsPath, PathBuf};

use engine::model::ModelOptions;
use engine::vulkan::DeviceSelector;

use super::matrix::{Costs, Shard};
use crate::compare::checks::profile::Profile;
use crate::compare::checks::thresholds::Thresholds;
use crate::compare::{Path, Paths};

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
    /// Model files to run instead of those the reference data names, by
    /// id (`--model PATH`; the same bytes, checked by SHA-256).
    pub model_files: std::collections::BTreeMap<String, PathBuf>,
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
    /// Compare the tokenizer corpus, the chat-template renders and the
    /// sampler chain.
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
    /// The GPU paths' matrix kernel layout (`None`: the device's own;
    /// lavapipe's is the CPU one, so `Some(Gpu)` runs the kernels of a
    /// discrete GPU there: the fused decode matvecs and their merges).
    pub kernel_layout: Option<engine::vulkan::KernelLayout>,
    /// Only the representative selection of the items ([`super::matrix::quick`]).
    pub quick: bool,
    /// Run only this slice of the items ([`super::matrix`]).
    pub shard: Option<Shard>,
    /// Measured seconds per item: the shard balance and the progress ETA.
    pub costs: Costs,
    /// The CPU path's limits: exact where possible, or calibrated.
    pub profile: Profile,
}

impl Options {
    /// Everything, on the CPU, for the repository at `repo`.
    pub fn new(repo: &FsPath, thresholds: Thresholds) -> Options {
        Options {
            reference_dir: repo.join("reference-data"),
            repo: repo.to_path_buf(),
            models: Vec::new(),
            model_files: Default::default(),
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
            kernel_layout: None,
            quick: false,
            shard: None,
            costs: Costs::default(),
            profile: Profile::default(),
        }
    }

    /// What selects and judges, in one line ([`crate::compare::report::Provenance::settings`]).
    pub(crate) fn settings(&self) -> String {
        format!(
            "models={:?} prompts={:?} paths={} quick={} greedy_steps={} chunk={} corpus={} validation={} device={:?} threads={}",
            self.models,
            self.prompts,
            self.paths,
            self.quick,
            self.greedy_steps,
            self.chunk,
            self.corpus,
            self.validation,
            self.device,
            self.threads
        )
    }
}
