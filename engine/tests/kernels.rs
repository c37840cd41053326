//! The CPU kernels, block formats and sampler: SIMD against scalar references, ggml's vectors, properties.
//! One test binary for these files (each file a module, as it was one
//! binary): fewer binaries to compile and link.

#[path = "cpu_support/mod.rs"]
mod cpu_support;

#[path = "cpu_dot.rs"]
mod cpu_dot;
#[path = "cpu_ggml_exact.rs"]
mod cpu_ggml_exact;
#[path = "cpu_ggml_vectors.rs"]
mod cpu_ggml_vectors;
#[path = "cpu_matmul.rs"]
mod cpu_matmul;
#[path = "cpu_ops.rs"]
mod cpu_ops;
#[path = "cpu_tiled.rs"]
mod cpu_tiled;
#[path = "quant_activation.rs"]
mod quant_activation;
#[path = "quant_api.rs"]
mod quant_api;
#[path = "quant_error.rs"]
mod quant_error;
#[path = "quant_props.rs"]
mod quant_props;
#[path = "quant_vectors.rs"]
mod quant_vectors;
#[path = "sampler_props.rs"]
mod sampler_props;
