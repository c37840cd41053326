//! The prompts that apply to a model (chat prompts from their rendered
//! text) and the tokenizer corpus, tokenized by llama.cpp.

use std::path::Path;

use super::llama::Model;
use super::{err, CaptureError, PromptRun};
use crate::reference::format::{
    ModelEntry, PromptKind, TokenizedText, TokenizerCapture, FORMAT, FORMAT_VERSION,
};
use crate::reference::inputs::{self, PromptSource, TOKENIZER_CORPUS};
use crate::reference::writer::sha256_hex;

/// Reads and tokenizes every prompt that applies to the model.
pub(super) fn prepare_prompts(
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
    let wanted = |id: &String| entry.prompts.as_ref().is_none_or(|ids| ids.contains(id));
    for p in prompts.iter().filter(|p| wanted(&p.id)) {
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

pub(super) fn tokenize_corpus(
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
