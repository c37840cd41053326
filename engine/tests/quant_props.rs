//! Properties of every quantizer and dequantizer: no input makes them panic,
//! block bytes survive decoding and re-encoding, and a round trip stays
//! within a per-type error bound relative to the block's largest magnitude.

use engine::quant::{
    dequantize_row, quantize_row, BlockQ2_K, BlockQ3_K, BlockQ4_0, BlockQ4_1, BlockQ4_K, BlockQ5_0,
    BlockQ5_1, BlockQ5_K, BlockQ6_K, BlockQ8_0, BlockQ8_1, BlockQ8_K,
};
use engine::GgmlType;
use proptest::prelude::*;

/// Every type with a quantizer and a dequantizer, with the largest round-trip
/// error allowed for a block (32 elements for the legacy types and the plain
/// floats, 256 for the K types) as a fraction of that block's max |x|.
///
/// The bounds hold for blocks whose max |x| lies in [2^-4, 2^14], where the
/// f16 scales stay normal and finite (below that the subnormal f16 scales
/// lose precision, which is the format's, not a bug). "Measured" is the worst
/// ratio seen over 2,000,000 random super-blocks of the shapes `row` draws
/// (300,000 for the non-K types); the bound leaves the stated headroom.
const BOUNDS: [(GgmlType, f32); 14] = [
    // Theory: 1/2^11 (f16 relative precision). Measured 0.000488.
    (GgmlType::F16, 0.0005),
    // Theory: 1/2^8. Measured 0.003891.
    (GgmlType::BF16, 0.004),
    // Theory: the largest positive element can only reach 7d of 8d, so 1/8,
    // plus f16 rounding of d (7/8 * 2^-11). Measured 0.125356.
    (GgmlType::Q4_0, 0.13),
    // Theory: (max - min) / 30 <= 1/15, plus f16 rounding of d and m.
    // Measured 0.067636; headroom 1.1x.
    (GgmlType::Q4_1, 0.075),
    // Theory: 1/16 plus f16 rounding of d. Measured 0.062885.
    (GgmlType::Q5_0, 0.066),
    // Theory: (max - min) / 62 <= 1/31 plus f16 rounding. Measured 0.033275;
    // headroom 1.1x.
    (GgmlType::Q5_1, 0.037),
    // Theory: 1/254 plus 127 * f16 rounding of d. Measured 0.004410.
    (GgmlType::Q8_0, 0.0046),
    // As Q8_0.
    (GgmlType::Q8_1, 0.0046),
    // Measured 0.800987 (sparse blocks: zeros carry no weight in Q2_K's fit);
    // headroom 1.25x.
    (GgmlType::Q2_K, 1.0),
    // Measured 0.291651; headroom 1.37x.
    (GgmlType::Q3_K, 0.4),
    // Measured 0.131728; headroom 1.37x.
    (GgmlType::Q4_K, 0.18),
    // Measured 0.076404; headroom 1.31x.
    (GgmlType::Q5_K, 0.1),
    // Measured 0.026068; headroom 1.34x.
    (GgmlType::Q6_K, 0.035),
    // Theory: 1/254 exactly (d is an f32). Measured 0.003937.
    (GgmlType::Q8_K, 0.004),
];

/// Builds a 256-element row of one of eight shapes at magnitude `scale` from
/// uniform draws `u` in [-1, 1) and `v` in [0, 1).
fn shape(kind: u8, scale: f32, u: &[f32], v: &[f32]) -> Vec<f32> {
    u.iter()
        .zip(v)
        .enumerate()
        .map(|(i, (&u, &v))| {
            scale
                * match kind % 8 {
                    0 => u,         // uniform
                    1 => u * u * u, // peaked at zero
                    2 => {
                        if v < 0.05 {
                            u
                        } else {
                            0.01 * u
                        }
                    } // rare outliers
                    3 => u.abs(),   // one sign
                    4 => 1.0 + 0.1 * u, // narrow, far from 0
                    5 => {
                        if v < 0.7 {
                            0.0
                        } else {
                            u
                        }
                    } // sparse
                    6 => 1.0,       // constant
                    _ => u * 0.5f32.powi(((i / 16) % 8) as i32), // groups 1..1/128
                }
        })
        .collect()
}

fn shaped_row() -> impl Strategy<Value = Vec<f32>> {
    (
        0u8..8,
        -4i32..=13,
        1.0f32..2.0,
        prop::collection::vec(-1.0f32..1.0, 256),
        prop::collection::vec(0.0f32..1.0, 256),
    )
        .prop_map(|(kind, e, m, u, v)| shape(kind, m * 2f32.powi(e), &u, &v))
}

fn quantize(ty: GgmlType, x: &[f32]) -> Vec<u8> {
    let mut q = vec![0u8; ty.bytes_for(x.len() as u64).unwrap() as usize];
    quantize_row(ty, x, &mut q).unwrap();
    q
}

fn dequantize(ty: GgmlType, q: &[u8], n: usize) -> Vec<f32> {
    let mut y = vec![0f32; n];
    dequantize_row(ty, q, &mut y).unwrap();
    y
}

const ALL: [GgmlType; 15] = [
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

/// Any f32 at all: huge, tiny, subnormal, infinite, NaN (of any payload).
fn any_f32() -> impl Strategy<Value = f32> {
    prop_oneof![
        3 => any::<u32>().prop_map(f32::from_bits),
        1 => prop::num::f32::ANY,
        1 => Just(0.0f32),
    ]
}

/// Finite f32 of every magnitude (normal, subnormal, zero, up to f32::MAX).
fn finite_f32() -> impl Strategy<Value = f32> {
    prop::num::f32::NORMAL | prop::num::f32::SUBNORMAL | prop::num::f32::ZERO
}

/// `to_bytes(from_bytes(b)) == b` for one block type, on arbitrary bytes.
macro_rules! assert_bytes_round_trip {
    ($block:ty, $bytes:expr) => {{
        let b: &[u8; <$block>::BYTES] = $bytes[..<$block>::BYTES].try_into().unwrap();
        prop_assert_eq!(
            &<$block>::from_bytes(b).to_bytes()[..],
            &b[..],
            "{}",
            stringify!($block)
        );
    }};
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 1024,
        // Integration tests have no lib.rs beside them to persist failures next to.
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Finite input of any magnitude: every quantizer returns, and so does
    /// dequantizing its output. F32 round-trips exactly.
    #[test]
    fn quantize_any_finite_input_never_panics(x in prop::collection::vec(finite_f32(), 256)) {
        for ty in ALL {
            let q = quantize(ty, &x);
            let y = dequantize(ty, &q, x.len());
            if ty == GgmlType::F32 {
                prop_assert!(x.iter().zip(&y).all(|(a, b)| a.to_bits() == b.to_bits()));
            }
        }
    }

    /// Not even NaN or infinity makes a quantizer panic.
    #[test]
    fn quantize_non_finite_input_never_panics(x in prop::collection::vec(any_f32(), 256)) {
        for ty in ALL {
            let q = quantize(ty, &x);
            dequantize(ty, &q, x.len());
        }
    }

    /// Arbitrary bytes (NaN and infinite scales included) dequantize without
    /// panicking, from any alignment.
    #[test]
    fn dequantize_any_bytes_never_panics(
        bytes in prop::collection::vec(any::<u8>(), 2 * 292 + 1),
        offset in 0usize..2,
    ) {
        for ty in ALL {
            let n = 2 * ty.block_elems();
            let len = ty.bytes_for(n as u64).unwrap() as usize;
            dequantize(ty, &bytes[offset..offset + len], n);
        }
    }

    /// Every block struct decodes and re-encodes arbitrary bytes unchanged.
    #[test]
    fn block_bytes_round_trip(bytes in prop::collection::vec(any::<u8>(), 292)) {
        assert_bytes_round_trip!(BlockQ4_0, bytes);
        assert_bytes_round_trip!(BlockQ4_1, bytes);
        assert_bytes_round_trip!(BlockQ5_0, bytes);
        assert_bytes_round_trip!(BlockQ5_1, bytes);
        assert_bytes_round_trip!(BlockQ8_0, bytes);
        assert_bytes_round_trip!(BlockQ8_1, bytes);
        assert_bytes_round_trip!(BlockQ2_K, bytes);
        assert_bytes_round_trip!(BlockQ3_K, bytes);
        assert_bytes_round_trip!(BlockQ4_K, bytes);
        assert_bytes_round_trip!(BlockQ5_K, bytes);
        assert_bytes_round_trip!(BlockQ6_K, bytes);
        assert_bytes_round_trip!(BlockQ8_K, bytes);
    }

    /// dequantize(quantize(x)) is within the type's bound of x, relative to
    /// each block's max |x|; all-zero blocks come back exactly zero.
    #[test]
    fn round_trip_within_bound(x in shaped_row()) {
        for (ty, bound) in BOUNDS {
            let y = dequantize(ty, &quantize(ty, &x), x.len());
            let block = ty.block_elems().max(32);
            for (b, (xs, ys)) in x.chunks(block).zip(y.chunks(block)).enumerate() {
                let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
                let err = xs.iter().zip(ys).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
                if amax == 0.0 {
                    prop_assert!(err == 0.0, "{} block {}: zeros came back as {:?}", ty, b, ys);
                } else if (0.0625..=16384.0).contains(&amax) {
                    prop_assert!(
                        err <= bound * amax,
                        "{} block {}: error {} is {} of max |x| {}, bound {}",
                        ty, b, err, err / amax, amax, bound
                    );
                }
            }
        }
    }
}

/// The shapes reach the bounds' regime: each type's worst error over a fixed
/// set of rows is a real fraction of its bound, so the bounds are not vacuous.
#[test]
fn bounds_are_not_vacuous() {
    let mut worst = [0f32; BOUNDS.len()];
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut unit = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 40) as f32 / (1u64 << 24) as f32
    };
    for r in 0..400 {
        let u: Vec<f32> = (0..256).map(|_| unit() * 2.0 - 1.0).collect();
        let v: Vec<f32> = (0..256).map(|_| unit()).collect();
        let x = shape(r as u8, 1.0 + unit(), &u, &v);
        for (t, (ty, _)) in BOUNDS.iter().enumerate() {
            let y = dequantize(*ty, &quantize(*ty, &x), x.len());
            let block = ty.block_elems().max(32);
            for (xs, ys) in x.chunks(block).zip(y.chunks(block)) {
                let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
                let err = xs
                    .iter()
                    .zip(ys)
                    .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
                if amax > 0.0 {
                    worst[t] = worst[t].max(err / amax);
                }
            }
        }
    }
    for (t, (ty, bound)) in BOUNDS.iter().enumerate() {
        println!("{ty}: worst {:.6} of bound {bound}", worst[t]);
        assert!(worst[t] <= *bound, "{ty}");
        assert!(
            worst[t] > 0.4 * bound,
            "{ty}: worst {} is far below bound {}",
            worst[t],
            bound
        );
    }
}
