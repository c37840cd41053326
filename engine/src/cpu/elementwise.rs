//! Elementwise ops: gated activations, add, mul, scale, soft-capping.

use super::parallel::for_chunks;
use crate::ops::GluKind;

/// Elements per parallel chunk of an elementwise op.
const CHUNK: usize = 4096;

/// `x / (1 + e^-x)` (ggml's `ggml_silu_f32`).
#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// GELU, tanh approximation, in f32 (ggml's `ggml_gelu_f32`).
///
/// ggml's CPU backend (built with `GGML_GELU_FP16`) instead looks the value
/// up in a table indexed by `x` rounded to f16 (exactly 0 below -10 and `x`
/// above 10); that differs from this by f16 rounding, ~5e-4 relative.
#[inline]
pub fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_560_802_865_4_f64 as f32;
    const GELU_COEF_A: f32 = 0.044715;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + GELU_COEF_A * x * x)).tanh())
}

/// `gate = act(gate) * up`.
pub fn glu(kind: GluKind, gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len(), "glu: gate and up lengths");
    let act: fn(f32) -> f32 = match kind {
        GluKind::SwiGlu => silu,
        GluKind::GeGluTanh => gelu_tanh,
    };
    for_chunks(gate, CHUNK, gate.len() * 8, |i, g| {
        let u = &up[i * CHUNK..i * CHUNK + g.len()];
        g.iter_mut().zip(u).for_each(|(g, &u)| *g = act(*g) * u);
    });
}

/// `x += y`.
pub fn add(x: &mut [f32], y: &[f32]) {
    assert_eq!(x.len(), y.len(), "add: lengths");
    x.iter_mut().zip(y).for_each(|(x, &y)| *x += y);
}

/// `x *= y`.
pub fn mul(x: &mut [f32], y: &[f32]) {
    assert_eq!(x.len(), y.len(), "mul: lengths");
    x.iter_mut().zip(y).for_each(|(x, &y)| *x *= y);
}

/// `x *= s`.
pub fn scale(x: &mut [f32], s: f32) {
    x.iter_mut().for_each(|x| *x *= s);
}

/// `x = cap · tanh(x / cap)`, as ggml's scale, tanh, scale.
pub fn softcap(x: &mut [f32], cap: f32) {
    let inv = 1.0 / cap;
    for_chunks(x, CHUNK, x.len() * 8, |_, c| {
        c.iter_mut().for_each(|x| *x = (*x * inv).tanh() * cap);
    });
}
