//! The prompt's tokens: the user's text through the model's chat template,
//! or as it is (`--raw`).

use super::CliError;
use crate::chat::{ChatTemplate, Message};
use crate::tokenizer::Tokenizer;

/// A prompt ready to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prompt {
    /// The text that was tokenized (the rendered template in chat mode).
    pub text: String,
    pub tokens: Vec<u32>,
    /// Whether the chat template was applied.
    pub chat: bool,
}

/// Builds the prompt.
///
/// - Raw (`raw`, or a model without a chat template): `user` tokenized as
///   text (`parse_special` false: `<|im_start|>` written in it stays text),
///   with BOS/EOS as the model's metadata asks (llama.cpp's
///   `llama_tokenize(.., add_special = true, parse_special = false)`).
/// - Chat: `[system?, user]` rendered with `add_generation_prompt`, then
///   tokenized with `parse_special` true and BOS/EOS per the metadata. A
///   template that writes the BOS (or EOS) text itself would then get a
///   second one, so, as llama.cpp's `common_chat_template_direct_apply`
///   does, a rendered text that starts with the BOS text has it removed
///   when the metadata adds a BOS (and one that ends with the EOS text, when
///   it adds an EOS): the prompt starts with exactly one BOS either way.
pub fn build(
    tok: &Tokenizer,
    template: Option<&ChatTemplate>,
    user: &str,
    system: Option<&str>,
    raw: bool,
) -> Result<Prompt, CliError> {
    let template = if raw { None } else { template };
    let Some(template) = template else {
        if system.is_some() {
            return Err(CliError::Usage(if raw {
                "--system-prompt needs the chat template, which --raw turns off".into()
            } else {
                "--system-prompt needs a chat template, and the model has none".into()
            }));
        }
        return Ok(Prompt {
            tokens: tok.encode(user, true, false)?,
            text: user.to_string(),
            chat: false,
        });
    };
    let mut messages = Vec::with_capacity(2);
    if let Some(s) = system {
        messages.push(Message::new("system", s));
    }
    messages.push(Message::new("user", user));
    let rendered = template.render(&messages, true)?;
    let mut text = rendered.as_str();
    let bos = template.bos_token();
    if tok.add_bos() && !bos.is_empty() {
        text = text.strip_prefix(bos).unwrap_or(text);
    }
    let eos = template.eos_token();
    if tok.add_eos() && !eos.is_empty() {
        text = text.strip_suffix(eos).unwrap_or(text);
    }
    Ok(Prompt {
        tokens: tok.encode(text, true, true)?,
        text: text.to_string(),
        chat: true,
    })
}
