//! Byte-level BPE (`tokenizer.ggml.model = "gpt2"`) on the `tokenizers`
//! crate: the pre-tokenizer table's expressions as `Split`s, then GPT-2's
//! byte-to-character mapping, then BPE over the file's merges.
//!
//! The merge loop is the same as llama.cpp's (lowest rank first, leftmost
//! first among equal ranks). Where the crate and llama.cpp differ, this
//! module does what llama.cpp does:
//! - a merge listed twice keeps its first rank (the crate keeps the last);
//! - a byte whose character is not in the vocabulary (SmolLM2 lacks 21 of
//!   the 256) is dropped, and the characters on either side of it do not
//!   merge with each other (the crate would drop it and merge across);
//! - a merge whose parts or result are not tokens is an error at load time
//!   (llama.cpp would merge and then drop the result's bytes).

use tokenizers::models::bpe::{Vocab as BpeVocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{
    Model, OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer, SplitDelimiterBehavior,
};

use super::error::TokenizerError;
use super::pre::PreSpec;
use super::vocab::{TokenId, Vocab};
use crate::gguf::Value;

pub(crate) const MERGES_KEY: &str = "tokenizer.ggml.merges";

pub(crate) struct ByteLevelBpe {
    pre: Sequence,
    model: BPE,
    /// Byte characters that are not tokens.
    missing: Vec<char>,
    ignore_merges: bool,
}

impl ByteLevelBpe {
    pub(crate) fn new(
        vocab: &Vocab,
        merges: &[Value],
        spec: &PreSpec,
    ) -> Result<ByteLevelBpe, TokenizerError> {
        let missing = (0..=255u8)
            .map(byte_char)
            .filter(|c| vocab.id(c.encode_utf8(&mut [0; 4])).is_none())
            .collect();

        let mut seen = std::collections::HashSet::with_capacity(merges.len());
        let mut pairs = Vec::with_capacity(merges.len());
        for (index, v) in merges.iter().enumerate() {
            let merge = v.as_str().ok_or(TokenizerError::BadArrayItem {
                key: MERGES_KEY,
                index,
                expected: "string",
                found: v.type_name(),
            })?;
            // llama.cpp splits at the first space after the first byte.
            let pos = merge
                .bytes()
                .skip(1)
                .position(|b| b == b' ')
                .map(|p| p + 1)
                .ok_or_else(|| TokenizerError::BadMerge {
                    index,
                    merge: merge.to_string(),
                })?;
            let (a, b) = (&merge[..pos], &merge[pos + 1..]);
            let known = |t: &str| vocab.id(t).is_some();
            if !known(a) || !known(b) || !known(&format!("{a}{b}")) {
                return Err(TokenizerError::MergeOutOfVocab {
                    index,
                    merge: merge.to_string(),
                });
            }
            if seen.insert((a, b)) {
                pairs.push((a.to_string(), b.to_string()));
            }
        }

        let bpe_vocab: BpeVocab = vocab.iter().map(|(t, id)| (t.to_string(), id)).collect();
        let model = BPE::builder()
            .vocab_and_merges(bpe_vocab, pairs)
            .ignore_merges(spec.ignore_merges)
            .build()
            .map_err(TokenizerError::backend)?;

        let mut steps = Vec::with_capacity(spec.regexes.len() + 1);
        for r in spec.regexes {
            let split = Split::new(
                SplitPattern::Regex(super::pre::unicode_15_1(r)),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .map_err(TokenizerError::backend)?;
            steps.push(PreTokenizerWrapper::Split(split));
        }
        // The expressions did the splitting; ByteLevel only maps bytes.
        steps.push(PreTokenizerWrapper::ByteLevel(ByteLevel::new(
            false, false, false,
        )));
        Ok(ByteLevelBpe {
            pre: Sequence::new(steps),
            model,
            missing,
            ignore_merges: spec.ignore_merges,
        })
    }

    /// Appends the ids of `text` (plain text, no special tokens) to `out`.
    pub(crate) fn tokenize(
        &self,
        text: &str,
        out: &mut Vec<TokenId>,
    ) -> Result<(), TokenizerError> {
        let mut pts = PreTokenizedString::from(text);
        self.pre
            .pre_tokenize(&mut pts)
            .map_err(TokenizerError::backend)?;
        for (piece, _, _) in pts.get_splits(OffsetReferential::Original, OffsetType::Byte) {
            let is_missing = |c: char| self.missing.contains(&c);
            if !piece.contains(is_missing) {
                self.merge(piece, out)?;
            } else if let Some(id) = self.model.token_to_id(piece).filter(|_| self.ignore_merges) {
                out.push(id);
            } else {
                // A missing byte is dropped and separates what is around it.
                for part in piece.split(is_missing).filter(|p| !p.is_empty()) {
                    self.merge(part, out)?;
                }
            }
        }
        Ok(())
    }

    fn merge(&self, word: &str, out: &mut Vec<TokenId>) -> Result<(), TokenizerError> {
        let tokens = self.model.tokenize(word).map_err(TokenizerError::backend)?;
        out.extend(tokens.iter().map(|t| t.id));
        Ok(())
    }
}

/// GPT-2's printable stand-in for byte `b`: printable Latin-1 bytes stand
/// for themselves, the others map in order to U+0100 onwards.
pub(crate) fn byte_char(b: u8) -> char {
    let printable = |x: u8| matches!(x, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(b) {
        return char::from(b);
    }
    let rank = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(0x100 + rank).expect("U+0100..U+0143 are chars")
}

/// The inverse of [`byte_char`]: the byte a character stands for.
pub(crate) fn char_byte(c: char) -> Option<u8> {
    let c = c as u32;
    match c {
        0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF => Some(c as u8),
        0x100..=0x143 => {
            let rank = (c - 0x100) as usize;
            (0..=255u8)
                .filter(|&x| !matches!(x, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF))
                .nth(rank)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_chars_are_gpt2s() {
        assert_eq!(byte_char(b' '), 'Ġ');
        assert_eq!(byte_char(b'\n'), 'Ċ');
        assert_eq!(byte_char(0), '\u{100}');
        assert_eq!(byte_char(b'a'), 'a');
        assert_eq!(byte_char(0xAD), '\u{143}');
        let mut all: Vec<char> = (0..=255u8).map(byte_char).collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 256);
        for b in 0..=255u8 {
            assert_eq!(char_byte(byte_char(b)), Some(b));
        }
        assert_eq!(char_byte('\u{144}'), None);
        assert_eq!(char_byte(' '), None);
    }
}
