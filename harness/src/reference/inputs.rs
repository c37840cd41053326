//! The inputs of a capture, as they sit in a reference-data directory:
//! `models.json`, the prompt files, the tokenizer corpus, the conversations
//! and the chat-template renders.

use std::collections::BTreeSet;
use std::path::Path;

use serde::de::DeserializeOwned;

use super::format::{ChatPromptFile, ChatRenders, ModelsFile, PromptKind};
use super::ReferenceError;

pub const MODELS_FILE: &str = "models.json";
pub const MANIFEST_FILE: &str = "manifest.json";
pub const PROMPTS_DIR: &str = "prompts";
pub const CHAT_DIR: &str = "chat";
/// The tokenizer corpus, relative to the reference-data directory.
pub const TOKENIZER_CORPUS: &str = "prompts/tokenizer.txt";
/// The conversations rendered through chat templates.
pub const CONVERSATIONS: &str = "prompts/conversations.json";

/// Reads and parses a JSON file.
pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T, ReferenceError> {
    let bytes = std::fs::read(path).map_err(|e| ReferenceError::io(path, e))?;
    serde_json::from_slice(&bytes).map_err(|source| ReferenceError::Json {
        path: path.to_path_buf(),
        source,
    })
}

/// Identifiers (models, prompts) name files: lowercase ASCII letters,
/// digits, '-', '_' and '.', not starting with '.'.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b))
}

/// Reads `models.json` and checks it: unique valid ids, 64-hex SHA-256s,
/// sane settings.
pub fn load_models_file(dir: &Path) -> Result<ModelsFile, ReferenceError> {
    let path = dir.join(MODELS_FILE);
    let models: ModelsFile = read_json(&path)?;
    let bad = |msg: String| ReferenceError::Invalid(format!("{}: {msg}", path.display()));
    let mut ids = BTreeSet::new();
    for m in &models.models {
        if !valid_id(&m.id) {
            return Err(bad(format!("model id {:?} is not a valid file name", m.id)));
        }
        if !ids.insert(m.id.as_str()) {
            return Err(bad(format!("model id {:?} appears twice", m.id)));
        }
        if m.sha256.len() != 64 || !m.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad(format!("model {}: sha256 is not 64 hex digits", m.id)));
        }
        if m.id == PROMPTS_DIR || m.id == CHAT_DIR {
            return Err(bad(format!("model id {:?} is reserved", m.id)));
        }
    }
    let c = &models.capture;
    if c.threads == 0 || c.top_k == 0 || c.greedy_steps == 0 {
        return Err(bad(
            "threads, top_k and greedy_steps must be positive".into()
        ));
    }
    Ok(models)
}

/// One prompt file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PromptSource {
    pub id: String,
    pub kind: PromptKind,
    /// Relative to the reference-data directory.
    pub file: String,
}

/// The prompts of `prompts/`: `<id>.txt` (text; not tokenizer.txt) and
/// `<id>.chat.json` (chat), sorted by id. Any other file there, other than
/// the tokenizer corpus and the conversations, is an error (a misnamed
/// prompt would otherwise be skipped silently).
pub fn list_prompts(dir: &Path) -> Result<Vec<PromptSource>, ReferenceError> {
    let pdir = dir.join(PROMPTS_DIR);
    let entries = std::fs::read_dir(&pdir).map_err(|e| ReferenceError::io(&pdir, e))?;
    let mut prompts = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| ReferenceError::io(&pdir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let rel = format!("{PROMPTS_DIR}/{name}");
        if rel == TOKENIZER_CORPUS || rel == CONVERSATIONS {
            continue;
        }
        let (id, kind) = if let Some(id) = name.strip_suffix(".chat.json") {
            (id, PromptKind::Chat)
        } else if let Some(id) = name.strip_suffix(".txt") {
            (id, PromptKind::Text)
        } else {
            return Err(ReferenceError::Invalid(format!(
                "{}: not a prompt file (<id>.txt or <id>.chat.json)",
                pdir.join(&name).display()
            )));
        };
        if !valid_id(id) {
            return Err(ReferenceError::Invalid(format!(
                "{}: prompt id {id:?} is not a valid name",
                pdir.join(&name).display()
            )));
        }
        prompts.push(PromptSource {
            id: id.to_string(),
            kind,
            file: rel,
        });
    }
    prompts.sort_by(|a, b| a.id.cmp(&b.id));
    if let Some(w) = prompts.windows(2).find(|w| w[0].id == w[1].id) {
        return Err(ReferenceError::Invalid(format!(
            "prompt id {:?} has both a .txt and a .chat.json file",
            w[0].id
        )));
    }
    Ok(prompts)
}

/// The exact text of a text prompt (the file's bytes, which must be UTF-8).
pub fn read_text(dir: &Path, rel: &str) -> Result<String, ReferenceError> {
    let path = dir.join(rel);
    let bytes = std::fs::read(&path).map_err(|e| ReferenceError::io(&path, e))?;
    String::from_utf8(bytes)
        .map_err(|_| ReferenceError::Invalid(format!("{}: not UTF-8", path.display())))
}

/// A chat prompt file.
pub fn read_chat_prompt(dir: &Path, rel: &str) -> Result<ChatPromptFile, ReferenceError> {
    read_json(&dir.join(rel))
}

/// The chat-template renders of a model, `chat/<model>.json`.
pub fn chat_renders_path(model_id: &str) -> String {
    format!("{CHAT_DIR}/{model_id}.json")
}

pub fn read_chat_renders(dir: &Path, model_id: &str) -> Result<ChatRenders, ReferenceError> {
    read_json(&dir.join(chat_renders_path(model_id)))
}

/// The lines of the tokenizer corpus: split at '\n' (a '\r' stays part of
/// its line); the empty piece after a final newline is not a line.
pub fn corpus_lines(text: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = text.split('\n').collect();
    if lines.last() == Some(&"") {
        lines.pop();
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corpus_lines_keep_whitespace_and_drop_only_the_final_empty_piece() {
        assert_eq!(corpus_lines("a\n\n b\t\n"), vec!["a", "", " b\t"]);
        assert_eq!(corpus_lines("a\r\nb"), vec!["a\r", "b"]);
        assert!(corpus_lines("").is_empty());
        assert_eq!(corpus_lines("\n"), vec![""]);
    }

    #[test]
    fn ids_are_file_names() {
        assert!(valid_id("smollm2-135m-q4_1"));
        assert!(!valid_id("Upper"));
        assert!(!valid_id("a/b"));
        assert!(!valid_id(".hidden"));
        assert!(!valid_id(""));
    }
}
