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
use std::path::Path as FsPath;
use std::time::Instant;

use crate::compare::plan::matrix::{self, Item};
use crate::compare::plan::Options;
use crate::compare::report::{Provenance, Report};
use crate::reference::writer::{sha256_file, sha256_hex};
use crate::reference::ReferenceData;
use progress::Progress;

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
    let (plans, mut items) = crate::compare::plan::plan(opts, data);
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
