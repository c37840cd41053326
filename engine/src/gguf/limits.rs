//! Caps the reader puts on what a file may claim.
//!
//! A GGUF header is untrusted input: every count and length in it is a number
//! an attacker (or a broken converter) picks. Besides checking each claim
//! against the bytes actually left in the file, the reader refuses values past
//! these caps, so that no file can make it allocate or loop far beyond what a
//! real model needs. Each cap is far above anything a real model uses (the
//! largest real headers hold ~1,000-2,000 tensors, a few dozen keys and
//! vocabularies of a few hundred thousand tokens).

/// Most tensors a file may declare.
///
/// Real models: a few hundred (SmolLM2-135M: 272, Llama-3-405B: ~1,100,
/// DeepSeek-V3 with merged experts: ~1,800). 65,536 leaves ample room.
pub const MAX_TENSORS: u64 = 1 << 16;

/// Most metadata key/value pairs a file may declare. Real models: 20-60.
pub const MAX_KVS: u64 = 1 << 16;

/// Longest metadata key, in bytes. Real keys are under 64 bytes
/// (`tokenizer.ggml.add_bos_token`); keys are identifiers, not payload.
pub const MAX_KEY_LEN: u64 = 1 << 10;

/// Longest tensor name, in bytes. ggml itself stores names in a 64-byte
/// buffer (GGML_MAX_NAME, 63 bytes plus NUL); we allow more but not unbounded.
pub const MAX_TENSOR_NAME_LEN: u64 = 1 << 10;

/// Longest metadata string value, in bytes (16 MiB). The longest real strings
/// are chat templates of a few tens of KiB.
pub const MAX_STRING_LEN: u64 = 1 << 24;

/// Most elements in one metadata array (16 Mi). The largest real arrays are
/// tokenizer vocabularies and merge lists: 262,144 tokens for Gemma 3, under
/// a million merges for any known BPE tokenizer.
pub const MAX_ARRAY_LEN: u64 = 1 << 24;

/// Most metadata values in the whole file, counting every array element and
/// every nested array (16 Mi). Each parsed [`Value`](super::Value) costs 32
/// bytes in memory, so this bounds the metadata's memory at about 512 MiB
/// plus string contents, however the file arranges its arrays. Gemma 3's
/// header holds about 800,000 values.
pub const MAX_TOTAL_VALUES: u64 = 1 << 24;

/// Deepest nesting of arrays: an array value is at depth 1, an array inside
/// it at depth 2, and so on. Real files never nest (llama.cpp cannot read
/// nested arrays at all); the cap keeps the recursive reader's stack bounded.
pub const MAX_NESTING_DEPTH: u32 = 8;

/// Most dimensions a tensor may have: ggml's GGML_MAX_DIMS.
pub const MAX_DIMS: u32 = 4;

/// Largest single dimension (2^40). Every dimension must also be nonzero.
pub const MAX_DIM: u64 = 1 << 40;

/// Most elements in one tensor (2^40, about 1.1e12). The largest real tensors
/// (merged MoE expert weights, huge embedding tables) hold a few billion
/// elements. This also keeps every element count and byte size far from u64
/// overflow.
pub const MAX_ELEMENTS: u64 = 1 << 40;

/// Alignment used when the file has no `general.alignment` key.
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// The metadata key that sets the data alignment (must be a U32).
pub const ALIGNMENT_KEY: &str = "general.alignment";
