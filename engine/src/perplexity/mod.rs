//! Perplexity and KL divergence over a text, as llama.cpp's
//! `llama-perplexity` computes them, and its logits file, byte for byte.
//!
//! - [`logprob`]: one row of logits: the NLL of the next token, and the
//!   16-bit form of its log-probabilities that a logits file stores.
//! - [`position`]: one position scored against a stored base row (KLD,
//!   Δp, top-1 of each).
//! - [`stats`]: running sums and the statistics printed from them.
//! - [`logits_file`]: reading and writing the `--kl-divergence-base` file.
//! - [`run`]: chunks of tokens through a [`crate::session::Session`].
//! - [`print`]: llama-perplexity's printout lines.
//!
//! How the text is scored (llama.cpp's tools/perplexity): the whole text is
//! tokenized once (BOS first when the model adds one); it is cut into
//! `⌊n_tokens / n_ctx⌋` non-overlapping chunks of `n_ctx` tokens; each
//! chunk runs from an empty context with its first token replaced by BOS
//! when the model adds one; the logits of positions `n_ctx/2 ..= n_ctx − 2`
//! are scored against the token that follows each, so a chunk contributes
//! `n_ctx − 1 − n_ctx/2` negative log-likelihoods `v`, and
//! `PPL = exp(Σv / n)` over all of them.

pub mod logits_file;
pub mod logprob;
pub mod position;
pub mod print;
pub mod run;
pub mod stats;

pub use logits_file::{LogitsFileError, LogitsHeader, LogitsReader, LogitsWriter};
pub use position::{score_position, PositionScore};
pub use run::{chunk_logits, kl_divergence, perplexity, ChunkPlan, KldRun};
pub use stats::{KldSummary, KldSums, PplSums};

use crate::session::SessionError;

/// Why a perplexity run stopped. Each message is one line.
#[derive(Debug, thiserror::Error)]
pub enum PerplexityError {
    #[error("{0}")]
    Session(#[from] SessionError),
    #[error("logits file: {0}")]
    File(#[from] LogitsFileError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error(
        "the text is {n_tokens} tokens; a context of {n_ctx} needs at least {} (two chunks)",
        2 * n_ctx
    )]
    TooFewTokens { n_tokens: usize, n_ctx: usize },
    #[error("the logits file has a vocabulary of {file} tokens, the model {model}")]
    VocabMismatch { file: usize, model: usize },
    #[error("{0}")]
    Usage(String),
}
