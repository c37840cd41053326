//! Tokenizers built from GGUF metadata, matching llama.cpp's ids exactly.
//!
//! Two vocabulary kinds are supported:
//! - byte-level BPE (`tokenizer.ggml.model = "gpt2"`): the `tokenizers`
//!   crate's BPE over the file's merges, split first by the expressions that
//!   llama.cpp uses for the file's `tokenizer.ggml.pre` (see `pre.rs`; an
//!   unknown name is an error);
//! - SentencePiece (`tokenizer.ggml.model = "llama"`): llama.cpp's greedy
//!   score-ordered merge with byte fallback (see `spm.rs`).
//!
//! Around both, the parts llama.cpp adds are reproduced: special tokens are
//! split out of the input first (`partition.rs`), BOS/EOS are added as the
//! metadata says, special ids and the end-of-generation set come from keys
//! and token texts (`special.rs`), and token pieces render as
//! `llama_token_to_piece` renders them (`piece.rs`).
//!
//! ```no_run
//! # use engine::gguf::GgufFile;
//! # use engine::tokenizer::Tokenizer;
//! let file = GgufFile::open("model.gguf".as_ref())?;
//! let tok = Tokenizer::from_gguf(&file)?;
//! let ids = tok.encode("Hello world", true, false)?;
//! let text = tok.decode(&ids, false)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod bpe;
mod error;
mod partition;
mod piece;
mod pre;
mod special;
mod spm;
mod stream;
mod vocab;

pub(crate) use error::one_line;
pub use error::TokenizerError;
pub use special::SpecialTokens;
pub use stream::StreamDecoder;
pub use vocab::{TokenAttr, TokenId};

use std::borrow::Cow;

use crate::gguf::GgufFile;
use partition::{Fragment, SpecialMatcher};
use piece::{Detok, DetokContext};
use vocab::Vocab;

pub(crate) const MODEL_KEY: &str = "tokenizer.ggml.model";
pub(crate) const PRE_KEY: &str = "tokenizer.ggml.pre";

/// The vocabulary kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelKind {
    /// Byte-level BPE (`gpt2`).
    Bpe,
    /// SentencePiece with scores (`llama`).
    Spm,
}

enum Model {
    Bpe(Box<bpe::ByteLevelBpe>),
    Spm,
}

/// One part of a text to tokenize ([`Tokenizer::encode_parts`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TextPart<'a> {
    pub text: &'a str,
    /// Whether control-token texts in `text` become control tokens.
    pub parse_special: bool,
}

/// Ids from [`Tokenizer::encode_parts_upto`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Encoded {
    pub tokens: Vec<TokenId>,
    /// Whether all of the text was tokenized (else it stopped past the
    /// limit, and `tokens` holds more than the limit but not all).
    pub complete: bool,
}

/// A piece of the input after splitting at special tokens: text (joined
/// across parts) or a special token.
enum PartFragment<'a> {
    Text(Cow<'a, str>),
    Token(TokenId),
}

/// A tokenizer for one model's vocabulary.
pub struct Tokenizer {
    vocab: Vocab,
    model: Model,
    pre: Option<String>,
    special: SpecialTokens,
    eog: Vec<TokenId>,
    matcher: SpecialMatcher,
    pieces: Vec<Box<[u8]>>,
    /// Bytes of the longest piece (and of the longest token text).
    longest_piece: usize,
    add_bos: bool,
    add_eos: bool,
    add_space_prefix: bool,
    clean_spaces: bool,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("kind", &self.kind())
            .field("pre", &self.pre)
            .field("n_tokens", &self.n_tokens())
            .field("special", &self.special)
            .field("eog", &self.eog)
            .field("add_bos", &self.add_bos)
            .field("add_eos", &self.add_eos)
            .field("add_space_prefix", &self.add_space_prefix)
            .finish()
    }
}

impl Tokenizer {
    /// Builds the tokenizer a GGUF file describes (`tokenizer.ggml.*`).
    pub fn from_gguf(file: &GgufFile) -> Result<Tokenizer, TokenizerError> {
        let lossy = file.lossy_string_count();
        if lossy > 0 {
            return Err(TokenizerError::LossyStrings { count: lossy });
        }
        let model_name = file.get_str(MODEL_KEY)?;
        let kind = match model_name {
            "gpt2" => ModelKind::Bpe,
            "llama" => ModelKind::Spm,
            "no_vocab" | "none" | "bert" | "t5" | "rwkv" | "plamo2" | "gemma4" | "hybriddna"
            | "whitespace" | "test" => {
                return Err(TokenizerError::UnsupportedModel(model_name.to_string()))
            }
            other => return Err(TokenizerError::UnknownModel(other.to_string())),
        };

        // Defaults per kind, as llama.cpp's loader sets them.
        let (pre, spec) = match kind {
            ModelKind::Bpe => {
                let name = file
                    .get_str_opt(PRE_KEY)?
                    .ok_or(TokenizerError::MissingPre)?;
                let spec = pre::lookup(name).ok_or_else(|| TokenizerError::UnknownPre {
                    name: name.to_string(),
                    known: pre::known_names(),
                })?;
                (Some(name.to_string()), Some(spec))
            }
            ModelKind::Spm => (None, None),
        };
        let (mut add_bos, mut add_space_prefix, clean_spaces) = match &spec {
            Some(s) => (s.add_bos, false, s.clean_spaces),
            None => (true, true, false),
        };
        let mut add_eos = false;
        if let Some(v) = file.get_bool_opt("tokenizer.ggml.add_space_prefix")? {
            add_space_prefix = v;
        }

        let mut vocab = Vocab::from_gguf(file)?;
        let model = match &spec {
            Some(spec) => {
                let merges = file.get_array(bpe::MERGES_KEY)?;
                Model::Bpe(Box::new(bpe::ByteLevelBpe::new(&vocab, merges, spec)?))
            }
            None => Model::Spm,
        };
        let (special, eog) = special::resolve(file, kind, &mut vocab)?;
        if let Some(v) = file.get_bool_opt("tokenizer.ggml.add_bos_token")? {
            add_bos = v;
        }
        if let Some(v) = file.get_bool_opt("tokenizer.ggml.add_eos_token")? {
            add_eos = v;
        }
        let matcher = SpecialMatcher::new(&vocab)?;
        let pieces: Vec<Box<[u8]>> = (0..vocab.len() as TokenId)
            .map(|id| piece::render(&vocab, kind, id))
            .collect();
        let longest_piece = pieces
            .iter()
            .map(|p| p.len())
            .chain(vocab.iter().map(|(t, _)| t.len()))
            .max()
            .unwrap_or(0);
        Ok(Tokenizer {
            vocab,
            model,
            pre,
            special,
            eog,
            matcher,
            pieces,
            longest_piece,
            add_bos,
            add_eos,
            add_space_prefix,
            clean_spaces,
        })
    }

    /// Token ids for `text`, as llama.cpp's `llama_tokenize` gives them.
    ///
    /// `add_special`: add BOS/EOS where the model asks for them
    /// (`tokenizer.ggml.add_bos_token` / `add_eos_token`).
    /// `parse_special`: control tokens written in `text` (e.g.
    /// `<|im_start|>`) become those tokens; otherwise their text is
    /// tokenized as plain text. User-defined tokens are matched either way.
    pub fn encode(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<TokenId>, TokenizerError> {
        self.encode_parts(
            &[TextPart {
                text,
                parse_special,
            }],
            add_special,
        )
    }

    /// Token ids for the concatenation of `parts`, where each part says
    /// whether control-token texts in it become control tokens: a chat
    /// prompt's markup (parsed) around the users' text (not parsed). Text
    /// on either side of a part boundary is one piece of text, tokenized
    /// together, exactly as `encode` would tokenize the concatenation if
    /// none of the unparsed parts held a control token's text.
    pub fn encode_parts(
        &self,
        parts: &[TextPart<'_>],
        add_special: bool,
    ) -> Result<Vec<TokenId>, TokenizerError> {
        Ok(self
            .encode_parts_upto(parts, add_special, usize::MAX)?
            .tokens)
    }

    /// [`Tokenizer::encode_parts`], stopping once more than `max_tokens`
    /// ids are known (a prompt that cannot fit the context): byte-level
    /// BPE text is tokenized a window at a time, and memory follows the
    /// ids kept. SentencePiece text is tokenized whole.
    pub fn encode_parts_upto(
        &self,
        parts: &[TextPart<'_>],
        add_special: bool,
        max_tokens: usize,
    ) -> Result<Encoded, TokenizerError> {
        let fragments = self.fragments(parts);
        let bytes: usize = parts.iter().map(|p| p.text.len()).sum();
        let mut out = Vec::with_capacity(bytes / 3 + 2);
        if add_special && self.add_bos {
            out.push(
                self.special
                    .bos
                    .ok_or(TokenizerError::MissingSpecial { what: "BOS" })?,
            );
        }
        match &self.model {
            Model::Spm => {
                // A space goes before the first text and before text that
                // follows a special token, when the model asks for it.
                let mut prev_special = true;
                let mut buf = String::new();
                for f in fragments {
                    match f {
                        PartFragment::Text(text) => {
                            buf.clear();
                            if self.add_space_prefix && prev_special {
                                buf.push(' ');
                            }
                            buf.push_str(&text);
                            let escaped = buf.replace(' ', "\u{2581}");
                            spm::tokenize(&self.vocab, &escaped, &mut out)?;
                            prev_special = false;
                        }
                        PartFragment::Token(id) => {
                            out.push(id);
                            prev_special = true;
                        }
                    }
                }
            }
            Model::Bpe(bpe) => {
                for f in fragments {
                    if out.len() > max_tokens {
                        return Ok(Encoded {
                            tokens: out,
                            complete: false,
                        });
                    }
                    match f {
                        PartFragment::Text(text) => {
                            if !bpe.tokenize(&text, &mut out, max_tokens)? {
                                return Ok(Encoded {
                                    tokens: out,
                                    complete: false,
                                });
                            }
                        }
                        PartFragment::Token(id) => out.push(id),
                    }
                }
            }
        }
        if add_special && self.add_eos {
            out.push(
                self.special
                    .eos
                    .ok_or(TokenizerError::MissingSpecial { what: "EOS" })?,
            );
        }
        Ok(Encoded {
            tokens: out,
            complete: true,
        })
    }

    /// Each part split at its special tokens, with text that meets across
    /// a part boundary joined into one fragment.
    fn fragments<'t>(&self, parts: &[TextPart<'t>]) -> Vec<PartFragment<'t>> {
        let mut out: Vec<PartFragment<'t>> = Vec::new();
        for part in parts {
            for f in self
                .matcher
                .partition(&self.vocab, part.text, part.parse_special)
            {
                match f {
                    Fragment::Token(id) => out.push(PartFragment::Token(id)),
                    Fragment::Text(r) => {
                        let text = &part.text[r];
                        match out.last_mut() {
                            Some(PartFragment::Text(prev)) => prev.to_mut().push_str(text),
                            _ => out.push(PartFragment::Text(Cow::Borrowed(text))),
                        }
                    }
                }
            }
        }
        out
    }

    /// The texts that become control (or unknown) tokens when special
    /// tokens are parsed and stay text when they are not, longest first.
    pub fn control_texts(&self) -> Vec<&str> {
        self.matcher
            .ids()
            .iter()
            .filter(|&&id| {
                self.vocab
                    .attr(id)
                    .intersects(TokenAttr::CONTROL | TokenAttr::UNKNOWN)
            })
            .map(|&id| self.vocab.text(id))
            .filter(|t| !t.is_empty())
            .collect()
    }

    /// The most bytes of text that `n_tokens` tokens can stand for: `n`
    /// times the longest token's bytes (at least 4: an unknown token
    /// covers one character). A text longer than this cannot tokenize to
    /// `n_tokens` or fewer, so it can be refused before tokenizing.
    pub fn max_text_bytes(&self, n_tokens: usize) -> usize {
        n_tokens.saturating_mul(self.longest_piece.max(4))
    }

    /// The bytes token `id` stands for (llama.cpp's `llama_token_to_piece`
    /// with no space stripping). With `special` false, control and unknown
    /// tokens render as nothing; user-defined tokens always render as their
    /// text. A piece may be part of a UTF-8 character.
    pub fn token_to_piece(&self, id: TokenId, special: bool) -> Result<&[u8], TokenizerError> {
        self.check(id)?;
        Ok(self.detok_context().piece(id, special))
    }

    /// The text of `ids`: pieces concatenated (`special`: render control
    /// tokens), one leading space dropped from the first piece when the
    /// model adds a space prefix, invalid UTF-8 shown as U+FFFD. Nothing
    /// else is changed, so that `decode(encode(s))` gives `s` back.
    pub fn decode(&self, ids: &[TokenId], special: bool) -> Result<String, TokenizerError> {
        let bytes = self.detok(
            ids,
            Detok {
                remove_special: false,
                unparse_special: special,
                clean_spaces: false,
            },
        )?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// llama.cpp's `llama_detokenize`, byte for byte: with
    /// `remove_special`, a leading BOS and a trailing EOS that the model adds
    /// are dropped; `unparse_special` renders control tokens; the model's
    /// space clean-up (`clean_spaces`) is applied. The bytes may not be
    /// valid UTF-8 (a sequence cut inside a character).
    pub fn detokenize(
        &self,
        ids: &[TokenId],
        remove_special: bool,
        unparse_special: bool,
    ) -> Result<Vec<u8>, TokenizerError> {
        self.detok(
            ids,
            Detok {
                remove_special,
                unparse_special,
                clean_spaces: true,
            },
        )
    }

    fn detok(&self, ids: &[TokenId], how: Detok) -> Result<Vec<u8>, TokenizerError> {
        for &id in ids {
            self.check(id)?;
        }
        Ok(self.detok_context().detokenize(ids, how))
    }

    /// A decoder that takes tokens one at a time and gives back complete
    /// UTF-8 text (`special`: render control tokens).
    pub fn stream_decoder(&self, special: bool) -> StreamDecoder<'_> {
        StreamDecoder::new(self, special)
    }

    fn detok_context(&self) -> DetokContext<'_> {
        DetokContext {
            pieces: &self.pieces,
            attrs: &self.vocab.attrs,
            add_space_prefix: self.add_space_prefix,
            add_bos: self.add_bos,
            add_eos: self.add_eos,
            bos: self.special.bos,
            eos: self.special.eos,
            model_clean_spaces: self.clean_spaces,
        }
    }

    fn check(&self, id: TokenId) -> Result<(), TokenizerError> {
        if self.vocab.contains(id) {
            Ok(())
        } else {
            Err(TokenizerError::IdOutOfRange {
                id,
                n_tokens: self.vocab.len(),
            })
        }
    }

    /// The tokens that end generation (eos, eot, eom, the FIM pad/repo/sep
    /// tokens and tokens whose text llama.cpp knows as an end: `<|im_end|>`,
    /// `<end_of_turn>`, `<|endoftext|>`, ...), ascending.
    pub fn eog_ids(&self) -> &[TokenId] {
        &self.eog
    }

    pub fn is_eog(&self, id: TokenId) -> bool {
        self.eog.binary_search(&id).is_ok()
    }

    pub fn special_tokens(&self) -> &SpecialTokens {
        &self.special
    }

    pub fn bos(&self) -> Option<TokenId> {
        self.special.bos
    }

    pub fn eos(&self) -> Option<TokenId> {
        self.special.eos
    }

    /// Whether `encode(.., add_special = true, ..)` adds BOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Whether `encode(.., add_special = true, ..)` adds EOS.
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }

    /// Whether a space is put before the text (SentencePiece models).
    pub fn add_space_prefix(&self) -> bool {
        self.add_space_prefix
    }

    pub fn kind(&self) -> ModelKind {
        match self.model {
            Model::Bpe(_) => ModelKind::Bpe,
            Model::Spm => ModelKind::Spm,
        }
    }

    /// `tokenizer.ggml.pre` of a BPE vocabulary.
    pub fn pre(&self) -> Option<&str> {
        self.pre.as_deref()
    }

    pub fn n_tokens(&self) -> usize {
        self.vocab.len()
    }

    /// The vocabulary text of `id` (byte-level or U+2581-escaped as stored).
    pub fn token_text(&self, id: TokenId) -> Option<&str> {
        self.vocab.contains(id).then(|| self.vocab.text(id))
    }

    pub fn token_id(&self, text: &str) -> Option<TokenId> {
        self.vocab.id(text)
    }

    pub fn token_attr(&self, id: TokenId) -> Option<TokenAttr> {
        self.vocab.contains(id).then(|| self.vocab.attr(id))
    }

    pub fn token_score(&self, id: TokenId) -> Option<f32> {
        self.vocab.contains(id).then(|| self.vocab.score(id))
    }

    /// The tokens split out of input text before tokenizing (control,
    /// user-defined and unknown ones), longest text first.
    pub fn special_token_ids(&self) -> &[TokenId] {
        self.matcher.ids()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn tokenizers_and_templates_can_be_shared_across_threads() {
        fn shareable<T: Send + Sync>() {}
        shareable::<super::Tokenizer>();
        shareable::<crate::chat::ChatTemplate>();
    }
}
