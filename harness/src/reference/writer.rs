//! Writing reference data: JSON and safetensors files with deterministic
//! bytes, and the manifest that indexes them.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::format::{
    CorpusEntry, FileEntry, Manifest, ManifestModel, ModelCapture, ModelsFile, PromptEntry, FORMAT,
    FORMAT_VERSION,
};
use super::inputs::{self, CHAT_DIR, CONVERSATIONS, MODELS_FILE, PROMPTS_DIR, TOKENIZER_CORPUS};
use super::ReferenceError;

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// SHA-256 of a file, read in 1 MiB pieces.
pub fn sha256_file(path: &Path) -> Result<String, ReferenceError> {
    let mut f = std::fs::File::open(path).map_err(|e| ReferenceError::io(path, e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(|e| ReferenceError::io(path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// JSON as every reference file is written: keys sorted, two-space indent,
/// arrays of scalars on one line, and arrays of flat objects (whose values
/// are scalars or arrays of scalars) one element per line; final newline.
/// Deterministic: the same value gives the same bytes.
pub fn json_bytes<T: Serialize>(value: &T) -> Vec<u8> {
    let v = serde_json::to_value(value).expect("reference types serialize");
    let mut out = String::new();
    write_value(&v, 0, &mut out);
    out.push('\n');
    out.into_bytes()
}

fn is_scalar(v: &Value) -> bool {
    !matches!(v, Value::Array(_) | Value::Object(_))
}

fn is_flat(v: &Value) -> bool {
    match v {
        Value::Array(a) => a.iter().all(is_scalar),
        Value::Object(o) => o
            .values()
            .all(|x| is_scalar(x) || matches!(x, Value::Array(a) if a.iter().all(is_scalar))),
        _ => true,
    }
}

fn compact(v: &Value) -> String {
    serde_json::to_string(v).expect("JSON values serialize")
}

fn write_value(v: &Value, indent: usize, out: &mut String) {
    let pad = |n: usize| "  ".repeat(n);
    match v {
        Value::Array(a) if a.is_empty() || a.iter().all(is_scalar) => out.push_str(&compact(v)),
        Value::Array(a) => {
            out.push_str("[\n");
            for (i, x) in a.iter().enumerate() {
                out.push_str(&pad(indent + 1));
                if is_flat(x) {
                    out.push_str(&compact(x));
                } else {
                    write_value(x, indent + 1, out);
                }
                out.push_str(if i + 1 < a.len() { ",\n" } else { "\n" });
            }
            out.push_str(&pad(indent));
            out.push(']');
        }
        Value::Object(o) if o.is_empty() => out.push_str("{}"),
        Value::Object(o) => {
            out.push_str("{\n");
            for (i, (k, x)) in o.iter().enumerate() {
                out.push_str(&pad(indent + 1));
                out.push_str(&compact(&Value::String(k.clone())));
                out.push_str(": ");
                write_value(x, indent + 1, out);
                out.push_str(if i + 1 < o.len() { ",\n" } else { "\n" });
            }
            out.push_str(&pad(indent));
            out.push('}');
        }
        _ => out.push_str(&compact(v)),
    }
}

/// Writes `bytes` to `path` through a temporary file in the same directory
/// and a rename, creating the parent directories.
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<(), ReferenceError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| ReferenceError::io(parent, e))?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, bytes).map_err(|e| ReferenceError::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| ReferenceError::io(path, e))
}

/// Files under `dir/rel` (recursively), as '/'-separated paths relative to
/// `dir`, sorted. A missing `dir/rel` gives nothing.
fn files_under(dir: &Path, rel: &str, out: &mut Vec<String>) -> Result<(), ReferenceError> {
    let path = dir.join(rel);
    let meta = match std::fs::metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(ReferenceError::io(&path, e)),
    };
    if meta.is_file() {
        out.push(rel.to_string());
        return Ok(());
    }
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&path).map_err(|e| ReferenceError::io(&path, e))? {
        let entry = entry.map_err(|e| ReferenceError::io(&path, e))?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    for name in names {
        files_under(dir, &format!("{rel}/{name}"), out)?;
    }
    Ok(())
}

/// Builds the manifest of reference-data directory `dir` from its
/// models.json, its prompts and whatever model captures it holds (a model
/// listed but not captured yet has `capture: None`).
pub fn build_manifest(dir: &Path, models: &ModelsFile) -> Result<Manifest, ReferenceError> {
    let prompts = inputs::list_prompts(dir)?
        .into_iter()
        .map(|p| PromptEntry {
            id: p.id,
            kind: p.kind,
            file: p.file,
        })
        .collect();
    let corpus = inputs::read_text(dir, TOKENIZER_CORPUS)?;
    let conversations: Vec<serde_json::Value> = inputs::read_json(&dir.join(CONVERSATIONS))?;

    let mut rels = vec![MODELS_FILE.to_string()];
    files_under(dir, PROMPTS_DIR, &mut rels)?;
    files_under(dir, CHAT_DIR, &mut rels)?;
    let mut manifest_models = Vec::new();
    for m in &models.models {
        let capture_rel = format!("{}/capture.json", m.id);
        let capture: Option<ModelCapture> = if dir.join(&capture_rel).is_file() {
            Some(inputs::read_json(&dir.join(&capture_rel))?)
        } else {
            None
        };
        if capture.is_some() {
            files_under(dir, &m.id, &mut rels)?;
        }
        let chat_rel = inputs::chat_renders_path(&m.id);
        manifest_models.push(ManifestModel {
            id: m.id.clone(),
            file: m.file.clone(),
            sha256: m.sha256.clone(),
            architecture: m.architecture.clone(),
            has_chat_template: m.has_chat_template,
            capture: capture.as_ref().map(|_| capture_rel.clone()),
            chat_renders: dir.join(&chat_rel).is_file().then_some(chat_rel),
            prompts: capture
                .as_ref()
                .map(|c| c.prompts.iter().map(|p| p.id.clone()).collect())
                .unwrap_or_default(),
            llama_cpp_version: capture.as_ref().map(|c| {
                format!(
                    "{} (llama {})",
                    c.llama_cpp.crate_version, c.llama_cpp.llama_version
                )
            }),
            kv_type: m.kv_type,
        });
    }
    rels.sort();
    rels.dedup();
    let mut files = Vec::new();
    for rel in rels {
        if rel.ends_with(".tmp") {
            continue;
        }
        let path = dir.join(&rel);
        let bytes = std::fs::metadata(&path)
            .map_err(|e| ReferenceError::io(&path, e))?
            .len();
        files.push(FileEntry {
            sha256: sha256_file(&path)?,
            path: rel,
            bytes,
        });
    }
    let total_bytes = files.iter().map(|f| f.bytes).sum();
    Ok(Manifest {
        format: FORMAT.to_string(),
        format_version: FORMAT_VERSION,
        capture: models.capture.clone(),
        prompts,
        tokenizer_corpus: CorpusEntry {
            file: TOKENIZER_CORPUS.to_string(),
            count: inputs::corpus_lines(&corpus).len(),
        },
        conversations: CorpusEntry {
            file: CONVERSATIONS.to_string(),
            count: conversations.len(),
        },
        models: manifest_models,
        files,
        total_bytes,
    })
}

/// Rebuilds and writes `dir/manifest.json`.
pub fn write_manifest(dir: &Path, models: &ModelsFile) -> Result<Manifest, ReferenceError> {
    let manifest = build_manifest(dir, models)?;
    write_file(&dir.join(inputs::MANIFEST_FILE), &json_bytes(&manifest))?;
    Ok(manifest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::format::{TokenizedText, TokenizerCapture};

    #[test]
    fn sha256_of_known_input() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn json_layout_is_sorted_and_one_flat_item_per_line_and_parses_back() {
        let t = TokenizerCapture {
            format: FORMAT.into(),
            format_version: FORMAT_VERSION,
            model: "m".into(),
            corpus: TOKENIZER_CORPUS.into(),
            corpus_sha256: "00".into(),
            add_special: true,
            whole: TokenizedText {
                plain: vec![1, 2],
                special: vec![1, 2],
            },
            lines: vec![
                TokenizedText {
                    plain: vec![5],
                    special: vec![6, 7],
                },
                TokenizedText {
                    plain: vec![],
                    special: vec![],
                },
            ],
        };
        let bytes = json_bytes(&t);
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(
            text.contains("\n    {\"plain\":[5],\"special\":[6,7]},\n"),
            "{text}"
        );
        assert!(
            text.contains("\"whole\": {\n    \"plain\": [1,2],\n"),
            "{text}"
        );
        assert!(
            text.find("\"add_special\"").unwrap() < text.find("\"corpus\"").unwrap(),
            "keys sorted"
        );
        assert!(text.ends_with("}\n"));
        let back: TokenizerCapture = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(back, t);
        // an f32 goes through JSON and back to the same bits
        let x = 0.1f32;
        let back: f32 = serde_json::from_slice(&json_bytes(&x)).unwrap();
        assert_eq!(back.to_bits(), x.to_bits());
    }
}
