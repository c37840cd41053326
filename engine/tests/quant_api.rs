//! The public surface of engine::quant: which types it takes, how it reports
//! bad lengths, that block structs match the GGML type table, and that input
//! alignment does not matter.

use std::mem::size_of;

use engine::quant::{
    can_dequantize, can_quantize, dequantize_row, quantize_row, BlockQ2_K, BlockQ3_K, BlockQ4_0,
    BlockQ4_1, BlockQ4_K, BlockQ5_0, BlockQ5_1, BlockQ5_K, BlockQ6_K, BlockQ8_0, BlockQ8_1,
    BlockQ8_K, QuantError, QuantOp,
};
use engine::GgmlType;

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

#[test]
fn block_structs_match_the_type_table() {
    let sizes = [
        (
            GgmlType::Q4_0,
            size_of::<BlockQ4_0>(),
            BlockQ4_0::BYTES,
            BlockQ4_0::ELEMS,
        ),
        (
            GgmlType::Q4_1,
            size_of::<BlockQ4_1>(),
            BlockQ4_1::BYTES,
            BlockQ4_1::ELEMS,
        ),
        (
            GgmlType::Q5_0,
            size_of::<BlockQ5_0>(),
            BlockQ5_0::BYTES,
            BlockQ5_0::ELEMS,
        ),
        (
            GgmlType::Q5_1,
            size_of::<BlockQ5_1>(),
            BlockQ5_1::BYTES,
            BlockQ5_1::ELEMS,
        ),
        (
            GgmlType::Q8_0,
            size_of::<BlockQ8_0>(),
            BlockQ8_0::BYTES,
            BlockQ8_0::ELEMS,
        ),
        (
            GgmlType::Q8_1,
            size_of::<BlockQ8_1>(),
            BlockQ8_1::BYTES,
            BlockQ8_1::ELEMS,
        ),
        (
            GgmlType::Q2_K,
            size_of::<BlockQ2_K>(),
            BlockQ2_K::BYTES,
            BlockQ2_K::ELEMS,
        ),
        (
            GgmlType::Q3_K,
            size_of::<BlockQ3_K>(),
            BlockQ3_K::BYTES,
            BlockQ3_K::ELEMS,
        ),
        (
            GgmlType::Q4_K,
            size_of::<BlockQ4_K>(),
            BlockQ4_K::BYTES,
            BlockQ4_K::ELEMS,
        ),
        (
            GgmlType::Q5_K,
            size_of::<BlockQ5_K>(),
            BlockQ5_K::BYTES,
            BlockQ5_K::ELEMS,
        ),
        (
            GgmlType::Q6_K,
            size_of::<BlockQ6_K>(),
            BlockQ6_K::BYTES,
            BlockQ6_K::ELEMS,
        ),
        (
            GgmlType::Q8_K,
            size_of::<BlockQ8_K>(),
            BlockQ8_K::BYTES,
            BlockQ8_K::ELEMS,
        ),
    ];
    for (ty, size, bytes, elems) in sizes {
        assert_eq!(size, ty.block_bytes(), "{ty} struct size");
        assert_eq!(bytes, ty.block_bytes(), "{ty} BYTES");
        assert_eq!(elems, ty.block_elems(), "{ty} ELEMS");
    }
}

#[test]
fn supported_types_are_exactly_the_fifteen() {
    for ty in GgmlType::all() {
        let want = SUPPORTED.contains(&ty);
        assert_eq!(can_quantize(ty), want, "{ty}");
        assert_eq!(can_dequantize(ty), want, "{ty}");
    }
}

#[test]
fn unsupported_types_are_refused_by_name() {
    for ty in GgmlType::all().filter(|t| !SUPPORTED.contains(t)) {
        let n = ty.block_elems();
        let bytes = vec![0u8; ty.block_bytes()];
        let mut out = vec![0f32; n];
        assert_eq!(
            dequantize_row(ty, &bytes, &mut out),
            Err(QuantError::Unsupported(ty, QuantOp::Dequantize))
        );
        let mut q = vec![0u8; ty.block_bytes()];
        assert_eq!(
            quantize_row(ty, &out, &mut q),
            Err(QuantError::Unsupported(ty, QuantOp::Quantize))
        );
    }
    let e = QuantError::Unsupported(GgmlType::IQ2_XXS, QuantOp::Dequantize);
    assert_eq!(e.to_string(), "dequantization of IQ2_XXS is not supported");
}

#[test]
fn partial_blocks_are_refused() {
    let mut out = vec![0f32; 33];
    let err = dequantize_row(GgmlType::Q4_0, &[0u8; 36], &mut out).unwrap_err();
    assert_eq!(
        err,
        QuantError::NotBlockMultiple {
            ty: GgmlType::Q4_0,
            elems: 33,
            block_elems: 32
        }
    );
    let mut q = vec![0u8; 144];
    let err = quantize_row(GgmlType::Q4_K, &[0f32; 255], &mut q).unwrap_err();
    assert!(matches!(
        err,
        QuantError::NotBlockMultiple {
            elems: 255,
            block_elems: 256,
            ..
        }
    ));
}

#[test]
fn wrong_byte_lengths_are_refused() {
    for ty in SUPPORTED {
        let n = 2 * ty.block_elems();
        let right = ty.bytes_for(n as u64).unwrap() as usize;
        let mut out = vec![0f32; n];
        for len in [right - 1, right + 1, 0] {
            let err = dequantize_row(ty, &vec![0u8; len], &mut out).unwrap_err();
            assert_eq!(
                err,
                QuantError::LengthMismatch {
                    ty,
                    elems: n,
                    expected: right,
                    actual: len
                }
            );
            let err = quantize_row(ty, &out, &mut vec![0u8; len]).unwrap_err();
            assert!(matches!(err, QuantError::LengthMismatch { actual, .. } if actual == len));
        }
    }
}

#[test]
fn empty_rows_are_fine() {
    for ty in SUPPORTED {
        dequantize_row(ty, &[], &mut []).unwrap();
        quantize_row(ty, &[], &mut []).unwrap();
    }
}

/// Rows read at every offset of a byte buffer (as from an mmap'd file)
/// dequantize to the same values as from the start of a fresh buffer.
#[test]
fn dequantize_ignores_alignment() {
    let x: Vec<f32> = (0..512)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.03)
        .collect();
    for ty in SUPPORTED {
        let len = ty.bytes_for(512).unwrap() as usize;
        let mut q = vec![0u8; len];
        quantize_row(ty, &x, &mut q).unwrap();
        let mut want = vec![0f32; 512];
        dequantize_row(ty, &q, &mut want).unwrap();
        for offset in 1..8 {
            let mut buf = vec![0xA5u8; len + offset];
            buf[offset..].copy_from_slice(&q);
            let mut got = vec![0f32; 512];
            dequantize_row(ty, &buf[offset..], &mut got).unwrap();
            assert!(
                want.iter()
                    .zip(&got)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{ty} at offset {offset}"
            );
        }
    }
}

/// Fields sit where ggml-common.h puts them: a hand-made block decodes to
/// the documented values.
#[test]
fn field_offsets_follow_ggml_common() {
    // Q2_K: scales[16], qs[64], d, dmin.
    let mut b = [0u8; 84];
    b[0] = 0x21; // group 0 (elements 0..16): scale 1, min 2
    b[2] = 0x01; // groups 2, 4, 6 (elements 32.., 64.., 96..): scale 1, min 0
    b[4] = 0x01;
    b[6] = 0x01;
    b[16] = 0b11_10_01_00; // byte 0 holds elements 0, 32, 64, 96: q 0, 1, 2, 3
    b[80..82].copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
    b[82..84].copy_from_slice(&half::f16::from_f32(0.25).to_le_bytes());
    let mut y = [0f32; 256];
    dequantize_row(GgmlType::Q2_K, &b, &mut y).unwrap();
    assert_eq!(y[0], -0.5); // 0.5 * 1 * 0 - 0.25 * 2
    assert_eq!(y[1], -0.5);
    assert_eq!((y[32], y[64], y[96]), (0.5, 1.0, 1.5));
    assert_eq!((y[33], y[128]), (0.0, 0.0));

    // Q6_K: ql[128], qh[64], scales[16], d.
    let mut b = [0u8; 210];
    b[0] = 0x0F; // element 0 low bits 15
    b[128] = 0b10; // element 0 high bits 2 -> q = 47 - 32 = 15
    b[192] = 3; // scale of group 0
    b[208..210].copy_from_slice(&half::f16::from_f32(0.125).to_le_bytes());
    let mut y = [0f32; 256];
    dequantize_row(GgmlType::Q6_K, &b, &mut y).unwrap();
    assert_eq!(y[0], 0.125 * 3.0 * 15.0);
    assert_eq!(y[1], 0.125 * 3.0 * -32.0);

    // Q8_K: f32 d, qs[256], bsums[16].
    let mut b = [0u8; 292];
    b[..4].copy_from_slice(&0.5f32.to_le_bytes());
    b[4] = (-3i8) as u8;
    b[259] = 7;
    b[290..292].copy_from_slice(&(-2i16).to_le_bytes());
    let blk = BlockQ8_K::from_bytes(&b);
    assert_eq!(
        (blk.d, blk.qs[0], blk.qs[255], blk.bsums[15]),
        (0.5, -3, 7, -2)
    );
}

#[test]
fn bf16_and_f16_conversions_round_to_nearest_even() {
    // 1 + 2^-8 is a tie between bf16 1.0 and 1.0078125: even mantissa wins.
    let x = [
        1.0 + 2f32.powi(-8),
        1.0 + 3.0 * 2f32.powi(-8),
        f32::NAN,
        -0.0,
    ];
    let mut q = [0u8; 8];
    quantize_row(GgmlType::BF16, &x, &mut q).unwrap();
    let bits: Vec<u16> = q
        .chunks(2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .collect();
    assert_eq!(bits[0], 0x3F80);
    assert_eq!(bits[1], 0x3F82);
    assert_eq!(bits[2] & 0x7FC0, 0x7FC0, "quiet NaN");
    assert_eq!(bits[3], 0x8000);
    // f16: 1 + 2^-11 ties to 1.0, 1 + 3 * 2^-11 to 1 + 2^-9.
    let x = [1.0 + 2f32.powi(-11), 1.0 + 3.0 * 2f32.powi(-11)];
    let mut q = [0u8; 4];
    quantize_row(GgmlType::F16, &x, &mut q).unwrap();
    assert_eq!(q, [0x00, 0x3C, 0x02, 0x3C]);
}
