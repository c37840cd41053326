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
        *g = silu(*g) * u;
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

/// `x / (1 + e^-x)` (`ggml_silu_f32`, libm's exp).
#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

fn swiglu_scalar(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = (*g / (1.0 + v_expf(0.0 - *g))) * u;
    }
}

#[cfg(target_arch = "x86_64")]
mod x86;

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
