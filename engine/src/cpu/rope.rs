//! Rotary position embedding, as ggml's CPU `rope` computes it (no YaRN).

use super::parallel::for_chunks_init;
use super::CpuNumerics;
use crate::ops::{RopeParams, RopeStyle};
use crate::simd::SimdLevel;

/// Rotates every head of each `width`-element row of `x` in place; row `t`
/// is at position `pos0 + t`. See [`crate::ops::Ops::rope`] for the math.
///
/// Like ggml (`ggml_rope_cache_init`), the angles are computed in f32:
/// `theta_0 = p`, `theta_{i+1} = theta_i · base^(-2/n_rot)` (one `powf`, then
/// repeated multiplication), and `cosf`/`sinf` of `freq_scale · theta_i`.
/// The pair `(a, b)` becomes, with [`CpuNumerics::Ggml`], what GCC makes of
/// ggml's `a*cos - b*sin`, `a*sin + b*cos`: `fma(a, cos, -(b·sin))` and
/// `fma(a, sin, b·cos)`; with [`CpuNumerics::Reference`] each product is
/// rounded, then subtracted or added.
///
/// # Panics
/// If `width` is not a multiple of `head_dim` or `n_rot` is odd or larger
/// than `head_dim`.
pub fn rope(x: &mut [f32], width: usize, p: &RopeParams, pos0: usize, numerics: CpuNumerics) {
    rope_at(SimdLevel::detected(), x, width, p, pos0, numerics)
}

/// [`rope`] with the fused multiply-adds of [`CpuNumerics::Ggml`] as
/// `level` computes them (the same bits on every level).
fn rope_at(
    level: SimdLevel,
    x: &mut [f32],
    width: usize,
    p: &RopeParams,
    pos0: usize,
    numerics: CpuNumerics,
) {
    let (hd, n_rot) = (p.head_dim, p.n_rot);
    assert!(
        hd > 0
            && width.is_multiple_of(hd)
            && n_rot % 2 == 0
            && n_rot <= hd
            && x.len().is_multiple_of(width),
        "rope: width {width}, head_dim {hd}, n_rot {n_rot}"
    );
    if n_rot == 0 {
        return;
    }
    let theta_scale = p.base.powf(-2.0f32 / n_rot as f32);
    let half = n_rot / 2;
    for_chunks_init(
        x,
        width,
        x.len() * 4,
        || Vec::with_capacity(half),
        |cs: &mut Vec<(f32, f32)>, t, row| {
            cs.clear();
            let mut theta = (pos0 + t) as f32;
            for _ in 0..half {
                let th = p.freq_scale * theta;
                cs.push((th.cos(), th.sin()));
                theta *= theta_scale;
            }
            match numerics {
                CpuNumerics::Reference => rotate::<false>(row, hd, cs, p.style),
                CpuNumerics::Ggml => rotate_fused(level, row, hd, cs, p.style),
            }
        },
    );
}

/// Rotates the pairs of every head of `row` by the angles `cs`; `FUSED`:
/// with [`CpuNumerics::Ggml`]'s fused multiply-adds.
#[inline(always)]
fn rotate<const FUSED: bool>(row: &mut [f32], hd: usize, cs: &[(f32, f32)], style: RopeStyle) {
    let half = cs.len();
    for head in row.chunks_exact_mut(hd) {
        for (i, &(c, s)) in cs.iter().enumerate() {
            let (a, b) = match style {
                RopeStyle::Norm => (2 * i, 2 * i + 1),
                RopeStyle::Neox => (i, i + half),
            };
            let (x0, x1) = (head[a], head[b]);
            if FUSED {
                head[a] = x0.mul_add(c, -(x1 * s));
                head[b] = x0.mul_add(s, x1 * c);
            } else {
                head[a] = x0 * c - x1 * s;
                head[b] = x0 * s + x1 * c;
            }
        }
    }
}

/// [`rotate`] fused: with the FMA instruction where `level` has it, else
/// through libm's `fmaf` (the same bits).
fn rotate_fused(level: SimdLevel, row: &mut [f32], hd: usize, cs: &[(f32, f32)], style: RopeStyle) {
    #[cfg(target_arch = "x86_64")]
    if level >= SimdLevel::Avx2 && level.is_supported() {
        /// # Safety
        /// The CPU has FMA.
        #[target_feature(enable = "fma")]
        unsafe fn with_fma(row: &mut [f32], hd: usize, cs: &[(f32, f32)], style: RopeStyle) {
            rotate::<true>(row, hd, cs, style)
        }
        // SAFETY: the level's CPU features include FMA (checked).
        return unsafe { with_fma(row, hd, cs, style) };
    }
    let _ = level;
    rotate::<true>(row, hd, cs, style)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every level computes the same bits, and Ggml's are the fused
    /// expressions (which differ from the rounded products somewhere).
    #[test]
    fn fused_rotation_is_the_same_on_every_level() {
        let mut s = 0x2545_f491_4f6c_dd1du64;
        let x: Vec<f32> = (0..3 * 2 * 96)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 40) as f32 / (1u64 << 22) as f32 - 2.0
            })
            .collect();
        for style in [RopeStyle::Norm, RopeStyle::Neox] {
            let p = RopeParams {
                style,
                head_dim: 96,
                n_rot: 64,
                base: 10_000.0,
                freq_scale: 1.0,
            };
            let mut want = x.clone();
            rope_at(SimdLevel::Scalar, &mut want, 192, &p, 7, CpuNumerics::Ggml);
            for level in SimdLevel::supported() {
                let mut got = x.clone();
                rope_at(level, &mut got, 192, &p, 7, CpuNumerics::Ggml);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{level} {style:?}");
            }
            let mut plain = x.clone();
            rope_at(
                SimdLevel::Scalar,
                &mut plain,
                192,
                &p,
                7,
                CpuNumerics::Reference,
            );
            assert_ne!(plain, want, "{style:?}");
            let close = plain
                .iter()
                .zip(&want)
                .all(|(a, b)| (a - b).abs() <= 1e-6 * (1.0 + a.abs()));
            assert!(close, "{style:?}");
        }
    }
}
