//! Elementwise ops, each op's math in one place: [`binary`] (add, mul, the
//! gated activations) and [`unary`] (scale, soft-capping), the ops of
//! [`crate::ops::BinaryOp`] and [`crate::ops::UnaryOp`]; [`add_bias`], a
//! vector added to every row ([`crate::ops::Ops::add_bias`]).

use std::sync::OnceLock;

use half::f16;

use super::ggml::{self, silu};
use super::parallel::for_chunks;
use super::CpuNumerics;
use crate::ops::{BinaryOp, GluKind, UnaryOp};
use crate::simd::SimdLevel;

/// Elements per parallel chunk of an elementwise op.
const CHUNK: usize = 4096;

/// GELU, tanh approximation, in f32, as llama.cpp's x86 build computes
/// ggml's `ggml_gelu_f32`: `0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x²)))`
/// with gcc's one contraction there, `1 + (0.044715 x) x` as a fused
/// multiply-add (built with `-mfma`, GNU C contracts by default).
#[inline]
pub fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_560_802_865_4_f64 as f32;
    const GELU_COEF_A: f32 = 0.044715;
    let inner = (SQRT_2_OVER_PI * x) * (GELU_COEF_A * x).mul_add(x, 1.0);
    (0.5 * x) * (1.0 + inner.tanh())
}

/// ggml's `ggml_table_gelu_f16`: [`gelu_tanh`] of every f16 value, rounded
/// to f16 (built once, 128 KiB; the same 65,536 entries as ggml's, pinned
/// by a hash in the tests below, `scripts/ggml-gelu/run`).
fn gelu_table() -> &'static [f16] {
    static TABLE: OnceLock<Box<[f16]>> = OnceLock::new();
    TABLE.get_or_init(|| {
        (0..=u16::MAX)
            .map(|b| {
                let y = gelu_tanh(f16::from_bits(b).to_f32());
                // ggml's software conversion writes every NaN as the quiet
                // NaN 0x7e00 with the sign kept; otherwise it rounds to
                // nearest even, as `half` does.
                if y.is_nan() {
                    f16::from_bits(0x7e00 | ((y.to_bits() >> 16) as u16 & 0x8000))
                } else {
                    f16::from_f32(y)
                }
            })
            .collect()
    })
}

/// `gelu(g) * u` as ggml's CPU backend computes it for f32 (`ggml_vec_geglu_f32`
/// under `GGML_GELU_FP16`, which vec.h defines for every build, x86 SIMD or
/// not): 0 for `g <= -10`, `g * u` for `g >= 10`, otherwise the table entry
/// of `g` rounded to f16, times `u`. That differs from the f32 formula by
/// the two f16 roundings, up to ~1e-3 relative.
#[inline]
fn geglu_one(g: f32, u: f32, table: &[f16]) -> f32 {
    if g <= -10.0 {
        0.0
    } else if g >= 10.0 {
        g * u
    } else {
        table[usize::from(f16::from_f32(g).to_bits())].to_f32() * u
    }
}

/// `gate = act(gate) * up` of each `width`-element row as `numerics` says:
/// [`CpuNumerics::Ggml`]'s SwiGLU is `ggml_vec_swiglu_f32` of each row
/// ([`ggml::swiglu`]: ggml's vector exp over the row's whole 8-element
/// vectors, libm's for the rest); GeGLU is the same in both (ggml's table).
pub fn glu_rows(numerics: CpuNumerics, kind: GluKind, gate: &mut [f32], up: &[f32], width: usize) {
    if numerics == CpuNumerics::Reference || kind != GluKind::SwiGlu {
        return glu(kind, gate, up);
    }
    assert!(
        gate.len() == up.len() && width > 0 && gate.len().is_multiple_of(width),
        "glu: gate {} and up {} elements in rows of {width}",
        gate.len(),
        up.len()
    );
    let level = SimdLevel::detected();
    let chunk = width * (CHUNK / width).max(1);
    for_chunks(gate, chunk, gate.len() * 8, |i, g| {
        let u = &up[i * chunk..i * chunk + g.len()];
        for (g, u) in g.chunks_exact_mut(width).zip(u.chunks_exact(width)) {
            ggml::swiglu(level, g, u);
        }
    });
}

/// `gate = act(gate) * up`, [`CpuNumerics::Reference`]'s arithmetic (libm
/// exp per element).
pub fn glu(kind: GluKind, gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len(), "glu: gate and up lengths");
    let table = match kind {
        GluKind::SwiGlu => &[][..],
        GluKind::GeGluTanh => gelu_table(),
    };
    for_chunks(gate, CHUNK, gate.len() * 8, |i, g| {
        let u = &up[i * CHUNK..i * CHUNK + g.len()];
        match kind {
            GluKind::SwiGlu => g.iter_mut().zip(u).for_each(|(g, &u)| *g = silu(*g) * u),
            GluKind::GeGluTanh => g
                .iter_mut()
                .zip(u)
                .for_each(|(g, &u)| *g = geglu_one(*g, u, table)),
        }
    });
}

/// `x = op(x, y)` (see [`BinaryOp`] for each op's math).
pub fn binary(op: BinaryOp, x: &mut [f32], y: &[f32]) {
    match op {
        BinaryOp::Add => {
            assert_eq!(x.len(), y.len(), "add: lengths");
            x.iter_mut().zip(y).for_each(|(x, &y)| *x += y);
        }
        BinaryOp::Mul => {
            assert_eq!(x.len(), y.len(), "mul: lengths");
            x.iter_mut().zip(y).for_each(|(x, &y)| *x *= y);
        }
        BinaryOp::Glu(kind) => glu(kind, x, y),
    }
}

/// `x[t, i] += bias[i]` for every row `t` of `x` (rows of `bias.len()`
/// elements): one f32 addition per element.
pub fn add_bias(x: &mut [f32], bias: &[f32]) {
    assert!(
        !bias.is_empty() && x.len().is_multiple_of(bias.len()),
        "add_bias: {} elements in rows of {}",
        x.len(),
        bias.len()
    );
    for row in x.chunks_exact_mut(bias.len()) {
        row.iter_mut().zip(bias).for_each(|(x, &b)| *x += b);
    }
}

/// `x = op(x)` (see [`UnaryOp`] for each op's math).
pub fn unary(op: UnaryOp, x: &mut [f32]) {
    match op {
        UnaryOp::Scale(s) => x.iter_mut().for_each(|x| *x *= s),
        // cap · tanh(x / cap) as ggml's scale, tanh, scale.
        UnaryOp::Softcap(cap) => {
            let inv = 1.0 / cap;
            for_chunks(x, CHUNK, x.len() * 8, |_, c| {
                c.iter_mut().for_each(|x| *x = (*x * inv).tanh() * cap);
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// FNV-1a 64 of the table's little-endian u16 entries.
    fn table_hash() -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for v in gelu_table() {
            for b in v.to_bits().to_le_bytes() {
                h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
            }
        }
        h
    }

    #[test]
    fn gelu_table_is_ggmls() {
        // scripts/ggml-gelu/run: ggml_table_gelu_f16 as llama.cpp's x86
        // build (llama-cpp-sys-2 0.1.161, -O2 -mfma) makes it.
        assert_eq!(table_hash(), 0xab04_4edb_a0ed_200c);
        // The entry the FMA contraction decides (0xa9d2 without it).
        assert_eq!(gelu_table()[0xbfff].to_bits(), 0xa9d3);
        assert_eq!(gelu_table()[0x3c00].to_bits(), 0x3abb);
    }

    #[test]
    fn geglu_clamps_as_ggml() {
        let t = gelu_table();
        assert_eq!(geglu_one(-10.0, f32::NAN, t), 0.0);
        assert_eq!(geglu_one(12.0, 0.5, t), 6.0);
        // 1.0 is an f16 value: its entry is gelu(1) rounded to f16.
        assert_eq!(geglu_one(1.0, 1.0, t), f16::from_bits(0x3abb).to_f32());
        assert!((geglu_one(1.0, 1.0, t) - gelu_tanh(1.0)).abs() < 1e-3);
    }
}
