//! The 32-element block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1): layouts
//! as ggml-common.h declares them, byte (de)serialisation, and dequantization
//! following ggml's `dequantize_row_*` formulas operation for operation.

use std::mem::size_of;

use half::f16;

use super::bytes::{f16_at, i8s, put, take, u8s};
use super::Codec;

/// This family's types: block struct, dequantization (here) and reference
/// quantizer (`legacy_quantize.rs`), one row each.
pub(super) const CODECS: [Codec; 6] = [
    block_codec!(Q4_0, BlockQ4_0),
    block_codec!(Q4_1, BlockQ4_1),
    block_codec!(Q5_0, BlockQ5_0),
    block_codec!(Q5_1, BlockQ5_1),
    block_codec!(Q8_0, BlockQ8_0),
    block_codec!(Q8_1, BlockQ8_1),
];

/// Elements in every block of this family.
pub const QK: usize = 32;

/// Q4_0: `x = d * (q - 8)`, 4-bit `q`. Element `j < 16` sits in the low
/// nibble of `qs[j]`, element `j + 16` in the high nibble.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ4_0 {
    pub d: f16,
    pub qs: [u8; QK / 2],
}
const _: () = assert!(size_of::<BlockQ4_0>() == 18);
const _: () = assert!(size_of::<BlockQ4_0>() == BlockQ4_0::BYTES);

/// Q4_1: `x = d * q + m`, 4-bit `q`, nibbles as in Q4_0.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ4_1 {
    pub d: f16,
    pub m: f16,
    pub qs: [u8; QK / 2],
}
const _: () = assert!(size_of::<BlockQ4_1>() == 20);
const _: () = assert!(size_of::<BlockQ4_1>() == BlockQ4_1::BYTES);

/// Q5_0: `x = d * (q - 16)`, 5-bit `q`: low 4 bits as in Q4_0, bit 4 of
/// element `j` is bit `j` of the little-endian `qh`.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ5_0 {
    pub d: f16,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}
const _: () = assert!(size_of::<BlockQ5_0>() == 22);
const _: () = assert!(size_of::<BlockQ5_0>() == BlockQ5_0::BYTES);

/// Q5_1: `x = d * q + m`, 5-bit `q` packed as in Q5_0.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ5_1 {
    pub d: f16,
    pub m: f16,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}
const _: () = assert!(size_of::<BlockQ5_1>() == 24);
const _: () = assert!(size_of::<BlockQ5_1>() == BlockQ5_1::BYTES);

/// Q8_0: `x = d * q`, signed 8-bit `q`.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ8_0 {
    pub d: f16,
    pub qs: [i8; QK],
}
const _: () = assert!(size_of::<BlockQ8_0>() == 34);
const _: () = assert!(size_of::<BlockQ8_0>() == BlockQ8_0::BYTES);

/// Q8_1: `x = d * q`, signed 8-bit `q`, plus `s = d * sum(q)` (computed by
/// the quantizer from the unrounded `d`; dot products use it, dequantization
/// does not).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ8_1 {
    pub d: f16,
    pub s: f16,
    pub qs: [i8; QK],
}
const _: () = assert!(size_of::<BlockQ8_1>() == 36);
const _: () = assert!(size_of::<BlockQ8_1>() == BlockQ8_1::BYTES);

impl BlockQ4_0 {
    pub const BYTES: usize = 18;
    pub const ELEMS: usize = QK;

    pub fn from_bytes(b: &[u8; BlockQ4_0::BYTES]) -> Self {
        BlockQ4_0 {
            d: f16_at(b, 0),
            qs: take(b, 2),
        }
    }

    pub fn to_bytes(&self) -> [u8; BlockQ4_0::BYTES] {
        let mut b = [0u8; BlockQ4_0::BYTES];
        put(&mut b, 0, &self.d.to_le_bytes());
        put(&mut b, 2, &self.qs);
        b
    }

    pub fn dequantize(&self, y: &mut [f32; QK]) {
        let d = self.d.to_f32();
        for j in 0..QK / 2 {
            let x0 = (self.qs[j] & 0x0F) as i32 - 8;
            let x1 = (self.qs[j] >> 4) as i32 - 8;
            y[j] = x0 as f32 * d;
            y[j + QK / 2] = x1 as f32 * d;
        }
    }
}

impl BlockQ4_1 {
    pub const BYTES: usize = 20;
    pub const ELEMS: usize = QK;

    pub fn from_bytes(b: &[u8; BlockQ4_1::BYTES]) -> Self {
        BlockQ4_1 {
            d: f16_at(b, 0),
            m: f16_at(b, 2),
            qs: take(b, 4),
        }
    }

    pub fn to_bytes(&self) -> [u8; BlockQ4_1::BYTES] {
        let mut b = [0u8; BlockQ4_1::BYTES];
        put(&mut b, 0, &self.d.to_le_bytes());
        put(&mut b, 2, &self.m.to_le_bytes());
        put(&mut b, 4, &self.qs);
        b
    }

    pub fn dequantize(&self, y: &mut [f32; QK]) {
        let d = self.d.to_f32();
        let m = self.m.to_f32();
        for j in 0..QK / 2 {
            let x0 = (self.qs[j] & 0x0F) as f32;
            let x1 = (self.qs[j] >> 4) as f32;
            y[j] = x0 * d + m;
            y[j + QK / 2] = x1 * d + m;
        }
    }
}

/// The 5-bit value of element `j` (`j < 16`) and of element `j + 16`.
#[inline]
fn q5_pair(qs: &[u8; QK / 2], qh: u32, j: usize) -> (u8, u8) {
    let h0 = (((qh >> j) << 4) & 0x10) as u8;
    let h1 = ((qh >> (j + 12)) & 0x10) as u8;
    ((qs[j] & 0x0F) | h0, (qs[j] >> 4) | h1)
}

impl BlockQ5_0 {
    pub const BYTES: usize = 22;
    pub const ELEMS: usize = QK;

    pub fn from_bytes(b: &[u8; BlockQ5_0::BYTES]) -> Self {
        BlockQ5_0 {
            d: f16_at(b, 0),
            qh: take(b, 2),
            qs: take(b, 6),
        }
    }

    pub fn to_bytes(&self) -> [u8; BlockQ5_0::BYTES] {
        let mut b = [0u8; BlockQ5_0::BYTES];
        put(&mut b, 0, &self.d.to_le_bytes());
        put(&mut b, 2, &self.qh);
        put(&mut b, 6, &self.qs);
        b
    }

    pub fn dequantize(&self, y: &mut [f32; QK]) {
        let d = self.d.to_f32();
        let qh = u32::from_le_bytes(self.qh);
        for j in 0..QK / 2 {
            let (q0, q1) = q5_pair(&self.qs, qh, j);
            y[j] = (q0 as i32 - 16) as f32 * d;
            y[j + QK / 2] = (q1 as i32 - 16) as f32 * d;
        }
    }
}

impl BlockQ5_1 {
    pub const BYTES: usize = 24;
    pub const ELEMS: usize = QK;

    pub fn from_bytes(b: &[u8; BlockQ5_1::BYTES]) -> Self {
        BlockQ5_1 {
            d: f16_at(b, 0),
            m: f16_at(b, 2),
            qh: take(b, 4),
            qs: take(b, 8),
        }
    }

    pub fn to_bytes(&self) -> [u8; BlockQ5_1::BYTES] {
        let mut b = [0u8; BlockQ5_1::BYTES];
        put(&mut b, 0, &self.d.to_le_bytes());
        put(&mut b, 2, &self.m.to_le_bytes());
        put(&mut b, 4, &self.qh);
        put(&mut b, 8, &self.qs);
        b
    }

    pub fn dequantize(&self, y: &mut [f32; QK]) {
        let d = self.d.to_f32();
        let m = self.m.to_f32();
        let qh = u32::from_le_bytes(self.qh);
        for j in 0..QK / 2 {
            let (q0, q1) = q5_pair(&self.qs, qh, j);
            y[j] = q0 as f32 * d + m;
            y[j + QK / 2] = q1 as f32 * d + m;
        }
    }
}

impl BlockQ8_0 {
    pub const BYTES: usize = 34;
    pub const ELEMS: usize = QK;

    pub fn from_bytes(b: &[u8; BlockQ8_0::BYTES]) -> Self {
        BlockQ8_0 {
            d: f16_at(b, 0),
            qs: i8s(take(b, 2)),
        }
    }

    pub fn to_bytes(&self) -> [u8; BlockQ8_0::BYTES] {
        let mut b = [0u8; BlockQ8_0::BYTES];
        put(&mut b, 0, &self.d.to_le_bytes());
        put(&mut b, 2, &u8s(self.qs));
        b
    }

    pub fn dequantize(&self, y: &mut [f32; QK]) {
        let d = self.d.to_f32();
        for (y, &q) in y.iter_mut().zip(&self.qs) {
            *y = q as f32 * d;
        }
    }
}

impl BlockQ8_1 {
    pub const BYTES: usize = 36;
    pub const ELEMS: usize = QK;

    pub fn from_bytes(b: &[u8; BlockQ8_1::BYTES]) -> Self {
        BlockQ8_1 {
            d: f16_at(b, 0),
            s: f16_at(b, 2),
            qs: i8s(take(b, 4)),
        }
    }

    pub fn to_bytes(&self) -> [u8; BlockQ8_1::BYTES] {
        let mut b = [0u8; BlockQ8_1::BYTES];
        put(&mut b, 0, &self.d.to_le_bytes());
        put(&mut b, 2, &self.s.to_le_bytes());
        put(&mut b, 4, &u8s(self.qs));
        b
    }

    /// `d * q`; `s` plays no part (ggml has no Q8_1 dequantizer; this is the
    /// format's definition).
    pub fn dequantize(&self, y: &mut [f32; QK]) {
        let d = self.d.to_f32();
        for (y, &q) in y.iter_mut().zip(&self.qs) {
            *y = q as f32 * d;
        }
    }
}
