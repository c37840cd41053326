//! The prompt's tokens: the user's text through the model's chat template,
//! or as it is (`--raw`).

use super::CliError;
use engine::chat::{ChatTemplate, Message};
use engine::tokenizer::{TextPart, Tokenizer};

/// What to build a prompt from.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    pub user: &'a str,
    pub system: Option<&'a str>,
    /// No chat template; control-token texts stay text.
    pub raw: bool,
    /// In chat mode, parse control-token texts in the user's and system
    /// prompt's text as control tokens (`--parse-special`), as the
    /// template's own markup is.
    pub parse_special: bool,
    /// The context, in tokens: text that cannot fit is refused before
    /// rendering or tokenizing.
    pub n_ctx: usize,
}

/// How control-token texts written in the messages were tokenized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageSpecials {
    /// No chat template: the whole prompt is text.
    Raw,
    /// As text; `kept` of them were in the messages.
    Text { kept: usize },
    /// As control tokens (`--parse-special`).
    Parsed,
}

/// A prompt ready to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prompt {
    /// The text that was tokenized (the rendered template in chat mode).
    pub text: String,
    pub tokens: Vec<u32>,
    /// Whether the chat template was applied.
    pub chat: bool,
    pub specials: MessageSpecials,
}

/// Refuses text longer than a context of `n_ctx` tokens can hold
/// ([`Tokenizer::max_text_bytes`]), naming both.
pub fn check_bytes(
    tok: &Tokenizer,
    what: &str,
    bytes: usize,
    n_ctx: usize,
) -> Result<(), CliError> {
    let cap = tok.max_text_bytes(n_ctx);
    if bytes > cap {
        return Err(CliError::Usage(format!(
            "{what} is {bytes} bytes, more than a context of {n_ctx} tokens can hold \
             ({cap} bytes: {} bytes per token at most): give a larger -c or a shorter prompt",
            cap / n_ctx.max(1)
        )));
    }
    Ok(())
}

/// Builds the prompt.
///
/// - Raw (`raw`, or a model without a chat template): `user` tokenized as
///   text (`parse_special` false: `<|im_start|>` written in it stays text),
///   with BOS/EOS as the model's metadata asks (llama.cpp's
///   `llama_tokenize(.., add_special = true, parse_special = false)`).
/// - Chat: `[system?, user]` rendered with `add_generation_prompt`, then
///   tokenized with BOS/EOS per the metadata. The template's markup has its
///   control tokens parsed; the messages' text does not (a user cannot
///   write `<|im_end|>` and open a system turn), unless `parse_special`
///   (then the whole render is parsed, as llama.cpp does). A template that
///   writes the BOS (or EOS) text itself would then get a second one, so,
///   as llama.cpp's `common_chat_template_direct_apply` does, a rendered
///   text that starts with the BOS text has it removed when the metadata
///   adds a BOS (and one that ends with the EOS text, when it adds an
///   EOS): the prompt starts with exactly one BOS either way.
///
/// The text is refused before any work when it is longer than the context
/// can hold, and the template's output is capped at that length.
pub fn build(
    tok: &Tokenizer,
    template: Option<&ChatTemplate>,
    req: &Request<'_>,
) -> Result<Prompt, CliError> {
    let bytes = req.user.len() + req.system.map_or(0, str::len);
    check_bytes(tok, "the prompt", bytes, req.n_ctx)?;
    let template = if req.raw { None } else { template };
    let Some(template) = template else {
        if req.system.is_some() {
            return Err(CliError::Usage(if req.raw {
                "--system-prompt needs the chat template, which --raw turns off".into()
            } else {
                "--system-prompt needs a chat template, and the model has none".into()
            }));
        }
        let parts = [TextPart {
            text: req.user,
            parse_special: false,
        }];
        return Ok(Prompt {
            tokens: tokens_within(tok, &parts, req.n_ctx)?,
            text: req.user.to_string(),
            chat: false,
            specials: MessageSpecials::Raw,
        });
    };
    let mut messages = Vec::with_capacity(2);
    if let Some(s) = req.system {
        messages.push(Message::new("system", s));
    }
    messages.push(Message::new("user", req.user));
    conversation(tok, template, &messages, req.parse_special, req.n_ctx)
}

/// The prompt of a conversation: `messages` rendered through `template`
/// with `add_generation_prompt`, tokenized as [`build`] does in chat mode
/// (control-token texts in anything but the assistant's messages kept as
/// text unless `parse_special`; one BOS). Refused, before rendering, when
/// the messages' text cannot fit a context of `n_ctx` tokens.
pub fn conversation(
    tok: &Tokenizer,
    template: &ChatTemplate,
    messages: &[Message],
    parse_special: bool,
    n_ctx: usize,
) -> Result<Prompt, CliError> {
    let bytes = messages.iter().map(|m| m.content.len()).sum();
    check_bytes(tok, "the conversation", bytes, n_ctx)?;
    let controls = if parse_special {
        Vec::new()
    } else {
        tok.control_texts()
    };
    let mut rendered = template.render_guarded(messages, true, &controls)?;
    if tok.add_bos() {
        rendered.strip_prefix(template.bos_token());
    }
    if tok.add_eos() {
        rendered.strip_suffix(template.eos_token());
    }
    let parts: Vec<TextPart<'_>> = rendered.parts();
    Ok(Prompt {
        tokens: tokens_within(tok, &parts, n_ctx)?,
        text: rendered.text(),
        chat: true,
        specials: if parse_special {
            MessageSpecials::Parsed
        } else {
            MessageSpecials::Text {
                kept: rendered.kept_as_text(),
            }
        },
    })
}

/// The ids of `parts` (BOS/EOS as the metadata says), refused as soon as
/// they are known to pass the context: tokenizing stops there, so memory
/// follows the context, not the text.
fn tokens_within(
    tok: &Tokenizer,
    parts: &[TextPart<'_>],
    n_ctx: usize,
) -> Result<Vec<u32>, CliError> {
    let encoded = tok.encode_parts_upto(parts, true, n_ctx)?;
    if !encoded.complete {
        return Err(CliError::Usage(format!(
            "the prompt is more than {} tokens, the context holds {n_ctx}: give a larger -c or a shorter prompt",
            encoded.tokens.len()
        )));
    }
    Ok(encoded.tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A test model fetched by scripts/fetch-models (tests must not pass
    /// by skipping).
    fn model_path(name: &str) -> std::path::PathBuf {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../models")
            .join(name);
        assert!(
            p.is_file(),
            "test model {} is missing: run scripts/fetch-models",
            p.display()
        );
        p
    }

    #[test]
    fn chat_prompt_starts_with_one_bos() {
        use engine::chat::ChatTemplate;
        use engine::gguf::GgufFile;
        use engine::tokenizer::Tokenizer;
        let req = |user, raw| Request {
            user,
            system: None,
            raw,
            parse_special: false,
            n_ctx: 4096,
        };
        // Gemma's tokenizer adds a BOS (2); a Gemma-style template writes
        // `bos_token` itself: the rendered one is dropped, as llama.cpp does.
        let file = GgufFile::open(&model_path("gemma-3-270m-q4_k_m.gguf")).unwrap();
        let tok = Tokenizer::from_gguf(&file).unwrap();
        assert!(tok.add_bos());
        let src = "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m.role }}\n\
                   {{ m.content }}<end_of_turn>\n{% endfor %}<start_of_turn>model\n";
        let t = ChatTemplate::new(src, "<bos>", "<eos>").unwrap();
        let p = build(&tok, Some(&t), &req("Hi", false)).unwrap();
        assert!(p.chat);
        assert_eq!(p.tokens[0], 2);
        assert_ne!(p.tokens[1], 2);
        assert!(
            p.text.starts_with("<start_of_turn>user\nHi"),
            "{:?}",
            p.text
        );
        // Special-token texts in the template are parsed: <end_of_turn> is 106.
        assert!(p.tokens.contains(&106));
        // Raw: the same text stays text.
        let raw = build(&tok, Some(&t), &req("<end_of_turn>", true)).unwrap();
        assert!(!raw.chat);
        assert_eq!(raw.tokens[0], 2);
        assert!(!raw.tokens.contains(&106));

        // SmolLM2 adds no BOS: a template's BOS text is kept, as a token.
        let file = GgufFile::open(&model_path("SmolLM2-135M-Instruct.Q4_1.gguf")).unwrap();
        let tok = Tokenizer::from_gguf(&file).unwrap();
        assert!(!tok.add_bos());
        let bos = tok.token_text(tok.bos().unwrap()).unwrap().to_string();
        let t = ChatTemplate::new("{{ bos_token }}{{ messages[0].content }}", &bos, "").unwrap();
        let p = build(&tok, Some(&t), &req("Hi", false)).unwrap();
        assert_eq!(p.tokens[0], tok.bos().unwrap());
        assert_eq!(
            p.tokens.iter().filter(|&&t| Some(t) == tok.bos()).count(),
            1
        );
    }
}
