//! Chat templates (`tokenizer.chat_template`) rendered with minijinja the way
//! Hugging Face transformers renders them with Jinja2:
//! - `trim_blocks` and `lstrip_blocks` on, a single trailing newline of the
//!   template dropped (Jinja2's `keep_trailing_newline=False`);
//! - Python's string, list and dict methods (minijinja-contrib's pycompat);
//! - `raise_exception(msg)`, `strftime_now(fmt)` and a `tojson` filter
//!   that is Python's `json.dumps(x, ensure_ascii=False, ...)`;
//! - values print as Python prints them (`None`, `True`, `1.0`, `['a']`);
//! - `messages`, `add_generation_prompt`, `bos_token`, `eos_token`, and
//!   `tools` / `documents` as `None`.
//!
//! A template cannot reach files or the environment (no loader: no
//! includes, imports or extends). A template from a model file is
//! untrusted, so every render is bounded ([`RenderLimits`]):
//! - instructions, by minijinja's fuel ([`ChatError::OutOfFuel`]);
//! - the rendered length ([`ChatError::TooLong`]);
//! - bytes acquired and wall-clock time: the render runs on its own
//!   thread under [`crate::bounded`] ([`ChatError::Exceeded`]);
//! - every width, indent, padding and precision argument
//!   ([`limits::MAX_WIDTH`]), the `strftime_now` format's length, macro
//!   recursion and the nesting of printed values.
//!
//! So any template gives a render or a one-line error, never an abort.

pub mod builtin;
mod data;
mod limits;
mod python;
mod strftime;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use minijinja::value::{Kwargs, Rest, StringInput, Value};
use minijinja::{Environment, Error, ErrorKind, State};

pub use data::Guarded;
pub use limits::{RenderLimits, MAX_WIDTH};

use crate::gguf::{GgufFile, MetadataError};
use crate::tokenizer::Tokenizer;

/// The metadata key holding a model's default chat template.
pub const CHAT_TEMPLATE_KEY: &str = "tokenizer.chat_template";

/// Instructions one render may execute by default.
pub const DEFAULT_FUEL: u64 = 5_000_000;

const TEMPLATE_NAME: &str = "chat_template";

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Message {
        Message {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// Why a chat template could not be loaded or rendered. One line each.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChatError {
    #[error("chat template: the model has no {CHAT_TEMPLATE_KEY}")]
    NoTemplate,
    #[error("chat template: {0}")]
    Metadata(#[from] MetadataError),
    #[error("chat template does not parse: {0}")]
    Syntax(String),
    /// The template called `raise_exception(message)`.
    #[error("chat template raised: {0}")]
    Raised(String),
    #[error("chat template ran out of fuel ({fuel} instructions): does it loop forever?")]
    OutOfFuel { fuel: u64 },
    #[error("chat template: the rendered text passed {limit} bytes")]
    TooLong { limit: usize },
    #[error("chat template stopped: {0}")]
    Exceeded(#[from] crate::bounded::Exceeded),
    #[error("chat template refused: an earlier render passed its memory or time budget")]
    Spent,
    #[error("chat template failed: {0}")]
    Render(String),
}

/// The message `raise_exception` was called with, carried as the source of
/// the minijinja error so that it can be told apart from other failures.
#[derive(Debug)]
struct Raised(String);

impl std::fmt::Display for Raised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Raised {}

/// A compiled chat template with the special-token texts it may use.
pub struct ChatTemplate {
    env: Arc<Environment<'static>>,
    source: String,
    bos_token: String,
    eos_token: String,
    fuel: u64,
    limits: RenderLimits,
    /// Set when a render passed its memory or time budget: its thread
    /// stays parked with what it held, so later renders are refused rather
    /// than leave one more behind each.
    spent: Arc<AtomicBool>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .field("fuel", &self.fuel)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// Compiles `source`; `bos_token` and `eos_token` are the texts the
    /// template sees under those names.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<ChatTemplate, ChatError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_keep_trailing_newline(false);
        env.set_unknown_method_callback(unknown_method);
        env.set_formatter(|out, _state, value| {
            out.write_str(&python::py_str(value)?)
                .map_err(|e| Error::new(ErrorKind::WriteFailure, e.to_string()))
        });
        env.add_function("raise_exception", raise_exception);
        env.add_filter("tojson", python::tojson);
        env.add_filter("indent", indent);
        env.add_filter("format", format);
        env.add_function("strftime_now", |fmt: &str| {
            check_strftime(fmt)?;
            Ok::<_, Error>(strftime::strftime(fmt, strftime::unix_now()))
        });
        env.set_fuel(Some(DEFAULT_FUEL));
        env.set_recursion_limit(limits::MAX_RECURSION);
        env.add_template_owned(TEMPLATE_NAME, source.to_string())
            .map_err(|e| ChatError::Syntax(one_line(&e)))?;
        Ok(ChatTemplate {
            env: Arc::new(env),
            source: source.to_string(),
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
            fuel: DEFAULT_FUEL,
            limits: RenderLimits::default(),
            spent: Arc::new(AtomicBool::new(false)),
        })
    }

    /// The model's own template (`tokenizer.chat_template`), with BOS and
    /// EOS texts from its vocabulary.
    pub fn from_gguf(file: &GgufFile, tokenizer: &Tokenizer) -> Result<ChatTemplate, ChatError> {
        let source = file
            .get_str_opt(CHAT_TEMPLATE_KEY)?
            .ok_or(ChatError::NoTemplate)?;
        ChatTemplate::for_tokenizer(source, tokenizer)
    }

    /// Compiles `source` with BOS and EOS texts from `tokenizer`'s
    /// vocabulary.
    pub fn for_tokenizer(source: &str, tokenizer: &Tokenizer) -> Result<ChatTemplate, ChatError> {
        let text = |id: Option<u32>| {
            id.and_then(|i| tokenizer.token_text(i))
                .unwrap_or_default()
                .to_string()
        };
        ChatTemplate::new(source, &text(tokenizer.bos()), &text(tokenizer.eos()))
    }

    /// The text the template sees as `bos_token`.
    pub fn bos_token(&self) -> &str {
        &self.bos_token
    }

    /// The text the template sees as `eos_token`.
    pub fn eos_token(&self) -> &str {
        &self.eos_token
    }

    /// Sets how many instructions one render may execute.
    pub fn with_fuel(mut self, fuel: u64) -> ChatTemplate {
        Arc::make_mut(&mut self.env).set_fuel(Some(fuel));
        self.fuel = fuel;
        self
    }

    /// Sets the bounds of each render.
    pub fn with_limits(mut self, limits: RenderLimits) -> ChatTemplate {
        self.limits = limits;
        self
    }

    /// The bounds of each render.
    pub fn limits(&self) -> RenderLimits {
        self.limits
    }

    /// Makes `strftime_now` format this instant (seconds since the epoch,
    /// UTC) instead of the current time: renders become reproducible.
    pub fn with_fixed_time(mut self, unix_seconds: i64) -> ChatTemplate {
        Arc::make_mut(&mut self.env).add_function("strftime_now", move |fmt: &str| {
            check_strftime(fmt)?;
            Ok::<_, Error>(strftime::strftime(fmt, unix_seconds))
        });
        self
    }

    /// Renders `messages` (each a `{role, content}` dict).
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<String, ChatError> {
        let messages: Vec<Value> = messages
            .iter()
            .map(|m| {
                Value::from_iter([
                    ("role", Value::from(m.role.as_str())),
                    ("content", Value::from(m.content.as_str())),
                ])
            })
            .collect();
        self.render_value(Value::from(messages), add_generation_prompt)
    }

    /// Renders `messages` so that the control-token texts
    /// (`control_texts`, from [`crate::tokenizer::Tokenizer::control_texts`])
    /// written in any message but the assistant's stay text when the
    /// result is tokenized through [`Guarded::parts`]; see `data.rs`.
    pub fn render_guarded(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
        control_texts: &[&str],
    ) -> Result<Guarded, ChatError> {
        let others = [self.source.as_str(), &self.bos_token, &self.eos_token];
        let (messages, map) = data::defuse(messages, control_texts, &others)?;
        let rendered = self.render(&messages, add_generation_prompt)?;
        Ok(Guarded { rendered, map })
    }

    /// Renders messages given as JSON text: a list of objects with any
    /// fields (tool calls, lists of content parts, ...), key order kept as
    /// Python's `json.loads` keeps it.
    pub fn render_json(
        &self,
        messages: &str,
        add_generation_prompt: bool,
    ) -> Result<String, ChatError> {
        let messages: Value = serde_json::from_str(messages)
            .map_err(|e| ChatError::Render(format!("messages are not JSON: {}", one_line(&e))))?;
        self.render_value(messages, add_generation_prompt)
    }

    fn render_value(
        &self,
        messages: Value,
        add_generation_prompt: bool,
    ) -> Result<String, ChatError> {
        let add_generation_prompt =
            add_generation_prompt && !crate::fault::active("chat-no-generation-prompt");
        let ctx = Value::from_iter([
            ("messages", messages),
            ("add_generation_prompt", Value::from(add_generation_prompt)),
            ("bos_token", Value::from(self.bos_token.as_str())),
            ("eos_token", Value::from(self.eos_token.as_str())),
            ("tools", Value::from(())),
            ("documents", Value::from(())),
        ]);
        if self.spent.load(Ordering::Relaxed) {
            return Err(ChatError::Spent);
        }
        let env = Arc::clone(&self.env);
        let limits = self.limits;
        let (fuel, cap) = (self.fuel, limits.output_bytes);
        let bounds = crate::bounded::Limits {
            bytes: limits.memory,
            acquired: limits.allocated,
            time: limits.time,
            stack: limits::RENDER_STACK,
        };
        crate::bounded::run("chat-template", bounds, move || {
            let template = env
                .get_template(TEMPLATE_NAME)
                .map_err(|e| ChatError::Render(one_line(&e)))?;
            let (mut text, overflowed) = limits::BoundedText::new(cap);
            match template.render_captured_to(ctx, &mut text) {
                Ok(_) => String::from_utf8(text.bytes)
                    .map_err(|_| ChatError::Render("the rendered text is not UTF-8".into())),
                Err(_) if overflowed.load(Ordering::Relaxed) => {
                    Err(ChatError::TooLong { limit: cap })
                }
                Err(e) => Err(classify(e, fuel)),
            }
        })
        .map_err(|e| {
            if matches!(
                e,
                crate::bounded::Exceeded::Bytes { .. }
                    | crate::bounded::Exceeded::Acquired { .. }
                    | crate::bounded::Exceeded::Time(_)
            ) {
                self.spent.store(true, Ordering::Relaxed);
            }
            ChatError::Exceeded(e)
        })?
    }
}

/// A render error as a [`ChatError`]: out of fuel, `raise_exception`, or
/// another failure.
fn classify(e: Error, fuel: u64) -> ChatError {
    if e.kind() == ErrorKind::OutOfFuel {
        return ChatError::OutOfFuel { fuel };
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(s) = source {
        if let Some(r) = s.downcast_ref::<Raised>() {
            return ChatError::Raised(one_line(&r.0));
        }
        source = s.source();
    }
    ChatError::Render(one_line(&e))
}

/// `strftime_now(format)` with the format's length capped.
fn check_strftime(fmt: &str) -> Result<(), Error> {
    if fmt.len() > limits::MAX_STRFTIME_FORMAT {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!(
                "strftime_now: a format of {} bytes is over the cap of {}",
                fmt.len(),
                limits::MAX_STRFTIME_FORMAT
            ),
        ));
    }
    Ok(())
}

/// minijinja's `indent` with its width capped.
fn indent(
    value: StringInput<'_>,
    width: Option<usize>,
    first: Option<bool>,
    blank: Option<bool>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let named: Option<usize> = kwargs.peek("width")?;
    if let Some(w) = width.or(named) {
        limits::check_width("indent width", w as u64)?;
    }
    minijinja::filters::indent(value, width, first, blank, kwargs)
}

/// minijinja's printf-style `format` filter with its widths capped.
fn format(state: &State, fmt: &Value, args: Rest<Value>) -> Result<Value, Error> {
    if let Some(s) = fmt.as_str() {
        limits::check_format(limits::FormatSyntax::Printf, s)?;
    }
    minijinja::filters::format(state, fmt, args)
}

/// Python's methods (minijinja-contrib's pycompat), with `str.format`'s
/// widths capped.
fn unknown_method(
    state: &State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    if method == "format" {
        if let Some(s) = value.as_str() {
            limits::check_format(limits::FormatSyntax::Braces, s)?;
        }
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

/// `raise_exception(message)`: fails the render with `message`.
fn raise_exception(_state: &State, args: Rest<Value>) -> Result<Value, Error> {
    let message = args
        .0
        .first()
        .map(python::py_str)
        .transpose()?
        .unwrap_or_default();
    Err(Error::new(ErrorKind::InvalidOperation, message.clone()).with_source(Raised(message)))
}

/// An error message on one line.
fn one_line(e: &dyn std::fmt::Display) -> String {
    crate::tokenizer::one_line(&e.to_string())
}
