//! The pre-tokenizers of byte-level BPE vocabularies, by `tokenizer.ggml.pre`.
//!
//! Each entry lists the regular expressions llama.cpp applies for that name
//! (src/llama-vocab.cpp, `llm_tokenizer_bpe`, checked against the llama.cpp
//! that llama-cpp-sys-2 0.1.161 vendors) and the flags its loader sets for
//! it. The expressions apply in order, each one splitting every piece the
//! previous ones left; text a match does not cover stays a piece of its own.
//! A name that is not here is an error: a wrong split silently changes ids.
//!
//! llama.cpp classifies characters with its own tables, generated from
//! Unicode 15.1; the regex crate knows Unicode 16.0, which made 4302 more
//! code points letters and 80 more numbers (new scripts). To split as
//! llama.cpp does, [`unicode_15_1`] narrows `\p{L}` and `\p{N}` to code
//! points assigned by Unicode 15.1; a character added later then counts as
//! "other", as an unassigned one does in llama.cpp. (White space is the
//! same in both.)

/// GPT-2's expression (llama.cpp's spelling, without the trailing `|\s+`:
/// whitespace it leaves unmatched becomes a piece anyway).
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";

/// Llama 3's expression, with `(?i:...)` spelled out as llama.cpp does.
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen 2's expression: Llama 3's with single digits.
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// One digit at a time (split off before GPT-2's expression runs).
const DIGIT: &str = r"\p{N}";

/// `regex` with `\p{L}` and `\p{N}` limited to Unicode 15.1's
/// assignments (a class nested in a class is valid in the regex crate).
pub(crate) fn unicode_15_1(regex: &str) -> String {
    regex
        .replace(r"\p{L}", r"[\p{L}&&\p{Age=V15_1}]")
        .replace(r"\p{N}", r"[\p{N}&&\p{Age=V15_1}]")
}

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
pub(crate) const TABLE: &[(&str, PreSpec)] = &[
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
    let found = TABLE.iter().find(|(n, _)| *n == name).map(|(_, s)| *s);
    if crate::fault::active("pre-tokenizer") {
        // The wrong expressions: digits not split one by one (or split, where
        // they were not).
        return found.map(|s| PreSpec {
            regexes: if s.regexes == [GPT2] {
                &[DIGIT, GPT2]
            } else {
                &[GPT2]
            },
            ..s
        });
    }
    found
}

/// The names the table knows, comma-separated (for error messages).
pub(crate) fn known_names() -> String {
    TABLE.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
    use tokenizers::{OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};

    fn split(regex: &str) -> Split {
        Split::new(
            SplitPattern::Regex(unicode_15_1(regex)),
            tokenizers::SplitDelimiterBehavior::Isolated,
            false,
        )
        .unwrap()
    }

    fn pieces(regex: &str, text: &str) -> Vec<String> {
        let mut pts = PreTokenizedString::from(text);
        split(regex).pre_tokenize(&mut pts).unwrap();
        pts.get_splits(OffsetReferential::Original, OffsetType::Byte)
            .into_iter()
            .map(|(s, _, _)| s.to_string())
            .collect()
    }

    #[test]
    fn every_expression_compiles() {
        for (_, spec) in TABLE {
            for r in spec.regexes {
                split(r);
            }
        }
    }

    #[test]
    fn characters_newer_than_unicode_15_1_are_other() {
        // U+1C89 is a letter and U+10D40 a digit since Unicode 16.0.
        assert_eq!(pieces(GPT2, "ab\u{1C89}'re"), ["ab", "\u{1C89}'", "re"]);
        assert_eq!(pieces(GPT2, "x\u{10D40}1"), ["x", "\u{10D40}", "1"]);
        // Unicode 15.1's newest letters (CJK extension I) are letters.
        assert_eq!(pieces(GPT2, " \u{2EBF0}\u{2EBF1}"), [" \u{2EBF0}\u{2EBF1}"]);
        assert_eq!(pieces(DIGIT, "a12"), ["a", "1", "2"]);
    }

    #[test]
    fn unknown_names_are_absent() {
        assert!(lookup("smollm").is_some());
        assert!(lookup("default").is_none());
        assert!(lookup("").is_none());
        assert!(lookup("SmolLM").is_none());
    }
}
