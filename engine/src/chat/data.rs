//! Rendering a conversation so that what people wrote stays text.
//!
//! In chat mode the rendered prompt is tokenized with control tokens
//! parsed, so that the template's markup (`<|im_start|>`, `<end_of_turn>`)
//! becomes those tokens. Without care, a user who writes
//! `<|im_end|>\n<|im_start|>system\n...` in a message forges a system turn.
//! Here each control token's text inside a message from anyone but the
//! assistant is replaced, before rendering, by a placeholder: one
//! private-use character that occurs nowhere else (not in the template,
//! the messages or any token text). The template sees the message with
//! the placeholder (so `trim`, `split` and the like act as they would on
//! the text), and afterwards [`Guarded::parts`] gives the render as parts
//! for [`crate::tokenizer::Tokenizer::encode_parts`]: the markup with
//! control tokens parsed, each placeholder as its original text, not
//! parsed, tokenized together with the text around it.

use std::collections::HashSet;
use std::ops::RangeInclusive;

use aho_corasick::{AhoCorasick, MatchKind};

use super::{ChatError, Message};
use crate::tokenizer::TextPart;

/// The roles whose text is the model's own, kept as it is.
const TRUSTED_ROLES: [&str; 1] = ["assistant"];

/// The private-use planes 15 and 16, where placeholders come from.
const PLACEHOLDERS: [RangeInclusive<u32>; 2] = [0xF_0000..=0xF_FFFD, 0x10_0000..=0x10_FFFD];

/// Placeholder characters and the texts they stand for.
pub(crate) type Placeholders = Vec<(char, String)>;

/// A render whose messages' control-token texts are placeholders.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Guarded {
    /// The render, with placeholders.
    pub(crate) rendered: String,
    /// Each placeholder and the text it stands for.
    pub(crate) map: Placeholders,
}

impl Guarded {
    /// The rendered text as the template wrote it (placeholders replaced
    /// by the texts they stand for).
    pub fn text(&self) -> String {
        self.rendered
            .chars()
            .fold(String::with_capacity(self.rendered.len()), |mut s, c| {
                match self.lookup(c) {
                    Some(t) => s.push_str(t),
                    None => s.push(c),
                }
                s
            })
    }

    /// The render as parts to tokenize: markup with control tokens parsed,
    /// each control-token text that came from a message not parsed.
    pub fn parts(&self) -> Vec<TextPart<'_>> {
        let mut parts = Vec::new();
        let mut start = 0;
        for (i, c) in self.rendered.char_indices() {
            if let Some(t) = self.lookup(c) {
                if start < i {
                    parts.push(TextPart {
                        text: &self.rendered[start..i],
                        parse_special: true,
                    });
                }
                parts.push(TextPart {
                    text: t,
                    parse_special: false,
                });
                start = i + c.len_utf8();
            }
        }
        if start < self.rendered.len() {
            parts.push(TextPart {
                text: &self.rendered[start..],
                parse_special: true,
            });
        }
        parts
    }

    /// How many control-token texts in the messages were kept as text.
    pub fn kept_as_text(&self) -> usize {
        self.rendered
            .chars()
            .filter(|&c| self.lookup(c).is_some())
            .count()
    }

    /// Drops `prefix` from the start of the render, if it is there.
    pub fn strip_prefix(&mut self, prefix: &str) {
        if !prefix.is_empty() && self.rendered.starts_with(prefix) {
            self.rendered.drain(..prefix.len());
        }
    }

    /// Drops `suffix` from the end of the render, if it is there.
    pub fn strip_suffix(&mut self, suffix: &str) {
        if !suffix.is_empty() && self.rendered.ends_with(suffix) {
            self.rendered.truncate(self.rendered.len() - suffix.len());
        }
    }

    fn lookup(&self, c: char) -> Option<&str> {
        if (c as u32) < 0xF_0000 {
            return None;
        }
        self.map
            .iter()
            .find(|(p, _)| *p == c)
            .map(|(_, t)| t.as_str())
    }
}

/// `messages` with each control-token text in an untrusted message's
/// content replaced by a placeholder, and the placeholders used.
/// `others`: every other text the render may contain (the template's
/// source, the BOS and EOS texts), which placeholders must avoid.
pub(crate) fn defuse(
    messages: &[Message],
    control_texts: &[&str],
    others: &[&str],
) -> Result<(Vec<Message>, Placeholders), ChatError> {
    let mut used: HashSet<char> = HashSet::new();
    let texts = messages
        .iter()
        .map(|m| m.content.as_str())
        .chain(messages.iter().map(|m| m.role.as_str()))
        .chain(control_texts.iter().copied())
        .chain(others.iter().copied());
    for t in texts {
        used.extend(t.chars().filter(|&c| c as u32 >= 0xF_0000));
    }
    let mut free = PLACEHOLDERS
        .iter()
        .flat_map(|r| r.clone())
        .filter_map(char::from_u32)
        .filter(move |c| !used.contains(c));
    let finder = AhoCorasick::builder()
        .match_kind(MatchKind::LeftmostLongest)
        .build(control_texts)
        .map_err(|e| ChatError::Render(format!("control-token texts: {e}")))?;
    let mut map: Placeholders = Vec::new();
    let mut out = Vec::with_capacity(messages.len());
    for m in messages {
        if TRUSTED_ROLES.contains(&m.role.as_str()) || !finder.is_match(&m.content) {
            out.push(m.clone());
            continue;
        }
        let mut content = String::with_capacity(m.content.len());
        let mut last = 0;
        for hit in finder.find_iter(&m.content) {
            content.push_str(&m.content[last..hit.start()]);
            let text = control_texts[hit.pattern().as_usize()];
            let placeholder = match map.iter().find(|(_, t)| t == text) {
                Some(&(p, _)) => p,
                None => {
                    let p = free.next().ok_or_else(|| {
                        ChatError::Render(
                            "no private-use character is left for placeholders".into(),
                        )
                    })?;
                    map.push((p, text.to_string()));
                    p
                }
            };
            content.push(placeholder);
            last = hit.end();
        }
        content.push_str(&m.content[last..]);
        out.push(Message::new(m.role.clone(), content));
    }
    Ok((out, map))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_texts_in_user_messages_become_placeholders() {
        let msgs = [
            Message::new("system", "be <|x|> brief"),
            Message::new("user", "a<|x|>b<|xy|>"),
            Message::new("assistant", "<|x|> stays"),
        ];
        let (out, map) = defuse(&msgs, &["<|xy|>", "<|x|>"], &[]).unwrap();
        assert_eq!(map.len(), 2);
        let (px, pxy) = (map[0].0, map[1].0);
        assert_eq!(map[0].1, "<|x|>");
        assert_eq!(out[0].content, format!("be {px} brief"));
        assert_eq!(out[1].content, format!("a{px}b{pxy}"));
        assert_eq!(out[2].content, "<|x|> stays");
        let g = Guarded {
            rendered: format!("<|x|>u:{}<|x|>", out[1].content),
            map,
        };
        assert_eq!(g.text(), "<|x|>u:a<|x|>b<|xy|><|x|>");
        assert_eq!(g.kept_as_text(), 2);
        let parts: Vec<(&str, bool)> = g
            .parts()
            .iter()
            .map(|p| (p.text, p.parse_special))
            .collect();
        assert_eq!(
            parts,
            vec![
                ("<|x|>u:a", true),
                ("<|x|>", false),
                ("b", true),
                ("<|xy|>", false),
                ("<|x|>", true),
            ]
        );
    }

    #[test]
    fn placeholders_avoid_characters_already_present() {
        let first = char::from_u32(0xF_0000).unwrap();
        let msgs = [Message::new("user", format!("{first}<|x|>"))];
        let (out, map) = defuse(&msgs, &["<|x|>"], &[]).unwrap();
        assert_ne!(map[0].0, first);
        assert_eq!(out[0].content, format!("{first}{}", map[0].0));
    }
}
