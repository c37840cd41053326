//! Reference quantizers for the 32-element formats, computing what ggml's
//! `quantize_row_{q4_0,q4_1,q5_0,q5_1,q8_0,q8_1}_ref` compute: the same f32
//! operations in the same order, the same comparisons (so the same element
//! wins a tie or meets a NaN), the same float-to-integer conversions.
//!
//! Where the C code converts a float to a narrow integer (`(int8_t)f`,
//! `(uint8_t)f`, storing `roundf(f)` into an `int8_t`) the value is always in
//! range for finite input; Rust's saturating `as` gives the same result there
//! and cannot fail elsewhere.

use half::f16;

use super::legacy::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1, QK};

/// C's `MAX(a, b)`: `a > b ? a : b` (keeps `b` when either is NaN).
#[inline]
fn c_max(a: f32, b: f32) -> f32 {
    if a > b {
        a
    } else {
        b
    }
}

/// The element of largest magnitude (the first of equals) and that magnitude;
/// `(0, 0)` when there is none above zero.
#[inline]
fn signed_absmax(x: &[f32]) -> (f32, f32) {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    (max, amax)
}

#[inline]
fn min_max(x: &[f32]) -> (f32, f32) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

#[inline]
fn inverse(d: f32) -> f32 {
    if d != 0.0 {
        1.0 / d
    } else {
        0.0
    }
}

impl BlockQ4_0 {
    pub fn quantize(x: &[f32; QK]) -> Self {
        let (max, _) = signed_absmax(x);
        let d = max / -8.0;
        let id = inverse(d);
        let mut qs = [0u8; QK / 2];
        for (j, q) in qs.iter_mut().enumerate() {
            let x0 = x[j] * id;
            let x1 = x[QK / 2 + j] * id;
            let xi0 = ((x0 + 8.5) as i8).min(15) as u8;
            let xi1 = ((x1 + 8.5) as i8).min(15) as u8;
            *q = xi0 | (xi1 << 4);
        }
        BlockQ4_0 {
            d: f16::from_f32(d),
            qs,
        }
    }
}

impl BlockQ4_1 {
    pub fn quantize(x: &[f32; QK]) -> Self {
        let (min, max) = min_max(x);
        let d = (max - min) / 15.0;
        let id = inverse(d);
        let mut qs = [0u8; QK / 2];
        for (j, q) in qs.iter_mut().enumerate() {
            let x0 = (x[j] - min) * id;
            let x1 = (x[QK / 2 + j] - min) * id;
            let xi0 = ((x0 + 0.5) as i8).min(15) as u8;
            let xi1 = ((x1 + 0.5) as i8).min(15) as u8;
            *q = xi0 | (xi1 << 4);
        }
        BlockQ4_1 {
            d: f16::from_f32(d),
            m: f16::from_f32(min),
            qs,
        }
    }
}

/// Packs 32 five-bit values into the Q5 `qs` (low nibbles) and `qh` (bit 4
/// of element `j` at bit `j`) layout.
#[inline]
fn pack_q5(q: &[u8; QK]) -> ([u8; QK / 2], [u8; 4]) {
    let mut qs = [0u8; QK / 2];
    let mut qh = 0u32;
    for j in 0..QK / 2 {
        let (xi0, xi1) = (q[j], q[QK / 2 + j]);
        qs[j] = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4);
        qh |= (((xi0 & 0x10) >> 4) as u32) << j;
        qh |= (((xi1 & 0x10) >> 4) as u32) << (j + QK / 2);
    }
    (qs, qh.to_le_bytes())
}

impl BlockQ5_0 {
    pub fn quantize(x: &[f32; QK]) -> Self {
        let (max, _) = signed_absmax(x);
        let d = max / -16.0;
        let id = inverse(d);
        let mut q = [0u8; QK];
        for (q, &v) in q.iter_mut().zip(x) {
            *q = ((v * id + 16.5) as i8).min(31) as u8;
        }
        let (qs, qh) = pack_q5(&q);
        BlockQ5_0 {
            d: f16::from_f32(d),
            qh,
            qs,
        }
    }
}

impl BlockQ5_1 {
    pub fn quantize(x: &[f32; QK]) -> Self {
        let (min, max) = min_max(x);
        let d = (max - min) / 31.0;
        let id = inverse(d);
        let mut q = [0u8; QK];
        for (q, &v) in q.iter_mut().zip(x) {
            // ggml has no clamp here: (v - min) * id + 0.5 is below 32 for
            // finite input.
            *q = ((v - min) * id + 0.5) as u8;
        }
        let (qs, qh) = pack_q5(&q);
        BlockQ5_1 {
            d: f16::from_f32(d),
            m: f16::from_f32(min),
            qh,
            qs,
        }
    }
}

/// `amax / 127` with ggml's `MAX` fold, and its inverse.
#[inline]
fn q8_scale(x: &[f32]) -> (f32, f32) {
    let mut amax = 0.0f32;
    for &v in x {
        amax = c_max(amax, v.abs());
    }
    let d = amax / 127.0;
    (d, inverse(d))
}

impl BlockQ8_0 {
    pub fn quantize(x: &[f32; QK]) -> Self {
        let (d, id) = q8_scale(x);
        // roundf: half away from zero, which f32::round is.
        let qs = x.map(|v| (v * id).round() as i8);
        BlockQ8_0 {
            d: f16::from_f32(d),
            qs,
        }
    }
}

impl BlockQ8_1 {
    pub fn quantize(x: &[f32; QK]) -> Self {
        let (d, id) = q8_scale(x);
        let qs = x.map(|v| (v * id).round() as i8);
        let sum: i32 = qs.iter().map(|&q| q as i32).sum();
        BlockQ8_1 {
            d: f16::from_f32(d),
            s: f16::from_f32(sum as f32 * d),
            qs,
        }
    }
}
