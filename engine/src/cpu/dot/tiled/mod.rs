//! The K-quant product of ggml's "tiled" matmul: what llama.cpp's CPU
//! backend computes for a Q2_K-Q6_K weight times 8 or more activation rows.
//!
//! ggml (the llama.cpp vendored by llama-cpp-sys-2 0.1.161) sends such a
//! `MUL_MAT` to `ggml_compute_forward_mul_mat_tiled` before its per-row
//! `vec_dot` loop (ggml-cpu.c:1269; tiled/tiled.cpp:1202-1223: src0 of a
//! K-quant or IQ type, weights not in a repack buffer, `src1->ne[1] >= 8`,
//! on unless `GGML_CPU_TILED_MM=0`); `MUL_MAT_ID` does the same per expert
//! with 8 or more routed rows (ggml-cpu.c:1679, tiled.cpp:1227-1245). The
//! activations are quantized per row to Q8_K as for `vec_dot`. The AVX2
//! micro-kernel (tiled/tiled-kernel.cpp:217-395, the one an AVX2+FMA build
//! without AVX-512 compiles) then computes, for each weight row, activation
//! row and 256-element block, in integers (exact: no `vpmaddubsw` pair
//! reaches i16's limit for these formats):
//!
//! - `s1 = sum_g sc_g * sum_{e in g} w_e * a_e` over the block's scale groups
//!   `g` (32 elements for Q4_K/Q5_K, 16 for Q2_K/Q3_K/Q6_K), `w_e` the signed
//!   weight value (Q6_K's `q - 32`, Q3_K's `q - 4`);
//! - `s2 = sum_g m_g * bsum_g` for the formats with mins (Q2_K, Q4_K, Q5_K),
//!   `bsum_g` the Q8_K activation sums of the group;
//!
//! then in f32, `d`/`dmin` the weight block's scales and `d_a` the
//! activation block's:
//!
//! ```text
//! res = d * (f32)s1                      (a rounded product)
//! res = fma(-dmin, (f32)s2, res)         (formats with mins)
//! out = fma(res, d_a, out)               (out starts at 0, blocks in order)
//! ```
//!
//! Each output element is its own chain of FMAs over the blocks, so neither
//! the tile shape nor the thread split changes a bit; ggml's 16 x 16
//! micro-tiles, its zero-padded ragged edges and its chunking only decide
//! which elements are computed together. This differs from `vec_dot` (eight
//! f32 lanes per row summed at the end), which ggml keeps for 1 to 7 rows.
//!
//! Here every format is decoded to unsigned codes `q_e` (`w_e = q_e - B`)
//! with a per-16 scale and a per-16 correction coefficient `k_g` (the min,
//! or `B * sc_g`), so that `s1 = sum_g sc_g * sum q_e a_e - [B] sum_g k_g
//! bsum_g` and `s2 = sum_g k_g bsum_g`: the same integers. [`dot_scalar`]
//! is the plain twin of the AVX2 kernel (in `tiled/x86.rs`).

use crate::quant::k::{scale_min_k4, scale_q3_k};
use crate::quant::{BlockQ2_K, BlockQ3_K, BlockQ4_K, BlockQ5_K, BlockQ6_K, BlockQ8_K, QK_K};
use crate::GgmlType;

use super::Rows;
use crate::simd::SimdLevel;

#[cfg(target_arch = "x86_64")]
mod x86;

/// The fewest activation rows for which ggml takes the tiled kernel
/// (`ggml_tiled_min_batch`, tiled.cpp:1190).
pub const MIN_ROWS: usize = 8;

/// Whether ggml's tiled kernel takes weights of type `ty` (of the types
/// this engine has kernels for: the K-quants).
pub fn takes(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(ty, Q2_K | Q3_K | Q4_K | Q5_K | Q6_K)
}

/// One weight block, decoded for the integer sums.
#[derive(Clone, Copy)]
pub(crate) struct Decoded {
    /// The unsigned codes, element order (`w_e = q_e - bias`).
    pub q: [u8; QK_K],
    /// Per 32-element chunk `k`: `sc[2k]` in the eight low i16 lanes and
    /// `sc[2k + 1]` in the eight high ones (the scales of its two 16-element
    /// halves), as `vpmaddwd` takes them against `vpmaddubsw`'s pairs.
    pub sc: [[i16; 16]; 8],
    /// Per 16-element group: the min (formats with mins) or `bias * sc_g`.
    pub k: [i16; 16],
    pub d: f32,
    pub dmin: f32,
}

impl Decoded {
    pub const ZERO: Decoded = Decoded {
        q: [0; QK_K],
        sc: [[0; 16]; 8],
        k: [0; 16],
        d: 0.0,
        dmin: 0.0,
    };
}

/// The per-format constants of the decoded form.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Format {
    /// Bytes per weight block.
    pub bytes: usize,
    /// Whether the block has mins (`s2`).
    pub has_min: bool,
}

pub(crate) fn format(ty: GgmlType) -> Option<Format> {
    use GgmlType::*;
    let (bytes, has_min) = match ty {
        Q2_K => (BlockQ2_K::BYTES, true),
        Q3_K => (BlockQ3_K::BYTES, false),
        Q4_K => (BlockQ4_K::BYTES, true),
        Q5_K => (BlockQ5_K::BYTES, true),
        Q6_K => (BlockQ6_K::BYTES, false),
        _ => return None,
    };
    Some(Format { bytes, has_min })
}

/// Per-16 scales `s16` spread to the chunk layout of [`Decoded::sc`].
#[inline(always)]
fn spread(s16: &[i16; 16]) -> [[i16; 16]; 8] {
    std::array::from_fn(|k| std::array::from_fn(|l| s16[2 * k + l / 8]))
}

/// The 4-bit fields of a Q4_K/Q5_K block in element order: each 32-byte
/// chunk holds 64 elements, the low nibbles first.
#[inline(always)]
fn nibbles(qs: &[u8; QK_K / 2], q: &mut [u8; QK_K]) {
    for j in 0..4 {
        for l in 0..32 {
            let b = qs[32 * j + l];
            q[64 * j + l] = b & 0xF;
            q[64 * j + 32 + l] = b >> 4;
        }
    }
}

/// The 2-bit fields of a Q2_K/Q3_K block: element `e` is field
/// `(e / 32) % 4` of `qs[32 * (e / 128) + e % 32]`.
#[inline(always)]
fn crumbs(qs: &[u8; QK_K / 4], q: &mut [u8; QK_K]) {
    for e in 0..QK_K {
        q[e] = (qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3;
    }
}

/// Decodes weight block `b` (of `ty`, one of [`takes`]'s) into `out`.
#[inline(always)]
pub(crate) fn decode(ty: GgmlType, b: &[u8], out: &mut Decoded) {
    use GgmlType::*;
    let mut s16 = [0i16; 16];
    match ty {
        Q4_K | Q5_K => {
            let (d, dmin, scales) = if ty == Q4_K {
                let x = BlockQ4_K::from_bytes(b.try_into().unwrap());
                nibbles(&x.qs, &mut out.q);
                (x.d, x.dmin, x.scales)
            } else {
                let x = BlockQ5_K::from_bytes(b.try_into().unwrap());
                nibbles(&x.qs, &mut out.q);
                for e in 0..QK_K {
                    out.q[e] |= ((x.qh[e % 32] >> (e / 32)) & 1) << 4;
                }
                (x.d, x.dmin, x.scales)
            };
            for g in 0..8 {
                let (sc, m) = scale_min_k4(g, &scales);
                s16[2 * g] = sc as i16;
                s16[2 * g + 1] = sc as i16;
                out.k[2 * g] = m as i16;
                out.k[2 * g + 1] = m as i16;
            }
            out.d = d.to_f32();
            out.dmin = dmin.to_f32();
        }
        Q6_K => {
            let x = BlockQ6_K::from_bytes(b.try_into().unwrap());
            for h in 0..2 {
                for i in 0..128 {
                    let l = x.ql[64 * h + i % 64];
                    let low = if i < 64 { l & 0xF } else { l >> 4 };
                    let high = (x.qh[32 * h + i % 32] >> (2 * (i / 32))) & 3;
                    out.q[128 * h + i] = low | (high << 4);
                }
            }
            s16 = x.scales.map(|s| s as i16);
            out.k = s16.map(|s| 32 * s);
            out.d = x.d.to_f32();
            out.dmin = 0.0;
        }
        Q3_K => {
            let x = BlockQ3_K::from_bytes(b.try_into().unwrap());
            crumbs(&x.qs, &mut out.q);
            for e in 0..QK_K {
                out.q[e] |= ((x.hmask[e % 32] >> (e / 32)) & 1) << 2;
            }
            s16 = std::array::from_fn(|g| scale_q3_k(g, &x.scales) as i16);
            out.k = s16.map(|s| 4 * s);
            out.d = x.d.to_f32();
            out.dmin = 0.0;
        }
        Q2_K => {
            let x = BlockQ2_K::from_bytes(b.try_into().unwrap());
            crumbs(&x.qs, &mut out.q);
            s16 = x.scales.map(|s| (s & 0xF) as i16);
            out.k = x.scales.map(|s| (s >> 4) as i16);
            out.d = x.d.to_f32();
            out.dmin = x.dmin.to_f32();
        }
        _ => unreachable!("tiled: {ty} is not a K-quant"),
    }
    out.sc = spread(&s16);
}

/// The block's `(s1, s2)` against one Q8_K activation block.
fn sums(w: &Decoded, has_min: bool, a: &BlockQ8_K) -> (i32, i32) {
    let mut dot = 0i32;
    for e in 0..QK_K {
        let sc = w.sc[e / 32][8 * ((e % 32) / 16)] as i32;
        dot += sc * (w.q[e] as i32 * a.qs[e] as i32);
    }
    let corr: i32 = (0..16).map(|g| w.k[g] as i32 * a.bsums[g] as i32).sum();
    if has_min {
        (dot, corr)
    } else {
        (dot - corr, 0)
    }
}

/// One block's step of the f32 chain (the epilogue of ggml's AVX2 kernel).
#[inline(always)]
pub(crate) fn step(acc: f32, d: f32, dmin: f32, has_min: bool, s1: i32, s2: i32, da: f32) -> f32 {
    let mut res = d * s1 as f32;
    if has_min {
        res = (-dmin).mul_add(s2 as f32, res);
    }
    res.mul_add(da, acc)
}

/// Weight row `w` (of `ty`) times Q8_K activation row `a` as ggml's tiled
/// kernel computes it: the scalar twin of the AVX2 kernel.
///
/// # Panics
/// When `ty` is not one of [`takes`]'s or the rows are not matching blocks.
pub fn dot_scalar(ty: GgmlType, w: &[u8], a: &[u8]) -> f32 {
    let f = format(ty).unwrap_or_else(|| panic!("tiled: {ty} is not a K-quant"));
    let nb = w.len() / f.bytes;
    assert!(
        w.len() == nb * f.bytes && a.len() == nb * BlockQ8_K::BYTES,
        "tiled: {} weight bytes and {} activation bytes are not matching blocks",
        w.len(),
        a.len()
    );
    let mut dec = Decoded::ZERO;
    let mut acc = 0.0f32;
    for (wb, ab) in w
        .chunks_exact(f.bytes)
        .zip(a.chunks_exact(BlockQ8_K::BYTES))
    {
        decode(ty, wb, &mut dec);
        let y = BlockQ8_K::from_bytes(ab.try_into().unwrap());
        let (s1, s2) = sums(&dec, f.has_min, &y);
        acc = step(acc, dec.d, dec.dmin, f.has_min, s1, s2, y.d);
    }
    acc
}

/// The weight rows of a product, decoded once (a task decodes its chunk
/// of rows, then meets every group of activation rows with it).
pub(crate) struct DecodedRows {
    pub f: Format,
    pub rows: usize,
    pub n_blocks: usize,
    /// Row `r`'s block `b` at `r * n_blocks + b`.
    pub blocks: Vec<Decoded>,
}

impl DecodedRows {
    /// `w.count` rows of `n_blocks` blocks of the K-quant `ty`.
    ///
    /// # Panics
    /// When `ty` is not one of [`takes`]'s or a row runs past `w.data`.
    pub fn new(ty: GgmlType, w: Rows<'_>, n_blocks: usize) -> DecodedRows {
        let f = format(ty).unwrap_or_else(|| panic!("tiled: {ty} is not a K-quant"));
        let rb = n_blocks * f.bytes;
        assert!(w.stride >= rb && (w.count == 0 || w.data.len() >= (w.count - 1) * w.stride + rb));
        let mut blocks = vec![Decoded::ZERO; w.count * n_blocks];
        for (r, dr) in blocks.chunks_exact_mut(n_blocks.max(1)).enumerate() {
            let row = &w.data[r * w.stride..r * w.stride + rb];
            for (d, b) in dr.iter_mut().zip(row.chunks_exact(f.bytes)) {
                decode(ty, b, d);
            }
        }
        DecodedRows {
            f,
            rows: w.count,
            n_blocks,
            blocks,
        }
    }

    /// Fills `out[c * ld + r]` for every decoded row `r` and Q8_K
    /// activation row `c` of `a`, with the kernel of `level` (the same
    /// bits at every level).
    ///
    /// # Panics
    /// When a row of `a` or the output runs past its buffer.
    pub fn tile(&self, level: SimdLevel, a: Rows<'_>, out: &mut [f32], ld: usize) {
        let ab = self.n_blocks * BlockQ8_K::BYTES;
        assert!(a.stride >= ab && (a.count == 0 || a.data.len() >= (a.count - 1) * a.stride + ab));
        assert!(ld >= self.rows);
        assert!(self.rows == 0 || a.count == 0 || out.len() >= (a.count - 1) * ld + self.rows);
        if self.rows == 0 || self.n_blocks == 0 {
            for c in 0..a.count {
                out[c * ld..c * ld + self.rows].fill(0.0);
            }
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if level != SimdLevel::Scalar && level.is_supported() {
            x86::tiled_tile(self, a, out, ld);
            return;
        }
        let _ = level;
        for c in 0..a.count {
            let arow = &a.data[c * a.stride..c * a.stride + ab];
            for r in 0..self.rows {
                let mut acc = 0.0f32;
                let dr = &self.blocks[r * self.n_blocks..(r + 1) * self.n_blocks];
                for (dec, yb) in dr.iter().zip(arow.chunks_exact(BlockQ8_K::BYTES)) {
                    let y = BlockQ8_K::from_bytes(yb.try_into().unwrap());
                    let (s1, s2) = sums(dec, self.f.has_min, &y);
                    acc = step(acc, dec.d, dec.dmin, self.f.has_min, s1, s2, y.d);
                }
                out[c * ld + r] = acc;
            }
        }
    }
}
