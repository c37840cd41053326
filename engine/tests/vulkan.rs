//! The Vulkan backend against the CPU backend: every op on random inputs, dispatch, hybrid and expert placement.
//! One test binary for these files (each file a module, as it was one
//! binary): fewer binaries to compile and link.

#[path = "gguf_support/mod.rs"]
mod gguf_support;
#[path = "model_support/mod.rs"]
mod model_support;
#[path = "vulkan_support/mod.rs"]
mod vulkan_support;

#[path = "vulkan_attention.rs"]
mod vulkan_attention;
#[path = "vulkan_attention_combine.rs"]
mod vulkan_attention_combine;
#[path = "vulkan_attention_oproj.rs"]
mod vulkan_attention_oproj;
#[path = "vulkan_backend.rs"]
mod vulkan_backend;
#[path = "vulkan_bias.rs"]
mod vulkan_bias;
#[path = "vulkan_concurrency.rs"]
mod vulkan_concurrency;
#[path = "vulkan_dispatch.rs"]
mod vulkan_dispatch;
#[path = "vulkan_elementwise.rs"]
mod vulkan_elementwise;
#[path = "vulkan_extreme_attention.rs"]
mod vulkan_extreme_attention;
#[path = "vulkan_extreme_elementwise.rs"]
mod vulkan_extreme_elementwise;
#[path = "vulkan_extreme_matmul.rs"]
mod vulkan_extreme_matmul;
#[path = "vulkan_extreme_moe.rs"]
mod vulkan_extreme_moe;
#[path = "vulkan_hybrid.rs"]
mod vulkan_hybrid;
#[path = "vulkan_layout_model.rs"]
mod vulkan_layout_model;
#[path = "vulkan_list_devices.rs"]
mod vulkan_list_devices;
#[path = "vulkan_matmul.rs"]
mod vulkan_matmul;
#[path = "vulkan_matvec_fused.rs"]
mod vulkan_matvec_fused;
#[path = "vulkan_moe.rs"]
mod vulkan_moe;
#[path = "vulkan_moe_cache.rs"]
mod vulkan_moe_cache;
#[path = "vulkan_moe_model.rs"]
mod vulkan_moe_model;
#[path = "vulkan_norm_rope.rs"]
mod vulkan_norm_rope;
#[path = "vulkan_quantize.rs"]
mod vulkan_quantize;
#[path = "vulkan_replay.rs"]
mod vulkan_replay;
#[path = "vulkan_unfuse.rs"]
mod vulkan_unfuse;
