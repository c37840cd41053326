//! Random weight rows and activations for the CPU kernel tests: every byte
//! random except the float fields, which hold finite values of realistic
//! size, so every block is one a quantizer could have written.

#![allow(dead_code)]

use engine::cpu::act::{quantize_act, vec_dot_type};
use engine::GgmlType;
use half::f16;

/// SplitMix64: a small deterministic generator (the seed comes from
/// proptest, so a failure names it).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Uniform in [lo, hi).
    pub fn range(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * self.unit()
    }

    /// A value of random sign with magnitude log-uniform in [10^lo, 10^hi).
    pub fn log_signed(&mut self, lo: f32, hi: f32) -> f32 {
        let m = 10f32.powf(self.range(lo, hi));
        if self.next_u64() & 1 == 0 {
            m
        } else {
            -m
        }
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

/// Offsets of the f16 scale fields in a block of `ty`.
fn f16_fields(ty: GgmlType) -> &'static [usize] {
    use GgmlType::*;
    match ty {
        Q4_0 | Q5_0 | Q8_0 => &[0],
        Q4_1 | Q5_1 | Q4_K | Q5_K => &[0, 2],
        Q2_K => &[80, 82],
        Q3_K => &[108],
        Q6_K => &[208],
        _ => &[],
    }
}

/// A weight row of `n_blocks` blocks of `ty` (elements for the float types):
/// random quants, scales of magnitude 1e-4..1, float elements of magnitude
/// 1e-3..1.
pub fn weight_row(rng: &mut Rng, ty: GgmlType, n_blocks: usize) -> Vec<u8> {
    let bb = ty.block_bytes();
    let mut row = rng.bytes(n_blocks * bb);
    match ty {
        GgmlType::F32 => {
            for b in row.chunks_exact_mut(4) {
                b.copy_from_slice(&rng.log_signed(-3.0, 0.0).to_le_bytes());
            }
        }
        GgmlType::F16 => {
            for b in row.chunks_exact_mut(2) {
                b.copy_from_slice(&f16::from_f32(rng.log_signed(-3.0, 0.0)).to_le_bytes());
            }
        }
        GgmlType::BF16 => {
            for b in row.chunks_exact_mut(2) {
                let bits = (rng.log_signed(-3.0, 0.0).to_bits() >> 16) as u16;
                b.copy_from_slice(&bits.to_le_bytes());
            }
        }
        _ => {
            for block in row.chunks_exact_mut(bb) {
                for &off in f16_fields(ty) {
                    let v = f16::from_f32(rng.log_signed(-4.0, 0.0));
                    block[off..off + 2].copy_from_slice(&v.to_le_bytes());
                }
            }
        }
    }
    row
}

/// `n` activations: uniform in [-s, s] for a row scale `s` of 1e-2..1e2,
/// with an occasional outlier ten times larger.
pub fn activations(rng: &mut Rng, n: usize) -> Vec<f32> {
    let s = 10f32.powf(rng.range(-2.0, 2.0));
    (0..n)
        .map(|_| {
            let v = rng.range(-s, s);
            if rng.next_u64().is_multiple_of(64) {
                10.0 * v
            } else {
                v
            }
        })
        .collect()
}

/// The elements of `n_blocks` blocks of `ty`.
pub fn elems(ty: GgmlType, n_blocks: usize) -> usize {
    n_blocks * ty.block_elems()
}

/// `x` in the partner format of weight type `ty`.
pub fn quantized_act(ty: GgmlType, x: &[f32]) -> Vec<u8> {
    let at = vec_dot_type(ty).expect("a weight type with kernels");
    let mut out = vec![0u8; x.len() / at.block_elems() * at.block_bytes()];
    quantize_act(at, x, &mut out).expect("whole blocks");
    out
}

/// The weight types with kernels (`engine::cpu::dot::weight_types`).
pub use engine::ggml_type::WEIGHT_TYPES as TYPES;
