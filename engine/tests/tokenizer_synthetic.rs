//! Small made-up vocabularies: the SentencePiece rules a real model does
//! not show (space prefix, ties, rstrip, EOG by text) and the errors.
//!
//! Expected ids are llama.cpp's (`llama_tokenize` of the llama.cpp that
//! llama-cpp-sys-2 0.1.161 vendors), run on these same files.

use crate::gguf_support;

use engine::gguf::GgufFile;
use engine::tokenizer::{TokenAttr, TokenId, Tokenizer, TokenizerError};
use gguf_support::*;

/// `(text, score, token type)`; ids are positions: 0 <unk>, 1 <s>, 2 </s>,
/// 3..=258 <0x00>..<0xFF>, then 259 "▁", 260 "a", 261 "b", 262 "ab",
/// 263 "ba", 264 "▁a", 265 "▁ab", 266 <ctl>, 267 <user>, 268 "aba",
/// 269 <|im_end|> (typed normal), 270 <unused5>, 271 <|fim_pad|> (typed
/// user-defined), 272 "▁▁", 273 "c", 274 <|endoftext|>.
fn tiny_vocab() -> Vec<(String, f32, i32)> {
    let mut v = vec![
        ("<unk>".to_string(), 0.0, 2),
        ("<s>".into(), 0.0, 3),
        ("</s>".into(), 0.0, 3),
    ];
    v.extend((0..=255u8).map(|b| (format!("<0x{b:02X}>"), 0.0, 6)));
    for (t, s, ty) in [
        ("▁", -1.0, 1),
        ("a", -2.0, 1),
        ("b", -2.0, 1),
        ("ab", -3.0, 1),
        ("ba", -3.0, 1),
        ("▁a", -1.5, 1),
        ("▁ab", -0.5, 1),
        ("<ctl>", 0.0, 3),
        ("<user>", 0.0, 4),
        ("aba", -10.0, 1),
        ("<|im_end|>", 0.0, 1),
        ("<unused5>", 0.0, 3),
        ("<|fim_pad|>", 0.0, 4),
        ("▁▁", -0.1, 1),
        ("c", -5.0, 1),
        ("<|endoftext|>", 0.0, 3),
    ] {
        v.push((t.to_string(), s, ty));
    }
    v
}

fn spm_image(vocab: &[(String, f32, i32)]) -> Image {
    Image::new(3)
        .kv("general.architecture", V::s("llama"))
        .kv("tokenizer.ggml.model", V::s("llama"))
        .kv(
            "tokenizer.ggml.tokens",
            V::Arr(T_STRING, vocab.iter().map(|t| V::s(&t.0)).collect()),
        )
        .kv(
            "tokenizer.ggml.scores",
            V::Arr(T_F32, vocab.iter().map(|t| V::F32(t.1)).collect()),
        )
        .kv(
            "tokenizer.ggml.token_type",
            V::Arr(T_I32, vocab.iter().map(|t| V::I32(t.2)).collect()),
        )
}

fn build(img: Image) -> Result<Tokenizer, TokenizerError> {
    Tokenizer::from_gguf(&GgufFile::from_bytes(img.encode()).unwrap())
}

/// `[plain, parse_special]` ids for `text`, add_special off.
fn both(t: &Tokenizer, text: &str) -> [Vec<TokenId>; 2] {
    [
        t.encode(text, false, false).unwrap(),
        t.encode(text, false, true).unwrap(),
    ]
}

#[test]
fn spm_defaults_space_prefix_ties_and_special_tokens() {
    let t = build(spm_image(&tiny_vocab())).unwrap();
    // SentencePiece defaults: BOS added, a space put before the text.
    assert!(t.add_bos() && !t.add_eos() && t.add_space_prefix());
    assert_eq!(t.bos(), Some(1));
    assert_eq!(t.eos(), Some(2));
    // "<|im_end|>" is found by its text as end of turn and becomes a
    // control token; "<|fim_pad|>" as the FIM pad token; "<|endoftext|>"
    // ends generation by its text.
    assert_eq!(t.special_tokens().eot, Some(269));
    assert_eq!(t.special_tokens().fim_pad, Some(271));
    assert_eq!(t.eog_ids(), &[2, 269, 271, 274]);
    assert_eq!(
        t.token_attr(269),
        Some(TokenAttr::NORMAL | TokenAttr::CONTROL)
    );
    assert_eq!(
        t.token_attr(270),
        Some(TokenAttr::CONTROL | TokenAttr::UNUSED)
    );

    let v = |ids: &[TokenId]| ids.to_vec();
    assert_eq!(both(&t, "aba"), [v(&[265, 260]), v(&[265, 260])]);
    // "ab" and "ba" score the same: the leftmost pair merges first.
    assert_eq!(both(&t, "bab")[0], [259, 263, 261]);
    assert_eq!(both(&t, "ab ab")[0], [265, 265]);
    assert_eq!(both(&t, "a  b")[0], [264, 272, 261]);
    assert_eq!(both(&t, "  ab")[0], [272, 265]);
    // Unknown characters fall back to their bytes.
    assert_eq!(both(&t, "x")[0], [259, 123]);
    assert_eq!(both(&t, "é")[0], [259, 198, 172]);
    // Text after a special token gets the space prefix again.
    assert_eq!(
        both(&t, "ab<ctl>ab<user>ba"),
        [
            v(&[265, 63, 273, 119, 111, 65, 262, 267, 259, 263]),
            v(&[265, 266, 265, 267, 259, 263]),
        ]
    );
    assert_eq!(
        both(&t, "<|im_end|>"),
        [
            v(&[259, 63, 127, 108, 112, 98, 104, 113, 103, 127, 65]),
            v(&[269])
        ]
    );
    assert_eq!(both(&t, "<|fim_pad|>")[1], [271]);
    assert_eq!(t.encode("ab", true, false).unwrap(), [1, 265]);
    // The space prefix goes again on decoding.
    assert_eq!(t.decode(&[265, 265], false).unwrap(), "ab ab");
}

#[test]
fn spm_flags_from_metadata() {
    let img = spm_image(&tiny_vocab())
        .kv("tokenizer.ggml.add_space_prefix", V::Bool(0))
        .kv("tokenizer.ggml.add_bos_token", V::Bool(0))
        .kv("tokenizer.ggml.add_eos_token", V::Bool(1));
    let t = build(img).unwrap();
    assert!(!t.add_bos() && t.add_eos() && !t.add_space_prefix());
    assert_eq!(t.encode("aba", true, false).unwrap(), [268, 2]);
    assert_eq!(t.encode("bab", true, false).unwrap(), [263, 261, 2]);
    assert_eq!(
        t.encode("<ctl>  ab  <user>  ba", true, true).unwrap(),
        [266, 272, 262, 272, 267, 272, 263, 2]
    );
}

#[test]
fn phi3_special_tokens_eat_the_spaces_after_them() {
    let img = spm_image(&tiny_vocab()).kv("general.name", V::s("Phi-3 Tiny"));
    let t = build(img).unwrap();
    assert_eq!(
        t.encode("<ctl>  ab  <user>  ba", false, true).unwrap(),
        [266, 265, 272, 267, 259, 263]
    );
    // ... except <|endoftext|>, <s> and <unk>.
    assert_eq!(
        t.encode("ab<|endoftext|>  ab", false, true).unwrap(),
        [265, 274, 272, 265]
    );
}

fn error(img: Image) -> String {
    let e = build(img).unwrap_err().to_string();
    assert!(!e.contains('\n'), "{e}");
    e
}

fn gpt2_image(pre: Option<&str>) -> Image {
    let bytes: Vec<V> = (0..=255u8)
        .map(|b| {
            let c = match b {
                b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF => char::from(b),
                _ => char::from_u32(
                    0x100
                        + (0..b)
                            .filter(|x| !matches!(x, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF))
                            .count() as u32,
                )
                .unwrap(),
            };
            V::s(&c.to_string())
        })
        .chain([V::s("ab")])
        .collect();
    let mut img = Image::new(3)
        .kv("tokenizer.ggml.model", V::s("gpt2"))
        .kv("tokenizer.ggml.tokens", V::Arr(T_STRING, bytes))
        .kv("tokenizer.ggml.merges", V::Arr(T_STRING, vec![V::s("a b")]));
    if let Some(p) = pre {
        img = img.kv("tokenizer.ggml.pre", V::s(p));
    }
    img
}

#[test]
fn bpe_pre_tokenizer_must_be_known() {
    let t = build(gpt2_image(Some("gpt-2"))).unwrap();
    assert_eq!(t.encode("ab ab", false, false).unwrap(), [256, 32, 256]);
    assert_eq!(
        t.detokenize(&[256, 32, 256], false, false).unwrap(),
        b"ab ab"
    );
    let e = error(gpt2_image(Some("my-new-model")));
    assert!(e.contains("unknown pre-tokenizer \"my-new-model\""), "{e}");
    assert!(e.contains("smollm"), "{e}");
    let e = error(gpt2_image(None));
    assert!(e.contains("tokenizer.ggml.pre is missing"), "{e}");
}

#[test]
fn metadata_errors_name_the_problem() {
    let vocab = tiny_vocab();
    let e = error(Image::new(3).kv("tokenizer.ggml.model", V::s("llama")));
    assert!(e.contains("\"tokenizer.ggml.tokens\" is missing"), "{e}");
    let e = error(Image::new(3));
    assert!(e.contains("\"tokenizer.ggml.model\" is missing"), "{e}");

    let mut img = spm_image(&vocab);
    img.kvs[1].value = V::s("wordpiece-2000");
    assert!(error(img).contains("unknown tokenizer model \"wordpiece-2000\""));
    let mut img = spm_image(&vocab);
    img.kvs[1].value = V::s("bert");
    assert!(error(img).contains("not supported"));

    let mut img = spm_image(&vocab);
    img.kvs[3].value = V::Arr(T_F32, vec![V::F32(0.0); 10]);
    let e = error(img);
    assert!(
        e.contains("tokenizer.ggml.scores has 10 entries, fewer than the 275 tokens"),
        "{e}"
    );

    let mut img = spm_image(&vocab);
    img.kvs[4].value = V::Arr(T_STRING, vec![V::s("1"); vocab.len()]);
    let e = error(img);
    assert!(
        e.contains("tokenizer.ggml.token_type[0] has type string, expected i32"),
        "{e}"
    );

    let mut dup = vocab.clone();
    dup[262].0 = "a".into();
    let e = error(spm_image(&dup));
    assert!(e.contains("\"a\" appears twice, at ids 260 and 262"), "{e}");

    let mut img = gpt2_image(Some("gpt-2"));
    img.kvs[2].value = V::Arr(T_STRING, vec![V::s("a b"), V::s("ab")]);
    let e = error(img);
    assert!(e.contains("merges[1] = \"ab\" is not two tokens"), "{e}");
    let mut img = gpt2_image(Some("gpt-2"));
    img.kvs[2].value = V::Arr(T_STRING, vec![V::s("b a")]);
    let e = error(img);
    assert!(
        e.contains("merges[0] = \"b a\" names a token that is not in the vocabulary"),
        "{e}"
    );
}

#[test]
fn ids_out_of_range_are_errors() {
    let t = build(spm_image(&tiny_vocab())).unwrap();
    let e = t.decode(&[1, 275], false).unwrap_err().to_string();
    assert_eq!(
        e,
        "tokenizer: token id 275 is out of range (vocabulary of 275)"
    );
    assert!(t.token_to_piece(u32::MAX, true).is_err());
    assert!(t.stream_decoder(false).push(999).is_err());
}

#[test]
fn special_ids_past_the_vocabulary_are_errors() {
    // An EOS id past the vocabulary would leave another token (the SPM
    // default) in the stop set; the file is refused instead.
    for key in ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.bos_token_id"] {
        let mut img = spm_image(&tiny_vocab());
        img.kvs.push(Kv {
            key: key.as_bytes().to_vec(),
            value: V::U32(275),
        });
        assert_eq!(
            error(img),
            format!("tokenizer: {key} = 275 is past the vocabulary of 275 tokens")
        );
    }
    // The last id is in range.
    let mut img = spm_image(&tiny_vocab());
    img.kvs.push(Kv {
        key: b"tokenizer.ggml.eos_token_id".to_vec(),
        value: V::U32(274),
    });
    assert_eq!(build(img).unwrap().eos(), Some(274));
}
