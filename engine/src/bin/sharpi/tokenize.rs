//! `sharpi tokenize -m MODEL -p TEXT`: a text's tokens, printed as
//! llama.cpp's llama-tokenize prints them (`<id> -> '<piece>'` per token,
//! or `[1, 2, 3]` with `--ids`), with its flags. Only the tokenizer is
//! built; the weights are never read.
//!
//! One difference, on purpose: special-token texts written in the text
//! (`<|im_start|>`) stay text unless `--special`; llama-tokenize parses
//! them unless `--no-parse-special`.

use std::io::{Read, Write};
use std::path::PathBuf;

use clap::{ArgGroup, Args};

use super::CliError;
use engine::tokenizer::Tokenizer;

/// The longest text tokenized, in bytes: longer input is refused before it
/// is read whole (a file or stdin is read at most this far, plus a byte).
pub const MAX_TEXT_BYTES: usize = 16 << 20;

/// The options of `sharpi tokenize` (llama-tokenize's names).
#[derive(Args, Clone, Debug)]
#[command(group(
    ArgGroup::new("source")
        .required(true)
        .args(["prompt", "file", "stdin"])
))]
pub struct TokenizeArgs {
    /// The GGUF model whose tokenizer to use (its weights are not read).
    #[arg(short = 'm', long = "model", value_name = "MODEL")]
    pub model: PathBuf,
    /// The text to tokenize.
    #[arg(short = 'p', long = "prompt", value_name = "TEXT")]
    pub prompt: Option<String>,
    /// Read the text from FILE.
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Read the text from standard input.
    #[arg(long)]
    pub stdin: bool,
    /// Print only the ids, as `[1, 2, 3]` (parseable by Python).
    #[arg(long)]
    pub ids: bool,
    /// Print the number of tokens last: `Total number of tokens: N`.
    #[arg(long = "show-count")]
    pub show_count: bool,
    /// Add no BOS token, even where the model's metadata asks for one (nor
    /// the EOS that goes with it, as llama-tokenize).
    #[arg(long = "no-bos")]
    pub no_bos: bool,
    /// Parse special-token texts in the text (`<|im_start|>`, `<bos>`) as
    /// those tokens. Off by default: they stay text, tokenized as the
    /// characters they are. llama-tokenize parses them by default; sharpi
    /// does not, so that text from elsewhere cannot forge control tokens.
    #[arg(long, conflicts_with = "no_parse_special")]
    pub special: bool,
    /// Keep special-token texts as text: sharpi's default, accepted for
    /// llama-tokenize's command lines (where parsing is the default).
    #[arg(long = "no-parse-special")]
    pub no_parse_special: bool,
    /// Process escape sequences (\n, \r, \t, \', \", \\, \xHH) in the text
    /// first. llama-tokenize does by default; sharpi tokenizes the text as
    /// it is unless -e.
    #[arg(short = 'e', long = "escape", conflicts_with = "no_escape")]
    pub escape: bool,
    /// Leave escape sequences as they are: sharpi's default, accepted for
    /// llama-tokenize's command lines.
    #[arg(long = "no-escape")]
    pub no_escape: bool,
    /// Accepted for llama-tokenize's command lines: sharpi prints nothing
    /// on stderr while loading.
    #[arg(long = "log-disable")]
    pub log_disable: bool,
}

/// Tokenizes the text and writes the tokens to `out`.
pub fn run(args: &TokenizeArgs, out: &mut dyn Write) -> Result<(), CliError> {
    // A missing prompt file is named before the model is read, as
    // llama-tokenize does; stdin is read after it.
    let given = match (&args.prompt, &args.file) {
        (Some(p), _) => Some(checked("the text of -p", p.clone())?),
        (None, Some(f)) => Some(read_capped(
            std::fs::File::open(f).map_err(|e| CliError::Usage(format!("{}: {e}", f.display())))?,
            &f.display().to_string(),
        )?),
        (None, None) => None,
    };
    let file = super::open_model(&args.model)?;
    let tok = Tokenizer::from_gguf(&file)?;
    let text = match given {
        Some(t) => t,
        None => read_capped(std::io::stdin().lock(), "standard input")?,
    };
    let text = if args.escape {
        super::escape::unescape(&text)
    } else {
        text
    };
    // llama-tokenize's add_special is "the model adds a BOS, and not
    // --no-bos": an EOS comes only with a BOS.
    let add_special = tok.add_bos() && !args.no_bos;
    let ids = tok.encode(&text, add_special, args.special)?;
    if args.ids {
        write_ids(&ids, out)?;
    } else {
        write_pieces(&tok, &ids, out)?;
    }
    if args.show_count {
        writeln!(out, "Total number of tokens: {}", ids.len())?;
    }
    Ok(())
}

/// `[1, 2, 3]` and a newline (`[]` for none).
pub fn write_ids(ids: &[u32], out: &mut dyn Write) -> std::io::Result<()> {
    out.write_all(b"[")?;
    for (i, id) in ids.iter().enumerate() {
        if i > 0 {
            out.write_all(b", ")?;
        }
        write!(out, "{id}")?;
    }
    out.write_all(b"]\n")
}

/// One line per token: the id right-aligned in 6 columns, then the piece
/// in quotes, its bytes as they are (control tokens as their text), as
/// llama-tokenize prints them.
pub fn write_pieces(tok: &Tokenizer, ids: &[u32], out: &mut dyn Write) -> Result<(), CliError> {
    for &id in ids {
        write!(out, "{id:>6} -> '")?;
        out.write_all(tok.token_to_piece(id, true)?)?;
        out.write_all(b"'\n")?;
    }
    Ok(())
}

/// `text`, unless it is longer than [`MAX_TEXT_BYTES`].
fn checked(what: &str, text: String) -> Result<String, CliError> {
    if text.len() > MAX_TEXT_BYTES {
        return Err(too_long(what));
    }
    Ok(text)
}

fn too_long(what: &str) -> CliError {
    CliError::Usage(format!(
        "{what} is longer than {MAX_TEXT_BYTES} bytes (16 MiB), the most sharpi tokenize takes"
    ))
}

/// At most [`MAX_TEXT_BYTES`] of UTF-8 text from `src` (named `what` in
/// errors): longer input is refused after reading one byte past the bound.
fn read_capped(src: impl Read, what: &str) -> Result<String, CliError> {
    let mut bytes = Vec::new();
    src.take(MAX_TEXT_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| CliError::Usage(format!("{what}: {e}")))?;
    if bytes.len() > MAX_TEXT_BYTES {
        return Err(too_long(what));
    }
    String::from_utf8(bytes).map_err(|e| {
        CliError::Usage(format!(
            "{what}: not UTF-8 text (at byte {})",
            e.utf8_error().valid_up_to()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_print_as_a_python_list() {
        let mut out = Vec::new();
        write_ids(&[1, 22, 333], &mut out).unwrap();
        assert_eq!(out, b"[1, 22, 333]\n");
        out.clear();
        write_ids(&[], &mut out).unwrap();
        assert_eq!(out, b"[]\n");
    }

    #[test]
    fn input_past_the_bound_is_refused_in_one_line() {
        let big = vec![b'a'; MAX_TEXT_BYTES + 10];
        let e = read_capped(&big[..], "standard input")
            .unwrap_err()
            .to_string();
        assert!(e.contains("longer than 16777216 bytes"), "{e}");
        assert!(!e.contains('\n'));
        let e = read_capped(&b"a\xffb"[..], "x.txt")
            .unwrap_err()
            .to_string();
        assert_eq!(e, "x.txt: not UTF-8 text (at byte 1)");
        assert_eq!(read_capped(&b"ok"[..], "x").unwrap(), "ok");
    }
}
