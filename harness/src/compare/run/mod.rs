//! Running the comparison: every selected model, prompt and path.
//!
//! By phase: [`run`] opens the reference data and takes each model in
//! turn; `model.rs` opens one model, makes the checks that need no forward
//! pass (`text_checks.rs`: chat template, end-of-generation tokens,
//! tokenizer) and runs each prompt on each path; `engine_checks.rs` runs
//! the engine on one prompt and path and holds its outputs against
//! llama.cpp's and the first path's.

mod corpus_item;
mod engine_checks;
mod model;
mod progress;
mod provenance;
mod text_checks;

use std::collections::HashSet;
use std::path::{Path as FsPath, PathBuf};
use std::time::Instant;

use engine::model::ModelOptions;
use engine::vulkan::DeviceSelector;

use super::matrix::{self, Costs, Item, Shard};
use super::profile::Profile;
use super::report::{Provenance, Report};
use super::thresholds::Thresholds;
use super::{Path, Paths};
use crate::reference::writer::{sha256_file, sha256_hex};
use crate::reference::ReferenceData;
use progress::Progress;

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
    /// Only the representative selection of the items ([`matrix::quick`]).
    pub quick: bool,
    /// Run only this slice of the items ([`matrix`]).
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

    /// What selects and judges, in one line ([`Provenance::settings`]).
    fn settings(&self) -> String {
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

/// The commit of the repository at `repo` (`+dirty` when tracked files
/// differ from it), or `unknown`.
fn git_commit(repo: &FsPath) -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(repo)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match git(&["rev-parse", "HEAD"]) {
        Some(c) if !c.is_empty() => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{c}+dirty")
            } else {
                c
            }
        }
        _ => "unknown".into(),
    }
}

/// The items `opts` selects (its shard's, if any), in run order, each with
/// its estimated seconds: what [`run`] would run, without running it.
pub fn selection(opts: &Options) -> Result<Vec<(Item, f64)>, String> {
    let data =
        ReferenceData::open_models(&opts.reference_dir, &opts.models).map_err(|e| e.to_string())?;
    let (_, items, cost, picked) = select(opts, &data);
    Ok(picked
        .iter()
        .map(|&i| (items[i].clone(), cost[i]))
        .collect())
}

/// The run's items and their estimated costs (after `--quick`), and the
/// indices of those this run takes (its shard's).
fn select(
    opts: &Options,
    data: &ReferenceData,
) -> (Vec<matrix::ModelPlan>, Vec<Item>, Vec<f64>, Vec<usize>) {
    let (plans, mut items) = matrix::plan(opts, data);
    let mut cost = opts.costs.estimate(&items);
    if opts.quick {
        let variants = kv_variants(data);
        let keep = matrix::quick(&items, &cost, &|m| variants.iter().any(|v| v == m));
        items = keep.iter().map(|&i| items[i].clone()).collect();
        cost = keep.iter().map(|&i| cost[i]).collect();
    }
    let picked: Vec<usize> = match opts.shard {
        Some(s) => s.pick(&items, &cost),
        None => (0..items.len()).collect(),
    };
    (plans, items, cost, picked)
}

/// The models that are another capture of a GGUF listed before them in the
/// manifest, with another KV cache type (`...-kv-f16`).
fn kv_variants(data: &ReferenceData) -> Vec<String> {
    let models = &data.manifest().models;
    models
        .iter()
        .enumerate()
        .filter(|(i, m)| {
            models[..*i]
                .iter()
                .any(|o| o.file == m.file && o.kv_type() != m.kv_type())
        })
        .map(|(_, m)| m.id.clone())
        .collect()
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
    if let Some(unknown) = opts.prompts.iter().find(|id| {
        !manifest.prompts.iter().any(|p| &p.id == *id)
            && !manifest
                .models
                .iter()
                .any(|m| data.corpus_item(&m.id).as_ref() == Some(*id))
    }) {
        let known: Vec<&str> = manifest.prompts.iter().map(|p| p.id.as_str()).collect();
        return Err(format!(
            "no prompt {unknown:?} in the reference data; known: {}",
            known.join(", ")
        ));
    }
    let (plans, items, cost, picked) = select(opts, &data);
    let selected: HashSet<Item> = picked.iter().map(|&i| items[i].clone()).collect();
    let mut progress = Progress::new(
        picked
            .iter()
            .map(|&i| (items[i].clone(), cost[i]))
            .collect(),
        opts.progress,
    );
    let thresholds_json = serde_json::to_vec(&opts.thresholds.models).expect("serializes");
    let mut report = Report {
        reference_dir: opts.reference_dir.display().to_string(),
        thresholds: opts.thresholds.source.clone(),
        paths: opts.paths.clone(),
        provenance: Provenance {
            commit: git_commit(&opts.repo),
            reference_sha256: sha256_file(&opts.reference_dir.join("manifest.json"))
                .map_err(|e| e.to_string())?,
            thresholds_sha256: sha256_hex(&thresholds_json),
            settings: opts.settings(),
            ..Provenance::default()
        },
        shard: opts.shard,
        items: items.iter().map(Item::key).collect(),
        ran: picked.iter().map(|&i| items[i].key()).collect(),
        models: Vec::new(),
        baseline: None,
        seconds: 0.0,
    };
    for (entry, plan) in manifest.models.iter().filter_map(|e| {
        let plan = plans.iter().find(|p| p.id == e.id)?;
        Some((e, plan))
    }) {
        if !selected.iter().any(|it| it.model == entry.id) {
            continue;
        }
        let run = model::ModelRun {
            opts,
            data: &data,
            entry,
            paths: &plan.paths,
            selected: &selected,
        };
        report.models.push(run.report(&mut progress));
    }
    report.seconds = start.elapsed().as_secs_f64();
    provenance::complete(&mut report, opts, manifest);
    Ok(report)
}
