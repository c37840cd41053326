//! A conversation (`sharpi -m MODEL --conversation`, llama-cli's `-cnv`):
//! turns read from stdin, the whole conversation rendered through the chat
//! template at each turn, and only what the KV cache does not already hold
//! prefilled. The cache holds the tokens of the previous render and answer;
//! the new render shares their longest common prefix (all of it, unless the
//! answer's text tokenizes differently when read back, or a `/load` or
//! `/clear` changed the history), the session rewinds to that prefix and
//! prefills the rest.
//!
//! Input: one line per turn (a line ending in `\` goes on on the next);
//! `/clear`, `/save FILE`, `/load FILE` (the conversation as a JSON list of
//! `{"role", "content"}` objects), `/exit`; `//...` sends a line starting
//! with `/`. End of input ends the conversation; Ctrl-C stops an answer
//! ([`super::interrupt`]).

use std::io::{BufRead, IsTerminal, Read, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::args::GenerateArgs;
use super::decode::{generate, Outcome, Stop, Stops};
use super::interrupt::{self, Answering};
use super::prompt;
use super::CliError;
use engine::chat::{ChatTemplate, Message};
use engine::sampler::Sampler;
use engine::session::Session;
use engine::tokenizer::Tokenizer;

/// A conversation's settings.
pub struct Chat<'a> {
    pub args: &'a GenerateArgs,
    pub tok: &'a Tokenizer,
    pub template: &'a ChatTemplate,
    /// Where the template came from, for the banner.
    pub template_source: &'a str,
    pub system: Option<&'a str>,
    /// `-p`/`-f`: the first turn, sent without reading.
    pub first: Option<&'a str>,
    pub stops: &'a Stops,
}

/// One message as `/save` writes it and `/load` reads it.
#[derive(Serialize, Deserialize)]
struct Saved {
    role: String,
    content: String,
}

/// A line of input.
enum Input {
    Eof,
    Text(String),
    /// Refused (too long, not UTF-8): the reason.
    Refused(String),
}

/// The conversation and what the KV cache holds of it.
struct State {
    messages: Vec<Message>,
    /// The tokens at the session's positions `0..pos`.
    cached: Vec<u32>,
    turns: usize,
}

const HELP: &str = "commands: /clear (start over), /save FILE, /load FILE (the conversation \
                    as JSON), /exit; //text sends /text; Ctrl-C stops an answer, Ctrl-D ends";

impl Chat<'_> {
    /// Runs the conversation until `/exit` or the end of input. A turn
    /// that cannot be sent (too long for the context, a template error)
    /// is reported on stderr and dropped; errors of the model or of the
    /// output end the run.
    pub fn run(
        &self,
        session: &mut Session,
        sampler: &mut Sampler,
        out: &mut dyn Write,
    ) -> Result<(), CliError> {
        interrupt::install()
            .map_err(|e| CliError::Usage(format!("installing the Ctrl-C handler: {e}")))?;
        let model = self
            .args
            .model
            .as_ref()
            .map_or(String::new(), |m| m.display().to_string());
        eprintln!(
            "sharpi: conversation with {model}, chat template: {}; {HELP}",
            self.template_source
        );
        let terminal = std::io::stdin().is_terminal();
        let stdin = std::io::stdin();
        let mut input = stdin.lock();
        // A line is refused past what the context can hold.
        let cap = self.tok.max_text_bytes(session.n_ctx());
        let mut state = State {
            messages: self.initial(),
            cached: Vec::new(),
            turns: 0,
        };
        let mut pending = self.first.map(str::to_string);
        loop {
            let line = match pending.take() {
                Some(text) => text,
                None => {
                    if terminal {
                        let marker = if self.args.color { "\x1b[32m> " } else { "> " };
                        out.write_all(marker.as_bytes())?;
                        out.flush()?;
                    }
                    let read = read_turn(&mut input, cap);
                    if terminal && self.args.color {
                        out.write_all(b"\x1b[0m")?;
                        out.flush()?;
                    }
                    match read.map_err(|e| CliError::Usage(format!("reading stdin: {e}")))? {
                        Input::Eof => break,
                        Input::Text(text) => text,
                        Input::Refused(why) => {
                            eprintln!("sharpi: {why}");
                            continue;
                        }
                    }
                }
            };
            let text = match line.strip_prefix('/') {
                Some(rest) if rest.starts_with('/') => rest.to_string(),
                Some(command) => {
                    if !self.command(command, &mut state, sampler, cap) {
                        break;
                    }
                    continue;
                }
                None => line,
            };
            if text.trim().is_empty() {
                continue;
            }
            state.messages.push(Message::new("user", text));
            if let Err(why) = self.turn(&mut state, session, sampler, out)? {
                state.messages.pop();
                eprintln!("sharpi: {why}");
            }
        }
        Ok(())
    }

    /// The conversation before any turn: the system message, if any.
    fn initial(&self) -> Vec<Message> {
        self.system
            .map(|s| vec![Message::new("system", s)])
            .unwrap_or_default()
    }

    /// Runs one `/command`; false for `/exit`.
    fn command(&self, line: &str, state: &mut State, sampler: &mut Sampler, cap: usize) -> bool {
        let (name, arg) = match line.split_once(char::is_whitespace) {
            Some((n, a)) => (n, a.trim()),
            None => (line.trim(), ""),
        };
        match (name, arg.is_empty()) {
            ("exit" | "quit", _) => return false,
            ("clear", _) => {
                // The cache keeps what it holds: the system message's
                // tokens are reused by the next turn.
                state.messages = self.initial();
                sampler.reset();
                eprintln!("sharpi: conversation cleared");
            }
            ("save", false) => match save(Path::new(arg), &state.messages) {
                Ok(()) => eprintln!("sharpi: {} messages saved to {arg}", state.messages.len()),
                Err(e) => eprintln!("sharpi: /save {arg}: {e}"),
            },
            ("load", false) => match load(Path::new(arg), cap) {
                Ok(messages) => {
                    eprintln!("sharpi: {} messages loaded from {arg}", messages.len());
                    state.messages = messages;
                    sampler.reset();
                }
                Err(e) => eprintln!("sharpi: /load {arg}: {e}"),
            },
            _ => eprintln!("sharpi: unknown command /{line}; {HELP}"),
        }
        true
    }

    /// Sends the conversation's last user message: renders the whole
    /// conversation, rewinds the session to what its cache shares with the
    /// render, prefills the rest and generates the answer, which joins the
    /// conversation. `Ok(Err(why))`: the turn could not be sent.
    fn turn(
        &self,
        state: &mut State,
        session: &mut Session,
        sampler: &mut Sampler,
        out: &mut dyn Write,
    ) -> Result<Result<(), String>, CliError> {
        let n_ctx = session.n_ctx();
        let rendered = prompt::conversation(
            self.tok,
            self.template,
            &state.messages,
            self.args.parse_special,
            n_ctx,
        );
        let prompt = match rendered {
            Ok(p) => p,
            Err(e) => return Ok(Err(format!("{e} (/clear starts over)"))),
        };
        if prompt.tokens.len() >= n_ctx {
            return Ok(Err(format!(
                "the conversation is {} tokens, the context holds {n_ctx}: /clear starts over \
                 (or give a larger -c)",
                prompt.tokens.len()
            )));
        }
        // At least one token is prefilled, for the logits of the answer's
        // first token.
        let keep = common_prefix(&state.cached, &prompt.tokens).min(prompt.tokens.len() - 1);
        session.rewind(keep);
        state.cached.truncate(keep);
        let new = &prompt.tokens[keep..];
        for &t in new {
            sampler.accept(t);
        }
        let answering = Answering::start();
        let Outcome {
            generated,
            stop,
            timings,
            ..
        } = generate(
            session,
            sampler,
            self.tok,
            new,
            self.args,
            self.stops,
            Some(&answering),
            out,
        )?;
        drop(answering);
        state.cached.extend_from_slice(new);
        state.cached.extend_from_slice(&generated);
        state.cached.truncate(session.pos());
        let answer = self.tok.decode(&generated, false)?;
        state.messages.push(Message::new("assistant", answer));
        state.turns += 1;
        let why = match stop {
            Stop::Eog(_) => "",
            Stop::Length => ", -n reached",
            Stop::Context => ", the context is full",
            Stop::Reverse(_) => ", reverse prompt",
            Stop::Interrupted => ", interrupted",
        };
        eprintln!(
            "[turn {}: prefill {} tokens ({keep} reused from the cache), decode {} tokens, \
             {:.1} tokens/s{why}]",
            state.turns,
            new.len(),
            timings.decode_tokens,
            timings.decode_per_second()
        );
        Ok(Ok(()))
    }
}

/// How many leading tokens `a` and `b` share.
fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Reads one turn: a line of at most `cap` bytes (its end of line
/// dropped), joined with the next while it ends in `\`.
fn read_turn(input: &mut dyn BufRead, cap: usize) -> std::io::Result<Input> {
    let mut text: Vec<u8> = Vec::new();
    let mut any = false;
    loop {
        let room = cap.saturating_sub(text.len()) as u64 + 1;
        let n = Read::take(&mut *input, room).read_until(b'\n', &mut text)?;
        if n == 0 {
            if !any {
                return Ok(Input::Eof);
            }
            break;
        }
        any = true;
        let ended = text.last() == Some(&b'\n');
        if !ended && text.len() > cap {
            skip_line(input)?;
            return Ok(Input::Refused(format!(
                "the input is over {cap} bytes, more than the context can hold"
            )));
        }
        while matches!(text.last(), Some(b'\n' | b'\r')) {
            text.pop();
        }
        if !ended || text.last() != Some(&b'\\') {
            break;
        }
        text.pop();
        text.push(b'\n');
    }
    match String::from_utf8(text) {
        Ok(t) => Ok(Input::Text(t)),
        Err(e) => Ok(Input::Refused(format!(
            "the input is not UTF-8 (at byte {})",
            e.utf8_error().valid_up_to()
        ))),
    }
}

/// Consumes input up to and including the next end of line.
fn skip_line(input: &mut dyn BufRead) -> std::io::Result<()> {
    loop {
        let buf = input.fill_buf()?;
        if buf.is_empty() {
            return Ok(());
        }
        match buf.iter().position(|&b| b == b'\n') {
            Some(i) => {
                input.consume(i + 1);
                return Ok(());
            }
            None => {
                let n = buf.len();
                input.consume(n);
            }
        }
    }
}

/// Writes the conversation as a JSON list of `{"role", "content"}`.
fn save(path: &Path, messages: &[Message]) -> Result<(), String> {
    let saved: Vec<Saved> = messages
        .iter()
        .map(|m| Saved {
            role: m.role.clone(),
            content: m.content.clone(),
        })
        .collect();
    let mut json = serde_json::to_string_pretty(&saved).map_err(|e| e.to_string())?;
    json.push('\n');
    std::fs::write(path, json).map_err(|e| e.to_string())
}

/// Reads a conversation `/save` wrote (any JSON list of `{"role",
/// "content"}` strings), refusing a file past what a context whose text
/// holds `cap` bytes could use.
fn load(path: &Path, cap: usize) -> Result<Vec<Message>, String> {
    // JSON escapes can take six bytes for one.
    let limit = (cap as u64).saturating_mul(6).saturating_add(1 << 16);
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > limit {
        return Err(format!(
            "over {limit} bytes, more than the context can hold"
        ));
    }
    let saved: Vec<Saved> = serde_json::from_slice(&bytes)
        .map_err(|e| format!("not a JSON list of {{\"role\", \"content\"}} objects: {e}"))?;
    Ok(saved
        .into_iter()
        .map(|s| Message::new(s.role, s.content))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(text: &str, cap: usize) -> Vec<String> {
        let mut input = std::io::Cursor::new(text.as_bytes().to_vec());
        let mut turns = Vec::new();
        loop {
            match read_turn(&mut input, cap).unwrap() {
                Input::Eof => return turns,
                Input::Text(t) => turns.push(t),
                Input::Refused(why) => turns.push(format!("refused: {why}")),
            }
        }
    }

    #[test]
    fn turns_are_lines_joined_by_a_backslash() {
        assert_eq!(
            read_all("one\r\ntwo \\\nlines\nlast", 100),
            ["one", "two \nlines", "last"]
        );
        assert_eq!(read_all("", 100), Vec::<String>::new());
    }

    #[test]
    fn a_long_line_is_refused_and_skipped() {
        let turns = read_all("0123456789abc\nok\n", 8);
        assert!(turns[0].starts_with("refused: the input is over 8 bytes"));
        assert_eq!(turns[1], "ok");
        let turns = read_all("\u{ff}\n", 8);
        assert_eq!(turns, ["ÿ"]);
        let mut bad = std::io::Cursor::new(vec![0xffu8, b'\n']);
        assert!(matches!(read_turn(&mut bad, 8).unwrap(), Input::Refused(_)));
    }

    #[test]
    fn common_prefix_counts_shared_tokens() {
        assert_eq!(common_prefix(&[1, 2, 3], &[1, 2, 4, 5]), 2);
        assert_eq!(common_prefix(&[], &[1]), 0);
        assert_eq!(common_prefix(&[1, 2], &[1, 2, 3]), 2);
    }

    #[test]
    fn save_and_load_round_trip() {
        let dir = std::env::temp_dir().join(format!("sharpi-chat-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.json");
        let messages = vec![
            Message::new("system", "be brief"),
            Message::new("user", "a \"quoted\"\nline"),
            Message::new("assistant", "ok"),
        ];
        save(&path, &messages).unwrap();
        assert_eq!(load(&path, 1000).unwrap(), messages);
        std::fs::write(&path, vec![b' '; 70_000]).unwrap();
        assert!(load(&path, 1).unwrap_err().contains("bytes"));
        std::fs::write(&path, "{\"role\": 1}").unwrap();
        assert!(load(&path, 1000)
            .unwrap_err()
            .starts_with("not a JSON list"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
