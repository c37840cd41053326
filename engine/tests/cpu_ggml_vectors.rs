//! The CPU kernels against ggml's own: reference-data/dot/vectors.txt holds,
//! per case, what ggml's x86 build (the flags llama.cpp is built with here)
//! makes of the activations and of the dot product, and what ggml's generic
//! kernel gives on the same bytes (scripts/gen-dot-vectors compiles both
//! from the llama.cpp source the harness links). The inputs are not stored:
//! both sides generate them from the same integer stream.
//!
//! Checked bit for bit: our activation bytes against ggml's (by hash),
//! every SIMD level against ggml's AVX2 kernel, and the scalar reference
//! against ggml's generic kernel.

use engine::cpu::act::{quantize_act, vec_dot_type};
use engine::cpu::{Kernels, SimdLevel};
use engine::GgmlType;

const VECTORS: &str = include_str!("../../reference-data/dot/vectors.txt");

/// SplitMix64, as scripts/ggml-dot/vectors.c.
struct Stream(u64);

impl Stream {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A finite normal f16 of either sign, magnitude 2^-10 .. 2^2.
    fn f16_bits(&mut self) -> u16 {
        let s = (self.next() & 1) as u16;
        let e = (5 + self.next() % 12) as u16;
        let m = (self.next() & 0x3FF) as u16;
        s << 15 | e << 10 | m
    }
}

/// Offsets of the f16 scale fields in a block (as in vectors.c).
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

/// The case's weight row and activations.
fn inputs(ty: GgmlType, case: u32) -> (Vec<u8>, Vec<f32>) {
    let mut s = Stream((ty.id() as u64) << 32 | case as u64);
    let elems = ty.block_elems();
    let n = if elems == 1 {
        1 + (s.next() % 300) as usize
    } else {
        (1 + case as usize % 8) * elems
    };
    let mut w: Vec<u8> = (0..n / elems * ty.block_bytes())
        .map(|_| s.next() as u8)
        .collect();
    match ty {
        GgmlType::F32 => {
            for b in w.chunks_exact_mut(4) {
                let v = ((s.next() % 2001) as i32 - 1000) as f32 * (1.0 / 1024.0);
                b.copy_from_slice(&v.to_le_bytes());
            }
        }
        GgmlType::F16 => {
            for b in w.chunks_exact_mut(2) {
                b.copy_from_slice(&s.f16_bits().to_le_bytes());
            }
        }
        GgmlType::BF16 => {
            for b in w.chunks_exact_mut(2) {
                let sign = (s.next() & 1) as u16;
                let e = (117 + s.next() % 11) as u16;
                let m = (s.next() & 0x7F) as u16;
                b.copy_from_slice(&(sign << 15 | e << 7 | m).to_le_bytes());
            }
        }
        _ => {
            for block in w.chunks_exact_mut(ty.block_bytes()) {
                for &off in f16_fields(ty) {
                    block[off..off + 2].copy_from_slice(&s.f16_bits().to_le_bytes());
                }
            }
        }
    }
    let scale = 2f32.powi(-((10 + s.next() % 14) as i32));
    let x = (0..n)
        .map(|_| ((s.next() % 2_000_001) as i64 - 1_000_000) as f32 * scale)
        .collect();
    (w, x)
}

fn fnv64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

struct Line {
    ty: GgmlType,
    case: u32,
    n: usize,
    act_hash: u64,
    avx2: u32,
    generic: u32,
}

fn lines() -> Vec<Line> {
    VECTORS
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Line {
                ty: GgmlType::from_name(f[0]).expect("a type name"),
                case: f[1].parse().unwrap(),
                n: f[2].parse().unwrap(),
                act_hash: u64::from_str_radix(f[3], 16).unwrap(),
                avx2: u32::from_str_radix(f[4], 16).unwrap(),
                generic: u32::from_str_radix(f[5], 16).unwrap(),
            }
        })
        .collect()
}

#[test]
fn kernels_match_ggml_bit_for_bit() {
    let lines = lines();
    assert_eq!(lines.len(), 13 * 256, "vectors.txt: one line per case");
    let simd: Vec<SimdLevel> = SimdLevel::supported()
        .filter(|&l| l != SimdLevel::Scalar)
        .collect();
    let mut failures = Vec::new();
    for l in &lines {
        let (w, x) = inputs(l.ty, l.case);
        assert_eq!(
            x.len(),
            l.n,
            "{} case {}: the input stream drifted",
            l.ty,
            l.case
        );
        let at = vec_dot_type(l.ty).unwrap();
        let mut a = vec![0u8; at.bytes_for(l.n as u64).unwrap() as usize];
        quantize_act(at, &x, &mut a).unwrap();
        if fnv64(&a) != l.act_hash {
            failures.push(format!(
                "{} case {}: activation bytes differ from ggml's",
                l.ty, l.case
            ));
            continue;
        }
        let scalar = Kernels::for_level(l.ty, SimdLevel::Scalar)
            .unwrap()
            .dot(&w, &a)
            .unwrap();
        if scalar.to_bits() != l.generic {
            failures.push(format!(
                "{} case {} (n {}): scalar {scalar:e} vs ggml generic {:e}",
                l.ty,
                l.case,
                l.n,
                f32::from_bits(l.generic)
            ));
        }
        for &level in &simd {
            let v = Kernels::for_level(l.ty, level)
                .unwrap()
                .dot(&w, &a)
                .unwrap();
            if v.to_bits() != l.avx2 {
                failures.push(format!(
                    "{} case {} (n {}): {level} {v:e} vs ggml AVX2 {:e}",
                    l.ty,
                    l.case,
                    l.n,
                    f32::from_bits(l.avx2)
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
