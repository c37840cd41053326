//! Scalar reference dot products for the super-block formats: Q2_K, Q3_K,
//! Q4_K, Q5_K and Q6_K weights against Q8_K activations.
//!
//! Each is ggml's `ggml_vec_dot_*_q8_K_generic`, including how it splits the
//! integer sums: Q3_K to Q6_K accumulate eight integer lanes per block (lane
//! `l` holds the elements `l, l + 8, l + 16, ...`), scale each lane to f32
//! on its own and add the eight lane totals at the end; Q2_K sums the whole
//! block. Float operations are rounded one by one (no FMA contraction).
//!
//! # Panics
//! When `x` and `y` are not whole blocks or differ in block count.

use crate::quant::k::{scale_min_k4, scale_q3_k};
use crate::quant::{BlockQ2_K, BlockQ3_K, BlockQ4_K, BlockQ5_K, BlockQ6_K, BlockQ8_K, QK_K};

use super::{pairs, ScalarRow};
use crate::ggml_type::GgmlType::{Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K};

/// This family's weight types: (weight, activation format as ggml's
/// `vec_dot_type`, scalar dot).
pub(super) const SCALAR: [ScalarRow; 5] = [
    (Q2_K, (Q8_K, vec_dot_q2_k_q8_k_scalar)),
    (Q3_K, (Q8_K, vec_dot_q3_k_q8_k_scalar)),
    (Q4_K, (Q8_K, vec_dot_q4_k_q8_k_scalar)),
    (Q5_K, (Q8_K, vec_dot_q5_k_q8_k_scalar)),
    (Q6_K, (Q8_K, vec_dot_q6_k_q8_k_scalar)),
];

/// ggml's generic lanes: lane `l` sums `scale(e) * a[e] * q8[e]` over the
/// elements `e` with `e % 8 == l`.
fn lanes(a: &[i8; QK_K], q8: &[i8; QK_K], scale: impl Fn(usize) -> i32) -> [i32; 8] {
    let mut aux = [0i32; 8];
    for e in 0..QK_K {
        aux[e % 8] += scale(e) * (a[e] as i32 * q8[e] as i32);
    }
    aux
}

/// `sum(q8_K bsums[g] * min[g])` for 32-element groups `g` (two bsums each).
fn mins_dot(bsums: &[i16; 16], min: impl Fn(usize) -> i32) -> i32 {
    (0..16).map(|j| bsums[j] as i32 * min(j / 2)).sum()
}

/// Q2_K: `x = d * sc * q - dmin * m` over 16 groups of 16.
pub fn vec_dot_q2_k_q8_k_scalar(x: &[u8], y: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (xb, yb) in pairs::<{ BlockQ2_K::BYTES }, { BlockQ8_K::BYTES }>(x, y) {
        let (x, y) = (BlockQ2_K::from_bytes(xb), BlockQ8_K::from_bytes(yb));
        let summs: i32 = (0..16)
            .map(|j| y.bsums[j] as i32 * (x.scales[j] >> 4) as i32)
            .sum();
        let dall = y.d * x.d.to_f32();
        let dmin = y.d * x.dmin.to_f32();
        let mut isum = 0i32;
        // Element e: 2-bit field (e / 32) % 4 of qs[32 * (e / 128) + e % 32].
        for e in 0..QK_K {
            let q = (x.qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3;
            let sc = (x.scales[e / 16] & 0xF) as i32;
            isum += sc * (q as i32 * y.qs[e] as i32);
        }
        sumf += dall * isum as f32 - dmin * summs as f32;
    }
    sumf
}

/// Q3_K: `x = d * (sc - 32) * q`, `q` in -4..=3, over 16 groups of 16.
pub fn vec_dot_q3_k_q8_k_scalar(x: &[u8], y: &[u8]) -> f32 {
    let mut sums = [0.0f32; 8];
    for (xb, yb) in pairs::<{ BlockQ3_K::BYTES }, { BlockQ8_K::BYTES }>(x, y) {
        let (x, y) = (BlockQ3_K::from_bytes(xb), BlockQ8_K::from_bytes(yb));
        // Element e: low bits as in Q2_K; its high bit is bit e / 32 of
        // hmask[e % 32], and a clear high bit means "minus 4".
        let a: [i8; QK_K] = std::array::from_fn(|e| {
            let low = (x.qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3;
            let high = x.hmask[e % 32] >> (e / 32) & 1;
            low as i8 - if high == 0 { 4 } else { 0 }
        });
        let aux = lanes(&a, &y.qs, |e| scale_q3_k(e / 16, &x.scales) as i32);
        let d = x.d.to_f32() * y.d;
        for l in 0..8 {
            sums[l] += d * aux[l] as f32;
        }
    }
    sums.iter().fold(0.0f32, |s, &v| s + v)
}

/// The 4-bit values of a Q4_K/Q5_K block in element order: each 32-byte
/// chunk holds 64 elements, the low nibbles first.
fn nibbles(qs: &[u8; QK_K / 2]) -> [i8; QK_K] {
    std::array::from_fn(|e| {
        let b = qs[32 * (e / 64) + e % 32];
        (if e % 64 < 32 { b & 0xF } else { b >> 4 }) as i8
    })
}

/// Q4_K: `x = d * sc * q - dmin * m` over 8 groups of 32.
pub fn vec_dot_q4_k_q8_k_scalar(x: &[u8], y: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    let mut sums = [0.0f32; 8];
    for (xb, yb) in pairs::<{ BlockQ4_K::BYTES }, { BlockQ8_K::BYTES }>(x, y) {
        let (x, y) = (BlockQ4_K::from_bytes(xb), BlockQ8_K::from_bytes(yb));
        let a = nibbles(&x.qs);
        let sm = |g: usize| scale_min_k4(g, &x.scales);
        let sumi = mins_dot(&y.bsums, |g| sm(g).1 as i32);
        let aux = lanes(&a, &y.qs, |e| sm(e / 32).0 as i32);
        let d = x.d.to_f32() * y.d;
        for l in 0..8 {
            sums[l] += d * aux[l] as f32;
        }
        let dmin = x.dmin.to_f32() * y.d;
        sumf -= dmin * sumi as f32;
    }
    sums.iter().fold(sumf, |s, &v| s + v)
}

/// Q5_K: as Q4_K with a fifth bit: bit `e / 32` of `qh[e % 32]` adds 16.
pub fn vec_dot_q5_k_q8_k_scalar(x: &[u8], y: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    let mut sums = [0.0f32; 8];
    for (xb, yb) in pairs::<{ BlockQ5_K::BYTES }, { BlockQ8_K::BYTES }>(x, y) {
        let (x, y) = (BlockQ5_K::from_bytes(xb), BlockQ8_K::from_bytes(yb));
        let low = nibbles(&x.qs);
        let a: [i8; QK_K] =
            std::array::from_fn(|e| low[e] + 16 * ((x.qh[e % 32] >> (e / 32)) & 1) as i8);
        let sm = |g: usize| scale_min_k4(g, &x.scales);
        let sumi = mins_dot(&y.bsums, |g| sm(g).1 as i32);
        let aux = lanes(&a, &y.qs, |e| sm(e / 32).0 as i32);
        let d = x.d.to_f32() * y.d;
        for l in 0..8 {
            sums[l] += d * aux[l] as f32;
        }
        let dmin = x.dmin.to_f32() * y.d;
        sumf -= dmin * sumi as f32;
    }
    sums.iter().fold(sumf, |s, &v| s + v)
}

/// Q6_K: `x = d * sc * (q - 32)`, 6-bit `q`, signed 8-bit `sc`, 16 groups of 16.
pub fn vec_dot_q6_k_q8_k_scalar(x: &[u8], y: &[u8]) -> f32 {
    let mut sums = [0.0f32; 8];
    for (xb, yb) in pairs::<{ BlockQ6_K::BYTES }, { BlockQ8_K::BYTES }>(x, y) {
        let (x, y) = (BlockQ6_K::from_bytes(xb), BlockQ8_K::from_bytes(yb));
        // Element e in half h = e / 128, i = e % 128: low nibble of
        // ql[64h + i % 64] (the high nibble when i >= 64), high two bits
        // (i / 32) of qh[32h + i % 32].
        let a: [i8; QK_K] = std::array::from_fn(|e| {
            let (h, i) = (e / 128, e % 128);
            let l = x.ql[64 * h + i % 64];
            let low = if i < 64 { l & 0xF } else { l >> 4 };
            let high = (x.qh[32 * h + i % 32] >> (2 * (i / 32))) & 3;
            (low | (high << 4)) as i8 - 32
        });
        let aux = lanes(&a, &y.qs, |e| x.scales[e / 16] as i32);
        let d = x.d.to_f32() * y.d;
        for l in 0..8 {
            sums[l] += d * aux[l] as f32;
        }
    }
    sums.iter().fold(0.0f32, |s, &v| s + v)
}
