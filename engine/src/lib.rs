//! sharpi engine: GGUF models on CPU and Vulkan.

pub mod bounded;
pub mod chat;
pub mod cpu;
pub mod expert_cache;
pub mod fault;
pub mod ggml_type;
pub mod gguf;
pub mod host_memory;
pub mod kv_type;
pub mod model;
pub mod numerics;
pub mod op_codes;
pub mod ops;
pub mod perplexity;
pub mod placement;
pub mod poison;
pub mod quant;
pub mod quantize;
pub mod sampler;
pub mod session;
pub mod setup;
pub mod simd;
pub mod stdsort;
pub mod synth;
pub mod threads;
pub mod tokenizer;
pub mod trace;
pub mod vulkan;

pub use ggml_type::{GgmlType, TypeId};
