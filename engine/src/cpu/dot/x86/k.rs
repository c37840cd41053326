//! The super-block formats against Q8_K: ggml's AVX2
//! `ggml_vec_dot_{q2,q3,q4,q5,q6}_K_q8_K`, for `R` rows by `C` columns.
//!
//! Per block and output: `vpmaddubsw` products of the unsigned weight values
//! with the activation bytes, weighted by the group scales into eight i32
//! lanes (lane `l` of every 32-byte chunk holds its bytes `4l..4l + 4`),
//! converted to f32 and FMA'd into an 8-lane accumulator with
//! `d_x * d_y`. The mins (Q2_K, Q4_K, Q5_K) and Q6_K's offset of 32 go
//! through Q8_K's group sums exactly where ggml puts them.

use std::arch::x86_64::*;
use std::marker::PhantomData;

use super::{
    f16_splat, f16x2_at, f32_le, hsum_all, hsum_float_4, load128, load256, prefetch, row, u32_le,
    IntOps, Level, Micro, SimdRow,
};
use crate::ggml_type::GgmlType;

/// This family's kernels at level `L`, one row per weight type.
pub(super) const fn kernels<L: Level>() -> [SimdRow; 5] {
    [
        row::<L, Q2K<L>>(GgmlType::Q2_K),
        row::<L, Q3K<L>>(GgmlType::Q3_K),
        row::<L, Q4K<L>>(GgmlType::Q4_K),
        row::<L, Q5K<L>>(GgmlType::Q5_K),
        row::<L, Q6K<L>>(GgmlType::Q6_K),
    ]
}

pub(crate) struct Q2K<I>(PhantomData<I>);
pub(crate) struct Q3K<I>(PhantomData<I>);
pub(crate) struct Q4K<I>(PhantomData<I>);
pub(crate) struct Q5K<I>(PhantomData<I>);
pub(crate) struct Q6K<I>(PhantomData<I>);

/// Q8_K: `d` (f32), 256 quants, 16 group sums (i16).
const QK8: usize = 292;
const Q8_QS: usize = 4;
const Q8_BSUMS: usize = 260;

#[inline(always)]
unsafe fn u32_at(p: *const u8, i: usize) -> u32 {
    u32_le(p.add(4 * i))
}

/// The activation block `ib` of each column: (`d`, pointer to its quants).
#[inline(always)]
unsafe fn act_blocks<const C: usize>(a: [*const u8; C], ib: usize) -> [(f32, *const u8); C] {
    let mut ys = [(0.0f32, a[0]); C];
    for c in 0..C {
        let p = a[c].add(ib * QK8);
        ys[c] = (f32_le(p), p);
    }
    ys
}

/// Each column's eight 32-element group sums (pairs of Q8_K's 16-element
/// sums, `vphaddw` as ggml).
#[inline(always)]
unsafe fn group_sums<const C: usize>(ys: &[(f32, *const u8); C]) -> [__m128i; C] {
    let mut q8s = [_mm_setzero_si128(); C];
    for c in 0..C {
        let s = load256(ys[c].1.add(Q8_BSUMS));
        q8s[c] = _mm_hadd_epi16(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    }
    q8s
}

/// An i16 vector holding `lo` in its eight low lanes and `hi` in the eight
/// high ones (a scale per 16-element group of a 32-byte chunk).
#[inline(always)]
unsafe fn scale_pair(lo: i16, hi: i16) -> __m256i {
    _mm256_set_m128i(_mm_set1_epi16(hi), _mm_set1_epi16(lo))
}

/// ggml's unpacking of Q4_K/Q5_K's 12 scale bytes: the bytes of words 0-1
/// are the eight 6-bit scales, those of words 2-3 the eight mins.
#[inline(always)]
unsafe fn k4_scales_mins(p: *const u8) -> [u32; 4] {
    const KMASK1: u32 = 0x3f3f3f3f;
    const KMASK2: u32 = 0x0f0f0f0f;
    const KMASK3: u32 = 0x03030303;
    let mut u = [u32_at(p, 0), u32_at(p, 1), u32_at(p, 2), 0];
    u[3] = ((u[2] >> 4) & KMASK2) | (((u[1] >> 6) & KMASK3) << 4);
    let uaux = u[1] & KMASK1;
    u[1] = (u[2] & KMASK2) | (((u[0] >> 6) & KMASK3) << 4);
    u[2] = uaux;
    u[0] &= KMASK1;
    u
}

/// Q4_K: eight groups of 32, `d * sc * q - dmin * m`; the mins part goes
/// into a 4-lane accumulator of its own, added after the lane sum.
impl<I: IntOps> Micro for Q4K<I> {
    const W_BYTES: usize = 144;
    const A_BYTES: usize = QK8;
    const INTERLEAVE_ROWS: bool = false;

    #[inline(always)]
    unsafe fn run<const R: usize, const C: usize>(
        nb: usize,
        w: [*const u8; R],
        a: [*const u8; C],
        pf: usize,
    ) -> [[f32; C]; R] {
        let m4 = _mm256_set1_epi8(0xF);
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        let mut acc_m = [[_mm_setzero_ps(); C]; R];
        for ib in 0..nb {
            let ys = act_blocks(a, ib);
            let q8s = group_sums(&ys);
            for r in 0..R {
                let p = w[r].add(ib * 144);
                prefetch(p, pf, 144);
                let (xd, xdmin) = f16x2_at(p);
                let u = k4_scales_mins(p.add(4));
                let sc: [u8; 8] = std::mem::transmute([u[0], u[1]]);
                let mins = _mm256_extracti128_si256(
                    _mm256_cvtepu8_epi16(_mm_set_epi32(
                        u[3] as i32,
                        u[2] as i32,
                        u[1] as i32,
                        u[0] as i32,
                    )),
                    1,
                );
                let mut sumi = [_mm256_setzero_si256(); C];
                for j in 0..4 {
                    let bits = load256(p.add(16 + 32 * j));
                    let q4l = _mm256_and_si256(bits, m4);
                    let q4h = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
                    let (sl, sh) = (
                        _mm256_set1_epi16(sc[2 * j] as i16),
                        _mm256_set1_epi16(sc[2 * j + 1] as i16),
                    );
                    for c in 0..C {
                        let q8 = ys[c].1.add(Q8_QS + 64 * j);
                        let pl = _mm256_maddubs_epi16(q4l, load256(q8));
                        let ph = _mm256_maddubs_epi16(q4h, load256(q8.add(32)));
                        sumi[c] = I::dot2(I::dot2(sumi[c], sl, pl), sh, ph);
                    }
                }
                for c in 0..C {
                    let yd = ys[c].0;
                    let dmin = -yd * xdmin;
                    let prod = _mm_madd_epi16(mins, q8s[c]);
                    acc_m[r][c] =
                        _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m[r][c]);
                    let d = _mm256_set1_ps(yd * xd);
                    acc[r][c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi[c]), acc[r][c]);
                }
            }
        }
        let mut out = hsum_all(&acc);
        for r in 0..R {
            for c in 0..C {
                out[r][c] += hsum_float_4(acc_m[r][c]);
            }
        }
        out
    }
}

impl<I: IntOps> Micro for Q5K<I> {
    const W_BYTES: usize = 176;
    const A_BYTES: usize = QK8;
    const INTERLEAVE_ROWS: bool = false;

    #[inline(always)]
    unsafe fn run<const R: usize, const C: usize>(
        nb: usize,
        w: [*const u8; R],
        a: [*const u8; C],
        pf: usize,
    ) -> [[f32; C]; R] {
        let m4 = _mm256_set1_epi8(0xF);
        let bit4 = _mm256_set1_epi8(0x10);
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        let mut summs = [[0.0f32; C]; R];
        for ib in 0..nb {
            let ys = act_blocks(a, ib);
            let q8s = group_sums(&ys);
            for r in 0..R {
                let p = w[r].add(ib * 176);
                prefetch(p, pf, 176);
                let (xd, xdmin) = f16x2_at(p);
                let u = k4_scales_mins(p.add(4));
                let sc: [u8; 8] = std::mem::transmute([u[0], u[1]]);
                let mins = _mm256_extracti128_si256(
                    _mm256_cvtepu8_epi16(_mm_set_epi32(
                        u[3] as i32,
                        u[2] as i32,
                        u[1] as i32,
                        u[0] as i32,
                    )),
                    1,
                );
                // Bit k of each qh byte is the fifth bit of chunk k: shift
                // it down one place per chunk and move it to bit 4.
                let mut h = load256(p.add(16));
                let mut sumi = [_mm256_setzero_si256(); C];
                for j in 0..4 {
                    let bits = load256(p.add(48 + 32 * j));
                    let q0 = _mm256_add_epi8(
                        _mm256_and_si256(bits, m4),
                        _mm256_and_si256(_mm256_slli_epi16(h, 4), bit4),
                    );
                    h = _mm256_srli_epi16(h, 1);
                    let q1 = _mm256_add_epi8(
                        _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4),
                        _mm256_and_si256(_mm256_slli_epi16(h, 4), bit4),
                    );
                    h = _mm256_srli_epi16(h, 1);
                    let (s0, s1) = (
                        _mm256_set1_epi16(sc[2 * j] as i16),
                        _mm256_set1_epi16(sc[2 * j + 1] as i16),
                    );
                    for c in 0..C {
                        let q8 = ys[c].1.add(Q8_QS + 64 * j);
                        let p0 = _mm256_maddubs_epi16(q0, load256(q8));
                        let p1 = _mm256_maddubs_epi16(q1, load256(q8.add(32)));
                        sumi[c] = I::dot2(I::dot2(sumi[c], s0, p0), s1, p1);
                    }
                }
                for c in 0..C {
                    let yd = ys[c].0;
                    let dmin = -yd * xdmin;
                    let prod = _mm_madd_epi16(mins, q8s[c]);
                    let z = _mm_setzero_si128();
                    let hsum = _mm_cvtsi128_si32(_mm_hadd_epi32(_mm_hadd_epi32(prod, z), z));
                    // ggml: `summs += dmin * hsum`, contracted to an FMA.
                    summs[r][c] = dmin.mul_add(hsum as f32, summs[r][c]);
                    let d = _mm256_set1_ps(yd * xd);
                    acc[r][c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi[c]), acc[r][c]);
                }
            }
        }
        let mut out = hsum_all(&acc);
        for r in 0..R {
            for c in 0..C {
                out[r][c] += summs[r][c];
            }
        }
        out
    }
}

impl<I: IntOps> Micro for Q6K<I> {
    const W_BYTES: usize = 210;
    const A_BYTES: usize = QK8;
    const INTERLEAVE_ROWS: bool = false;

    #[inline(always)]
    unsafe fn run<const R: usize, const C: usize>(
        nb: usize,
        w: [*const u8; R],
        a: [*const u8; C],
        pf: usize,
    ) -> [[f32; C]; R] {
        let m3 = _mm256_set1_epi8(3);
        let m15 = _mm256_set1_epi8(15);
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        for ib in 0..nb {
            let ys = act_blocks(a, ib);
            for r in 0..R {
                let p = w[r].add(ib * 210);
                prefetch(p, pf, 210);
                let xd = f16_splat(p.add(208));
                let scales = load128(p.add(192));
                let scales16 = _mm256_cvtepi8_epi16(scales);
                // The offset of 32: 32 * sum(bsum * scale) per pair of groups.
                let mut sumi = [_mm256_setzero_si256(); C];
                for c in 0..C {
                    let bsums = load256(ys[c].1.add(Q8_BSUMS));
                    let sub = _mm256_slli_epi32(_mm256_madd_epi16(bsums, scales16), 5);
                    sumi[c] = _mm256_sub_epi32(sumi[c], sub);
                }
                for j in 0..2 {
                    let b1 = load256(p.add(64 * j));
                    let b2 = load256(p.add(64 * j + 32));
                    let hb = load256(p.add(128 + 32 * j));
                    let q = [
                        _mm256_or_si256(
                            _mm256_and_si256(b1, m15),
                            _mm256_slli_epi16(_mm256_and_si256(hb, m3), 4),
                        ),
                        _mm256_or_si256(
                            _mm256_and_si256(b2, m15),
                            _mm256_slli_epi16(_mm256_and_si256(hb, _mm256_set1_epi8(12)), 2),
                        ),
                        _mm256_or_si256(
                            _mm256_and_si256(_mm256_srli_epi16(b1, 4), m15),
                            _mm256_and_si256(hb, _mm256_set1_epi8(48)),
                        ),
                        _mm256_or_si256(
                            _mm256_and_si256(_mm256_srli_epi16(b2, 4), m15),
                            _mm256_srli_epi16(_mm256_and_si256(hb, _mm256_set1_epi8(-64)), 2),
                        ),
                    ];
                    for (k, &qk) in q.iter().enumerate() {
                        let g = 2 * (4 * j + k) as i64;
                        let shuf =
                            _mm_set_epi64x((g + 1) * 0x0101010101010101, g * 0x0101010101010101);
                        let sv = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, shuf));
                        for c in 0..C {
                            let q8 = load256(ys[c].1.add(Q8_QS + 128 * j + 32 * k));
                            sumi[c] = I::dot2(sumi[c], sv, _mm256_maddubs_epi16(qk, q8));
                        }
                    }
                }
                for c in 0..C {
                    let d = _mm256_mul_ps(_mm256_set1_ps(ys[c].0), xd);
                    acc[r][c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi[c]), acc[r][c]);
                }
            }
        }
        hsum_all(&acc)
    }
}

impl<I: IntOps> Micro for Q2K<I> {
    const W_BYTES: usize = 84;
    const A_BYTES: usize = QK8;
    const INTERLEAVE_ROWS: bool = false;

    #[inline(always)]
    unsafe fn run<const R: usize, const C: usize>(
        nb: usize,
        w: [*const u8; R],
        a: [*const u8; C],
        pf: usize,
    ) -> [[f32; C]; R] {
        let m3 = _mm256_set1_epi8(3);
        let m4 = _mm_set1_epi8(0xF);
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        for ib in 0..nb {
            let ys = act_blocks(a, ib);
            for r in 0..R {
                let p = w[r].add(ib * 84);
                prefetch(p, pf, 84);
                let (xd, xdmin) = f16x2_at(p.add(80));
                let ms = load128(p);
                let mins = _mm256_cvtepi8_epi16(_mm_and_si128(_mm_srli_epi16(ms, 4), m4));
                let sc: [u8; 16] = std::mem::transmute(_mm_and_si128(ms, m4));
                let mut sumi = [_mm256_setzero_si256(); C];
                for j in 0..2 {
                    let mut bits = load256(p.add(16 + 32 * j));
                    for k in 0..4 {
                        let q2 = _mm256_and_si256(bits, m3);
                        bits = _mm256_srli_epi16(bits, 2);
                        let g = 8 * j + 2 * k;
                        let sv = scale_pair(sc[g] as i16, sc[g + 1] as i16);
                        for c in 0..C {
                            let q8 = load256(ys[c].1.add(Q8_QS + 128 * j + 32 * k));
                            sumi[c] = I::dot2(sumi[c], sv, _mm256_maddubs_epi16(q2, q8));
                        }
                    }
                }
                for c in 0..C {
                    let yd = ys[c].0;
                    let dmin = -yd * xdmin;
                    let prod = _mm256_madd_epi16(mins, load256(ys[c].1.add(Q8_BSUMS)));
                    let am =
                        _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(prod), acc[r][c]);
                    let d = _mm256_set1_ps(yd * xd);
                    acc[r][c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi[c]), am);
                }
            }
        }
        hsum_all(&acc)
    }
}

impl<I: IntOps> Micro for Q3K<I> {
    const W_BYTES: usize = 110;
    const A_BYTES: usize = QK8;
    const INTERLEAVE_ROWS: bool = false;

    #[inline(always)]
    unsafe fn run<const R: usize, const C: usize>(
        nb: usize,
        w: [*const u8; R],
        a: [*const u8; C],
        pf: usize,
    ) -> [[f32; C]; R] {
        const KMASK1: u32 = 0x03030303;
        const KMASK2: u32 = 0x0f0f0f0f;
        let m3 = _mm256_set1_epi8(3);
        let one = _mm256_set1_epi8(1);
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        for ib in 0..nb {
            let ys = act_blocks(a, ib);
            for r in 0..R {
                let p = w[r].add(ib * 110);
                prefetch(p, pf, 110);
                let xd = f16_splat(p.add(108));
                // ggml's unpacking of the sixteen 6-bit scales, minus 32.
                let aux = [
                    u32_at(p.add(96), 0),
                    u32_at(p.add(96), 1),
                    u32_at(p.add(96), 2),
                ];
                let words = [
                    (aux[0] & KMASK2) | ((aux[2] & KMASK1) << 4),
                    (aux[1] & KMASK2) | (((aux[2] >> 2) & KMASK1) << 4),
                    ((aux[0] >> 4) & KMASK2) | (((aux[2] >> 4) & KMASK1) << 4),
                    ((aux[1] >> 4) & KMASK2) | (((aux[2] >> 6) & KMASK1) << 4),
                ];
                let bytes: [u8; 16] = std::mem::transmute(words);
                let mut sc = [0i8; 16];
                for (s, &b) in sc.iter_mut().zip(&bytes) {
                    *s = (b as i8).wrapping_sub(32);
                }
                // Bit k of each hmask byte is the high bit of chunk k; a
                // clear bit means "minus 4".
                let mut h = load256(p);
                let mut sumi = [_mm256_setzero_si256(); C];
                for j in 0..2 {
                    let mut bits = load256(p.add(32 + 32 * j));
                    for k in 0..4 {
                        let q3l = _mm256_and_si256(bits, m3);
                        bits = _mm256_srli_epi16(bits, 2);
                        let q3h = _mm256_slli_epi16(_mm256_andnot_si256(h, one), 2);
                        h = _mm256_srli_epi16(h, 1);
                        let g = 8 * j + 2 * k;
                        let sv = scale_pair(sc[g] as i16, sc[g + 1] as i16);
                        for c in 0..C {
                            let q8 = load256(ys[c].1.add(Q8_QS + 128 * j + 32 * k));
                            let p16 = _mm256_sub_epi16(
                                _mm256_maddubs_epi16(q3l, q8),
                                _mm256_maddubs_epi16(q3h, q8),
                            );
                            sumi[c] = I::dot2(sumi[c], sv, p16);
                        }
                    }
                }
                for c in 0..C {
                    let d = _mm256_mul_ps(_mm256_set1_ps(ys[c].0), xd);
                    acc[r][c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi[c]), acc[r][c]);
                }
            }
        }
        hsum_all(&acc)
    }
}
