//! The activation formats Q8_1 and Q8_K (gguf-py has neither) against their
//! definitions in ggml's `quantize_row_q8_1_ref` / `quantize_row_q8_K_ref`:
//!
//! Q8_1, per 32: `d = max|x| / 127` (f32), `q = roundf(x / d)`, stored
//! `d` as f16 and `s = f16(d * sum(q))` computed from the unrounded f32 `d`.
//!
//! Q8_K, per 256: `max` is the first element of largest magnitude,
//! `iscale = -127 / max`, `q = min(127, nearest_int(iscale * x))`,
//! `d = 1 / iscale` stored as f32 (so `|d| = max|x| / 127` and `d` has the
//! opposite sign to `max`, which quantizes to -127), and `bsums[j]` the sum of
//! `q` over elements `16j..16j+16`; an all-zero block is all zero.

use engine::quant::{dequantize_row, quantize_row, BlockQ8_1, BlockQ8_K};
use engine::GgmlType;
use half::f16;
use proptest::prelude::*;

/// Rows of `blocks` blocks of `n` values, each block at its own binary
/// magnitude from 2^lo to 2^hi, some values exactly zero or exactly at the
/// block's extremes.
fn rows(blocks: usize, n: usize, lo: i32, hi: i32) -> impl Strategy<Value = Vec<f32>> {
    let value = prop_oneof![
        6 => -1.0f32..1.0,
        1 => Just(0.0f32),
        1 => Just(1.0f32),
        1 => Just(-1.0f32),
    ];
    prop::collection::vec((lo..=hi, prop::collection::vec(value, n)), blocks).prop_map(|bs| {
        bs.into_iter()
            .flat_map(|(e, v)| {
                let s = 2f32.powi(e);
                v.into_iter().map(move |u| u * s)
            })
            .collect()
    })
}

fn amax(x: &[f32]) -> f32 {
    x.iter().fold(0f32, |m, v| m.max(v.abs()))
}

fn check_q8_1(x: &[f32]) -> Result<(), TestCaseError> {
    let mut bytes = vec![0u8; x.len() / 32 * 36];
    quantize_row(GgmlType::Q8_1, x, &mut bytes).unwrap();
    let mut y = vec![0f32; x.len()];
    dequantize_row(GgmlType::Q8_1, &bytes, &mut y).unwrap();
    for ((x, b), y) in x.chunks(32).zip(bytes.chunks(36)).zip(y.chunks(32)) {
        let blk = BlockQ8_1::from_bytes(b.try_into().unwrap());
        let d = amax(x) / 127.0;
        prop_assert_eq!(blk.d.to_bits(), f16::from_f32(d).to_bits());
        let sum: i32 = blk.qs.iter().map(|&q| q as i32).sum();
        prop_assert_eq!(blk.s.to_bits(), f16::from_f32(sum as f32 * d).to_bits());
        let d16 = blk.d.to_f32();
        for ((&x, &q), &y) in x.iter().zip(&blk.qs).zip(y) {
            prop_assert!(q != i8::MIN, "q = -128 for {}", x);
            // q is the nearest integer to x / d, up to the f32 roundings of
            // id = 127 / amax and of x · id (each <= 2^-24 relative, times
            // |q| <= 127: <= 1.6e-5 of a step). Seen: x = 0.08267716 in a
            // block of max 1, whose x · id rounds to exactly 10.5 and then
            // away from zero: 0.5000008 steps from x.
            prop_assert!(
                (x - q as f32 * d).abs() <= 0.5 * d * (1.0 + 1e-4),
                "x {} q {} d {}",
                x,
                q,
                d
            );
            // ... and dequantizes to q * f16(d), which differs from x by at
            // most d / 2 plus what rounding d to f16 moved q * d.
            prop_assert_eq!(y.to_bits(), (q as f32 * d16).to_bits());
            // (The f32 roundings of x / d's product and of d itself add up
            // to ~3e-5 of a step, as in Q8_K below.)
            let bound = 0.5 * d + (q as f32).abs() * (d16 - d).abs();
            prop_assert!(
                (x - y).abs() <= bound * (1.0 + 1e-4),
                "x {} y {} bound {}",
                x,
                y,
                bound
            );
        }
    }
    Ok(())
}

fn check_q8_k(x: &[f32]) -> Result<(), TestCaseError> {
    let mut bytes = vec![0u8; x.len() / 256 * 292];
    quantize_row(GgmlType::Q8_K, x, &mut bytes).unwrap();
    let mut y = vec![0f32; x.len()];
    dequantize_row(GgmlType::Q8_K, &bytes, &mut y).unwrap();
    for ((x, b), y) in x.chunks(256).zip(bytes.chunks(292)).zip(y.chunks(256)) {
        let blk = BlockQ8_K::from_bytes(b.try_into().unwrap());
        for j in 0..16 {
            let sum: i32 = blk.qs[16 * j..16 * j + 16].iter().map(|&q| q as i32).sum();
            prop_assert_eq!(blk.bsums[j] as i32, sum, "bsums[{}]", j);
        }
        let a = amax(x);
        if a == 0.0 {
            prop_assert_eq!(blk.d, 0.0);
            prop_assert!(blk.qs.iter().all(|&q| q == 0));
            prop_assert!(y.iter().all(|&v| v.to_bits() == 0));
            continue;
        }
        let imax = x.iter().position(|v| v.abs() == a).unwrap();
        let max = x[imax];
        prop_assert_eq!(blk.d.to_bits(), (1.0 / (-127.0 / max)).to_bits());
        prop_assert!(blk.d.signum() == -max.signum());
        prop_assert!((blk.d.abs() - a / 127.0).abs() <= 1e-6 * a / 127.0);
        prop_assert_eq!(blk.qs[imax], -127);
        for ((&x, &q), &y) in x.iter().zip(&blk.qs).zip(y) {
            prop_assert!(q >= -127, "q {} for {}", q, x);
            prop_assert_eq!(y.to_bits(), (blk.d * q as f32).to_bits());
            // Half a step, plus the f32 roundings on the way: x · iscale
            // (<= 3.8e-6 of a step at |q| < 128), iscale = -127 / max and
            // d = 1 / iscale (each <= 2^-24 relative, times |q| <= 127):
            // <= 0.5 + 2.7e-5 steps. Seen: 0.50000692 steps (x = 0.8228347
            // in a block of max 1, whose x · iscale rounds to exactly
            // -104.5, a tie that rounds to even, away from x).
            prop_assert!(
                (x - y).abs() <= 0.5 * blk.d.abs() * (1.0 + 1e-4),
                "x {} y {} d {}",
                x,
                y,
                blk.d
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        // Integration tests have no lib.rs beside them to persist failures next to.
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn q8_1_matches_its_definition(x in rows(4, 32, -24, 15)) {
        check_q8_1(&x)?;
    }

    #[test]
    fn q8_k_matches_its_definition(x in rows(2, 256, -40, 40)) {
        check_q8_k(&x)?;
    }
}

/// The input the property test once found: a step and a half-step tie.
#[test]
fn q8_k_a_product_that_rounds_to_a_half_step() {
    let mut x = vec![0f32; 256];
    x[0] = 0.8228347;
    x[1] = 1.0;
    check_q8_k(&x).unwrap();
}

#[test]
fn q8_k_sign_convention_and_ties() {
    // The first of equal magnitudes decides the sign: +3 comes first, so d < 0.
    let mut x = [0f32; 256];
    x[10] = 3.0;
    x[20] = -3.0;
    x[30] = 1.5;
    let b = BlockQ8_K::quantize(&x);
    assert_eq!(b.d, 1.0 / (-127.0 / 3.0));
    assert!(b.d < 0.0);
    assert_eq!((b.qs[10], b.qs[20], b.qs[30]), (-127, 127, -64)); // -63.5 rounds to -64
    assert_eq!(b.bsums[0], -127);
    assert_eq!(b.bsums[1], 127 - 64);
    // A negative extreme gives a positive d.
    x[10] = -3.0;
    let b = BlockQ8_K::quantize(&x);
    assert!(b.d > 0.0);
    assert_eq!((b.qs[10], b.qs[20], b.qs[30]), (-127, -127, 64));
    check_q8_k(&x).unwrap();
}

#[test]
fn q8_1_fixed_cases() {
    // Zeros: d = 0, s = 0, q = 0.
    check_q8_1(&[0.0; 32]).unwrap();
    let b = BlockQ8_1::quantize(&[0.0; 32]);
    assert_eq!((b.d.to_bits(), b.s.to_bits()), (0, 0));
    // 127 * 0.1 gives d = 0.1 (not exact in f16), sum = 127 + 5 * 1 = 132.
    let mut x = [0f32; 32];
    x[0] = 12.7;
    x[1..6].fill(0.1);
    let b = BlockQ8_1::quantize(&x);
    let d = 12.7f32 / 127.0;
    assert_eq!(b.qs[0], 127);
    assert_eq!(&b.qs[1..6], &[1; 5]);
    assert_eq!(b.s, f16::from_f32(132.0 * d));
    assert_ne!(
        b.s,
        f16::from_f32(132.0 * b.d.to_f32()),
        "s uses the unrounded d"
    );
    check_q8_1(&x).unwrap();
}
