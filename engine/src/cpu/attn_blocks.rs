//! ggml's attention ([`super::attention`]'s `CpuNumerics::Ggml`) for a batch
//! of rows, several query rows of a head at a time: the rows of a block
//! meet each pass of [`KEY_PASS`] cached positions in turn, for their
//! scores and again for their weighted sums of V, so that a head's keys
//! and values are read from memory once per block instead of once per
//! row (at depth a head's cache outgrows the core's caches). Every score
//! is the same dot product as one row alone computes, and a weighted sum
//! taken in consecutive runs of positions has the bits of one run
//! (`ggml::weighted_add`): the same bits as row by row.

use super::attn_kernels;
use super::ggml::{self, Dot, Lanes};
use super::kv::{round_f16, KvStore};
use super::parallel::for_chunks_init;
use crate::ops::AttnParams;
use crate::simd::SimdLevel;

/// Query rows of one head computed together.
const ROW_BLOCK: usize = 8;

/// Cached positions a block's rows take in turn: 64 K or V rows of a head
/// of 64 f32 are 16 KiB, in L1 while the block's rows use them.
const KEY_PASS: usize = 64;

/// How a batch's products round (see [`super::attention`]'s module docs).
#[derive(Clone, Copy)]
pub(super) struct Products {
    pub level: SimdLevel,
    pub kq_dot: Dot,
    pub kqv_lanes: Lanes,
}

/// One row of a block: its visible positions `first..=pos`, the first of
/// its 8-position score blocks `a0`, the scores (then probabilities) of
/// those blocks, its query head (rounded to f16 for an F16 cache), the
/// lanes of its weighted sum `[lanes, head_dim_v]`.
#[derive(Default)]
struct RowState {
    first: usize,
    pos: usize,
    a0: usize,
    scores: Vec<f32>,
    q: Vec<f32>,
    acc: Vec<f32>,
}

/// Attention of `q` `[T, n_head · head_dim_k]` (T >= 2 rows at positions
/// `pos0..`) into `out` `[T, n_head · head_dim_v]`, in blocks of
/// [`ROW_BLOCK`] rows of one head, with ggml's products `how`.
pub(super) fn attention(
    kv: &KvStore,
    q: &[f32],
    out: &mut [f32],
    pos0: usize,
    p: &AttnParams,
    how: Products,
) {
    let (nh, nkv, dk, dv) = (p.n_head, p.n_kv_head, p.head_dim_k, p.head_dim_v);
    let n_rows = q.len() / (nh * dk);
    let group = nh / nkv;
    let nb = n_rows.div_ceil(ROW_BLOCK);
    let work = n_rows * nh * (pos0 + n_rows) * (dk + dv);
    // The blocks' outputs, head by head: [n_head, nb, ROW_BLOCK, dv].
    let mut blocks = vec![0.0f32; nh * nb * ROW_BLOCK * dv];
    for_chunks_init(
        &mut blocks,
        ROW_BLOCK * dv,
        work,
        Vec::<RowState>::new,
        |rows, i, o| {
            let (h, b) = (i / nb, i % nb);
            let (t0, t1) = (b * ROW_BLOCK, ((b + 1) * ROW_BLOCK).min(n_rows));
            block(kv, q, pos0, p, how, (h / group, h), (t0, t1), rows, o);
        },
    );
    for t in 0..n_rows {
        for h in 0..nh {
            let at = ((h * nb + t / ROW_BLOCK) * ROW_BLOCK + t % ROW_BLOCK) * dv;
            out[(t * nh + h) * dv..][..dv].copy_from_slice(&blocks[at..at + dv]);
        }
    }
}

/// Rows `t0..t1` of head `h` (KV head `g`) into `o` `[ROW_BLOCK, dv]`.
#[allow(clippy::too_many_arguments)]
fn block(
    kv: &KvStore,
    q: &[f32],
    pos0: usize,
    p: &AttnParams,
    how: Products,
    (g, h): (usize, usize),
    (t0, t1): (usize, usize),
    rows: &mut Vec<RowState>,
    o: &mut [f32],
) {
    let (nh, dk, dv) = (p.n_head, p.head_dim_k, p.head_dim_v);
    let level = how.level;
    rows.resize_with(ROW_BLOCK, RowState::default);
    let rows = &mut rows[..t1 - t0];
    for (k, r) in rows.iter_mut().enumerate() {
        let t = t0 + k;
        r.pos = pos0 + t;
        r.first = p.window.map_or(0, |w| (r.pos + 1).saturating_sub(w));
        r.a0 = r.first / 8 * 8;
        // Scores of the 8-position blocks from `first & !7` to past `pos`;
        // those outside `first..=pos` stay -inf (masked).
        r.scores.clear();
        r.scores
            .resize((r.pos + 1).next_multiple_of(8) - r.a0, f32::NEG_INFINITY);
        r.q.clear();
        r.q.extend_from_slice(&q[(t * nh + h) * dk..][..dk]);
        if kv.is_f16() {
            round_f16(&mut r.q);
        }
        r.acc.clear();
        r.acc.resize(how.kqv_lanes.count() * dv, 0.0);
    }
    let lo = rows.iter().map(|r| r.first).min().unwrap_or(0);
    let hi = rows.iter().map(|r| r.pos + 1).max().unwrap_or(0);
    // Each row's part of a pass: positions r0..r1.
    let part = |r: &RowState, c0: usize| {
        let r0 = c0.max(r.first);
        let r1 = (c0 + KEY_PASS).min(r.pos + 1);
        (r0 < r1).then_some((r0, r1))
    };
    for c0 in (lo..hi).step_by(KEY_PASS) {
        for r in rows.iter_mut() {
            if let Some((r0, r1)) = part(r, c0) {
                let s = &mut r.scores[r0 - r.a0..r1 - r.a0];
                ggml::dots(
                    level,
                    how.kq_dot,
                    &r.q,
                    kv.k_run(r0, r1 - r0, g * dk, dk),
                    s,
                );
            }
        }
    }
    for r in rows.iter_mut() {
        let vis = r.first - r.a0..r.pos + 1 - r.a0;
        let s = &mut r.scores[vis.clone()];
        attn_kernels::scale_and_cap(s, p);
        let max = super::attn_kernels::max(level, s);
        let inv = (1.0 / ggml::soft_max(level, &mut r.scores, max)) as f32;
        let s = &mut r.scores[vis];
        s.iter_mut().for_each(|s| *s *= inv);
        if kv.is_f16() {
            round_f16(s);
        }
    }
    for c0 in (lo..hi).step_by(KEY_PASS) {
        for r in rows.iter_mut() {
            if let Some((r0, r1)) = part(r, c0) {
                let w = &r.scores[r0 - r.a0..r1 - r.a0];
                let v = kv.v_run(r0, r1 - r0, g * dv, dv);
                ggml::weighted_add(level, how.kqv_lanes, w, r0, v, &mut r.acc);
            }
        }
    }
    for (r, o) in rows.iter().zip(o.chunks_exact_mut(dv)) {
        ggml::weighted_finish(level, how.kqv_lanes, &r.acc, o);
    }
}
