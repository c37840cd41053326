//! GGML block formats: layouts, dequantization and reference quantization.
//!
//! Covers F32, F16, BF16 and the twelve block types Q4_0, Q4_1, Q5_0, Q5_1,
//! Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K. Every one of them can be
//! dequantized and quantized. The quantizers compute what ggml's
//! `quantize_row_*_ref` functions compute, byte for byte; dequantization
//! follows ggml's formulas operation for operation.
//!
//! Rows are byte slices at any alignment: blocks are decoded field by field,
//! little-endian. No input of the right length makes these functions panic;
//! non-finite scales give whatever the formula gives.

mod bytes;
pub mod float;
pub mod k;
mod k_quantize;
pub mod legacy;
mod legacy_quantize;

use std::fmt;

use crate::ggml_type::GgmlType;

pub use k::{BlockQ2_K, BlockQ3_K, BlockQ4_K, BlockQ5_K, BlockQ6_K, BlockQ8_K, QK_K};
pub use legacy::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1};

/// What was asked of a type that cannot do it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantOp {
    Quantize,
    Dequantize,
}

impl fmt::Display for QuantOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QuantOp::Quantize => "quantization",
            QuantOp::Dequantize => "dequantization",
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantError {
    #[error("{1} of {0} is not supported")]
    Unsupported(GgmlType, QuantOp),
    #[error("{ty}: {elems} elements is not a whole number of {block_elems}-element blocks")]
    NotBlockMultiple {
        ty: GgmlType,
        elems: usize,
        block_elems: usize,
    },
    #[error("{ty}: {elems} elements take {expected} bytes, the buffer has {actual}")]
    LengthMismatch {
        ty: GgmlType,
        elems: usize,
        expected: usize,
        actual: usize,
    },
}

/// The types this module implements, both ways.
const SUPPORTED: [GgmlType; 15] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q8_1,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::Q8_K,
];

/// Whether [`quantize_row`] accepts `ty`.
pub fn can_quantize(ty: GgmlType) -> bool {
    SUPPORTED.contains(&ty)
}

/// Whether [`dequantize_row`] accepts `ty`.
pub fn can_dequantize(ty: GgmlType) -> bool {
    SUPPORTED.contains(&ty)
}

/// Checks that `elems` elements of `ty` are whole blocks taking exactly
/// `bytes` bytes.
fn check(ty: GgmlType, elems: usize, bytes: usize) -> Result<(), QuantError> {
    let block_elems = ty.block_elems();
    if elems % block_elems != 0 {
        return Err(QuantError::NotBlockMultiple {
            ty,
            elems,
            block_elems,
        });
    }
    // Cannot overflow for a real f32 slice: no supported type takes more than
    // 4 bytes an element.
    let expected = (elems / block_elems).saturating_mul(ty.block_bytes());
    if bytes != expected {
        return Err(QuantError::LengthMismatch {
            ty,
            elems,
            expected,
            actual: bytes,
        });
    }
    Ok(())
}

/// Dequantizes `dst.len()` elements of type `ty` from `src`, which must hold
/// exactly `ty.bytes_for(dst.len())` bytes.
pub fn dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    use bytes::each_block as each;
    if !can_dequantize(ty) {
        return Err(QuantError::Unsupported(ty, QuantOp::Dequantize));
    }
    check(ty, dst.len(), src.len())?;
    match ty {
        GgmlType::F32 => float::dequantize_f32(src, dst),
        GgmlType::F16 => float::dequantize_f16(src, dst),
        GgmlType::BF16 => float::dequantize_bf16(src, dst),
        GgmlType::Q4_0 => each(src, dst, |b, y| BlockQ4_0::from_bytes(b).dequantize(y)),
        GgmlType::Q4_1 => each(src, dst, |b, y| BlockQ4_1::from_bytes(b).dequantize(y)),
        GgmlType::Q5_0 => each(src, dst, |b, y| BlockQ5_0::from_bytes(b).dequantize(y)),
        GgmlType::Q5_1 => each(src, dst, |b, y| BlockQ5_1::from_bytes(b).dequantize(y)),
        GgmlType::Q8_0 => each(src, dst, |b, y| BlockQ8_0::from_bytes(b).dequantize(y)),
        GgmlType::Q8_1 => each(src, dst, |b, y| BlockQ8_1::from_bytes(b).dequantize(y)),
        GgmlType::Q2_K => each(src, dst, |b, y| BlockQ2_K::from_bytes(b).dequantize(y)),
        GgmlType::Q3_K => each(src, dst, |b, y| BlockQ3_K::from_bytes(b).dequantize(y)),
        GgmlType::Q4_K => each(src, dst, |b, y| BlockQ4_K::from_bytes(b).dequantize(y)),
        GgmlType::Q5_K => each(src, dst, |b, y| BlockQ5_K::from_bytes(b).dequantize(y)),
        GgmlType::Q6_K => each(src, dst, |b, y| BlockQ6_K::from_bytes(b).dequantize(y)),
        GgmlType::Q8_K => each(src, dst, |b, y| BlockQ8_K::from_bytes(b).dequantize(y)),
        _ => return Err(QuantError::Unsupported(ty, QuantOp::Dequantize)),
    }
    Ok(())
}

/// Quantizes `src` to type `ty` into `dst`, which must hold exactly
/// `ty.bytes_for(src.len())` bytes. Deterministic: the same input gives the
/// same bytes on every machine, and the bytes ggml's reference quantizer
/// gives.
pub fn quantize_row(ty: GgmlType, src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    use bytes::each_block_mut as each;
    if !can_quantize(ty) {
        return Err(QuantError::Unsupported(ty, QuantOp::Quantize));
    }
    check(ty, src.len(), dst.len())?;
    match ty {
        GgmlType::F32 => float::quantize_f32(src, dst),
        GgmlType::F16 => float::quantize_f16(src, dst),
        GgmlType::BF16 => float::quantize_bf16(src, dst),
        GgmlType::Q4_0 => each(src, dst, |x, b| *b = BlockQ4_0::quantize(x).to_bytes()),
        GgmlType::Q4_1 => each(src, dst, |x, b| *b = BlockQ4_1::quantize(x).to_bytes()),
        GgmlType::Q5_0 => each(src, dst, |x, b| *b = BlockQ5_0::quantize(x).to_bytes()),
        GgmlType::Q5_1 => each(src, dst, |x, b| *b = BlockQ5_1::quantize(x).to_bytes()),
        GgmlType::Q8_0 => each(src, dst, |x, b| *b = BlockQ8_0::quantize(x).to_bytes()),
        GgmlType::Q8_1 => each(src, dst, |x, b| *b = BlockQ8_1::quantize(x).to_bytes()),
        GgmlType::Q2_K => each(src, dst, |x, b| *b = BlockQ2_K::quantize(x).to_bytes()),
        GgmlType::Q3_K => each(src, dst, |x, b| *b = BlockQ3_K::quantize(x).to_bytes()),
        GgmlType::Q4_K => each(src, dst, |x, b| *b = BlockQ4_K::quantize(x).to_bytes()),
        GgmlType::Q5_K => each(src, dst, |x, b| *b = BlockQ5_K::quantize(x).to_bytes()),
        GgmlType::Q6_K => each(src, dst, |x, b| *b = BlockQ6_K::quantize(x).to_bytes()),
        GgmlType::Q8_K => each(src, dst, |x, b| *b = BlockQ8_K::quantize(x).to_bytes()),
        _ => return Err(QuantError::Unsupported(ty, QuantOp::Quantize)),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::k_quantize::nearest_int;

    #[test]
    fn nearest_int_rounds_half_to_even() {
        assert_eq!(nearest_int(0.5), 0);
        assert_eq!(nearest_int(1.5), 2);
        assert_eq!(nearest_int(2.5), 2);
        assert_eq!(nearest_int(-0.5), 0);
        assert_eq!(nearest_int(-1.5), -2);
        assert_eq!(nearest_int(-2.4999998), -2);
        assert_eq!(nearest_int(4_194_303.0), 4_194_303);
        assert_eq!(nearest_int(-4_194_303.0), -4_194_303);
    }
}
