//! F32, F16 and BF16 rows against activations of the same type: ggml's
//! AVX2 `ggml_vec_dot_{f32,f16,bf16}`. Four 8-lane accumulators over steps
//! of 32 elements, folded pairwise, then the leftover elements one by one
//! (in f32 for F32, in f64 for F16 and BF16, as ggml does).

use std::arch::x86_64::*;

use super::{f32_le, load128, load256, row, u16_le, Level, Micro, SimdRow};
use crate::ggml_type::GgmlType;

/// This family's kernels at level `L`, one row per weight type.
pub(super) const fn kernels<L: Level>() -> [SimdRow; 3] {
    [
        row::<L, F32>(GgmlType::F32),
        row::<L, F16>(GgmlType::F16),
        row::<L, BF16>(GgmlType::BF16),
    ]
}

pub(crate) struct F32;
pub(crate) struct F16;
pub(crate) struct BF16;

/// ggml's `GGML_F32x8_REDUCE` of four accumulators: (0 + 2) + (1 + 3), then
/// the halves, then two horizontal adds.
#[inline(always)]
unsafe fn reduce4(s: [__m256; 4]) -> f32 {
    let x0 = _mm256_add_ps(_mm256_add_ps(s[0], s[2]), _mm256_add_ps(s[1], s[3]));
    let t0 = _mm_add_ps(_mm256_castps256_ps128(x0), _mm256_extractf128_ps(x0, 1));
    let t1 = _mm_hadd_ps(t0, t0);
    _mm_cvtss_f32(_mm_hadd_ps(t1, t1))
}

/// Eight F16 values at `p` as f32.
#[inline(always)]
unsafe fn load_f16(p: *const u8) -> __m256 {
    _mm256_cvtph_ps(load128(p))
}

/// Eight BF16 values at `p` as f32.
#[inline(always)]
unsafe fn load_bf16(p: *const u8) -> __m256 {
    let v = _mm256_cvtepu16_epi32(load128(p));
    _mm256_castsi256_ps(_mm256_slli_epi32(v, 16))
}

/// The 4 x 8 lane loop over the first `n & !31` elements of `x` and `y`,
/// `B` bytes an element, read eight at a time by `L::load`. (A trait, not a
/// closure: see `hsum_all`.)
#[inline(always)]
unsafe fn lanes<L: Load>(n: usize, x: *const u8, y: *const u8) -> [__m256; 4] {
    let mut sum = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (j, s) in sum.iter_mut().enumerate() {
            let k = (i + 8 * j) * L::BYTES;
            *s = _mm256_fmadd_ps(L::load(x.add(k)), L::load(y.add(k)), *s);
        }
        i += 32;
    }
    sum
}

/// Eight elements at a pointer as f32.
trait Load {
    const BYTES: usize;
    unsafe fn load(p: *const u8) -> __m256;
}

impl Load for F32 {
    const BYTES: usize = 4;
    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m256 {
        _mm256_castsi256_ps(load256(p))
    }
}

impl Load for F16 {
    const BYTES: usize = 2;
    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m256 {
        load_f16(p)
    }
}

impl Load for BF16 {
    const BYTES: usize = 2;
    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m256 {
        load_bf16(p)
    }
}

#[inline(always)]
unsafe fn dot_f32(n: usize, x: *const u8, y: *const u8) -> f32 {
    let mut sumf = reduce4(lanes::<F32>(n, x, y));
    for i in n & !31..n {
        let (a, b) = (f32_le(x.add(4 * i)), f32_le(y.add(4 * i)));
        // ggml: `sumf += x[i] * y[i]`, contracted to an FMA.
        sumf = a.mul_add(b, sumf);
    }
    sumf
}

#[inline(always)]
unsafe fn dot_f16(n: usize, x: *const u8, y: *const u8) -> f32 {
    let mut sumf = reduce4(lanes::<F16>(n, x, y)) as f64;
    for i in n & !31..n {
        let a = half::f16::from_bits(u16_le(x.add(2 * i))).to_f32();
        let b = half::f16::from_bits(u16_le(y.add(2 * i))).to_f32();
        sumf += (a * b) as f64;
    }
    sumf as f32
}

#[inline(always)]
unsafe fn dot_bf16(n: usize, x: *const u8, y: *const u8) -> f32 {
    // ggml's AVX2 loop writes `add(mul(x, y), c)`; gcc fuses it to an FMA.
    let c = lanes::<BF16>(n, x, y);
    let c1 = _mm256_add_ps(_mm256_add_ps(c[0], c[2]), _mm256_add_ps(c[1], c[3]));
    let mut g = _mm_add_ps(_mm256_extractf128_ps(c1, 1), _mm256_castps256_ps128(c1));
    g = _mm_add_ps(g, _mm_movehl_ps(g, g));
    g = _mm_add_ss(g, _mm_movehdup_ps(g));
    let mut sumf = _mm_cvtss_f32(g) as f64;
    for i in n & !31..n {
        let a = crate::quant::float::bf16_bits_to_f32(u16_le(x.add(2 * i)));
        let b = crate::quant::float::bf16_bits_to_f32(u16_le(y.add(2 * i)));
        sumf += (a * b) as f64;
    }
    sumf as f32
}

macro_rules! micro {
    ($ty:ident, $bytes:literal, $dot:ident) => {
        impl Micro for $ty {
            const W_BYTES: usize = $bytes;
            const A_BYTES: usize = $bytes;

            #[inline(always)]
            unsafe fn run<const R: usize, const C: usize>(
                n: usize,
                w: [*const u8; R],
                a: [*const u8; C],
                _pf: usize,
            ) -> [[f32; C]; R] {
                let mut out = [[0.0f32; C]; R];
                for r in 0..R {
                    for c in 0..C {
                        out[r][c] = $dot(n, w[r], a[c]);
                    }
                }
                out
            }
        }
    };
}

micro!(F32, 4, dot_f32);
micro!(F16, 2, dot_f16);
micro!(BF16, 2, dot_bf16);
