//! Special token ids, the end-of-generation set and the attribute fix-ups
//! llama.cpp applies when it loads a vocabulary (`llama_vocab::impl::load`).
//!
//! llama.cpp finds several special tokens by their text (EOT, EOM, the FIM
//! tokens) and decides end-of-generation by text as well. It walks an
//! unordered map, so when two tokens of one kind match, which one it picks is
//! unspecified; here the lowest id wins.

use super::error::TokenizerError;
use super::vocab::{TokenAttr, TokenId, Vocab};
use super::ModelKind;
use crate::fault;
use crate::gguf::GgufFile;

/// The special token ids of a vocabulary (`None`: the model has none).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    pub bos: Option<TokenId>,
    pub eos: Option<TokenId>,
    pub eot: Option<TokenId>,
    pub eom: Option<TokenId>,
    pub unk: Option<TokenId>,
    pub sep: Option<TokenId>,
    pub pad: Option<TokenId>,
    pub mask: Option<TokenId>,
    pub fim_pre: Option<TokenId>,
    pub fim_suf: Option<TokenId>,
    pub fim_mid: Option<TokenId>,
    pub fim_pad: Option<TokenId>,
    pub fim_rep: Option<TokenId>,
    pub fim_sep: Option<TokenId>,
}

/// Texts that make a token the end-of-turn token when no key names one.
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
const EOM_TEXTS: &[&str] = &["<|eom_id|>"];
const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];

/// Texts that end generation wherever they appear in a vocabulary.
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

/// Tokens llama.cpp always renders (gpt-oss): their attribute becomes
/// user-defined.
const ALWAYS_RENDERED: &[&str] = &["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"];

/// Resolves the special ids, adjusts attributes and returns the sorted
/// end-of-generation set.
pub(crate) fn resolve(
    file: &GgufFile,
    kind: ModelKind,
    vocab: &mut Vocab,
) -> Result<(SpecialTokens, Vec<TokenId>), TokenizerError> {
    let n = vocab.len();
    let in_range = |id: Option<TokenId>| id.filter(|&i| (i as usize) < n);
    let mut s = match kind {
        ModelKind::Spm => SpecialTokens {
            bos: in_range(Some(1)),
            eos: in_range(Some(2)),
            unk: in_range(Some(0)),
            ..SpecialTokens::default()
        },
        ModelKind::Bpe => SpecialTokens {
            bos: in_range(Some(11)),
            eos: in_range(Some(11)),
            ..SpecialTokens::default()
        },
    };

    type Slot = fn(&mut SpecialTokens) -> &mut Option<TokenId>;
    let keys: [(&str, Slot); 17] = [
        ("tokenizer.ggml.bos_token_id", |s| &mut s.bos),
        ("tokenizer.ggml.eos_token_id", |s| &mut s.eos),
        ("tokenizer.ggml.eot_token_id", |s| &mut s.eot),
        ("tokenizer.ggml.eom_token_id", |s| &mut s.eom),
        ("tokenizer.ggml.unknown_token_id", |s| &mut s.unk),
        ("tokenizer.ggml.seperator_token_id", |s| &mut s.sep),
        ("tokenizer.ggml.padding_token_id", |s| &mut s.pad),
        ("tokenizer.ggml.mask_token_id", |s| &mut s.mask),
        ("tokenizer.ggml.fim_pre_token_id", |s| &mut s.fim_pre),
        ("tokenizer.ggml.fim_suf_token_id", |s| &mut s.fim_suf),
        ("tokenizer.ggml.fim_mid_token_id", |s| &mut s.fim_mid),
        ("tokenizer.ggml.fim_pad_token_id", |s| &mut s.fim_pad),
        ("tokenizer.ggml.fim_rep_token_id", |s| &mut s.fim_rep),
        ("tokenizer.ggml.fim_sep_token_id", |s| &mut s.fim_sep),
        // Deprecated spellings, read after the new ones as llama.cpp does.
        ("tokenizer.ggml.prefix_token_id", |s| &mut s.fim_pre),
        ("tokenizer.ggml.suffix_token_id", |s| &mut s.fim_suf),
        ("tokenizer.ggml.middle_token_id", |s| &mut s.fim_mid),
    ];
    for (key, slot) in keys {
        // An id past the vocabulary is an error (llama.cpp warns and keeps
        // its default, which would put another token in the stop set).
        if let Some(id) = file.get_u32_opt(key)? {
            if (id as usize) >= n {
                return Err(TokenizerError::SpecialIdOutOfRange {
                    key,
                    id,
                    n_tokens: n,
                });
            }
            *slot(&mut s) = Some(id);
        }
    }

    // Find by text what no key named; such a token becomes a control token.
    let by_text: [(&[&str], Slot); 8] = [
        (EOT_TEXTS, |s| &mut s.eot),
        (EOM_TEXTS, |s| &mut s.eom),
        (FIM_PRE_TEXTS, |s| &mut s.fim_pre),
        (FIM_SUF_TEXTS, |s| &mut s.fim_suf),
        (FIM_MID_TEXTS, |s| &mut s.fim_mid),
        (FIM_PAD_TEXTS, |s| &mut s.fim_pad),
        (FIM_REP_TEXTS, |s| &mut s.fim_rep),
        (FIM_SEP_TEXTS, |s| &mut s.fim_sep),
    ];
    for id in 0..n as TokenId {
        for (texts, slot) in &by_text {
            let slot = slot(&mut s);
            if slot.is_none() && texts.contains(&vocab.text(id)) {
                *slot = Some(id);
                vocab.attrs[id as usize].set(TokenAttr::CONTROL, true);
            }
        }
    }

    // Control tokens whose text says "unused" are unused.
    for id in 0..n {
        let attr = vocab.attrs[id];
        if attr.is_control() && !attr.is_unused() && vocab.texts()[id].contains("unused") {
            vocab.attrs[id].set(TokenAttr::UNUSED, true);
        }
    }

    let mut eog: Vec<TokenId> = [s.fim_pad, s.fim_rep, s.fim_sep]
        .into_iter()
        .flatten()
        .collect();
    for id in 0..n as TokenId {
        if EOG_TEXTS.contains(&vocab.text(id)) {
            eog.push(id);
            vocab.attrs[id as usize].set(TokenAttr::CONTROL, true);
        }
    }
    for id in 0..n as TokenId {
        if ALWAYS_RENDERED.contains(&vocab.text(id)) {
            vocab.attrs[id as usize] = TokenAttr::USER_DEFINED;
        }
    }
    eog.extend([s.eos, s.eot, s.eom].into_iter().flatten());
    if fault::active("stop-token") {
        eog.extend(s.bos);
    }
    eog.sort_unstable();
    eog.dedup();

    let has = |vocab: &Vocab, eog: &[TokenId], text: &str| find(vocab, eog, text).is_some();
    // o200k_harmony and solar-open: "<|end|>" ends a message, not generation.
    if let Some(end) = find(vocab, &eog, "<|end|>") {
        let call = has(vocab, &eog, "<|call|>") || has(vocab, &eog, "<|calls|>");
        if call && (has(vocab, &eog, "<|return|>") || has(vocab, &eog, "<|flush|>")) {
            eog.retain(|&i| i != end);
            vocab.attrs[end as usize] = TokenAttr::USER_DEFINED;
        }
    }
    // gemma4 and plamo have a normal "</s>".
    if let Some(s_id) = find(vocab, &eog, "</s>") {
        if has(vocab, &eog, "<|tool_response>") || has(vocab, &eog, "<|plamo:eos|>") {
            eog.retain(|&i| i != s_id);
            vocab.attrs[s_id as usize] = TokenAttr::NORMAL;
        }
    }

    per_model_attrs(file, vocab)?;
    Ok((s, eog))
}

/// The member of `eog` whose text is `text`.
fn find(vocab: &Vocab, eog: &[TokenId], text: &str) -> Option<TokenId> {
    eog.iter().copied().find(|&i| vocab.text(i) == text)
}

fn set_attr(vocab: &mut Vocab, text: &str, attr: TokenAttr, on: bool) {
    if let Some(id) = vocab.id(text) {
        vocab.attrs[id as usize].set(attr, on);
    }
}

/// llama.cpp's per-model attribute table (lstrip/rstrip), keyed by the
/// pre-tokenizer, architecture and model names.
fn per_model_attrs(file: &GgufFile, vocab: &mut Vocab) -> Result<(), TokenizerError> {
    let pre = file.get_str_opt("tokenizer.ggml.pre")?.unwrap_or("");
    let arch = file.get_str_opt("general.architecture")?.unwrap_or("");
    let name = file
        .get_str_opt("general.name")?
        .unwrap_or("")
        .to_ascii_lowercase();
    let any = |s: &str, subs: &[&str]| subs.iter().any(|x| s.contains(x));
    if any(pre, &["jina-v2-de", "jina-v2-es", "jina-v2-code", "mmbert"])
        || any(arch, &["nomic-bert-moe", "jina-bert-v3"])
    {
        set_attr(vocab, "<mask>", TokenAttr::LSTRIP, true);
    } else if any(&name, &["phi-3", "phi3"]) {
        let special = TokenAttr::CONTROL | TokenAttr::USER_DEFINED | TokenAttr::UNKNOWN;
        for a in vocab.attrs.iter_mut() {
            if a.intersects(special) {
                a.set(TokenAttr::RSTRIP, true);
            }
        }
        set_attr(vocab, "</s>", TokenAttr::RSTRIP, true);
        for t in ["<unk>", "<s>", "<|endoftext|>"] {
            set_attr(vocab, t, TokenAttr::RSTRIP, false);
        }
    } else if any(&name, &["modern-bert"]) {
        set_attr(vocab, "[MASK]", TokenAttr::LSTRIP, true);
    }
    Ok(())
}
