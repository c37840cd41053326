//! Rotary position embedding, as ggml's CPU `rope` computes it (no YaRN).

use super::parallel::for_chunks_init;
use crate::ops::{RopeParams, RopeStyle};

/// Rotates every head of each `width`-element row of `x` in place; row `t`
/// is at position `pos0 + t`. See [`crate::ops::Ops::rope`] for the math.
///
/// Like ggml (`ggml_rope_cache_init`), the angles are computed in f32:
/// `theta_0 = p`, `theta_{i+1} = theta_i · base^(-2/n_rot)` (one `powf`, then
/// repeated multiplication), and `cosf`/`sinf` of `freq_scale · theta_i`.
///
/// # Panics
/// If `width` is not a multiple of `head_dim` or `n_rot` is odd or larger
/// than `head_dim`.
pub fn rope(x: &mut [f32], width: usize, p: &RopeParams, pos0: usize) {
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
            for head in row.chunks_exact_mut(hd) {
                for (i, &(c, s)) in cs.iter().enumerate() {
                    let (a, b) = match p.style {
                        RopeStyle::Norm => (2 * i, 2 * i + 1),
                        RopeStyle::Neox => (i, i + half),
                    };
                    let (x0, x1) = (head[a], head[b]);
                    head[a] = x0 * c - x1 * s;
                    head[b] = x0 * s + x1 * c;
                }
            }
        },
    );
}
