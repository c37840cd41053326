//! The 256-element super-block formats (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K):
//! layouts as ggml-common.h declares them, byte (de)serialisation, and
//! dequantization following ggml's `dequantize_row_*` formulas operation for
//! operation.

use std::mem::size_of;

use half::f16;

use super::bytes::{f16_at, i8s, put, take, u8s};
use super::Codec;

/// This family's types: block struct, dequantization (here) and reference
/// quantizer (`k_quantize.rs`), one row each.
pub(super) const CODECS: [Codec; 6] = [
    block_codec!(Q2_K, BlockQ2_K),
    block_codec!(Q3_K, BlockQ3_K),
    block_codec!(Q4_K, BlockQ4_K),
    block_codec!(Q5_K, BlockQ5_K),
    block_codec!(Q6_K, BlockQ6_K),
    block_codec!(Q8_K, BlockQ8_K),
];

/// Elements in a super-block.
pub const QK_K: usize = 256;
/// Bytes of packed 6-bit scales and mins in Q4_K and Q5_K.
pub const K_SCALE_SIZE: usize = 12;

/// Q2_K: 16 groups of 16; `x = d * sc * q - dmin * m`, 2-bit `q`, 4-bit
/// `sc` (low nibble of `scales[g]`) and `m` (high nibble).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ2_K {
    pub scales: [u8; QK_K / 16],
    pub qs: [u8; QK_K / 4],
    pub d: f16,
    pub dmin: f16,
}
const _: () = assert!(size_of::<BlockQ2_K>() == 84);
const _: () = assert!(size_of::<BlockQ2_K>() == BlockQ2_K::BYTES);

/// Q3_K: 16 groups of 16; `x = d * (sc - 32) * (q - 4)`, 3-bit `q` (low two
/// bits in `qs`, the third in `hmask`, set meaning "no -4"), 6-bit `sc`.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ3_K {
    pub hmask: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 4],
    pub scales: [u8; 12],
    pub d: f16,
}
const _: () = assert!(size_of::<BlockQ3_K>() == 110);
const _: () = assert!(size_of::<BlockQ3_K>() == BlockQ3_K::BYTES);

/// Q4_K: 8 groups of 32; `x = d * sc * q - dmin * m`, 4-bit `q`, 6-bit `sc`
/// and `m` packed in `scales` (see [`scale_min_k4`]).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ4_K {
    pub d: f16,
    pub dmin: f16,
    pub scales: [u8; K_SCALE_SIZE],
    pub qs: [u8; QK_K / 2],
}
const _: () = assert!(size_of::<BlockQ4_K>() == 144);
const _: () = assert!(size_of::<BlockQ4_K>() == BlockQ4_K::BYTES);

/// Q5_K: as Q4_K with a fifth bit per element in `qh`.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ5_K {
    pub d: f16,
    pub dmin: f16,
    pub scales: [u8; K_SCALE_SIZE],
    pub qh: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 2],
}
const _: () = assert!(size_of::<BlockQ5_K>() == 176);
const _: () = assert!(size_of::<BlockQ5_K>() == BlockQ5_K::BYTES);

/// Q6_K: 16 groups of 16; `x = d * sc * (q - 32)`, 6-bit `q` (low four bits
/// in `ql`, high two in `qh`), signed 8-bit `sc`.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ6_K {
    pub ql: [u8; QK_K / 2],
    pub qh: [u8; QK_K / 4],
    pub scales: [i8; QK_K / 16],
    pub d: f16,
}
const _: () = assert!(size_of::<BlockQ6_K>() == 210);
const _: () = assert!(size_of::<BlockQ6_K>() == BlockQ6_K::BYTES);

/// Q8_K (activations): `x = d * q` with an f32 `d`, and the sums of each
/// group of 16 `q` in `bsums`.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ8_K {
    pub d: f32,
    pub qs: [i8; QK_K],
    pub bsums: [i16; QK_K / 16],
}
const _: () = assert!(size_of::<BlockQ8_K>() == 292);
const _: () = assert!(size_of::<BlockQ8_K>() == BlockQ8_K::BYTES);

/// The 6-bit scale and min of group `j` (0..8) from Q4_K/Q5_K `scales`
/// (ggml's `get_scale_min_k4`).
#[inline]
pub fn scale_min_k4(j: usize, q: &[u8; K_SCALE_SIZE]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// The 6-bit scale of group `j` (0..16) from Q3_K `scales`, minus 32.
#[inline]
pub fn scale_q3_k(j: usize, s: &[u8; 12]) -> i8 {
    let low = if j < 8 { s[j] & 0xF } else { s[j - 8] >> 4 };
    let high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    (low | (high << 4)) as i8 - 32
}

impl BlockQ2_K {
    pub const BYTES: usize = 84;
    pub const ELEMS: usize = QK_K;

    pub fn from_bytes(b: &[u8; BlockQ2_K::BYTES]) -> Self {
        BlockQ2_K {
            scales: take(b, 0),
            qs: take(b, 16),
            d: f16_at(b, 80),
            dmin: f16_at(b, 82),
        }
    }

    pub fn to_bytes(&self) -> [u8; BlockQ2_K::BYTES] {
        let mut b = [0u8; BlockQ2_K::BYTES];
        put(&mut b, 0, &self.scales);
        put(&mut b, 16, &self.qs);
        put(&mut b, 80, &self.d.to_le_bytes());
        put(&mut b, 82, &self.dmin.to_le_bytes());
        b
    }

    pub fn dequantize(&self, y: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        let min = self.dmin.to_f32();
        let mut out = 0;
        let mut is = 0;
        for half in 0..2 {
            let q = &self.qs[32 * half..32 * half + 32];
            for shift in [0, 2, 4, 6] {
                for sub in 0..2 {
                    let sc = self.scales[is];
                    is += 1;
                    let dl = d * (sc & 0xF) as f32;
                    let ml = min * (sc >> 4) as f32;
                    for &qv in &q[16 * sub..16 * sub + 16] {
                        y[out] = dl * ((qv >> shift) & 3) as f32 - ml;
                        out += 1;
                    }
                }
            }
        }
    }
}

impl BlockQ3_K {
    pub const BYTES: usize = 110;
    pub const ELEMS: usize = QK_K;

    pub fn from_bytes(b: &[u8; BlockQ3_K::BYTES]) -> Self {
        BlockQ3_K {
            hmask: take(b, 0),
            qs: take(b, 32),
            scales: take(b, 96),
            d: f16_at(b, 108),
        }
    }

    pub fn to_bytes(&self) -> [u8; BlockQ3_K::BYTES] {
        let mut b = [0u8; BlockQ3_K::BYTES];
        put(&mut b, 0, &self.hmask);
        put(&mut b, 32, &self.qs);
        put(&mut b, 96, &self.scales);
        put(&mut b, 108, &self.d.to_le_bytes());
        b
    }

    pub fn dequantize(&self, y: &mut [f32; QK_K]) {
        let d_all = self.d.to_f32();
        let mut out = 0;
        let mut is = 0;
        // The high bit of element e is bit e / 32 of hmask[e % 32].
        let mut m: u8 = 1;
        for half in 0..2 {
            let q = &self.qs[32 * half..32 * half + 32];
            for shift in [0, 2, 4, 6] {
                for sub in 0..2 {
                    let dl = d_all * scale_q3_k(is, &self.scales) as f32;
                    is += 1;
                    let group = 16 * sub..16 * sub + 16;
                    for (&qv, &hv) in q[group.clone()].iter().zip(&self.hmask[group]) {
                        let low = ((qv >> shift) & 3) as i8;
                        let minus = if hv & m != 0 { 0 } else { 4 };
                        y[out] = dl * (low - minus) as f32;
                        out += 1;
                    }
                }
                m = m.wrapping_shl(1);
            }
        }
    }
}

impl BlockQ4_K {
    pub const BYTES: usize = 144;
    pub const ELEMS: usize = QK_K;

    pub fn from_bytes(b: &[u8; BlockQ4_K::BYTES]) -> Self {
        BlockQ4_K {
            d: f16_at(b, 0),
            dmin: f16_at(b, 2),
            scales: take(b, 4),
            qs: take(b, 16),
        }
    }

    pub fn to_bytes(&self) -> [u8; BlockQ4_K::BYTES] {
        let mut b = [0u8; BlockQ4_K::BYTES];
        put(&mut b, 0, &self.d.to_le_bytes());
        put(&mut b, 2, &self.dmin.to_le_bytes());
        put(&mut b, 4, &self.scales);
        put(&mut b, 16, &self.qs);
        b
    }

    pub fn dequantize(&self, y: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        let min = self.dmin.to_f32();
        for chunk in 0..4 {
            let q = &self.qs[32 * chunk..32 * chunk + 32];
            let (sc, m) = scale_min_k4(2 * chunk, &self.scales);
            let (d1, m1) = (d * sc as f32, min * m as f32);
            let (sc, m) = scale_min_k4(2 * chunk + 1, &self.scales);
            let (d2, m2) = (d * sc as f32, min * m as f32);
            let y = &mut y[64 * chunk..64 * chunk + 64];
            for l in 0..32 {
                y[l] = d1 * (q[l] & 0xF) as f32 - m1;
                y[l + 32] = d2 * (q[l] >> 4) as f32 - m2;
            }
        }
    }
}

impl BlockQ5_K {
    pub const BYTES: usize = 176;
    pub const ELEMS: usize = QK_K;

    pub fn from_bytes(b: &[u8; BlockQ5_K::BYTES]) -> Self {
        BlockQ5_K {
            d: f16_at(b, 0),
            dmin: f16_at(b, 2),
            scales: take(b, 4),
            qh: take(b, 16),
            qs: take(b, 48),
        }
    }

    pub fn to_bytes(&self) -> [u8; BlockQ5_K::BYTES] {
        let mut b = [0u8; BlockQ5_K::BYTES];
        put(&mut b, 0, &self.d.to_le_bytes());
        put(&mut b, 2, &self.dmin.to_le_bytes());
        put(&mut b, 4, &self.scales);
        put(&mut b, 16, &self.qh);
        put(&mut b, 48, &self.qs);
        b
    }

    pub fn dequantize(&self, y: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        let min = self.dmin.to_f32();
        for chunk in 0..4 {
            let ql = &self.qs[32 * chunk..32 * chunk + 32];
            let (u1, u2) = (1u8 << (2 * chunk), 2u8 << (2 * chunk));
            let (sc, m) = scale_min_k4(2 * chunk, &self.scales);
            let (d1, m1) = (d * sc as f32, min * m as f32);
            let (sc, m) = scale_min_k4(2 * chunk + 1, &self.scales);
            let (d2, m2) = (d * sc as f32, min * m as f32);
            let y = &mut y[64 * chunk..64 * chunk + 64];
            for l in 0..32 {
                let h1 = if self.qh[l] & u1 != 0 { 16 } else { 0 };
                let h2 = if self.qh[l] & u2 != 0 { 16 } else { 0 };
                y[l] = d1 * ((ql[l] & 0xF) + h1) as f32 - m1;
                y[l + 32] = d2 * ((ql[l] >> 4) + h2) as f32 - m2;
            }
        }
    }
}

impl BlockQ6_K {
    pub const BYTES: usize = 210;
    pub const ELEMS: usize = QK_K;

    pub fn from_bytes(b: &[u8; BlockQ6_K::BYTES]) -> Self {
        BlockQ6_K {
            ql: take(b, 0),
            qh: take(b, 128),
            scales: i8s(take(b, 192)),
            d: f16_at(b, 208),
        }
    }

    pub fn to_bytes(&self) -> [u8; BlockQ6_K::BYTES] {
        let mut b = [0u8; BlockQ6_K::BYTES];
        put(&mut b, 0, &self.ql);
        put(&mut b, 128, &self.qh);
        put(&mut b, 192, &u8s(self.scales));
        put(&mut b, 208, &self.d.to_le_bytes());
        b
    }

    pub fn dequantize(&self, y: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        for half in 0..2 {
            let ql = &self.ql[64 * half..64 * half + 64];
            let qh = &self.qh[32 * half..32 * half + 32];
            let sc = &self.scales[8 * half..8 * half + 8];
            let y = &mut y[128 * half..128 * half + 128];
            for l in 0..32 {
                let is = l / 16;
                let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i8 - 32;
                let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
                let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
                let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
                y[l] = d * sc[is] as f32 * q1 as f32;
                y[l + 32] = d * sc[is + 2] as f32 * q2 as f32;
                y[l + 64] = d * sc[is + 4] as f32 * q3 as f32;
                y[l + 96] = d * sc[is + 6] as f32 * q4 as f32;
            }
        }
    }
}

impl BlockQ8_K {
    pub const BYTES: usize = 292;
    pub const ELEMS: usize = QK_K;

    pub fn from_bytes(b: &[u8; BlockQ8_K::BYTES]) -> Self {
        let mut bsums = [0i16; QK_K / 16];
        for (j, s) in bsums.iter_mut().enumerate() {
            *s = i16::from_le_bytes(take(b, 260 + 2 * j));
        }
        BlockQ8_K {
            d: f32::from_le_bytes(take(b, 0)),
            qs: i8s(take(b, 4)),
            bsums,
        }
    }

    pub fn to_bytes(&self) -> [u8; BlockQ8_K::BYTES] {
        let mut b = [0u8; BlockQ8_K::BYTES];
        put(&mut b, 0, &self.d.to_le_bytes());
        put(&mut b, 4, &u8s(self.qs));
        for (j, s) in self.bsums.iter().enumerate() {
            put(&mut b, 260 + 2 * j, &s.to_le_bytes());
        }
        b
    }

    pub fn dequantize(&self, y: &mut [f32; QK_K]) {
        for (y, &q) in y.iter_mut().zip(&self.qs) {
            *y = self.d * q as f32;
        }
    }
}
