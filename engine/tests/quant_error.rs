//! Quantizer accuracy in the manner of llama.cpp's tests/test-quantize-fns.cpp,
//! plus determinism and hand-computed golden blocks.
//!
//! test-quantize-fns fills 4096 floats with `0.1 + 2*cos(i + offset)`
//! (offset 0; `i + offset` and the cosine in f32, the `0.1 +` in double, the
//! result stored as f32), quantizes and dequantizes them, and requires the
//! "total quantization error" `sqrt(sum((x - y)^2)) / n` (the float
//! difference squared and summed in double; note: divided by n, not by
//! sqrt(n), so it is the RMSE divided by sqrt(n)) to stay below
//! MAX_QUANTIZATION_TOTAL_ERROR = 0.002, or MAX_QUANTIZATION_TOTAL_ERROR_2BITS
//! = 0.0075 for Q2_K and MAX_QUANTIZATION_TOTAL_ERROR_3BITS = 0.0040 for Q3_K.
//! Here every quantizer we have is held to those limits, Q8_1 and Q8_K
//! included (ggml has no dequantizer for them, so its test skips them).
//!
//! Measured (this implementation; for the ten types ggml has both a
//! reference quantizer and a dequantizer for, ggml gives the same figures on
//! this data, as it gives the same bytes):
//!
//! | type | total error | limit  |
//! |------|-------------|--------|
//! | F16  | 0.000004    | 0.002  |
//! | BF16 | 0.000036    | 0.002  |
//! | Q4_0 | 0.001121    | 0.002  |
//! | Q4_1 | 0.001144    | 0.002  |
//! | Q5_0 | 0.000591    | 0.002  |
//! | Q5_1 | 0.000556    | 0.002  |
//! | Q8_0 | 0.000074    | 0.002  |
//! | Q8_1 | 0.000074    | 0.002  |
//! | Q2_K | 0.004672    | 0.0075 |
//! | Q3_K | 0.002510    | 0.0040 |
//! | Q4_K | 0.000982    | 0.002  |
//! | Q5_K | 0.000531    | 0.002  |
//! | Q6_K | 0.000261    | 0.002  |
//! | Q8_K | 0.000075    | 0.002  |

use engine::quant::{dequantize_row, quantize_row, BlockQ4_0, BlockQ8_0};
use engine::GgmlType;

const TEST_SIZE: usize = 32 * 128;
const MAX_QUANTIZATION_TOTAL_ERROR: f32 = 0.002;
const MAX_QUANTIZATION_TOTAL_ERROR_2BITS: f32 = 0.0075;
const MAX_QUANTIZATION_TOTAL_ERROR_3BITS: f32 = 0.0040;

const QUANTIZERS: [GgmlType; 14] = [
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

/// test-quantize-fns' `generate_data`.
fn generate_data(offset: f32, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (0.1f64 + (2.0f32 * (i as f32 + offset).cos()) as f64) as f32)
        .collect()
}

/// test-quantize-fns' `array_rmse` (which is sqrt of the summed squares over n).
fn array_rmse(a1: &[f32], a2: &[f32]) -> f32 {
    let sum: f64 = a1
        .iter()
        .zip(a2)
        .map(|(&a, &b)| {
            let diff = (a - b) as f64;
            diff * diff
        })
        .sum();
    (sum.sqrt() as f32) / a1.len() as f32
}

fn round_trip(ty: GgmlType, x: &[f32]) -> (Vec<u8>, Vec<f32>) {
    let mut q = vec![0u8; ty.bytes_for(x.len() as u64).unwrap() as usize];
    quantize_row(ty, x, &mut q).unwrap();
    let mut y = vec![0f32; x.len()];
    dequantize_row(ty, &q, &mut y).unwrap();
    (q, y)
}

fn limit(ty: GgmlType) -> f32 {
    match ty {
        GgmlType::Q2_K => MAX_QUANTIZATION_TOTAL_ERROR_2BITS,
        GgmlType::Q3_K => MAX_QUANTIZATION_TOTAL_ERROR_3BITS,
        _ => MAX_QUANTIZATION_TOTAL_ERROR,
    }
}

#[test]
fn total_quantization_error_within_test_quantize_fns_limits() {
    let x = generate_data(0.0, TEST_SIZE);
    let mut failed = Vec::new();
    for ty in QUANTIZERS {
        let (_, y) = round_trip(ty, &x);
        let err = array_rmse(&x, &y);
        println!(
            "{:>5} absolute quantization error: {err:.6} (limit {})",
            ty.name(),
            limit(ty)
        );
        let passed = err < limit(ty); // false for NaN, as upstream
        if !passed {
            failed.push(format!("{ty}: {err}"));
        }
    }
    assert!(failed.is_empty(), "over the limit: {failed:?}");
}

/// The error measure itself: exact for a known difference, so the test above
/// measures what it claims to.
#[test]
fn array_rmse_is_test_quantize_fns_measure() {
    let a = vec![1.0f32; 16];
    let mut b = a.clone();
    b[3] = 4.0; // one difference of 3: sqrt(9) / 16
    assert_eq!(array_rmse(&a, &b), 3.0 / 16.0);
    let x = generate_data(0.0, 3);
    assert_eq!(x[0], 2.1);
    assert_eq!(x[1], (0.1f64 + (2.0 * 1f32.cos()) as f64) as f32);
}

#[test]
fn quantizing_twice_gives_identical_bytes() {
    // Data with ties and varied magnitudes, not just the smooth cosine.
    let x: Vec<f32> = (0..TEST_SIZE)
        .map(|i| {
            let c = generate_data(1.0, 1)[0] * (i as f32 * 0.37).sin();
            if i % 7 == 0 {
                (i % 33) as f32 * 0.25 - 4.0
            } else {
                c * 10f32.powi((i / 256 % 5) as i32 - 2)
            }
        })
        .collect();
    for ty in QUANTIZERS {
        let (a, _) = round_trip(ty, &x);
        let (b, _) = round_trip(ty, &x);
        assert_eq!(a, b, "{ty}");
        // Blocks are independent: a block quantized alone gives the same bytes.
        let be = ty.block_elems().max(32);
        let bb = ty.bytes_for(be as u64).unwrap() as usize;
        for k in [0, 3, TEST_SIZE / be - 1] {
            let (one, _) = round_trip(ty, &x[k * be..(k + 1) * be]);
            assert_eq!(one, a[k * bb..(k + 1) * bb], "{ty} block {k}");
        }
    }
}

/// Q8_0 by hand: max |x| = 63.5 so d = 63.5 / 127 = 0.5 (f16 0x3800) and
/// q = roundf(2x), rounding halves away from zero.
#[test]
fn golden_q8_0() {
    let mut x = [0f32; 32];
    x[0] = -63.5; // -127
    x[1] = 1.25; // 2.5 -> 3
    x[2] = -0.75; // -1.5 -> -2
    x[3] = 0.2; // 0.4 -> 0
    x[4] = 63.25; // 126.5 -> 127
    x[31] = -0.25; // -0.5 -> -1
    let mut want = [0u8; 34];
    want[..2].copy_from_slice(&[0x00, 0x38]);
    want[2..8].copy_from_slice(&[0x81, 3, 0xFE, 0, 127, 0]);
    want[33] = 0xFF;
    let mut got = [0u8; 34];
    quantize_row(GgmlType::Q8_0, &x, &mut got).unwrap();
    assert_eq!(got, want);
    assert_eq!(BlockQ8_0::quantize(&x).to_bytes(), want);
    let mut y = [0f32; 32];
    dequantize_row(GgmlType::Q8_0, &got, &mut y).unwrap();
    assert_eq!(&y[..6], &[-63.5, 1.5, -1.0, 0.0, 63.5, 0.0]);
    assert_eq!(y[31], -0.5);
}

/// Q4_0 by hand: the element of largest magnitude is -4, so d = -4 / -8 = 0.5
/// (f16 0x3800), id = 2 and q = min(15, trunc(2x + 8.5)); element j goes to
/// the low nibble of byte j, element j + 16 to the high nibble.
#[test]
fn golden_q4_0() {
    let mut x = [0f32; 32];
    x[0] = -4.0; // -8 + 8.5 -> 0
    x[1] = 3.9; // 7.8 + 8.5 = 16.3 -> 16, clamped to 15
    x[2] = 0.25; // 9.0 -> 9
    x[3] = -0.25; // 8.0 -> 8
    x[4] = 1.0; // 10.5 -> 10
    x[16] = 2.0; // 12.5 -> 12
    x[17] = -1.0; // 6.5 -> 6
    let mut want = [0x88u8; 18]; // zeros quantize to 8 in both nibbles
    want[..7].copy_from_slice(&[0x00, 0x38, 0xC0, 0x6F, 0x89, 0x88, 0x8A]);
    let mut got = [0u8; 18];
    quantize_row(GgmlType::Q4_0, &x, &mut got).unwrap();
    assert_eq!(got, want);
    assert_eq!(BlockQ4_0::quantize(&x).to_bytes(), want);
    let mut y = [0f32; 32];
    dequantize_row(GgmlType::Q4_0, &got, &mut y).unwrap();
    assert_eq!(&y[..5], &[-4.0, 3.5, 0.5, 0.0, 1.0]);
    assert_eq!(&y[16..18], &[2.0, -1.0]);
}
