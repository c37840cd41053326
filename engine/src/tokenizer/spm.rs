//! SentencePiece-style tokenization (`tokenizer.ggml.model = "llama"`), as
//! llama.cpp's `llm_tokenizer_spm` does it: start from single characters and
//! keep merging the adjacent pair whose concatenation is the vocabulary's
//! highest-scoring token (leftmost first on equal scores); characters left
//! that are not tokens fall back to their bytes' `<0xNN>` tokens.
//!
//! Why not the `tokenizers` crate: its Unigram model picks the segmentation
//! of highest total score (Viterbi), not the result of greedy merging, and
//! its BPE model needs a merge list with distinct ranks, which these files
//! do not have (equal scores must tie-break by position, not by rank).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::error::TokenizerError;
use super::vocab::{TokenId, Vocab};

#[derive(Clone, Copy)]
struct Symbol {
    prev: i32,
    next: i32,
    /// Byte range in the text.
    start: usize,
    len: usize,
}

struct Bigram {
    left: i32,
    right: i32,
    score: f32,
    size: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    /// The heap's greatest is the highest score, then the leftmost.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then(other.left.cmp(&self.left))
    }
}

/// Appends the ids of `text` (spaces already escaped as U+2581) to `out`.
pub(crate) fn tokenize(
    vocab: &Vocab,
    text: &str,
    out: &mut Vec<TokenId>,
) -> Result<(), TokenizerError> {
    let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
    for (i, (start, c)) in text.char_indices().enumerate() {
        let end = start + c.len_utf8();
        symbols.push(Symbol {
            prev: i as i32 - 1,
            next: if end == text.len() { -1 } else { i as i32 + 1 },
            start,
            len: c.len_utf8(),
        });
    }
    if symbols.is_empty() {
        return Ok(());
    }

    let mut session = Session {
        vocab,
        text,
        symbols,
        queue: BinaryHeap::new(),
    };
    for i in 1..session.symbols.len() as i32 {
        session.try_add_bigram(i - 1, i);
    }
    while let Some(b) = session.queue.pop() {
        let (l, r) = (b.left as usize, b.right as usize);
        let (left, right) = (session.symbols[l], session.symbols[r]);
        // Skip a pair one of whose symbols has merged since it was queued.
        if left.len == 0 || right.len == 0 || left.len + right.len != b.size {
            continue;
        }
        session.symbols[l].len += right.len;
        session.symbols[r].len = 0;
        session.symbols[l].next = right.next;
        if right.next >= 0 {
            session.symbols[right.next as usize].prev = b.left;
        }
        session.try_add_bigram(left.prev, b.left);
        session.try_add_bigram(b.left, right.next);
    }

    let mut i = 0i32;
    while i != -1 {
        session.resegment(i as usize, out)?;
        i = session.symbols[i as usize].next;
    }
    Ok(())
}

struct Session<'a> {
    vocab: &'a Vocab,
    text: &'a str,
    symbols: Vec<Symbol>,
    queue: BinaryHeap<Bigram>,
}

impl Session<'_> {
    fn try_add_bigram(&mut self, left: i32, right: i32) {
        if left == -1 || right == -1 {
            return;
        }
        let (l, r) = (self.symbols[left as usize], self.symbols[right as usize]);
        // The right symbol may have merged already; llama.cpp reads the left
        // symbol's start and both lengths, so the text spans from the left.
        let text = &self.text[l.start..l.start + l.len + r.len];
        let Some(id) = self.vocab.id(text) else {
            return;
        };
        self.queue.push(Bigram {
            left,
            right,
            score: self.vocab.score(id),
            size: text.len(),
        });
    }

    /// A final symbol is a token, or a character that is not one: then its
    /// bytes. (llama.cpp also looks the text up among the merges it made,
    /// but every merge made a token, so that lookup never finds a
    /// non-token.)
    fn resegment(&self, index: usize, out: &mut Vec<TokenId>) -> Result<(), TokenizerError> {
        let s = self.symbols[index];
        let text = &self.text[s.start..s.start + s.len];
        if let Some(id) = self.vocab.id(text) {
            out.push(id);
            return Ok(());
        }
        for &b in text.as_bytes() {
            out.push(byte_token(self.vocab, b)?);
        }
        Ok(())
    }
}

/// The token for byte `b`: `<0xNN>`, else the one-byte text itself.
pub(crate) fn byte_token(vocab: &Vocab, b: u8) -> Result<TokenId, TokenizerError> {
    let hex = format!("<0x{b:02X}>");
    vocab
        .id(&hex)
        .or_else(|| std::str::from_utf8(&[b]).ok().and_then(|s| vocab.id(s)))
        .ok_or(TokenizerError::MissingByteToken(b))
}
