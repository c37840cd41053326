//! sharpi engine: GGUF models on CPU and Vulkan.

pub mod cli;
pub mod cpu;
pub mod ggml_type;
pub mod gguf;
pub mod quant;
pub mod vulkan;

pub use ggml_type::{GgmlType, TypeId};
