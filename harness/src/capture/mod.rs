//! `harness capture`: runs llama.cpp (CPU) on every model of
//! reference-data/models.json and every prompt of reference-data/prompts/
//! and writes what it computed into reference-data/ (format:
//! [`crate::reference`]).
//!
//! Per model: verify the GGUF's SHA-256, architecture and chat template
//! against models.json; probe the compute graph (three small decodes that
//! read no data) to learn which named tensors exist and which of their
//! dimensions run over tokens and over KV cells; then per prompt
//! 1. a plain decode of the whole prompt in one batch, logits at every
//!    position (top-k + log-sum-exp, and every logit of the last position),
//!    then a greedy continuation;
//! 2. a second decode of the prompt with cb_eval recording every named graph
//!    tensor (only the last position's row, except for the all-positions
//!    prompt). The logits of this run are compared with the first's.
//!
//! Then the tokenizer corpus, the model's capture.json and the manifest.
//!
//! The phases, one file each: `model.rs` checks one model and writes its
//! directory; `tokenize.rs` reads and tokenizes its prompts and the
//! tokenizer corpus; `probe.rs` learns the graph's named tensors (the tap
//! catalog); `prompt.rs` runs the two decodes of one prompt. `llama.rs`
//! wraps the llama.cpp C API and `taps.rs` records graph tensors.

#![deny(clippy::undocumented_unsafe_blocks)]

mod llama;
mod model;
mod probe;
mod prompt;
mod sampling;
mod taps;
mod tokenize;

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::reference::format::{ModelEntry, PromptKind};
use crate::reference::inputs::{self, PromptSource, CHAT_DIR, MODELS_FILE, PROMPTS_DIR};
use crate::reference::writer;
use crate::reference::ReferenceError;
use llama::{Backend, Context};

/// What `harness capture` was asked to do.
#[derive(Clone, Debug)]
pub struct Options {
    /// Repository root: model paths in models.json are relative to it
    /// (an absolute path stays as it is).
    pub repo: PathBuf,
    /// Where the inputs are read from (models.json, prompts/, chat/):
    /// normally `<repo>/reference-data`.
    pub input: PathBuf,
    /// Where to write (normally `<repo>/reference-data`). Another directory
    /// receives a copy of the inputs, so that it is a complete reference-data
    /// directory (used to check that two captures are identical).
    pub out: PathBuf,
    /// Model ids to capture; empty: every model of models.json.
    pub models: Vec<String>,
    /// Let llama.cpp log to stderr.
    pub verbose: bool,
    /// Print every node of each model's graph (named or not) and capture
    /// nothing.
    pub list_nodes: bool,
}

#[derive(Debug)]
pub struct CaptureError(pub String);

impl fmt::Display for CaptureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CaptureError {}

impl From<ReferenceError> for CaptureError {
    fn from(e: ReferenceError) -> Self {
        CaptureError(e.to_string())
    }
}

impl From<String> for CaptureError {
    fn from(e: String) -> Self {
        CaptureError(e)
    }
}

fn err<T>(msg: impl Into<String>) -> Result<T, CaptureError> {
    Err(CaptureError(msg.into()))
}

pub fn run(opts: &Options) -> Result<(), CaptureError> {
    let started = Instant::now();
    let input = opts.input.clone();
    let models_file = inputs::load_models_file(&input)?;
    let selected: Vec<&ModelEntry> = if opts.models.is_empty() {
        models_file.models.iter().collect()
    } else {
        opts.models
            .iter()
            .map(|id| {
                models_file
                    .models
                    .iter()
                    .find(|m| &m.id == id)
                    .ok_or_else(|| {
                        let known: Vec<&str> =
                            models_file.models.iter().map(|m| m.id.as_str()).collect();
                        CaptureError(format!(
                            "no model {id:?} in models.json (known: {})",
                            known.join(", ")
                        ))
                    })
            })
            .collect::<Result<_, _>>()?
    };
    let prompts = inputs::list_prompts(&input)?;
    let all_pos = &models_file.capture.all_positions_prompt;
    if !prompts
        .iter()
        .any(|p| &p.id == all_pos && p.kind == PromptKind::Text)
    {
        return err(format!(
            "all_positions_prompt {all_pos:?} is not a text prompt of prompts/"
        ));
    }

    for m in &selected {
        for (field, ids) in [("prompts", &m.prompts), ("tap_prompts", &m.tap_prompts)] {
            for id in ids.iter().flatten() {
                if !prompts.iter().any(|p| &p.id == id) {
                    return err(format!(
                        "model {}: {field} names {id:?}, which is not a prompt",
                        m.id
                    ));
                }
            }
        }
    }

    std::fs::create_dir_all(&opts.out).map_err(|e| ReferenceError::io(&opts.out, e))?;
    let same_dir = canonical(&opts.out)? == canonical(&input)?;
    if !same_dir {
        copy_inputs(&input, &opts.out)?;
    }

    let backend = Backend::init(opts.verbose);
    let info = backend.info();
    let ids: Vec<String> = selected.iter().map(|m| m.id.clone()).collect();
    for entry in selected {
        let own: Vec<PromptSource> = prompts
            .iter()
            .filter(|p| entry.prompts.as_ref().is_none_or(|ids| ids.contains(&p.id)))
            .cloned()
            .collect();
        model::capture_model(&backend, &info, &models_file, entry, &own, opts)?;
    }
    if opts.list_nodes {
        return Ok(());
    }
    let cases = sampling::capture_models(&opts.out, &ids, &info)?;
    eprintln!("capture: sampler chain, {cases} cases");
    let manifest = writer::write_manifest(&opts.out, &models_file)?;
    eprintln!(
        "capture: done in {:.0} s; {} holds {} files, {:.2} MiB (manifest.json not counted)",
        started.elapsed().as_secs_f64(),
        opts.out.display(),
        manifest.files.len(),
        manifest.total_bytes as f64 / (1024.0 * 1024.0)
    );
    Ok(())
}

/// `harness capture --model PATH --out DIR`: a self-contained reference
/// directory for any model the engine reads and any prompts
/// ([`crate::reference::adhoc`]): its inputs written into DIR, the chat
/// prompts rendered by `<repo>/scripts/render-chat-templates --data DIR`
/// (Jinja2, as for reference-data/) when there are any or `chat` asks for
/// the template's renders, then the capture as for reference-data/.
pub fn run_adhoc(
    req: &crate::reference::adhoc::AdhocRequest,
    chat: bool,
    repo: &Path,
    verbose: bool,
) -> Result<(), CaptureError> {
    let prepared = crate::reference::adhoc::prepare(req)?;
    if chat && !prepared.entry.has_chat_template {
        return err(format!(
            "--chat: {} has no chat template",
            req.model.display()
        ));
    }
    eprintln!(
        "capture: {} ({}, SHA-256 {}…) with {} prompts into {}",
        prepared.entry.id,
        prepared.entry.architecture,
        &prepared.entry.sha256[..12],
        req.prompts.len(),
        req.out.display()
    );
    if prepared.needs_renders || chat {
        let script = repo.join("scripts/render-chat-templates");
        let status = std::process::Command::new(&script)
            .arg("--data")
            .arg(&req.out)
            .status()
            .map_err(|e| CaptureError(format!("{}: {e}", script.display())))?;
        if !status.success() {
            return err(format!("{} failed ({status})", script.display()));
        }
    }
    run(&Options {
        repo: repo.to_path_buf(),
        input: req.out.clone(),
        out: req.out.clone(),
        models: Vec::new(),
        verbose,
        list_nodes: false,
    })
}

/// `harness capture-sampling`: llama.cpp's sampler chain on the last
/// logits already captured in `dir` (every model of its models.json, or
/// `models`), then the manifest. Needs no model file.
pub fn run_sampling(dir: &Path, models: &[String], verbose: bool) -> Result<(), CaptureError> {
    let models_file = inputs::load_models_file(dir)?;
    let ids: Vec<String> = models_file
        .models
        .iter()
        .map(|m| m.id.clone())
        .filter(|id| models.is_empty() || models.contains(id))
        .collect();
    if let Some(unknown) = models.iter().find(|m| !ids.contains(m)) {
        return err(format!("no model {unknown:?} in models.json"));
    }
    let backend = Backend::init(verbose);
    let cases = sampling::capture_models(dir, &ids, &backend.info())?;
    writer::write_manifest(dir, &models_file)?;
    eprintln!(
        "capture-sampling: {cases} cases ({} models) written under {}",
        ids.len(),
        dir.display()
    );
    Ok(())
}

fn canonical(p: &Path) -> Result<PathBuf, CaptureError> {
    Ok(p.canonicalize().map_err(|e| ReferenceError::io(p, e))?)
}

/// Copies models.json, prompts/ and chat/ from `from` to `to`.
fn copy_inputs(from: &Path, to: &Path) -> Result<(), CaptureError> {
    fn copy(from: &Path, to: &Path) -> Result<(), ReferenceError> {
        let meta = std::fs::metadata(from).map_err(|e| ReferenceError::io(from, e))?;
        if meta.is_dir() {
            std::fs::create_dir_all(to).map_err(|e| ReferenceError::io(to, e))?;
            for entry in std::fs::read_dir(from).map_err(|e| ReferenceError::io(from, e))? {
                let entry = entry.map_err(|e| ReferenceError::io(from, e))?;
                copy(&entry.path(), &to.join(entry.file_name()))?;
            }
            Ok(())
        } else {
            std::fs::copy(from, to)
                .map(|_| ())
                .map_err(|e| ReferenceError::io(from, e))
        }
    }
    for rel in [MODELS_FILE, PROMPTS_DIR, CHAT_DIR] {
        if from.join(rel).exists() {
            copy(&from.join(rel), &to.join(rel))?;
        }
    }
    Ok(())
}

/// One prompt ready to run on one model.
struct PromptRun {
    source: PromptSource,
    text: String,
    add_special: bool,
    parse_special: bool,
    tokens: Vec<i32>,
}

/// Decodes `tokens` at `pos0`; with a recorder attached, a fresh graph
/// record, and the recorder's error (if any) reported.
fn decode(ctx: &mut Context, tokens: &[i32], pos0: usize) -> Result<(), CaptureError> {
    if let Some(r) = ctx.recorder() {
        r.begin_graph();
    }
    let result = ctx.decode(tokens, pos0 as i32);
    if let Some(e) = ctx.recorder().and_then(|r| r.error.take()) {
        return err(format!("while recording graph tensors: {e}"));
    }
    Ok(result?)
}
