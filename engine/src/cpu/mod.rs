//! The CPU backend: [`CpuBackend`] implements [`crate::ops::Ops`] with one
//! file per op family, f32 arithmetic, rayon threads.

mod attention;
mod backend;
mod elementwise;
mod fallback_matmul;
mod kv;
mod norm;
mod parallel;
mod rope;

pub use attention::attention;
pub use backend::CpuBackend;
pub use elementwise::{add, gelu_tanh, glu, mul, scale, silu, softcap};
pub use fallback_matmul::{dot, matmul_fallback};
pub use kv::KvStore;
pub use norm::rms_norm;
pub use rope::rope;
