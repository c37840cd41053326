//! The generation loop ([`generate`]): prefill a prompt, then sample and
//! decode until a stop, streaming the text; shared by a single run
//! ([`super::generate`]) and a conversation ([`super::chat`]).

use std::io::Write;
use std::time::{Duration, Instant};

use super::args::GenerateArgs;
use super::CliError;
use engine::sampler::{top_n, Sampler};
use engine::session::Session;
use engine::tokenizer::Tokenizer;

/// Decode steps whose top 5 `--verbose-prompt` prints.
const VERBOSE_STEPS: usize = 8;
/// Candidates shown per step (`--verbose-prompt`, `--json`).
const TOP: usize = 5;

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

/// A token's text for people: control tokens shown, invalid UTF-8 as U+FFFD.
pub(super) fn piece(tok: &Tokenizer, id: u32) -> String {
    tok.token_to_piece(id, true)
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default()
}

fn print_top(tok: &Tokenizer, step: usize, top: &Top) {
    let cells: Vec<String> = top
        .iter()
        .map(|&(id, l)| format!("{id} {:?} {l:.3}", piece(tok, id)))
        .collect();
    eprintln!("step {step}: {}", cells.join(" | "));
}
