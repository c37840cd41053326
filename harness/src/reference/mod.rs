//! Reference data captured from llama.cpp (reference-data/): its format, the
//! writer the capture uses, and the loader the comparisons use. Nothing here
//! needs llama.cpp.
//!
//! Layout of a reference-data directory (see its README.md):
//!
//! ```text
//! models.json                 models to capture + capture settings   (input)
//! prompts/<id>.txt            text prompts                           (input)
//! prompts/<id>.chat.json      chat prompts (messages)                (input)
//! prompts/tokenizer.txt       tokenizer corpus, one case per line    (input)
//! prompts/conversations.json  conversations for chat-template renders (input)
//! chat/<model>.json           chat-template renders (scripts/render-chat-templates)
//! <model>/capture.json        settings, versions, tap catalog, per-prompt summary
//! <model>/<prompt>.safetensors  tokens, top-k, logits, greedy steps, taps
//! <model>/tokenizer.json      corpus tokenization
//! <model>/sampling.json      llama.cpp's sampler chain on the last logits (sampling.rs)
//! <model>/corpus.safetensors  llama.cpp's top-64 over chunks of a real text (corpus.rs)
//! manifest.json               index of all of the above, with sizes and SHA-256
//! ```

pub mod adhoc;
pub mod arrays;
pub mod corpus;
pub mod format;
pub mod inputs;
pub mod loader;
pub mod sampling;
pub mod writer;

pub use arrays::{PromptArrays, Tap, TopKRow, TopKTable};
pub use loader::{ModelRef, PromptData, ReferenceData, TapSel};

use std::path::PathBuf;

/// Errors of reading or writing reference data.
#[derive(Debug, thiserror::Error)]
pub enum ReferenceError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("safetensors: {0}")]
    Safetensors(String),
    #[error("{0}")]
    Invalid(String),
}

impl ReferenceError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> ReferenceError {
        ReferenceError::Io {
            path: path.into(),
            source,
        }
    }
}
