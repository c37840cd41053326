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

        Ok(ByteLevelBpe {
            pre: pre_tokenizer(spec)?,
            model,
            missing,
            ignore_merges: spec.ignore_merges,
        })
    }

    /// Appends the ids of `text` (plain text, no special tokens) to `out`,
    /// stopping early, between windows ([`pieces_in_windows`]), once `out`
    /// holds more than `limit` ids; returns whether all of `text` was
    /// tokenized.
    pub(crate) fn tokenize(
        &self,
        text: &str,
        out: &mut Vec<TokenId>,
        limit: usize,
    ) -> Result<bool, TokenizerError> {
        pieces_in_windows(&self.pre, text, WINDOW, &mut |pieces| {
            for piece in pieces {
                self.piece(piece, out)?;
            }
            Ok(out.len() <= limit)
        })
    }

    /// Appends the ids of one pre-tokenized piece.
    fn piece(&self, piece: &str, out: &mut Vec<TokenId>) -> Result<(), TokenizerError> {
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
        Ok(())
    }

    fn merge(&self, word: &str, out: &mut Vec<TokenId>) -> Result<(), TokenizerError> {
        let tokens = self.model.tokenize(word).map_err(TokenizerError::backend)?;
        out.extend(tokens.iter().map(|t| t.id));
        Ok(())
    }
}

/// The pre-tokenizer of `spec`: its expressions as isolating splits, then
/// GPT-2's byte-to-character mapping.
pub(crate) fn pre_tokenizer(spec: &PreSpec) -> Result<Sequence, TokenizerError> {
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
    Ok(Sequence::new(steps))
}

/// Bytes of text pre-tokenized at once.
pub(crate) const WINDOW: usize = 64 << 10;

/// Pre-tokenizes `text` a window of about `window` bytes at a time, giving
/// each window's pieces (byte-mapped) to `emit` in order, which says
/// whether to go on; returns whether all of `text` was given.
///
/// The `tokenizers` crate's pre-tokenizer takes ~100 bytes of memory per
/// input byte; in windows, memory follows the window, not the text. A
/// window's pieces are kept up to its last piece boundary at least half a
/// window before its end and not inside a run of white space, and the
/// next window starts there. The expressions decide a boundary from the
/// runs of one character class (letters, digits, spaces, others) around
/// it and the character after them, so such a boundary is one the whole
/// text has (inside a run of white space, `\s*[\r\n]+` backtracks to the
/// run's last newline, wherever the run ends); a window with no such
/// boundary doubles. A text shorter
/// than a window is one window, as before. `windows_split_as_the_whole_text`
/// checks this for every pre-tokenizer of the table.
pub(crate) fn pieces_in_windows(
    pre: &Sequence,
    text: &str,
    window: usize,
    emit: &mut dyn FnMut(&mut dyn Iterator<Item = &str>) -> Result<bool, TokenizerError>,
) -> Result<bool, TokenizerError> {
    let mut start = 0;
    while start < text.len() {
        let mut w = window.max(8);
        loop {
            let end = floor_char_boundary(text, start.saturating_add(w));
            if end <= start {
                w = w.saturating_mul(2);
                continue;
            }
            let last = end >= text.len();
            let chunk = &text[start..end];
            let mut pts = PreTokenizedString::from(chunk);
            pre.pre_tokenize(&mut pts)
                .map_err(TokenizerError::backend)?;
            let splits = pts.get_splits(OffsetReferential::Original, OffsetType::Byte);
            let keep = if last {
                Some(chunk.len())
            } else {
                let safe = chunk.len().saturating_sub(w / 2);
                // Not inside a run of white space: where `\s+(?!\S)` and
                // `\s*[\r\n]+` end depends on where the whole run ends.
                let inside_spaces = |a: usize| {
                    let before = chunk[..a].chars().next_back();
                    let after = chunk[a..].chars().next();
                    before.is_some_and(char::is_whitespace)
                        && after.is_some_and(char::is_whitespace)
                };
                splits
                    .iter()
                    .map(|(_, (a, _), _)| *a)
                    .filter(|&a| a > 0 && a <= safe && !inside_spaces(a))
                    .max()
            };
            let Some(keep) = keep else {
                w = w.saturating_mul(2);
                continue;
            };
            let mut kept = splits
                .iter()
                .filter(|(_, (_, b), _)| *b <= keep)
                .map(|(p, _, _)| *p);
            if !emit(&mut kept)? {
                return Ok(start + keep >= text.len());
            }
            start += keep;
            break;
        }
    }
    Ok(true)
}

/// The largest char boundary of `text` at or below `i` (its length past it).
fn floor_char_boundary(text: &str, i: usize) -> usize {
    if i >= text.len() {
        return text.len();
    }
    let mut i = i;
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
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

    /// Pieces of `text` in windows of `window` bytes.
    fn windowed(pre: &Sequence, text: &str, window: usize) -> Vec<String> {
        let mut all = Vec::new();
        let done = pieces_in_windows(pre, text, window, &mut |pieces| {
            all.extend(pieces.map(str::to_string));
            Ok(true)
        })
        .unwrap();
        assert!(done);
        all
    }

    #[test]
    fn windows_split_as_the_whole_text() {
        // Texts mixing every class the expressions tell apart, with long
        // runs of each: letters (ASCII and not), digits, spaces, newlines,
        // tabs, punctuation, apostrophes, emoji.
        let atoms = [
            "a", "Zq", "é", "中文", "1", "234", " ", "  ", "\n", "\r\n", "\t", "!", "'s", "'LL",
            "...", "😀", "-", " ,", "\u{a0}", "x1", "٣",
        ];
        let mut seed = 0x5eed_u64;
        for name in crate::tokenizer::pre::TABLE.iter().map(|(n, _)| *n) {
            let spec = crate::tokenizer::pre::lookup(name).unwrap();
            let pre = pre_tokenizer(&spec).unwrap();
            for case in 0..12 {
                let n = 50 + (crate::synth::rng::splitmix64(&mut seed) % 400) as usize;
                let mut text = String::new();
                for _ in 0..n {
                    let r = crate::synth::rng::splitmix64(&mut seed);
                    let atom = atoms[(r % atoms.len() as u64) as usize];
                    // Now and then a long run of one atom.
                    let times = if r.is_multiple_of(17) {
                        1 + (r >> 32) % 40
                    } else {
                        1
                    };
                    for _ in 0..times {
                        text.push_str(atom);
                    }
                }
                let whole = windowed(&pre, &text, usize::MAX);
                for window in [8, 16, 37, 64, 200] {
                    let got = windowed(&pre, &text, window);
                    if let Some(i) =
                        (0..got.len().max(whole.len())).find(|&i| got.get(i) != whole.get(i))
                    {
                        let lo = i.saturating_sub(3);
                        panic!(
                            "{name}, case {case}, window {window}: piece {i}: {:?} vs whole {:?}",
                            &got[lo..(i + 3).min(got.len())],
                            &whole[lo..(i + 3).min(whole.len())]
                        );
                    }
                }
            }
        }
    }

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
