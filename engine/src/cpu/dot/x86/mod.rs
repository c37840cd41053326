//! x86-64 SIMD kernels: ggml's AVX2 dot products, generalised to blocks of
//! `R` weight rows by `C` activation rows that share every load.
//!
//! Each output keeps exactly the arithmetic of ggml's AVX2 kernel for one
//! row and one column: the same integers in the same eight i32 lanes, turned
//! into f32 and accumulated with the same FMAs in block order, then summed
//! across lanes as `hsum_float_8` does. So a result does not depend on the
//! tile shape that computed it (matrix-vector and matrix-matrix products give
//! the same bits), nor on the level: [`Avx2Ops`] forms the integer sums with
//! `vpmaddubsw`/`vpmaddwd` as ggml does, [`VnniOps`] with `vpdpbusd`/`vpdpwssd`
//! (AVX-512 VNNI); for the inputs the quantizers produce (activation bytes in
//! -127..=127) neither saturates, so both give the same integers.
//!
//! The kernels are `#[inline(always)]` generic functions; the entry points
//! of each [`Level`] instantiate them inside `#[target_feature]` functions,
//! which are reachable only through [`kernels`], which hands them out only
//! for a level this CPU supports. Each family file lists its kernels, one
//! [`row`] per weight type; [`table`] puts a level's rows in
//! [`WEIGHT_TYPES`] order at compile time.

mod float;
mod k;
mod legacy;

use std::arch::x86_64::*;

use crate::ggml_type::{weight_index, GgmlType, WEIGHT_TYPES};

use super::{by_weight_type, DotFn, Kernels, Tile, TileFn};
use crate::simd::SimdLevel;

/// How the integer dot products are formed.
pub(super) trait IntOps {
    /// Whether [`IntOps::dot4`] is exact for every unsigned byte (AVX2's
    /// `vpmaddubsw` saturates pairs of products past i16, which unsigned
    /// values above 128 against activations can reach).
    const FULL_U8: bool;
    /// `acc` plus, in each i32 lane, the four products of its unsigned bytes
    /// of `u` with its signed bytes of `s`.
    unsafe fn dot4(acc: __m256i, u: __m256i, s: __m256i) -> __m256i;
    /// `acc` plus, in each i32 lane, the two products of its i16 halves.
    unsafe fn dot2(acc: __m256i, a: __m256i, b: __m256i) -> __m256i;
}

/// AVX2: `vpmaddubsw` then `vpmaddwd` (saturates only when a pair of byte
/// products passes i16, which -127..=127 activations never make).
pub(super) struct Avx2Ops;

impl IntOps for Avx2Ops {
    const FULL_U8: bool = false;

    #[inline(always)]
    unsafe fn dot4(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        let p16 = _mm256_maddubs_epi16(u, s);
        _mm256_add_epi32(acc, _mm256_madd_epi16(p16, _mm256_set1_epi16(1)))
    }

    #[inline(always)]
    unsafe fn dot2(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
        _mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
    }
}

/// AVX-512 VNNI on 256-bit vectors: `vpdpbusd` and `vpdpwssd`.
pub(super) struct VnniOps;

impl IntOps for VnniOps {
    const FULL_U8: bool = true;

    #[inline(always)]
    unsafe fn dot4(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(acc, u, s)
    }

    #[inline(always)]
    unsafe fn dot2(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
        _mm256_dpwssd_epi32(acc, a, b)
    }
}

/// A kernel for `R` weight rows by `C` activation rows.
pub(super) trait Micro {
    /// Bytes per weight block and per activation block (per element for the
    /// float types).
    const W_BYTES: usize;
    const A_BYTES: usize;
    /// Whether a matrix-vector walk should take rows `VR` at a time (the
    /// legacy kinds share each activation block's loads and scale work
    /// across the rows) or one at a time (the K kinds share almost nothing
    /// and lose registers to the extra rows; one row is also one sequential
    /// stream, which the hardware prefetchers follow).
    const INTERLEAVE_ROWS: bool = true;

    /// `out[r][c]` = row `w[r]` dotted with row `a[c]`, `nb` blocks each.
    /// With `pf` non-zero, each block of each row also prefetches the bytes
    /// `pf` past it (the rows the caller takes next), so that a walk over
    /// several interleaved rows still streams memory in order.
    ///
    /// # Safety
    /// Each `w[r]` must be readable for `nb * W_BYTES` bytes and each `a[c]`
    /// for `nb * A_BYTES`; the CPU must have the features of the level the
    /// caller was compiled for.
    unsafe fn run<const R: usize, const C: usize>(
        nb: usize,
        w: [*const u8; R],
        a: [*const u8; C],
        pf: usize,
    ) -> [[f32; C]; R];
}

// ---- helpers shared by the kernels (ggml's, for the same arithmetic) ----

/// The `N` bytes at `p` (unaligned), as one load. A plain dereference of a
/// byte array: `read_unaligned` and the `loadu` intrinsics copy through
/// `copy_nonoverlapping`, whose debug-build precondition checks (null,
/// overlap with the destination on the stack) cost a compare, a branch and
/// a spill per load and halved the kernels' speed in the `ci` profile
/// (release code with debug assertions). Every load of the kernels goes
/// through here.
#[inline(always)]
pub(super) unsafe fn bytes_at<const N: usize>(p: *const u8) -> [u8; N] {
    // SAFETY: the caller guarantees `N` readable bytes at `p`; `[u8; N]`
    // has alignment 1.
    unsafe { *(p as *const [u8; N]) }
}

/// The little-endian `u16` at `p` (unaligned).
#[inline(always)]
pub(super) unsafe fn u16_le(p: *const u8) -> u16 {
    u16::from_le_bytes(bytes_at(p))
}

/// The little-endian `u32` at `p` (unaligned).
#[inline(always)]
pub(super) unsafe fn u32_le(p: *const u8) -> u32 {
    u32::from_le_bytes(bytes_at(p))
}

/// The little-endian `f32` at `p` (unaligned).
#[inline(always)]
pub(super) unsafe fn f32_le(p: *const u8) -> f32 {
    f32::from_le_bytes(bytes_at(p))
}

/// The f16 at `p` (unaligned) as f32 in all eight lanes: `vpbroadcastw`
/// from memory, then `vcvtph2ps`. (Converting a lone f16 to a scalar lets
/// the compiler load it with `vpinsrw` into whatever register is at hand,
/// often an accumulator, which ties every block to the previous block's FMA
/// and serializes the loop; every lane of this one is used.)
#[inline(always)]
pub(super) unsafe fn f16_splat(p: *const u8) -> __m256 {
    _mm256_cvtph_ps(_mm_set1_epi16(i16::from_le_bytes(bytes_at(p))))
}

/// The two f16 at `p` and `p + 2` (unaligned) as f32, with one 4-byte load
/// (`vmovd`, which has no register input) and one conversion. Callers use
/// both: given one, the compiler narrows the load back to two bytes (see
/// [`f16_splat`]).
#[inline(always)]
pub(super) unsafe fn f16x2_at(p: *const u8) -> (f32, f32) {
    let bits = i32::from_le_bytes(bytes_at(p));
    let v = _mm_cvtph_ps(_mm_cvtsi32_si128(bits));
    (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_movehdup_ps(v)))
}

/// The 32 bytes at `p` (unaligned): `vmovdqu`.
#[inline(always)]
pub(super) unsafe fn load256(p: *const u8) -> __m256i {
    // SAFETY: both types are 32 plain bytes.
    unsafe { std::mem::transmute::<[u8; 32], __m256i>(bytes_at(p)) }
}

/// The 16 bytes at `p` (unaligned).
#[inline(always)]
pub(super) unsafe fn load128(p: *const u8) -> __m128i {
    // SAFETY: both types are 16 plain bytes.
    unsafe { std::mem::transmute::<[u8; 16], __m128i>(bytes_at(p)) }
}

/// `hsum_float_8` of every accumulator. (A loop, not `map`: closures are
/// separate functions that need not be inlined into the `#[target_feature]`
/// caller, and out of line an intrinsic is a call; every kernel avoids them.)
#[inline(always)]
pub(super) unsafe fn hsum_all<const R: usize, const C: usize>(
    acc: &[[__m256; C]; R],
) -> [[f32; C]; R] {
    let mut out = [[0.0f32; C]; R];
    for r in 0..R {
        for c in 0..C {
            out[r][c] = hsum_float_8(acc[r][c]);
        }
    }
    out
}

/// ggml's `hsum_float_8`: (hi + lo) folded twice.
#[inline(always)]
pub(super) unsafe fn hsum_float_8(x: __m256) -> f32 {
    let mut res = _mm256_extractf128_ps(x, 1);
    res = _mm_add_ps(res, _mm256_castps256_ps128(x));
    res = _mm_add_ps(res, _mm_movehl_ps(res, res));
    res = _mm_add_ss(res, _mm_movehdup_ps(res));
    _mm_cvtss_f32(res)
}

/// ggml's fold of a 4-lane accumulator: (0 + 2) + (1 + 3).
#[inline(always)]
pub(super) unsafe fn hsum_float_4(x: __m128) -> f32 {
    let x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)))
}

/// Prefetches the `bytes` bytes at `p + pf` (nothing when `pf` is 0). A
/// prefetch never faults, so the address may lie past the buffer.
#[inline(always)]
pub(super) unsafe fn prefetch(p: *const u8, pf: usize, bytes: usize) {
    if pf != 0 {
        let mut off = 0;
        while off < bytes {
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(pf + off) as *const i8);
            off += 64;
        }
    }
}

/// 32 nibbles at `p` (16 bytes) as 32 bytes: the low nibbles, then the high.
#[inline(always)]
pub(super) unsafe fn bytes_from_nibbles_32(p: *const u8) -> __m256i {
    let tmp = load128(p);
    let bytes = _mm256_set_m128i(_mm_srli_epi16(tmp, 4), tmp);
    _mm256_and_si256(bytes, _mm256_set1_epi8(0xF))
}

/// The 32 bits at `p` as 32 bytes, 0xFF where the bit is set.
#[inline(always)]
pub(super) unsafe fn bytes_from_bits_32(p: *const u8) -> __m256i {
    let x32 = u32_le(p);
    let shuf = _mm256_set_epi64x(
        0x0303030303030303,
        0x0202020202020202,
        0x0101010101010101,
        0,
    );
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(x32 as i32), shuf);
    let bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1))
}

// ---- the tile walk ----

/// How far ahead matrix-vector walks prefetch weights.
const PREFETCH_BYTES: usize = 16 * 1024;

/// Walks `t` in `MR x MC` blocks (`VR x 1` when there is one column), with
/// single-row and single-column kernels at the edges.
#[inline(always)]
unsafe fn drive<K: Micro, const VR: usize, const MR: usize, const MC: usize>(
    t: &Tile<'_>,
    out: &mut [f32],
    ld: usize,
) {
    let nb = t.n_blocks;
    let w = |r: usize| t.w.as_ptr().add(r * t.w_stride);
    let a = |c: usize| t.a.as_ptr().add(c * t.a_stride);
    let mut c = 0;
    if MC > 1 {
        while c + MC <= t.cols {
            let mut ac = [t.a.as_ptr(); MC];
            for (j, p) in ac.iter_mut().enumerate() {
                *p = a(c + j);
            }
            let mut r = 0;
            while r + MR <= t.rows {
                let mut rows = [t.w.as_ptr(); MR];
                for (i, p) in rows.iter_mut().enumerate() {
                    *p = w(r + i);
                }
                let res = K::run::<MR, MC>(nb, rows, ac, 0);
                for (i, row) in res.iter().enumerate() {
                    for (j, &v) in row.iter().enumerate() {
                        out[(c + j) * ld + r + i] = v;
                    }
                }
                r += MR;
            }
            while r < t.rows {
                let res = K::run::<1, MC>(nb, [w(r)], ac, 0);
                for (j, &v) in res[0].iter().enumerate() {
                    out[(c + j) * ld + r] = v;
                }
                r += 1;
            }
            c += MC;
        }
    }
    // Rows are read VR at a time, each a short run of bytes, which the
    // hardware prefetchers do not follow well: prefetch whole rows about
    // PREFETCH_BYTES ahead. (Measured on a 28 MB Q8_0 matrix, one thread:
    // 7 GB/s without, 19 GB/s at 4 rows, 40 GB/s at 16 KiB.)
    let pf = (PREFETCH_BYTES / t.w_stride.max(1)).max(VR) * t.w_stride;
    while c < t.cols {
        let ac = [a(c)];
        let mut r = 0;
        while K::INTERLEAVE_ROWS && r + VR <= t.rows {
            // Rows r..r + VR are read side by side: prefetch the next VR.
            let mut rows = [t.w.as_ptr(); VR];
            for (i, p) in rows.iter_mut().enumerate() {
                *p = w(r + i);
            }
            let res = K::run::<VR, 1>(nb, rows, ac, pf);
            for (i, row) in res.iter().enumerate() {
                out[c * ld + r + i] = row[0];
            }
            r += VR;
        }
        while r < t.rows {
            out[c * ld + r] = K::run::<1, 1>(nb, [w(r)], ac, 0)[0][0];
            r += 1;
        }
        c += 1;
    }
}

/// Checks the lengths a one-row dot relies on; returns the block count.
fn dot_blocks<K: Micro>(w: &[u8], a: &[u8]) -> usize {
    let nb = w.len() / K::W_BYTES;
    assert!(
        w.len() == nb * K::W_BYTES && a.len() == nb * K::A_BYTES,
        "dot: row lengths do not match"
    );
    nb
}

/// Checks the bounds a tile walk relies on (as `Tile::new` and
/// `Kernels::tile` did already).
fn check_tile<K: Micro>(t: &Tile<'_>, out: &[f32], ld: usize) {
    let (wb, ab) = (t.n_blocks * K::W_BYTES, t.n_blocks * K::A_BYTES);
    assert!(t.w_stride >= wb && t.a_stride >= ab && ld >= t.rows);
    assert!(t.rows == 0 || t.w.len() >= (t.rows - 1) * t.w_stride + wb);
    assert!(t.cols == 0 || t.a.len() >= (t.cols - 1) * t.a_stride + ab);
    assert!(t.rows == 0 || t.cols == 0 || out.len() >= (t.cols - 1) * ld + t.rows);
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn run_avx2<K: Micro>(nb: usize, w: *const u8, a: *const u8) -> f32 {
    K::run::<1, 1>(nb, [w], [a], 0)[0][0]
}

/// AVX2 has 16 vector registers: 2 x 2 tiles (4 x 1 for one column).
/// Measured against 2 x 3, 3 x 2 and 1 x 4 on 576 x 576 prefill: within a
/// few percent, 2 x 2 best or tied for Q4_1, Q8_0 and Q4_K.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn drive_avx2<K: Micro>(t: &Tile<'_>, out: &mut [f32], ld: usize) {
    drive::<K, 4, 2, 2>(t, out, ld)
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn run_vnni<K: Micro>(nb: usize, w: *const u8, a: *const u8) -> f32 {
    K::run::<1, 1>(nb, [w], [a], 0)[0][0]
}

/// AVX-512 has 32: 4 x 4 tiles. Measured against 2 x 4, 3 x 4, 2 x 6 and
/// 4 x 2: within 5%, 4 x 4 best or tied for Q8_0 and Q6_K.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn drive_vnni<K: Micro>(t: &Tile<'_>, out: &mut [f32], ld: usize) {
    drive::<K, 4, 4, 4>(t, out, ld)
}

/// A SIMD level: its integer products ([`IntOps`]) and its entry points,
/// the [`DotFn`] and [`TileFn`] of any kernel at this level.
pub(super) trait Level: IntOps {
    fn dot<K: Micro>(w: &[u8], a: &[u8]) -> f32;
    fn tile<K: Micro>(k: &Kernels, t: &Tile<'_>, out: &mut [f32], ld: usize);
}

impl Level for Avx2Ops {
    fn dot<K: Micro>(w: &[u8], a: &[u8]) -> f32 {
        let nb = dot_blocks::<K>(w, a);
        // SAFETY: `kernels` hands this function out only for `SimdLevel::Avx2`
        // after `is_supported` confirmed AVX2, FMA and F16C; `dot_blocks`
        // checked that both rows hold `nb` blocks.
        unsafe { run_avx2::<K>(nb, w.as_ptr(), a.as_ptr()) }
    }

    fn tile<K: Micro>(_: &Kernels, t: &Tile<'_>, out: &mut [f32], ld: usize) {
        check_tile::<K>(t, out, ld);
        // SAFETY: as in `dot` for the features; `check_tile` checked that
        // every row and every output the walk touches is in bounds.
        unsafe { drive_avx2::<K>(t, out, ld) }
    }
}

impl Level for VnniOps {
    fn dot<K: Micro>(w: &[u8], a: &[u8]) -> f32 {
        let nb = dot_blocks::<K>(w, a);
        // SAFETY: `kernels` hands this function out only for
        // `SimdLevel::Avx512Vnni` after `is_supported` confirmed every feature
        // `run_vnni` enables; `dot_blocks` checked the lengths.
        unsafe { run_vnni::<K>(nb, w.as_ptr(), a.as_ptr()) }
    }

    fn tile<K: Micro>(_: &Kernels, t: &Tile<'_>, out: &mut [f32], ld: usize) {
        check_tile::<K>(t, out, ld);
        // SAFETY: as in `dot` for the features; `check_tile` checked the
        // bounds.
        unsafe { drive_vnni::<K>(t, out, ld) }
    }
}

/// A family's row for one weight type: the type and its kernels at one level.
pub(super) type SimdRow = (GgmlType, (DotFn, TileFn));

/// The row of weight type `ty` computed by kernel `K` at level `L`.
pub(super) const fn row<L: Level, K: Micro>(ty: GgmlType) -> SimdRow {
    (ty, (L::dot::<K>, L::tile::<K>))
}

/// One SIMD level's kernels of every weight type, in [`WEIGHT_TYPES`]
/// order, from the families' rows (checked at compile time: see
/// [`by_weight_type`]).
const fn table<L: Level>() -> [(DotFn, TileFn); WEIGHT_TYPES.len()] {
    let (f, l, q) = (
        float::kernels::<L>(),
        legacy::kernels::<L>(),
        k::kernels::<L>(),
    );
    let families: [&[SimdRow]; 3] = [&f, &l, &q];
    by_weight_type(&families)
}

const AVX2: [(DotFn, TileFn); WEIGHT_TYPES.len()] = table::<Avx2Ops>();
const VNNI: [(DotFn, TileFn); WEIGHT_TYPES.len()] = table::<VnniOps>();

/// The SIMD kernels of `weight` at `level`, which the caller has checked
/// this CPU supports.
pub(super) fn kernels(weight: GgmlType, level: SimdLevel) -> Option<(DotFn, TileFn)> {
    assert!(
        level.is_supported(),
        "kernels: {level} is not supported here"
    );
    let t = weight_index(weight)?;
    match level {
        SimdLevel::Scalar => None,
        SimdLevel::Avx2 => Some(AVX2[t]),
        SimdLevel::Avx512Vnni => Some(VNNI[t]),
    }
}
