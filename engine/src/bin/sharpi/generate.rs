//! `sharpi -m MODEL -p PROMPT` (also `sharpi run ...`): text generation.
//!
//! The prompt goes through the model's chat template unless `--raw` (see
//! [`super::prompt`]), is prefilled in batches, then tokens are sampled
//! ([`engine::sampler`]) and decoded one at a time, streamed to stdout as
//! complete UTF-8, until an end-of-generation token, `-n` tokens, or a full
//! context. Counts and speeds go to stderr at the end; `--json` prints one
//! object instead of the stream.

use std::io::{IsTerminal, Read, Write};

use serde_json::json;

use super::args::GenerateArgs;
use super::decode::{generate, piece, Outcome, Stop, Stops, Timings, Top};
use super::prompt::{self, MessageSpecials, Prompt};
use super::CliError;
use engine::chat::{ChatTemplate, RenderLimits};
use engine::sampler::{Sampler, SamplerConfig};
use engine::session::SessionConfig;
use engine::tokenizer::Tokenizer;

/// Runs generation as `args` says; text (or JSON) to `out`, the rest to
/// stderr. Without a prompt, on a terminal (or with `--conversation`),
/// a conversation ([`super::chat`]).
pub fn run(args: &GenerateArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let seed = args.seed.unwrap_or_else(fresh_seed);
    let sampling = sampler_config(args, seed)?;
    let conversation = args.conversation
        || (!args.no_conversation
            && args.prompt.is_none()
            && args.file.is_none()
            && std::io::stdin().is_terminal());
    if !conversation && args.prompt.is_none() && args.file.is_none() {
        return Err(CliError::Usage(
            "no prompt: give -p PROMPT or -f FILE (or --conversation to chat)".into(),
        ));
    }
    let path = args
        .model
        .as_ref()
        .ok_or_else(|| CliError::Usage("no model: give -m MODEL".into()))?;
    if args.n_predict < -1 {
        return Err(CliError::Usage(format!(
            "invalid -n {}: must be -1 (no limit) or a count >= 0",
            args.n_predict
        )));
    }
    if args.repeat_last_n < -1 {
        return Err(CliError::Usage(format!(
            "invalid --repeat-last-n {}: must be -1 (the context), 0 (off) or a count",
            args.repeat_last_n
        )));
    }
    let unescape = |s: &str| {
        if args.escape {
            super::escape::unescape(s)
        } else {
            s.to_string()
        }
    };
    let stops = Stops {
        reverse: args.reverse_prompt.iter().map(|r| unescape(r)).collect(),
        ignore_eos: args.ignore_eos,
    };
    if stops.reverse.iter().any(String::is_empty) {
        return Err(CliError::Usage("an empty -r/--reverse-prompt".into()));
    }

    let mut loaded = super::load::load(path, !args.raw)?;
    super::load::check_context(&loaded.model, args.ctx_size, "-c")?;
    let cfg = SessionConfig {
        n_ctx: args.ctx_size,
        n_batch: batch_rows(args),
        kv_type: args.kv_type.kv_type(),
        threads: args.threads.unwrap_or(0),
    };
    let (n_ctx, _) = cfg
        .shape(loaded.model.hparams())
        .map_err(|e| CliError::Usage(e.to_string()))?;
    let tok = &loaded.tokenizer;
    // Text past what the context can hold is refused before it is read
    // whole, rendered or tokenized.
    let max_bytes = tok.max_text_bytes(n_ctx);
    let text = match (&args.prompt, &args.file) {
        (None, None) => None,
        _ => Some(unescape(&prompt_text(args, tok, n_ctx)?)),
    };
    let system = args.system_prompt.as_deref().map(unescape);
    let (template, source) = if args.raw {
        (None, String::new())
    } else {
        chosen_template(args, loaded.template.take(), tok)?
    };
    let template = template.map(|t| {
        t.with_limits(RenderLimits {
            output_bytes: max_bytes,
            ..RenderLimits::default()
        })
    });
    if conversation {
        let template = template.ok_or_else(|| {
            CliError::Usage(
                "a conversation needs a chat template and the model has none: \
                 give --chat-template NAME|TEXT or --chat-template-file FILE"
                    .into(),
            )
        })?;
        let mut session = args.devices.session(loaded.model.clone(), &cfg)?;
        let mut sampler = Sampler::new(window(sampling, args, session.n_ctx()))?;
        let chat = super::chat::Chat {
            args,
            tok,
            template: &template,
            template_source: &source,
            system: system.as_deref(),
            first: text.as_deref(),
            stops: &stops,
        };
        chat.run(&mut session, &mut sampler, out)?;
        args.devices.report_experts(&session);
        args.devices.check_validation(&session)?;
        return Ok(());
    }
    let text = text.unwrap_or_default();
    let prompt = prompt::build(
        tok,
        template.as_ref(),
        &prompt::Request {
            user: &text,
            system: system.as_deref(),
            raw: args.raw,
            parse_special: args.parse_special,
            n_ctx,
        },
    )?;
    let mut session = args.devices.session(loaded.model.clone(), &cfg)?;
    let n_ctx = session.n_ctx();
    if prompt.tokens.is_empty() {
        return Err(CliError::Usage("the prompt is empty (no tokens)".into()));
    }
    if prompt.tokens.len() >= n_ctx {
        return Err(CliError::Usage(format!(
            "the prompt is {} tokens, the context holds {n_ctx}: give a larger -c or a shorter prompt",
            prompt.tokens.len()
        )));
    }
    if prompt.chat {
        eprintln!(
            "sharpi: prompt in the chat template ({source}): {} tokens; --raw sends it as it is",
            prompt.tokens.len()
        );
    }
    let mut sampler = Sampler::new(window(sampling, args, n_ctx))?;
    if args.verbose_prompt {
        print_prompt(tok, &prompt, &specials_note(&prompt, args.raw));
    }

    for &t in &prompt.tokens {
        sampler.accept(t);
    }
    let Outcome {
        generated,
        tops,
        stop,
        timings,
    } = generate(
        &mut session,
        &mut sampler,
        tok,
        &prompt.tokens,
        args,
        &stops,
        None,
        out,
    )?;

    if args.json {
        let text = tok.decode(&generated, false)?;
        write_json(
            out, tok, &prompt, &generated, &text, &tops, stop, seed, &timings,
        )?;
    }
    if stop == Stop::Context {
        eprintln!("(stopped: the context of {n_ctx} tokens is full)");
    }
    args.devices.report_experts(&session);
    args.devices.check_validation(&session)?;
    eprintln!(
        "prefill: {} tokens in {:.3} s, {:.1} tokens/s",
        timings.prefill_tokens,
        timings.prefill.as_secs_f64(),
        timings.prefill_per_second()
    );
    eprintln!(
        "decode: {} tokens in {:.3} s, {:.1} tokens/s",
        timings.decode_tokens,
        timings.decode.as_secs_f64(),
        timings.decode_per_second()
    );
    Ok(())
}

/// Prompt tokens per forward pass: the smaller of `-b` (default 2048) and
/// `-ub` (default 512), as llama.cpp splits a logical batch into physical
/// ones.
fn batch_rows(args: &GenerateArgs) -> usize {
    args.batch_size
        .unwrap_or(2048)
        .min(args.ubatch_size.unwrap_or(SessionConfig::default().n_batch))
}

/// The sampler's settings with the penalty window resolved for a context
/// of `n_ctx` tokens.
fn window(sampling: SamplerConfig, args: &GenerateArgs, n_ctx: usize) -> SamplerConfig {
    SamplerConfig {
        repeat_last_n: match args.repeat_last_n {
            -1 => n_ctx,
            n => n as usize,
        },
        ..sampling
    }
}

/// The chat template to use and what it is, for the messages on stderr:
/// `--chat-template` (a built-in name or Jinja text), then
/// `--chat-template-file`, then the model's own.
fn chosen_template(
    args: &GenerateArgs,
    model: Option<ChatTemplate>,
    tok: &Tokenizer,
) -> Result<(Option<ChatTemplate>, String), CliError> {
    use engine::chat::builtin;
    if let Some(value) = &args.chat_template {
        if builtin::is_jinja(value) {
            let t = ChatTemplate::for_tokenizer(value, tok)?;
            return Ok((Some(t), "--chat-template text".into()));
        }
        let source = builtin::source(value).ok_or_else(|| {
            CliError::Usage(format!(
                "--chat-template {value:?}: not a built-in template ({}) nor Jinja text",
                builtin::names().collect::<Vec<_>>().join(", ")
            ))
        })?;
        let t = ChatTemplate::for_tokenizer(source, tok)?;
        return Ok((Some(t), format!("built-in {value}")));
    }
    if let Some(f) = &args.chat_template_file {
        return Ok((Some(template_file(f, tok)?), format!("{}", f.display())));
    }
    Ok((model, "the model's tokenizer.chat_template".into()))
}

/// How the prompt's special-token texts were handled, for `--verbose-prompt`.
pub(super) fn specials_note(prompt: &Prompt, raw: bool) -> String {
    match (prompt.specials, raw) {
        (MessageSpecials::Text { kept }, _) => {
            format!("chat template; {kept} special-token texts in the messages kept as text")
        }
        (MessageSpecials::Parsed, _) => {
            "chat template; special-token texts in the messages parsed".to_string()
        }
        (MessageSpecials::Raw, true) => "raw".to_string(),
        (MessageSpecials::Raw, false) => "raw: the model has no chat template".to_string(),
    }
}

/// The sampling flags, checked (the window is resolved once the context
/// length is known).
fn sampler_config(args: &GenerateArgs, seed: u32) -> Result<SamplerConfig, CliError> {
    let cfg = SamplerConfig {
        temp: args.temp,
        top_k: args.top_k,
        typical_p: args.typical_p,
        top_p: args.top_p,
        min_p: args.min_p,
        repeat_penalty: args.repeat_penalty,
        frequency_penalty: args.frequency_penalty,
        presence_penalty: args.presence_penalty,
        repeat_last_n: 0,
        seed,
    };
    cfg.validate()?;
    Ok(cfg)
}

/// `-p`, or the contents of `-f`, refused past what a context of `n_ctx`
/// tokens can hold (a file is read no further than that).
fn prompt_text(args: &GenerateArgs, tok: &Tokenizer, n_ctx: usize) -> Result<String, CliError> {
    match (&args.prompt, &args.file) {
        (Some(p), _) => Ok(p.clone()),
        (None, Some(f)) => {
            let name = f.display();
            let cap = tok.max_text_bytes(n_ctx);
            let file =
                std::fs::File::open(f).map_err(|e| CliError::Usage(format!("{name}: {e}")))?;
            let mut bytes = Vec::new();
            file.take(cap as u64 + 1)
                .read_to_end(&mut bytes)
                .map_err(|e| CliError::Usage(format!("{name}: {e}")))?;
            if bytes.len() > cap {
                // The file's size where it has one (not a pipe or device).
                let len = std::fs::metadata(f)
                    .map_or(0, |m| m.len())
                    .max(bytes.len() as u64);
                prompt::check_bytes(tok, &format!("the prompt file {name}"), len as usize, n_ctx)?;
            }
            String::from_utf8(bytes).map_err(|e| {
                CliError::Usage(format!(
                    "{name}: not UTF-8 text (at byte {})",
                    e.utf8_error().valid_up_to()
                ))
            })
        }
        (None, None) => Err(CliError::Usage(
            "no prompt: give -p PROMPT or -f FILE".into(),
        )),
    }
}

/// The longest chat template file read.
const MAX_TEMPLATE_FILE: u64 = 1 << 20;

/// The chat template in `path`, for `tok`'s BOS and EOS texts.
fn template_file(path: &std::path::Path, tok: &Tokenizer) -> Result<ChatTemplate, CliError> {
    let name = path.display();
    let file = std::fs::File::open(path).map_err(|e| CliError::Usage(format!("{name}: {e}")))?;
    let mut bytes = Vec::new();
    file.take(MAX_TEMPLATE_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| CliError::Usage(format!("{name}: {e}")))?;
    if bytes.len() as u64 > MAX_TEMPLATE_FILE {
        return Err(CliError::Usage(format!(
            "{name}: a chat template file over {MAX_TEMPLATE_FILE} bytes"
        )));
    }
    let source = String::from_utf8(bytes)
        .map_err(|_| CliError::Usage(format!("{name}: the chat template is not UTF-8")))?;
    Ok(ChatTemplate::for_tokenizer(&source, tok)?)
}

/// A seed for a run without `-s`: the clock mixed with the process id.
fn fresh_seed() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut s = nanos ^ (u64::from(std::process::id()) << 32);
    (engine::synth::rng::splitmix64(&mut s) >> 32) as u32
}

fn print_prompt(tok: &Tokenizer, prompt: &Prompt, how: &str) {
    eprintln!("prompt ({how}): {} tokens", prompt.tokens.len());
    for &id in &prompt.tokens {
        eprintln!("{id:>8} {:?}", piece(tok, id));
    }
    let eog: Vec<String> = tok
        .eog_ids()
        .iter()
        .map(|&id| format!("{id} {:?}", piece(tok, id)))
        .collect();
    eprintln!("end of generation: {}", eog.join(", "));
}

#[allow(clippy::too_many_arguments)]
fn write_json(
    out: &mut dyn Write,
    tok: &Tokenizer,
    prompt: &Prompt,
    generated: &[u32],
    text: &str,
    tops: &[Top],
    stop: Stop,
    seed: u32,
    t: &Timings,
) -> Result<(), CliError> {
    let top5: Vec<serde_json::Value> = tops
        .iter()
        .map(|top| {
            top.iter()
                .map(|&(id, logit)| json!({ "id": id, "piece": piece(tok, id), "logit": logit }))
                .collect()
        })
        .collect();
    let (stop, stop_token) = match stop {
        Stop::Eog(id) => ("eog", Some(id)),
        Stop::Length => ("length", None),
        Stop::Context => ("context", None),
        Stop::Reverse(_) => ("reverse_prompt", None),
        Stop::Interrupted => ("interrupted", None),
    };
    let (message_specials, kept_as_text) = match prompt.specials {
        MessageSpecials::Raw => (None, None),
        MessageSpecials::Text { kept } => (Some("text"), Some(kept)),
        MessageSpecials::Parsed => (Some("parsed"), None),
    };
    let v = json!({
        "prompt_tokens": prompt.tokens,
        "prompt_pieces": prompt.tokens.iter().map(|&id| piece(tok, id)).collect::<Vec<_>>(),
        "chat": prompt.chat,
        "message_specials": message_specials,
        "specials_kept_as_text": kept_as_text,
        "generated": generated,
        "text": text,
        "stop": stop,
        "stop_token": stop_token,
        "seed": seed,
        "top5": top5,
        "timings": {
            "prefill_tokens": t.prefill_tokens,
            "prefill_seconds": t.prefill.as_secs_f64(),
            "prefill_tokens_per_second": t.prefill_per_second(),
            "decode_tokens": t.decode_tokens,
            "decode_seconds": t.decode.as_secs_f64(),
            "decode_tokens_per_second": t.decode_per_second(),
        },
    });
    serde_json::to_writer(&mut *out, &v)?;
    writeln!(out)?;
    out.flush()?;
    Ok(())
}
