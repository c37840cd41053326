//! Tokenizer errors: one line each, strings from the file clipped and escaped.

use crate::gguf::MetadataError;

/// Most characters of a string from the file that an error message shows.
const CLIP_CHARS: usize = 48;

pub(crate) fn clip(s: &str) -> String {
    match s.char_indices().nth(CLIP_CHARS) {
        None => s.to_string(),
        Some((i, _)) => format!("{}...", &s[..i]),
    }
}

/// Why a tokenizer could not be built from a file's metadata, or could not
/// encode or decode.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenizerError {
    /// A key is missing or holds the wrong type.
    #[error("tokenizer: {0}")]
    Metadata(#[from] MetadataError),

    #[error("tokenizer: {key}[{index}] has type {found}, expected {expected}")]
    BadArrayItem {
        key: &'static str,
        index: usize,
        expected: &'static str,
        found: &'static str,
    },

    #[error("tokenizer: {key} has {len} entries, fewer than the {n_tokens} tokens")]
    ShortArray {
        key: &'static str,
        len: usize,
        n_tokens: usize,
    },

    #[error("tokenizer: tokenizer.ggml.tokens is empty")]
    EmptyVocab,

    #[error("tokenizer: {key} = {id} is past the vocabulary of {n_tokens} tokens")]
    SpecialIdOutOfRange {
        key: &'static str,
        id: u32,
        n_tokens: usize,
    },

    #[error("tokenizer: vocabulary of {n_tokens} tokens does not fit 32-bit ids")]
    VocabTooLarge { n_tokens: usize },

    #[error("tokenizer: token text {:?} appears twice, at ids {first} and {second}", clip(.text))]
    DuplicateToken {
        text: String,
        first: u32,
        second: u32,
    },

    #[error("tokenizer: the file holds {count} string values with invalid UTF-8, so token texts may not be exact")]
    LossyStrings { count: u64 },

    #[error("tokenizer: unknown tokenizer model {:?} (tokenizer.ggml.model)", clip(.0))]
    UnknownModel(String),

    #[error("tokenizer: tokenizer model {:?} is not supported (supported: gpt2, llama)", clip(.0))]
    UnsupportedModel(String),

    #[error(
        "tokenizer: tokenizer.ggml.pre is missing; a gpt2 tokenizer needs its pre-tokenizer named"
    )]
    MissingPre,

    #[error("tokenizer: unknown pre-tokenizer {:?} (tokenizer.ggml.pre); known: {known}", clip(.name))]
    UnknownPre { name: String, known: String },

    #[error("tokenizer: tokenizer.ggml.merges[{index}] = {:?} is not two tokens separated by a space", clip(.merge))]
    BadMerge { index: usize, merge: String },

    #[error("tokenizer: tokenizer.ggml.merges[{index}] = {:?} names a token that is not in the vocabulary", clip(.merge))]
    MergeOutOfVocab { index: usize, merge: String },

    #[error("tokenizer: vocabulary has neither <0x{0:02X}> nor the byte itself as a token")]
    MissingByteToken(u8),

    #[error("tokenizer: {what} token id is not set but is needed")]
    MissingSpecial { what: &'static str },

    #[error("tokenizer: token id {id} is out of range (vocabulary of {n_tokens})")]
    IdOutOfRange { id: u32, n_tokens: usize },

    /// An error from the `tokenizers` crate (message flattened to one line).
    #[error("tokenizer: {0}")]
    Backend(String),
}

impl TokenizerError {
    pub(crate) fn backend(e: impl std::fmt::Display) -> TokenizerError {
        TokenizerError::Backend(one_line(&e.to_string()))
    }
}

/// `s` with every run of line breaks replaced by one space.
pub(crate) fn one_line(s: &str) -> String {
    s.split(['\n', '\r'])
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}
