//! Models and prompts named on the command line by id or by path
//! (`--model models/x.gguf`, `--prompt ref/prompts/p1.txt`): an argument
//! with a `/` in it or a file extension of its kind (`.gguf`; `.txt`,
//! `.chat.json`) is a path, anything else an id.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::reference::format::Manifest;
use crate::reference::inputs::{read_json, MANIFEST_FILE};
use crate::reference::writer::sha256_file;

/// The models named: their ids, and for those named by path the file to
/// run instead of the one the reference data names (the same bytes:
/// matched by SHA-256).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamedModels {
    pub ids: Vec<String>,
    pub files: BTreeMap<String, PathBuf>,
}

fn is_path(arg: &str, extensions: &[&str]) -> bool {
    arg.contains('/') || extensions.iter().any(|e| arg.ends_with(e))
}

/// Resolves `--model` arguments against the reference data at `dir`.
pub fn resolve_models(dir: &Path, args: &[String]) -> Result<NamedModels, String> {
    let mut out = NamedModels::default();
    let mut manifest: Option<Manifest> = None;
    for arg in args {
        if !is_path(arg, &[".gguf"]) {
            out.ids.push(arg.clone());
            continue;
        }
        let file = PathBuf::from(arg);
        if !file.is_file() {
            return Err(format!("--model {arg}: no such file"));
        }
        let sha = sha256_file(&file).map_err(|e| e.to_string())?;
        if manifest.is_none() {
            manifest = Some(read_json(&dir.join(MANIFEST_FILE)).map_err(|e| e.to_string())?);
        }
        let m = manifest.as_ref().expect("read above");
        let Some(entry) = m.models.iter().find(|e| e.sha256 == sha) else {
            let known: Vec<String> = m
                .models
                .iter()
                .map(|e| format!("{} ({})", e.id, e.file))
                .collect();
            return Err(format!(
                "--model {arg}: SHA-256 {}… is no model of {} (it has {}); capture it first (harness capture --model {arg} --out DIR)",
                &sha[..12],
                dir.display(),
                known.join(", ")
            ));
        };
        out.ids.push(entry.id.clone());
        out.files.insert(entry.id.clone(), file);
    }
    Ok(out)
}

/// Resolves `--prompt` arguments against the reference data at `dir`: a
/// path names the prompt of its file name (`p1.txt`, `ask.chat.json`),
/// whose bytes must be the captured prompt file's.
pub fn resolve_prompts(dir: &Path, args: &[String]) -> Result<Vec<String>, String> {
    let mut ids = Vec::new();
    for arg in args {
        if !is_path(arg, &[".txt", ".chat.json"]) {
            ids.push(arg.clone());
            continue;
        }
        let file = Path::new(arg);
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (id, rel) = if let Some(id) = name.strip_suffix(".chat.json") {
            (id.to_string(), format!("prompts/{name}"))
        } else if let Some(id) = name.strip_suffix(".txt") {
            (id.to_string(), format!("prompts/{name}"))
        } else {
            return Err(format!(
                "--prompt {arg}: a prompt file is <id>.txt or <id>.chat.json"
            ));
        };
        let given = std::fs::read(file).map_err(|e| format!("--prompt {arg}: {e}"))?;
        let captured = std::fs::read(dir.join(&rel))
            .map_err(|_| format!("--prompt {arg}: {} has no prompt {id:?}", dir.display()))?;
        if given != captured {
            return Err(format!(
                "--prompt {arg}: differs from the captured {}",
                dir.join(&rel).display()
            ));
        }
        ids.push(id);
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::format::{CaptureConfig, ManifestModel};
    use crate::reference::writer::{json_bytes, sha256_hex, write_file};

    fn dir_with(model_bytes: &[u8]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "names-{}-{}",
            std::process::id(),
            sha256_hex(model_bytes)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let manifest = Manifest {
            format: "sharpi-reference".into(),
            format_version: 1,
            capture: CaptureConfig {
                threads: 1,
                top_k: 4,
                greedy_steps: 1,
                all_positions_prompt: "a".into(),
            },
            prompts: vec![],
            tokenizer_corpus: crate::reference::format::CorpusEntry {
                file: "prompts/tokenizer.txt".into(),
                count: 0,
            },
            conversations: crate::reference::format::CorpusEntry {
                file: "prompts/conversations.json".into(),
                count: 0,
            },
            models: vec![ManifestModel {
                id: "tiny".into(),
                file: "/elsewhere/tiny.gguf".into(),
                sha256: sha256_hex(model_bytes),
                architecture: "llama".into(),
                has_chat_template: false,
                capture: None,
                chat_renders: None,
                prompts: vec![],
                llama_cpp_version: None,
                kv_type: None,
            }],
            files: vec![],
            total_bytes: 0,
        };
        write_file(&dir.join(MANIFEST_FILE), &json_bytes(&manifest)).unwrap();
        write_file(&dir.join("model.gguf"), model_bytes).unwrap();
        write_file(&dir.join("other.gguf"), b"other bytes").unwrap();
        write_file(&dir.join("prompts/a.txt"), b"Once upon").unwrap();
        write_file(&dir.join("mine/a.txt"), b"Once upon").unwrap();
        write_file(&dir.join("mine/b/a.txt"), b"Twice upon").unwrap();
        dir
    }

    #[test]
    fn models_by_path_are_matched_by_their_bytes() {
        let dir = dir_with(b"tiny model bytes");
        let p = |f: &str| dir.join(f).to_string_lossy().into_owned();
        let got = resolve_models(&dir, &["tiny".into(), p("model.gguf")]).unwrap();
        assert_eq!(got.ids, ["tiny", "tiny"]);
        assert_eq!(got.files["tiny"], dir.join("model.gguf"));
        let e = resolve_models(&dir, &[p("other.gguf")]).unwrap_err();
        assert!(e.contains("is no model of") && e.contains("tiny ("), "{e}");
        let e = resolve_models(&dir, &[p("missing.gguf")]).unwrap_err();
        assert!(e.contains("no such file"), "{e}");
        // An id is not looked up here (the run names unknown ids).
        assert_eq!(resolve_models(&dir, &["x".into()]).unwrap().ids, ["x"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn prompts_by_path_must_be_the_captured_bytes() {
        let dir = dir_with(b"tiny model bytes 2");
        let p = |f: &str| dir.join(f).to_string_lossy().into_owned();
        assert_eq!(
            resolve_prompts(&dir, &["a".into(), p("mine/a.txt"), p("prompts/a.txt")]).unwrap(),
            ["a", "a", "a"]
        );
        let e = resolve_prompts(&dir, &[p("mine/b/a.txt")]).unwrap_err();
        assert!(e.contains("differs"), "{e}");
        let e = resolve_prompts(&dir, &[p("mine/c.txt")]).unwrap_err();
        assert!(e.contains("mine/c.txt"), "{e}");
        let e = resolve_prompts(&dir, &[p("mine/a.json")]).unwrap_err();
        assert!(e.contains("<id>.txt"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
