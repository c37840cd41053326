//! The AVX2 + FMA versions of the kernels of [`super`], the same bits as
//! their scalar definitions.

use std::arch::x86_64::*;

use super::{f, leftovers, reduce_lanes_scalar, Dot, Lanes, Row, Run};
use crate::cpu::elem8::Elem;

/// `ggml_v_expf` on eight lanes (vec.h, AVX2 + FMA), line for line.
#[inline(always)]
pub(super) unsafe fn v_expf8(x: __m256) -> __m256 {
    // SAFETY: register arithmetic only (AVX2 and FMA, enabled by the
    // caller).
    unsafe {
        let r = _mm256_set1_ps(f(0x4b40_0000));
        let z = _mm256_fmadd_ps(x, _mm256_set1_ps(f(0x3fb8_aa3b)), r);
        let n = _mm256_sub_ps(z, r);
        let b = _mm256_fnmadd_ps(
            n,
            _mm256_set1_ps(f(0x35bf_be8e)),
            _mm256_fnmadd_ps(n, _mm256_set1_ps(f(0x3f31_7200)), x),
        );
        let e = _mm256_slli_epi32::<23>(_mm256_castps_si256(z));
        let k = _mm256_castsi256_ps(_mm256_add_epi32(
            e,
            _mm256_castps_si256(_mm256_set1_ps(1.0)),
        ));
        let abs_n = _mm256_andnot_ps(_mm256_set1_ps(-0.0), n);
        let c = _mm256_cmp_ps::<_CMP_GT_OQ>(abs_n, _mm256_set1_ps(126.0));
        let u = _mm256_mul_ps(b, b);
        let j = _mm256_fmadd_ps(
            _mm256_fmadd_ps(
                _mm256_fmadd_ps(
                    _mm256_set1_ps(f(0x3c07_2010)),
                    b,
                    _mm256_set1_ps(f(0x3d2b_9f17)),
                ),
                u,
                _mm256_fmadd_ps(
                    _mm256_set1_ps(f(0x3e2a_af33)),
                    b,
                    _mm256_set1_ps(f(0x3eff_fedb)),
                ),
            ),
            u,
            _mm256_mul_ps(_mm256_set1_ps(f(0x3f7f_fff6)), b),
        );
        if _mm256_movemask_ps(c) == 0 {
            return _mm256_fmadd_ps(j, k, k);
        }
        let g = _mm256_and_si256(
            _mm256_castps_si256(_mm256_cmp_ps::<_CMP_LE_OQ>(n, _mm256_setzero_ps())),
            _mm256_set1_epi32(0x8200_0000u32 as i32),
        );
        let s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f00_0000)));
        let s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
        let d = _mm256_cmp_ps::<_CMP_GT_OQ>(abs_n, _mm256_set1_ps(192.0));
        _mm256_or_ps(
            _mm256_and_ps(d, _mm256_mul_ps(s1, s1)),
            _mm256_andnot_ps(
                d,
                _mm256_or_ps(
                    _mm256_and_ps(c, _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1)),
                    _mm256_andnot_ps(c, _mm256_fmadd_ps(k, j, k)),
                ),
            ),
        )
    }
}

/// [`super::hsum8`] as ggml writes it (high half plus low half,
/// `movehl`, `movehdup`).
#[inline(always)]
unsafe fn hsum8(v: __m256) -> f32 {
    // SAFETY: register arithmetic only.
    unsafe {
        let x = _mm_add_ps(_mm256_extractf128_ps::<1>(v), _mm256_castps256_ps128(v));
        let x = _mm_add_ps(x, _mm_movehl_ps(x, x));
        _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)))
    }
}

/// # Safety
/// AVX2 and FMA; `x.len()` a multiple of 8.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn soft_max(x: &mut [f32], max: f32) -> f64 {
    let m = _mm256_set1_ps(max);
    let mut sum = 0.0f64;
    for c in x.chunks_exact_mut(8) {
        // SAFETY: `c` holds 8 floats.
        unsafe {
            let val = v_expf8(_mm256_sub_ps(_mm256_loadu_ps(c.as_ptr()), m));
            _mm256_storeu_ps(c.as_mut_ptr(), val);
            sum += f64::from(hsum8(val));
        }
    }
    sum
}

/// # Safety
/// AVX2 and FMA; equal lengths, a multiple of 8.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn swiglu(gate: &mut [f32], up: &[f32]) {
    let one = _mm256_set1_ps(1.0);
    for (g, u) in gate.chunks_exact_mut(8).zip(up.chunks_exact(8)) {
        // SAFETY: both chunks hold 8 floats.
        unsafe {
            let x = _mm256_loadu_ps(g.as_ptr());
            let e = v_expf8(_mm256_sub_ps(_mm256_setzero_ps(), x));
            let silu = _mm256_div_ps(x, _mm256_add_ps(one, e));
            let y = _mm256_mul_ps(silu, _mm256_loadu_ps(u.as_ptr()));
            _mm256_storeu_ps(g.as_mut_ptr(), y);
        }
    }
}

/// Rows `rows` (`R` of them, `n` elements each) against `q`, their
/// lanes reduced to 4 each: for `Vec` the 32 lanes of `ggml_vec_dot`
/// over the first `n & !31` elements, to `t_m = x_m + x_{m+4}` of
/// [`super::reduce32`]; for `Tiny` tinyBLAS's 8 lanes over all `n` (a
/// short last vector padded with zeros), to `a_m + a_{m+4}`. `qv` holds
/// the query's whole vectors (loaded once for every row), `q` the
/// query.
#[inline(always)]
unsafe fn lanes<T: Elem, const R: usize>(
    how: Dot,
    qv: &[__m256],
    q: *const f32,
    rows: [*const T; R],
    n: usize,
) -> [__m128; R] {
    // SAFETY: `n` elements of `q` and of every row are inside their
    // slices (the caller's bounds); the short last vector is read
    // element by element.
    unsafe {
        if how == Dot::Tiny {
            let mut c = [_mm256_setzero_ps(); R];
            let n8 = n / 8 * 8;
            let mut i = 0;
            while i < n8 {
                let qi = qv[i / 8];
                for (c, row) in c.iter_mut().zip(rows) {
                    *c = _mm256_fmadd_ps(T::load8(row.wrapping_add(i)), qi, *c);
                }
                i += 8;
            }
            if n8 < n {
                let mut b = [0.0f32; 8];
                for (l, b) in b.iter_mut().enumerate().take(n - n8) {
                    *b = *q.wrapping_add(n8 + l);
                }
                let qi = _mm256_loadu_ps(b.as_ptr());
                for (c, row) in c.iter_mut().zip(rows) {
                    let mut a = [0.0f32; 8];
                    for (l, a) in a.iter_mut().enumerate().take(n - n8) {
                        *a = T::at(row.wrapping_add(n8 + l));
                    }
                    *c = _mm256_fmadd_ps(_mm256_loadu_ps(a.as_ptr()), qi, *c);
                }
            }
            let mut t = [_mm_setzero_ps(); R];
            for (t, c) in t.iter_mut().zip(c) {
                *t = _mm_add_ps(_mm256_extractf128_ps::<1>(c), _mm256_castps256_ps128(c));
            }
            return t;
        }
        let np = n & !31;
        let mut s = [[_mm256_setzero_ps(); 4]; R];
        let mut i = 0;
        while i < np {
            for (s, row) in s.iter_mut().zip(rows) {
                for (j, s) in s.iter_mut().enumerate() {
                    let x = T::load8(row.wrapping_add(i + 8 * j));
                    *s = _mm256_fmadd_ps(x, qv[i / 8 + j], *s);
                }
            }
            i += 32;
        }
        let mut t = [_mm_setzero_ps(); R];
        for (t, s) in t.iter_mut().zip(s) {
            let x = _mm256_add_ps(_mm256_add_ps(s[0], s[2]), _mm256_add_ps(s[1], s[3]));
            *t = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps::<1>(x));
        }
        t
    }
}

/// Four rows' 4-lane sums, each reduced by its own tree: `Tiny` `(t_0 +
/// t_2) + (t_1 + t_3)`, `Vec` `(t_0 + t_1) + (t_2 + t_3)`.
#[inline(always)]
unsafe fn reduce4(how: Dot, t: [__m128; 4]) -> [f32; 4] {
    // SAFETY: register arithmetic only.
    unsafe {
        let sums = if how == Dot::Tiny {
            // Pair the halves first, then one horizontal add.
            let ab = _mm_add_ps(_mm_movelh_ps(t[0], t[1]), _mm_movehl_ps(t[1], t[0]));
            let cd = _mm_add_ps(_mm_movelh_ps(t[2], t[3]), _mm_movehl_ps(t[3], t[2]));
            _mm_hadd_ps(ab, cd)
        } else {
            _mm_hadd_ps(_mm_hadd_ps(t[0], t[1]), _mm_hadd_ps(t[2], t[3]))
        };
        let mut s = [0.0f32; 4];
        _mm_storeu_ps(s.as_mut_ptr(), sums);
        s
    }
}

#[inline(always)]
unsafe fn dots_of<T: Elem>(how: Dot, q: &[f32], k: *const T, stride: usize, out: &mut [f32]) {
    let n = q.len();
    let np = n & !31;
    let qp = q.as_ptr();
    let count = out.len();
    // The query's whole vectors, loaded once (on the stack up to 512
    // elements).
    let mut stack = [_mm256_setzero_ps(); 64];
    let mut heap = Vec::new();
    let qv: &mut [__m256] = match n / 8 {
        m if m <= stack.len() => &mut stack[..m],
        m => {
            heap.resize(m, _mm256_setzero_ps());
            &mut heap
        }
    };
    for (i, v) in qv.iter_mut().enumerate() {
        // SAFETY: elements 8i..8i + 8 < n of q.
        *v = unsafe { _mm256_loadu_ps(qp.wrapping_add(8 * i)) };
    }
    let qv = &*qv;
    // SAFETY: rows r < count of n elements at `k + r · stride` lie
    // inside the run (the caller checked `fits`).
    unsafe {
        let row = |r: usize| k.wrapping_add(r * stride);
        let mut r = 0;
        while r < count {
            let t: [__m128; 4] = if r + 4 <= count {
                if how == Dot::Tiny {
                    lanes::<T, 4>(how, qv, qp, [row(r), row(r + 1), row(r + 2), row(r + 3)], n)
                } else {
                    let [a, b] = lanes::<T, 2>(how, qv, qp, [row(r), row(r + 1)], n);
                    let [c, d] = lanes::<T, 2>(how, qv, qp, [row(r + 2), row(r + 3)], n);
                    [a, b, c, d]
                }
            } else {
                // The last rows; the missing ones zeros, not stored.
                let mut t = [_mm_setzero_ps(); 4];
                for (c, t) in t.iter_mut().enumerate().take(count - r) {
                    *t = lanes::<T, 1>(how, qv, qp, [row(r + c)], n)[0];
                }
                t
            };
            let s = reduce4(how, t);
            for (c, &s) in s.iter().enumerate().take(count - r) {
                out[r + c] = match how {
                    Dot::Tiny => s,
                    _ if np == n => s,
                    _ => leftovers(how, s, np, q, |i| T::at(row(r + c).wrapping_add(i))),
                };
            }
            r += 4;
        }
    }
}

/// # Safety
/// AVX2, FMA and F16C; `k`'s rows inside its slice; `q.len() ==
/// k.len`; `out.len() == k.count`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dots(how: Dot, q: &[f32], k: Run<'_>, out: &mut [f32]) {
    // SAFETY: the caller's contract.
    unsafe {
        match k.rows {
            Row::F32(d) => dots_of(how, q, d.as_ptr(), k.stride, out),
            Row::F16(d) => dots_of(how, q, d.as_ptr(), k.stride, out),
        }
    }
}

/// Positions a weighted sum takes per pass over its lanes: the V rows of
/// a pass stay in cache while each lane meets its positions.
const PASS: usize = 256;

/// One lane's positions `j`, `j + l`, ... below `j_end` added to its
/// `8 · V` outputs from `d` (in `lane`, `[dv]`), kept in registers: one
/// broadcast weight per position for all of them.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn lane_run<T: Elem, const V: usize>(
    p: *const f32,
    v: *const T,
    stride: usize,
    (j0, mut j, j_end, l): (usize, usize, usize, usize),
    lane: *mut f32,
    d: usize,
) {
    // SAFETY: positions j in j0..j_end are rows j - j0 of the run, of
    // at least d + 8 V elements; `lane` holds them too.
    unsafe {
        let mut a = [_mm256_setzero_ps(); V];
        for (m, a) in a.iter_mut().enumerate() {
            *a = _mm256_loadu_ps(lane.wrapping_add(d + 8 * m));
        }
        while j < j_end {
            let r = j - j0;
            let w = _mm256_set1_ps(*p.wrapping_add(r));
            let row = v.wrapping_add(r * stride + d);
            for (m, a) in a.iter_mut().enumerate() {
                *a = _mm256_fmadd_ps(T::load8(row.wrapping_add(8 * m)), w, *a);
            }
            j += l;
        }
        for (m, a) in a.iter().enumerate() {
            _mm256_storeu_ps(lane.wrapping_add(d + 8 * m), *a);
        }
    }
}

/// The lanes of the weighted sum added to `acc` (`[lane][dv]`). For
/// each pass of [`PASS`] positions and each lane, up to 64 of the
/// lane's outputs stay in registers while the lane's positions in the
/// pass (one every `lanes`) add to them in order.
#[inline(always)]
unsafe fn weighted_add_of<T: Elem>(
    lanes: Lanes,
    p: &[f32],
    j0: usize,
    v: *const T,
    stride: usize,
    dv: usize,
    acc: &mut [f32],
) {
    let l = lanes.count();
    let d8 = dv / 8 * 8;
    let j_end = j0 + p.len();
    let ap = acc.as_mut_ptr();
    let pp = p.as_ptr();
    // SAFETY: row j - j0 < p.len() of dv elements at `v + (j - j0) ·
    // stride` lies inside the run, for j in j0..j_end; `acc` holds l ·
    // dv floats.
    unsafe {
        let mut c0 = j0 / l * l;
        while c0 < j_end {
            let c1 = (c0 + PASS).min(j_end);
            for lane in 0..l {
                // The lane's first position in the pass, at or past j0.
                let mut j = c0 + lane;
                while j < j0 {
                    j += l;
                }
                let run = (j0, j, c1, l);
                let at = ap.wrapping_add(lane * dv);
                let mut d = 0;
                while d + 64 <= d8 {
                    lane_run::<T, 8>(pp, v, stride, run, at, d);
                    d += 64;
                }
                while d < d8 {
                    lane_run::<T, 1>(pp, v, stride, run, at, d);
                    d += 8;
                }
                while j < c1 {
                    let r = j - j0;
                    for d in d8..dv {
                        let x = T::at(v.wrapping_add(r * stride + d));
                        *at.wrapping_add(d) = x.mul_add(p[r], *at.wrapping_add(d));
                    }
                    j += l;
                }
            }
            c0 = c1;
        }
    }
}

/// The lanes' reduction into `out` (`acc` `[lane][out.len()]`).
///
/// # Safety
/// AVX2; `acc.len()` the lanes times `out.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn weighted_finish(lanes: Lanes, acc: &[f32], out: &mut [f32]) {
    let dv = out.len();
    let d8 = dv / 8 * 8;
    let ap = acc.as_ptr();
    // SAFETY: `acc` holds the lanes' dv floats each; d + 8 <= d8 <= dv.
    unsafe {
        let mut d = 0;
        while d < d8 {
            let at = ap.wrapping_add(d);
            let y = match lanes {
                // t_m = a_m + a_{m+4}, then (t_0 + t_2) + (t_1 + t_3).
                Lanes::Tiny => {
                    let mut t = [_mm256_setzero_ps(); 4];
                    for (m, t) in t.iter_mut().enumerate() {
                        let (a, b) = (at.wrapping_add(m * dv), at.wrapping_add((m + 4) * dv));
                        *t = _mm256_add_ps(_mm256_loadu_ps(a), _mm256_loadu_ps(b));
                    }
                    _mm256_add_ps(_mm256_add_ps(t[0], t[2]), _mm256_add_ps(t[1], t[3]))
                }
                // x_m = (a_m + a_{16+m}) + (a_{8+m} + a_{24+m}), t_m = x_m +
                // x_{m+4}, then (t_0 + t_1) + (t_2 + t_3).
                Lanes::Vec => {
                    let mut x = [_mm256_setzero_ps(); 8];
                    for (m, x) in x.iter_mut().enumerate() {
                        let a = _mm256_loadu_ps(at.wrapping_add(m * dv));
                        let b = _mm256_loadu_ps(at.wrapping_add((8 + m) * dv));
                        let c = _mm256_loadu_ps(at.wrapping_add((16 + m) * dv));
                        let e = _mm256_loadu_ps(at.wrapping_add((24 + m) * dv));
                        *x = _mm256_add_ps(_mm256_add_ps(a, c), _mm256_add_ps(b, e));
                    }
                    let mut t = [_mm256_setzero_ps(); 4];
                    for (m, t) in t.iter_mut().enumerate() {
                        *t = _mm256_add_ps(x[m], x[m + 4]);
                    }
                    _mm256_add_ps(_mm256_add_ps(t[0], t[1]), _mm256_add_ps(t[2], t[3]))
                }
            };
            _mm256_storeu_ps(out.as_mut_ptr().wrapping_add(d), y);
            d += 8;
        }
    }
    reduce_lanes_scalar(lanes, acc, d8, out);
}

/// # Safety
/// AVX2, FMA and F16C; `v`'s rows inside its slice; `p.len() ==
/// v.count`; `acc.len()` the lanes times `v.len`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn weighted_add(lanes: Lanes, p: &[f32], j0: usize, v: Run<'_>, acc: &mut [f32]) {
    // SAFETY: the caller's contract.
    unsafe {
        match v.rows {
            Row::F32(d) => weighted_add_of(lanes, p, j0, d.as_ptr(), v.stride, v.len, acc),
            Row::F16(d) => weighted_add_of(lanes, p, j0, d.as_ptr(), v.stride, v.len, acc),
        }
    }
}
