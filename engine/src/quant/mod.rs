//! GGML block formats: layouts, dequantization and reference quantization.
//!
//! Each family file registers its types in its `CODECS` rows, one row per
//! type (the type with its row dequantizer and quantizer): the plain types
//! ([`float`]: F32, F16, BF16), the 32-element blocks ([`legacy`]) and the
//! 256-element super-blocks ([`k`]). Every registered type can be
//! dequantized and quantized ([`dequantize_row`], [`quantize_row`]); a type
//! registered twice, or a weight type of `WEIGHT_TYPES` not registered,
//! fails the build. The quantizers compute what ggml's
//! `quantize_row_*_ref` functions compute, byte for byte; dequantization
//! follows ggml's formulas operation for operation.
//!
//! Rows are byte slices at any alignment: blocks are decoded field by field,
//! little-endian. No input of the right length makes these functions panic;
//! non-finite scales give whatever the formula gives.

/// A [`Codec`] row for block struct `$block` of type `$ty`: its
/// `from_bytes(..).dequantize(..)` and `quantize(..).to_bytes()` block by
/// block. (Defined before the family modules, which use it.)
macro_rules! block_codec {
    ($ty:ident, $block:ident) => {
        $crate::quant::Codec {
            ty: $crate::ggml_type::GgmlType::$ty,
            dequantize: |src, dst| {
                $crate::quant::bytes::each_block(src, dst, |b, y| {
                    $block::from_bytes(b).dequantize(y)
                })
            },
            quantize: |src, dst| {
                $crate::quant::bytes::each_block_mut(src, dst, |x, b| {
                    *b = $block::quantize(x).to_bytes()
                })
            },
        }
    };
}

mod bytes;
pub mod float;
pub mod k;
mod k_quantize;
pub mod legacy;
mod legacy_quantize;

use std::fmt;

use crate::ggml_type::{GgmlType, WEIGHT_TYPES};

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

/// One type's row conversions. `dequantize` and `quantize` take whole
/// blocks of matching lengths (checked by [`dequantize_row`] and
/// [`quantize_row`] before they call them).
#[derive(Clone, Copy)]
pub(crate) struct Codec {
    pub ty: GgmlType,
    pub dequantize: fn(&[u8], &mut [f32]),
    pub quantize: fn(&[f32], &mut [u8]),
}

/// Every family's rows: the types this module implements, both ways.
const FAMILIES: [&[Codec]; 3] = [&float::CODECS, &legacy::CODECS, &k::CODECS];

/// How many rows register `ty`.
const fn rows_of(ty: GgmlType) -> usize {
    let (mut f, mut n) = (0, 0);
    while f < FAMILIES.len() {
        let mut r = 0;
        while r < FAMILIES[f].len() {
            n += (FAMILIES[f][r].ty as u32 == ty as u32) as usize;
            r += 1;
        }
        f += 1;
    }
    n
}

/// Checked at compile time: no type has two rows, and every weight type
/// the backends multiply ([`WEIGHT_TYPES`]) has one.
const _: () = {
    let mut f = 0;
    while f < FAMILIES.len() {
        let mut r = 0;
        while r < FAMILIES[f].len() {
            assert!(
                rows_of(FAMILIES[f][r].ty) == 1,
                "quant: a type with two CODECS rows"
            );
            r += 1;
        }
        f += 1;
    }
    let mut t = 0;
    while t < WEIGHT_TYPES.len() {
        assert!(
            rows_of(WEIGHT_TYPES[t]) == 1,
            "quant: a weight type without a CODECS row"
        );
        t += 1;
    }
};

/// The row of `ty`, if a family registers it.
fn codec(ty: GgmlType) -> Option<&'static Codec> {
    FAMILIES.iter().flat_map(|f| f.iter()).find(|c| c.ty == ty)
}

/// Whether [`quantize_row`] accepts `ty`.
pub fn can_quantize(ty: GgmlType) -> bool {
    codec(ty).is_some()
}

/// Whether [`dequantize_row`] accepts `ty`.
pub fn can_dequantize(ty: GgmlType) -> bool {
    codec(ty).is_some()
}

/// Checks that `elems` elements of `ty` are whole blocks taking exactly
/// `bytes` bytes.
fn check(ty: GgmlType, elems: usize, bytes: usize) -> Result<(), QuantError> {
    let block_elems = ty.block_elems();
    if !elems.is_multiple_of(block_elems) {
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
    let c = codec(ty).ok_or(QuantError::Unsupported(ty, QuantOp::Dequantize))?;
    check(ty, dst.len(), src.len())?;
    (c.dequantize)(src, dst);
    Ok(())
}

/// Quantizes `src` to type `ty` into `dst`, which must hold exactly
/// `ty.bytes_for(src.len())` bytes. Deterministic: the same input gives the
/// same bytes on every machine, and the bytes ggml's reference quantizer
/// gives.
pub fn quantize_row(ty: GgmlType, src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    let c = codec(ty).ok_or(QuantError::Unsupported(ty, QuantOp::Quantize))?;
    check(ty, src.len(), dst.len())?;
    (c.quantize)(src, dst);
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
