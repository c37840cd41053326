//! The checks of a model that need no forward pass: its chat template and
//! renders, its end-of-generation tokens, its tokenizer on the corpus and
//! on each prompt.

use engine::chat::{ChatTemplate, CHAT_TEMPLATE_KEY};
use engine::gguf::GgufFile;
use engine::tokenizer::Tokenizer;

use crate::compare::checks::sampling;
use crate::compare::checks::tokens::{self, PromptTokens};
use crate::compare::plan::Options;
use crate::compare::report::ModelReport;
use crate::compare::Failure;
use crate::reference::format::{Manifest, PromptCapture};
use crate::reference::{ModelRef, PromptData, ReferenceData};

/// The model's chat template, with `strftime_now` frozen where the renders
/// froze it (None for a model without one; a failure when it has one we
/// cannot load).
pub(super) fn chat_template(
    model_ref: ModelRef<'_>,
    gguf: &GgufFile,
    tok: &Tokenizer,
    r: &mut ModelReport,
) -> Option<ChatTemplate> {
    if !model_ref.capture().model.has_chat_template {
        return None;
    }
    let loaded = ChatTemplate::from_gguf(gguf, tok)
        .map_err(|e| e.to_string())
        .and_then(|t| match model_ref.chat_renders() {
            Ok(Some(renders)) => tokens::template_for_renders(t, &renders),
            Ok(None) => Ok(t),
            Err(e) => Err(e.to_string()),
        });
    loaded
        .map_err(|e| r.failures.push(Failure::new("chat", e)))
        .ok()
}

/// The tokens that end generation (where `sharpi` stops a reply) against
/// llama.cpp's `llama_vocab_is_eog` set: an extra one cuts replies short, a
/// missing one runs past their end.
pub(super) fn eog_check(model_ref: ModelRef<'_>, tok: &Tokenizer, r: &mut ModelReport) {
    let theirs = &model_ref.capture().vocab.eog_tokens;
    let ours = tok.eog_ids();
    let extra: Vec<_> = ours
        .iter()
        .filter(|&&t| !theirs.iter().any(|&x| x as i64 == t as i64))
        .collect();
    let missing: Vec<_> = theirs
        .iter()
        .filter(|&&x| !ours.iter().any(|&t| x as i64 == t as i64))
        .collect();
    if !extra.is_empty() || !missing.is_empty() {
        r.failures.push(Failure::new(
            "eog",
            format!(
                "end-of-generation tokens: ours {ours:?}, llama.cpp {theirs:?} (extra {extra:?}, missing {missing:?})"
            ),
        ));
    }
}

/// Every chat-template render, ours against Jinja2's.
pub(super) fn render_check(
    opts: &Options,
    model_ref: ModelRef<'_>,
    gguf: &GgufFile,
    template: &ChatTemplate,
    r: &mut ModelReport,
) {
    let renders = match model_ref.chat_renders() {
        Ok(Some(renders)) => renders,
        Ok(None) => return,
        Err(e) => return r.failures.push(Failure::new("chat", e.to_string())),
    };
    let source = gguf
        .get_str_opt(CHAT_TEMPLATE_KEY)
        .ok()
        .flatten()
        .unwrap_or_default();
    match tokens::compare_renders(&opts.reference_dir, &renders, source, template) {
        Ok(c) => {
            if let Some(m) = c.mismatches.first() {
                r.failures.push(Failure::new(
                    "chat",
                    format!(
                        "{} of {} renders differ; first: {} (add_generation_prompt {}): {}",
                        c.mismatches.len(),
                        c.compared,
                        m.id,
                        m.add_generation_prompt,
                        m.detail
                    ),
                ));
            }
            r.checks.put(c);
        }
        Err(e) => r.failures.push(Failure::new("chat", e)),
    }
}

/// The sampler against llama.cpp's chain on the captured logits, where
/// the reference data has it (`<model>/sampling.json`).
pub(super) fn sampling_check(data: &ReferenceData, model_ref: ModelRef<'_>, r: &mut ModelReport) {
    let capture = match data.sampling(model_ref.id()) {
        None => return,
        Some(Ok(c)) => c,
        Some(Err(e)) => {
            r.failures.push(Failure::new("sampling", e.to_string()));
            return;
        }
    };
    let check = sampling::check(&capture, |prompt| {
        let d = model_ref.load_prompt(prompt).map_err(|e| e.to_string())?;
        Ok((d.tokens().to_vec(), d.last_logits().to_vec()))
    });
    if let Some(first) = check.mismatches.first() {
        r.failures.push(Failure::new(
            "sampling",
            format!(
                "{} of {} cases differ from llama.cpp's sampler chain; first: {first}",
                check.mismatches.len(),
                check.cases
            ),
        ));
    }
    r.checks.put(check);
}

/// The tokenizer corpus, line by line.
pub(super) fn corpus_check(
    opts: &Options,
    model_ref: ModelRef<'_>,
    tok: &Tokenizer,
    r: &mut ModelReport,
) {
    let cap = match model_ref.tokenizer() {
        Ok(c) => c,
        Err(e) => {
            r.failures.push(Failure::new("tokenizer", e.to_string()));
            return;
        }
    };
    match tokens::compare_corpus(&opts.reference_dir, &cap, tok) {
        Ok(c) => {
            if let Some(m) = c.mismatches.first() {
                let line = m
                    .line
                    .map_or("the whole corpus".to_string(), |l| format!("line {l}"));
                r.failures.push(Failure::new(
                    "tokenizer",
                    format!(
                        "{} of {} tokenizations differ; first: {line} (parse_special {}): {}",
                        c.mismatches.len(),
                        c.compared,
                        m.parse_special,
                        m.detail
                    ),
                ));
            }
            r.checks.put(c);
        }
        Err(e) => r.failures.push(Failure::new("tokenizer", e)),
    }
}

/// Our tokenization of a prompt's text against the captured ids.
pub(super) fn prompt_tokens(
    opts: &Options,
    manifest: &Manifest,
    prompt: &PromptCapture,
    data: &PromptData,
    tok: &Tokenizer,
    template: Option<&ChatTemplate>,
) -> Result<PromptTokens, String> {
    let entry = manifest
        .prompts
        .iter()
        .find(|p| p.id == prompt.id)
        .ok_or_else(|| format!("prompt {} is not in the manifest", prompt.id))?;
    let text = tokens::prompt_text(&opts.reference_dir, &entry.file, prompt.kind, template)?;
    Ok(tokens::compare_prompt(&text, prompt, data.tokens(), tok))
}
