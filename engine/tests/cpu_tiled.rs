//! ggml's tiled K-quant product (a K-quant weight times 8 or more rows):
//! `matmul` at every SIMD level gives the bits of the scalar twin
//! `dot::tiled::dot_scalar`, which gives those of a plain emulation of
//! ggml's AVX2 tiled kernel written here from the block definitions; below
//! 8 rows `matmul` keeps the per-row `vec_dot`.

use crate::cpu_support;

use cpu_support::{activations, quantized_act, weight_row, Rng};
use engine::cpu::dot::tiled::{dot_scalar, takes, MIN_ROWS};
use engine::cpu::{matmul, Kernels, SimdLevel, WeightView};
use engine::quant::k::{scale_min_k4, scale_q3_k};
use engine::quant::{BlockQ2_K, BlockQ3_K, BlockQ4_K, BlockQ5_K, BlockQ6_K, BlockQ8_K, QK_K};
use engine::threads::Threads;
use engine::GgmlType;
use proptest::prelude::*;

const K_TYPES: [GgmlType; 5] = [
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

/// Per element of one weight block: (signed value, scale, min) with `d`
/// and `dmin`, straight from ggml's dequantization formulas.
fn elements(ty: GgmlType, b: &[u8]) -> (Vec<(i32, i32, i32)>, f32, f32) {
    let nib = |qs: &[u8], e: usize| {
        let v = qs[32 * (e / 64) + e % 32];
        (if e % 64 < 32 { v & 0xF } else { v >> 4 }) as i32
    };
    let crumb =
        |qs: &[u8], e: usize| ((qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3) as i32;
    match ty {
        GgmlType::Q2_K => {
            let x = BlockQ2_K::from_bytes(b.try_into().unwrap());
            let v = (0..QK_K)
                .map(|e| {
                    let s = x.scales[e / 16];
                    (crumb(&x.qs, e), (s & 0xF) as i32, (s >> 4) as i32)
                })
                .collect();
            (v, x.d.to_f32(), x.dmin.to_f32())
        }
        GgmlType::Q3_K => {
            let x = BlockQ3_K::from_bytes(b.try_into().unwrap());
            let v = (0..QK_K)
                .map(|e| {
                    let high = (x.hmask[e % 32] >> (e / 32)) & 1;
                    let q = crumb(&x.qs, e) - if high == 0 { 4 } else { 0 };
                    (q, scale_q3_k(e / 16, &x.scales) as i32, 0)
                })
                .collect();
            (v, x.d.to_f32(), 0.0)
        }
        GgmlType::Q4_K | GgmlType::Q5_K => {
            let (qs, qh, scales, d, dmin) = if ty == GgmlType::Q4_K {
                let x = BlockQ4_K::from_bytes(b.try_into().unwrap());
                (x.qs, [0u8; 32], x.scales, x.d, x.dmin)
            } else {
                let x = BlockQ5_K::from_bytes(b.try_into().unwrap());
                (x.qs, x.qh, x.scales, x.d, x.dmin)
            };
            let v = (0..QK_K)
                .map(|e| {
                    let q = nib(&qs, e) + 16 * ((qh[e % 32] >> (e / 32)) & 1) as i32;
                    let (sc, m) = scale_min_k4(e / 32, &scales);
                    (q, sc as i32, m as i32)
                })
                .collect();
            (v, d.to_f32(), dmin.to_f32())
        }
        GgmlType::Q6_K => {
            let x = BlockQ6_K::from_bytes(b.try_into().unwrap());
            let v = (0..QK_K)
                .map(|e| {
                    let (h, i) = (e / 128, e % 128);
                    let l = x.ql[64 * h + i % 64];
                    let low = if i < 64 { l & 0xF } else { l >> 4 };
                    let high = (x.qh[32 * h + i % 32] >> (2 * (i / 32))) & 3;
                    ((low | (high << 4)) as i32 - 32, x.scales[e / 16] as i32, 0)
                })
                .collect();
            (v, x.d.to_f32(), 0.0)
        }
        _ => unreachable!(),
    }
}

/// ggml's AVX2 tiled kernel, one output: per block the exact integers
/// `s1 = sum sc * w * a` and `s2 = sum m * a` (the mins against the
/// activations themselves, not their stored group sums), then
/// `res = d * s1`, `res = fma(-dmin, s2, res)`, `out = fma(res, d_a, out)`.
fn emulate(ty: GgmlType, w: &[u8], a: &[u8]) -> f32 {
    let bb = ty.block_bytes();
    let has_min = matches!(ty, GgmlType::Q2_K | GgmlType::Q4_K | GgmlType::Q5_K);
    let mut out = 0.0f32;
    for (wb, ab) in w.chunks_exact(bb).zip(a.chunks_exact(BlockQ8_K::BYTES)) {
        let (el, d, dmin) = elements(ty, wb);
        let y = BlockQ8_K::from_bytes(ab.try_into().unwrap());
        let mut s1 = 0i64;
        let mut s2 = 0i64;
        for (e, &(q, sc, m)) in el.iter().enumerate() {
            s1 += (sc * q * y.qs[e] as i32) as i64;
            s2 += (m * y.qs[e] as i32) as i64;
        }
        let mut res = d * s1 as i32 as f32;
        if has_min {
            res = (-dmin).mul_add(s2 as i32 as f32, res);
        }
        out = res.mul_add(y.d, out);
    }
    out
}

struct Case {
    ty: GgmlType,
    rows: usize,
    cols: usize,
    w: Vec<u8>,
    x: Vec<f32>,
}

fn case(ty: GgmlType, rows: usize, blocks: usize, n: usize, seed: u64) -> Case {
    let mut rng = Rng::new(seed);
    let cols = blocks * QK_K;
    let w = (0..rows)
        .flat_map(|_| weight_row(&mut rng, ty, blocks))
        .collect();
    let x = (0..n).flat_map(|_| activations(&mut rng, cols)).collect();
    Case {
        ty,
        rows,
        cols,
        w,
        x,
    }
}

/// The first element whose bits differ: (index, left, right).
fn first_diff(a: &[f32], b: &[f32]) -> Option<(usize, f32, f32)> {
    assert_eq!(a.len(), b.len());
    (0..a.len())
        .find(|&i| a[i].to_bits() != b[i].to_bits())
        .map(|i| (i, a[i], b[i]))
}

impl Case {
    /// Every element by `f(weight row, activation row)`, `[n, rows]`.
    fn each(&self, f: impl Fn(&[u8], &[u8]) -> f32) -> Vec<f32> {
        let rb = self.w.len() / self.rows;
        let mut y = Vec::new();
        for x in self.x.chunks_exact(self.cols) {
            let a = quantized_act(self.ty, x);
            for r in 0..self.rows {
                y.push(f(&self.w[r * rb..(r + 1) * rb], &a));
            }
        }
        y
    }

    fn matmul(&self, threads: &Threads) -> Vec<f32> {
        let view = WeightView::new(self.ty, self.rows, self.cols, &self.w).unwrap();
        let mut y = vec![f32::NAN; self.x.len() / self.cols * self.rows];
        matmul(threads, view, &self.x, &mut y).unwrap();
        y
    }

    fn check(&self) -> Result<(), TestCaseError> {
        let n = self.x.len() / self.cols;
        let twin = self.each(|w, a| dot_scalar(self.ty, w, a));
        let plain = self.each(|w, a| emulate(self.ty, w, a));
        prop_assert_eq!(
            first_diff(&twin, &plain),
            None,
            "{} scalar twin vs emulation",
            self.ty
        );
        for level in SimdLevel::supported() {
            let want = if n >= MIN_ROWS {
                twin.clone()
            } else {
                let k = Kernels::for_level(self.ty, level).unwrap();
                self.each(|w, a| k.dot(w, a).unwrap())
            };
            for t in [1, 2, 3] {
                let threads = Threads::with_simd(t, level).unwrap();
                prop_assert_eq!(
                    first_diff(&self.matmul(&threads), &want),
                    None,
                    "{} {} rows {} n {} threads {}",
                    self.ty,
                    level,
                    self.rows,
                    n,
                    t
                );
            }
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn tiled_matmul_is_ggml_tiled_kernel(
        t in 0usize..K_TYPES.len(),
        rows in 1usize..23,
        blocks in 1usize..4,
        n in 1usize..75,
        seed in any::<u64>(),
    ) {
        case(K_TYPES[t], rows, blocks, n, seed).check()?;
    }
}

/// Larger shapes: several row chunks per thread, token groups of 64 with a
/// ragged tail, and a batch right at the threshold.
#[test]
fn tiled_shapes() {
    for (ty, rows, blocks, n) in [
        (GgmlType::Q4_K, 301, 3, 70),
        (GgmlType::Q6_K, 133, 2, 8),
        (GgmlType::Q5_K, 67, 6, 130),
        (GgmlType::Q6_K, 5, 1, 7),
    ] {
        case(ty, rows, blocks, n, 11).check().unwrap();
    }
    assert!(K_TYPES.iter().all(|&t| takes(t)));
    assert!(!takes(GgmlType::Q8_0) && !takes(GgmlType::Q4_1));
}
