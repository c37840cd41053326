//! A model's corpus item on each selected path: the engine over every
//! chunk of the corpus base, each from an empty context (a session of the
//! base's context per path), scored against llama.cpp's distributions
//! ([`crate::compare::checks::corpus`]).

use std::sync::Arc;
use std::time::Instant;

use engine::model::Model;
use engine::ops::KvType;
use engine::perplexity::chunk_logits;
use engine::session::SessionConfig;
use engine::tokenizer::Tokenizer;
use engine::vulkan::VulkanOptions;

use super::progress::Progress;
use crate::compare::checks::corpus::{score_chunk, CorpusResult};
use crate::compare::plan::matrix::Item;
use crate::compare::plan::Options;
use crate::compare::report::PromptReport;
use crate::compare::{Failure, Path};
use crate::reference::corpus::CorpusBase;
use crate::reference::writer::sha256_file;
use crate::reference::ReferenceError;

/// One model's corpus on the paths `want` selects (parallel to `paths`).
pub(super) struct CorpusRun<'a> {
    pub opts: &'a Options,
    pub model_id: &'a str,
    pub model: &'a Arc<Model>,
    pub tok: &'a Tokenizer,
    pub paths: &'a [Path],
    /// The sessions' KV cache type (the model's captures').
    pub kv_type: KvType,
}

impl CorpusRun<'_> {
    pub(super) fn run(
        &self,
        base: Result<CorpusBase, ReferenceError>,
        item_id: &str,
        want: &[bool],
        progress: &mut Progress,
    ) -> Vec<PromptReport> {
        let tokens_match = base.as_ref().ok().and_then(|b| self.tokens_match(b));
        let mut out = Vec::new();
        for (&path, _) in self.paths.iter().zip(want).filter(|(_, &w)| w) {
            let start = Instant::now();
            let mut r = match &base {
                Ok(b) => self.run_path(b, path, tokens_match),
                Err(e) => {
                    let mut r = PromptReport::new(self.model_id, item_id, path, 0);
                    r.failures.push(Failure::new("corpus", e.to_string()));
                    r
                }
            };
            r.seconds = start.elapsed().as_secs_f64();
            progress.done(
                &Item::prompt(self.model_id, item_id, path),
                r.passed(),
                r.seconds,
            );
            out.push(r);
        }
        out
    }

    /// Our tokenization of the base's text, where this machine has the
    /// same bytes, against the base's tokens (llama-perplexity's reading of
    /// `-f`: one trailing newline dropped, BOS added when the model adds
    /// it).
    fn tokens_match(&self, base: &CorpusBase) -> Option<bool> {
        let path = std::path::Path::new(&base.meta.text);
        if sha256_file(path).ok()? != base.meta.text_sha256 {
            return None;
        }
        let mut text = String::from_utf8(std::fs::read(path).ok()?).ok()?;
        if text.ends_with('\n') {
            text.pop();
        }
        let ours = self.tok.encode(&text, true, false).ok()?;
        Some(ours.get(..base.tokens.len()) == Some(&base.tokens[..]))
    }

    fn run_path(&self, base: &CorpusBase, path: Path, tokens_match: Option<bool>) -> PromptReport {
        let opts = self.opts;
        let id = base.item_id();
        let mut r = PromptReport::new(self.model_id, &id, path, base.tokens.len());
        let limits = opts
            .thresholds
            .limits(self.model_id, path)
            .and_then(|l| l.corpus.clone());
        if limits.is_none() {
            r.failures.push(Failure::new(
                "thresholds",
                format!(
                    "no corpus limits [{}.{}.corpus] in {}: measured, not judged",
                    self.model_id,
                    path.threshold_keys()[0],
                    opts.thresholds.source
                ),
            ));
        }
        let n_vocab = self.model.hparams().n_vocab;
        if n_vocab != base.meta.n_vocab {
            r.failures.push(Failure::new(
                "corpus",
                format!(
                    "{id}: the base has a vocabulary of {}, the model {n_vocab}",
                    base.meta.n_vocab
                ),
            ));
            return r;
        }
        let n_ctx = base.meta.n_ctx;
        let cfg = SessionConfig {
            n_ctx,
            n_batch: opts.chunk.clamp(1, n_ctx),
            kv_type: self.kv_type,
            threads: opts.threads,
        };
        let vk = VulkanOptions {
            device: opts.device.clone(),
            validation: opts.validation,
            kernel_layout: opts.kernel_layout,
            ..VulkanOptions::default()
        };
        let mut session = match path.session(Arc::clone(self.model), &cfg, &vk) {
            Ok(s) => s,
            Err(e) => {
                r.failures.push(Failure::new("engine", e));
                return r;
            }
        };
        let bos = self.tok.add_bos().then(|| self.tok.bos()).flatten();
        let mut scores = Vec::with_capacity(base.top.rows());
        for c in 0..base.n_chunk() {
            match chunk_logits(&mut session, base.chunk_tokens(c), base.first(), bos) {
                Ok(logits) => scores.extend(score_chunk(base, c, logits, n_vocab)),
                Err(e) => {
                    r.failures
                        .push(Failure::new("engine", format!("{id} chunk {c}: {e}")));
                    return r;
                }
            }
        }
        if path.uses_gpu() && opts.validation {
            let msgs = session.devices().validation_messages();
            r.validation_messages = Some(msgs.len());
            if let Some(first) = msgs.first() {
                r.failures.push(Failure::new(
                    "validation",
                    format!("{} validation message(s); first: {first}", msgs.len()),
                ));
            }
        }
        let mut result = CorpusResult::new(base, &scores);
        result.tokens_match = tokens_match;
        r.failures.extend(result.tokens_failure());
        // Without limits: measured, not judged (the thresholds failure says so).
        if let Some(l) = &limits {
            result.judge(l, &mut r.failures);
        }
        r.checks.put(result);
        r
    }
}
