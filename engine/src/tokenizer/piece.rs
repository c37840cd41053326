//! Token -> bytes: each token's piece (llama.cpp's `token_to_piece`) and
//! whole-sequence detokenization (`llama_detokenize`).

use super::bpe::char_byte;
use super::vocab::{TokenAttr, TokenId, Vocab};
use super::ModelKind;

/// The piece of token `id` as llama.cpp renders it with `special = true`:
/// control, unknown and user-defined tokens as their text; normal tokens
/// with U+2581 turned back into spaces (SentencePiece) or GPT-2's byte
/// characters turned back into bytes (byte-level BPE); byte tokens
/// (`<0xNN>`) as the byte; anything else (unused, undefined) as nothing.
pub(crate) fn render(vocab: &Vocab, kind: ModelKind, id: TokenId) -> Box<[u8]> {
    let attr = vocab.attr(id);
    let text = vocab.text(id);
    if attr.intersects(TokenAttr::UNKNOWN | TokenAttr::CONTROL | TokenAttr::USER_DEFINED) {
        return text.as_bytes().into();
    }
    if attr.intersects(TokenAttr::NORMAL) {
        return match kind {
            ModelKind::Spm => text.replace('\u{2581}', " ").into_bytes().into(),
            ModelKind::Bpe => byte_level_decode(text).into(),
        };
    }
    if attr.intersects(TokenAttr::BYTE) {
        return [byte_of(text)].into();
    }
    Box::default()
}

/// The byte a `<0xNN>` token stands for (llama.cpp parses the two characters
/// after `<0x` as hex; what it cannot parse reads as 0).
fn byte_of(text: &str) -> u8 {
    text.get(3..5)
        .and_then(|h| u8::from_str_radix(h, 16).ok())
        .unwrap_or(0)
}

/// GPT-2 byte characters back to bytes. A character that stands for no
/// byte is rendered as llama.cpp does: `[UNK_BYTE_0x<its UTF-8 in hex><the
/// whole token text>]`.
fn byte_level_decode(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for c in text.chars() {
        match char_byte(c) {
            Some(b) => out.push(b),
            None => {
                out.extend_from_slice(b"[UNK_BYTE_0x");
                for b in c.encode_utf8(&mut [0; 4]).bytes() {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(text.as_bytes());
                out.push(b']');
            }
        }
    }
    out
}

/// How to turn a token sequence into bytes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Detok {
    /// Drop a leading BOS and a trailing EOS when the model adds them.
    pub remove_special: bool,
    /// Render control and unknown tokens (otherwise they render as nothing).
    pub unparse_special: bool,
    /// Apply llama.cpp's clean-up of spaces before punctuation (when the
    /// model asks for it).
    pub clean_spaces: bool,
}

/// The tokenizer state detokenization needs.
pub(crate) struct DetokContext<'a> {
    pub pieces: &'a [Box<[u8]>],
    pub attrs: &'a [TokenAttr],
    pub add_space_prefix: bool,
    pub add_bos: bool,
    pub add_eos: bool,
    pub bos: Option<TokenId>,
    pub eos: Option<TokenId>,
    pub model_clean_spaces: bool,
}

impl<'a> DetokContext<'a> {
    /// The piece of `id` (`special`: render control and unknown tokens).
    /// `id` must be in range.
    pub(crate) fn piece(&self, id: TokenId, special: bool) -> &'a [u8] {
        let attr = self.attrs[id as usize];
        if !special && attr.intersects(TokenAttr::UNKNOWN | TokenAttr::CONTROL) {
            return &[];
        }
        &self.pieces[id as usize]
    }

    /// llama.cpp's `detokenize`; every id must be in range.
    pub(crate) fn detokenize(&self, mut ids: &[TokenId], how: Detok) -> Vec<u8> {
        // A model that adds a space before the text loses it again here.
        let mut remove_space = self.add_space_prefix;
        if how.remove_special && self.add_bos {
            if let (Some(&first), Some(bos)) = (ids.first(), self.bos) {
                if first == bos {
                    remove_space = false;
                    ids = &ids[1..];
                }
            }
        }
        if how.remove_special && self.add_eos {
            if let (Some(&last), Some(eos)) = (ids.last(), self.eos) {
                if last == eos {
                    ids = &ids[..ids.len() - 1];
                }
            }
        }
        let mut out = Vec::new();
        for &id in ids {
            let mut piece = self.piece(id, how.unparse_special);
            if remove_space {
                if let Some(rest) = piece.strip_prefix(b" ") {
                    piece = rest;
                }
            }
            remove_space = false;
            out.extend_from_slice(piece);
        }
        if how.clean_spaces && self.model_clean_spaces {
            clean_spaces(&mut out);
        }
        out
    }
}

/// llama.cpp's three clean-up passes, in place as llama.cpp runs them: drop
/// the space before `?!.,`; drop the spaces around a lone `'`; drop the
/// space before `'s`, `'m`, `'re`, `'ve`.
fn clean_spaces(text: &mut Vec<u8>) {
    // Pass 1: " ?", " !", " .", " ,".
    let n = text.len();
    let mut total = usize::from(n > 0);
    for i in 1..n {
        let x = text[i];
        if text[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            total -= 1;
        }
        text[total] = x;
        total += 1;
    }
    text.truncate(total);
    // Pass 2: " ' " -> "'". The byte after the quote is zeroed, which the
    // next step reads as its predecessor.
    let n = text.len();
    let mut total = usize::from(n > 0);
    let mut i = 1;
    while i < n {
        let x = text[i];
        if x == b'\'' && i + 1 < n && text[i - 1] == b' ' && text[i + 1] == b' ' {
            total -= 1;
            i += 1;
            text[i] = 0;
        }
        text[total] = x;
        total += 1;
        i += 1;
    }
    text.truncate(total);
    // Pass 3: " 's", " 'm", " 're", " 've".
    let n = text.len();
    let mut total = usize::from(n > 0);
    for i in 1..n {
        let x = text[i];
        if text[i - 1] == b' ' && x == b'\'' && i + 1 < n {
            let x1 = text[i + 1];
            let re_ve = i + 2 < n && matches!((x1, text[i + 2]), (b'r', b'e') | (b'v', b'e'));
            if matches!(x1, b's' | b'm') || re_ve {
                total -= 1;
            }
        }
        text[total] = x;
        total += 1;
    }
    text.truncate(total);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clean(s: &str) -> String {
        let mut v = s.as_bytes().to_vec();
        clean_spaces(&mut v);
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn clean_spaces_follows_llama_cpp() {
        assert_eq!(clean("Hello , world !"), "Hello, world!");
        assert_eq!(clean("it ' s"), "it's");
        assert_eq!(clean("it 's I 'm we 're you 've"), "it's I'm we're you've");
        assert_eq!(clean("don 't they 'll"), "don 't they 'll");
        assert_eq!(clean(""), "");
        assert_eq!(clean(" ."), ".");
        // The zeroed byte after a removed quote hides the next quote's space.
        assert_eq!(clean("a ' ' b"), "a'' b");
    }

    #[test]
    fn byte_tokens_parse_hex() {
        assert_eq!(byte_of("<0x0A>"), 10);
        assert_eq!(byte_of("<0xFF>"), 255);
        assert_eq!(byte_of("<0x"), 0);
    }
}
