//! The JSON side of the reference-data format: the models list that drives a
//! capture (`models.json`), what one capture of one model recorded
//! (`<model>/capture.json`), the tokenizer capture (`<model>/tokenizer.json`),
//! the chat-template renders (`chat/<model>.json`) and the index of it all
//! (`manifest.json`). Field order is the serialization order; maps are
//! `BTreeMap`s, so the files are deterministic.
//!
//! Numeric arrays (token ids, top-k lists, logits, tensors) are not here: they
//! live in safetensors files, see [`super::arrays`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Name of the format, written into the manifest and every capture file.
pub const FORMAT: &str = "sharpi-reference";
/// Bumped when a reader of the previous version would misread the files.
pub const FORMAT_VERSION: u32 = 1;

/// `models.json`: which models to capture, and the settings every capture
/// uses. Adding a model to the reference data is one entry in `models`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelsFile {
    pub capture: CaptureConfig,
    pub models: Vec<ModelEntry>,
}

/// Settings shared by every model's capture.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaptureConfig {
    /// llama.cpp threads for prompt processing and generation (fixed, so
    /// that two captures on one machine give identical bytes).
    pub threads: u32,
    /// How many of the highest logits are kept per position and per step.
    pub top_k: usize,
    /// Length of the greedy continuation (fewer if the model ends it).
    pub greedy_steps: usize,
    /// The prompt (id) whose per-layer tensors keep every position; every
    /// other prompt keeps only the last position. Keep it short.
    pub all_positions_prompt: String,
}

/// One model of `models.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelEntry {
    /// Short identifier: the directory name under reference-data/.
    pub id: String,
    /// GGUF file, relative to the repository root.
    pub file: String,
    /// SHA-256 of the GGUF file (lowercase hex); checked before capturing.
    pub sha256: String,
    /// `general.architecture` of the file; checked before capturing.
    pub architecture: String,
    /// Whether the GGUF has `tokenizer.chat_template`; checked before
    /// capturing. Chat-formatted prompts are captured only for such models.
    pub has_chat_template: bool,
    /// Prompts (ids) captured for this model; absent: every prompt of
    /// `prompts/` (chat prompts only where the model has a template). A
    /// model made for one purpose (`synth-qwen3-bigscores`: large attention
    /// scores) keeps the budget with a few.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompts: Option<Vec<String>>,
    /// Prompts (ids) whose graph tensors are recorded; absent: every prompt.
    /// Lets a model's entry stay within the size budget (taps cost about
    /// 1.3 MiB per prompt for a 30-layer model; see README.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tap_prompts: Option<Vec<String>>,
    /// The smallest first-token margin (`PromptCapture::first_token_margin`)
    /// the model must show on every prompt; the capture fails otherwise.
    /// Set for the synthetic models, whose weights are scaled so that their
    /// logits are not near-uniform (an argmax decided by noise would make
    /// greedy comparisons meaningless).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_first_token_margin: Option<f64>,
    /// The KV cache type of the capture (llama.cpp's `type_k` and
    /// `type_v`) and of every session `compare` runs it with: `f32` when
    /// absent, or `f16` (llama.cpp's default, and most users'). The same
    /// GGUF can be listed twice, once per type, under two ids.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_type: Option<KvTypeName>,
}

/// A KV cache element type, as models.json names it: any of the engine's
/// `KV_TYPES`, by its name (`f32`, `f16`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct KvTypeName(pub engine::ops::KvType);

impl KvTypeName {
    /// The engine's cache type.
    pub fn kv_type(self) -> engine::ops::KvType {
        self.0
    }
}

impl TryFrom<String> for KvTypeName {
    type Error = String;

    fn try_from(name: String) -> Result<KvTypeName, String> {
        engine::ops::KvType::from_name(&name)
            .map(KvTypeName)
            .ok_or_else(|| format!("unknown KV cache type {name:?}"))
    }
}

impl From<KvTypeName> for String {
    fn from(k: KvTypeName) -> String {
        k.0.name().to_string()
    }
}

/// What kind of prompt a prompt file holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PromptKind {
    /// `prompts/<id>.txt`: the file's bytes are the prompt, tokenized with
    /// `parse_special` off.
    Text,
    /// `prompts/<id>.chat.json`: a conversation rendered through the model's
    /// chat template (by scripts/render-chat-templates), tokenized with
    /// `parse_special` on.
    Chat,
}

/// A `prompts/<id>.chat.json` file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatPromptFile {
    pub messages: Vec<ChatMessage>,
    pub add_generation_prompt: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

/// `chat/<model>.json`, written by scripts/render-chat-templates.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatRenders {
    pub model: String,
    /// SHA-256 of the template text the renders came from (the capture
    /// refuses renders of another template).
    pub template_sha256: String,
    /// How the template was rendered (jinja2 version, options).
    pub renderer: BTreeMap<String, String>,
    /// The conversations of prompts/conversations.json, each rendered with
    /// `add_generation_prompt` off and on.
    pub conversations: Vec<ChatRender>,
    /// The chat prompts (prompts/*.chat.json), rendered as their files say.
    pub prompts: Vec<ChatRender>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatRender {
    pub id: String,
    pub add_generation_prompt: bool,
    pub text: String,
}

/// The llama.cpp that produced a capture.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlamaCppInfo {
    /// The Rust crate that vendors and builds llama.cpp, e.g.
    /// "llama-cpp-sys-2 0.1.161".
    pub crate_version: String,
    /// Commit of the crate's repository (utilityai/llama-cpp-rs) that the
    /// published crate was packaged from.
    pub crate_commit: String,
    /// `llama_version()`.
    pub llama_version: String,
    /// `ggml_version()` and `ggml_commit()` ("unknown" when built outside a
    /// git checkout, as the crate's build is).
    pub ggml_version: String,
    pub ggml_commit: String,
    /// `llama_print_system_info()`: the CPU features the build uses.
    pub system_info: String,
}

/// The llama.cpp settings one model was captured with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSettings {
    pub threads: u32,
    pub n_ctx: u32,
    pub n_batch: u32,
    pub n_ubatch: u32,
    /// Always "disabled".
    pub flash_attn: String,
    /// KV cache types, always "f32" (so KV rounding is not in the reference).
    pub type_k: String,
    pub type_v: String,
    pub swa_full: bool,
    /// llama_model_params.use_extra_bufts (CPU weight repacking), always
    /// false: the reference comes from ggml's plain CPU kernels.
    pub weight_repack: bool,
    pub top_k: usize,
    pub greedy_steps: usize,
    /// How the greedy token is chosen.
    pub greedy: String,
}

/// Facts about the model as llama.cpp loaded it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelFacts {
    pub n_layer: u32,
    pub n_embd: u32,
    pub n_head: u32,
    pub n_head_kv: u32,
    pub n_vocab: u32,
    pub n_ctx_train: u32,
    /// `llama_model_desc()`, e.g. "llama ?B Q4_1".
    pub desc: String,
}

/// Tokenizer facts from llama.cpp's vocabulary.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VocabFacts {
    pub n_tokens: u32,
    pub add_bos: bool,
    pub add_eos: bool,
    /// Special token ids, -1 when the model has none.
    pub bos: i32,
    pub eos: i32,
    pub eot: i32,
    /// Every token llama.cpp treats as end of generation
    /// (`llama_vocab_is_eog`), ascending.
    pub eog_tokens: Vec<i32>,
}

/// One tensor of llama.cpp's compute graph that the capture records (the
/// same set for every prompt of a model).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TapInfo {
    /// Unique key: `"{name}#{occurrence}"`, e.g. "Qcur-3#2". The tensor is
    /// stored in each prompt's safetensors file as `"tap/{key}"`.
    pub key: String,
    /// The graph tensor's name as llama.cpp sets it, e.g. "Qcur-3" or
    /// "result_norm".
    pub name: String,
    /// The name without the layer suffix, e.g. "Qcur".
    pub base: String,
    /// The layer of a "{base}-{layer}" name; None for whole-model tensors.
    pub layer: Option<u32>,
    /// The ggml op that produced it (`ggml_op_name`), e.g. "ROPE".
    pub op: String,
    /// Index among the graph nodes with the same name, in graph order
    /// (names repeat: "Qcur-3" names a MUL_MAT, a RESHAPE and a ROPE).
    pub occurrence: u32,
    /// ggml type of the graph tensor ("f32", "f16", "i32", ...); stored
    /// values are always converted to f32.
    pub ggml_type: String,
    /// The ggml dimension (0 = innermost) that runs over the batch's
    /// tokens; None when the tensor has no token dimension.
    pub token_dim: Option<usize>,
    /// The ggml dimension that runs over the KV cache cells the batch
    /// attends to (attention scores: `kq`, `kq_soft_max`). llama.cpp pads it
    /// to a multiple of 256 cells (`n_kv`); only the cells holding the
    /// prompt are stored (`kv_len`; the padding cells, all exactly 0, are
    /// checked and dropped). None for other tensors.
    pub kv_dim: Option<usize>,
    /// Each token's slice has n_vocab values (the logits, "result_output"):
    /// stored for the last position only, even in the all-positions prompt
    /// (every position's top-k and log-sum-exp are in `positions/*`).
    pub vocab_rows: bool,
    /// The tensor's ggml shape (ne, innermost first) when one token is
    /// decoded; the token dimension, if any, is 1 there.
    pub ne_one_token: [u64; 4],
    /// Set for an unweighted norm (op RMS_NORM or NORM, llama.cpp's `norm`)
    /// that an elementwise MUL by a weight turns into another tap, whose key
    /// this is (`"attn_norm-3#0"` for `"norm-3#0"`). Such a tap is not
    /// stored: the weighted tap records the same stage (and the norm's input
    /// is a tap too, except where llama.cpp leaves it unnamed). None: the
    /// tap is stored (or aliased) in every prompt that records taps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weighted_tap: Option<String>,
    /// Set for a tap that is its `op` (ADD, SUB, MUL or DIV), elementwise
    /// in f32, of two other taps (keys) of the same shape: llama.cpp's
    /// residual additions (`ffn_inp` = `attn_out` + the previous `l_out`,
    /// `l_out` = `ffn_out` + `ffn_inp`, ...). The capture checks, per
    /// prompt, that the values are bit for bit that operation on the
    /// operands' values and then does not store them; the loader rebuilds
    /// them (a prompt where the check fails stores the tap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub derived_from: Option<[String; 2]>,
}

impl TapInfo {
    /// Whether prompts that record taps hold this one (stored, aliased or
    /// rebuilt from its operands); false for unweighted norms.
    pub fn is_recorded(&self) -> bool {
        self.weighted_tap.is_none()
    }
}

/// The elementwise f32 operation a derived tap applies (see
/// [`TapInfo::derived_from`]); None for other ops.
pub fn elementwise_op(op: &str) -> Option<fn(f32, f32) -> f32> {
    Some(match op {
        "ADD" => |a, b| a + b,
        "SUB" => |a, b| a - b,
        "MUL" => |a, b| a * b,
        "DIV" => |a, b| a / b,
        _ => return None,
    })
}

/// Which positions the stored taps of a prompt keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Positions {
    /// Only the last prompt position (the token dimension has size 1).
    Last,
    /// Every prompt position.
    All,
}

/// Why a greedy continuation stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GreedyStop {
    /// It produced `greedy_steps` tokens.
    Length,
    /// The last token is an end-of-generation token (not decoded further).
    EndOfGeneration,
}

/// One prompt's capture for one model (arrays in `file`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptCapture {
    pub id: String,
    pub kind: PromptKind,
    /// llama_tokenize's add_special (true: BOS/EOS as the model's metadata
    /// says) and parse_special (true only for chat-formatted prompts).
    pub add_special: bool,
    pub parse_special: bool,
    /// SHA-256 of the exact prompt text that was tokenized (for chat
    /// prompts: the rendered text).
    pub text_sha256: String,
    pub n_tokens: usize,
    /// KV cells llama.cpp's attention ran over (padded to 256); None when
    /// no tap has a KV dimension or no taps were recorded.
    pub n_kv: Option<u64>,
    /// Size of the stored taps' `kv_dim`: the cells that hold the prompt
    /// (its token count).
    pub kv_len: Option<u64>,
    /// Safetensors file with this prompt's arrays, relative to reference-data/.
    pub file: String,
    /// Whether graph tensors were recorded for this prompt (see
    /// `ModelEntry::tap_prompts`), and which positions they keep.
    pub taps_recorded: bool,
    pub tap_positions: Positions,
    pub greedy: GreedySummary,
    /// Top-1 minus top-2 logit at the last prompt position (the logits the
    /// first generated token is chosen from): how clearly the first greedy
    /// token wins. 0 on a tie.
    pub first_token_margin: f32,
    /// Largest |difference| between the last-position logits of the run
    /// that recorded the taps (graph split at every tap) and of the plain
    /// run the logits come from. 0 means bit-identical.
    pub tap_run_logits_max_abs_diff: f32,
    /// Taps not stored under `tap/{key}` because their values are, bit for
    /// bit, those of another array of the same file ("logits/last" or
    /// "tap/{other key}", e.g. a RESHAPE of a MUL_MAT): key -> array name.
    /// The tap's shape is then [`expected_ne`].
    pub tap_aliases: BTreeMap<String, String>,
}

/// The greedy continuation of a prompt (ids and top-k in the arrays file).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GreedySummary {
    pub n_tokens: usize,
    pub stop: GreedyStop,
    /// `llama_detokenize` of the generated ids (special tokens not
    /// rendered), decoded as UTF-8 with invalid bytes replaced by U+FFFD.
    pub text: String,
    /// The same bytes in hex, present only when they are not valid UTF-8
    /// (a continuation cut inside a multi-byte character).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_hex: Option<String>,
}

/// `<model>/capture.json`: everything one capture of one model recorded,
/// except the arrays.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelCapture {
    pub format: String,
    pub format_version: u32,
    pub model: ModelEntry,
    pub llama_cpp: LlamaCppInfo,
    pub settings: RunSettings,
    pub facts: ModelFacts,
    pub vocab: VocabFacts,
    /// Tokenizer capture file, relative to reference-data/.
    pub tokenizer: String,
    pub taps: Vec<TapInfo>,
    pub prompts: Vec<PromptCapture>,
}

/// `<model>/tokenizer.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenizerCapture {
    pub format: String,
    pub format_version: u32,
    pub model: String,
    /// The corpus, relative to reference-data/, and its SHA-256.
    pub corpus: String,
    pub corpus_sha256: String,
    /// add_special as passed to llama_tokenize (the model's metadata then
    /// decides whether BOS/EOS are added).
    pub add_special: bool,
    /// The whole corpus file as one text.
    pub whole: TokenizedText,
    /// Each line of the corpus (split at '\n', the newline not included;
    /// the empty piece after the final newline is not a line).
    pub lines: Vec<TokenizedText>,
}

/// One text tokenized with parse_special off (`plain`) and on (`special`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenizedText {
    pub plain: Vec<i32>,
    pub special: Vec<i32>,
}

/// `manifest.json`: the index of the reference data.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub format: String,
    pub format_version: u32,
    pub capture: CaptureConfig,
    pub prompts: Vec<PromptEntry>,
    pub tokenizer_corpus: CorpusEntry,
    pub conversations: CorpusEntry,
    pub models: Vec<ManifestModel>,
    /// Every data file (not README.md, not manifest.json itself), sorted by
    /// path.
    pub files: Vec<FileEntry>,
    pub total_bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptEntry {
    pub id: String,
    pub kind: PromptKind,
    /// Relative to reference-data/.
    pub file: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CorpusEntry {
    /// Relative to reference-data/.
    pub file: String,
    /// Lines (tokenizer corpus) or conversations (chat corpus).
    pub count: usize,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestModel {
    pub id: String,
    pub file: String,
    pub sha256: String,
    pub architecture: String,
    pub has_chat_template: bool,
    /// `<model>/capture.json`, or None when the model is listed in
    /// models.json but has not been captured yet.
    pub capture: Option<String>,
    /// `chat/<model>.json` for models with a chat template.
    pub chat_renders: Option<String>,
    /// Prompt ids captured, in file order.
    pub prompts: Vec<String>,
    pub llama_cpp_version: Option<String>,
    /// The KV cache type of the capture and of compare's sessions (absent:
    /// f32).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_type: Option<KvTypeName>,
}

impl ManifestModel {
    /// The engine's KV cache type for this model's sessions.
    pub fn kv_type(&self) -> engine::ops::KvType {
        self.kv_type
            .map_or(engine::ops::KvType::F32, KvTypeName::kv_type)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileEntry {
    /// Relative to reference-data/, '/'-separated.
    pub path: String,
    pub bytes: u64,
    pub sha256: String,
}

/// The ggml shape (innermost first) a tap is stored with in a prompt's
/// arrays: the one-token shape, with the token dimension at the prompt's
/// length (all-positions prompt, not `vocab_rows`) or 1, and the KV
/// dimension at `kv_len`.
pub fn expected_ne(tap: &TapInfo, prompt: &PromptCapture) -> [usize; 4] {
    let mut ne = tap.ne_one_token.map(|n| n as usize);
    if let Some(d) = tap.token_dim {
        ne[d] = match prompt.tap_positions {
            Positions::All if !tap.vocab_rows => prompt.n_tokens,
            _ => 1,
        };
    }
    if let (Some(d), Some(kv)) = (tap.kv_dim, prompt.kv_len) {
        ne[d] = kv as usize;
    }
    ne
}
