//! llama-perplexity's logits file (`--kl-divergence-base FILE`), byte for
//! byte. All numbers little-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 8 | magic `_logits_` |
//! | 4 | `n_ctx` (u32) |
//! | 4 | `n_vocab` (i32) |
//! | 4 | `n_chunk` (i32) |
//! | 4 · n_ctx · n_chunk | the tokens of the chunks (i32), as tokenized: a chunk's first token is stored unreplaced |
//! | n_chunk · (n_ctx − 1 − n_ctx/2) · 2 · row_len(n_vocab) | per chunk, per scored position, the stored row ([`super::logprob::compress_row`]) |
//!
//! A file's length is therefore fixed by its header; [`LogitsReader`]
//! checks it before allocating anything that the header sizes.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::Path;

use super::logprob::row_len;

/// The first eight bytes of a logits file.
pub const MAGIC: &[u8; 8] = b"_logits_";
/// Bytes before the tokens.
pub const HEADER_BYTES: u64 = 20;

/// What a logits file is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogitsHeader {
    pub n_ctx: usize,
    pub n_vocab: usize,
    pub n_chunk: usize,
}

impl LogitsHeader {
    /// The first position of a chunk that is scored: `n_ctx / 2`.
    pub fn first(&self) -> usize {
        self.n_ctx / 2
    }

    /// Scored positions per chunk: `n_ctx − 1 − n_ctx/2` (the last
    /// position has no next token in the chunk).
    pub fn scored(&self) -> usize {
        self.n_ctx - 1 - self.first()
    }

    /// u16 values of one chunk's rows: `scored · row_len(n_vocab)`.
    pub fn chunk_values(&self) -> usize {
        self.scored() * row_len(self.n_vocab)
    }

    /// The file's length in bytes, `None` when it does not fit in a u64.
    pub fn file_len(&self) -> Option<u64> {
        let tokens = (self.n_ctx as u64)
            .checked_mul(self.n_chunk as u64)?
            .checked_mul(4)?;
        let per_chunk = (self.scored() as u64)
            .checked_mul(row_len(self.n_vocab) as u64)?
            .checked_mul(2)?;
        HEADER_BYTES
            .checked_add(tokens)?
            .checked_add(per_chunk.checked_mul(self.n_chunk as u64)?)
    }
}

/// Why a logits file cannot be read or written. Each message is one line.
#[derive(Debug, thiserror::Error)]
pub enum LogitsFileError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("not a logits file: it does not start with \"_logits_\"")]
    Magic,
    #[error("not a logits file: {0} bytes, shorter than the 20-byte header")]
    ShortHeader(u64),
    #[error("bad header: {0}")]
    Header(String),
    #[error(
        "wrong length: {actual} bytes, where n_ctx {n_ctx}, n_vocab {n_vocab} and n_chunk {n_chunk} make {expected}"
    )]
    Length {
        actual: u64,
        expected: u64,
        n_ctx: usize,
        n_vocab: usize,
        n_chunk: usize,
    },
    #[error("token {token} at index {index} is outside the vocabulary of {n_vocab}")]
    Token {
        index: usize,
        token: i32,
        n_vocab: usize,
    },
    #[error("{0}")]
    Usage(String),
}

impl LogitsHeader {
    /// Checks the header's numbers: `n_ctx ≥ 3` (at least one scored
    /// position), `n_vocab ≥ 1`, `n_chunk ≥ 1`.
    fn check(n_ctx: u32, n_vocab: i32, n_chunk: i32) -> Result<LogitsHeader, LogitsFileError> {
        if n_ctx < 3 {
            return Err(LogitsFileError::Header(format!(
                "n_ctx {n_ctx} leaves no scored position (at least 3)"
            )));
        }
        if n_vocab < 1 {
            return Err(LogitsFileError::Header(format!("n_vocab {n_vocab}")));
        }
        if n_chunk < 1 {
            return Err(LogitsFileError::Header(format!("n_chunk {n_chunk}")));
        }
        Ok(LogitsHeader {
            n_ctx: n_ctx as usize,
            n_vocab: n_vocab as usize,
            n_chunk: n_chunk as usize,
        })
    }
}

/// Reads a logits file: the header and tokens at once (after checking the
/// length the header implies), the chunks' rows one chunk at a time.
pub struct LogitsReader<R> {
    input: R,
    header: LogitsHeader,
    /// `[n_chunk · n_ctx]`, each `< n_vocab`.
    tokens: Vec<u32>,
    /// Chunks read so far.
    next_chunk: usize,
    /// One chunk's bytes (reused).
    bytes: Vec<u8>,
}

impl LogitsReader<BufReader<File>> {
    /// Opens `path` (its length from the file system).
    pub fn open(path: &Path) -> Result<Self, LogitsFileError> {
        let f = File::open(path)?;
        let len = f.metadata()?.len();
        LogitsReader::new(BufReader::with_capacity(1 << 20, f), len)
    }
}

impl<R: Read> LogitsReader<R> {
    /// Reads the header and tokens of a file of `len` bytes from `input`.
    /// Refuses a bad magic, impossible header numbers, a length other than
    /// the header's ([`LogitsHeader::file_len`]) and tokens outside the
    /// vocabulary; allocates nothing before the length is checked.
    pub fn new(mut input: R, len: u64) -> Result<Self, LogitsFileError> {
        if len < HEADER_BYTES {
            return Err(LogitsFileError::ShortHeader(len));
        }
        let mut head = [0u8; HEADER_BYTES as usize];
        input.read_exact(&mut head)?;
        if &head[0..8] != MAGIC {
            return Err(LogitsFileError::Magic);
        }
        let word = |i: usize| [head[i], head[i + 1], head[i + 2], head[i + 3]];
        let header = LogitsHeader::check(
            u32::from_le_bytes(word(8)),
            i32::from_le_bytes(word(12)),
            i32::from_le_bytes(word(16)),
        )?;
        let expected = header.file_len().ok_or_else(|| {
            LogitsFileError::Header(format!(
                "n_ctx {}, n_vocab {}, n_chunk {} make a file too large to address",
                header.n_ctx, header.n_vocab, header.n_chunk
            ))
        })?;
        if expected != len {
            return Err(LogitsFileError::Length {
                actual: len,
                expected,
                n_ctx: header.n_ctx,
                n_vocab: header.n_vocab,
                n_chunk: header.n_chunk,
            });
        }
        // Bounded by the checked length.
        let n_tokens = header.n_ctx * header.n_chunk;
        let mut raw = vec![0u8; n_tokens * 4];
        input.read_exact(&mut raw)?;
        let mut tokens = Vec::with_capacity(n_tokens);
        for (index, b) in raw.chunks_exact(4).enumerate() {
            let token = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            if token < 0 || token as usize >= header.n_vocab {
                return Err(LogitsFileError::Token {
                    index,
                    token,
                    n_vocab: header.n_vocab,
                });
            }
            tokens.push(token as u32);
        }
        Ok(LogitsReader {
            input,
            header,
            tokens,
            next_chunk: 0,
            bytes: Vec::new(),
        })
    }

    pub fn header(&self) -> &LogitsHeader {
        &self.header
    }

    /// Every chunk's tokens, `[n_chunk · n_ctx]`.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Chunk `c`'s tokens, `[n_ctx]`.
    pub fn chunk_tokens(&self, c: usize) -> &[u32] {
        let n = self.header.n_ctx;
        &self.tokens[c * n..(c + 1) * n]
    }

    /// The index of the chunk the next [`read_chunk`](Self::read_chunk)
    /// returns.
    pub fn next_chunk(&self) -> usize {
        self.next_chunk
    }

    /// Reads the next chunk's rows into `rows` (resized to
    /// [`LogitsHeader::chunk_values`]: `[scored, row_len(n_vocab)]`).
    pub fn read_chunk(&mut self, rows: &mut Vec<u16>) -> Result<(), LogitsFileError> {
        if self.next_chunk >= self.header.n_chunk {
            return Err(LogitsFileError::Usage(format!(
                "all {} chunks have been read",
                self.header.n_chunk
            )));
        }
        let n = self.header.chunk_values();
        self.bytes.resize(n * 2, 0);
        self.input.read_exact(&mut self.bytes)?;
        rows.clear();
        rows.extend(
            self.bytes
                .chunks_exact(2)
                .map(|b| u16::from_le_bytes([b[0], b[1]])),
        );
        self.next_chunk += 1;
        Ok(())
    }
}

/// Writes a logits file: the header and tokens first, then each chunk's
/// rows in order.
pub struct LogitsWriter<W: Write> {
    out: W,
    header: LogitsHeader,
    chunks_written: usize,
    bytes: Vec<u8>,
}

impl LogitsWriter<BufWriter<File>> {
    /// Creates (or truncates) `path`.
    pub fn create(
        path: &Path,
        n_ctx: usize,
        n_vocab: usize,
        tokens: &[u32],
    ) -> Result<Self, LogitsFileError> {
        let f = File::create(path)?;
        LogitsWriter::new(BufWriter::with_capacity(1 << 20, f), n_ctx, n_vocab, tokens)
    }
}

impl<W: Write> LogitsWriter<W> {
    /// Writes the header and `tokens` (`n_chunk · n_ctx` of them: every
    /// chunk's, first tokens as tokenized).
    pub fn new(
        mut out: W,
        n_ctx: usize,
        n_vocab: usize,
        tokens: &[u32],
    ) -> Result<Self, LogitsFileError> {
        let bad = |what: String| Err(LogitsFileError::Usage(what));
        if n_ctx < 3 || tokens.is_empty() || !tokens.len().is_multiple_of(n_ctx) {
            return bad(format!(
                "{} tokens do not make whole chunks of n_ctx {n_ctx} (at least 3)",
                tokens.len()
            ));
        }
        let (Ok(ctx32), Ok(vocab32), Ok(chunk32)) = (
            u32::try_from(n_ctx),
            i32::try_from(n_vocab),
            i32::try_from(tokens.len() / n_ctx),
        ) else {
            return bad(format!(
                "n_ctx {n_ctx} or n_vocab {n_vocab} or the chunk count do not fit the header"
            ));
        };
        if let Some((i, t)) = tokens
            .iter()
            .enumerate()
            .find(|(_, &t)| t as usize >= n_vocab)
        {
            return bad(format!(
                "token {t} at index {i} is outside the vocabulary of {n_vocab}"
            ));
        }
        let header = LogitsHeader::check(ctx32, vocab32, chunk32)?;
        out.write_all(MAGIC)?;
        out.write_all(&ctx32.to_le_bytes())?;
        out.write_all(&vocab32.to_le_bytes())?;
        out.write_all(&chunk32.to_le_bytes())?;
        let mut bytes = Vec::with_capacity(tokens.len() * 4);
        for &t in tokens {
            bytes.extend_from_slice(&(t as i32).to_le_bytes());
        }
        out.write_all(&bytes)?;
        Ok(LogitsWriter {
            out,
            header,
            chunks_written: 0,
            bytes,
        })
    }

    pub fn header(&self) -> &LogitsHeader {
        &self.header
    }

    /// Appends one chunk's rows (`[scored, row_len(n_vocab)]`).
    pub fn write_chunk(&mut self, rows: &[u16]) -> Result<(), LogitsFileError> {
        if rows.len() != self.header.chunk_values() {
            return Err(LogitsFileError::Usage(format!(
                "{} values given, a chunk has {}",
                rows.len(),
                self.header.chunk_values()
            )));
        }
        if self.chunks_written >= self.header.n_chunk {
            return Err(LogitsFileError::Usage(format!(
                "the header announced {} chunks",
                self.header.n_chunk
            )));
        }
        self.bytes.clear();
        for &v in rows {
            self.bytes.extend_from_slice(&v.to_le_bytes());
        }
        self.out.write_all(&self.bytes)?;
        self.chunks_written += 1;
        Ok(())
    }

    /// Flushes and returns the output; refuses a file with chunks missing.
    pub fn finish(mut self) -> Result<W, LogitsFileError> {
        if self.chunks_written != self.header.n_chunk {
            return Err(LogitsFileError::Usage(format!(
                "{} of {} chunks written",
                self.chunks_written, self.header.n_chunk
            )));
        }
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perplexity::logprob::compress_row;

    /// A file of 2 chunks, n_ctx 6 (2 scored positions), n_vocab 5, rows
    /// compressed from made-up logits.
    fn sample() -> (Vec<u8>, Vec<u32>, Vec<Vec<u16>>) {
        let tokens: Vec<u32> = (0..12).map(|i| (i * 3 % 5) as u32).collect();
        let mut w = LogitsWriter::new(Vec::new(), 6, 5, &tokens).unwrap();
        let mut chunks = Vec::new();
        for c in 0..2 {
            let mut rows = vec![0u16; 2 * row_len(5)];
            for (p, row) in rows.chunks_mut(row_len(5)).enumerate() {
                let z: Vec<f32> = (0..5).map(|i| (i * (c + p + 1)) as f32 * 0.7).collect();
                compress_row(&z, 1, row);
            }
            w.write_chunk(&rows).unwrap();
            chunks.push(rows);
        }
        (w.finish().unwrap(), tokens, chunks)
    }

    #[test]
    fn layout_is_llama_cpps() {
        let (bytes, _, _) = sample();
        let h = LogitsHeader {
            n_ctx: 6,
            n_vocab: 5,
            n_chunk: 2,
        };
        // 20 header bytes, 12 tokens of 4, 2 chunks of 2 rows of 10 u16.
        assert_eq!(row_len(5), 10);
        assert_eq!(h.file_len(), Some(20 + 48 + 2 * 2 * 10 * 2));
        assert_eq!(bytes.len() as u64, h.file_len().unwrap());
        assert_eq!(&bytes[0..8], b"_logits_");
        assert_eq!(&bytes[8..12], &6u32.to_le_bytes());
        assert_eq!(&bytes[12..16], &5i32.to_le_bytes());
        assert_eq!(&bytes[16..20], &2i32.to_le_bytes());
        assert_eq!(&bytes[20..24], &0i32.to_le_bytes());
        assert_eq!(&bytes[24..28], &3i32.to_le_bytes());
    }

    #[test]
    fn round_trip() {
        let (bytes, tokens, chunks) = sample();
        let len = bytes.len() as u64;
        let mut r = LogitsReader::new(&bytes[..], len).unwrap();
        assert_eq!(
            *r.header(),
            LogitsHeader {
                n_ctx: 6,
                n_vocab: 5,
                n_chunk: 2
            }
        );
        assert_eq!(r.tokens(), &tokens[..]);
        assert_eq!(r.chunk_tokens(1), &tokens[6..]);
        let mut rows = Vec::new();
        for want in &chunks {
            r.read_chunk(&mut rows).unwrap();
            assert_eq!(&rows, want);
        }
        assert!(r.read_chunk(&mut rows).is_err());
    }

    fn read_err(bytes: &[u8]) -> String {
        match LogitsReader::new(bytes, bytes.len() as u64) {
            Ok(_) => panic!("accepted a malformed file"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn malformed_files_are_refused_with_one_line() {
        let (good, _, _) = sample();
        let mut cases: Vec<(Vec<u8>, &str)> = vec![
            (good[..10].to_vec(), "shorter than the 20-byte header"),
            (good[..good.len() - 1].to_vec(), "wrong length"),
            ([&good[..], &[0u8][..]].concat(), "wrong length"),
        ];
        let mut magic = good.clone();
        magic[0] = b'x';
        cases.push((magic, "does not start with"));
        let mut vocab = good.clone();
        // (6 would need the same padded row length as 5.)
        vocab[12..16].copy_from_slice(&7i32.to_le_bytes());
        cases.push((vocab, "wrong length"));
        let mut neg = good.clone();
        neg[16..20].copy_from_slice(&(-1i32).to_le_bytes());
        cases.push((neg, "n_chunk -1"));
        let mut ctx = good.clone();
        ctx[8..12].copy_from_slice(&2u32.to_le_bytes());
        cases.push((ctx, "no scored position"));
        // A huge header in a small file: refused by length, nothing
        // allocated.
        let mut huge = good.clone();
        huge[8..12].copy_from_slice(&(1u32 << 20).to_le_bytes());
        huge[12..16].copy_from_slice(&(1i32 << 20).to_le_bytes());
        huge[16..20].copy_from_slice(&(1i32 << 20).to_le_bytes());
        cases.push((huge, "wrong length"));
        let mut larger = good.clone();
        larger[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        larger[12..16].copy_from_slice(&i32::MAX.to_le_bytes());
        larger[16..20].copy_from_slice(&i32::MAX.to_le_bytes());
        cases.push((larger, "too large to address"));
        let mut token = good.clone();
        token[20..24].copy_from_slice(&5i32.to_le_bytes());
        cases.push((token, "token 5 at index 0 is outside the vocabulary of 5"));
        for (bytes, want) in cases {
            let e = read_err(&bytes);
            assert!(e.contains(want), "{e:?} should say {want:?}");
            assert!(!e.contains('\n'), "{e:?} is one line");
        }
    }

    #[test]
    fn a_writer_refuses_inconsistent_input() {
        assert!(LogitsWriter::new(Vec::new(), 6, 5, &[0; 7]).is_err());
        assert!(LogitsWriter::new(Vec::new(), 6, 5, &[5; 6]).is_err());
        let mut w = LogitsWriter::new(Vec::new(), 6, 5, &[0; 6]).unwrap();
        assert!(w.write_chunk(&[0; 19]).is_err());
        let w2 = LogitsWriter::new(Vec::new(), 6, 5, &[0; 6]).unwrap();
        assert!(w2.finish().is_err(), "a chunk is missing");
        w.write_chunk(&[0; 20]).unwrap();
        assert!(w.write_chunk(&[0; 20]).is_err(), "one chunk too many");
    }
}
