//! The flags of a generation run ([`GenerateArgs`], as llama.cpp's
//! llama-cli names them) and the value parsers other subcommands share.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::device::DeviceArgs;
use engine::kv_type::KV_TYPES;
use engine::ops::KvType;

/// KV cache element type on the command line: any of the engine's
/// [`KV_TYPES`], by its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvTypeArg(pub KvType);

/// Every value `--kv-type` takes, in [`KV_TYPES`]' order.
const KV_TYPE_ARGS: [KvTypeArg; KV_TYPES.len()] = {
    let mut all = [KvTypeArg(KvType::F32); KV_TYPES.len()];
    let mut i = 0;
    while i < all.len() {
        all[i] = KvTypeArg(KV_TYPES[i]);
        i += 1;
    }
    all
};

impl ValueEnum for KvTypeArg {
    fn value_variants<'a>() -> &'a [Self] {
        &KV_TYPE_ARGS
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.0.name()))
    }
}

impl KvTypeArg {
    /// The cache type this flag value names.
    pub fn kv_type(self) -> KvType {
        self.0
    }

    /// The flag value, as llama.cpp's tools print a cache type.
    pub fn name(self) -> &'static str {
        self.0.name()
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
