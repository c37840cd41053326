//! Causal (optionally sliding-window) grouped-query attention over a KV
//! cache, f32 throughout, softmax sum in f64. With an F16 cache, as
//! llama.cpp's CPU computes it: the query rounded to f16 before `K·q`, the
//! probabilities rounded to f16 before `V·p` (its matmuls with an F16
//! tensor convert the other operand to F16).
//!
//! [`CpuNumerics::Ggml`] computes what llama.cpp's CPU backend computes
//! without flash attention, bit for bit ([`super::ggml`]), for a batch of
//! `T` rows at positions `pos0..pos0 + T`:
//!
//! - `kq`: each score by `ggml_vec_dot_f32` (F32 cache) or
//!   `ggml_vec_dot_f16` (F16), except where ggml's matrix product hands the
//!   batch to tinyBLAS: `T >= 2` with an F16 cache (the query converted to
//!   F16 is a contiguous operand) or with one query head (the permuted
//!   query is contiguous then).
//! - softmax: `s · scale`, the max, `exp(s - max)` by ggml's vector exp
//!   over 8-position blocks aligned on position 0 (positions masked or
//!   outside the window are `exp(-inf) = 0`), each block's sum ([`hsum8`])
//!   added to an f64 sum, then `p · (1 / sum)` with the reciprocal rounded
//!   to f32. llama.cpp pads the cache view to 256 positions; the padding
//!   only adds blocks of zeros.
//! - `kqv`: by tinyBLAS (8 lanes by position) for `T >= 2` and a V head
//!   dimension that is a multiple of 4, otherwise by `ggml_vec_dot` over
//!   the padded positions (32 lanes by position, no leftovers).
//!
//! [`hsum8`]: super::ggml::hsum8

use super::attn_blocks;
use super::attn_kernels;
use super::ggml::{self, Dot, Lanes};
use super::kv::{round_f16, KvStore};
use super::parallel::for_chunks_init_by_column;
use super::CpuNumerics;
use crate::ops::AttnParams;
use crate::simd::SimdLevel;

/// Attention of `q` `[T, n_head · head_dim_k]` against cache positions
/// `0..pos0 + T` of `kv` (which must already hold this batch's K and V),
/// into `out` `[T, n_head · head_dim_v]`. See [`crate::ops::Ops::attention`].
///
/// Work is split over (row, head) pairs, taken head by head; each pair is
/// computed start to end by one thread. `numerics` says how it rounds (see the module docs).
pub fn attention(
    kv: &KvStore,
    q: &[f32],
    out: &mut [f32],
    pos0: usize,
    p: &AttnParams,
    numerics: CpuNumerics,
) {
    let (nh, nkv, dk, dv) = (p.n_head, p.n_kv_head, p.head_dim_k, p.head_dim_v);
    assert!(
        nkv > 0 && nh % nkv == 0 && kv.k_width() == nkv * dk && kv.v_width() == nkv * dv,
        "attention: {nh} heads over {nkv} KV heads of {dk}/{dv} with cache widths {}/{}",
        kv.k_width(),
        kv.v_width()
    );
    let n_rows = q.len() / (nh * dk);
    assert!(
        q.len() == n_rows * nh * dk && out.len() == n_rows * nh * dv && pos0 + n_rows <= kv.n_ctx(),
        "attention: q {} / out {} elements for {n_rows} rows at {pos0} (context {})",
        q.len(),
        out.len(),
        kv.n_ctx()
    );
    let group = nh / nkv;
    let level = SimdLevel::detected();
    let work = n_rows * nh * (pos0 + n_rows) * (dk + dv);
    // ggml's products for a batch of this many rows (see the module docs).
    let batch = n_rows >= 2;
    let kq_dot = match (kv.is_f16(), batch && (kv.is_f16() || nh == 1)) {
        (_, true) => Dot::Tiny,
        (false, false) => Dot::VecF32,
        (true, false) => Dot::VecF16,
    };
    let kqv_lanes = match batch && dv % 4 == 0 {
        true => Lanes::Tiny,
        false => Lanes::Vec,
    };
    if numerics == CpuNumerics::Ggml && batch {
        let how = attn_blocks::Products {
            level,
            kq_dot,
            kqv_lanes,
        };
        return attn_blocks::attention(kv, q, out, pos0, p, how);
    }
    // Head by head: the rows of one head, taken one after the other, meet
    // the same cached keys and values while they are in cache.
    for_chunks_init_by_column(
        out,
        dv,
        nh,
        work,
        || Scratch {
            scores: Vec::with_capacity(pos0 + n_rows + 16),
            q: Vec::with_capacity(dk),
            acc: Vec::new(),
        },
        |sc: &mut Scratch, i, o| {
            let Scratch {
                scores,
                q: q16,
                acc,
            } = sc;
            let (t, h) = (i / nh, i % nh);
            let g = h / group;
            let pos = pos0 + t;
            let first = match p.window {
                Some(w) => (pos + 1).saturating_sub(w),
                None => 0,
            };
            let mut qh = &q[(t * nh + h) * dk..(t * nh + h + 1) * dk];
            if kv.is_f16() {
                q16.clear();
                q16.extend_from_slice(qh);
                round_f16(q16);
                qh = q16.as_slice();
            }
            let n = pos + 1 - first;
            if numerics == CpuNumerics::Ggml {
                // Scores of the 8-position blocks from `first & !7` to past
                // `pos`; those outside `first..=pos` stay -inf (masked).
                let a0 = first / 8 * 8;
                scores.clear();
                scores.resize((pos + 1).next_multiple_of(8) - a0, f32::NEG_INFINITY);
                let vis = first - a0..pos + 1 - a0;
                let s = &mut scores[vis.clone()];
                ggml::dots(level, kq_dot, qh, kv.k_run(first, n, g * dk, dk), s);
                attn_kernels::scale_and_cap(s, p);
                let max = attn_kernels::max(level, s);
                let inv = (1.0 / ggml::soft_max(level, scores, max)) as f32;
                let s = &mut scores[vis];
                s.iter_mut().for_each(|s| *s *= inv);
                if kv.is_f16() {
                    round_f16(s);
                }
                let v = kv.v_run(first, n, g * dv, dv);
                ggml::weighted(level, kqv_lanes, s, first, v, acc, o);
                return;
            }
            scores.clear();
            scores.resize(n, 0.0);
            attn_kernels::scores(level, qh, kv.k_run(first, n, g * dk, dk), scores);
            attn_kernels::scale_and_cap(scores, p);
            let max = attn_kernels::max(level, scores);
            for s in scores.iter_mut() {
                *s = (*s - max).exp();
            }
            // Its own loop: beside the calls to exp the running sum would
            // live in memory.
            let mut sum = 0.0f64;
            for s in scores.iter() {
                sum += f64::from(*s);
            }
            let inv = (1.0 / sum) as f32;
            // The probabilities; rounded to f16 against an F16 V cache, as
            // llama.cpp's CPU multiplies them with it.
            for s in scores.iter_mut() {
                *s *= inv;
            }
            if kv.is_f16() {
                round_f16(scores);
            }
            attn_kernels::weighted_sum(level, scores, kv.v_run(first, n, g * dv, dv), o);
        },
    );
}

/// Per-thread buffers of [`attention`].
struct Scratch {
    /// Scores of one (row, head) `[positions]` (Ggml: of whole 8-position
    /// blocks).
    scores: Vec<f32>,
    /// The query head rounded to f16 `[head_dim_k]` (F16 cache only).
    q: Vec<f32>,
    /// Ggml: the lanes of the weighted sum of V `[lanes, head_dim_v]`.
    acc: Vec<f32>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::KvType;

    /// One query row of one head (dk 2, dv 1) against two cached positions.
    fn one_row(ty: KvType, q: [f32; 2], k: [[f32; 2]; 2], v: [f32; 2]) -> f32 {
        let p = AttnParams {
            n_head: 1,
            n_kv_head: 1,
            head_dim_k: 2,
            head_dim_v: 1,
            scale: 1.0,
            window: None,
            softcap: None,
        };
        let mut kv = KvStore::new(2, 2, 1, ty).unwrap();
        kv.write(0, &[k[0][0], k[0][1], k[1][0], k[1][1]], &v);
        let mut out = [0.0f32];
        attention(&kv, &q, &mut out, 1, &p, CpuNumerics::Ggml);
        out[0]
    }

    #[test]
    fn f16_cache_rounds_the_query_as_llama_cpp() {
        // 3000.5 is no half (halves are 2 apart there): rounded, the two
        // scores tie at 3000 and the output is the mean of V, 0.5 (exact in
        // f16); kept in f32, the first key would win by 0.5 (0.622).
        let (q, k, v) = ([3000.5, 3000.0], [[1.0, 0.0], [0.0, 1.0]], [1.0, 0.0]);
        assert_eq!(one_row(KvType::F16, q, k, v), 0.5);
        let f32_out = one_row(KvType::F32, q, k, v);
        assert!((f32_out - 0.622_459_3).abs() < 1e-6, "{f32_out}");
    }

    #[test]
    fn f16_cache_rounds_the_probabilities_as_llama_cpp() {
        // Scores 1 and 0: p = 1 / (1 + e^-1) = 0.7310586 in f32, which the
        // product with an F16 V takes as the half 0.73095703125.
        let (q, k, v) = ([1.0, 0.0], [[1.0, 0.0], [0.0, 0.0]], [1.0, 0.0]);
        assert_eq!(one_row(KvType::F16, q, k, v), 0.730_957_03);
        let f32_out = one_row(KvType::F32, q, k, v);
        assert!((f32_out - 0.731_058_6).abs() < 1e-6, "{f32_out}");
    }
}
