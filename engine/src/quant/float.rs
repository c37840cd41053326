//! The plain scalar types: F32, F16 and BF16, little-endian.

use half::f16;

use super::bytes::take;
use super::Codec;
use crate::ggml_type::GgmlType;

/// This family's types, one row each.
pub(super) const CODECS: [Codec; 3] = [
    Codec {
        ty: GgmlType::F32,
        dequantize: dequantize_f32,
        quantize: quantize_f32,
    },
    Codec {
        ty: GgmlType::F16,
        dequantize: dequantize_f16,
        quantize: quantize_f16,
    },
    Codec {
        ty: GgmlType::BF16,
        dequantize: dequantize_bf16,
        quantize: quantize_bf16,
    },
];

pub fn dequantize_f32(src: &[u8], dst: &mut [f32]) {
    for (y, b) in dst.iter_mut().zip(src.chunks_exact(4)) {
        *y = f32::from_le_bytes(take(b, 0));
    }
}

pub fn dequantize_f16(src: &[u8], dst: &mut [f32]) {
    for (y, b) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *y = f16::from_le_bytes(take(b, 0)).to_f32();
    }
}

/// BF16 is the high half of an f32: the conversion is exact for every bit
/// pattern, NaN payloads included.
pub fn dequantize_bf16(src: &[u8], dst: &mut [f32]) {
    for (y, b) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *y = bf16_bits_to_f32(u16::from_le_bytes(take(b, 0)));
    }
}

pub fn quantize_f32(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.iter().zip(dst.chunks_exact_mut(4)) {
        b.copy_from_slice(&x.to_le_bytes());
    }
}

/// Round to nearest, ties to even, as ggml's `GGML_FP32_TO_FP16`.
pub fn quantize_f16(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.iter().zip(dst.chunks_exact_mut(2)) {
        b.copy_from_slice(&f16::from_f32(*x).to_le_bytes());
    }
}

pub fn quantize_bf16(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.iter().zip(dst.chunks_exact_mut(2)) {
        b.copy_from_slice(&f32_to_bf16_bits(*x).to_le_bytes());
    }
}

#[inline]
pub fn bf16_bits_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// ggml's `ggml_compute_fp32_to_bf16`: NaN becomes a quiet NaN keeping the
/// sign and high mantissa bits; everything else rounds to nearest, ties to
/// even (overflowing to infinity).
#[inline]
pub fn f32_to_bf16_bits(x: f32) -> u16 {
    let u = x.to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    ((u as u64 + 0x7fff + ((u as u64 >> 16) & 1)) >> 16) as u16
}
