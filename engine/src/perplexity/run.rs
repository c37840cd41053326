//! Running chunks of a token stream through a [`Session`] as
//! llama-perplexity does: each chunk of `n_ctx` tokens from an empty
//! context, its first token replaced by BOS when the model adds one, the
//! logits of positions `n_ctx/2 .. n_ctx − 1` scored against the token
//! that follows each.

use std::io::{Read, Write};

use rayon::prelude::*;

use super::logits_file::{LogitsReader, LogitsWriter};
use super::logprob::{compress_row, nll, row_len};
use super::position::{score_position, PositionScore};
use super::stats::{KldSums, PplSums};
use super::PerplexityError;
use crate::session::{Outputs, Session, SessionError};

/// How a token stream is cut into chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkPlan {
    pub n_ctx: usize,
    pub n_chunk: usize,
}

impl ChunkPlan {
    /// `⌊n_tokens / n_ctx⌋` chunks, at most `max_chunks`. Refuses fewer
    /// than `2 · n_ctx` tokens (as llama-perplexity does) and `n_ctx < 3`.
    pub fn new(
        n_tokens: usize,
        n_ctx: usize,
        max_chunks: Option<usize>,
    ) -> Result<ChunkPlan, PerplexityError> {
        if n_ctx < 3 {
            return Err(PerplexityError::Usage(format!(
                "a context of {n_ctx} leaves no position to score (at least 3)"
            )));
        }
        if n_tokens < 2 * n_ctx {
            return Err(PerplexityError::TooFewTokens { n_tokens, n_ctx });
        }
        let all = n_tokens / n_ctx;
        Ok(ChunkPlan {
            n_ctx,
            n_chunk: max_chunks.map_or(all, |m| m.min(all)),
        })
    }

    /// The first scored position of a chunk: `n_ctx / 2`.
    pub fn first(&self) -> usize {
        self.n_ctx / 2
    }

    /// Scored positions per chunk: `n_ctx − 1 − n_ctx/2`.
    pub fn scored(&self) -> usize {
        self.n_ctx - 1 - self.first()
    }
}

/// Runs one chunk (`n_ctx` tokens) from an empty context and returns the
/// logits of its positions `first..n_ctx` (`[n_ctx − first, n_vocab]`;
/// the last row predicts past the chunk and is not scored). The first
/// token is replaced by `bos` when given (llama.cpp does so when the model
/// adds BOS).
pub fn chunk_logits<'s>(
    session: &'s mut Session,
    chunk: &[u32],
    first: usize,
    bos: Option<u32>,
) -> Result<&'s [f32], SessionError> {
    session.reset();
    let replaced;
    let input = match bos {
        Some(b) if chunk.first() != Some(&b) => {
            replaced = [&[b][..], &chunk[1..]].concat();
            &replaced[..]
        }
        _ => chunk,
    };
    session.forward(input, Outputs::From(first), None)
}

/// Perplexity of `tokens` over `plan`'s chunks. With `base`, each chunk's
/// rows are also written to it (its header must be `plan`'s) and the
/// negative log-likelihoods are the ones [`compress_row`] returns, as
/// llama.cpp's are in that mode; otherwise [`nll`]. `on_chunk(c, sums)`
/// is called after each chunk with the sums so far.
pub fn perplexity<W, F>(
    session: &mut Session,
    tokens: &[u32],
    plan: &ChunkPlan,
    bos: Option<u32>,
    mut base: Option<&mut LogitsWriter<W>>,
    mut on_chunk: F,
) -> Result<PplSums, PerplexityError>
where
    W: Write,
    F: FnMut(usize, &PplSums) -> Result<(), PerplexityError>,
{
    let n_vocab = session.model().hparams().n_vocab;
    let (first, scored) = (plan.first(), plan.scored());
    if let Some(w) = base.as_deref() {
        let h = w.header();
        if (h.n_ctx, h.n_vocab, h.n_chunk) != (plan.n_ctx, n_vocab, plan.n_chunk) {
            return Err(PerplexityError::Usage(format!(
                "the logits file's header ({h:?}) does not match the run ({plan:?}, n_vocab {n_vocab})"
            )));
        }
    }
    let nv = row_len(n_vocab);
    let mut rows = vec![0u16; if base.is_some() { scored * nv } else { 0 }];
    let mut sums = PplSums::default();
    for c in 0..plan.n_chunk {
        let chunk = &tokens[c * plan.n_ctx..(c + 1) * plan.n_ctx];
        let logits = chunk_logits(session, chunk, first, bos)?;
        let next = &chunk[first + 1..];
        let values: Vec<f64> = match base.as_deref_mut() {
            Some(w) => {
                let values = logits
                    .par_chunks(n_vocab)
                    .zip(rows.par_chunks_mut(nv))
                    .zip(next.par_iter())
                    .map(|((z, row), &t)| compress_row(z, t as usize, row))
                    .collect();
                w.write_chunk(&rows)?;
                values
            }
            None => logits
                .par_chunks(n_vocab)
                .take(scored)
                .zip(next.par_iter())
                .map(|(z, &t)| nll(z, t as usize))
                .collect(),
        };
        for v in values {
            sums.add(v);
        }
        on_chunk(c, &sums)?;
    }
    Ok(sums)
}

/// What a run against a base gave: the sums and every scored position's
/// score, chunk by chunk.
#[derive(Clone, Debug, Default)]
pub struct KldRun {
    pub sums: KldSums,
    /// `[n_chunk · scored]`, in order.
    pub positions: Vec<PositionScore>,
}

/// Runs the chunks of `base` (its tokens, its `n_ctx`; the first
/// `max_chunks` of them when given) and scores each position against the
/// stored row ([`score_position`]). `on_chunk(c, sums)` is called after
/// each chunk. The session's context must hold `n_ctx` tokens and its
/// vocabulary be the file's.
pub fn kl_divergence<R, F>(
    session: &mut Session,
    base: &mut LogitsReader<R>,
    bos: Option<u32>,
    max_chunks: Option<usize>,
    mut on_chunk: F,
) -> Result<KldRun, PerplexityError>
where
    R: Read,
    F: FnMut(usize, &KldSums) -> Result<(), PerplexityError>,
{
    let h = *base.header();
    let n_vocab = session.model().hparams().n_vocab;
    if h.n_vocab != n_vocab {
        return Err(PerplexityError::VocabMismatch {
            file: h.n_vocab,
            model: n_vocab,
        });
    }
    if session.n_ctx() < h.n_ctx {
        return Err(PerplexityError::Usage(format!(
            "the logits file was computed with n_ctx {}, the session holds {}",
            h.n_ctx,
            session.n_ctx()
        )));
    }
    let n_chunk = max_chunks.map_or(h.n_chunk, |m| m.min(h.n_chunk));
    let (first, nv) = (h.first(), row_len(n_vocab));
    let mut run = KldRun {
        sums: KldSums::default(),
        positions: Vec::with_capacity(n_chunk * h.scored()),
    };
    let mut rows = Vec::new();
    for c in 0..n_chunk {
        base.read_chunk(&mut rows)?;
        let chunk = base.chunk_tokens(c);
        let logits = chunk_logits(session, chunk, first, bos)?;
        let scores: Vec<PositionScore> = logits
            .par_chunks(n_vocab)
            .zip(rows.par_chunks(nv))
            .zip(chunk[first + 1..].par_iter())
            .map(|((z, row), &t)| score_position(z, row, t as usize))
            .collect();
        for s in &scores {
            run.sums.add(s);
        }
        run.positions.extend(scores);
        on_chunk(c, &run.sums)?;
    }
    Ok(run)
}
