//! Splitting input text at special tokens before tokenization, as llama.cpp's
//! `tokenizer_st_partition` does.
//!
//! Special tokens are the control, user-defined and unknown ones. Each is
//! taken in turn, longest text first (equal lengths in id order), and every
//! occurrence in the text not yet claimed becomes that token. Without
//! `parse_special`, control and unknown tokens are skipped (their text stays
//! plain text); user-defined tokens are always matched. A token with the
//! `LSTRIP`/`RSTRIP` attribute eats the whitespace before/after it.

use std::ops::Range;

use aho_corasick::AhoCorasick;

use super::error::TokenizerError;
use super::vocab::{TokenAttr, TokenId, Vocab};

/// A piece of the input: text still to tokenize, or a special token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fragment {
    Text(Range<usize>),
    Token(TokenId),
}

/// The special tokens of a vocabulary, in matching order, with an automaton
/// that finds which of them occur in a text at all.
pub(crate) struct SpecialMatcher {
    /// Ids, longest text first.
    ids: Vec<TokenId>,
    /// Pattern `i` is the text of `ids[i]`.
    finder: AhoCorasick,
}

impl SpecialMatcher {
    pub(crate) fn new(vocab: &Vocab) -> Result<SpecialMatcher, TokenizerError> {
        let special = TokenAttr::CONTROL | TokenAttr::USER_DEFINED | TokenAttr::UNKNOWN;
        let mut ids: Vec<TokenId> = vocab
            .iter()
            .filter(|&(_, id)| vocab.attr(id).intersects(special))
            .map(|(_, id)| id)
            .collect();
        ids.sort_by_key(|&id| std::cmp::Reverse(vocab.text(id).len()));
        let finder = AhoCorasick::new(ids.iter().map(|&id| vocab.text(id)))
            .map_err(TokenizerError::backend)?;
        Ok(SpecialMatcher { ids, finder })
    }

    /// The special tokens, in matching order.
    pub(crate) fn ids(&self) -> &[TokenId] {
        &self.ids
    }

    /// `text` split into plain-text fragments and special tokens.
    pub(crate) fn partition(
        &self,
        vocab: &Vocab,
        text: &str,
        parse_special: bool,
    ) -> Vec<Fragment> {
        if text.is_empty() {
            return Vec::new();
        }
        let mut fragments = vec![Fragment::Text(0..text.len())];
        // Only tokens that occur somewhere can split anything: fragments are
        // substrings of the text.
        let mut present = vec![false; self.ids.len()];
        for m in self.finder.find_overlapping_iter(text) {
            present[m.pattern().as_usize()] = true;
        }
        for (i, &id) in self.ids.iter().enumerate() {
            if !present[i] {
                continue;
            }
            let attr = vocab.attr(id);
            if !parse_special && attr.intersects(TokenAttr::CONTROL | TokenAttr::UNKNOWN) {
                continue;
            }
            let needle = vocab.text(id);
            let mut next = Vec::with_capacity(fragments.len() + 2);
            for f in fragments {
                match f {
                    Fragment::Token(_) => next.push(f),
                    Fragment::Text(r) => split_at_token(text, r, needle, id, attr, &mut next),
                }
            }
            fragments = next;
        }
        fragments
    }
}

/// Splits `text[range]` at every occurrence of `needle`.
fn split_at_token(
    text: &str,
    range: Range<usize>,
    needle: &str,
    id: TokenId,
    attr: TokenAttr,
    out: &mut Vec<Fragment>,
) {
    let bytes = text.as_bytes();
    let (mut base, end) = (range.start, range.end);
    loop {
        let Some(found) = text[base..end].find(needle) else {
            out.push(Fragment::Text(base..end));
            return;
        };
        let m = base + found;
        let mut left_end = m;
        if attr.intersects(TokenAttr::LSTRIP) {
            while left_end > base && is_c_space(bytes[left_end - 1]) {
                left_end -= 1;
            }
        }
        if left_end > base {
            out.push(Fragment::Text(base..left_end));
        }
        out.push(Fragment::Token(id));
        base = m + needle.len();
        if attr.intersects(TokenAttr::RSTRIP) {
            while base < end && is_c_space(bytes[base]) {
                base += 1;
            }
        }
        if base >= end {
            return;
        }
    }
}

/// C's `isspace` in the "C" locale.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
}
