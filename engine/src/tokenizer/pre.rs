//! The pre-tokenizers of byte-level BPE vocabularies, by `tokenizer.ggml.pre`.
//!
//! Each entry lists the regular expressions llama.cpp applies for that name
//! (src/llama-vocab.cpp, `llm_tokenizer_bpe`, checked against the llama.cpp
//! that llama-cpp-sys-2 0.1.161 vendors) and the flags its loader sets for
//! it. The expressions apply in order, each one splitting every piece the
//! previous ones left; text a match does not cover stays a piece of its own.
//! A name that is not here is an error: a wrong split silently changes ids.

/// GPT-2's expression (llama.cpp's spelling, without the trailing `|\s+`:
/// whitespace it leaves unmatched becomes a piece anyway).
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";

/// Llama 3's expression, with `(?i:...)` spelled out as llama.cpp does.
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen 2's expression: Llama 3's with single digits.
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// One digit at a time (split off before GPT-2's expression runs).
const DIGIT: &str = r"\p{N}";

/// What one `tokenizer.ggml.pre` name means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PreSpec {
    /// The expressions, applied in order.
    pub regexes: &'static [&'static str],
    /// A whole pre-token that is in the vocabulary is emitted as is,
    /// without merging.
    pub ignore_merges: bool,
    /// The default for `tokenizer.ggml.add_bos_token` when it is absent.
    pub add_bos: bool,
    /// llama.cpp's `clean_spaces` (detokenization removes the space before
    /// some punctuation).
    pub clean_spaces: bool,
}

const fn spec(regexes: &'static [&'static str], clean_spaces: bool) -> PreSpec {
    PreSpec {
        regexes,
        ignore_merges: false,
        add_bos: false,
        clean_spaces,
    }
}

/// Names, each with what llama.cpp does for it.
const TABLE: &[(&str, PreSpec)] = &[
    ("smollm", spec(&[DIGIT, GPT2], false)),
    ("starcoder", spec(&[DIGIT, GPT2], true)),
    ("refact", spec(&[DIGIT, GPT2], true)),
    ("codeshell", spec(&[DIGIT, GPT2], true)),
    ("command-r", spec(&[DIGIT, GPT2], false)),
    ("gpt-2", spec(&[GPT2], true)),
    ("phi-2", spec(&[GPT2], true)),
    ("mpt", spec(&[GPT2], true)),
    ("olmo", spec(&[GPT2], true)),
    ("llama3", LLAMA3_SPEC),
    ("llama-v3", LLAMA3_SPEC),
    ("llama-bpe", LLAMA3_SPEC),
    ("dbrx", spec(&[LLAMA3], true)),
    ("smaug-bpe", spec(&[LLAMA3], true)),
    ("qwen2", spec(&[QWEN2], false)),
    ("deepseek-r1-qwen", spec(&[QWEN2], false)),
    ("stablelm2", spec(&[QWEN2], true)),
];

const LLAMA3_SPEC: PreSpec = PreSpec {
    regexes: &[LLAMA3],
    ignore_merges: true,
    add_bos: true,
    clean_spaces: true,
};

/// What llama.cpp does for pre-tokenizer `name`, if it is in the table.
pub(crate) fn lookup(name: &str) -> Option<PreSpec> {
    TABLE.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}

/// The names the table knows, comma-separated (for error messages).
pub(crate) fn known_names() -> String {
    TABLE.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_expression_compiles() {
        for (name, spec) in TABLE {
            for r in spec.regexes {
                assert!(fancy_regex_compiles(r), "{name}: {r}");
            }
        }
    }

    fn fancy_regex_compiles(r: &str) -> bool {
        tokenizers::pre_tokenizers::split::Split::new(
            tokenizers::pre_tokenizers::split::SplitPattern::Regex(r.to_string()),
            tokenizers::SplitDelimiterBehavior::Isolated,
            false,
        )
        .is_ok()
    }

    #[test]
    fn unknown_names_are_absent() {
        assert!(lookup("smollm").is_some());
        assert!(lookup("default").is_none());
        assert!(lookup("").is_none());
        assert!(lookup("SmolLM").is_none());
    }
}
