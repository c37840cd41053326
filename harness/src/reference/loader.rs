//! Reading reference data: the manifest, each model's capture, and per
//! prompt the tokens, top-k tables, logits, greedy steps and taps.
//!
//! ```no_run
//! use harness::reference::{ReferenceData, TapSel};
//! let data = ReferenceData::open("reference-data".as_ref())?;
//! for model in data.models() {
//!     for prompt in model.prompts() {
//!         let p = model.load_prompt(&prompt.id)?;
//!         let last = p.position(p.tokens().len() - 1);
//!         let q = p.tap("Qcur", Some(0), TapSel::Op("ROPE"));
//!         # let _ = (last, q);
//!     }
//! }
//! # Ok::<(), harness::reference::ReferenceError>(())
//! ```

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use super::arrays::{PromptArrays, Tap, TopKRow};
use super::corpus::CorpusBase;
use super::format::{
    elementwise_op, expected_ne, ChatRenders, Manifest, ModelCapture, PromptCapture, TapInfo,
    TokenizerCapture, FORMAT, FORMAT_VERSION,
};
use super::inputs::{self, MANIFEST_FILE};
use super::sampling::SamplingCapture;
use super::writer::sha256_file;
use super::ReferenceError;

/// A reference-data directory: its manifest and every captured model.
#[derive(Debug)]
pub struct ReferenceData {
    root: PathBuf,
    manifest: Manifest,
    captures: Vec<ModelCapture>,
}

fn check_format(what: &str, format: &str, version: u32) -> Result<(), ReferenceError> {
    if format != FORMAT || version != FORMAT_VERSION {
        return Err(ReferenceError::Invalid(format!(
            "{what}: format {format} v{version}, this reader knows {FORMAT} v{FORMAT_VERSION}"
        )));
    }
    Ok(())
}

impl ReferenceData {
    /// Reads `root/manifest.json` and the capture of every model it lists as
    /// captured.
    pub fn open(root: &Path) -> Result<ReferenceData, ReferenceError> {
        ReferenceData::open_models(root, &[])
    }

    /// [`ReferenceData::open`] reading the captures of the models `ids`
    /// only (every model when empty); the others are in the manifest but
    /// not loaded (their files need not be there).
    pub fn open_models(root: &Path, ids: &[String]) -> Result<ReferenceData, ReferenceError> {
        let manifest: Manifest = inputs::read_json(&root.join(MANIFEST_FILE))?;
        check_format(MANIFEST_FILE, &manifest.format, manifest.format_version)?;
        let mut captures = Vec::new();
        for m in &manifest.models {
            if !ids.is_empty() && !ids.contains(&m.id) {
                continue;
            }
            if let Some(rel) = &m.capture {
                let c: ModelCapture = inputs::read_json(&root.join(rel))?;
                check_format(rel, &c.format, c.format_version)?;
                if c.model.id != m.id {
                    return Err(ReferenceError::Invalid(format!(
                        "{rel}: model id {:?}, the manifest says {:?}",
                        c.model.id, m.id
                    )));
                }
                captures.push(c);
            }
        }
        Ok(ReferenceData {
            root: root.to_path_buf(),
            manifest,
            captures,
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The captured models, in models.json order.
    pub fn models(&self) -> impl Iterator<Item = ModelRef<'_>> {
        self.captures.iter().map(move |c| ModelRef {
            root: &self.root,
            capture: c,
        })
    }

    pub fn model(&self, id: &str) -> Option<ModelRef<'_>> {
        self.models().find(|m| m.id() == id)
    }

    /// The file of model `id`'s corpus base, when the manifest lists one.
    pub fn corpus_file(&self, id: &str) -> Option<PathBuf> {
        let rel = format!("{id}/{}", super::corpus::CORPUS_FILE);
        self.manifest
            .files
            .iter()
            .any(|f| f.path == rel)
            .then(|| self.root.join(rel))
    }

    /// Model `id`'s corpus base, when the manifest lists one.
    pub fn corpus(&self, id: &str) -> Option<Result<CorpusBase, ReferenceError>> {
        let path = self.corpus_file(id)?;
        Some(
            std::fs::read(&path)
                .map_err(|e| ReferenceError::io(&path, e))
                .and_then(|b| CorpusBase::from_safetensors(&b))
                .map_err(|e| ReferenceError::Invalid(format!("{}: {e}", path.display()))),
        )
    }

    /// Model `id`'s sampling capture (llama.cpp's sampler chain on its
    /// captured logits), when the manifest lists one.
    pub fn sampling(&self, id: &str) -> Option<Result<SamplingCapture, ReferenceError>> {
        let rel = format!("{id}/{}", super::sampling::SAMPLING_FILE);
        if !self.manifest.files.iter().any(|f| f.path == rel) {
            return None;
        }
        Some(inputs::read_json(&self.root.join(rel)))
    }

    /// The item id of model `id`'s corpus (`corpus:NAME`; `corpus:?` when
    /// its base cannot be read, which the item then reports).
    pub fn corpus_item(&self, id: &str) -> Option<String> {
        Some(match self.corpus(id)? {
            Ok(base) => base.item_id(),
            Err(_) => "corpus:?".to_string(),
        })
    }

    /// Checks that every file the manifest lists exists with its size and
    /// SHA-256.
    pub fn verify_files(&self) -> Result<(), ReferenceError> {
        self.verify_files_of(&[])
    }

    /// [`ReferenceData::verify_files`] for the files the models `ids` (all
    /// when empty) and every model share: another model's directory and
    /// chat renders are skipped.
    pub fn verify_files_of(&self, ids: &[String]) -> Result<(), ReferenceError> {
        let other = |path: &str| {
            !ids.is_empty()
                && self.manifest.models.iter().any(|m| {
                    !ids.contains(&m.id)
                        && (path.starts_with(&format!("{}/", m.id))
                            || path == format!("chat/{}.json", m.id))
                })
        };
        for f in self.manifest.files.iter().filter(|f| !other(&f.path)) {
            let path = self.root.join(&f.path);
            let len = std::fs::metadata(&path)
                .map_err(|e| ReferenceError::io(&path, e))?
                .len();
            if len != f.bytes {
                return Err(ReferenceError::Invalid(format!(
                    "{}: {len} bytes, the manifest says {}",
                    f.path, f.bytes
                )));
            }
            let sha = sha256_file(&path)?;
            if sha != f.sha256 {
                return Err(ReferenceError::Invalid(format!(
                    "{}: SHA-256 {sha}, the manifest says {}",
                    f.path, f.sha256
                )));
            }
        }
        Ok(())
    }
}

/// Which of the graph tensors sharing a name to pick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TapSel<'s> {
    /// The first (in graph order) produced by this ggml op, e.g. "ROPE".
    Op(&'s str),
    /// The n-th of them in graph order.
    Occurrence(u32),
    /// The last one in graph order (the value the name ends up with).
    Last,
}

/// One captured model.
#[derive(Clone, Copy, Debug)]
pub struct ModelRef<'a> {
    root: &'a Path,
    capture: &'a ModelCapture,
}

impl<'a> ModelRef<'a> {
    pub fn id(&self) -> &'a str {
        &self.capture.model.id
    }

    /// Settings, versions, facts, tap catalog and per-prompt summaries.
    pub fn capture(&self) -> &'a ModelCapture {
        self.capture
    }

    pub fn prompts(&self) -> impl Iterator<Item = &'a PromptCapture> {
        self.capture.prompts.iter()
    }

    pub fn prompt(&self, id: &str) -> Option<&'a PromptCapture> {
        self.capture.prompts.iter().find(|p| p.id == id)
    }

    /// The tap catalog entry for (`base`, `layer`, `sel`); `layer` None for
    /// whole-model tensors like "result_norm".
    pub fn tap_info(&self, base: &str, layer: Option<u32>, sel: TapSel) -> Option<&'a TapInfo> {
        find_tap(&self.capture.taps, base, layer, sel)
    }

    /// Every catalog entry of a name, in graph order.
    pub fn taps_named(&self, base: &str, layer: Option<u32>) -> Vec<&'a TapInfo> {
        self.capture
            .taps
            .iter()
            .filter(|t| t.base == base && t.layer == layer)
            .collect()
    }

    /// Loads a prompt's arrays.
    pub fn load_prompt(&self, id: &str) -> Result<PromptData, ReferenceError> {
        let info = self.prompt(id).ok_or_else(|| {
            ReferenceError::Invalid(format!("model {} has no prompt {id:?}", self.id()))
        })?;
        let path = self.root.join(&info.file);
        let bytes = std::fs::read(&path).map_err(|e| ReferenceError::io(&path, e))?;
        let arrays = PromptArrays::from_safetensors(&bytes)
            .map_err(|e| ReferenceError::Invalid(format!("{}: {e}", path.display())))?;
        Ok(PromptData {
            info: info.clone(),
            taps: self.capture.taps.clone(),
            arrays,
        })
    }

    /// The tokenization of the corpus.
    pub fn tokenizer(&self) -> Result<TokenizerCapture, ReferenceError> {
        let t: TokenizerCapture = inputs::read_json(&self.root.join(&self.capture.tokenizer))?;
        check_format(&self.capture.tokenizer, &t.format, t.format_version)?;
        Ok(t)
    }

    /// The chat-template renders (None for a model without a template).
    pub fn chat_renders(&self) -> Result<Option<ChatRenders>, ReferenceError> {
        if !self.capture.model.has_chat_template {
            return Ok(None);
        }
        inputs::read_chat_renders(self.root, self.id()).map(Some)
    }
}

fn find_tap<'t>(
    taps: &'t [TapInfo],
    base: &str,
    layer: Option<u32>,
    sel: TapSel,
) -> Option<&'t TapInfo> {
    let mut it = taps.iter().filter(|t| t.base == base && t.layer == layer);
    match sel {
        TapSel::Op(op) => it.find(|t| t.op == op),
        TapSel::Occurrence(n) => it.find(|t| t.occurrence == n),
        TapSel::Last => it.max_by_key(|t| t.occurrence),
    }
}

/// One prompt of one model, loaded.
#[derive(Clone, Debug)]
pub struct PromptData {
    pub info: PromptCapture,
    taps: Vec<TapInfo>,
    pub arrays: PromptArrays,
}

impl PromptData {
    pub fn tokens(&self) -> &[i32] {
        &self.arrays.tokens
    }

    /// Top-k and log-sum-exp of the logits at prompt position `i`.
    pub fn position(&self, i: usize) -> TopKRow<'_> {
        self.arrays.positions.row(i)
    }

    /// Every logit at the last prompt position.
    pub fn last_logits(&self) -> &[f32] {
        &self.arrays.last_logits
    }

    pub fn greedy_tokens(&self) -> &[i32] {
        &self.arrays.greedy_tokens
    }

    /// Top-k and log-sum-exp of the logits greedy step `i` chose its token
    /// from (step 0: the last prompt position).
    pub fn greedy_step(&self, i: usize) -> TopKRow<'_> {
        self.arrays.greedy.row(i)
    }

    /// The catalog entries (the same for every prompt of the model).
    pub fn tap_infos(&self) -> &[TapInfo] {
        &self.taps
    }

    /// A tap by (base name, layer, selector), with its catalog entry.
    pub fn tap(
        &self,
        base: &str,
        layer: Option<u32>,
        sel: TapSel,
    ) -> Option<(&TapInfo, Cow<'_, Tap>)> {
        let info = find_tap(&self.taps, base, layer, sel)?;
        self.tap_by_key(&info.key).map(|t| (info, t))
    }

    /// A tap by key ("Qcur-3#2"). Aliased taps are rebuilt from the array
    /// they alias, with their own shape; derived taps
    /// ([`TapInfo::derived_from`]) from their operands. None for a tap the
    /// prompt does not hold: no taps recorded, or an unweighted norm
    /// ([`TapInfo::weighted_tap`]; look up its weighted tap instead).
    pub fn tap_by_key(&self, key: &str) -> Option<Cow<'_, Tap>> {
        if let Some(t) = self.arrays.taps.get(key) {
            return Some(Cow::Borrowed(t));
        }
        let info = self.taps.iter().find(|t| t.key == key)?;
        let Some(target) = self.info.tap_aliases.get(key) else {
            return self.derived_tap(info);
        };
        let data = match target.strip_prefix("tap/") {
            Some(other) => &self.arrays.taps.get(other)?.data,
            None if target == "logits/last" => &self.arrays.last_logits,
            None => return None,
        };
        let ne = expected_ne(info, &self.info);
        (ne.iter().product::<usize>() == data.len()).then(|| {
            Cow::Owned(Tap {
                ne,
                data: data.clone(),
            })
        })
    }

    /// Rebuilds a derived tap: its op, elementwise, on its operands (which
    /// may be derived in turn: `l_out-9` from `ffn_inp-9` from `l_out-8` ...).
    fn derived_tap(&self, info: &TapInfo) -> Option<Cow<'_, Tap>> {
        let [a, b] = info.derived_from.as_ref()?;
        if !self.info.taps_recorded {
            return None;
        }
        let f = elementwise_op(&info.op)?;
        let (a, b) = (self.tap_by_key(a)?, self.tap_by_key(b)?);
        let ne = expected_ne(info, &self.info);
        (a.ne == ne && b.ne == ne).then(|| {
            Cow::Owned(Tap {
                ne,
                data: a.data.iter().zip(&b.data).map(|(x, y)| f(*x, *y)).collect(),
            })
        })
    }
}

#[cfg(test)]
#[path = "loader_tests.rs"]
mod tests;
