//! `sharpi -m MODEL -p PROMPT` (also `sharpi run ...`): text generation.
//!
//! The prompt goes through the model's chat template unless `--raw` (see
//! [`super::prompt`]), is prefilled in batches, then tokens are sampled
//! ([`crate::sampler`]) and decoded one at a time, streamed to stdout as
//! complete UTF-8, until an end-of-generation token, `-n` tokens, or a full
//! context. Counts and speeds go to stderr at the end; `--json` prints one
//! object instead of the stream.

use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use serde_json::json;

use super::device::DeviceArgs;
use super::prompt::{self, MessageSpecials, Prompt};
use super::CliError;
use crate::chat::{ChatTemplate, RenderLimits};
use crate::ops::KvType;
use crate::sampler::{top_n, Sampler, SamplerConfig};
use crate::session::{Session, SessionConfig};
use crate::tokenizer::Tokenizer;

/// Decode steps whose top 5 `--verbose-prompt` prints.
const VERBOSE_STEPS: usize = 8;
/// Candidates shown per step (`--verbose-prompt`, `--json`).
const TOP: usize = 5;

/// KV cache element type on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum KvTypeArg {
    F32,
    F16,
}

impl KvTypeArg {
    /// The cache type this flag value names.
    pub fn kv_type(self) -> KvType {
        match self {
            KvTypeArg::F32 => KvType::F32,
            KvTypeArg::F16 => KvType::F16,
        }
    }

    /// The flag value, as llama.cpp's tools print a cache type.
    pub fn name(self) -> &'static str {
        match self {
            KvTypeArg::F32 => "f32",
            KvTypeArg::F16 => "f16",
        }
    }
}

/// The options of a generation run (flag names as llama.cpp's llama-cli).
#[derive(Args, Clone, Debug)]
pub struct GenerateArgs {
    /// The GGUF model.
    #[arg(short = 'm', long = "model", value_name = "MODEL")]
    pub model: Option<PathBuf>,
    /// The prompt.
    #[arg(
        short = 'p',
        long = "prompt",
        value_name = "PROMPT",
        conflicts_with = "file"
    )]
    pub prompt: Option<String>,
    /// Read the prompt from FILE.
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Tokens to generate (-1: until an end-of-generation token or a full context).
    #[arg(
        short = 'n',
        long = "n-predict",
        value_name = "N",
        default_value_t = 256,
        allow_negative_numbers = true
    )]
    pub n_predict: i64,
    /// Context length in tokens (0: the model's own, at most 4096).
    #[arg(short = 'c', long = "ctx-size", value_name = "N", default_value_t = 0)]
    pub ctx_size: usize,
    /// Seed of the sampler (default: a new one each run, printed with --json).
    #[arg(short = 's', long = "seed", value_name = "SEED")]
    pub seed: Option<u32>,
    /// Worker threads (default: all cores).
    #[arg(short = 't', long = "threads", value_name = "N", value_parser = threads)]
    pub threads: Option<usize>,
    /// Temperature (0: greedy).
    #[arg(long, default_value_t = 0.8, allow_negative_numbers = true)]
    pub temp: f32,
    /// Top-k sampling (0: off).
    #[arg(long, value_name = "N", default_value_t = 40)]
    pub top_k: usize,
    /// Locally typical sampling (1: off).
    #[arg(
        long = "typical",
        value_name = "P",
        default_value_t = 1.0,
        allow_negative_numbers = true
    )]
    pub typical_p: f32,
    /// Top-p (nucleus) sampling (1: off).
    #[arg(
        long,
        value_name = "P",
        default_value_t = 0.95,
        allow_negative_numbers = true
    )]
    pub top_p: f32,
    /// Min-p sampling (0: off).
    #[arg(
        long,
        value_name = "P",
        default_value_t = 0.05,
        allow_negative_numbers = true
    )]
    pub min_p: f32,
    /// Penalty of repeated tokens (1: off).
    #[arg(
        long,
        value_name = "X",
        default_value_t = 1.0,
        allow_negative_numbers = true
    )]
    pub repeat_penalty: f32,
    /// Subtracted from a recent token's logit once (0: off).
    #[arg(
        long,
        value_name = "X",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub presence_penalty: f32,
    /// Subtracted from a recent token's logit per occurrence (0: off).
    #[arg(
        long,
        value_name = "X",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub frequency_penalty: f32,
    /// Tokens the penalties look back over (0: off, -1: the context).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 64,
        allow_negative_numbers = true
    )]
    pub repeat_last_n: i64,
    /// A system message for the chat template.
    #[arg(long, value_name = "TEXT")]
    pub system_prompt: Option<String>,
    /// Send the prompt as it is: no chat template, special-token texts not parsed.
    #[arg(long)]
    pub raw: bool,
    /// Use the chat template in FILE instead of the model's.
    #[arg(long, value_name = "FILE")]
    pub chat_template_file: Option<PathBuf>,
    /// In chat mode, parse special-token texts (`<|im_start|>`) written in
    /// the prompt and system prompt as control tokens. By default they stay
    /// text, so that a prompt cannot forge the template's turns.
    #[arg(long)]
    pub parse_special: bool,
    /// Print the prompt's tokens, the end-of-generation set and the first
    /// steps' top 5 to stderr.
    #[arg(long)]
    pub verbose_prompt: bool,
    /// Print one JSON object (prompt and generated ids, text, top 5 per
    /// step, timings) instead of streaming text.
    #[arg(long)]
    pub json: bool,
    /// KV cache element type.
    #[arg(long, value_enum, default_value = "f32")]
    pub kv_type: KvTypeArg,
    /// Chat with the model (llama-cli's -cnv): turns read from stdin, the
    /// conversation kept through the chat template with the KV cache of
    /// earlier turns reused. The default when stdin is a terminal and no
    /// prompt is given; -p/-f then is the first turn.
    #[arg(long, conflicts_with_all = ["raw", "json"])]
    pub conversation: bool,
    /// Never chat: without -p/-f, an error (llama-cli's -no-cnv).
    #[arg(long, conflicts_with = "conversation")]
    pub no_conversation: bool,
    /// The chat template: a built-in name (chatml, gemma, llama2, llama3,
    /// phi3, zephyr) or Jinja text, instead of the model's.
    #[arg(long, value_name = "NAME|TEXT", conflicts_with = "chat_template_file")]
    pub chat_template: Option<String>,
    /// Process escape sequences (\n, \r, \t, \', \", \\, \xHH) in the
    /// prompt, the system prompt and the reverse prompts. Off by default
    /// (llama-cli has it on).
    #[arg(short = 'e', long)]
    pub escape: bool,
    /// Leave escape sequences as they are (the default).
    #[arg(long, conflicts_with = "escape")]
    pub no_escape: bool,
    /// Stop generating when the output ends with TEXT (in a conversation:
    /// hand the turn back). May be given more than once.
    #[arg(short = 'r', long, value_name = "TEXT")]
    pub reverse_prompt: Vec<String>,
    /// Keep generating past end-of-generation tokens: they are never
    /// sampled (their logits set to minus infinity).
    #[arg(long)]
    pub ignore_eos: bool,
    /// Do not print the prompt before the output (sharpi never does; the
    /// flag is accepted for llama-cli's command lines).
    #[arg(long)]
    pub no_display_prompt: bool,
    /// Logical batch (llama-cli's -b): with --ubatch-size, the smaller is
    /// the number of prompt tokens per forward pass. Changes speed, not
    /// results.
    #[arg(short = 'b', long, value_name = "N", value_parser = positive)]
    pub batch_size: Option<usize>,
    /// Prompt tokens per forward pass (llama-cli's -ub; default 512).
    #[arg(long, value_name = "N", value_parser = positive)]
    pub ubatch_size: Option<usize>,
    /// Color the conversation's input prompt on a terminal.
    #[arg(long)]
    pub color: bool,
    #[command(flatten)]
    pub devices: DeviceArgs,
}

/// `N >= 1`.
/// Threads a `-t` may ask for, per core the machine has: more only adds
/// switching, and a typo like `-t 1000` would start a thousand threads.
pub const MAX_THREADS_PER_CORE: usize = 4;

/// A `--threads N` value: a whole number from 1 to
/// [`MAX_THREADS_PER_CORE`] times the cores.
pub fn threads(s: &str) -> Result<usize, String> {
    let n = positive(s)?;
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let max = MAX_THREADS_PER_CORE * cores;
    if n > max {
        return Err(format!(
            "{n} threads: at most {max} ({MAX_THREADS_PER_CORE} per core, {cores} cores)"
        ));
    }
    Ok(n)
}

pub fn positive(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("{s:?} is not a whole number >= 1")),
    }
}

/// Why generation stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// An end-of-generation token (not part of the output).
    Eog(u32),
    /// `-n` tokens.
    Length,
    /// The context is full.
    Context,
    /// The output ended with the `-r` text of this index.
    Reverse(usize),
    /// Ctrl-C in a conversation.
    Interrupted,
}

/// Counts and wall times of a run.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timings {
    pub prefill_tokens: usize,
    pub prefill: Duration,
    pub decode_tokens: usize,
    pub decode: Duration,
}

fn per_second(n: usize, d: Duration) -> f64 {
    if d.is_zero() {
        0.0
    } else {
        n as f64 / d.as_secs_f64()
    }
}

impl Timings {
    pub fn prefill_per_second(&self) -> f64 {
        per_second(self.prefill_tokens, self.prefill)
    }

    pub fn decode_per_second(&self) -> f64 {
        per_second(self.decode_tokens, self.decode)
    }
}

/// One sampling step's best raw logits.
pub(super) type Top = Vec<(u32, f32)>;

/// How a generation loop may stop besides `-n`, the context and an
/// end-of-generation token.
#[derive(Clone, Debug, Default)]
pub struct Stops {
    /// `-r`: texts the output may end with (escapes processed with `-e`).
    pub reverse: Vec<String>,
    /// `--ignore-eos`: end-of-generation tokens are never sampled.
    pub ignore_eos: bool,
}

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
    use crate::chat::builtin;
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

/// What a generation loop produced.
pub(super) struct Outcome {
    /// Sampled tokens, the end-of-generation one excluded.
    pub generated: Vec<u32>,
    /// The top candidates of each step (every step with `--json`, the
    /// first [`VERBOSE_STEPS`] with `--verbose-prompt` only).
    pub tops: Vec<Top>,
    pub stop: Stop,
    pub timings: Timings,
}

/// Prefills `prompt` (at the session's position), then samples and
/// decodes until a stop; streams the text to `out` unless `--json`. The
/// last sampled token is in the KV cache only when generation went on
/// past it (`session.pos()` says how far the cache goes).
#[allow(clippy::too_many_arguments)]
pub(super) fn generate(
    session: &mut Session,
    sampler: &mut Sampler,
    tok: &Tokenizer,
    prompt: &[u32],
    args: &GenerateArgs,
    stops: &Stops,
    answering: Option<&super::interrupt::Answering>,
    out: &mut dyn Write,
) -> Result<Outcome, CliError> {
    let limit = usize::try_from(args.n_predict).unwrap_or(usize::MAX);
    let n_ctx = session.n_ctx();
    let mut stream = tok.stream_decoder(false);
    let mut generated: Vec<u32> = Vec::new();
    let mut tops: Vec<Top> = Vec::new();
    // The output so far, for the reverse prompts.
    let mut text = String::new();
    // [n_vocab] the logits with the end-of-generation tokens masked (--ignore-eos).
    let mut masked: Vec<f32> = Vec::new();
    let mut timings = Timings {
        prefill_tokens: prompt.len(),
        ..Timings::default()
    };
    let t0 = Instant::now();
    let mut logits = session.prefill(prompt)?;
    timings.prefill = t0.elapsed();
    let stop = loop {
        if generated.len() >= limit {
            break Stop::Length;
        }
        let step = generated.len();
        let verbose = args.verbose_prompt && step < VERBOSE_STEPS;
        if args.json || verbose {
            let top = top_n(logits, TOP);
            if verbose {
                print_top(tok, step, &top);
            }
            tops.push(top);
        }
        let next = if stops.ignore_eos {
            masked.clear();
            masked.extend_from_slice(logits);
            for &id in tok.eog_ids() {
                if let Some(l) = masked.get_mut(id as usize) {
                    *l = f32::NEG_INFINITY;
                }
            }
            sampler.sample(&masked)
        } else {
            sampler.sample(logits)
        };
        sampler.accept(next);
        if tok.is_eog(next) && !stops.ignore_eos {
            break Stop::Eog(next);
        }
        generated.push(next);
        let piece = stream.push(next)?;
        if !args.json {
            out.write_all(piece.as_bytes())?;
            out.flush()?;
        }
        if !stops.reverse.is_empty() {
            text.push_str(&piece);
            if let Some(i) = stops.reverse.iter().position(|r| text.ends_with(r)) {
                break Stop::Reverse(i);
            }
        }
        if generated.len() >= limit {
            break Stop::Length;
        }
        if answering.is_some_and(|a| a.interrupted()) {
            break Stop::Interrupted;
        }
        if session.pos() >= n_ctx {
            break Stop::Context;
        }
        let t = Instant::now();
        logits = session.decode(next)?;
        timings.decode += t.elapsed();
        timings.decode_tokens += 1;
    };
    if !args.json {
        writeln!(out, "{}", stream.finish())?;
        out.flush()?;
    }
    Ok(Outcome {
        generated,
        tops,
        stop,
        timings,
    })
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
    (crate::synth::rng::splitmix64(&mut s) >> 32) as u32
}

/// A token's text for people: control tokens shown, invalid UTF-8 as U+FFFD.
fn piece(tok: &Tokenizer, id: u32) -> String {
    tok.token_to_piece(id, true)
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default()
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

fn print_top(tok: &Tokenizer, step: usize, top: &Top) {
    let cells: Vec<String> = top
        .iter()
        .map(|&(id, l)| format!("{id} {:?} {l:.3}", piece(tok, id)))
        .collect();
    eprintln!("step {step}: {}", cells.join(" | "));
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
