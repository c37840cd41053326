//! The output head shared by the architectures: final RMS norm of the
//! output rows, output projection in blocks of [`HEAD_BLOCK`] rows, optional
//! soft-capping, logits read back to the host.

use super::hparams::Hparams;
use super::step::Step;
use crate::ops::{Act, BackendError, Weight};
use crate::placement::Stage;

/// Rows of logits computed per output projection (the device logits buffer
/// is `[HEAD_BLOCK, n_vocab]`).
pub const HEAD_BLOCK: usize = 16;

/// Rows from which a projection is summed as one batch (ggml's tiled
/// kernel for K-quant weights); the head's last block has at least this
/// many rows when the batch has.
const HEAD_TILED_MIN: usize = 8;

/// Which rows of a batch get logits, and where they go on the host.
pub enum HeadOut<'o> {
    /// None (a prompt chunk before the last).
    Skip,
    /// The last row: `[n_vocab]`.
    Last(&'o mut [f32]),
    /// Every row: `[rows, n_vocab]`.
    All(&'o mut [f32]),
    /// The rows from index `r` on: `[rows - r, n_vocab]`.
    From(usize, &'o mut [f32]),
}

/// Logits of the chosen rows of `x` `[rows, n_embd]` (the last layer's
/// output, on any device): `result_norm` = rms_norm(x) · `norm`,
/// `result_output` = `result_norm` · `output`ᵀ (soft-capped if the model
/// says so).
pub fn run(
    step: &mut Step<'_>,
    x: Act,
    norm: Weight,
    output: Weight,
    hp: &Hparams,
    out: HeadOut<'_>,
) -> Result<(), BackendError> {
    let (rows, dst) = match out {
        HeadOut::Skip => return Ok(()),
        HeadOut::Last(d) => (x.rows_from(x.rows() - 1, 1), d),
        HeadOut::All(d) => (x, d),
        HeadOut::From(r, d) => (x.rows_from(r, x.rows() - r), d),
    };
    let rows = step.handoff(rows, Stage::Head)?;
    let n = rows.rows();
    let v = hp.n_vocab;
    assert_eq!(dst.len(), n * v, "head: host logits buffer");
    // xn: [n, n_embd] normed output rows; logits: [HEAD_BLOCK, n_vocab]
    let xn = step.scratch(Stage::Head, n).xb;
    let logits = step.logits();
    let mut cx = step.at(Stage::Head);
    cx.rms_norm(rows, Some(norm), hp.rms_eps, hp.n_embd, xn);
    cx.tap("result_norm", xn)?;
    for b in (0..n).step_by(HEAD_BLOCK) {
        // llama.cpp projects a batch's rows in one matmul, whose kernel
        // for K-quant weights changes at 8 rows (its tiled sums from 8
        // on): a last block of fewer than 8 rows of a batch of 8 or more
        // is widened back to 8, so that every row is summed as llama.cpp
        // sums it; the rows it shares with the block before come out the
        // same again.
        let (b, m) = match HEAD_BLOCK.min(n - b) {
            m if m < HEAD_TILED_MIN && n >= HEAD_TILED_MIN => (n - HEAD_TILED_MIN, HEAD_TILED_MIN),
            m => (b, m),
        };
        let l = logits.first(m);
        cx.matmul(output, xn.rows_from(b, m), l);
        if let Some(cap) = hp.final_softcap {
            cx.softcap(l, cap);
        }
        cx.read(l, &mut dst[b * v..(b + m) * v])?;
    }
    cx.tap_host("result_output", [n, v], dst);
    Ok(())
}
