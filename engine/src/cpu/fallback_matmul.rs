//! The stand-in matrix multiplication: dequantize a weight row to f32, dot
//! it with every activation row. Correct for every type `quant` can
//! dequantize; slow next to integer kernels that quantize the activations
//! (`cpu::matmul`, which will replace this in [`super::CpuBackend`]).

use super::parallel::for_chunks_init;
use crate::ops::WeightSource;
use crate::quant::dequantize_row;

/// Weight rows per parallel task.
const ROWS_PER_TASK: usize = 16;

/// `Σ a[i] · b[i]` in f32, over 16 independent partial sums (so that the
/// compiler can vectorise it), reduced pairwise.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot: lengths");
    let mut acc = [0.0f32; 16];
    let (ac, bc) = (a.chunks_exact(16), b.chunks_exact(16));
    let tail: f32 = ac
        .remainder()
        .iter()
        .zip(bc.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ac.zip(bc) {
        for ((s, &x), &y) in acc.iter_mut().zip(x).zip(y) {
            *s += x * y;
        }
    }
    let mut w = 16;
    while w > 1 {
        w /= 2;
        let (lo, hi) = acc[..2 * w].split_at_mut(w);
        lo.iter_mut().zip(&*hi).for_each(|(a, &b)| *a += b);
    }
    acc[0] + tail
}

/// `out[t, r] = Σ_c W[r, c] · x[t, c]`: `x` `[n_tok, n_in]`, `out` `[n_tok,
/// n_out]`. `tmp` is scratch of at least `n_out · n_tok` elements when
/// `n_tok > 1` (the product is built transposed, one weight row at a time,
/// then transposed into `out`).
///
/// # Panics
/// On inconsistent lengths, or a weight type `quant` cannot dequantize
/// (the backend checks that at upload).
pub fn matmul_fallback(w: &WeightSource, x: &[f32], out: &mut [f32], tmp: &mut [f32]) {
    let (n_in, n_out) = (w.n_in(), w.n_out());
    let n_tok = x.len() / n_in;
    assert!(
        x.len() == n_tok * n_in && out.len() == n_tok * n_out,
        "matmul {w:?}: x has {} elements, out {}",
        x.len(),
        out.len()
    );
    let work = n_tok * n_in * n_out;
    let init = || vec![0.0f32; n_in];
    let dequant = |row: &mut Vec<f32>, r: usize| {
        dequantize_row(w.ty(), w.row(r), row).unwrap_or_else(|e| panic!("matmul {w:?}: {e}"));
    };
    if n_tok == 1 {
        for_chunks_init(out, ROWS_PER_TASK, work, init, |row, i, o| {
            for (k, o) in o.iter_mut().enumerate() {
                dequant(row, i * ROWS_PER_TASK + k);
                *o = dot(row, x);
            }
        });
        return;
    }
    // tmp: [n_out, n_tok], the product transposed.
    let tmp = &mut tmp[..n_out * n_tok];
    for_chunks_init(tmp, ROWS_PER_TASK * n_tok, work, init, |row, i, o| {
        for (k, o) in o.chunks_exact_mut(n_tok).enumerate() {
            dequant(row, i * ROWS_PER_TASK + k);
            for (t, o) in o.iter_mut().enumerate() {
                *o = dot(row, &x[t * n_in..(t + 1) * n_in]);
            }
        }
    });
    let tmp = &*tmp;
    super::parallel::for_chunks(out, n_out, n_tok * n_out, |t, o| {
        for (r, o) in o.iter_mut().enumerate() {
            *o = tmp[r * n_tok + t];
        }
    });
}
