//! Gemma 3's SentencePiece tokenizer (scores, byte fallback, no space
//! prefix, BOS added).
//!
//! Expected ids are llama.cpp's: `llama_tokenize` of the llama.cpp that
//! llama-cpp-sys-2 0.1.161 vendors, on this model file, with
//! add_special = false (the BOS case is checked too). Pieces are its
//! `llama_token_to_piece`, the EOG set its `llama_vocab_is_eog` over the
//! whole vocabulary.

use crate::tokenizer_support;

use engine::tokenizer::{ModelKind, TokenAttr};
use tokenizer_support::*;

const CASES: &[Case] = &[
    Case {
        text: "The capital of France is",
        parse_special: false,
        ids: &[818, 5279, 529, 7001, 563],
    },
    // No space is put before the text: the file sets add_space_prefix off.
    Case {
        text: "Hello world",
        parse_special: false,
        ids: &[9259, 1902],
    },
    Case {
        text: " Hello world",
        parse_special: false,
        ids: &[26352, 1902],
    },
    Case {
        text: "def add(a, b):\n    return a + b\n",
        parse_special: false,
        ids: &[
            2063, 1138, 236769, 236746, 236764, 518, 1473, 107, 140, 2060, 496, 900, 518, 107,
        ],
    },
    Case {
        text: "12345",
        parse_special: false,
        ids: &[236770, 236778, 236800, 236812, 236810],
    },
    Case {
        text: "x = 3.14159 * 2",
        parse_special: false,
        ids: &[
            236781, 578, 236743, 236800, 236761, 236770, 236812, 236770, 236810, 236819, 808,
            236743, 236778,
        ],
    },
    // Runs of spaces are user-defined tokens (139 = 3 spaces, 140 = 4,
    // 138 = 2), split out before the merge runs.
    Case {
        text: "a   b    c  ",
        parse_special: false,
        ids: &[236746, 139, 236763, 140, 236755, 138],
    },
    Case {
        text: "line1\nline2\n\n\nline3\r\n",
        parse_special: false,
        ids: &[1257, 236770, 107, 1257, 236778, 109, 1257, 236800, 251, 107],
    },
    Case {
        text: "I ❤️ 🦀 and 👨\u{200d}👩\u{200d}👧",
        parse_special: false,
        ids: &[
            236777, 64813, 236743, 248714, 532, 236743, 243874, 237243, 243767, 237243, 244814,
        ],
    },
    Case {
        text: "東京は日本の首都です。",
        parse_special: false,
        ids: &[31414, 237048, 76444, 120211, 3652, 236924],
    },
    Case {
        text: "don't STOP'LL",
        parse_special: false,
        ids: &[13246, 236789, 236745, 98174, 236789, 2182],
    },
    // U+2581 in the input is the same as an escaped space.
    Case {
        text: "\u{2581}x",
        parse_special: false,
        ids: &[1123],
    },
    Case {
        text: " ",
        parse_special: false,
        ids: &[236743],
    },
    Case {
        text: "",
        parse_special: false,
        ids: &[],
    },
    // Not in the vocabulary: its four UTF-8 bytes as <0xNN> tokens.
    Case {
        text: "𠀀",
        parse_special: false,
        ids: &[478, 398, 366, 366],
    },
    Case {
        text: "\u{4}a",
        parse_special: false,
        ids: &[242, 236746],
    },
    Case {
        text: "<start_of_turn>user\nHi!<end_of_turn>\n",
        parse_special: false,
        ids: &[
            236820, 3041, 236779, 1340, 236779, 887, 236813, 2364, 107, 10979, 200322, 643, 236779,
            1340, 236779, 887, 236813, 107,
        ],
    },
    Case {
        text: "<start_of_turn>user\nHi!<end_of_turn>\n",
        parse_special: true,
        ids: &[105, 2364, 107, 10979, 236888, 106, 107],
    },
    // "<table>" is user-defined: matched with or without parse_special.
    // "</s>" is user-defined in the file but an end-of-generation text,
    // which makes it a control token: matched only with parse_special.
    Case {
        text: "a </s> b <table> c",
        parse_special: false,
        ids: &[236746, 1454, 236751, 236813, 518, 236743, 168, 505],
    },
    Case {
        text: "a </s> b <table> c",
        parse_special: true,
        ids: &[236746, 236743, 212, 518, 236743, 168, 505],
    },
];

#[test]
fn metadata() {
    let t = gemma3();
    assert_eq!(t.kind(), ModelKind::Spm);
    assert_eq!(t.pre(), None);
    assert_eq!(t.n_tokens(), 262144);
    assert!(t.add_bos());
    assert!(!t.add_eos());
    assert!(!t.add_space_prefix());
    assert_eq!(t.bos(), Some(2));
    assert_eq!(t.eos(), Some(1));
    assert_eq!(t.special_tokens().eot, Some(106));
    assert_eq!(t.special_tokens().unk, Some(3));
    assert_eq!(t.token_attr(168), Some(TokenAttr::USER_DEFINED));
    assert_eq!(
        t.token_attr(212),
        Some(TokenAttr::USER_DEFINED | TokenAttr::CONTROL)
    );
    assert_eq!(
        t.token_attr(6),
        Some(TokenAttr::CONTROL | TokenAttr::UNUSED),
        "<unused0>"
    );
    assert_eq!(t.token_attr(478), Some(TokenAttr::BYTE));
}

#[test]
fn eog_set_is_llama_cpps() {
    // <eos>, <end_of_turn> and </s>.
    assert_eq!(gemma3().eog_ids(), &[1, 106, 212]);
}

#[test]
fn encodes_as_llama_cpp() {
    check_cases(gemma3(), CASES);
}

#[test]
fn round_trips() {
    let t = gemma3();
    for c in CASES {
        // U+2581 decodes as a space: the one text that cannot come back.
        if c.parse_special || c.text.contains('\u{2581}') {
            continue;
        }
        let ids = t.encode(c.text, false, false).unwrap();
        assert_eq!(t.decode(&ids, false).unwrap(), c.text, "{:?}", c.text);
        let ids = t.encode(c.text, true, false).unwrap();
        assert_eq!(
            t.decode(&ids, false).unwrap(),
            c.text,
            "{:?} with BOS",
            c.text
        );
    }
}

#[test]
fn pieces() {
    let t = gemma3();
    assert_eq!(t.token_to_piece(26352, false).unwrap(), b" Hello");
    assert_eq!(t.token_to_piece(139, false).unwrap(), b"   ");
    assert_eq!(t.token_to_piece(168, false).unwrap(), b"<table>");
    assert_eq!(t.token_to_piece(478, false).unwrap(), b"\xf0");
    assert_eq!(t.token_to_piece(106, false).unwrap(), b"");
    assert_eq!(t.token_to_piece(106, true).unwrap(), b"<end_of_turn>");
    assert_eq!(t.token_to_piece(212, false).unwrap(), b"");
    assert_eq!(t.token_to_piece(212, true).unwrap(), b"</s>");
}

#[test]
fn stream_decoder_joins_byte_tokens() {
    let t = gemma3();
    assert_eq!(stream(t, &[478, 398, 366, 366]), ["", "", "", "𠀀", ""]);
    let ids = t.encode("a𠀀b", true, false).unwrap();
    let chunks = stream(t, &ids);
    assert_eq!(chunks.concat(), "a𠀀b");
    assert!(chunks.iter().all(|c| !c.contains('\u{fffd}')));
}

#[test]
fn detokenize_matches_llama_cpp() {
    let t = gemma3();
    let ids = [2, 26352, 1902, 1];
    assert_eq!(t.detokenize(&ids, true, false).unwrap(), b" Hello world");
    assert_eq!(t.detokenize(&ids, false, false).unwrap(), b" Hello world");
    assert_eq!(
        t.detokenize(&ids, true, true).unwrap(),
        b" Hello world<eos>"
    );
}
