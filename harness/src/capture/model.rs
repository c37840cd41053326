//! One model: its file checked against models.json, the graph probed,
//! every prompt captured, the tokenizer corpus tokenized, and its
//! directory (capture.json, tokenizer.json, one safetensors file per
//! prompt) written in place of the old one.

use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

use super::llama::{Backend, Context, ContextSettings, Model};
use super::probe::probe_graph;
use super::prompt::capture_prompt;
use super::taps::TapRecorder;
use super::tokenize::{prepare_prompts, tokenize_corpus};
use super::{decode, err, CaptureError, Options};
use crate::reference::format::{
    KvTypeName, LlamaCppInfo, ModelCapture, ModelEntry, ModelsFile, PromptCapture, RunSettings,
    FORMAT, FORMAT_VERSION,
};
use crate::reference::inputs::PromptSource;
use crate::reference::writer::{self, sha256_file};
use crate::reference::ReferenceError;
use engine::gguf::GgufFile;

/// Tokens of the long graph probe: more than 256, so that llama.cpp's KV
/// length (padded to 256 cells) differs from the short probe's.
const PROBE_LONG: usize = 257;

pub(super) fn capture_model(
    backend: &Backend,
    info: &LlamaCppInfo,
    models_file: &ModelsFile,
    entry: &ModelEntry,
    prompts: &[PromptSource],
    opts: &Options,
) -> Result<(), CaptureError> {
    let started = Instant::now();
    let cfg = &models_file.capture;
    let input = &opts.input;
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
    let runs = prepare_prompts(&model, entry, template.as_deref(), prompts, input)?;

    let max_t = runs.iter().map(|r| r.tokens.len()).max().unwrap_or(1);
    let n_batch = round_up(max_t.max(PROBE_LONG), 256) as u32;
    // The long probe needs room for a KV length of 512 cells.
    let n_ctx = round_up((max_t + cfg.greedy_steps).max(512), 256) as u32;
    let ctx_settings = ContextSettings {
        n_ctx,
        n_batch,
        threads: cfg.threads,
        kv_f16: entry.kv_type.map(KvTypeName::kv_type) == Some(engine::ops::KvType::F16),
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
    let tokenizer = tokenize_corpus(&model, id, input)?;
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
