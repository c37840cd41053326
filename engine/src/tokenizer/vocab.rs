//! The vocabulary as the file stores it: token texts, scores and types,
//! turned into llama.cpp's per-token attributes.

use std::collections::HashMap;

use super::error::TokenizerError;
use crate::gguf::{GgufFile, Value};

pub(crate) const TOKENS_KEY: &str = "tokenizer.ggml.tokens";
pub(crate) const SCORES_KEY: &str = "tokenizer.ggml.scores";
pub(crate) const TOKEN_TYPE_KEY: &str = "tokenizer.ggml.token_type";

/// A token id (an index into the vocabulary).
pub type TokenId = u32;

/// Per-token attributes, bit for bit llama.cpp's `llama_token_attr`.
///
/// The file's token type (`tokenizer.ggml.token_type`) sets one of the type
/// bits; loading then adjusts some as llama.cpp does (end-of-generation
/// texts become `CONTROL`, control tokens named "unused" become `UNUSED`,
/// some models get `LSTRIP`/`RSTRIP`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TokenAttr(u16);

impl TokenAttr {
    pub const UNDEFINED: TokenAttr = TokenAttr(0);
    pub const UNKNOWN: TokenAttr = TokenAttr(1 << 0);
    pub const UNUSED: TokenAttr = TokenAttr(1 << 1);
    pub const NORMAL: TokenAttr = TokenAttr(1 << 2);
    pub const CONTROL: TokenAttr = TokenAttr(1 << 3);
    pub const USER_DEFINED: TokenAttr = TokenAttr(1 << 4);
    pub const BYTE: TokenAttr = TokenAttr(1 << 5);
    pub const NORMALIZED: TokenAttr = TokenAttr(1 << 6);
    pub const LSTRIP: TokenAttr = TokenAttr(1 << 7);
    pub const RSTRIP: TokenAttr = TokenAttr(1 << 8);
    pub const SINGLE_WORD: TokenAttr = TokenAttr(1 << 9);

    /// The attribute for a GGUF token type (llama.cpp's `llama_token_type`:
    /// 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte;
    /// anything else is undefined).
    pub fn from_token_type(t: i64) -> TokenAttr {
        match t {
            1 => TokenAttr::NORMAL,
            2 => TokenAttr::UNKNOWN,
            3 => TokenAttr::CONTROL,
            4 => TokenAttr::USER_DEFINED,
            5 => TokenAttr::UNUSED,
            6 => TokenAttr::BYTE,
            _ => TokenAttr::UNDEFINED,
        }
    }

    /// The raw bits.
    pub fn bits(self) -> u16 {
        self.0
    }

    /// True when any bit of `other` is set in `self`.
    pub fn intersects(self, other: TokenAttr) -> bool {
        self.0 & other.0 != 0
    }

    pub fn is_control(self) -> bool {
        self.intersects(TokenAttr::CONTROL)
    }

    pub fn is_byte(self) -> bool {
        self.intersects(TokenAttr::BYTE)
    }

    pub fn is_user_defined(self) -> bool {
        self.intersects(TokenAttr::USER_DEFINED)
    }

    pub fn is_unused(self) -> bool {
        self.intersects(TokenAttr::UNUSED)
    }

    pub(crate) fn set(&mut self, other: TokenAttr, on: bool) {
        if on {
            self.0 |= other.0;
        } else {
            self.0 &= !other.0;
        }
    }
}

impl std::ops::BitOr for TokenAttr {
    type Output = TokenAttr;
    fn bitor(self, rhs: TokenAttr) -> TokenAttr {
        TokenAttr(self.0 | rhs.0)
    }
}

/// Token texts, scores and attributes, and the text -> id map.
pub(crate) struct Vocab {
    texts: Vec<String>,
    scores: Vec<f32>,
    pub(crate) attrs: Vec<TokenAttr>,
    ids: HashMap<String, TokenId>,
}

impl Vocab {
    /// Reads `tokenizer.ggml.tokens`, `.scores` (optional: f32 or i32) and
    /// `.token_type` (optional: all normal when absent).
    pub(crate) fn from_gguf(file: &GgufFile) -> Result<Vocab, TokenizerError> {
        let tokens = file.get_array(TOKENS_KEY)?;
        if tokens.is_empty() {
            return Err(TokenizerError::EmptyVocab);
        }
        let n = tokens.len();
        if u32::try_from(n).is_err() {
            return Err(TokenizerError::VocabTooLarge { n_tokens: n });
        }
        let mut texts = Vec::with_capacity(n);
        for (i, v) in tokens.iter().enumerate() {
            let s = v
                .as_str()
                .ok_or_else(|| bad_item(TOKENS_KEY, i, "string", v))?;
            // llama.cpp gives an empty token a placeholder text so that the
            // text -> id map stays one to one.
            texts.push(if s.is_empty() {
                format!("[EMPTY_{i}]")
            } else {
                s.to_string()
            });
        }

        let scores = match file.get_array_opt(SCORES_KEY)? {
            None => vec![0.0; n],
            Some(a) => {
                check_len(SCORES_KEY, a, n)?;
                a[..n]
                    .iter()
                    .enumerate()
                    .map(|(i, v)| match v {
                        Value::F32(f) => Ok(*f),
                        Value::I32(x) => Ok(*x as f32),
                        _ => Err(bad_item(SCORES_KEY, i, "f32 or i32", v)),
                    })
                    .collect::<Result<Vec<_>, _>>()?
            }
        };

        let attrs = match file.get_array_opt(TOKEN_TYPE_KEY)? {
            None => vec![TokenAttr::NORMAL; n],
            Some(a) => {
                check_len(TOKEN_TYPE_KEY, a, n)?;
                a[..n]
                    .iter()
                    .enumerate()
                    .map(|(i, v)| match v {
                        Value::I32(t) => Ok(TokenAttr::from_token_type((*t).into())),
                        _ => Err(bad_item(TOKEN_TYPE_KEY, i, "i32", v)),
                    })
                    .collect::<Result<Vec<_>, _>>()?
            }
        };

        Vocab::new(texts, scores, attrs)
    }

    pub(crate) fn new(
        texts: Vec<String>,
        scores: Vec<f32>,
        attrs: Vec<TokenAttr>,
    ) -> Result<Vocab, TokenizerError> {
        let mut ids = HashMap::with_capacity(texts.len());
        for (i, t) in texts.iter().enumerate() {
            let id = i as TokenId;
            if let Some(first) = ids.insert(t.clone(), id) {
                return Err(TokenizerError::DuplicateToken {
                    text: t.clone(),
                    first,
                    second: id,
                });
            }
        }
        Ok(Vocab {
            texts,
            scores,
            attrs,
            ids,
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.texts.len()
    }

    pub(crate) fn text(&self, id: TokenId) -> &str {
        &self.texts[id as usize]
    }

    pub(crate) fn score(&self, id: TokenId) -> f32 {
        self.scores[id as usize]
    }

    pub(crate) fn attr(&self, id: TokenId) -> TokenAttr {
        self.attrs[id as usize]
    }

    pub(crate) fn id(&self, text: &str) -> Option<TokenId> {
        self.ids.get(text).copied()
    }

    /// Every (text, id) pair, in id order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, TokenId)> {
        self.texts
            .iter()
            .enumerate()
            .map(|(i, t)| (t.as_str(), i as TokenId))
    }

    pub(crate) fn texts(&self) -> &[String] {
        &self.texts
    }

    pub(crate) fn contains(&self, id: TokenId) -> bool {
        (id as usize) < self.texts.len()
    }
}

fn bad_item(key: &'static str, index: usize, expected: &'static str, v: &Value) -> TokenizerError {
    TokenizerError::BadArrayItem {
        key,
        index,
        expected,
        found: v.type_name(),
    }
}

fn check_len(key: &'static str, a: &[Value], n: usize) -> Result<(), TokenizerError> {
    if a.len() < n {
        return Err(TokenizerError::ShortArray {
            key,
            len: a.len(),
            n_tokens: n,
        });
    }
    Ok(())
}
