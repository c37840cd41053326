//! Tokens and text, exact: a prompt tokenized by us against the captured
//! ids, the tokenizer corpus line by line, the chat-template renders byte
//! for byte.

use std::path::Path as FsPath;

use engine::chat::{ChatTemplate, Message};
use engine::tokenizer::Tokenizer;
use serde::{Deserialize, Serialize};

use super::{Check, Level};
use crate::reference::format::{ChatRenders, PromptCapture, PromptKind, TokenizerCapture};
use crate::reference::inputs::{self, corpus_lines};
use crate::reference::writer::sha256_hex;

/// The first index where two sequences differ (the shorter one's length
/// when one is a prefix of the other); None when equal.
pub fn first_difference<T: PartialEq>(a: &[T], b: &[T]) -> Option<usize> {
    if a == b {
        return None;
    }
    Some(a.iter().zip(b).take_while(|(x, y)| x == y).count())
}

/// Up to 4 items each side of `at`, for a message.
fn around<T: std::fmt::Debug>(v: &[T], at: usize) -> String {
    let lo = at.saturating_sub(4);
    let hi = (at + 5).min(v.len());
    format!("[{lo}..{hi}] {:?}", &v[lo..hi])
}

/// A prompt's tokens, ours against the capture's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PromptTokens {
    /// Whether our text (for a chat prompt: our render of the messages)
    /// has the SHA-256 of the text llama.cpp tokenized.
    pub text_matches: bool,
    pub n_ours: usize,
    pub n_reference: usize,
    /// None when the ids are equal.
    pub first_difference: Option<usize>,
    /// What differs, for a message (None when equal).
    pub detail: Option<String>,
}

impl PromptTokens {
    pub fn exact(&self) -> bool {
        self.first_difference.is_none() && self.text_matches
    }
}

/// The unix time of the `strftime_now` instant the renders were made with
/// (`"YYYY-MM-DDTHH:MM:SS"`, UTC).
pub fn parse_fixed_time(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 19
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hh, mm, ss) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 59 {
        return None;
    }
    // Days from 1970-01-01 to y-m-d (Howard Hinnant's days_from_civil).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hh * 3600 + mm * 60 + ss)
}

/// The text llama.cpp tokenized for `prompt`, as we make it: a text
/// prompt's file, or a chat prompt's messages through our template.
pub fn prompt_text(
    reference_dir: &FsPath,
    file: &str,
    kind: PromptKind,
    template: Option<&ChatTemplate>,
) -> Result<String, String> {
    match kind {
        PromptKind::Text => inputs::read_text(reference_dir, file).map_err(|e| e.to_string()),
        PromptKind::Chat => {
            let template = template.ok_or("a chat prompt, and the model has no chat template")?;
            let p = inputs::read_chat_prompt(reference_dir, file).map_err(|e| e.to_string())?;
            let messages: Vec<Message> = p
                .messages
                .iter()
                .map(|m| Message::new(&m.role, &m.content))
                .collect();
            template
                .render(&messages, p.add_generation_prompt)
                .map_err(|e| e.to_string())
        }
    }
}

/// Our tokenization of `text` against the capture of `prompt`.
pub fn compare_prompt(
    text: &str,
    prompt: &PromptCapture,
    reference_ids: &[i32],
    tok: &Tokenizer,
) -> PromptTokens {
    let text_matches = sha256_hex(text.as_bytes()) == prompt.text_sha256;
    let ours: Vec<i64> = match tok.encode(text, prompt.add_special, prompt.parse_special) {
        Ok(ids) => ids.into_iter().map(i64::from).collect(),
        Err(e) => {
            return PromptTokens {
                text_matches,
                n_ours: 0,
                n_reference: reference_ids.len(),
                first_difference: Some(0),
                detail: Some(format!("our tokenizer failed: {e}")),
            }
        }
    };
    let theirs: Vec<i64> = reference_ids.iter().map(|&i| i64::from(i)).collect();
    let first = first_difference(&ours, &theirs);
    let mut detail = first.map(|i| {
        format!(
            "ids differ at {i} of {} (ours) / {} (llama.cpp): ours {} llama.cpp {}",
            ours.len(),
            theirs.len(),
            around(&ours, i),
            around(&theirs, i)
        )
    });
    if !text_matches {
        let why = match prompt.kind {
            PromptKind::Chat => "our chat-template render is not the text llama.cpp tokenized",
            PromptKind::Text => "the prompt file changed since the capture",
        };
        detail = Some(match detail {
            Some(d) => format!("{why}; {d}"),
            None => why.to_string(),
        });
    }
    PromptTokens {
        text_matches,
        n_ours: ours.len(),
        n_reference: theirs.len(),
        first_difference: first,
        detail,
    }
}

/// One tokenization of the corpus that differs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CorpusMismatch {
    /// 1-based line of the corpus; None for the whole corpus as one text.
    pub line: Option<usize>,
    pub parse_special: bool,
    pub first_difference: usize,
    pub detail: String,
}

/// The tokenizer corpus, ours against llama.cpp's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CorpusCheck {
    pub lines: usize,
    /// Tokenizations compared: (lines + the whole text) × (plain, special).
    pub compared: usize,
    pub mismatches: Vec<CorpusMismatch>,
}

/// Tokenizes every line of the corpus and the whole text, `parse_special`
/// off and on, `add_special` as captured, and compares the ids.
pub fn compare_corpus(
    reference_dir: &FsPath,
    cap: &TokenizerCapture,
    tok: &Tokenizer,
) -> Result<CorpusCheck, String> {
    let corpus = inputs::read_text(reference_dir, &cap.corpus).map_err(|e| e.to_string())?;
    if sha256_hex(corpus.as_bytes()) != cap.corpus_sha256 {
        return Err(format!("{} changed since the capture", cap.corpus));
    }
    let lines = corpus_lines(&corpus);
    if lines.len() != cap.lines.len() {
        return Err(format!(
            "{} has {} lines, the capture {}",
            cap.corpus,
            lines.len(),
            cap.lines.len()
        ));
    }
    let texts = lines
        .iter()
        .zip(&cap.lines)
        .enumerate()
        .map(|(i, (t, c))| (Some(i + 1), *t, c))
        .chain([(None, corpus.as_str(), &cap.whole)]);
    let mut out = CorpusCheck {
        lines: lines.len(),
        compared: 0,
        mismatches: Vec::new(),
    };
    for (line, text, want) in texts {
        for (parse_special, want) in [(false, &want.plain), (true, &want.special)] {
            out.compared += 1;
            let ours: Vec<i64> = match tok.encode(text, cap.add_special, parse_special) {
                Ok(ids) => ids.into_iter().map(i64::from).collect(),
                Err(e) => {
                    out.mismatches.push(CorpusMismatch {
                        line,
                        parse_special,
                        first_difference: 0,
                        detail: format!("our tokenizer failed: {e}"),
                    });
                    continue;
                }
            };
            let theirs: Vec<i64> = want.iter().map(|&i| i64::from(i)).collect();
            if let Some(i) = first_difference(&ours, &theirs) {
                let shown: String = text.chars().take(60).collect();
                out.mismatches.push(CorpusMismatch {
                    line,
                    parse_special,
                    first_difference: i,
                    detail: format!(
                        "{shown:?}: ours {} llama.cpp {}",
                        around(&ours, i),
                        around(&theirs, i)
                    ),
                });
            }
        }
    }
    Ok(out)
}

/// One chat render that differs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RenderMismatch {
    pub id: String,
    pub add_generation_prompt: bool,
    /// Byte offset of the first difference.
    pub first_difference: usize,
    pub detail: String,
}

/// The chat-template renders, ours against Jinja2's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChatCheck {
    pub compared: usize,
    pub mismatches: Vec<RenderMismatch>,
}

/// The template with `strftime_now` frozen where the renders froze it.
pub fn template_for_renders(
    template: ChatTemplate,
    renders: &ChatRenders,
) -> Result<ChatTemplate, String> {
    match renders.renderer.get("strftime_now") {
        None => Ok(template),
        Some(s) => parse_fixed_time(s)
            .map(|t| template.with_fixed_time(t))
            .ok_or_else(|| format!("renders' strftime_now {s:?} is not YYYY-MM-DDTHH:MM:SS")),
    }
}

/// Renders every conversation (generation prompt off and on) and every
/// chat prompt with our template and compares the bytes.
pub fn compare_renders(
    reference_dir: &FsPath,
    renders: &ChatRenders,
    template_source: &str,
    template: &ChatTemplate,
) -> Result<ChatCheck, String> {
    if sha256_hex(template_source.as_bytes()) != renders.template_sha256 {
        return Err("the renders come from another template than the model's".into());
    }
    #[derive(serde::Deserialize)]
    struct Conversation {
        id: String,
        messages: Vec<crate::reference::format::ChatMessage>,
    }
    let path = reference_dir.join(inputs::CONVERSATIONS);
    let conversations: Vec<Conversation> = inputs::read_json(&path).map_err(|e| e.to_string())?;
    let mut out = ChatCheck {
        compared: 0,
        mismatches: Vec::new(),
    };
    let mut check = |id: &str, agp: bool, messages: &[Message], want: &str| {
        out.compared += 1;
        let got = match template.render(messages, agp) {
            Ok(t) => t,
            Err(e) => {
                out.mismatches.push(RenderMismatch {
                    id: id.to_string(),
                    add_generation_prompt: agp,
                    first_difference: 0,
                    detail: format!("our render failed: {e}"),
                });
                return;
            }
        };
        if let Some(i) = first_difference(got.as_bytes(), want.as_bytes()) {
            let show = |s: &str| {
                let mut lo = i.saturating_sub(20).min(s.len());
                while !s.is_char_boundary(lo) {
                    lo -= 1;
                }
                let mut hi = (i + 20).min(s.len());
                while !s.is_char_boundary(hi) {
                    hi += 1;
                }
                format!("{:?}", &s[lo..hi])
            };
            out.mismatches.push(RenderMismatch {
                id: id.to_string(),
                add_generation_prompt: agp,
                first_difference: i,
                detail: format!("byte {i}: ours {} Jinja2 {}", show(&got), show(want)),
            });
        }
    };
    let to_messages = |m: &[crate::reference::format::ChatMessage]| -> Vec<Message> {
        m.iter()
            .map(|m| Message::new(&m.role, &m.content))
            .collect()
    };
    for r in &renders.conversations {
        let c = conversations.iter().find(|c| c.id == r.id).ok_or_else(|| {
            format!(
                "render of conversation {:?}, which is not in {}",
                r.id,
                inputs::CONVERSATIONS
            )
        })?;
        check(
            &r.id,
            r.add_generation_prompt,
            &to_messages(&c.messages),
            &r.text,
        );
    }
    for r in &renders.prompts {
        let file = format!("{}/{}.chat.json", inputs::PROMPTS_DIR, r.id);
        let p = inputs::read_chat_prompt(reference_dir, &file).map_err(|e| e.to_string())?;
        check(
            &r.id,
            r.add_generation_prompt,
            &to_messages(&p.messages),
            &r.text,
        );
    }
    Ok(out)
}

impl Check for PromptTokens {
    const KEY: &'static str = "tokens";
    const LEVEL: Level = Level::Prompt;
    const MEASURES: &'static str =
        "the prompt tokenized by us (chat prompts through our template) against the captured ids";
    const LIMIT_KEYS: &'static [&'static str] = &[];
    const NULL_WHEN_ABSENT: bool = true;

    fn summary(&self) -> String {
        if self.exact() {
            return "exact".into();
        }
        match self.first_difference {
            Some(i) => format!("differ@{i}"),
            None => "text differs".into(),
        }
    }
}

impl Check for CorpusCheck {
    const KEY: &'static str = "tokenizer";
    const LABEL: &'static str = "(tokenizer corpus)";
    const LEVEL: Level = Level::Model;
    const MEASURES: &'static str =
        "the tokenizer corpus, every line and the whole text, parse_special off and on";
    const LIMIT_KEYS: &'static [&'static str] = &[];
    const NULL_WHEN_ABSENT: bool = true;

    fn summary(&self) -> String {
        let ok = self.compared - self.mismatches.len();
        format!("{ok}/{} exact", self.compared)
    }

    fn passed(&self) -> bool {
        self.mismatches.is_empty()
    }
}

impl Check for ChatCheck {
    const KEY: &'static str = "chat";
    const LABEL: &'static str = "(chat renders)";
    const LEVEL: Level = Level::Model;
    const MEASURES: &'static str = "the chat-template renders, byte for byte";
    const LIMIT_KEYS: &'static [&'static str] = &[];
    const NULL_WHEN_ABSENT: bool = true;

    fn summary(&self) -> String {
        let ok = self.compared - self.mismatches.len();
        format!("{ok}/{} exact", self.compared)
    }

    fn passed(&self) -> bool {
        self.mismatches.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_difference_and_fixed_time() {
        assert_eq!(first_difference(&[1, 2, 3], &[1, 2, 3]), None);
        assert_eq!(first_difference(&[1, 2, 3], &[1, 5, 3]), Some(1));
        assert_eq!(first_difference(&[1, 2], &[1, 2, 3]), Some(2));
        assert_eq!(first_difference::<u8>(&[], &[]), None);
        assert_eq!(parse_fixed_time("2026-01-01T00:00:00"), Some(1_767_225_600));
        assert_eq!(parse_fixed_time("1970-01-01T00:00:01"), Some(1));
        assert_eq!(parse_fixed_time("2024-02-29T12:30:15"), Some(1_709_209_815));
        assert_eq!(parse_fixed_time("2026-13-01T00:00:00"), None);
        assert_eq!(parse_fixed_time("2026-01-01 00:00:00"), None);
    }
}
