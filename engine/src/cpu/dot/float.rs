//! Scalar reference dot products for the float types, each against
//! activations of its own type (ggml's `vec_dot_type` for F16 is F16 and for
//! BF16 is BF16): ggml's scalar `ggml_vec_dot_{f32,f16,bf16}`, every product
//! rounded to f32 and summed in f64.
//!
//! # Panics
//! When `x` and `y` differ in length or are not whole elements.

use half::f16;

use crate::quant::float::bf16_bits_to_f32;

use super::{pairs, ScalarRow};
use crate::ggml_type::GgmlType::{BF16, F16, F32};

/// This family's weight types: (weight, activation format, scalar dot).
pub(super) const SCALAR: [ScalarRow; 3] = [
    (F32, (F32, vec_dot_f32_scalar)),
    (F16, (F16, vec_dot_f16_scalar)),
    (BF16, (BF16, vec_dot_bf16_scalar)),
];

fn dot_f64<const B: usize>(x: &[u8], y: &[u8], to_f32: impl Fn(&[u8; B]) -> f32) -> f32 {
    let mut sum = 0.0f64;
    for (a, b) in pairs::<B, B>(x, y) {
        sum += (to_f32(a) * to_f32(b)) as f64;
    }
    sum as f32
}

pub fn vec_dot_f32_scalar(x: &[u8], y: &[u8]) -> f32 {
    dot_f64::<4>(x, y, |b| f32::from_le_bytes(*b))
}

pub fn vec_dot_f16_scalar(x: &[u8], y: &[u8]) -> f32 {
    dot_f64::<2>(x, y, |b| f16::from_le_bytes(*b).to_f32())
}

pub fn vec_dot_bf16_scalar(x: &[u8], y: &[u8]) -> f32 {
    dot_f64::<2>(x, y, |b| bf16_bits_to_f32(u16::from_le_bytes(*b)))
}
