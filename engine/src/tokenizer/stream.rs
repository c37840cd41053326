//! Streaming detokenization: tokens in one at a time, complete UTF-8 text out.

use super::error::TokenizerError;
use super::vocab::TokenId;
use super::Tokenizer;

/// Turns tokens into text as they are generated. A token may end inside a
/// UTF-8 character (byte tokens, byte-level BPE pieces); those bytes wait
/// until the character is complete. Bytes that can never become valid UTF-8
/// come out as U+FFFD, as `String::from_utf8_lossy` would show them.
///
/// Pieces are concatenated as [`Tokenizer::token_to_piece`] gives them (no
/// leading-space removal, no clean-up).
pub struct StreamDecoder<'a> {
    tokenizer: &'a Tokenizer,
    special: bool,
    pending: Vec<u8>,
}

impl<'a> StreamDecoder<'a> {
    pub(crate) fn new(tokenizer: &'a Tokenizer, special: bool) -> StreamDecoder<'a> {
        StreamDecoder {
            tokenizer,
            special,
            pending: Vec::new(),
        }
    }

    /// Adds one token; returns the text that is now complete (possibly
    /// empty).
    pub fn push(&mut self, id: TokenId) -> Result<String, TokenizerError> {
        let piece = self.tokenizer.token_to_piece(id, self.special)?;
        self.pending.extend_from_slice(piece);
        Ok(self.take_complete())
    }

    /// Bytes held back, waiting for the rest of a character.
    pub fn pending(&self) -> &[u8] {
        &self.pending
    }

    /// Ends the stream: whatever is held back, with U+FFFD for an
    /// incomplete character.
    pub fn finish(self) -> String {
        String::from_utf8_lossy(&self.pending).into_owned()
    }

    fn take_complete(&mut self) -> String {
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    out.push_str(std::str::from_utf8(valid).expect("valid prefix"));
                    match e.error_len() {
                        // An incomplete character at the end: wait for more.
                        None => {
                            rest = after;
                            break;
                        }
                        Some(n) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &after[n..];
                        }
                    }
                }
            }
        }
        self.pending = rest.to_vec();
        out
    }
}
