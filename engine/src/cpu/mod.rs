//! The CPU backend: [`CpuBackend`] implements [`crate::ops::Ops`] with one
//! file per op family, f32 arithmetic, one worker team ([`Threads`](crate::threads::Threads)); and its matrix
//! kernels: quantized dot products as llama.cpp's CPU backend computes them,
//! and the matrix-vector (decode) and matrix-matrix (prefill) products built
//! on them.
//!
//! ```
//! use engine::cpu::{matvec, WeightView};
//! use engine::threads::Threads;
//! use engine::GgmlType;
//! # fn main() -> Result<(), engine::cpu::CpuError> {
//! let (rows, cols) = (2, 32);
//! let w: Vec<f32> = (0..rows * cols).map(|i| (i % 7) as f32 - 3.0).collect();
//! let mut bytes = vec![0u8; rows * 34];
//! engine::quant::quantize_row(GgmlType::Q8_0, &w, &mut bytes).unwrap();
//! let w = WeightView::new(GgmlType::Q8_0, rows, cols, &bytes)?;
//! let threads = Threads::new(2)?;
//! let mut y = vec![0.0; rows];
//! matvec(&threads, w, &vec![1.0; cols], &mut y)?;
//! # Ok(()) }
//! ```
//!
//! - [`act`]: activations in a weight type's partner format (ggml's
//!   `vec_dot_type`), quantized as ggml's x86 backend does.
//! - [`dot`]: per-type dot products, a scalar reference and SIMD kernels
//!   chosen at run time ([`SimdLevel`]).
//! - [`matvec`], [`matmul`], [`embedding_row`]: the ops, on
//!   [`Threads`](crate::threads::Threads).
//!
//! Results are deterministic: each output element is computed by one thread
//! with one fixed sequence of operations, whatever the thread count and
//! whether it came from [`matvec`] or [`matmul`].
//!
//! Every `unsafe` block here carries a `// SAFETY:` comment (enforced by
//! clippy below).

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod act;
pub mod dot;
pub(crate) mod error;
mod matmul;
mod weight;

pub use crate::numerics::CpuNumerics;
pub use crate::simd::SimdLevel;
pub use dot::Kernels;
pub use error::CpuError;
pub use matmul::{embedding_row, matmul, matvec};
pub use weight::WeightView;

mod argsort;
mod attention;
mod attn_blocks;
mod attn_kernels;
mod backend;
#[cfg(target_arch = "x86_64")]
mod elem8;
mod elementwise;
pub mod ggml;
mod kv;
mod moe;
mod norm;
mod parallel;
mod rope;

pub use argsort::argsort_desc;
pub use attention::attention;
pub use backend::CpuBackend;
pub use elementwise::{add_bias, binary, gelu_tanh, glu, glu_rows, unary};
pub use ggml::silu;
pub use kv::KvStore;
pub use moe::{
    matmul_id, mul_groups, normalize_rows, softmax, softmax_rows, sum_groups, top_k, MIN_ROW_SUM,
};
pub use norm::rms_norm;
pub use rope::rope;
