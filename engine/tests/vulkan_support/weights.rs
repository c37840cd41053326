//! Random weights of every type for the matrix-product tests
//! (`vulkan_matmul.rs`, `vulkan_moe.rs`), the f64 products they are checked
//! against, and the limits of both comparisons.

use engine::ops::WeightSource;
use engine::quant::{dequantize_row, quantize_row};
use engine::GgmlType;

use super::values;

/// Largest NMSE of the GPU against the f64 product of the dequantized
/// weights: only f32 rounding (accumulation of up to 1024 products)
/// separates them. Measured over 450 random shapes per type (at least 32
/// outputs each): at most 7.5e-13 (Q4_1; 1.3e-13 for the float types, whose
/// rows here are shorter). The limit is ~4x that; a single wrong block gives
/// > 1e-4.
pub const LIMIT_F64: f64 = 3e-12;

/// Largest NMSE of the GPU against the CPU op, per type: the CPU's
/// activation rounding. Measured maxima over 450 random shapes per type
/// (at least 32 outputs each; `SHARPI_MATMUL_CASES`), limits ~4x:
pub fn cpu_limit(ty: GgmlType) -> f64 {
    match ty {
        // Same f32 products, another summation order: 1.2e-13.
        GgmlType::F32 => 5e-13,
        // x rounded to f16: 1.5e-7.
        GgmlType::F16 => 6e-7,
        // x rounded to bf16: 5.4e-6.
        GgmlType::BF16 => 2.5e-5,
        // x quantized to Q8_0 / Q8_1 / Q8_K: Q2_K 3.3e-5, Q3_K 6.1e-5,
        // Q4_0 2.6e-5, Q4_1 3.1e-5, Q4_K 3.1e-5, Q5_0 6.2e-5, Q5_1 3.5e-5,
        // Q5_K 2.8e-5, Q6_K 4.5e-5, Q8_0 2.8e-5 (test-backend-ops allows
        // 5e-4 for MUL_MAT).
        _ => 2.5e-4,
    }
}

/// `n` elements of `ty` from values in [-1, 1] (`seed`), and their
/// dequantized values.
fn quantized(ty: GgmlType, n: usize, seed: u64) -> (Vec<u8>, Vec<f32>) {
    let v = values(seed, n);
    let mut bytes = vec![0u8; ty.bytes_for(n as u64).unwrap() as usize];
    quantize_row(ty, &v, &mut bytes).unwrap();
    let mut deq = vec![0.0; n];
    dequantize_row(ty, &bytes, &mut deq).unwrap();
    (bytes, deq)
}

/// A `[n_in, n_out]` weight of `ty` from values in [-1, 1], and its
/// dequantized values (row-major).
pub fn weight(ty: GgmlType, n_in: usize, n_out: usize, seed: u64) -> (WeightSource, Vec<f32>) {
    let (bytes, deq) = quantized(ty, n_in * n_out, seed);
    let name = format!("{}[{n_in}, {n_out}]", ty.name());
    (WeightSource::from_bytes(&name, ty, n_in, n_out, bytes), deq)
}

/// `n_expert` stacked `[n_in, n_out]` matrices of `ty` from values in
/// [-1, 1], and their dequantized values.
pub fn experts(
    ty: GgmlType,
    n_in: usize,
    n_out: usize,
    n_expert: usize,
    seed: u64,
) -> (WeightSource, Vec<f32>) {
    let (bytes, deq) = quantized(ty, n_in * n_out * n_expert, seed);
    let name = format!("{}[{n_in}, {n_out}, {n_expert}]", ty.name());
    let src = WeightSource::from_bytes(&name, ty, n_in, n_out * n_expert, bytes).stacked(n_expert);
    (src, deq)
}

/// `Σ w[c] · x[c]` in f64, and `Σ |w[c] · x[c]|` (what bounds the rounding
/// error of any f32 summation order).
pub fn dot_f64(w: &[f32], x: &[f32]) -> (f64, f64) {
    let terms = w.iter().zip(x).map(|(&a, &b)| f64::from(a) * f64::from(b));
    let sum: f64 = terms.clone().sum();
    (sum, terms.map(f64::abs).sum::<f64>())
}

/// The worst-case error of an f32 sum of `n` products whose absolute values
/// add up to `abs`: `n` roundings of at most 2^-24 of it, and the final one.
pub fn f32_sum_bound(n: usize, abs: f64) -> f64 {
    (n + 2) as f64 * abs / (1u64 << 24) as f64
}
