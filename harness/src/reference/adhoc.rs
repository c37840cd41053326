//! A self-contained reference directory for any model and any prompts:
//! the inputs of a capture (`models.json`, `prompts/`, the tokenizer
//! corpus, the conversations) written into a directory of the user's
//! choosing, outside the repository (`harness capture --model PATH
//! --out DIR`). The capture then fills in the rest exactly as it does for
//! reference-data/.
//!
//! The prompts file (`--prompts FILE.jsonl`) holds one JSON object per
//! line (blank lines and lines starting with `#` are skipped):
//!
//! ```text
//! {"id": "greeting", "text": "Hello, my name is"}
//! {"text": "1, 2, 3, 4,"}
//! {"id": "ask", "messages": [{"role": "user", "content": "Name three rivers."}], "add_generation_prompt": true}
//! ```
//!
//! `text`: a text prompt, tokenized as written (BOS as the model's
//! metadata says, special-token text left as text). `messages` (with
//! `add_generation_prompt`, default true): a chat prompt, rendered through
//! the model's chat template. `id` is optional (`p1`, `p2`, ... by line);
//! ids are lowercase letters, digits, `-`, `_` and `.`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::format::{CaptureConfig, ChatMessage, ChatPromptFile, ModelEntry, ModelsFile};
use super::inputs::{valid_id, CONVERSATIONS, MODELS_FILE, PROMPTS_DIR, TOKENIZER_CORPUS};
use super::writer::{json_bytes, write_file};
use super::ReferenceError;

/// The repository's tokenizer corpus and conversations, carried by the
/// binary so that a directory captured anywhere has the same text checks.
const CORPUS: &str = include_str!("../../../reference-data/prompts/tokenizer.txt");
const CONVERSATIONS_JSON: &str = include_str!("../../../reference-data/prompts/conversations.json");

/// One prompt given on the command line or in a prompts file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdhocPrompt {
    pub id: String,
    pub body: PromptBody,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PromptBody {
    Text(String),
    Chat(ChatPromptFile),
}

/// A line of the prompts file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    id: Option<String>,
    text: Option<String>,
    messages: Option<Vec<ChatMessage>>,
    add_generation_prompt: Option<bool>,
}

/// Parses a prompts file (format in the module docs); a prompt without an
/// id is `p{n}`, n its place among the prompts (from 1).
pub fn parse_prompts_file(text: &str, source: &str) -> Result<Vec<AdhocPrompt>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let at = || format!("{source}:{}", n + 1);
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let l: Line = serde_json::from_str(t).map_err(|e| format!("{}: {e}", at()))?;
        let id = l.id.unwrap_or_else(|| format!("p{}", out.len() + 1));
        let body = match (l.text, l.messages) {
            (Some(text), None) => {
                if l.add_generation_prompt.is_some() {
                    return Err(format!(
                        "{}: add_generation_prompt belongs to a chat prompt (messages)",
                        at()
                    ));
                }
                PromptBody::Text(text)
            }
            (None, Some(messages)) => {
                if messages.is_empty() {
                    return Err(format!("{}: messages is empty", at()));
                }
                PromptBody::Chat(ChatPromptFile {
                    messages,
                    add_generation_prompt: l.add_generation_prompt.unwrap_or(true),
                })
            }
            _ => {
                return Err(format!(
                    "{}: a prompt has either \"text\" or \"messages\"",
                    at()
                ))
            }
        };
        out.push(AdhocPrompt { id, body });
    }
    Ok(out)
}

/// `-p TEXT` prompts, numbered after `before` others: text prompts, or with
/// `chat` one user message each with the generation prompt.
pub fn command_line_prompts(texts: &[String], chat: bool, before: usize) -> Vec<AdhocPrompt> {
    texts
        .iter()
        .enumerate()
        .map(|(i, t)| AdhocPrompt {
            id: format!("p{}", before + i + 1),
            body: if chat {
                PromptBody::Chat(ChatPromptFile {
                    messages: vec![ChatMessage {
                        role: "user".into(),
                        content: t.clone(),
                    }],
                    add_generation_prompt: true,
                })
            } else {
                PromptBody::Text(t.clone())
            },
        })
        .collect()
}

/// A model id from a file name: its stem, lowercased, any other character
/// than `[a-z0-9._-]` made `-` ("SmolLM2-135M.Q8_0.gguf" ->
/// "smollm2-135m.q8_0").
pub fn model_id_from_file(path: &Path) -> String {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let id: String = stem
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() || "-_.".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect();
    let id = id.trim_start_matches('.').to_string();
    if id.is_empty() {
        "model".into()
    } else {
        id
    }
}

/// Checks the prompts of one directory: valid, unique ids, a text prompt
/// to keep every position's taps (the shortest is picked), chat prompts
/// only for a model with a chat template. Returns the all-positions
/// prompt's id.
pub fn check_prompts(prompts: &[AdhocPrompt], has_template: bool) -> Result<String, String> {
    if prompts.is_empty() {
        return Err("no prompts: give -p TEXT or --prompts FILE.jsonl".into());
    }
    let mut ids = BTreeSet::new();
    for p in prompts {
        if !valid_id(&p.id) || p.id == "tokenizer" || p.id == "conversations" {
            return Err(format!(
                "prompt id {:?} is not usable (lowercase letters, digits, '-', '_', '.'; not tokenizer or conversations)",
                p.id
            ));
        }
        if !ids.insert(p.id.as_str()) {
            return Err(format!("prompt id {:?} appears twice", p.id));
        }
        if let PromptBody::Text(t) = &p.body {
            if t.is_empty() {
                return Err(format!("prompt {:?} is empty", p.id));
            }
        }
        if matches!(p.body, PromptBody::Chat(_)) && !has_template {
            return Err(format!(
                "prompt {:?} is a chat prompt, but the model has no chat template",
                p.id
            ));
        }
    }
    prompts
        .iter()
        .filter_map(|p| match &p.body {
            PromptBody::Text(t) => Some((t.len(), &p.id)),
            PromptBody::Chat(_) => None,
        })
        .min()
        .map(|(_, id)| id.clone())
        .ok_or_else(|| {
            "at least one text prompt is needed (its taps keep every position): give -p TEXT without --chat, or a {\"text\": ...} line".into()
        })
}

/// Writes the inputs of a capture of `model` on `prompts` into `dir` (which
/// must not hold a models.json yet): models.json with `settings`, one file
/// per prompt, the tokenizer corpus and the conversations.
pub fn write_inputs(
    dir: &Path,
    settings: CaptureConfig,
    model: ModelEntry,
    prompts: &[AdhocPrompt],
) -> Result<(), ReferenceError> {
    let models = ModelsFile {
        capture: settings,
        models: vec![model],
    };
    write_file(&dir.join(MODELS_FILE), &json_bytes(&models))?;
    for p in prompts {
        match &p.body {
            PromptBody::Text(t) => write_file(
                &dir.join(format!("{PROMPTS_DIR}/{}.txt", p.id)),
                t.as_bytes(),
            )?,
            PromptBody::Chat(c) => write_file(
                &dir.join(format!("{PROMPTS_DIR}/{}.chat.json", p.id)),
                &json_bytes(c),
            )?,
        }
    }
    write_file(&dir.join(TOKENIZER_CORPUS), CORPUS.as_bytes())?;
    write_file(&dir.join(CONVERSATIONS), CONVERSATIONS_JSON.as_bytes())?;
    Ok(())
}

/// What `harness capture --model PATH --out DIR` was given.
#[derive(Clone, Debug)]
pub struct AdhocRequest {
    pub model: PathBuf,
    /// The model's id in the directory (default: from its file name).
    pub id: Option<String>,
    pub prompts: Vec<AdhocPrompt>,
    pub out: PathBuf,
    pub threads: u32,
    pub top_k: usize,
    pub greedy_steps: usize,
}

/// What [`prepare`] wrote.
#[derive(Clone, Debug)]
pub struct Prepared {
    pub entry: ModelEntry,
    /// Whether the chat prompts need rendering (`chat/<id>.json`).
    pub needs_renders: bool,
}

/// Checks the model and the prompts and writes the inputs of a capture
/// into `req.out`, a new or empty directory. The model's entry holds its
/// absolute path, SHA-256, architecture and whether it has a chat template.
pub fn prepare(req: &AdhocRequest) -> Result<Prepared, String> {
    let shown = req.model.display();
    let meta = std::fs::metadata(&req.model).map_err(|e| format!("--model {shown}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("--model {shown}: not a file"));
    }
    let file = req
        .model
        .canonicalize()
        .map_err(|e| format!("--model {shown}: {e}"))?;
    let gguf = engine::gguf::GgufFile::open(&file).map_err(|e| format!("{shown}: {e}"))?;
    let architecture = gguf
        .architecture()
        .map_err(|e| format!("{shown}: {e}"))?
        .to_string();
    let has_chat_template = gguf
        .get_str_opt("tokenizer.chat_template")
        .map_err(|e| format!("{shown}: {e}"))?
        .is_some();
    drop(gguf);
    let id = match &req.id {
        Some(id) if !valid_id(id) => {
            return Err(format!(
                "--id {id:?}: lowercase letters, digits, '-', '_' and '.' only"
            ))
        }
        Some(id) => id.clone(),
        None => model_id_from_file(&file),
    };
    if id == PROMPTS_DIR || id == super::inputs::CHAT_DIR {
        return Err(format!("model id {id:?} is reserved; pass --id"));
    }
    let all_positions_prompt = check_prompts(&req.prompts, has_chat_template)?;
    if req.out.exists() {
        let mut entries =
            std::fs::read_dir(&req.out).map_err(|e| format!("--out {}: {e}", req.out.display()))?;
        if entries.next().is_some() {
            return Err(format!(
                "--out {}: not empty (a capture writes a new directory)",
                req.out.display()
            ));
        }
    }
    let sha256 = super::writer::sha256_file(&file).map_err(|e| e.to_string())?;
    let entry = ModelEntry {
        id,
        file: file.to_string_lossy().into_owned(),
        sha256,
        architecture,
        has_chat_template,
        prompts: None,
        tap_prompts: None,
        min_first_token_margin: None,
        kv_type: None,
    };
    let settings = CaptureConfig {
        threads: req.threads,
        top_k: req.top_k,
        greedy_steps: req.greedy_steps,
        all_positions_prompt,
    };
    write_inputs(&req.out, settings, entry.clone(), &req.prompts).map_err(|e| e.to_string())?;
    Ok(Prepared {
        entry,
        needs_renders: req
            .prompts
            .iter()
            .any(|p| matches!(p.body, PromptBody::Chat(_))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::format::PromptKind;
    use crate::reference::inputs::{list_prompts, load_models_file, read_chat_prompt, read_text};

    const FILE: &str = r#"
# a comment
{"id": "greeting", "text": "Hello, my name is"}
{"text": "1, 2, 3, 4,"}

{"messages": [{"role": "user", "content": "Name three rivers."}]}
{"id": "no-gen", "messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": false}
"#;

    #[test]
    fn prompts_file_lines_become_text_and_chat_prompts() {
        let p = parse_prompts_file(FILE, "f.jsonl").unwrap();
        let ids: Vec<&str> = p.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(ids, ["greeting", "p2", "p3", "no-gen"]);
        assert_eq!(p[1].body, PromptBody::Text("1, 2, 3, 4,".into()));
        match (&p[2].body, &p[3].body) {
            (PromptBody::Chat(a), PromptBody::Chat(b)) => {
                assert!(a.add_generation_prompt);
                assert!(!b.add_generation_prompt);
                assert_eq!(a.messages[0].content, "Name three rivers.");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_prompt_lines_name_their_line() {
        for (text, want) in [
            ("{\"text\": \"a\", \"messages\": []}", "either"),
            ("{}", "either"),
            ("{\"text\": 3}", "f:1"),
            ("\n{\"messages\": []}", "f:2: messages is empty"),
            ("{\"text\": \"a\", \"colour\": 1}", "colour"),
            (
                "{\"text\": \"a\", \"add_generation_prompt\": true}",
                "chat prompt",
            ),
            ("not json", "f:1"),
        ] {
            let e = parse_prompts_file(text, "f").unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn checks_pick_the_shortest_text_prompt_and_refuse_what_cannot_be_captured() {
        let mut p = parse_prompts_file(FILE, "f").unwrap();
        assert_eq!(check_prompts(&p, true).unwrap(), "p2");
        assert!(check_prompts(&p, false)
            .unwrap_err()
            .contains("no chat template"));
        let chat_only = command_line_prompts(&["a".into()], true, 0);
        assert!(check_prompts(&chat_only, true)
            .unwrap_err()
            .contains("text prompt"));
        p[1].id = "greeting".into();
        assert!(check_prompts(&p, true).unwrap_err().contains("twice"));
        p[1].id = "Bad Id".into();
        assert!(check_prompts(&p, true).unwrap_err().contains("not usable"));
        p[1].id = "tokenizer".into();
        assert!(check_prompts(&p, true).unwrap_err().contains("not usable"));
        assert!(check_prompts(&[], true).unwrap_err().contains("no prompts"));
    }

    #[test]
    fn model_ids_from_file_names() {
        assert_eq!(
            model_id_from_file(Path::new("/x/SmolLM2-135M-Instruct.Q8_0.gguf")),
            "smollm2-135m-instruct.q8_0"
        );
        assert_eq!(
            model_id_from_file(Path::new("my model (v2).gguf")),
            "my-model--v2-"
        );
        assert_eq!(model_id_from_file(Path::new(".gguf")), "gguf");
        assert_eq!(model_id_from_file(Path::new("")), "model");
        assert!(valid_id(&model_id_from_file(Path::new("Ünïcode.gguf"))));
    }

    #[test]
    fn written_inputs_read_back_as_a_reference_directory() {
        let dir = std::env::temp_dir().join(format!("adhoc-inputs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut prompts = parse_prompts_file(FILE, "f").unwrap();
        prompts.extend(command_line_prompts(&["Once".into()], false, prompts.len()));
        let all = check_prompts(&prompts, true).unwrap();
        assert_eq!(all, "p5");
        let settings = CaptureConfig {
            threads: 2,
            top_k: 64,
            greedy_steps: 8,
            all_positions_prompt: all,
        };
        let model = ModelEntry {
            id: "m".into(),
            file: "/abs/m.gguf".into(),
            sha256: "0".repeat(64),
            architecture: "llama".into(),
            has_chat_template: true,
            prompts: None,
            tap_prompts: None,
            min_first_token_margin: None,
            kv_type: None,
        };
        write_inputs(&dir, settings.clone(), model, &prompts).unwrap();
        let models = load_models_file(&dir).unwrap();
        assert_eq!(models.capture, settings);
        assert_eq!(models.models[0].file, "/abs/m.gguf");
        let listed = list_prompts(&dir).unwrap();
        let ids: Vec<(&str, PromptKind)> = listed.iter().map(|p| (p.id.as_str(), p.kind)).collect();
        assert_eq!(
            ids,
            [
                ("greeting", PromptKind::Text),
                ("no-gen", PromptKind::Chat),
                ("p2", PromptKind::Text),
                ("p3", PromptKind::Chat),
                ("p5", PromptKind::Text)
            ]
        );
        assert_eq!(
            read_text(&dir, &listed[0].file).unwrap(),
            "Hello, my name is"
        );
        assert!(
            !read_chat_prompt(&dir, &listed[1].file)
                .unwrap()
                .add_generation_prompt
        );
        assert_eq!(read_text(&dir, TOKENIZER_CORPUS).unwrap(), CORPUS);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
