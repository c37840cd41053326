//! The element types of a KV cache row (f32, f16) loaded eight at a time
//! as f32 lanes: what the AVX2 attention kernels of `attn_kernels.rs` and
//! `ggml.rs` read their keys and values through.

use std::arch::x86_64::*;

/// Eight elements of a row at `p`, as f32.
pub(super) trait Elem: Copy {
    /// # Safety
    /// Eight elements from `p` are inside one slice, and the CPU has AVX2
    /// and F16C.
    unsafe fn load8(p: *const Self) -> __m256;
    /// # Safety
    /// `p` points inside a slice.
    unsafe fn at(p: *const Self) -> f32;
}

impl Elem for f32 {
    #[inline(always)]
    unsafe fn load8(p: *const f32) -> __m256 {
        // SAFETY: the caller reads eight elements inside its slice.
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn at(p: *const f32) -> f32 {
        // SAFETY: the caller reads one element inside its slice.
        unsafe { *p }
    }
}

impl Elem for half::f16 {
    #[inline(always)]
    unsafe fn load8(p: *const half::f16) -> __m256 {
        // SAFETY: as above; eight halves are 16 bytes.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)) }
    }
    #[inline(always)]
    unsafe fn at(p: *const half::f16) -> f32 {
        // SAFETY: as above, one element.
        unsafe { (*p).to_f32() }
    }
}
