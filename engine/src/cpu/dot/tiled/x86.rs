//! ggml's tiled K-quant kernel on AVX2 (see `dot/tiled/mod.rs` for its
//! arithmetic): four weight rows against one activation row at a time,
//! each weight block decoded once per pass over up to [`COLS`] activation
//! rows. The integer sums are `vpmaddubsw` (unsigned codes by activation
//! bytes) then `vpmaddwd` by the per-16 scales, folded across lanes with
//! `vphaddd`; the f32 steps run on the four rows' lanes of an `__m128`,
//! one `vfmadd` chain per output, exactly as the scalar twin.

use std::arch::x86_64::*;

use super::super::x86::{f32_le, load256};
use super::super::Rows;
use super::{Decoded, DecodedRows};
use crate::quant::BlockQ8_K;

/// Weight rows per pass (each with its own integer accumulator).
const ROWS: usize = 4;
/// Activation rows per pass over a weight block.
const COLS: usize = 64;

/// Q8_K: `d` (f32), 256 quants, 16 group sums (i16).
const Q8_QS: usize = 4;
const Q8_BSUMS: usize = 260;

/// `dec`'s rows against the Q8_K rows of `a` (bounds checked by
/// `DecodedRows::tile`, which calls this only where AVX2 and FMA run).
pub(in crate::cpu::dot) fn tiled_tile(dec: &DecodedRows, a: Rows<'_>, out: &mut [f32], ld: usize) {
    // SAFETY: `DecodedRows::tile` calls this only for a supported SIMD
    // level above scalar (every one has AVX2, FMA and F16C), after checking
    // that every activation row and output is in bounds and that there is
    // at least one row and one block.
    unsafe {
        if dec.f.has_min {
            run::<true>(dec, a, out, ld)
        } else {
            run::<false>(dec, a, out, ld)
        }
    }
}

/// Lane `i` of the result: the sum of the eight i32 lanes of `v[i]`.
#[inline(always)]
unsafe fn hsum4(v: &[__m256i; ROWS]) -> __m128i {
    let h01 = _mm256_hadd_epi32(v[0], v[1]);
    let h23 = _mm256_hadd_epi32(v[2], v[3]);
    let h = _mm256_hadd_epi32(h01, h23);
    _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1))
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn run<const MIN: bool>(dec: &DecodedRows, a: Rows<'_>, out: &mut [f32], ld: usize) {
    let nb = dec.n_blocks;
    let mut acc = [_mm_setzero_ps(); COLS];
    let mut c0 = 0;
    while c0 < a.count {
        let nc = COLS.min(a.count - c0);
        let mut r0 = 0;
        while r0 < dec.rows {
            let nr = ROWS.min(dec.rows - r0);
            acc[..nc].fill(_mm_setzero_ps());
            for b in 0..nb {
                // Rows past the last repeat it (computed, not stored).
                let w: [&Decoded; ROWS] =
                    std::array::from_fn(|i| &dec.blocks[(r0 + i.min(nr - 1)) * nb + b]);
                let d = _mm_setr_ps(w[0].d, w[1].d, w[2].d, w[3].d);
                let dmin = _mm_setr_ps(w[0].dmin, w[1].dmin, w[2].dmin, w[3].dmin);
                for (c, acc) in acc[..nc].iter_mut().enumerate() {
                    let ap = a
                        .data
                        .as_ptr()
                        .add((c0 + c) * a.stride + b * BlockQ8_K::BYTES);
                    let mut s = [_mm256_setzero_si256(); ROWS];
                    for k in 0..8 {
                        let av = load256(ap.add(Q8_QS + 32 * k));
                        for i in 0..ROWS {
                            let p = _mm256_maddubs_epi16(load256(w[i].q.as_ptr().add(32 * k)), av);
                            let sc = load256(w[i].sc[k].as_ptr() as *const u8);
                            s[i] = _mm256_add_epi32(s[i], _mm256_madd_epi16(p, sc));
                        }
                    }
                    let bs = load256(ap.add(Q8_BSUMS));
                    let mut m = [_mm256_setzero_si256(); ROWS];
                    for i in 0..ROWS {
                        m[i] = _mm256_madd_epi16(bs, load256(w[i].k.as_ptr() as *const u8));
                        if !MIN {
                            s[i] = _mm256_sub_epi32(s[i], m[i]);
                        }
                    }
                    let mut res = _mm_mul_ps(d, _mm_cvtepi32_ps(hsum4(&s)));
                    if MIN {
                        res = _mm_fnmadd_ps(dmin, _mm_cvtepi32_ps(hsum4(&m)), res);
                    }
                    *acc = _mm_fmadd_ps(res, _mm_set1_ps(f32_le(ap)), *acc);
                }
            }
            for (c, acc) in acc[..nc].iter().enumerate() {
                let v: [f32; ROWS] = std::mem::transmute(*acc);
                let o = (c0 + c) * ld + r0;
                out[o..o + nr].copy_from_slice(&v[..nr]);
            }
            r0 += ROWS;
        }
        c0 += COLS;
    }
}
