//! Random weights of every type for the matrix-product tests
//! (`vulkan_matmul.rs`, `vulkan_moe.rs`), the f64 products they are checked
//! against, and the limits of both comparisons.

use engine::cpu::act::{quantize_act, vec_dot_type};
use engine::cpu::dot::scalar_dot;
use engine::ops::WeightSource;
use engine::quant::{dequantize_row, quantize_row};
use engine::GgmlType;

use super::values;

/// Largest NMSE of the GPU against the f64 reference ([`reference_dot`]):
/// only f32 rounding (accumulation of up to 1024 products, or of the
/// blocks' products) separates them. Measured over 450 random shapes per type (at least 32
/// outputs each): at most 7.5e-13 (Q4_1; 1.3e-13 for the float types, whose
/// rows here are shorter). The limit is ~4x that; a single wrong block gives
/// > 1e-4.
pub const LIMIT_F64: f64 = 3e-12;

/// Largest NMSE of the GPU against the CPU op, per type. Measured maxima
/// over random shapes per type (at least 32 outputs each;
/// `SHARPI_MATMUL_CASES`), limits ~4x:
pub fn cpu_limit(ty: GgmlType) -> f64 {
    match ty {
        // Same f32 products, another summation order: 1.2e-13.
        GgmlType::F32 => 5e-13,
        // The CPU rounds x to f16 (the GPU keeps f32): 1.5e-7.
        GgmlType::F16 => 6e-7,
        // The CPU rounds x to bf16: 5.4e-6.
        GgmlType::BF16 => 2.5e-5,
        // Block types: both quantize x to the same Q8_0 / Q8_1 / Q8_K bytes
        // and take the same per-block products; only the f32 order of the
        // sum over blocks (and lanes) differs. Measured: see BLOCK_CPU_LIMIT.
        _ => BLOCK_CPU_LIMIT,
    }
}

/// The block types' NMSE limit against the CPU (accumulation order only):
/// measured at most 7.5e-14 (Q5_1; lavapipe, both layouts, the fixed
/// shapes of vulkan_matmul.rs), limit 4x. |GPU - reference| / Σ|terms|
/// measured at most 2.1e-7 (Q4_1, ~3.5 f32 roundings; the K-quants 2.7e-8
/// of their larger sums). One block product off by one unit of its integer
/// sum gives > 1e-8.
pub const BLOCK_CPU_LIMIT: f64 = 3e-13;

/// Output `(t, r)` of a product as the reference the GPU is checked
/// against, in f64, and the sum of the absolute values of its terms (what
/// bounds the rounding of any f32 summation order): for float weights the
/// dequantized row `wr_deq` times `x`; for block types the CPU's scalar
/// per-block products (ggml's generic kernels, one block at a time) of the
/// weight row's bytes `wr` and `x` quantized to the type's dot format, so
/// that only the order of the f32 sum over blocks is left.
pub fn reference_dot(ty: GgmlType, wr: &[u8], wr_deq: &[f32], x: &[f32]) -> (f64, f64) {
    if ty.block_elems() == 1 {
        return dot_f64(wr_deq, x);
    }
    let fmt = vec_dot_type(ty).unwrap();
    let mut xq = vec![0u8; fmt.bytes_for(x.len() as u64).unwrap() as usize];
    quantize_act(fmt, x, &mut xq).unwrap();
    let dot = scalar_dot(ty).unwrap();
    let (wb, ab) = (ty.block_bytes(), fmt.block_bytes());
    let terms = wr
        .chunks_exact(wb)
        .zip(xq.chunks_exact(ab))
        .map(|(w, a)| f64::from(dot(w, a)));
    let sum: f64 = terms.clone().sum();
    let mut abs = terms.map(f64::abs).sum::<f64>();
    if ty.block_elems() == 256 {
        // Q2_K..Q6_K blocks are sums of lane (or scale and min) terms that
        // may cancel: their absolute values add up to at most about
        // Σ |w · x| (the min terms and x's rounding within that again).
        let lanes: f64 = wr_deq
            .iter()
            .zip(x)
            .map(|(&a, &b)| (f64::from(a) * f64::from(b)).abs())
            .filter(|v| v.is_finite())
            .sum();
        abs += 2.0 * lanes;
    }
    (sum, abs)
}

/// The bound on |GPU - reference| for one output of `ty` over `n_in`
/// elements whose terms' absolute values add up to `abs`: for float types
/// [`f32_sum_bound`]; for block types one rounding per block (the sum over
/// blocks) and 16 for the reordered sum of a block's eight lane terms
/// (Q3_K..Q6_K; their absolute values are bounded in [`reference_dot`]).
pub fn reference_bound(ty: GgmlType, n_in: usize, abs: f64) -> f64 {
    let be = ty.block_elems();
    if be == 1 {
        return f32_sum_bound(n_in, abs);
    }
    (n_in / be + 16) as f64 * abs / (1u64 << 24) as f64
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
