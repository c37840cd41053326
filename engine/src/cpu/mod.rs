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
pub use elementwise::{binary, gelu_tanh, glu, glu_rows, silu, unary};
pub use kv::KvStore;
pub use moe::{
    matmul_id, mul_groups, normalize_rows, softmax, softmax_rows, sum_groups, top_k, MIN_ROW_SUM,
};
pub use norm::rms_norm;
pub use rope::rope;

/// How the CPU backend rounds the ops where a plain f32 loop and ggml's
/// CPU backend part ways: RoPE, attention (scores, softmax, weighted sum
/// of V), the SwiGLU gate, the mixture-of-experts router softmax, and the
/// product of an F32 or F16 weight (a router) with a batch. Everything
/// else (quantized matrix products, norms, embedding, GELU, additions)
/// computes the same bits in both.
///
/// Chosen per backend ([`CpuBackend::set_numerics`], a session's
/// [`crate::session::Session::set_cpu_numerics`], `sharpi
/// --cpu-numerics`), never by the environment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CpuNumerics {
    /// The default: ggml's own arithmetic, as llama.cpp's x86-64 CPU
    /// backend (AVX2 + FMA, GCC) computes it, bit for bit ([`ggml`]):
    /// RoPE with fused multiply-adds; attention scores by
    /// `ggml_vec_dot_f32`/`_f16` (32 FMA lanes); the softmax with ggml's
    /// vector `exp` and its per-8 sums; the weighted sum of V by tinyBLAS
    /// (8 FMA lanes) for a batch of 2 or more rows, by `ggml_vec_dot` for
    /// one; SwiGLU and the router softmax with ggml's vector `exp`; an F32
    /// or F16 weight times 2 or more rows by tinyBLAS.
    #[default]
    Ggml,
    /// The plain definitions of [`crate::ops::Ops`]: each product rounded
    /// then added, sums in order (scores over 16 partial sums), libm's
    /// `exp`. Off from ggml by float rounding only (a few ulps per op).
    Reference,
}

impl CpuNumerics {
    /// Its name on the command line (`ggml`, `reference`).
    pub fn name(self) -> &'static str {
        match self {
            CpuNumerics::Ggml => "ggml",
            CpuNumerics::Reference => "reference",
        }
    }
}

impl std::fmt::Display for CpuNumerics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for CpuNumerics {
    type Err = String;

    /// `ggml` or `reference`.
    fn from_str(s: &str) -> Result<CpuNumerics, String> {
        [CpuNumerics::Ggml, CpuNumerics::Reference]
            .into_iter()
            .find(|n| n.name() == s)
            .ok_or_else(|| format!("invalid CPU numerics {s:?}: expected ggml or reference"))
    }
}
