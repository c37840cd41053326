//! SmolLM2-135M-Instruct's byte-level BPE tokenizer (pre "smollm").
//!
//! Expected ids are llama.cpp's: `llama_tokenize` of the llama.cpp that
//! llama-cpp-sys-2 0.1.161 vendors, on this model file, with
//! add_special = false (SmolLM2 adds no BOS). Pieces are its
//! `llama_token_to_piece`, the EOG set its `llama_vocab_is_eog` over the
//! whole vocabulary.

use crate::tokenizer_support;

use engine::tokenizer::{ModelKind, TokenAttr};
use tokenizer_support::*;

const CASES: &[Case] = &[
    Case {
        text: "The capital of France is",
        parse_special: false,
        ids: &[504, 3575, 282, 4649, 314],
    },
    Case {
        text: "Hello world",
        parse_special: false,
        ids: &[19556, 905],
    },
    Case {
        text: " Hello world",
        parse_special: false,
        ids: &[38699, 905],
    },
    Case {
        text: "def add(a, b):\n    return a + b\n",
        parse_special: false,
        ids: &[
            1604, 803, 24, 81, 28, 278, 727, 472, 1003, 253, 1232, 278, 198,
        ],
    },
    // "smollm" splits every digit off before GPT-2's expression runs.
    Case {
        text: "12345",
        parse_special: false,
        ids: &[33, 34, 35, 36, 37],
    },
    Case {
        text: "x = 3.14159 * 2",
        parse_special: false,
        ids: &[104, 446, 216, 35, 30, 33, 36, 33, 37, 41, 1672, 216, 34],
    },
    Case {
        text: "a   b    c  ",
        parse_special: false,
        ids: &[81, 256, 278, 333, 265, 256],
    },
    Case {
        text: "line1\nline2\n\n\nline3\r\n",
        parse_special: false,
        ids: &[1311, 33, 198, 1311, 34, 1116, 198, 1311, 35, 2738],
    },
    Case {
        text: "I ❤️ 🦀 and 👨\u{200d}👩\u{200d}👧",
        parse_special: false,
        ids: &[
            57, 4636, 247, 114, 31752, 15107, 116, 218, 284, 15107, 235, 118, 321, 231, 10813, 235,
            119, 321, 231, 10813, 235, 117,
        ],
    },
    Case {
        text: "東京は日本の首都です。",
        parse_special: false,
        ids: &[
            30679, 126, 16736, 122, 7365, 124, 23274, 115, 40993, 26453, 180, 116, 240, 180, 38466,
            7365, 117, 39958, 19076,
        ],
    },
    Case {
        text: "don't STOP'LL",
        parse_special: false,
        ids: &[12420, 982, 5022, 7627, 23, 16421],
    },
    Case {
        text: "",
        parse_special: false,
        ids: &[],
    },
    // Bytes whose GPT-2 character is not in this vocabulary are dropped.
    Case {
        text: "\u{4}a",
        parse_special: false,
        ids: &[81],
    },
    // Special-token text is plain text unless parsing is asked for.
    Case {
        text: "<|im_start|>user\nHi!<|im_end|>\n",
        parse_special: false,
        ids: &[
            44, 108, 306, 79, 3738, 108, 46, 4093, 198, 26843, 17, 44, 108, 306, 79, 486, 108, 46,
            198,
        ],
    },
    Case {
        text: "<|im_start|>user\nHi!<|im_end|>\n",
        parse_special: true,
        ids: &[1, 4093, 198, 26843, 17, 2, 198],
    },
    // Another model's control tokens are plain text here either way.
    Case {
        text: "<start_of_turn>user\nHi!<end_of_turn>\n",
        parse_special: true,
        ids: &[
            44, 3738, 79, 1714, 79, 20589, 46, 4093, 198, 26843, 17, 44, 486, 79, 1714, 79, 20589,
            46, 198,
        ],
    },
];

#[test]
fn metadata() {
    let t = smollm2();
    assert_eq!(t.kind(), ModelKind::Bpe);
    assert_eq!(t.pre(), Some("smollm"));
    assert_eq!(t.n_tokens(), 49152);
    assert!(!t.add_bos());
    assert!(!t.add_eos());
    assert!(!t.add_space_prefix());
    assert_eq!(t.bos(), Some(1));
    assert_eq!(t.eos(), Some(2));
    assert_eq!(t.token_text(1), Some("<|im_start|>"));
    assert_eq!(t.token_attr(2), Some(TokenAttr::CONTROL));
    assert_eq!(t.token_id("<|im_end|>"), Some(2));
    assert_eq!(t.special_token_ids().len(), 17);
}

#[test]
fn eog_set_is_llama_cpps() {
    // <|endoftext|>, <|im_end|> (eos), and <reponame>, which llama.cpp
    // takes for the FIM repository token.
    assert_eq!(smollm2().eog_ids(), &[0, 2, 4]);
    assert!(smollm2().is_eog(2));
    assert!(!smollm2().is_eog(1));
}

#[test]
fn encodes_as_llama_cpp() {
    check_cases(smollm2(), CASES);
}

#[test]
fn round_trips() {
    let t = smollm2();
    for c in CASES {
        if c.parse_special || c.text.contains('\u{4}') {
            continue;
        }
        let ids = t.encode(c.text, false, false).unwrap();
        assert_eq!(t.decode(&ids, false).unwrap(), c.text);
    }
}

#[test]
fn control_tokens_render_only_when_asked() {
    let t = smollm2();
    assert_eq!(t.token_to_piece(1, true).unwrap(), b"<|im_start|>");
    assert_eq!(t.token_to_piece(1, false).unwrap(), b"");
    let ids = t
        .encode("<|im_start|>user\nHi!<|im_end|>\n", false, true)
        .unwrap();
    assert_eq!(t.decode(&ids, false).unwrap(), "user\nHi!\n");
    assert_eq!(
        t.decode(&ids, true).unwrap(),
        "<|im_start|>user\nHi!<|im_end|>\n"
    );
}

#[test]
fn pieces_are_bytes() {
    let t = smollm2();
    // " 🦀" is 15107 (" " F0 9F), 116 (A6), 218 (80).
    assert_eq!(t.token_to_piece(216, false).unwrap(), b" ");
    assert_eq!(t.token_to_piece(256, false).unwrap(), b"  ");
    assert_eq!(t.token_to_piece(15107, false).unwrap(), b" \xf0\x9f");
    assert_eq!(t.token_to_piece(116, false).unwrap(), b"\xa6");
    assert_eq!(t.token_to_piece(218, false).unwrap(), b"\x80");
    assert!(t.token_to_piece(49152, false).is_err());
}

#[test]
fn stream_decoder_waits_for_whole_characters() {
    let t = smollm2();
    let ids = t.encode("🦀", false, false).unwrap();
    assert_eq!(ids, [10813, 116, 218]);
    assert_eq!(stream(t, &ids), ["", "", "🦀", ""]);
    // A character cut off at the end comes out as U+FFFD.
    assert_eq!(stream(t, &ids[..2]), ["", "", "\u{fffd}"]);
    // Bytes that cannot start a character are replaced at once.
    let mut d = t.stream_decoder(false);
    assert_eq!(d.push(218).unwrap(), "\u{fffd}");
    assert!(d.pending().is_empty());
}

#[test]
fn detokenize_matches_llama_cpp() {
    let t = smollm2();
    let ids = [1, 4093, 198, 26843, 17, 2, 198];
    assert_eq!(t.detokenize(&ids, false, false).unwrap(), b"user\nHi!\n");
    assert_eq!(
        t.detokenize(&ids, true, true).unwrap(),
        b"<|im_start|>user\nHi!<|im_end|>\n"
    );
}
