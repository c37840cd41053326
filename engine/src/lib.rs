//! sharpi engine: GGUF models on CPU and Vulkan.

pub mod cli;
pub mod ggml_type;
pub mod gguf;
pub mod quant;
pub mod quantize;
pub mod synth;
pub mod vulkan;

pub use ggml_type::{GgmlType, TypeId};
