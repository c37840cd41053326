//! sharpi engine: GGUF models on CPU and Vulkan.

pub mod chat;
pub mod cli;
pub mod ggml_type;
pub mod gguf;
pub mod quant;
pub mod tokenizer;
pub mod vulkan;

pub use ggml_type::{GgmlType, TypeId};
