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
//! token.
//!
//! A decode step makes a few hundred small products of 5-100 us each; the
//! team's workers spin between them, so each starts without a wake-up.

use crate::quant;

use super::act::quantize_act;
use super::dot::{Kernels, Rows, Tile};
use super::error::CpuError;
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
/// [`matvec`] gives for row `t` of `x`.
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
        for t0 in (0..n).step_by(PREFILL_TOKENS) {
            let t1 = (t0 + PREFILL_TOKENS).min(n);
            tile(r0, r1, t0, t1, &mut buf, m);
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
