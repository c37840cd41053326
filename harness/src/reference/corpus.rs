//! A corpus base: llama.cpp's next-token distributions over a real text,
//! kept small enough to commit (`<model>/corpus.safetensors`).
//!
//! llama-perplexity's `--kl-divergence-base` file stores every scored
//! position's whole vocabulary (100 MB for four chunks of SmolLM2). A
//! corpus base keeps, per scored position, the base's 64 most likely tokens
//! with their log-probabilities and the base's negative log-likelihood of
//! the token that follows: what `harness compare` needs for the KLD over
//! the top-64 and one tail bucket ([`crate::metrics::kld_top_k`]), the
//! top-1 agreement and the perplexity ratio. It is made from such a file
//! ([`CorpusBase::from_logits_file`], `harness corpus import`), so a base
//! written by any llama.cpp build can gate the engine.
//!
//! Arrays (safetensors, metadata `format = sharpi-corpus/1`):
//!
//! | name | dtype | shape | what |
//! |---|---|---|---|
//! | `tokens` | I32 | `[n_chunk, n_ctx]` | the chunks as the base stored them (first token not replaced by BOS) |
//! | `top_ids` | I32 | `[n_chunk · scored, k]` | per scored position, the base's top-k token ids, most likely first (ties: lower id) |
//! | `top_logp` | F32 | `[n_chunk · scored, k]` | their log-probabilities |
//! | `nll` | F32 | `[n_chunk · scored]` | −ln p(next token) |
//!
//! `scored = n_ctx − 1 − n_ctx/2`, the positions `n_ctx/2 ..= n_ctx − 2`
//! of each chunk (llama-perplexity's). The metadata also names the text
//! (`name`, `text`, `text_sha256`) and where the base came from (`source`).

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Read;

use engine::perplexity::logprob::{row_len, stored_log_prob};
use engine::perplexity::LogitsReader;
use safetensors::tensor::{Dtype, SafeTensors, TensorView};

use super::inputs::valid_id;
use super::ReferenceError;

/// The file of a model's corpus base, in its reference directory.
pub const CORPUS_FILE: &str = "corpus.safetensors";
/// The metadata `format` of a corpus base.
pub const CORPUS_FORMAT: &str = "sharpi-corpus/1";
/// Tokens kept per scored position.
pub const TOP_K: usize = 64;
/// Largest context a corpus base may declare (the engine's sessions are
/// sized by it; llama-perplexity's default is 512).
pub const MAX_N_CTX: usize = 1 << 16;

/// What a corpus base is about.
#[derive(Clone, Debug, PartialEq)]
pub struct CorpusMeta {
    /// Short name of the text (an id: `gpl-3`); the item is `corpus:NAME`.
    pub name: String,
    /// The text's file, as given when the base was made.
    pub text: String,
    /// SHA-256 of the text's bytes.
    pub text_sha256: String,
    /// Where the distributions came from (the program and its file).
    pub source: String,
    pub n_ctx: usize,
    pub n_vocab: usize,
}

/// A corpus base (see the module documentation).
#[derive(Clone, Debug, PartialEq)]
pub struct CorpusBase {
    pub meta: CorpusMeta,
    /// `[n_chunk, n_ctx]`, as stored (first token not replaced).
    pub tokens: Vec<u32>,
    /// Top-k per scored position: `ids` / `values` `[rows, k]`, `values`
    /// are log-probabilities (so every `lse` is 0).
    pub top: super::TopKTable,
    /// `[rows]`: −ln p of the token that follows each scored position.
    pub nll: Vec<f32>,
}

impl CorpusBase {
    /// The first scored position of a chunk.
    pub fn first(&self) -> usize {
        self.meta.n_ctx / 2
    }

    /// Scored positions per chunk.
    pub fn scored(&self) -> usize {
        self.meta.n_ctx - 1 - self.first()
    }

    pub fn n_chunk(&self) -> usize {
        self.tokens.len() / self.meta.n_ctx
    }

    /// Chunk `c`'s tokens (as stored).
    pub fn chunk_tokens(&self, c: usize) -> &[u32] {
        &self.tokens[c * self.meta.n_ctx..(c + 1) * self.meta.n_ctx]
    }

    /// The item name: `corpus:NAME`.
    pub fn item_id(&self) -> String {
        format!("corpus:{}", self.meta.name)
    }

    /// Keeps the first `max_chunks` chunks of a llama-perplexity logits
    /// file (all when None), each scored position's top-[`TOP_K`]
    /// log-probabilities as the file stores them (16-bit levels) and the
    /// next token's.
    pub fn from_logits_file<R: Read>(
        reader: &mut LogitsReader<R>,
        max_chunks: Option<usize>,
        name: &str,
        text: &str,
        text_sha256: &str,
        source: &str,
    ) -> Result<CorpusBase, ReferenceError> {
        let h = *reader.header();
        let n_chunk = max_chunks.map_or(h.n_chunk, |m| m.min(h.n_chunk));
        if n_chunk == 0 {
            return Err(ReferenceError::Invalid(
                "the logits file has no chunk to keep".into(),
            ));
        }
        let meta = CorpusMeta {
            name: name.to_string(),
            text: text.to_string(),
            text_sha256: text_sha256.to_string(),
            source: source.to_string(),
            n_ctx: h.n_ctx,
            n_vocab: h.n_vocab,
        };
        let tokens = reader.tokens()[..n_chunk * h.n_ctx].to_vec();
        let mut top = super::TopKTable::new(TOP_K.min(h.n_vocab));
        let mut nll = Vec::with_capacity(n_chunk * h.scored());
        let len = row_len(h.n_vocab);
        let mut rows = Vec::new();
        let mut logp = vec![0f32; h.n_vocab];
        for c in 0..n_chunk {
            reader
                .read_chunk(&mut rows)
                .map_err(|e| ReferenceError::Invalid(e.to_string()))?;
            let chunk = &tokens[c * h.n_ctx..(c + 1) * h.n_ctx];
            for (j, row) in rows.chunks_exact(len).enumerate() {
                for (i, v) in logp.iter_mut().enumerate() {
                    *v = stored_log_prob(row, i);
                }
                let (ids, values, _) = super::arrays::top_k_lse(&logp, top.k);
                top.ids.extend(ids);
                top.values.extend(values);
                top.lse.push(0.0);
                let next = chunk[h.first() + j + 1] as usize;
                nll.push(-logp[next]);
            }
        }
        let base = CorpusBase {
            meta,
            tokens,
            top,
            nll,
        };
        base.check().map_err(ReferenceError::Invalid)?;
        Ok(base)
    }

    /// Checks every shape and value against the metadata: ids in the
    /// vocabulary and distinct per row, log-probabilities finite, at most
    /// 0 and non-increasing, tokens in the vocabulary.
    pub fn check(&self) -> Result<(), String> {
        let m = &self.meta;
        if !valid_id(&m.name) {
            return Err(format!("corpus name {:?} is not an id", m.name));
        }
        if !(3..=MAX_N_CTX).contains(&m.n_ctx) {
            return Err(format!("n_ctx {} (3..={MAX_N_CTX})", m.n_ctx));
        }
        if m.n_vocab == 0 || m.n_vocab > i32::MAX as usize {
            return Err(format!("n_vocab {}", m.n_vocab));
        }
        if self.tokens.is_empty() || !self.tokens.len().is_multiple_of(m.n_ctx) {
            return Err(format!(
                "{} tokens, not a whole number of {}-token chunks",
                self.tokens.len(),
                m.n_ctx
            ));
        }
        if let Some(t) = self.tokens.iter().find(|&&t| t as usize >= m.n_vocab) {
            return Err(format!("token {t} outside the vocabulary of {}", m.n_vocab));
        }
        let rows = self.n_chunk() * self.scored();
        let k = self.top.k;
        if k == 0 || k > m.n_vocab {
            return Err(format!("top-k of {k} for a vocabulary of {}", m.n_vocab));
        }
        if self.top.rows() != rows
            || self.top.ids.len() != rows * k
            || self.top.values.len() != rows * k
            || self.nll.len() != rows
        {
            return Err(format!(
                "{} top-k rows, {} ids, {} values, {} nll for {rows} scored positions of k = {k}",
                self.top.rows(),
                self.top.ids.len(),
                self.top.values.len(),
                self.nll.len()
            ));
        }
        for (r, row) in self.top.iter().enumerate() {
            let mut seen: Vec<i32> = row.ids.to_vec();
            seen.sort_unstable();
            seen.dedup();
            if seen.len() != k || row.ids.iter().any(|&i| i < 0 || i as usize >= m.n_vocab) {
                return Err(format!(
                    "row {r}: top-k ids repeated or outside the vocabulary"
                ));
            }
            if row.values.iter().any(|v| !v.is_finite() || *v > 1e-3)
                || row.values.windows(2).any(|w| w[1] > w[0])
            {
                return Err(format!(
                    "row {r}: log-probabilities not finite, above 0 or not in descending order"
                ));
            }
            if row.lse != 0.0 {
                return Err(format!("row {r}: lse {} (log-probabilities: 0)", row.lse));
            }
        }
        if let Some(v) = self.nll.iter().find(|v| !v.is_finite() || **v < -1e-3) {
            return Err(format!("negative log-likelihood {v}"));
        }
        Ok(())
    }

    /// The safetensors bytes of this base.
    pub fn to_safetensors(&self) -> Result<Vec<u8>, ReferenceError> {
        let m = &self.meta;
        let le32 = |v: &mut Vec<u8>, x: [u8; 4]| v.extend_from_slice(&x);
        let mut tokens = Vec::with_capacity(self.tokens.len() * 4);
        self.tokens
            .iter()
            .for_each(|&t| le32(&mut tokens, (t as i32).to_le_bytes()));
        let mut ids = Vec::with_capacity(self.top.ids.len() * 4);
        self.top
            .ids
            .iter()
            .for_each(|&t| le32(&mut ids, t.to_le_bytes()));
        let f32_bytes =
            |xs: &[f32]| -> Vec<u8> { xs.iter().flat_map(|x| x.to_le_bytes()).collect() };
        let values = f32_bytes(&self.top.values);
        let nll = f32_bytes(&self.nll);
        let rows = self.top.rows();
        let arrays: Vec<(&str, Dtype, Vec<usize>, &[u8])> = vec![
            ("tokens", Dtype::I32, vec![self.n_chunk(), m.n_ctx], &tokens),
            ("top_ids", Dtype::I32, vec![rows, self.top.k], &ids),
            ("top_logp", Dtype::F32, vec![rows, self.top.k], &values),
            ("nll", Dtype::F32, vec![rows], &nll),
        ];
        let views = arrays
            .into_iter()
            .map(|(name, dtype, shape, bytes)| {
                TensorView::new(dtype, shape, bytes)
                    .map(|v| (name.to_string(), v))
                    .map_err(|e| ReferenceError::Safetensors(format!("{name}: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let meta = HashMap::from([
            ("format".to_string(), CORPUS_FORMAT.to_string()),
            ("name".to_string(), m.name.clone()),
            ("text".to_string(), m.text.clone()),
            ("text_sha256".to_string(), m.text_sha256.clone()),
            ("source".to_string(), m.source.clone()),
            ("n_ctx".to_string(), m.n_ctx.to_string()),
            ("n_vocab".to_string(), m.n_vocab.to_string()),
        ]);
        safetensors::serialize(views, Some(meta))
            .map_err(|e| ReferenceError::Safetensors(e.to_string()))
    }

    /// Parses and checks a base written by [`to_safetensors`](Self::to_safetensors).
    pub fn from_safetensors(bytes: &[u8]) -> Result<CorpusBase, ReferenceError> {
        let bad = |m: String| ReferenceError::Invalid(format!("corpus base: {m}"));
        let st = SafeTensors::deserialize(bytes)
            .map_err(|e| ReferenceError::Safetensors(e.to_string()))?;
        let (_, header) = SafeTensors::read_metadata(bytes)
            .map_err(|e| ReferenceError::Safetensors(e.to_string()))?;
        let empty = HashMap::new();
        let md = header.metadata().as_ref().unwrap_or(&empty);
        let text = |key: &str| -> Result<String, ReferenceError> {
            md.get(key)
                .cloned()
                .ok_or_else(|| bad(format!("no metadata {key:?}")))
        };
        let number = |key: &str| -> Result<usize, ReferenceError> {
            text(key)?
                .parse()
                .map_err(|_| bad(format!("metadata {key:?} is not a number")))
        };
        let format = text("format")?;
        if format != CORPUS_FORMAT {
            return Err(bad(format!(
                "format {format:?}, expected {CORPUS_FORMAT:?}"
            )));
        }
        let meta = CorpusMeta {
            name: text("name")?,
            text: text("text")?,
            text_sha256: text("text_sha256")?,
            source: text("source")?,
            n_ctx: number("n_ctx")?,
            n_vocab: number("n_vocab")?,
        };
        let get = |name: &str,
                   dtype: Dtype,
                   rank: usize|
         -> Result<(Vec<usize>, Cow<[u8]>), ReferenceError> {
            let v = st
                .tensor(name)
                .map_err(|e| bad(format!("array {name}: {e}")))?;
            if v.dtype() != dtype || v.shape().len() != rank {
                return Err(bad(format!(
                    "array {name}: {:?} {:?}, expected {dtype:?} of rank {rank}",
                    v.dtype(),
                    v.shape()
                )));
            }
            Ok((v.shape().to_vec(), Cow::Borrowed(v.data())))
        };
        let words = |b: &[u8]| -> Vec<[u8; 4]> {
            b.chunks_exact(4)
                .map(|c| [c[0], c[1], c[2], c[3]])
                .collect()
        };
        let (_, tokens) = get("tokens", Dtype::I32, 2)?;
        let (shape, ids) = get("top_ids", Dtype::I32, 2)?;
        let (vshape, values) = get("top_logp", Dtype::F32, 2)?;
        let (_, nll) = get("nll", Dtype::F32, 1)?;
        if vshape != shape {
            return Err(bad(format!("top_ids {shape:?}, top_logp {vshape:?}")));
        }
        let tokens: Vec<i32> = words(&tokens).into_iter().map(i32::from_le_bytes).collect();
        if tokens.iter().any(|&t| t < 0) {
            return Err(bad("a negative token".into()));
        }
        let base = CorpusBase {
            meta,
            tokens: tokens.into_iter().map(|t| t as u32).collect(),
            top: super::TopKTable {
                k: shape[1],
                ids: words(&ids).into_iter().map(i32::from_le_bytes).collect(),
                values: words(&values).into_iter().map(f32::from_le_bytes).collect(),
                lse: vec![0.0; shape[0]],
            },
            nll: words(&nll).into_iter().map(f32::from_le_bytes).collect(),
        };
        base.check().map_err(bad)?;
        Ok(base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::perplexity::logprob::compress_row;
    use engine::perplexity::LogitsWriter;

    /// A logits file of `n_chunk` chunks over a small vocabulary, its rows
    /// compressed from known logits.
    fn logits_file(n_ctx: usize, n_vocab: usize, n_chunk: usize) -> (Vec<u8>, Vec<Vec<f32>>) {
        let tokens: Vec<u32> = (0..n_ctx * n_chunk)
            .map(|i| ((i * 7 + 3) % n_vocab) as u32)
            .collect();
        let mut w = LogitsWriter::new(Vec::new(), n_ctx, n_vocab, &tokens).unwrap();
        let first = n_ctx / 2;
        let scored = n_ctx - 1 - first;
        let len = row_len(n_vocab);
        let mut all = Vec::new();
        for c in 0..n_chunk {
            let mut rows = vec![0u16; scored * len];
            for j in 0..scored {
                let logits: Vec<f32> = (0..n_vocab)
                    .map(|i| ((i * 13 + j * 5 + c) % 29) as f32 * 0.3 - 4.0)
                    .collect();
                let next = tokens[c * n_ctx + first + j + 1] as usize;
                compress_row(&logits, next, &mut rows[j * len..(j + 1) * len]);
                all.push(logits);
            }
            w.write_chunk(&rows).unwrap();
        }
        (w.finish().unwrap(), all)
    }

    fn import(bytes: &[u8], chunks: Option<usize>) -> Result<CorpusBase, ReferenceError> {
        let mut r = LogitsReader::new(bytes, bytes.len() as u64).unwrap();
        CorpusBase::from_logits_file(&mut r, chunks, "text", "/t", "00", "test")
    }

    #[test]
    fn import_keeps_the_top_k_log_probabilities_and_round_trips() {
        let (bytes, logits) = logits_file(12, 100, 3);
        let base = import(&bytes, Some(2)).unwrap();
        assert_eq!(base.n_chunk(), 2);
        assert_eq!(base.scored(), 5);
        assert_eq!(base.top.rows(), 10);
        for (r, row) in base.top.iter().enumerate() {
            let z = &logits[r];
            let m = z.iter().cloned().fold(f32::MIN, f32::max) as f64;
            let lse = m + z.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln();
            // The most likely token is the first index of the largest logit.
            let best = (0..z.len()).fold(0, |b, i| if z[i] > z[b] { i } else { b });
            assert_eq!(row.ids[0] as usize, best);
            for (&id, &v) in row.ids.iter().zip(row.values) {
                // 16 nats over 65535 levels.
                assert!((v as f64 - (z[id as usize] as f64 - lse)).abs() < 2e-3);
            }
        }
        let again = CorpusBase::from_safetensors(&base.to_safetensors().unwrap()).unwrap();
        assert_eq!(again, base);
    }

    #[test]
    fn damaged_bases_are_refused_with_a_reason() {
        let (bytes, _) = logits_file(12, 100, 2);
        let base = import(&bytes, None).unwrap();
        let mut b = base.clone();
        b.top.ids[3] = 100;
        assert!(b.check().unwrap_err().contains("outside the vocabulary"));
        let mut b = base.clone();
        b.top.values[0] = 0.5;
        assert!(b.check().unwrap_err().contains("above 0"));
        let mut b = base.clone();
        b.nll.pop();
        assert!(b.check().unwrap_err().contains("scored positions"));
        let mut b = base.clone();
        b.meta.name = "Not An Id".into();
        assert!(b.check().is_err());
        let mut b = base;
        b.meta.n_ctx = 7;
        assert!(b.check().unwrap_err().contains("chunks"));
        assert!(CorpusBase::from_safetensors(b"not safetensors").is_err());
    }
}
