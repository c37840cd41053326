//! ggml's CPU arithmetic, reproduced bit for bit: what
//! [`CpuNumerics::Ggml`](super::CpuNumerics::Ggml) computes where a plain
//! f32 loop would round differently. The model is llama.cpp's x86-64 CPU
//! backend built with AVX, AVX2, FMA and F16C and without AVX-512, by GCC,
//! which contracts `a * b + c` into a fused multiply-add (the vendored
//! llama-cpp-sys-2 0.1.161: `ggml-cpu/vec.{h,cpp}`, `simd-mappings.h`,
//! `llamafile/sgemm.cpp`).
//!
//! - [`v_expf`] (`ggml_v_expf`): ggml's vector `exp`, a polynomial after
//!   range reduction (about 1.5 ulp), lane by lane; [`soft_max`] and
//!   [`swiglu`] use it over whole 8-element vectors and libm's `expf` for
//!   the last `n % 8` elements.
//! - [`vec_dot_f32`] / [`vec_dot_f16`] (`ggml_vec_dot_f32/f16`): 32 lanes
//!   (four vectors of eight) of fused multiply-adds over the first `n & !31`
//!   elements, element `i` in lane `i % 32`; the lanes reduced as `x_l =
//!   (a_l + a_{16+l}) + (a_{8+l} + a_{24+l})` for `l < 8`, `t_m = x_m +
//!   x_{m+4}`, `(t_0 + t_1) + (t_2 + t_3)` ([`reduce32`]); then the other
//!   elements in order (f32: `s = fma(x, y, s)`; f16: added in f64).
//! - [`tinyblas_dot`] (llamafile's tinyBLAS, ggml's product of f32 or f16
//!   matrices for a batch of 2 or more rows): 8 lanes of fused
//!   multiply-adds, element `i` in lane `i % 8` (a short last vector padded
//!   with zeros), reduced by [`hsum8`]: `((a_0 + a_4) + (a_2 + a_6)) + ((a_1
//!   + a_5) + (a_3 + a_7))`.
//! - [`soft_max`] (`ggml_vec_soft_max_f32`): `exp(x - max)`, each whole
//!   8-element vector summed by [`hsum8`] in f32 and added to an f64 sum,
//!   the last `n % 8` added one by one.
//! - [`swiglu`] (`ggml_vec_swiglu_f32`): `x / (1 + exp(0 - x)) * g`.
//!
//! Lanes never hold -0 (they start at +0 and a fused multiply-add that
//! comes out exactly zero is +0), so a zero product added to a lane leaves
//! it unchanged: a masked attention position (probability 0) may be
//! skipped instead of multiplied, and a short vector padded with zeros is
//! the same as the elements alone.
//!
//! Each kernel has a scalar definition (the lanes as arrays, each fused
//! multiply-add an `f32::mul_add`) and an AVX2 version that computes the
//! same bits, chosen by [`SimdLevel`]; the tests below and
//! `engine/tests/cpu_ggml_exact.rs` tie them.

use half::f16;

use super::kv::{Row, Run};
use crate::simd::SimdLevel;

#[inline(always)]
fn f(bits: u32) -> f32 {
    f32::from_bits(bits)
}

/// ggml's `exp` of one lane (`ggml_v_expf`, AVX2 + FMA): `2^n · (1 + p(b))`
/// with `n = round(x / ln 2)` (by adding and subtracting 1.5 · 2^23), `b`
/// the reduced argument (two-part ln 2), `p` a degree-5 polynomial; past
/// |n| > 126 the scale is split in two factors (|n| > 192: 0 or inf).
/// 0 below about -103.97, inf past f32's range.
#[inline]
pub fn v_expf(x: f32) -> f32 {
    let r = f(0x4b40_0000); // 0x1.8p23
    let z = x.mul_add(f(0x3fb8_aa3b), r); // 0x1.715476p+0
    let n = z - r;
    // 0x1.7f7d1cp-20, 0x1.62e4p-1
    let b = (-n).mul_add(f(0x35bf_be8e), (-n).mul_add(f(0x3f31_7200), x));
    let e = z.to_bits().wrapping_shl(23);
    let k = f(e.wrapping_add(1.0f32.to_bits()));
    let c = n.abs() > 126.0;
    let u = b * b;
    // 0x1.0e4020p-7, 0x1.573e2ep-5, 0x1.555e66p-3, 0x1.fffdb6p-2, 0x1.ffffecp-1
    let j = f(0x3c07_2010)
        .mul_add(b, f(0x3d2b_9f17))
        .mul_add(u, f(0x3e2a_af33).mul_add(b, f(0x3eff_fedb)))
        .mul_add(u, f(0x3f7f_fff6) * b);
    if !c {
        return j.mul_add(k, k);
    }
    let g: u32 = if n <= 0.0 { 0x8200_0000 } else { 0 };
    let s1 = f(g.wrapping_add(0x7f00_0000));
    let s2 = f(e.wrapping_sub(g));
    if n.abs() > 192.0 {
        s1 * s1
    } else {
        s2.mul_add(j, s2) * s1
    }
}

/// tinyBLAS's (and `ggml_vec_soft_max_f32`'s) sum of an 8-lane vector:
/// the high half plus the low half, then `(t_0 + t_2) + (t_1 + t_3)`.
#[inline]
pub fn hsum8(a: [f32; 8]) -> f32 {
    let t = [a[0] + a[4], a[1] + a[5], a[2] + a[6], a[3] + a[7]];
    (t[0] + t[2]) + (t[1] + t[3])
}

/// `ggml_vec_dot`'s reduction of its 32 lanes (four vectors `a[8s..8s+8]`):
/// vectors 0 + 2 and 1 + 3, their sum, then the high half plus the low
/// half and two horizontal adds: `(t_0 + t_1) + (t_2 + t_3)`.
#[inline]
pub fn reduce32(a: &[f32; 32]) -> f32 {
    let x: [f32; 8] = std::array::from_fn(|l| (a[l] + a[16 + l]) + (a[8 + l] + a[24 + l]));
    let t = [x[0] + x[4], x[1] + x[5], x[2] + x[6], x[3] + x[7]];
    (t[0] + t[1]) + (t[2] + t[3])
}

/// Which of ggml's dot products.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dot {
    /// `ggml_vec_dot_f32`: 32 lanes, the leftovers fused in f32.
    VecF32,
    /// `ggml_vec_dot_f16` (both operands f16 values, widened): 32 lanes,
    /// the leftovers added in f64.
    VecF16,
    /// tinyBLAS: 8 lanes.
    Tiny,
}

/// The lanes of a weighted sum of rows (a product whose inner dimension
/// runs over the rows): `Tiny` 8 ([`hsum8`]), `Vec` 32 ([`reduce32`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lanes {
    Tiny,
    Vec,
}

impl Lanes {
    pub(crate) fn count(self) -> usize {
        match self {
            Lanes::Tiny => 8,
            Lanes::Vec => 32,
        }
    }
}

/// `ggml_vec_dot_f32(x, y)`.
///
/// # Panics
/// When the lengths differ.
pub fn vec_dot_f32(level: SimdLevel, x: &[f32], y: &[f32]) -> f32 {
    assert_eq!(x.len(), y.len(), "dot: lengths");
    dot_one(level, Dot::VecF32, Row::F32(x), y)
}

/// `ggml_vec_dot_f16(x, y)` (as f32 values; both operands f16).
///
/// # Panics
/// When the lengths differ.
pub fn vec_dot_f16(level: SimdLevel, x: &[f16], y: &[f16]) -> f32 {
    assert_eq!(x.len(), y.len(), "dot: lengths");
    let y: Vec<f32> = y.iter().map(|v| v.to_f32()).collect();
    dot_one(level, Dot::VecF16, Row::F16(x), &y)
}

/// One element of tinyBLAS's product of f32 matrices: the dot of a row of
/// each.
///
/// # Panics
/// When the lengths differ.
pub fn tinyblas_dot(level: SimdLevel, x: &[f32], y: &[f32]) -> f32 {
    assert_eq!(x.len(), y.len(), "dot: lengths");
    dot_one(level, Dot::Tiny, Row::F32(x), y)
}

fn dot_one(level: SimdLevel, how: Dot, x: Row<'_>, y: &[f32]) -> f32 {
    let mut out = [0.0f32];
    let run = Run {
        rows: x,
        stride: y.len(),
        len: y.len(),
        count: 1,
    };
    dots(level, how, y, run, &mut out);
    out[0]
}

/// `out[r] = dot(row r of k, q)` by `how`, for every row of `k`.
///
/// # Panics
/// When the lengths disagree.
pub(crate) fn dots(level: SimdLevel, how: Dot, q: &[f32], k: Run<'_>, out: &mut [f32]) {
    assert!(
        q.len() == k.len && out.len() == k.count && k.fits(),
        "ggml dots: query {} against rows of {}, {} outputs for {} rows",
        q.len(),
        k.len,
        out.len(),
        k.count
    );
    #[cfg(target_arch = "x86_64")]
    if level >= SimdLevel::Avx2 && level.is_supported() {
        // SAFETY: the CPU has AVX2, FMA and F16C (checked); the rows lie
        // inside their slice (`fits`) and the lengths agree (above).
        unsafe { x86::dots(how, q, k, out) };
        return;
    }
    let _ = level;
    for (r, o) in out.iter_mut().enumerate() {
        *o = dot_scalar(how, q, |i| k.at(r, i));
    }
}

/// One dot product by the definition.
fn dot_scalar(how: Dot, y: &[f32], x: impl Fn(usize) -> f32) -> f32 {
    let n = y.len();
    if how == Dot::Tiny {
        let mut a = [0.0f32; 8];
        for (i, &y) in y.iter().enumerate() {
            a[i % 8] = x(i).mul_add(y, a[i % 8]);
        }
        return hsum8(a);
    }
    let np = n & !31;
    let mut a = [0.0f32; 32];
    for (i, &y) in y[..np].iter().enumerate() {
        a[i % 32] = x(i).mul_add(y, a[i % 32]);
    }
    leftovers(how, reduce32(&a), np, y, x)
}

/// `ggml_vec_dot`'s elements past the vectors, `np..`, added to `s`.
#[inline]
fn leftovers(how: Dot, s: f32, np: usize, y: &[f32], x: impl Fn(usize) -> f32) -> f32 {
    let rest = (np..y.len()).map(|i| (x(i), y[i]));
    match how {
        Dot::VecF16 => rest.fold(f64::from(s), |s, (x, y)| s + f64::from(x * y)) as f32,
        _ => rest.fold(s, |s, (x, y)| x.mul_add(y, s)),
    }
}

/// `out[d] = Σ_r p[r] · v[r][d]` as ggml's product with the rows as its
/// inner dimension computes it: row `r` is position `j0 + r` and goes to
/// lane `(j0 + r) % 8` (`Tiny`) or `% 32` (`Vec`), so that a run that
/// starts past 0 (a sliding window) keeps ggml's lanes; the lanes are
/// reduced as `lanes` says. `acc` is scratch (resized here).
///
/// # Panics
/// When the lengths disagree.
pub(crate) fn weighted(
    level: SimdLevel,
    lanes: Lanes,
    p: &[f32],
    j0: usize,
    v: Run<'_>,
    acc: &mut Vec<f32>,
    out: &mut [f32],
) {
    acc.clear();
    acc.resize(lanes.count() * v.len, 0.0);
    weighted_add(level, lanes, p, j0, v, acc);
    weighted_finish(level, lanes, acc, out);
}

/// The lanes of [`weighted`] for positions `j0..j0 + p.len()` added to
/// `acc` (`[lane][dv]`, zeroed before the first run): a sum over
/// consecutive runs of positions, each added in turn, has every lane's
/// positions in the order one run over all of them adds them, so
/// [`weighted_finish`] then gives [`weighted`]'s bits.
///
/// # Panics
/// When the lengths disagree.
pub(crate) fn weighted_add(
    level: SimdLevel,
    lanes: Lanes,
    p: &[f32],
    j0: usize,
    v: Run<'_>,
    acc: &mut [f32],
) {
    let (l, dv) = (lanes.count(), v.len);
    assert!(
        p.len() == v.count && acc.len() == l * dv && v.fits(),
        "ggml weighted sum: {} weights for {} rows, {} lanes' elements for rows of {}",
        p.len(),
        v.count,
        acc.len(),
        v.len
    );
    #[cfg(target_arch = "x86_64")]
    if level >= SimdLevel::Avx2 && level.is_supported() {
        // SAFETY: as in `dots`; `acc` holds `l · dv` lanes.
        unsafe { x86::weighted_add(lanes, p, j0, v, acc) };
        return;
    }
    let _ = level;
    for (r, &w) in p.iter().enumerate() {
        let lane = &mut acc[(j0 + r) % l * dv..][..dv];
        for (d, a) in lane.iter_mut().enumerate() {
            *a = v.at(r, d).mul_add(w, *a);
        }
    }
}

/// `out` from the lanes [`weighted_add`] summed (`acc`, `[lane][out.len()]`).
///
/// # Panics
/// When the lengths disagree.
pub(crate) fn weighted_finish(level: SimdLevel, lanes: Lanes, acc: &[f32], out: &mut [f32]) {
    assert_eq!(
        acc.len(),
        lanes.count() * out.len(),
        "ggml weighted sum: lanes"
    );
    #[cfg(target_arch = "x86_64")]
    if level >= SimdLevel::Avx2 && level.is_supported() {
        // SAFETY: the CPU has AVX2 (checked); `acc` holds the lanes of `out`.
        unsafe { x86::weighted_finish(lanes, acc, out) };
        return;
    }
    let _ = level;
    reduce_lanes_scalar(lanes, acc, 0, out);
}

/// `out[d] = reduce(acc[lane · dv + d] over the lanes)` for `d >= from`.
fn reduce_lanes_scalar(lanes: Lanes, acc: &[f32], from: usize, out: &mut [f32]) {
    let dv = out.len();
    for (d, o) in out.iter_mut().enumerate().skip(from) {
        *o = match lanes {
            Lanes::Tiny => hsum8(std::array::from_fn(|l| acc[l * dv + d])),
            Lanes::Vec => reduce32(&std::array::from_fn(|l| acc[l * dv + d])),
        };
    }
}

/// `x[i] = exp(x[i] - max)` in place, returning `Σ x` in f64 as
/// `ggml_vec_soft_max_f32` sums it (see the module docs).
pub fn soft_max(level: SimdLevel, x: &mut [f32], max: f32) -> f64 {
    let body = x.len() / 8 * 8;
    let (head, tail) = x.split_at_mut(body);
    let mut sum = soft_max_vectors(level, head, max);
    for v in tail {
        *v = (*v - max).exp();
        sum += f64::from(*v);
    }
    sum
}

/// [`soft_max`] over whole vectors (`x.len()` a multiple of 8).
fn soft_max_vectors(level: SimdLevel, x: &mut [f32], max: f32) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if level >= SimdLevel::Avx2 && level.is_supported() {
        // SAFETY: the CPU has AVX2 and FMA (checked).
        return unsafe { x86::soft_max(x, max) };
    }
    let _ = level;
    soft_max_scalar(x, max)
}

fn soft_max_scalar(x: &mut [f32], max: f32) -> f64 {
    let mut sum = 0.0f64;
    for c in x.chunks_exact_mut(8) {
        c.iter_mut().for_each(|v| *v = v_expf(*v - max));
        sum += f64::from(hsum8(c.try_into().expect("8 lanes")));
    }
    sum
}

/// `gate = silu(gate) · up` over one row, as `ggml_vec_swiglu_f32`: `x /
/// (1 + v_expf(0 - x)) · u` over whole 8-element vectors, `x / (1 +
/// expf(-x)) · u` (libm) for the last `n % 8`.
///
/// # Panics
/// When the lengths differ.
pub fn swiglu(level: SimdLevel, gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len(), "swiglu: gate and up lengths");
    let body = gate.len() / 8 * 8;
    let (head, tail) = gate.split_at_mut(body);
    swiglu_vectors(level, head, &up[..body]);
    for (g, &u) in tail.iter_mut().zip(&up[body..]) {
        *g = super::elementwise::silu(*g) * u;
    }
}

/// [`swiglu`] over whole vectors (lengths a multiple of 8).
fn swiglu_vectors(level: SimdLevel, gate: &mut [f32], up: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if level >= SimdLevel::Avx2 && level.is_supported() {
        // SAFETY: the CPU has AVX2 and FMA (checked); the lengths are equal
        // multiples of 8.
        return unsafe { x86::swiglu(gate, up) };
    }
    let _ = level;
    swiglu_scalar(gate, up)
}

fn swiglu_scalar(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = (*g / (1.0 + v_expf(0.0 - *g))) * u;
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
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
    pub(super) unsafe fn weighted_add(
        lanes: Lanes,
        p: &[f32],
        j0: usize,
        v: Run<'_>,
        acc: &mut [f32],
    ) {
        // SAFETY: the caller's contract.
        unsafe {
            match v.rows {
                Row::F32(d) => weighted_add_of(lanes, p, j0, d.as_ptr(), v.stride, v.len, acc),
                Row::F16(d) => weighted_add_of(lanes, p, j0, d.as_ptr(), v.stride, v.len, acc),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::kv::fixture::{values, Rows};
    use super::*;

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// The run-based kernels of every level this CPU runs compute the
    /// scalar definition's bits, F32 and F16 rows, over lengths and counts
    /// around the lane widths, padded strides and runs starting off a lane
    /// boundary.
    #[test]
    fn run_kernels_equal_the_scalar_definition_on_every_level() {
        let levels: Vec<SimdLevel> = SimdLevel::supported().collect();
        for (len, count, pad, j0) in [
            (64, 1, 0, 0),
            (64, 9, 3, 5),
            (128, 40, 0, 0),
            (31, 7, 1, 3),
            (33, 33, 0, 31),
            (8, 70, 5, 1),
            (80, 17, 2, 8),
            (256, 5, 0, 0),
            (1, 3, 0, 2),
            (97, 64, 7, 30),
            // Across the weighted sum's passes of 256 positions.
            (64, 300, 0, 13),
            (20, 530, 2, 250),
        ] {
            let rows = Rows::new(len as u64 * 31 + count as u64, len, count, len + pad, 2.0);
            let q = values(7 + len as u64, len, 1.0);
            let p = values(11 + count as u64, count, 1.0);
            for f16_rows in [false, true] {
                let run = rows.run(f16_rows);
                for how in [Dot::VecF32, Dot::VecF16, Dot::Tiny] {
                    let mut want = vec![0.0f32; count];
                    dots(SimdLevel::Scalar, how, &q, run, &mut want);
                    for &level in &levels {
                        let mut got = vec![f32::NAN; count];
                        dots(level, how, &q, run, &mut got);
                        assert_eq!(
                            bits(&got),
                            bits(&want),
                            "{how:?} {level} len {len} count {count} f16 {f16_rows}"
                        );
                    }
                }
                for lanes in [Lanes::Tiny, Lanes::Vec] {
                    let mut acc = Vec::new();
                    let mut want = vec![0.0f32; len];
                    weighted(SimdLevel::Scalar, lanes, &p, j0, run, &mut acc, &mut want);
                    // The definition written out for output 0.
                    let l = lanes.count();
                    let mut a = vec![0.0f32; l];
                    for (r, &w) in p.iter().enumerate() {
                        a[(j0 + r) % l] = run.at(r, 0).mul_add(w, a[(j0 + r) % l]);
                    }
                    let o0 = match lanes {
                        Lanes::Tiny => hsum8(a.try_into().unwrap()),
                        Lanes::Vec => reduce32(&a.try_into().unwrap()),
                    };
                    assert_eq!(want[0].to_bits(), o0.to_bits());
                    for &level in &levels {
                        let mut got = vec![f32::NAN; len];
                        weighted(level, lanes, &p, j0, run, &mut acc, &mut got);
                        assert_eq!(
                            bits(&got),
                            bits(&want),
                            "{lanes:?} {level} len {len} count {count} j0 {j0} f16 {f16_rows}"
                        );
                        // In consecutive runs of positions, added in turn.
                        for piece in [1, 5, 64, 100] {
                            let mut acc = vec![0.0f32; lanes.count() * len];
                            let mut a = 0;
                            while a < count {
                                let b = (a + piece).min(count);
                                let sub = run.rows(a, b);
                                weighted_add(level, lanes, &p[a..b], j0 + a, sub, &mut acc);
                                a = b;
                            }
                            let mut got = vec![f32::NAN; len];
                            weighted_finish(level, lanes, &acc, &mut got);
                            assert_eq!(
                                bits(&got),
                                bits(&want),
                                "{lanes:?} {level} count {count} j0 {j0} in runs of {piece}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// A zero-padded short vector is the elements alone (no lane is -0).
    #[test]
    fn skipped_zero_products_change_nothing() {
        let x = values(3, 45, 1.0);
        let y = values(4, 45, 1.0);
        let mut x0 = x.clone();
        let mut y0 = y.clone();
        x0.resize(48, 0.0);
        y0.resize(48, 0.0);
        for level in SimdLevel::supported() {
            assert_eq!(
                tinyblas_dot(level, &x, &y).to_bits(),
                tinyblas_dot(level, &x0, &y0).to_bits()
            );
        }
    }
}
