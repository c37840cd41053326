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

#![deny(clippy::undocumented_unsafe_blocks)]

mod llama;
mod taps;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

use crate::metrics::max_abs_diff;
use crate::reference::arrays::{PromptArrays, Tap, TopKTable};
use crate::reference::format::elementwise_op;
use crate::reference::format::{
    CaptureConfig, GreedyStop, GreedySummary, LlamaCppInfo, ModelCapture, ModelEntry, ModelsFile,
    Positions, PromptCapture, PromptKind, RunSettings, TapInfo, TokenizedText, TokenizerCapture,
    FORMAT, FORMAT_VERSION,
};
use crate::reference::inputs::{
    self, PromptSource, CHAT_DIR, MODELS_FILE, PROMPTS_DIR, TOKENIZER_CORPUS,
};
use crate::reference::writer::{self, sha256_file, sha256_hex};
use crate::reference::ReferenceError;
use engine::gguf::GgufFile;
use llama::{Backend, Context, ContextSettings, Model};
use taps::{NodeSeen, TapPlan, TapRecorder};

/// What `harness capture` was asked to do.
#[derive(Clone, Debug)]
pub struct Options {
    /// Repository root: model paths in models.json are relative to it and
    /// the inputs are read from its reference-data/.
    pub repo: PathBuf,
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

/// Tokens of the long graph probe: more than 256, so that llama.cpp's KV
/// length (padded to 256 cells) differs from the short probe's.
const PROBE_LONG: usize = 257;

pub fn run(opts: &Options) -> Result<(), CaptureError> {
    let started = Instant::now();
    let input = opts.repo.join("reference-data");
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
        for id in m.tap_prompts.iter().flatten() {
            if !prompts.iter().any(|p| &p.id == id) {
                return err(format!(
                    "model {}: tap_prompts names {id:?}, which is not a prompt",
                    m.id
                ));
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
    for entry in selected {
        capture_model(&backend, &info, &models_file, entry, &prompts, opts)?;
    }
    if opts.list_nodes {
        return Ok(());
    }
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

fn capture_model(
    backend: &Backend,
    info: &LlamaCppInfo,
    models_file: &ModelsFile,
    entry: &ModelEntry,
    prompts: &[PromptSource],
    opts: &Options,
) -> Result<(), CaptureError> {
    let started = Instant::now();
    let cfg = &models_file.capture;
    let input = opts.repo.join("reference-data");
    let path = opts.repo.join(&entry.file);
    let id = &entry.id;

    let sha = sha256_file(&path)?;
    if sha != entry.sha256 {
        return err(format!(
            "{}: SHA-256 {sha}, models.json says {}",
            path.display(),
            entry.sha256
        ));
    }
    let gguf =
        GgufFile::open(&path).map_err(|e| CaptureError(format!("{}: {e}", path.display())))?;
    let arch = gguf
        .architecture()
        .map_err(|e| CaptureError(format!("{}: {e}", path.display())))?
        .to_string();
    if arch != entry.architecture {
        return err(format!(
            "{}: architecture {arch}, models.json says {}",
            path.display(),
            entry.architecture
        ));
    }
    let template = gguf
        .get_str_opt("tokenizer.chat_template")
        .map_err(|e| CaptureError(format!("{}: {e}", path.display())))?
        .map(str::to_string);
    if template.is_some() != entry.has_chat_template {
        return err(format!(
            "{}: has_chat_template is {} in models.json, but the file {} one",
            path.display(),
            entry.has_chat_template,
            if template.is_some() { "has" } else { "has no" }
        ));
    }
    drop(gguf);

    let model = Model::load(backend, &path)?;
    if model.chat_template() != template {
        return err(format!(
            "{}: llama.cpp reads another chat template than the GGUF reader",
            path.display()
        ));
    }
    let facts = model.facts();
    let vocab = model.vocab_facts();
    let runs = prepare_prompts(&model, entry, template.as_deref(), prompts, &input)?;

    let max_t = runs.iter().map(|r| r.tokens.len()).max().unwrap_or(1);
    let n_batch = round_up(max_t.max(PROBE_LONG), 256) as u32;
    // The long probe needs room for a KV length of 512 cells.
    let n_ctx = round_up((max_t + cfg.greedy_steps).max(512), 256) as u32;
    let ctx_settings = ContextSettings {
        n_ctx,
        n_batch,
        threads: cfg.threads,
    };

    let mut probe_tokens: Vec<i32> = runs.iter().flat_map(|r| r.tokens.iter().copied()).collect();
    if probe_tokens.is_empty() {
        return err("no prompt produced any token");
    }
    while probe_tokens.len() < PROBE_LONG {
        probe_tokens.extend_from_within(..);
    }
    probe_tokens.truncate(PROBE_LONG);

    if opts.list_nodes {
        let mut rec = TapRecorder::shapes(true);
        let mut ctx = Context::new(&model, ctx_settings, Some(&mut rec))?;
        decode(&mut ctx, &probe_tokens[..2], 0)?;
        drop(ctx);
        println!(
            "{id} ({arch}): {} graph nodes with 2 tokens",
            rec.seen.len()
        );
        for n in &rec.seen {
            println!("  {:<40} {:<12} {:<5} {:?}", n.key, n.op, n.ggml_type, n.ne);
        }
        return Ok(());
    }

    let bar = ProgressBar::new((runs.len() * (2 + cfg.greedy_steps) + 2) as u64);
    bar.set_style(
        ProgressStyle::with_template("{prefix:<28} [{bar:30}] {pos}/{len} {msg} ({elapsed})")
            .expect("static template")
            .progress_chars("=> "),
    );
    bar.set_prefix(id.clone());
    bar.set_message("graph probe");
    let catalog = probe_graph(&model, ctx_settings, &probe_tokens)?;
    let layers_missing: Vec<u32> = (0..facts.n_layer)
        .filter(|l| !catalog.iter().any(|t| t.layer == Some(*l)))
        .collect();
    if !layers_missing.is_empty() {
        return err(format!(
            "{id}: no named graph tensor for layers {layers_missing:?}"
        ));
    }
    bar.inc(1);

    let tmp = opts.out.join(format!(".{id}.tmp"));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(|e| ReferenceError::io(&tmp, e))?;
    }
    std::fs::create_dir_all(&tmp).map_err(|e| ReferenceError::io(&tmp, e))?;

    let mut captures = Vec::new();
    for run in &runs {
        bar.set_message(run.source.id.clone());
        let all_positions = run.source.id == cfg.all_positions_prompt;
        let record_taps = entry
            .tap_prompts
            .as_ref()
            .is_none_or(|ids| ids.contains(&run.source.id));
        let (arrays, summary) = capture_prompt(
            &model,
            ctx_settings,
            cfg,
            run,
            &catalog,
            all_positions,
            record_taps,
            &bar,
        )?;
        let rel = format!("{id}/{}.safetensors", run.source.id);
        writer::write_file(
            &tmp.join(format!("{}.safetensors", run.source.id)),
            &arrays.to_safetensors()?,
        )?;
        captures.push(PromptCapture {
            file: rel,
            ..summary
        });
    }

    if let Some(min) = entry.min_first_token_margin {
        let low: Vec<String> = captures
            .iter()
            .filter(|p| f64::from(p.first_token_margin) < min)
            .map(|p| format!("{} {:.3}", p.id, p.first_token_margin))
            .collect();
        if !low.is_empty() {
            bar.abandon();
            return err(format!(
                "{id}: first-token top-1/top-2 logit margin below the required {min} on {} of {} prompts: {} (the model's logits are too flat to compare greedy continuations)",
                low.len(),
                captures.len(),
                low.join(", ")
            ));
        }
    }

    bar.set_message("tokenizer corpus");
    let tokenizer = tokenize_corpus(&model, id, &input)?;
    writer::write_file(&tmp.join("tokenizer.json"), &writer::json_bytes(&tokenizer))?;
    bar.inc(1);

    let capture = ModelCapture {
        format: FORMAT.to_string(),
        format_version: FORMAT_VERSION,
        model: entry.clone(),
        llama_cpp: info.clone(),
        settings: RunSettings {
            threads: cfg.threads,
            n_ctx,
            n_batch,
            n_ubatch: n_batch,
            flash_attn: "disabled".into(),
            type_k: "f32".into(),
            type_v: "f32".into(),
            swa_full: true,
            weight_repack: false,
            top_k: cfg.top_k,
            greedy_steps: cfg.greedy_steps,
            greedy:
                "argmax of the logits, lowest id on ties; stops after an end-of-generation token"
                    .into(),
        },
        facts,
        vocab,
        tokenizer: format!("{id}/tokenizer.json"),
        taps: catalog,
        prompts: captures,
    };
    writer::write_file(&tmp.join("capture.json"), &writer::json_bytes(&capture))?;

    let dest = opts.out.join(id);
    if dest.exists() {
        std::fs::remove_dir_all(&dest).map_err(|e| ReferenceError::io(&dest, e))?;
    }
    std::fs::rename(&tmp, &dest).map_err(|e| ReferenceError::io(&dest, e))?;
    bar.finish_and_clear();
    let bytes: u64 = std::fs::read_dir(&dest)
        .map_err(|e| ReferenceError::io(&dest, e))?
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum();
    let margins = capture.prompts.iter().map(|p| p.first_token_margin);
    eprintln!(
        "capture: {id}: {} prompts, {} named graph tensors ({} unweighted norms not stored, {} rebuilt from operands), first-token margin {:.3}..{:.3}, {:.2} MiB, {:.0} s",
        capture.prompts.len(),
        capture.taps.len(),
        capture.taps.iter().filter(|t| !t.is_recorded()).count(),
        capture.taps.iter().filter(|t| t.derived_from.is_some()).count(),
        margins.clone().fold(f32::INFINITY, f32::min),
        margins.fold(f32::NEG_INFINITY, f32::max),
        bytes as f64 / (1024.0 * 1024.0),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

/// Reads and tokenizes every prompt that applies to the model.
fn prepare_prompts(
    model: &Model,
    entry: &ModelEntry,
    template: Option<&str>,
    prompts: &[PromptSource],
    input: &Path,
) -> Result<Vec<PromptRun>, CaptureError> {
    let vocab = model.vocab_facts();
    let renders = match template {
        Some(t) if prompts.iter().any(|p| p.kind == PromptKind::Chat) => {
            let r = inputs::read_chat_renders(input, &entry.id).map_err(|e| {
                CaptureError(format!(
                    "{e} (run scripts/render-chat-templates to render the chat prompts)"
                ))
            })?;
            if r.template_sha256 != sha256_hex(t.as_bytes()) {
                return err(format!(
                    "{}: rendered from another template than {}'s; run scripts/render-chat-templates",
                    inputs::chat_renders_path(&entry.id),
                    entry.id
                ));
            }
            Some(r)
        }
        _ => None,
    };
    let mut runs = Vec::new();
    for p in prompts {
        let text = match p.kind {
            PromptKind::Text => inputs::read_text(input, &p.file)?,
            PromptKind::Chat => {
                let Some(renders) = &renders else { continue };
                let file = inputs::read_chat_prompt(input, &p.file)?;
                let r = renders
                    .prompts
                    .iter()
                    .find(|r| r.id == p.id)
                    .ok_or_else(|| {
                        CaptureError(format!(
                            "{} has no render of chat prompt {}; run scripts/render-chat-templates",
                            inputs::chat_renders_path(&entry.id),
                            p.id
                        ))
                    })?;
                if r.add_generation_prompt != file.add_generation_prompt {
                    return err(format!(
                        "render of {} is stale; run scripts/render-chat-templates",
                        p.id
                    ));
                }
                r.text.clone()
            }
        };
        let parse_special = p.kind == PromptKind::Chat;
        let mut add_special = true;
        let mut tokens = model.tokenize(&text, add_special, parse_special)?;
        // A template that writes the BOS token itself would get a second one.
        if parse_special
            && vocab.add_bos
            && tokens.len() >= 2
            && tokens[0] == vocab.bos
            && tokens[1] == vocab.bos
        {
            add_special = false;
            tokens = model.tokenize(&text, add_special, parse_special)?;
        }
        if tokens.is_empty() {
            return err(format!("prompt {} gives no tokens", p.id));
        }
        runs.push(PromptRun {
            source: p.clone(),
            text,
            add_special,
            parse_special,
            tokens,
        });
    }
    Ok(runs)
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

/// Learns the named graph tensors and their token and KV dimensions from
/// three decodes that read no data: 2 tokens, then 1 more in the same
/// context, then 257 tokens in a fresh one (KV length 512 instead of 256).
fn probe_graph(
    model: &Model,
    s: ContextSettings,
    tokens: &[i32],
) -> Result<Vec<TapInfo>, CaptureError> {
    let mut rec = TapRecorder::shapes(false);
    let mut ctx = Context::new(model, s, Some(&mut rec))?;
    decode(&mut ctx, &tokens[..2], 0)?;
    let two = std::mem::take(&mut ctx.recorder().expect("attached").seen);
    decode(&mut ctx, &tokens[2..3], 2)?;
    let one = std::mem::take(&mut ctx.recorder().expect("attached").seen);
    drop(ctx);
    let mut ctx = Context::new(model, s, Some(&mut rec))?;
    decode(&mut ctx, tokens, 0)?;
    let long = std::mem::take(&mut ctx.recorder().expect("attached").seen);
    drop(ctx);
    catalog_from_probes(&two, &one, &long, tokens.len(), model.n_vocab())
}

/// Builds the tap catalog: the same keys, ops and types, in the same order,
/// in the three probes; the token dimension is the one that is 2, 1 and
/// `long_tokens`; the KV dimension the other one that changes.
fn catalog_from_probes(
    two: &[NodeSeen],
    one: &[NodeSeen],
    long: &[NodeSeen],
    long_tokens: usize,
    n_vocab: usize,
) -> Result<Vec<TapInfo>, CaptureError> {
    if two.is_empty() {
        return err("the graph has no named tensors");
    }
    for (what, other) in [("1-token", one), ("long", long)] {
        if let Some(i) = (0..two.len().max(other.len())).find(|&i| {
            let (a, b) = (two.get(i), other.get(i));
            a.map(|n| (&n.key, &n.op, &n.ggml_type)) != b.map(|n| (&n.key, &n.op, &n.ggml_type))
        }) {
            return err(format!(
                "the graph changes with the batch: node {i} is {:?} with 2 tokens, {:?} in the {what} probe",
                two.get(i).map(|n| (&n.key, &n.op)),
                other.get(i).map(|n| (&n.key, &n.op))
            ));
        }
    }
    let weighted = weighted_norms(two);
    for (what, other) in [("1-token", one), ("long", long)] {
        if weighted_norms(other) != weighted {
            return err(format!(
                "the graph changes with the batch: norms and their weighted taps differ in the {what} probe"
            ));
        }
    }
    let mut catalog = Vec::with_capacity(two.len());
    for (i, ((a, b), c)) in two.iter().zip(one).zip(long).enumerate() {
        let token: Vec<usize> = (0..4)
            .filter(|&d| a.ne[d] == 2 && b.ne[d] == 1 && c.ne[d] == long_tokens as u64)
            .collect();
        if token.len() > 1 {
            return err(format!("{}: several token dimensions {token:?}", a.key));
        }
        let token_dim = token.first().copied();
        let varying: Vec<usize> = (0..4)
            .filter(|&d| Some(d) != token_dim && (a.ne[d] != b.ne[d] || a.ne[d] != c.ne[d]))
            .collect();
        if varying.len() > 1 {
            return err(format!(
                "{}: shapes {:?} / {:?} / {:?} vary in more than one non-token dimension",
                a.key, a.ne, b.ne, c.ne
            ));
        }
        let (base, layer) = taps::split_layer(&a.name);
        catalog.push(TapInfo {
            key: a.key.clone(),
            name: a.name.clone(),
            base: base.to_string(),
            layer,
            op: a.op.clone(),
            occurrence: a.occurrence,
            ggml_type: a.ggml_type.clone(),
            token_dim,
            kv_dim: varying.first().copied(),
            vocab_rows: token_dim.is_some() && b.ne.iter().product::<u64>() == n_vocab as u64,
            ne_one_token: b.ne,
            weighted_tap: weighted.get(&i).map(|&j| two[j].key.clone()),
            derived_from: None,
        });
    }
    set_derived(&mut catalog, two);
    Ok(catalog)
}

/// Marks the taps that are an elementwise ADD, SUB, MUL or DIV of two
/// recorded taps of their own shape (`TapInfo::derived_from`): candidates
/// for not being stored, if the capture finds them exact.
fn set_derived(catalog: &mut [TapInfo], nodes: &[NodeSeen]) {
    let index: HashMap<usize, usize> = nodes.iter().enumerate().map(|(i, n)| (n.addr, i)).collect();
    for i in 0..catalog.len() {
        if elementwise_op(&catalog[i].op).is_none() || nodes[i].srcs.len() != 2 {
            continue;
        }
        let operands: Vec<usize> = nodes[i]
            .srcs
            .iter()
            .filter_map(|(addr, _)| index.get(addr).copied())
            .collect();
        let t = &catalog[i];
        let same = |o: &TapInfo| {
            o.is_recorded()
                && !o.vocab_rows
                && o.ne_one_token == t.ne_one_token
                && o.token_dim == t.token_dim
                && o.kv_dim == t.kv_dim
        };
        if let [a, b] = operands[..] {
            if a < i && b < i && same(&catalog[a]) && same(&catalog[b]) {
                catalog[i].derived_from = Some([catalog[a].key.clone(), catalog[b].key.clone()]);
            }
        }
    }
}

/// The unweighted norms among the named nodes and the named node that
/// weights each (index -> index): an RMS_NORM or NORM node whose output a
/// later named MUL multiplies by a leaf (a weight). llama.cpp's build_norm
/// names the first `norm` and the caller names the product (`attn_norm`,
/// `ffn_norm`, `Qcur_normed`, `result_norm`, ...).
fn weighted_norms(nodes: &[NodeSeen]) -> BTreeMap<usize, usize> {
    let mut out = BTreeMap::new();
    for (i, n) in nodes.iter().enumerate() {
        if n.op != "RMS_NORM" && n.op != "NORM" {
            continue;
        }
        let by_weight = nodes.iter().enumerate().skip(i + 1).find(|(_, m)| {
            m.op == "MUL"
                && m.srcs.len() == 2
                && m.srcs.iter().any(|s| s.0 == n.addr)
                && m.srcs.iter().any(|s| s.0 != n.addr && s.1 == "NONE")
        });
        if let Some((j, _)) = by_weight {
            out.insert(i, j);
        }
    }
    out
}

/// Index of the largest logit (the lowest such index on ties).
fn argmax(logits: &[f32]) -> i32 {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as i32
}

fn finite_or_err(logits: &[f32], what: &str) -> Result<(), CaptureError> {
    if logits.iter().any(|v| v.is_nan()) {
        return err(format!("NaN in the logits of {what}"));
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn capture_prompt(
    model: &Model,
    s: ContextSettings,
    cfg: &CaptureConfig,
    run: &PromptRun,
    catalog: &[TapInfo],
    all_positions: bool,
    record_taps: bool,
    bar: &ProgressBar,
) -> Result<(PromptArrays, PromptCapture), CaptureError> {
    let t = run.tokens.len();
    let pid = &run.source.id;

    // 1. The plain run: logits at every position, then greedy steps.
    let mut positions = TopKTable::new(cfg.top_k);
    let mut greedy = TopKTable::new(cfg.top_k);
    let mut greedy_tokens = Vec::new();
    let mut stop = GreedyStop::Length;
    let last_logits = {
        let mut ctx = Context::new(model, s, None)?;
        decode(&mut ctx, &run.tokens, 0)?;
        for i in 0..t {
            let l = ctx.logits(i)?;
            finite_or_err(l, &format!("{pid} position {i}"))?;
            positions.push_logits(l);
        }
        let last = ctx.logits(t - 1)?.to_vec();
        bar.inc(1);
        let mut cur = last.clone();
        for step in 0..cfg.greedy_steps {
            greedy.push_logits(&cur);
            let next = argmax(&cur);
            greedy_tokens.push(next);
            bar.inc(1);
            if model.is_eog(next) {
                stop = GreedyStop::EndOfGeneration;
                bar.inc((cfg.greedy_steps - step - 1) as u64);
                break;
            }
            if step + 1 == cfg.greedy_steps {
                break;
            }
            decode(&mut ctx, &[next], t + step)?;
            cur = ctx.logits(0)?.to_vec();
            finite_or_err(&cur, &format!("{pid} greedy step {}", step + 1))?;
        }
        last
    };

    // 2. The tap run: the same prompt, every named graph tensor recorded.
    let tapped = if record_taps {
        Some(capture_taps(
            model,
            s,
            run,
            catalog,
            all_positions,
            &last_logits,
        )?)
    } else {
        None
    };
    if let Some(x) = tapped.as_ref().filter(|x| !x.inexact.is_empty()) {
        bar.println(format!(
            "capture: warning: {pid}: {} taps are not exactly their op on their operands, stored: {}",
            x.inexact.len(),
            x.inexact.join(", ")
        ));
    }
    bar.inc(1);

    let first = positions.row(t - 1);
    let first_token_margin = match first.values {
        [a, b, ..] => a - b,
        _ => return err(format!("{pid}: top_k must be at least 2")),
    };
    let bytes = model.detokenize(&greedy_tokens);
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let text_hex = std::str::from_utf8(&bytes)
        .is_err()
        .then(|| writer::hex(&bytes));
    let summary = PromptCapture {
        id: pid.clone(),
        kind: run.source.kind,
        add_special: run.add_special,
        parse_special: run.parse_special,
        text_sha256: sha256_hex(run.text.as_bytes()),
        n_tokens: t,
        n_kv: tapped.as_ref().and_then(|x| x.n_kv),
        kv_len: tapped.as_ref().and_then(|x| x.n_kv.map(|_| t as u64)),
        file: String::new(),
        taps_recorded: tapped.is_some(),
        tap_positions: if all_positions {
            Positions::All
        } else {
            Positions::Last
        },
        greedy: GreedySummary {
            n_tokens: greedy_tokens.len(),
            stop,
            text,
            text_hex,
        },
        first_token_margin,
        tap_run_logits_max_abs_diff: tapped.as_ref().map_or(0.0, |x| x.logits_max_abs_diff),
        tap_aliases: tapped
            .as_ref()
            .map(|x| x.aliases.clone())
            .unwrap_or_default(),
    };
    let arrays = PromptArrays {
        tokens: run.tokens.clone(),
        positions,
        last_logits,
        greedy_tokens,
        greedy,
        taps: tapped.map(|x| x.taps).unwrap_or_default(),
    };
    Ok((arrays, summary))
}

/// What the tap run of one prompt produced.
struct Tapped {
    taps: BTreeMap<String, Tap>,
    aliases: BTreeMap<String, String>,
    inexact: Vec<String>,
    n_kv: Option<u64>,
    logits_max_abs_diff: f32,
}

/// Decodes the prompt again with every catalog tensor recorded; checks
/// shapes and types against the catalog, drops the KV padding cells (after
/// checking they are 0) and replaces taps equal to another array by
/// aliases.
fn capture_taps(
    model: &Model,
    s: ContextSettings,
    run: &PromptRun,
    catalog: &[TapInfo],
    all_positions: bool,
    last_logits: &[f32],
) -> Result<Tapped, CaptureError> {
    let t = run.tokens.len();
    let pid = &run.source.id;
    let plan: HashMap<String, TapPlan> = catalog
        .iter()
        .map(|ti| {
            let plan = TapPlan {
                token_dim: ti.token_dim,
                last_only: !all_positions || ti.vocab_rows,
            };
            (ti.key.clone(), plan)
        })
        .collect();
    let mut rec = TapRecorder::capture(plan);
    let tap_logits = {
        let mut ctx = Context::new(model, s, Some(&mut rec))?;
        decode(&mut ctx, &run.tokens, 0)?;
        ctx.logits(t - 1)?.to_vec()
    };
    let mut captured = std::mem::take(&mut rec.captured);
    let mut n_kv: Option<u64> = None;
    let mut taps: BTreeMap<String, Tap> = BTreeMap::new();
    let mut aliases = BTreeMap::new();
    // Stored taps by content, to alias later equal ones.
    let mut by_bits: HashMap<Vec<u32>, String> = HashMap::new();
    by_bits.insert(bits(last_logits), "logits/last".to_string());
    // Every recorded tap's values, the operands of derived taps.
    let mut values: HashMap<String, Tap> = HashMap::new();
    // Derived taps whose values are not their op on their operands' (stored).
    let mut inexact = Vec::new();
    for info in catalog {
        let (ty, mut tap) = captured.remove(&info.key).ok_or_else(|| {
            CaptureError(format!(
                "{pid}: graph tensor {} was not delivered",
                info.key
            ))
        })?;
        if ty != info.ggml_type {
            return err(format!(
                "{pid}: {} is {ty}, the probe saw {}",
                info.key, info.ggml_type
            ));
        }
        if let Some(d) = info.kv_dim {
            let nk = tap.ne[d] as u64;
            if *n_kv.get_or_insert(nk) != nk {
                return err(format!(
                    "{pid}: {} has KV length {nk}, other taps {n_kv:?}",
                    info.key
                ));
            }
            if tap.ne[d] < t {
                return err(format!(
                    "{pid}: {} has KV length {nk} < {t} tokens",
                    info.key
                ));
            }
            let pad = tap.narrow(d, t, tap.ne[d] - t);
            if let Some(v) = pad.data.iter().find(|v| **v != 0.0) {
                return err(format!(
                    "{pid}: {}: a KV padding cell holds {v}, not 0",
                    info.key
                ));
            }
            tap = tap.narrow(d, 0, t);
        }
        let mut expected = info.ne_one_token.map(|n| n as usize);
        if let Some(d) = info.token_dim {
            expected[d] = if all_positions && !info.vocab_rows {
                t
            } else {
                1
            };
        }
        if let Some(d) = info.kv_dim {
            expected[d] = t;
        }
        if tap.ne != expected {
            return err(format!(
                "{pid}: {} has shape {:?}, expected {expected:?}",
                info.key, tap.ne
            ));
        }
        if !info.is_recorded() {
            // Recorded by its weighted tap (still read, so that the graph
            // is split at the same nodes whatever the catalog stores).
            continue;
        }
        if let Some([a, b]) = &info.derived_from {
            let f = elementwise_op(&info.op).expect("set_derived checked the op");
            let (a, b) = (&values[a], &values[b]);
            let exact = a.ne == tap.ne
                && b.ne == tap.ne
                && a.data
                    .iter()
                    .zip(&b.data)
                    .zip(&tap.data)
                    .all(|((x, y), z)| f(*x, *y).to_bits() == z.to_bits());
            if exact {
                values.insert(info.key.clone(), tap);
                continue;
            }
            inexact.push(info.key.clone());
        }
        values.insert(info.key.clone(), tap.clone());
        let key_bits = bits(&tap.data);
        match by_bits.get(&key_bits) {
            Some(target) => {
                aliases.insert(info.key.clone(), target.clone());
            }
            None => {
                by_bits.insert(key_bits, format!("tap/{}", info.key));
                taps.insert(info.key.clone(), tap);
            }
        }
    }
    if let Some(key) = captured.keys().next() {
        return err(format!("{pid}: unexpected graph tensor {key}"));
    }
    Ok(Tapped {
        taps,
        aliases,
        inexact,
        n_kv,
        logits_max_abs_diff: max_abs_diff(&tap_logits, last_logits) as f32,
    })
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn tokenize_corpus(
    model: &Model,
    id: &str,
    input: &Path,
) -> Result<TokenizerCapture, CaptureError> {
    let text = inputs::read_text(input, TOKENIZER_CORPUS)?;
    let both = |s: &str| -> Result<TokenizedText, CaptureError> {
        Ok(TokenizedText {
            plain: model.tokenize(s, true, false)?,
            special: model.tokenize(s, true, true)?,
        })
    };
    Ok(TokenizerCapture {
        format: FORMAT.to_string(),
        format_version: FORMAT_VERSION,
        model: id.to_string(),
        corpus: TOKENIZER_CORPUS.to_string(),
        corpus_sha256: sha256_hex(text.as_bytes()),
        add_special: true,
        whole: both(&text)?,
        lines: inputs::corpus_lines(&text)
            .into_iter()
            .map(both)
            .collect::<Result<_, _>>()?,
    })
}
