//! The matrix ops: [`matvec`] (decode), [`matmul`] (prefill) and
//! [`embedding_row`] (an embedding lookup).
//!
//! Both products quantize the activations once to the weight type's partner
//! format, then split the weight rows into contiguous chunks, one task each
//! on the [`Threads`] team. A task walks its rows against the activation
//! rows in tiles through the kernels' register-blocked micro-kernels, so a
//! chunk of weights sized to stay in cache meets every token before the
//! next chunk is read. Each output element is one kernel dot, computed
//! once, by one thread: the result is the same for any thread count, and
//! `matmul` over `n` tokens gives exactly what `matvec` gives token by
//! token, except where ggml changes kernels with the batch: a K-quant
//! weight times 8 or more rows takes ggml's tiled kernel
//! ([`super::dot::tiled`]), as llama.cpp's CPU backend does.
//!
//! A decode step makes a few hundred small products of 5-100 us each; the
//! team's workers spin between them, so each starts without a wake-up.

use half::f16;

use crate::quant;
use crate::GgmlType;

use super::act::quantize_act;
use super::dot::{self, Kernels, Rows, Tile};
use super::error::CpuError;
use super::ggml::{self, Dot};
use super::kv::{Row, Run};
use super::weight::WeightView;
use crate::threads::Threads;

/// Weight bytes a prefill task aims to keep in cache (the L1 data cache of
/// current x86 cores is 32-48 KiB).
const PREFILL_CHUNK_BYTES: usize = 32 * 1024;
/// Tokens a prefill task dots per pass over its weight chunk (bounds the
/// task's output buffer).
const PREFILL_TOKENS: usize = 64;
/// Activation rows a task quantizes.
const ACT_ROWS: usize = 4;

/// `y = W x` for one activation vector: `x` has `w.cols()` elements, `y`
/// receives `w.rows()`.
pub fn matvec(
    threads: &Threads,
    w: WeightView<'_>,
    x: &[f32],
    y: &mut [f32],
) -> Result<(), CpuError> {
    check_len("matvec input", w.cols(), x.len())?;
    check_len("matvec output", w.rows(), y.len())?;
    matmul(threads, w, x, y)
}

/// `Y = X W^T` for `n` activation rows: `x` is `[n, w.cols()]` and `y`
/// receives `[n, w.rows()]`, row-major. Row `t` of `y` is bit for bit what
/// [`matvec`] gives for row `t` of `x`, except, as in ggml, for a K-quant
/// weight and 8 or more rows: each element is then ggml's tiled kernel's
/// ([`dot::tiled`]), still the same for any thread count or tiling.
pub fn matmul(
    threads: &Threads,
    w: WeightView<'_>,
    x: &[f32],
    y: &mut [f32],
) -> Result<(), CpuError> {
    let (rows, cols) = (w.rows(), w.cols());
    let kern = Kernels::for_level(w.ty(), threads.simd())?;
    // With no columns the token count shows only in the output.
    let n = x
        .len()
        .checked_div(cols)
        .or(y.len().checked_div(rows))
        .unwrap_or(0);
    if cols > 0 && x.len() != n * cols {
        return Err(CpuError::NotMultiple {
            what: "matmul input",
            multiple_of: cols,
            actual: x.len(),
        });
    }
    check_len("matmul input", n * cols, x.len())?;
    check_len("matmul output", n * rows, y.len())?;
    if n == 0 || rows == 0 {
        return Ok(());
    }
    if cols == 0 {
        y.fill(0.0);
        return Ok(());
    }

    // The activations, once, in the partner format, four rows a task. (A
    // row is never empty: `cols` is a whole number of weight blocks, and
    // the partner's block divides the weight's.)
    let act_row = cols / kern.act.block_elems() * kern.act.block_bytes();
    let mut act = vec![0u8; n * act_row];
    let first_error = std::sync::Mutex::new(None);
    threads.for_chunks(&mut act, ACT_ROWS * act_row, |i, rows| {
        for (j, a) in rows.chunks_mut(act_row).enumerate() {
            let t = i * ACT_ROWS + j;
            if let Err(e) = quantize_act(kern.act, &x[t * cols..(t + 1) * cols], a) {
                first_error
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .get_or_insert(e);
            }
        }
    });
    if let Some(e) = first_error
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
    {
        return Err(e);
    }

    let n_blocks = cols / w.ty().block_elems();
    // ggml's tiled kernel for a K-quant weight and 8 or more rows.
    let tiled = n >= dot::tiled::MIN_ROWS && dot::tiled::takes(w.ty());
    let chunk = rows_per_task(rows, w.row_bytes(), n, threads.count());
    let tile = |r0: usize, r1: usize, t0: usize, t1: usize, out: &mut [f32], ld: usize| {
        let rb = w.row_bytes();
        let wr = Rows {
            data: &w.data()[r0 * rb..r1 * rb],
            stride: rb,
            count: r1 - r0,
        };
        let ar = Rows {
            data: &act[t0 * act_row..t1 * act_row],
            stride: act_row,
            count: t1 - t0,
        };
        kern.tile(&Tile::new(&kern, wr, ar, n_blocks), out, ld);
    };

    if n == 1 {
        threads.for_chunks(y, chunk, |i, y| {
            let r0 = i * chunk;
            tile(r0, r0 + y.len(), 0, 1, y, y.len());
        });
        return Ok(());
    }

    let out = OutPtr(y.as_mut_ptr());
    let out = &out;
    threads.run(rows.div_ceil(chunk), |i| {
        let (r0, r1) = (i * chunk, ((i + 1) * chunk).min(rows));
        let m = r1 - r0;
        let mut buf = vec![0.0f32; m * PREFILL_TOKENS.min(n)];
        // The tiled kernel's weights, decoded once for every token group.
        let decoded = tiled.then(|| {
            let rb = w.row_bytes();
            let wr = Rows {
                data: &w.data()[r0 * rb..r1 * rb],
                stride: rb,
                count: m,
            };
            dot::tiled::DecodedRows::new(w.ty(), wr, n_blocks)
        });
        for t0 in (0..n).step_by(PREFILL_TOKENS) {
            let t1 = (t0 + PREFILL_TOKENS).min(n);
            match &decoded {
                Some(dec) => {
                    let ar = Rows {
                        data: &act[t0 * act_row..t1 * act_row],
                        stride: act_row,
                        count: t1 - t0,
                    };
                    dec.tile(kern.level, ar, &mut buf, m);
                }
                None => tile(r0, r1, t0, t1, &mut buf, m),
            }
            for t in t0..t1 {
                let src = &buf[(t - t0) * m..(t - t0 + 1) * m];
                // SAFETY: `y` holds `n * rows` floats (checked above), so
                // `t * rows + r0 .. t * rows + r1` is in bounds; the tasks
                // own disjoint row ranges `r0..r1`, so no two threads
                // write the same element, and nothing reads `y` until
                // `run` returns.
                unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), out.0.add(t * rows + r0), m) };
            }
        }
    });
    Ok(())
}

/// `Y = X W^T` as ggml's CPU backend computes the product of an F32 or F16
/// weight with 2 or more activation rows: llamafile's tinyBLAS
/// ([`ggml::tinyblas_dot`]: 8 FMA lanes over the inner dimension, then
/// [`ggml::hsum8`]), the activations rounded to f16 for an F16 weight.
/// Returns false, writing nothing, where ggml would not take tinyBLAS
/// (another type, one row, `w.rows()` not a multiple of 4): [`matmul`]'s
/// `ggml_vec_dot` is then ggml's product.
pub(crate) fn matmul_tinyblas(
    threads: &Threads,
    w: WeightView<'_>,
    x: &[f32],
    y: &mut [f32],
) -> Result<bool, CpuError> {
    let (rows, cols) = (w.rows(), w.cols());
    let ty = w.ty();
    if !matches!(ty, GgmlType::F32 | GgmlType::F16) || cols == 0 || !rows.is_multiple_of(4) {
        return Ok(false);
    }
    let n = x.len() / cols;
    if n < 2 {
        return Ok(false);
    }
    check_len("matmul input", n * cols, x.len())?;
    check_len("matmul output", n * rows, y.len())?;
    // The activations as ggml converts them for the weight's type.
    let xh: Vec<f32>;
    let x = match ty {
        GgmlType::F16 => {
            xh = x.iter().map(|&v| f16::from_f32(v).to_f32()).collect();
            &xh[..]
        }
        _ => x,
    };
    let wf32: Vec<f32>;
    let wf16: Vec<f16>;
    let data = w.data();
    let weights = match ty {
        GgmlType::F32 => {
            // SAFETY: every bit pattern is an f32; `align_to` returns the
            // aligned middle only.
            match unsafe { data.align_to::<f32>() } {
                ([], mid, []) => Row::F32(mid),
                _ => {
                    wf32 = data
                        .chunks_exact(4)
                        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                        .collect();
                    Row::F32(&wf32)
                }
            }
        }
        _ => {
            // SAFETY: as above, for f16 (16 bits, any pattern a value).
            match unsafe { data.align_to::<f16>() } {
                ([], mid, []) => Row::F16(mid),
                _ => {
                    wf16 = data
                        .chunks_exact(2)
                        .map(|b| f16::from_le_bytes([b[0], b[1]]))
                        .collect();
                    Row::F16(&wf16)
                }
            }
        }
    };
    let level = threads.simd();
    let chunk = rows_per_task(rows, w.row_bytes(), n, threads.count());
    let out = OutPtr(y.as_mut_ptr());
    let out = &out;
    threads.run(rows.div_ceil(chunk), |i| {
        let (r0, r1) = (i * chunk, ((i + 1) * chunk).min(rows));
        let m = r1 - r0;
        let run = Run {
            rows: match weights {
                Row::F32(d) => Row::F32(&d[r0 * cols..r1 * cols]),
                Row::F16(d) => Row::F16(&d[r0 * cols..r1 * cols]),
            },
            stride: cols,
            len: cols,
            count: m,
        };
        let mut buf = vec![0.0f32; m];
        for t in 0..n {
            ggml::dots(
                level,
                Dot::Tiny,
                &x[t * cols..(t + 1) * cols],
                run,
                &mut buf,
            );
            // SAFETY: as in `matmul`: `t * rows + r0 .. t * rows + r1` is
            // inside `y`, and the tasks own disjoint row ranges.
            unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), out.0.add(t * rows + r0), m) };
        }
    });
    Ok(true)
}

/// Row `row` of `w` dequantized into `out` (`w.cols()` elements): the
/// embedding lookup.
pub fn embedding_row(w: WeightView<'_>, row: usize, out: &mut [f32]) -> Result<(), CpuError> {
    let src = w.row(row).ok_or(CpuError::RowOutOfRange {
        row,
        rows: w.rows(),
    })?;
    check_len("embedding row", w.cols(), out.len())?;
    quant::dequantize_row(w.ty(), src, out).map_err(|_| CpuError::NoKernels(w.ty()))
}

/// The output of a prefill product, written by the tasks at disjoint rows.
struct OutPtr(*mut f32);
// SAFETY: the pointer is only written through, at element ranges that one
// task owns (see the write in `matmul`), while the slice it came from is
// borrowed mutably for the whole parallel section.
unsafe impl Sync for OutPtr {}

fn check_len(what: &'static str, expected: usize, actual: usize) -> Result<(), CpuError> {
    if expected != actual {
        return Err(CpuError::Length {
            what,
            expected,
            actual,
        });
    }
    Ok(())
}

/// Rows per task. Decode reads each weight once, as one contiguous range
/// per thread: the kernels prefetch 16 KiB ahead within a task, so a
/// thread that walks short chunks meets the start of each unprefetched
/// (2 threads on SmolLM2: 8 chunks of 80 rows per matrix decoded 23% slower
/// than 2 of 288). Prefill sizes a task's weights to stay in cache while it
/// meets every token.
fn rows_per_task(rows: usize, row_bytes: usize, n: usize, threads: usize) -> usize {
    if n == 1 {
        // The kernels' row block is 4.
        return (rows.div_ceil(threads.max(1)).div_ceil(4) * 4).max(4);
    }
    let round = |r: usize| r.div_ceil(16) * 16;
    let balanced = round(rows.div_ceil(4 * threads)).max(16);
    let cached = round((PREFILL_CHUNK_BYTES / row_bytes.max(1)).max(16));
    cached.min(balanced)
}
