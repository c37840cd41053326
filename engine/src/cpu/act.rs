//! Activations put into the format a weight type is dotted with (ggml's
//! `vec_dot_type`), computed as ggml's x86 CPU backend computes them.
//!
//! ggml's x86 build quantizes activations to Q8_0 and Q8_1 with its own SIMD
//! routine, not with the reference quantizer in [`crate::quant`]: it scales by
//! `id = 127 / amax` (the reference uses `1 / (amax / 127)`) and rounds half
//! to even (the reference rounds half away from zero). The two differ on
//! ties and where the two `id`s differ in the last bit. For Q8_K it runs the
//! reference quantizer (`quantize_row_q8_K_ref`), which lives in ggml-base:
//! llama-cpp-sys-2 compiles that library for baseline x86-64 (no FMA; seen in
//! its object code: `mulps` then `addps`), so `nearest_int(iscale * x)`
//! rounds the product to f32 before the 1.5 * 2^23 add rounds it to an
//! integer, and an exact product just off a tie goes to the tie's even side.
//! The functions here compute the bytes of that build, so that a dot product
//! here sees the same integers llama.cpp's does
//! (engine/tests/cpu_ggml_vectors.rs checks them against ggml's own). F16
//! and BF16 are the reference conversions (F16C rounds to nearest even, as
//! the reference does); F32 is copied.

use half::f16;

use crate::ggml_type::GgmlType;
use crate::quant::{self, BlockQ8_0, BlockQ8_1, BlockQ8_K};

use super::error::CpuError;
use crate::simd::SimdLevel;

/// The format activations take to meet weights of type `w`, or `None` when
/// `w` has no CPU dot product here.
pub fn vec_dot_type(w: GgmlType) -> Option<GgmlType> {
    super::dot::act_type(w)
}

/// Whether `ty` is an activation format [`quantize_act`] writes.
pub fn is_act_type(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(ty, F32 | F16 | BF16 | Q8_0 | Q8_1 | Q8_K)
}

/// Writes `x` in activation format `ty` into `out`, which must take exactly
/// `ty.bytes_for(x.len())` bytes.
pub fn quantize_act(ty: GgmlType, x: &[f32], out: &mut [u8]) -> Result<(), CpuError> {
    if !is_act_type(ty) {
        return Err(CpuError::NotActivation(ty));
    }
    let be = ty.block_elems();
    if !x.len().is_multiple_of(be) {
        return Err(CpuError::NotMultiple {
            what: "activations",
            multiple_of: be,
            actual: x.len(),
        });
    }
    let expected = x.len() / be * ty.block_bytes();
    if out.len() != expected {
        return Err(CpuError::Length {
            what: "activation bytes",
            expected,
            actual: out.len(),
        });
    }
    #[cfg(target_arch = "x86_64")]
    if SimdLevel::detected() >= SimdLevel::Avx2 {
        // SAFETY: the Avx2 level (and every level above it) is detected only
        // when the CPU has AVX2, FMA and F16C, the features this enables.
        unsafe { quantize_blocks_avx2(ty, x, out) };
        return Ok(());
    }
    quantize_blocks(ty, x, out);
    Ok(())
}

/// [`quantize_blocks`] compiled with AVX2, FMA and F16C: the same results
/// (`mul_add` is a fused multiply-add either way, `round_ties_even` the same
/// rounding), but in instructions rather than library calls, which the
/// baseline x86-64 target has to make for both.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn quantize_blocks_avx2(ty: GgmlType, x: &[f32], out: &mut [u8]) {
    quantize_blocks(ty, x, out)
}

/// Writes whole blocks; the caller has checked the type and the lengths.
#[inline(always)]
fn quantize_blocks(ty: GgmlType, x: &[f32], out: &mut [u8]) {
    match ty {
        GgmlType::Q8_0 => {
            for (x, b) in x.chunks_exact(32).zip(out.chunks_exact_mut(34)) {
                b.copy_from_slice(&q8_0_block(x).to_bytes());
            }
        }
        GgmlType::Q8_1 => {
            for (x, b) in x.chunks_exact(32).zip(out.chunks_exact_mut(36)) {
                b.copy_from_slice(&q8_1_block(x).to_bytes());
            }
        }
        GgmlType::Q8_K => {
            let fused = crate::fault::active("q8k-fused-round");
            for (x, b) in x.chunks_exact(256).zip(out.chunks_exact_mut(292)) {
                let x = x.try_into().expect("chunks of 256");
                let block = if fused {
                    q8_k_fused(x)
                } else {
                    BlockQ8_K::quantize(x)
                };
                b.copy_from_slice(&block.to_bytes());
            }
        }
        // F32, F16, BF16: the reference conversions are ggml's CPU ones
        // (F16C's round-to-nearest-even; ggml_compute_fp32_to_bf16). The
        // lengths were checked, so this cannot fail.
        _ => {
            let _ = quant::quantize_row(ty, x, out);
        }
    }
}

/// The x86 block routine: `amax` and its scales, and the 32 rounded values
/// before they are narrowed to bytes (what ggml sums for Q8_1's `s`).
#[inline(always)]
fn q8_x86(x: &[f32]) -> (f32, [i32; 32]) {
    // _mm256_max_ps keeps its second operand when either is NaN; for
    // numbers the order of the folds does not matter.
    // (Loops, not closures, here and below: these are inlined into a
    // `#[target_feature]` function, and a closure need not be.)
    let mut amax = 0.0f32;
    for &v in x {
        amax = if amax > v.abs() { amax } else { v.abs() };
    }
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let mut q = [0i32; 32];
    for (q, &x) in q.iter_mut().zip(x) {
        *q = cvt_ps_epi32((x * id).round_ties_even());
    }
    (d, q)
}

/// `_mm256_cvtps_epi32` on an already rounded value: NaN and out-of-range
/// values give `i32::MIN`, the "integer indefinite".
#[inline]
fn cvt_ps_epi32(v: f32) -> i32 {
    if (-2_147_483_648.0..2_147_483_648.0).contains(&v) {
        v as i32
    } else {
        i32::MIN
    }
}

/// The signed saturating narrowing of `_mm256_packs_epi32` then
/// `_mm256_packs_epi16`.
#[inline]
fn sat_i8(v: i32) -> i8 {
    v.clamp(-128, 127) as i8
}

/// One Q8_0 block as ggml's x86 `quantize_row_q8_0` writes it.
#[inline(always)]
pub fn q8_0_block(x: &[f32]) -> BlockQ8_0 {
    let (d, q) = q8_x86(&x[..32]);
    BlockQ8_0 {
        d: f16::from_f32(d),
        qs: narrow(&q),
    }
}

/// [`sat_i8`] of each value.
#[inline(always)]
fn narrow(q: &[i32; 32]) -> [i8; 32] {
    let mut out = [0i8; 32];
    for (o, &v) in out.iter_mut().zip(q) {
        *o = sat_i8(v);
    }
    out
}

/// One Q8_1 block as ggml's x86 `quantize_row_q8_1` writes it: `s` is
/// `d * sum` over the rounded values (exact integers before narrowing).
#[inline(always)]
pub fn q8_1_block(x: &[f32]) -> BlockQ8_1 {
    let (d, q) = q8_x86(&x[..32]);
    let mut sum = 0i32;
    for &v in &q {
        sum = sum.wrapping_add(v);
    }
    BlockQ8_1 {
        d: f16::from_f32(d),
        s: f16::from_f32(d * sum as f32),
        qs: narrow(&q),
    }
}

/// Fault `q8k-fused-round`: [`BlockQ8_K::quantize`] with each product
/// fused into the rounding add (`fma(iscale, x, 1.5 * 2^23)`), as a build
/// of ggml-quants.c with FMA would round; llama.cpp's does not.
fn q8_k_fused(x: &[f32; 256]) -> BlockQ8_K {
    let mut b = BlockQ8_K::quantize(x);
    let (mut max, mut amax) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax == 0.0 {
        return b;
    }
    let iscale = -127.0 / max;
    for (q, &v) in b.qs.iter_mut().zip(x) {
        let bits = iscale.mul_add(v, 12_582_912.0).to_bits() as i32;
        *q = ((bits & 0x007f_ffff) - 0x0040_0000).min(127) as i8;
    }
    for (s, g) in b.bsums.iter_mut().zip(b.qs.chunks_exact(16)) {
        *s = g.iter().map(|&q| i16::from(q)).sum();
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vec_dot_types_follow_ggml() {
        use GgmlType::*;
        assert_eq!(vec_dot_type(Q4_1), Some(Q8_1));
        assert_eq!(vec_dot_type(Q5_0), Some(Q8_0));
        assert_eq!(vec_dot_type(Q6_K), Some(Q8_K));
        assert_eq!(vec_dot_type(F16), Some(F16));
        assert_eq!(vec_dot_type(IQ2_XXS), None);
        assert_eq!(vec_dot_type(Q8_K), None);
    }

    #[test]
    fn x86_q8_0_rounds_ties_to_even_and_scales_by_127_over_amax() {
        // amax 127 gives d = 1 and id = 1: 2.5 -> 2, -0.5 -> -0, 3.5 -> 4.
        let mut x = [0.0f32; 32];
        x[0] = 127.0;
        x[1] = 2.5;
        x[2] = -0.5;
        x[3] = 3.5;
        x[4] = -127.0;
        let b = q8_0_block(&x);
        assert_eq!(b.d.to_f32(), 1.0);
        assert_eq!(&b.qs[..5], &[127, 2, 0, 4, -127]);
        // The reference quantizer rounds the ties away from zero.
        let r = BlockQ8_0::quantize(&x);
        assert_eq!(&r.qs[..5], &[127, 3, -1, 4, -127]);
        let b1 = q8_1_block(&x);
        assert_eq!(b1.qs, b.qs);
        assert_eq!(b1.s.to_f32(), (127 + 2 + 4 - 127) as f32);
    }

    #[test]
    fn zero_blocks_and_bad_lengths() {
        let b = q8_0_block(&[0.0; 32]);
        assert_eq!(b.d.to_f32(), 0.0);
        assert_eq!(b.qs, [0; 32]);
        let mut out = vec![0u8; 34];
        assert!(quantize_act(GgmlType::Q8_0, &[0.0; 32], &mut out).is_ok());
        assert!(matches!(
            quantize_act(GgmlType::Q8_0, &[0.0; 31], &mut out),
            Err(CpuError::NotMultiple { .. })
        ));
        assert!(matches!(
            quantize_act(GgmlType::Q8_0, &[0.0; 64], &mut out),
            Err(CpuError::Length { .. })
        ));
        assert!(matches!(
            quantize_act(GgmlType::Q4_0, &[0.0; 32], &mut out),
            Err(CpuError::NotActivation(GgmlType::Q4_0))
        ));
    }
}
