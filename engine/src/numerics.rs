//! [`CpuNumerics`]: how a CPU device rounds where a plain f32 loop and
//! ggml's CPU backend part ways. A leaf: the op interface
//! ([`crate::ops::Ops::set_cpu_numerics`]) and the command line name it
//! without naming the CPU backend.

/// How the CPU backend rounds the ops where a plain f32 loop and ggml's
/// CPU backend part ways: RoPE, attention (scores, softmax, weighted sum
/// of V), the SwiGLU gate, the mixture-of-experts router softmax, and the
/// product of an F32 or F16 weight (a router) with a batch. Everything
/// else (quantized matrix products, norms, embedding, GELU, additions)
/// computes the same bits in both.
///
/// Chosen per backend ([`crate::cpu::CpuBackend::set_numerics`], a session's
/// [`crate::session::Session::set_cpu_numerics`], `sharpi
/// --cpu-numerics`), never by the environment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CpuNumerics {
    /// The default: ggml's own arithmetic, as llama.cpp's x86-64 CPU
    /// backend (AVX2 + FMA, GCC) computes it, bit for bit ([`crate::cpu::ggml`]):
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
