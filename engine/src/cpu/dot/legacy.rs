//! Scalar reference dot products for the 32-element formats: weights in
//! Q4_0, Q5_0, Q8_0 against Q8_0 activations, Q4_1 and Q5_1 against Q8_1.
//!
//! Each is ggml's `ggml_vec_dot_*_generic`: an exact integer dot per block,
//! then one f32 expression per block in ggml's operand order, every
//! operation rounded (as a build without FMA contraction computes it).
//!
//! Rows are ggml block bytes; `x` (weights) and `y` (activations) must hold
//! the same number of blocks.
//!
//! # Panics
//! When `x` and `y` are not whole blocks or differ in block count.

use crate::quant::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1};

use super::{pairs, ScalarRow};
use crate::ggml_type::GgmlType::{Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1};

/// This family's weight types: (weight, activation format as ggml's
/// `vec_dot_type`, scalar dot).
pub(super) const SCALAR: [ScalarRow; 5] = [
    (Q4_0, (Q8_0, vec_dot_q4_0_q8_0_scalar)),
    (Q4_1, (Q8_1, vec_dot_q4_1_q8_1_scalar)),
    (Q5_0, (Q8_0, vec_dot_q5_0_q8_0_scalar)),
    (Q5_1, (Q8_1, vec_dot_q5_1_q8_1_scalar)),
    (Q8_0, (Q8_0, vec_dot_q8_0_q8_0_scalar)),
];

/// The 5-bit values of elements `j` and `j + 16` of a Q5 block.
#[inline]
fn q5(qs: &[u8; 16], qh: u32, j: usize) -> (i32, i32) {
    let h0 = ((qh >> j) << 4) & 0x10;
    let h1 = (qh >> (j + 12)) & 0x10;
    (
        ((qs[j] as u32 & 0x0F) | h0) as i32,
        ((qs[j] as u32 >> 4) | h1) as i32,
    )
}

/// `sum(d_x * (q_x - 8) * d_y * q_y)`.
pub fn vec_dot_q4_0_q8_0_scalar(x: &[u8], y: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (xb, yb) in pairs::<{ BlockQ4_0::BYTES }, { BlockQ8_0::BYTES }>(x, y) {
        let (x, y) = (BlockQ4_0::from_bytes(xb), BlockQ8_0::from_bytes(yb));
        let mut sumi = 0i32;
        for j in 0..16 {
            let v0 = (x.qs[j] & 0x0F) as i32 - 8;
            let v1 = (x.qs[j] >> 4) as i32 - 8;
            sumi += v0 * y.qs[j] as i32 + v1 * y.qs[j + 16] as i32;
        }
        sumf += sumi as f32 * x.d.to_f32() * y.d.to_f32();
    }
    sumf
}

/// `sum((d_x * q_x + m_x) * d_y * q_y)`, the `m_x` part through Q8_1's `s`.
pub fn vec_dot_q4_1_q8_1_scalar(x: &[u8], y: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (xb, yb) in pairs::<{ BlockQ4_1::BYTES }, { BlockQ8_1::BYTES }>(x, y) {
        let (x, y) = (BlockQ4_1::from_bytes(xb), BlockQ8_1::from_bytes(yb));
        let mut sumi = 0i32;
        for j in 0..16 {
            let v0 = (x.qs[j] & 0x0F) as i32;
            let v1 = (x.qs[j] >> 4) as i32;
            sumi += v0 * y.qs[j] as i32 + v1 * y.qs[j + 16] as i32;
        }
        sumf += (x.d.to_f32() * y.d.to_f32()) * sumi as f32 + x.m.to_f32() * y.s.to_f32();
    }
    sumf
}

/// `sum(d_x * (q_x - 16) * d_y * q_y)`, 5-bit `q_x`.
pub fn vec_dot_q5_0_q8_0_scalar(x: &[u8], y: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (xb, yb) in pairs::<{ BlockQ5_0::BYTES }, { BlockQ8_0::BYTES }>(x, y) {
        let (x, y) = (BlockQ5_0::from_bytes(xb), BlockQ8_0::from_bytes(yb));
        let qh = u32::from_le_bytes(x.qh);
        let mut sumi = 0i32;
        for j in 0..16 {
            let (v0, v1) = q5(&x.qs, qh, j);
            sumi += (v0 - 16) * y.qs[j] as i32 + (v1 - 16) * y.qs[j + 16] as i32;
        }
        sumf += (x.d.to_f32() * y.d.to_f32()) * sumi as f32;
    }
    sumf
}

/// `sum((d_x * q_x + m_x) * d_y * q_y)`, 5-bit `q_x`.
pub fn vec_dot_q5_1_q8_1_scalar(x: &[u8], y: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (xb, yb) in pairs::<{ BlockQ5_1::BYTES }, { BlockQ8_1::BYTES }>(x, y) {
        let (x, y) = (BlockQ5_1::from_bytes(xb), BlockQ8_1::from_bytes(yb));
        let qh = u32::from_le_bytes(x.qh);
        let mut sumi = 0i32;
        for j in 0..16 {
            let (v0, v1) = q5(&x.qs, qh, j);
            sumi += v0 * y.qs[j] as i32 + v1 * y.qs[j + 16] as i32;
        }
        sumf += (x.d.to_f32() * y.d.to_f32()) * sumi as f32 + x.m.to_f32() * y.s.to_f32();
    }
    sumf
}

/// `sum(d_x * q_x * d_y * q_y)`.
pub fn vec_dot_q8_0_q8_0_scalar(x: &[u8], y: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (xb, yb) in pairs::<{ BlockQ8_0::BYTES }, { BlockQ8_0::BYTES }>(x, y) {
        let (x, y) = (BlockQ8_0::from_bytes(xb), BlockQ8_0::from_bytes(yb));
        let sumi: i32 = (0..32).map(|j| x.qs[j] as i32 * y.qs[j] as i32).sum();
        sumf += sumi as f32 * (x.d.to_f32() * y.d.to_f32());
    }
    sumf
}
