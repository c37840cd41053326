//! The matrix ops: each output element is the kernel dot of its weight row
//! and activation row, whatever the thread count, the SIMD level's tile
//! shapes, or whether it came from `matmul` or from `matvec` token by token
//! (all bit for bit; a K-quant `matmul` of 8 or more rows is ggml's tiled
//! kernel instead); shapes are checked without panicking.

use crate::cpu_support;

use cpu_support::{activations, quantized_act, weight_row, Rng, TYPES};
use engine::cpu::act::vec_dot_type;
use engine::cpu::dot::tiled;
use engine::cpu::{embedding_row, matmul, matvec, CpuError, Kernels, SimdLevel, WeightView};
use engine::quant::dequantize_row;
use engine::threads::Threads;
use engine::GgmlType;
use proptest::prelude::*;

struct Problem {
    ty: GgmlType,
    rows: usize,
    cols: usize,
    w: Vec<u8>,
    x: Vec<f32>,
}

fn problem(ty: GgmlType, rows: usize, blocks: usize, n: usize, seed: u64) -> Problem {
    let mut rng = Rng::new(seed);
    let cols = blocks * ty.block_elems();
    let w = (0..rows)
        .flat_map(|_| weight_row(&mut rng, ty, blocks))
        .collect();
    let x = (0..n).flat_map(|_| activations(&mut rng, cols)).collect();
    Problem {
        ty,
        rows,
        cols,
        w,
        x,
    }
}

impl Problem {
    fn view(&self) -> WeightView<'_> {
        WeightView::new(self.ty, self.rows, self.cols, &self.w).unwrap()
    }

    fn n(&self) -> usize {
        self.x.len() / self.cols
    }

    /// Element by element through `Kernels::dot`: the definition.
    fn by_dot(&self, level: SimdLevel) -> Vec<f32> {
        let k = Kernels::for_level(self.ty, level).unwrap();
        let rb = self.w.len() / self.rows;
        let mut y = Vec::new();
        for x in self.x.chunks_exact(self.cols) {
            let a = quantized_act(self.ty, x);
            for r in 0..self.rows {
                y.push(k.dot(&self.w[r * rb..(r + 1) * rb], &a).unwrap());
            }
        }
        y
    }

    /// Element by element through ggml's tiled kernel (K-quants).
    fn by_tiled(&self) -> Vec<f32> {
        let rb = self.w.len() / self.rows;
        let mut y = Vec::new();
        for x in self.x.chunks_exact(self.cols) {
            let a = quantized_act(self.ty, x);
            for r in 0..self.rows {
                y.push(tiled::dot_scalar(
                    self.ty,
                    &self.w[r * rb..(r + 1) * rb],
                    &a,
                ));
            }
        }
        y
    }

    fn matmul(&self, threads: &Threads) -> Vec<f32> {
        let mut y = vec![f32::NAN; self.n() * self.rows];
        matmul(threads, self.view(), &self.x, &mut y).unwrap();
        y
    }

    fn matvec_each(&self, threads: &Threads) -> Vec<f32> {
        let mut y = vec![f32::NAN; self.n() * self.rows];
        for (x, y) in self
            .x
            .chunks_exact(self.cols)
            .zip(y.chunks_exact_mut(self.rows))
        {
            matvec(threads, self.view(), x, y).unwrap();
        }
        y
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|v| v.to_bits()).collect()
}

fn check(p: &Problem) -> Result<(), TestCaseError> {
    for level in SimdLevel::supported() {
        let by_dot = bits(&p.by_dot(level));
        // A K-quant weight times 8 or more rows takes ggml's tiled kernel
        // (engine/tests/cpu_tiled.rs); `matvec` keeps the kernel dot.
        let want = if p.n() >= tiled::MIN_ROWS && tiled::takes(p.ty) {
            bits(&p.by_tiled())
        } else {
            by_dot.clone()
        };
        for t in [1, 2, 3] {
            let threads = Threads::with_simd(t, level).unwrap();
            prop_assert_eq!(
                &bits(&p.matmul(&threads)),
                &want,
                "{} {} matmul, {} threads",
                p.ty,
                level,
                t
            );
            prop_assert_eq!(
                &bits(&p.matvec_each(&threads)),
                &by_dot,
                "{} {} matvec, {} threads",
                p.ty,
                level,
                t
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]
    #[test]
    fn matmul_and_matvec_are_the_kernel_dot_per_element(
        t in 0usize..TYPES.len(),
        rows in 1usize..40,
        blocks in 1usize..4,
        n in 1usize..12,
        seed in any::<u64>(),
    ) {
        let ty = TYPES[t];
        let blocks = if ty.block_elems() == 1 { blocks * 45 } else { blocks };
        check(&problem(ty, rows, blocks, n, seed))?;
    }
}

/// Large enough to split into several row chunks and token groups (and
/// leave ragged edges in both).
#[test]
fn chunked_shapes_agree() {
    for (ty, rows, blocks, n) in [
        (GgmlType::Q4_1, 301, 3, 70),
        (GgmlType::Q8_0, 1000, 2, 3),
        (GgmlType::Q6_K, 133, 2, 67),
        (GgmlType::Q4_K, 70, 1, 1),
    ] {
        check(&problem(ty, rows, blocks, n, 7)).unwrap();
    }
}

/// Against an f64 product of the dequantized weights: the quantized product
/// computes the right thing (up to the activations' quantization, which for
/// these sizes stays well under 1% of the output scale).
#[test]
fn matmul_approximates_the_dequantized_product() {
    let threads = Threads::new(2).unwrap();
    for ty in TYPES {
        let blocks = if ty.block_elems() == 1 { 96 } else { 2 };
        let p = problem(ty, 17, blocks, 5, 11);
        let y = p.matmul(&threads);
        let mut wd = vec![0.0f32; p.rows * p.cols];
        dequantize_row(ty, &p.w, &mut wd).unwrap();
        for (t, x) in p.x.chunks_exact(p.cols).enumerate() {
            for r in 0..p.rows {
                let w = &wd[r * p.cols..(r + 1) * p.cols];
                let exact: f64 = w.iter().zip(x).map(|(&w, &x)| w as f64 * x as f64).sum();
                let scale: f64 = w
                    .iter()
                    .zip(x)
                    .map(|(&w, &x)| (w as f64 * x as f64).abs())
                    .sum();
                let got = y[t * p.rows + r] as f64;
                assert!(
                    (got - exact).abs() <= 0.01 * scale,
                    "{ty} [{t}, {r}]: {got} vs {exact} (scale {scale})"
                );
            }
        }
    }
}

#[test]
fn shapes_are_errors_not_panics() {
    let threads = Threads::new(2).unwrap();
    let p = problem(GgmlType::Q4_0, 4, 2, 3, 1);
    let w = p.view();
    let mut y = vec![0.0; 4];
    assert!(matches!(
        matvec(&threads, w, &p.x[..63], &mut y),
        Err(CpuError::Length { .. })
    ));
    assert!(matches!(
        matvec(&threads, w, &p.x[..64], &mut y[..3]),
        Err(CpuError::Length { .. })
    ));
    assert!(matches!(
        matmul(&threads, w, &p.x[..65], &mut y),
        Err(CpuError::NotMultiple { .. })
    ));
    assert!(matches!(
        matmul(&threads, w, &p.x[..128], &mut y),
        Err(CpuError::Length { .. })
    ));
    // A type without kernels.
    let q8k = vec![0u8; 292];
    let wk = WeightView::new(GgmlType::Q8_K, 1, 256, &q8k).unwrap();
    assert!(matches!(
        matvec(&threads, wk, &[0.0; 256], &mut [0.0]),
        Err(CpuError::NoKernels(GgmlType::Q8_K))
    ));
    // Empty shapes are fine.
    let empty = WeightView::new(GgmlType::Q4_0, 0, 64, &[]).unwrap();
    assert!(matvec(&threads, empty, &p.x[..64], &mut []).is_ok());
    assert!(matmul(&threads, w, &[], &mut []).is_ok());
}

#[test]
fn embedding_row_is_the_dequantized_row() {
    let p = problem(GgmlType::Q8_0, 5, 3, 1, 3);
    let w = p.view();
    let mut all = vec![0.0f32; 5 * 96];
    dequantize_row(GgmlType::Q8_0, &p.w, &mut all).unwrap();
    let mut out = vec![0.0f32; 96];
    for r in 0..5 {
        embedding_row(w, r, &mut out).unwrap();
        assert_eq!(bits(&out), bits(&all[r * 96..(r + 1) * 96]));
    }
    assert!(matches!(
        embedding_row(w, 5, &mut out),
        Err(CpuError::RowOutOfRange { row: 5, rows: 5 })
    ));
    assert!(matches!(
        embedding_row(w, 0, &mut out[..95]),
        Err(CpuError::Length { .. })
    ));
}

#[test]
fn simd_levels_this_cpu_lacks_are_refused() {
    for level in SimdLevel::ALL {
        assert_eq!(Threads::with_simd(1, level).is_ok(), level.is_supported());
    }
    assert_eq!(vec_dot_type(GgmlType::Q4_1), Some(GgmlType::Q8_1));
}
