//! Properties of both real tokenizers on arbitrary text.
//!
//! - `encode` never panics and never fails, whatever the text and flags
//!   (special-token fragments, lone combining marks, control characters,
//!   characters of every plane).
//! - `decode(encode(s)) == s` (parse_special off, control tokens not
//!   rendered), under these exact rules:
//!   * byte-level BPE (SmolLM2): for every `s` whose bytes all have a token.
//!     llama.cpp drops a byte whose GPT-2 character is not in the
//!     vocabulary, and SmolLM2 lacks U+0004, U+0006, U+0013, U+0014,
//!     U+0016, U+001D and the UTF-8 lead bytes F1 and F2 (code points
//!     U+40000..=U+BFFFF), so those cannot come back;
//!   * SentencePiece (Gemma 3): for every `s` without U+2581, which is how
//!     the vocabulary spells a space and so decodes to one.
//! - The stream decoder's chunks concatenate to the lossy UTF-8 of all
//!   pieces, and no chunk ends inside a character.

use crate::tokenizer_support;

use engine::tokenizer::Tokenizer;
use proptest::prelude::*;
use tokenizer_support::*;

/// Text pieces that stress the tokenizers: special-token texts and
/// fragments of them, whitespace of every kind, marks, emoji, byte-token
/// look-alikes.
const FRAGMENTS: &[&str] = &[
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<|im_",
    "_end|>",
    "<|",
    "|>",
    "<",
    ">",
    "<end_of_turn>",
    "<start_of_turn>",
    "<eos>",
    "<bos>",
    "</s>",
    "<s>",
    "<table>",
    "<unused7>",
    "<0x0A>",
    "<0x",
    "[multimodal]",
    "<reponame>",
    "\u{2581}",
    " ",
    "  ",
    "   ",
    "\t",
    "\n",
    "\n\n",
    "\r\n",
    "\u{a0}",
    "\u{3000}",
    "\u{2028}",
    "\u{85}",
    "\u{200b}",
    "\u{feff}",
    "'s",
    "'LL",
    "'",
    "12",
    "3.14",
    "\u{301}",
    "e\u{301}",
    "😀",
    "👨\u{200d}👩",
    "🇫🇷",
    "中文",
    "한국어",
    "ไทย",
    "\u{1c89}",
    "\u{10d40}",
    "\u{2ebf0}",
    "\u{fffd}",
    "\0",
    "\u{4}",
    "\u{7f}",
];

fn fragment_text() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            3 => prop::sample::select(FRAGMENTS).prop_map(str::to_string),
            2 => any::<char>().prop_map(String::from),
            2 => "[a-zA-Z0-9 .,!?]{1,8}",
        ],
        0..16,
    )
    .prop_map(|v| v.concat())
}

fn any_text() -> impl Strategy<Value = String> {
    prop_oneof![any::<String>(), fragment_text()]
}

/// Bytes SmolLM2's vocabulary has no token for (see the module comment).
fn smollm2_can_round_trip(s: &str) -> bool {
    !s.chars().any(|c| {
        matches!(
            c,
            '\u{4}' | '\u{6}' | '\u{13}' | '\u{14}' | '\u{16}' | '\u{1d}'
        ) || ('\u{40000}'..='\u{bffff}').contains(&c)
    })
}

fn encodes_everywhere(t: &Tokenizer, s: &str) -> Result<(), TestCaseError> {
    for (add, parse) in [(false, false), (false, true), (true, false), (true, true)] {
        let ids = t.encode(s, add, parse);
        prop_assert!(ids.is_ok(), "{:?}: {}", s, ids.unwrap_err());
    }
    Ok(())
}

fn round_trips(t: &Tokenizer, s: &str) -> Result<(), TestCaseError> {
    let ids = t.encode(s, false, false).unwrap();
    prop_assert_eq!(t.decode(&ids, false).unwrap(), s);
    prop_assert_eq!(t.decode(&ids, true).unwrap(), s);
    Ok(())
}

fn streams_like_decode(t: &Tokenizer, ids: &[u32], special: bool) -> Result<(), TestCaseError> {
    let mut d = t.stream_decoder(special);
    let mut all = Vec::new();
    let mut text = String::new();
    for &id in ids {
        all.extend_from_slice(t.token_to_piece(id, special).unwrap());
        let chunk = d.push(id).unwrap();
        text.push_str(&chunk);
        prop_assert!(d.pending().len() < 4);
    }
    text.push_str(&d.finish());
    prop_assert_eq!(text, String::from_utf8_lossy(&all));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn smollm2_encode_never_fails(s in any_text()) {
        encodes_everywhere(smollm2(), &s)?;
    }

    #[test]
    fn gemma3_encode_never_fails(s in any_text()) {
        encodes_everywhere(gemma3(), &s)?;
    }

    #[test]
    fn smollm2_round_trips(s in any_text().prop_filter("bytes without tokens", |s| smollm2_can_round_trip(s))) {
        round_trips(smollm2(), &s)?;
    }

    #[test]
    fn gemma3_round_trips(s in any_text().prop_filter("U+2581", |s| !s.contains('\u{2581}'))) {
        round_trips(gemma3(), &s)?;
    }

    #[test]
    fn smollm2_stream_matches_pieces(ids in prop::collection::vec(0u32..49152, 0..24), special: bool) {
        streams_like_decode(smollm2(), &ids, special)?;
    }

    #[test]
    fn gemma3_stream_matches_pieces(
        ids in prop::collection::vec(prop_oneof![0u32..262144, 236000u32..262144, 200u32..500], 0..24),
        special: bool,
    ) {
        streams_like_decode(gemma3(), &ids, special)?;
    }

    #[test]
    fn stream_of_encoded_text_is_the_text(s in any_text().prop_filter("U+2581", |s| !s.contains('\u{2581}'))) {
        let t = gemma3();
        let ids = t.encode(&s, true, false).unwrap();
        let mut d = t.stream_decoder(false);
        let mut text = String::new();
        for id in ids {
            text.push_str(&d.push(id).unwrap());
        }
        prop_assert!(d.pending().is_empty());
        prop_assert_eq!(text, s);
    }
}
