//! The inner loops of CPU attention over a run of cached positions: the
//! scores of one query against K rows, and the probability-weighted sum of
//! V rows. Each has a scalar definition and an AVX2 version that computes
//! the same bits (tests below tie them).
//!
//! Scores: `s_j = Σ_i q[i] · k_j[i]` over sixteen partial sums (element `i`
//! of the first `len - len % 16` goes to sum `i % 16`, each product rounded
//! and then added), folded pairwise (`a[i] += a[i + w]` for w = 8, 4, 2, 1),
//! plus the products of the last `len % 16` elements summed in order. The
//! AVX2 version scores four keys at once, two 8-lane accumulators each, and
//! folds the four together in registers.
//!
//! Weighted sum: `o[d] += p_j · v_j[d]` (the product rounded, then added)
//! over the positions `j` in order, `o` starting at 0. The AVX2 version keeps
//! up to 64 outputs in registers over the whole run.
//!
//! Max: the largest value that is not NaN, -inf when there is none (a
//! fold with `f32::max` from -inf), up to the sign of a zero result (the
//! softmax subtracts it, and `x - 0` and `x - (-0)` are the same number).
//! The AVX2 version keeps 32 running maxima; `max_ps(x, m)` returns `m`
//! when `x` is NaN, which is the fold's rule.
//!
//! An F16 run is widened element by element (exact); the caller rounds the
//! query and the probabilities to f16 where llama.cpp does.
//!
//! Scale and cap: the scores times the attention's scale, then soft-capped
//! (`tanh(s / cap) · cap`) when it has a cap.

use super::kv::{Row, Run};
use crate::ops::AttnParams;
use crate::simd::SimdLevel;

/// `s · scale`, soft-capped if asked.
pub(super) fn scale_and_cap(scores: &mut [f32], p: &AttnParams) {
    for s in scores.iter_mut() {
        *s *= p.scale;
    }
    if let Some(cap) = p.softcap {
        for s in scores.iter_mut() {
            *s = (*s / cap).tanh() * cap;
        }
    }
}

/// The scores of `q` `[len]` against every row of `k` into `out` `[count]`.
///
/// # Panics
/// When the lengths disagree.
pub fn scores(level: SimdLevel, q: &[f32], k: Run<'_>, out: &mut [f32]) {
    assert!(
        q.len() == k.len && out.len() == k.count && k.fits(),
        "attention scores: query {} against rows of {}, {} scores for {} rows",
        q.len(),
        k.len,
        out.len(),
        k.count
    );
    #[cfg(target_arch = "x86_64")]
    if level >= SimdLevel::Avx2 && level.is_supported() {
        // SAFETY: the CPU has AVX2, FMA and F16C (checked), and the run's
        // rows lie inside its slice (`fits`), as the lengths above say.
        unsafe { x86::scores(q, k, out) };
        return;
    }
    let _ = level;
    for (r, s) in out.iter_mut().enumerate() {
        *s = score_scalar(q, |i| k.at(r, i));
    }
}

/// `out` `[len]` = the `p`-weighted sum of the rows of `v` (`p[j]` weighs row
/// `j`), in row order from 0.
///
/// # Panics
/// When the lengths disagree.
pub fn weighted_sum(level: SimdLevel, p: &[f32], v: Run<'_>, out: &mut [f32]) {
    assert!(
        p.len() == v.count && out.len() == v.len && v.fits(),
        "attention weighted sum: {} weights for {} rows, {} outputs for rows of {}",
        p.len(),
        v.count,
        out.len(),
        v.len
    );
    #[cfg(target_arch = "x86_64")]
    if level >= SimdLevel::Avx2 && level.is_supported() {
        // SAFETY: as in `scores`.
        unsafe { x86::weighted_sum(p, v, out) };
        return;
    }
    let _ = level;
    weighted_sum_scalar(p, v, out, 0);
}

/// One score by the definition: sixteen partial sums folded pairwise, plus
/// the tail.
#[inline]
/// The largest element of `x` that is not NaN, `-inf` when there is none
/// (see the module's note on zeros).
pub fn max(level: SimdLevel, x: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if level >= SimdLevel::Avx2 && level.is_supported() {
        // SAFETY: the CPU has AVX2 (checked).
        return unsafe { x86::max(x) };
    }
    let _ = level;
    max_scalar(x)
}

fn max_scalar(x: &[f32]) -> f32 {
    x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v))
}

fn score_scalar(q: &[f32], k: impl Fn(usize) -> f32) -> f32 {
    let n16 = q.len() - q.len() % 16;
    let mut acc = [0.0f32; 16];
    for (i, &x) in q[..n16].iter().enumerate() {
        acc[i % 16] += x * k(i);
    }
    let tail: f32 = (n16..q.len()).map(|i| q[i] * k(i)).sum();
    let mut w = 16;
    while w > 1 {
        w /= 2;
        for i in 0..w {
            acc[i] += acc[i + w];
        }
    }
    acc[0] + tail
}

/// The weighted sum by the definition, for outputs `from..`.
fn weighted_sum_scalar(p: &[f32], v: Run<'_>, out: &mut [f32], from: usize) {
    out[from..].fill(0.0);
    for (j, &w) in p.iter().enumerate() {
        for (d, o) in out.iter_mut().enumerate().skip(from) {
            *o += w * v.at(j, d);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{weighted_sum_scalar, Row, Run};
    use crate::cpu::elem8::Elem;

    /// The definition's fold of sixteen partial sums held as two vectors
    /// (sums 0-7 and 8-15) for each of four keys, as [k0, k2, k0, k2 | k1,
    /// k3, k1, k3]: a[i] + a[i + 8], then + [i + 4], + [i + 2], + [i + 1].
    #[inline(always)]
    unsafe fn fold4(lo: [__m256; 4], hi: [__m256; 4]) -> __m256 {
        // SAFETY: register arithmetic only (AVX, enabled by the caller).
        unsafe {
            let c: [__m256; 4] = std::array::from_fn(|k| _mm256_add_ps(lo[k], hi[k]));
            // w = 4: the low half plus the high half, two keys a vector.
            let r01 = _mm256_add_ps(
                _mm256_permute2f128_ps(c[0], c[1], 0x20),
                _mm256_permute2f128_ps(c[0], c[1], 0x31),
            );
            let r23 = _mm256_add_ps(
                _mm256_permute2f128_ps(c[2], c[3], 0x20),
                _mm256_permute2f128_ps(c[2], c[3], 0x31),
            );
            // w = 2: [d0 + d2, d1 + d3] of each key.
            let s = _mm256_shuffle_ps(r01, r23, 0b01_00_01_00);
            let t = _mm256_shuffle_ps(r01, r23, 0b11_10_11_10);
            let u = _mm256_add_ps(s, t);
            // w = 1: e0 + e1.
            _mm256_hadd_ps(u, u)
        }
    }

    /// The definition's fold of one key's sixteen partial sums (`lo`: sums
    /// 0-7, `hi`: 8-15), as a scalar.
    #[inline(always)]
    unsafe fn fold1(lo: __m256, hi: __m256) -> f32 {
        // SAFETY: register arithmetic only.
        unsafe {
            let c = _mm256_add_ps(lo, hi);
            let d = _mm_add_ps(_mm256_castps256_ps128(c), _mm256_extractf128_ps(c, 1));
            let e = _mm_add_ps(d, _mm_movehl_ps(d, d));
            _mm_cvtss_f32(_mm_add_ss(e, _mm_movehdup_ps(e)))
        }
    }

    #[inline(always)]
    unsafe fn scores_of<T: Elem>(q: &[f32], k: *const T, stride: usize, n: usize, out: &mut [f32]) {
        let len = q.len();
        let n16 = len - len % 16;
        let qp = q.as_ptr();
        // The last len % 16 products of row r, summed in order.
        let tail = |r: usize| -> f32 {
            (n16..len)
                .map(|i| {
                    // SAFETY: element i < len of row r < n is inside the run.
                    let kv = unsafe { T::at(k.add(r * stride + i)) };
                    q[i] * kv
                })
                .sum()
        };
        let mut r = 0;
        // SAFETY: rows r < n of `len` elements at `k + r * stride` lie
        // inside the run (the caller checked `fits`); q has `len`
        // elements; out has n.
        unsafe {
            while r + 4 <= n {
                let mut lo = [_mm256_setzero_ps(); 4];
                let mut hi = [_mm256_setzero_ps(); 4];
                let mut i = 0;
                while i < n16 {
                    let q0 = _mm256_loadu_ps(qp.add(i));
                    let q1 = _mm256_loadu_ps(qp.add(i + 8));
                    for c in 0..4 {
                        let row = k.add((r + c) * stride + i);
                        lo[c] = _mm256_add_ps(lo[c], _mm256_mul_ps(q0, T::load8(row)));
                        hi[c] = _mm256_add_ps(hi[c], _mm256_mul_ps(q1, T::load8(row.add(8))));
                    }
                    i += 16;
                }
                let mut f = [0.0f32; 8];
                _mm256_storeu_ps(f.as_mut_ptr(), fold4(lo, hi));
                for (c, &at) in [0usize, 4, 1, 5].iter().enumerate() {
                    out[r + c] = f[at] + tail(r + c);
                }
                r += 4;
            }
            while r < n {
                let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
                let mut i = 0;
                while i < n16 {
                    let row = k.add(r * stride + i);
                    lo =
                        _mm256_add_ps(lo, _mm256_mul_ps(_mm256_loadu_ps(qp.add(i)), T::load8(row)));
                    hi = _mm256_add_ps(
                        hi,
                        _mm256_mul_ps(_mm256_loadu_ps(qp.add(i + 8)), T::load8(row.add(8))),
                    );
                    i += 16;
                }
                out[r] = fold1(lo, hi) + tail(r);
                r += 1;
            }
        }
    }

    /// # Safety
    /// AVX2, FMA and F16C; `k`'s rows inside its slice; `q.len() == k.len`;
    /// `out.len() == k.count`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn scores(q: &[f32], k: Run<'_>, out: &mut [f32]) {
        // SAFETY: the caller's contract.
        unsafe {
            match k.rows {
                Row::F32(d) => scores_of(q, d.as_ptr(), k.stride, k.count, out),
                Row::F16(d) => scores_of(q, d.as_ptr(), k.stride, k.count, out),
            }
        }
    }

    /// Up to 64 outputs from `from` kept in registers over every row.
    #[inline(always)]
    unsafe fn chunk<T: Elem, const V: usize>(
        p: &[f32],
        v: *const T,
        stride: usize,
        out: &mut [f32],
        from: usize,
    ) {
        // SAFETY: rows j < p.len() at `v + j * stride` hold elements from..
        // from + 8 V (inside the run: the caller's bounds); out likewise.
        unsafe {
            let mut acc = [_mm256_setzero_ps(); V];
            for (j, &w) in p.iter().enumerate() {
                let wv = _mm256_set1_ps(w);
                let row = v.add(j * stride + from);
                for (m, a) in acc.iter_mut().enumerate() {
                    *a = _mm256_add_ps(*a, _mm256_mul_ps(wv, T::load8(row.add(8 * m))));
                }
            }
            for (m, a) in acc.iter().enumerate() {
                _mm256_storeu_ps(out.as_mut_ptr().add(from + 8 * m), *a);
            }
        }
    }

    #[inline(always)]
    unsafe fn weighted_sum_of<T: Elem>(
        p: &[f32],
        v: *const T,
        stride: usize,
        out: &mut [f32],
    ) -> usize {
        let len = out.len();
        let mut from = 0;
        // SAFETY: each chunk stays below `len & !7`, inside every row.
        unsafe {
            while from + 64 <= len {
                chunk::<T, 8>(p, v, stride, out, from);
                from += 64;
            }
            while from + 8 <= len {
                chunk::<T, 1>(p, v, stride, out, from);
                from += 8;
            }
        }
        from
    }

    /// # Safety
    /// AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn max(x: &[f32]) -> f32 {
        let body = x.len() / 32 * 32;
        // Four 8-lane maxima; `_mm256_max_ps(v, m)` is `m` where `v` is NaN.
        let mut m = [_mm256_set1_ps(f32::NEG_INFINITY); 4];
        for c in x[..body].chunks_exact(32) {
            for (j, m) in m.iter_mut().enumerate() {
                // SAFETY: `c` holds 32 floats, so 8 from `8 * j` are inside.
                let v = unsafe { _mm256_loadu_ps(c.as_ptr().add(8 * j)) };
                *m = _mm256_max_ps(v, *m);
            }
        }
        // No NaN in the maxima: they start at -inf and only take values.
        let m = _mm256_max_ps(_mm256_max_ps(m[0], m[1]), _mm256_max_ps(m[2], m[3]));
        let mut lanes = [0.0f32; 8];
        // SAFETY: `lanes` holds 8 floats.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), m) };
        let folded = lanes.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
        x[body..].iter().fold(folded, |a, &b| a.max(b))
    }

    /// # Safety
    /// AVX2, FMA and F16C; `v`'s rows inside its slice; `p.len() ==
    /// v.count`; `out.len() == v.len`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn weighted_sum(p: &[f32], v: Run<'_>, out: &mut [f32]) {
        // SAFETY: the caller's contract.
        let done = unsafe {
            match v.rows {
                Row::F32(d) => weighted_sum_of(p, d.as_ptr(), v.stride, out),
                Row::F16(d) => weighted_sum_of(p, d.as_ptr(), v.stride, out),
            }
        };
        // The last len % 8 outputs, by the definition (the same bits).
        if done < out.len() {
            weighted_sum_scalar(p, v, out, done);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::kv::fixture::{values, Rows};
    use super::*;

    /// Every level this CPU runs computes the scalar definition's bits, for
    /// F32 and F16 rows, over odd lengths and counts and padded strides.
    #[test]
    fn simd_levels_equal_the_scalar_definition() {
        let levels: Vec<SimdLevel> = SimdLevel::supported().collect();
        for (len, count, pad) in [
            (64, 1, 0),
            (64, 8, 3),
            (64, 23, 0),
            (128, 17, 5),
            (8, 9, 1),
            (24, 40, 0),
            (17, 5, 2),
            (256, 13, 0),
            (72, 70, 8),
        ] {
            let rows = Rows::new(len as u64 * 31 + count as u64, len, count, len + pad, 1.0);
            let q = values(7 + len as u64, len, 1.0);
            let p = values(11 + count as u64, count, 1.0);
            for f16_rows in [false, true] {
                let run = rows.run(f16_rows);
                let mut want_s = vec![0.0f32; count];
                scores(SimdLevel::Scalar, &q, run, &mut want_s);
                let mut want_o = vec![0.0f32; len];
                weighted_sum(SimdLevel::Scalar, &p, run, &mut want_o);
                // The definition, written out for one score and one output.
                let s0 = score_scalar(&q, |i| run.at(0, i));
                assert_eq!(want_s[0].to_bits(), s0.to_bits());
                let o0 = p
                    .iter()
                    .enumerate()
                    .fold(0.0f32, |o, (j, &w)| o + w * run.at(j, 0));
                assert_eq!(want_o[0].to_bits(), o0.to_bits());
                for &level in &levels {
                    let mut got = vec![f32::NAN; count];
                    scores(level, &q, run, &mut got);
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(&got),
                        bits(&want_s),
                        "scores {level} len {len} count {count} f16 {f16_rows}"
                    );
                    let mut got = vec![f32::NAN; len];
                    weighted_sum(level, &p, run, &mut got);
                    assert_eq!(
                        bits(&got),
                        bits(&want_o),
                        "weighted sum {level} len {len} count {count} f16 {f16_rows}"
                    );
                }
            }
        }
    }

    /// The max of every level is the fold's, NaNs and infinities included,
    /// over lengths around the 32-element body.
    #[test]
    fn max_equals_the_fold_on_every_level() {
        let levels: Vec<SimdLevel> = SimdLevel::supported().collect();
        for len in [0, 1, 7, 31, 32, 33, 64, 95, 257] {
            for case in 0..6u64 {
                let mut x = values(len as u64 * 13 + case, len, 1.0);
                match case {
                    1 => x.iter_mut().step_by(3).for_each(|v| *v = f32::NAN),
                    2 => x.iter_mut().for_each(|v| *v = f32::NAN),
                    3 => x.iter_mut().step_by(5).for_each(|v| *v = f32::INFINITY),
                    4 => x.iter_mut().for_each(|v| *v = f32::NEG_INFINITY),
                    5 => x.iter_mut().for_each(|v| *v = -v.abs() - 1.0),
                    _ => {}
                }
                if let Some(last) = x.last_mut() {
                    if case == 0 {
                        *last = 3.0; // the largest, in the tail or the body
                    }
                }
                let want = max_scalar(&x);
                for &level in &levels {
                    let got = max(level, &x);
                    assert!(
                        got == want || (got.is_nan() && want.is_nan()),
                        "{level} len {len} case {case}: {got} != {want}"
                    );
                    assert!(!got.is_nan(), "{level} len {len} case {case}: NaN");
                }
            }
        }
    }

    #[test]
    fn the_scores_are_dot_products() {
        let q = [1.0f32, 2.0, 3.0];
        let k = [1.0f32, 1.0, 1.0, 0.5, 0.0, -1.0];
        let run = Run {
            rows: Row::F32(&k),
            stride: 3,
            len: 3,
            count: 2,
        };
        let mut s = [0.0f32; 2];
        scores(SimdLevel::detected(), &q, run, &mut s);
        assert_eq!(s, [6.0, -2.5]);
        let mut o = [0.0f32; 3];
        weighted_sum(SimdLevel::detected(), &[0.5, 2.0], run, &mut o);
        assert_eq!(o, [1.5, 0.5, -1.5]);
    }
}
