//! The 32-element formats: ggml's AVX2 `ggml_vec_dot_{q4_0,q5_0,q8_0}_q8_0`
//! and `ggml_vec_dot_{q4_1,q5_1}_q8_1`, for `R` rows by `C` columns.
//!
//! Per block and output: the integer dot in eight i32 lanes (four adjacent
//! bytes each), converted to f32, FMA'd into an 8-lane accumulator with the
//! block's scale `d_x * d_y`; Q4_1 and Q5_1 add `m_x * s_y` to a scalar as
//! they go.
//!
//! The signed kinds (Q4_0, Q5_0, Q8_0) need signed-by-signed products, which
//! the unsigned-by-signed instructions do not do. ggml flips signs
//! (`|x| * sign(y, x)`, two extra operations per output). Here the weights
//! are biased to unsigned instead, `x + b` with `b` 8, 16 or 128, and each
//! lane starts from `-b * sum(y)` over its four activation bytes, computed
//! once per activation block: `sum((x + b) y) - b sum(y) = sum(x y)`, the
//! same integer in the same lane. Only AVX2's saturating `vpmaddubsw` cannot
//! take Q8_0's biased bytes (up to 255); there Q8_0 keeps ggml's sign trick.

use std::arch::x86_64::*;
use std::marker::PhantomData;

use super::{
    bytes_from_bits_32, bytes_from_nibbles_32, f16_splat, f16x2_at, hsum_all, load256, prefetch,
    row, IntOps, Level, Micro, SimdRow,
};
use crate::ggml_type::GgmlType;

/// This family's kernels at level `L`, one row per weight type.
pub(super) const fn kernels<L: Level>() -> [SimdRow; 5] {
    [
        row::<L, Q4_0<L>>(GgmlType::Q4_0),
        row::<L, Q4_1<L>>(GgmlType::Q4_1),
        row::<L, Q5_0<L>>(GgmlType::Q5_0),
        row::<L, Q5_1<L>>(GgmlType::Q5_1),
        row::<L, Q8_0<L>>(GgmlType::Q8_0),
    ]
}

pub(crate) struct Q4_0<I>(PhantomData<I>);
pub(crate) struct Q4_1<I>(PhantomData<I>);
pub(crate) struct Q5_0<I>(PhantomData<I>);
pub(crate) struct Q5_1<I>(PhantomData<I>);
pub(crate) struct Q8_0<I>(PhantomData<I>);

/// An activation block's scales and quants: (`d` in every lane, `s` or 0,
/// 32 bytes).
#[inline(always)]
unsafe fn act<const WITH_S: bool>(p: *const u8) -> (__m256, f32, __m256i) {
    if WITH_S {
        let (d, s) = f16x2_at(p);
        (_mm256_set1_ps(d), s, load256(p.add(4)))
    } else {
        (f16_splat(p), 0.0, load256(p.add(2)))
    }
}

/// A weight block of the signed kinds (Q4_0, Q5_0, Q8_0).
trait Signed {
    const WB: usize;
    /// The bias that makes every value unsigned.
    const BIAS: u8;
    /// The scale (in every lane) and the 32 values plus `BIAS`, as
    /// unsigned bytes.
    unsafe fn unpack_biased(p: *const u8) -> (__m256, __m256i);
    /// The scale and the 32 values as signed bytes.
    #[inline(always)]
    unsafe fn unpack_signed(p: *const u8) -> (__m256, __m256i) {
        let (d, q) = Self::unpack_biased(p);
        (d, _mm256_sub_epi8(q, _mm256_set1_epi8(Self::BIAS as i8)))
    }
}

/// A weight block of the offset kinds (Q4_1, Q5_1): `d` (in every lane),
/// `m` and its 32 values as unsigned bytes.
trait Offset {
    const WB: usize;
    unsafe fn unpack(p: *const u8) -> (__m256, f32, __m256i);
}

/// ggml's loop for the signed kinds: `acc += (d_x * d_y) * float(lanes)`.
#[inline(always)]
unsafe fn signed_kernel<I: IntOps, B: Signed, const R: usize, const C: usize>(
    nb: usize,
    w: [*const u8; R],
    a: [*const u8; C],
    pf: usize,
) -> [[f32; C]; R] {
    // Biased weights, unless AVX2 would saturate on them (Q8_0).
    let biased = I::FULL_U8 || B::BIAS <= 16;
    let z = _mm256_setzero_si256();
    let mut acc = [[_mm256_setzero_ps(); C]; R];
    for ib in 0..nb {
        let mut ys = [(_mm256_setzero_ps(), 0.0f32, z); C];
        // -BIAS * (the sum of each lane's four activation bytes).
        let mut init = [z; C];
        for c in 0..C {
            ys[c] = act::<false>(a[c].add(ib * 34));
            if biased {
                let bias = _mm256_set1_epi8(B::BIAS as i8);
                init[c] = _mm256_sub_epi32(z, I::dot4(z, bias, ys[c].2));
            }
        }
        for r in 0..R {
            let p = w[r].add(ib * B::WB);
            prefetch(p, pf, B::WB);
            if biased {
                let (dx, ux) = B::unpack_biased(p);
                for c in 0..C {
                    let (dy, _, qy) = ys[c];
                    let q = _mm256_cvtepi32_ps(I::dot4(init[c], ux, qy));
                    acc[r][c] = _mm256_fmadd_ps(_mm256_mul_ps(dx, dy), q, acc[r][c]);
                }
            } else {
                let (dx, qx) = B::unpack_signed(p);
                let ax = _mm256_sign_epi8(qx, qx);
                for c in 0..C {
                    let (dy, _, qy) = ys[c];
                    let sy = _mm256_sign_epi8(qy, qx);
                    let q = _mm256_cvtepi32_ps(I::dot4(z, ax, sy));
                    acc[r][c] = _mm256_fmadd_ps(_mm256_mul_ps(dx, dy), q, acc[r][c]);
                }
            }
        }
    }
    hsum_all(&acc)
}

/// ggml's loop for the offset kinds: `acc += (d_x * d_y) * float(lanes)`
/// and `summs += m_x * s_y`; the result is `hsum(acc) + summs`.
#[inline(always)]
unsafe fn offset_kernel<I: IntOps, B: Offset, const R: usize, const C: usize>(
    nb: usize,
    w: [*const u8; R],
    a: [*const u8; C],
    pf: usize,
) -> [[f32; C]; R] {
    let mut acc = [[_mm256_setzero_ps(); C]; R];
    let mut summs = [[0.0f32; C]; R];
    for ib in 0..nb {
        let mut ys = [(_mm256_setzero_ps(), 0.0f32, _mm256_setzero_si256()); C];
        for c in 0..C {
            ys[c] = act::<true>(a[c].add(ib * 36));
        }
        for r in 0..R {
            let p = w[r].add(ib * B::WB);
            prefetch(p, pf, B::WB);
            let (dx, mx, qx) = B::unpack(p);
            for c in 0..C {
                let (dy, sy, qy) = ys[c];
                // ggml: `summs += m * s`, which gcc contracts to an FMA.
                summs[r][c] = mx.mul_add(sy, summs[r][c]);
                let xy = _mm256_cvtepi32_ps(I::dot4(_mm256_setzero_si256(), qx, qy));
                acc[r][c] = _mm256_fmadd_ps(_mm256_mul_ps(dx, dy), xy, acc[r][c]);
            }
        }
    }
    let mut out = hsum_all(&acc);
    for r in 0..R {
        for c in 0..C {
            out[r][c] += summs[r][c];
        }
    }
    out
}

impl<I> Signed for Q4_0<I> {
    const WB: usize = 18;
    const BIAS: u8 = 8;
    #[inline(always)]
    unsafe fn unpack_biased(p: *const u8) -> (__m256, __m256i) {
        (f16_splat(p), bytes_from_nibbles_32(p.add(2)))
    }
}

impl<I> Signed for Q5_0<I> {
    const WB: usize = 22;
    const BIAS: u8 = 16;
    #[inline(always)]
    unsafe fn unpack_biased(p: *const u8) -> (__m256, __m256i) {
        // The fifth bit of each value, from qh, as 0x10.
        let hi = _mm256_and_si256(bytes_from_bits_32(p.add(2)), _mm256_set1_epi8(0x10));
        (
            f16_splat(p),
            _mm256_or_si256(bytes_from_nibbles_32(p.add(6)), hi),
        )
    }
}

impl<I> Signed for Q8_0<I> {
    const WB: usize = 34;
    const BIAS: u8 = 128;
    #[inline(always)]
    unsafe fn unpack_biased(p: *const u8) -> (__m256, __m256i) {
        let q = load256(p.add(2));
        (f16_splat(p), _mm256_xor_si256(q, _mm256_set1_epi8(-128)))
    }

    #[inline(always)]
    unsafe fn unpack_signed(p: *const u8) -> (__m256, __m256i) {
        (f16_splat(p), load256(p.add(2)))
    }
}

impl<I> Offset for Q4_1<I> {
    const WB: usize = 20;
    #[inline(always)]
    unsafe fn unpack(p: *const u8) -> (__m256, f32, __m256i) {
        let (d, m) = f16x2_at(p);
        (_mm256_set1_ps(d), m, bytes_from_nibbles_32(p.add(4)))
    }
}

impl<I> Offset for Q5_1<I> {
    const WB: usize = 24;
    #[inline(always)]
    unsafe fn unpack(p: *const u8) -> (__m256, f32, __m256i) {
        let hi = _mm256_and_si256(bytes_from_bits_32(p.add(4)), _mm256_set1_epi8(0x10));
        let (d, m) = f16x2_at(p);
        (
            _mm256_set1_ps(d),
            m,
            _mm256_or_si256(bytes_from_nibbles_32(p.add(8)), hi),
        )
    }
}

macro_rules! micro {
    ($ty:ident, $kind:ident, $kernel:ident, $act:literal) => {
        impl<I: IntOps> Micro for $ty<I> {
            const W_BYTES: usize = <Self as $kind>::WB;
            const A_BYTES: usize = $act;

            #[inline(always)]
            unsafe fn run<const R: usize, const C: usize>(
                nb: usize,
                w: [*const u8; R],
                a: [*const u8; C],
                pf: usize,
            ) -> [[f32; C]; R] {
                $kernel::<I, Self, R, C>(nb, w, a, pf)
            }
        }
    };
}

micro!(Q4_0, Signed, signed_kernel, 34);
micro!(Q5_0, Signed, signed_kernel, 34);
micro!(Q8_0, Signed, signed_kernel, 34);
micro!(Q4_1, Offset, offset_kernel, 36);
micro!(Q5_1, Offset, offset_kernel, 36);
