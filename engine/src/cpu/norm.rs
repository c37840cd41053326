//! RMS normalisation, as ggml's CPU `rms_norm` (+ `mul`) computes it.

use super::parallel::for_chunks;

/// Normalises each `group`-element piece of `x` in place:
/// `y = (x * scale) * w` with `scale = 1 / sqrtf(mean + eps)`, where
/// `mean = (Σ x²) / group` is accumulated in f64 from f32 squares and
/// rounded to f32 before `eps` is added (ggml's `ggml_compute_forward_rms_norm_f32`).
///
/// # Panics
/// If `x.len()` is not a multiple of `group`, or `w` is not `group` long.
pub fn rms_norm(x: &mut [f32], group: usize, w: Option<&[f32]>, eps: f32) {
    assert!(
        group > 0 && x.len().is_multiple_of(group),
        "rms_norm: {} elements in groups of {group}",
        x.len()
    );
    if let Some(w) = w {
        assert_eq!(w.len(), group, "rms_norm: weight length");
    }
    for_chunks(x, group, x.len(), |_, g| {
        let sum: f64 = g.iter().map(|&v| f64::from(v * v)).sum();
        let mean = (sum / group as f64) as f32;
        let scale = 1.0f32 / (mean + eps).sqrt();
        match w {
            Some(w) => g
                .iter_mut()
                .zip(w)
                .for_each(|(v, &w)| *v = (*v * scale) * w),
            None => g.iter_mut().for_each(|v| *v *= scale),
        }
    });
}
