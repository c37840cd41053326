//! The Vulkan `matmul` (matvec for one row, tiled matmul for more) and
//! `embed` for every weight type, in the manner of llama.cpp's
//! test-backend-ops: random weights in [-1, 1] quantized once with
//! `engine::quant` (the same bytes to both backends), activations in
//! [-1, 1], shapes drawn with proptest. Each product is compared
//! (a) with the CPU op, which quantizes activations (Q8_0/Q8_1/Q8_K, f16
//! for F16 weights) and so differs by that noise, and (b) with an f64
//! product of the dequantized weights, which only f32 rounding separates
//! from the GPU. NaN fails. Embedding rows must equal the CPU's exactly:
//! both dequantize the same bytes with the same f32 operations. Weights
//! split into several chunks are tested with a small chunk limit. Every test
//! ends with `Pair::finish` (sentinels intact, zero validation messages).
//!
//! The products are checked in both kernel layouts ([`KernelLayout`]): the
//! one the device picks, on the full set of shapes, and the other one, forced,
//! on fewer (on lavapipe, the GPU kernels are the slow ones).

mod vulkan_support;

use engine::ggml_type::WEIGHT_TYPES as TYPES;
use engine::ops::{Ops, WeightSource};
use engine::quant::{dequantize_row, quantize_row};
use engine::vulkan::KernelLayout;
use engine::GgmlType;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use std::cell::{Cell, RefCell};
use vulkan_support::{nmse, values, Both, Pair};

/// Largest NMSE of the GPU against the f64 product of the dequantized
/// weights: only f32 rounding (accumulation of up to 1024 products)
/// separates them. Measured over 450 random shapes per type (at least 32
/// outputs each): at most 7.5e-13 (Q4_1; 1.3e-13 for the float types, whose
/// rows here are shorter). The limit is ~4x that; a single wrong block gives
/// > 1e-4.
const LIMIT_F64: f64 = 3e-12;

/// Largest NMSE of the GPU against the CPU op, per type: the CPU's
/// activation rounding. Measured maxima over 450 random shapes per type
/// (at least 32 outputs each; `SHARPI_MATMUL_CASES`), limits ~4x:
fn cpu_limit(ty: GgmlType) -> f64 {
    match ty {
        // Same f32 products, another summation order: 1.2e-13.
        GgmlType::F32 => 5e-13,
        // x rounded to f16: 1.5e-7.
        GgmlType::F16 => 6e-7,
        // x rounded to bf16: 5.4e-6.
        GgmlType::BF16 => 2.5e-5,
        // x quantized to Q8_0 / Q8_1 / Q8_K: Q2_K 3.3e-5, Q3_K 6.1e-5,
        // Q4_0 2.6e-5, Q4_1 3.1e-5, Q4_K 3.1e-5, Q5_0 6.2e-5, Q5_1 3.5e-5,
        // Q5_K 2.8e-5, Q6_K 4.5e-5, Q8_0 2.8e-5 (test-backend-ops allows
        // 5e-4 for MUL_MAT).
        _ => 2.5e-4,
    }
}

/// A `[n_in, n_out]` weight of `ty` from values in [-1, 1], and its
/// dequantized values (row-major).
fn weight(ty: GgmlType, n_in: usize, n_out: usize, seed: u64) -> (WeightSource, Vec<f32>) {
    let v = values(seed, n_in * n_out);
    let mut bytes = vec![0u8; ty.bytes_for((n_in * n_out) as u64).unwrap() as usize];
    quantize_row(ty, &v, &mut bytes).unwrap();
    let mut deq = vec![0.0; n_in * n_out];
    dequantize_row(ty, &bytes, &mut deq).unwrap();
    let name = format!("{}[{n_in}, {n_out}]", ty.name());
    (WeightSource::from_bytes(&name, ty, n_in, n_out, bytes), deq)
}

/// `out[t, r] = Σ_c w[r, c] · x[t, c]` in f64, and `Σ_c |w[r, c] · x[t, c]|`
/// (what bounds the rounding error of any f32 summation order).
fn reference(w: &[f32], n_in: usize, x: &[f32]) -> (Vec<f32>, Vec<f64>) {
    x.chunks_exact(n_in)
        .flat_map(|xr| {
            w.chunks_exact(n_in).map(move |wr| {
                let terms = wr
                    .iter()
                    .zip(xr)
                    .map(|(&a, &b)| f64::from(a) * f64::from(b));
                let sum: f64 = terms.clone().sum();
                (sum as f32, terms.map(f64::abs).sum::<f64>())
            })
        })
        .unzip()
}

/// NMSEs of one product: (against the CPU, against f64).
fn check_matmul(
    p: &mut Pair,
    ty: GgmlType,
    n_in: usize,
    n_out: usize,
    rows: usize,
    seed: u64,
) -> (f64, f64) {
    let (src, deq) = weight(ty, n_in, n_out, seed);
    let (wc, wg) = p.weight(&src);
    let xv = values(seed ^ 0x5eed, rows * n_in);
    // Views from row 1 of bigger buffers: offsets are exercised too.
    let xa = p.act(
        rows + 2,
        n_in,
        &[vec![0.5; n_in], xv.clone(), vec![0.5; n_in]].concat(),
    );
    let x = Both {
        cpu: xa.cpu.rows_from(1, rows),
        gpu: xa.gpu.rows_from(1, rows),
    };
    let oa = p.zeros(rows + 1, n_out);
    let out = Both {
        cpu: oa.cpu.rows_from(1, rows),
        gpu: oa.gpu.rows_from(1, rows),
    };
    p.cpu.matmul(wc, x.cpu, out.cpu);
    p.gpu.matmul(wg, x.gpu, out.gpu);
    let (c, g) = p.read(out);
    // The row before the view is untouched.
    let (_, before) = p.read(Both {
        cpu: oa.cpu.first(1),
        gpu: oa.gpu.first(1),
    });
    assert!(
        before.iter().all(|&v| v == 0.0),
        "{src:?}: wrote outside out"
    );
    let (want, abs) = reference(&deq, n_in, &xv);
    // Every element within the worst-case bound of f32 summation (n_in
    // roundings of at most 2^-24 of the absolute sum, and the final one):
    // this holds for any shape, even a single output near zero, where an
    // NMSE means little.
    for (i, ((&g, &w), &a)) in g.iter().zip(&want).zip(&abs).enumerate() {
        let bound = (n_in + 2) as f64 * a / (1u64 << 24) as f64;
        assert!(
            (f64::from(g) - f64::from(w)).abs() <= bound,
            "{src:?} rows {rows}: out[{}, {}] = {g}, f64 gives {w} (bound {bound:e})",
            i / n_out,
            i % n_out
        );
    }
    (nmse(&c, &g), nmse(&want, &g))
}

fn shapes(ty: GgmlType) -> impl Strategy<Value = (usize, usize, usize, u64)> {
    let be = ty.block_elems();
    // n_in: whole blocks up to 1024 (any length for the float types).
    let n_in = if be == 1 {
        (1usize..=300).boxed()
    } else {
        (1usize..=1024 / be).prop_map(move |b| b * be).boxed()
    };
    let rows = prop_oneof![Just(1usize), 2usize..=40];
    // At least 32 outputs: an NMSE over fewer values is mostly chance (one
    // output near zero makes any relative error large);
    // `tiny_outputs_within_the_f32_bound` covers the smaller ones.
    (n_in, 1usize..=300, rows, any::<u64>())
        .prop_filter("at least 32 outputs", |&(_, n_out, rows, _)| {
            n_out * rows >= 32
        })
}

/// The device's own kernel layout first, then the other one.
fn layouts(p: &Pair) -> [KernelLayout; 2] {
    match p.gpu.kernel_layout() {
        KernelLayout::Gpu => [KernelLayout::Gpu, KernelLayout::Cpu],
        KernelLayout::Cpu => [KernelLayout::Cpu, KernelLayout::Gpu],
    }
}

/// Shapes per type in the device's own layout, and in the other one.
const CASES: [u32; 2] = [10, 3];

fn matmul_type(ty: GgmlType) {
    let mut p = Pair::new();
    for (layout, cases) in layouts(&p).into_iter().zip(CASES) {
        p.gpu.set_kernel_layout(layout);
        p = matmul_type_in(p, ty, layout, cases);
    }
    p.finish(&format!("matmul {}", ty.name()));
}

fn matmul_type_in(p: Pair, ty: GgmlType, layout: KernelLayout, cases: u32) -> Pair {
    // TestRunner::run takes a Fn: the pair and the maxima live in cells.
    let p = RefCell::new(p);
    let worst = Cell::new((0.0f64, 0.0f64));
    // A fixed set of shapes (the same every run: an NMSE over a handful of
    // outputs can be large by chance); SHARPI_MATMUL_CASES=N draws N random
    // ones instead (how the limits above were measured).
    let explore: Option<u32> = std::env::var("SHARPI_MATMUL_CASES")
        .ok()
        .map(|v| v.parse().expect("SHARPI_MATMUL_CASES: a number"));
    let config = Config {
        cases: explore.unwrap_or(cases),
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = match explore {
        Some(_) => TestRunner::new(config),
        None => TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha)),
    };
    let limit = cpu_limit(ty);
    runner
        .run(&shapes(ty), |(n_in, n_out, rows, seed)| {
            let (vs_cpu, vs_f64) = check_matmul(&mut p.borrow_mut(), ty, n_in, n_out, rows, seed);
            eprintln!(
                "{} {layout:?} n_in {n_in} n_out {n_out} rows {rows}: NMSE vs CPU {vs_cpu:.2e}, vs f64 {vs_f64:.2e}",
                ty.name()
            );
            prop_assert!(vs_cpu <= limit, "vs CPU: {vs_cpu:e} over {limit:e}");
            prop_assert!(vs_f64 <= LIMIT_F64, "vs f64: {vs_f64:e} over {LIMIT_F64:e}");
            let w = worst.get();
            worst.set((w.0.max(vs_cpu), w.1.max(vs_f64)));
            Ok(())
        })
        .unwrap();
    eprintln!(
        "{} {layout:?}: worst NMSE vs CPU {:.2e}, vs f64 {:.2e}",
        ty.name(),
        worst.get().0,
        worst.get().1
    );
    p.into_inner()
}

/// Embedding rows (some repeated, into a view at an offset) equal the CPU's.
fn embed_type(p: &mut Pair, ty: GgmlType, n_in: usize, n_out: usize, seed: u64) {
    let (src, deq) = weight(ty, n_in, n_out, seed);
    let (wc, wg) = p.weight(&src);
    let tokens: Vec<u32> = values(seed + 1, 9)
        .iter()
        .map(|v| ((v + 1.0) * 0.5 * n_out as f32) as u32 % n_out as u32)
        .chain([0, n_out as u32 - 1, 0])
        .collect();
    let oa = p.zeros(tokens.len() + 1, n_in);
    let out = Both {
        cpu: oa.cpu.rows_from(1, tokens.len()),
        gpu: oa.gpu.rows_from(1, tokens.len()),
    };
    p.cpu.embed(wc, &tokens, out.cpu);
    p.gpu.embed(wg, &tokens, out.gpu);
    let (c, g) = p.read(out);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&c), bits(&g), "{src:?}: embed differs from the CPU");
    for (t, &id) in tokens.iter().enumerate() {
        let row = &deq[id as usize * n_in..(id as usize + 1) * n_in];
        assert_eq!(
            bits(&g[t * n_in..(t + 1) * n_in]),
            bits(row),
            "{src:?} token {id}"
        );
    }
}

#[test]
fn matmul_every_type() {
    for ty in TYPES {
        matmul_type(ty);
    }
}

#[test]
fn tiny_outputs_within_the_f32_bound() {
    // One to three outputs per row, one and three rows (matvec and matmul):
    // only the per-element bound of `check_matmul` is asserted.
    let mut p = Pair::new();
    for layout in layouts(&p) {
        p.gpu.set_kernel_layout(layout);
        for (i, &ty) in TYPES.iter().enumerate() {
            let n_in = if ty.block_elems() == 1 {
                45
            } else {
                ty.block_elems()
            };
            for (n_out, rows) in [(1, 1), (3, 1), (1, 3), (2, 3)] {
                check_matmul(&mut p, ty, n_in, n_out, rows, 300 + i as u64);
            }
        }
    }
    p.finish("tiny outputs");
}

#[test]
fn embed_every_type() {
    let mut p = Pair::new();
    for (i, &ty) in TYPES.iter().enumerate() {
        let n_in = if ty.block_elems() == 1 {
            77
        } else {
            2 * ty.block_elems()
        };
        embed_type(&mut p, ty, n_in, 37, 1000 + i as u64);
    }
    p.finish("embed");
}

#[test]
fn chunked_weights() {
    // Chunks of 7 rows: 45 rows make 7 chunks (the last one of 3 rows).
    for (i, &ty) in [
        GgmlType::F16,
        GgmlType::Q4_0,
        GgmlType::Q3_K,
        GgmlType::Q6_K,
    ]
    .iter()
    .enumerate()
    {
        let mut p = Pair::new();
        let n_in = if ty.block_elems() == 1 {
            75
        } else {
            2 * ty.block_elems()
        };
        let row_bytes = ty.bytes_for(n_in as u64).unwrap();
        p.gpu.set_max_chunk_bytes(7 * row_bytes);
        let (src, _) = weight(ty, n_in, 45, 7);
        let (_, wg) = p.weight(&src);
        let chunks = p.gpu.weight(wg).chunks.len();
        assert_eq!(chunks, 7, "{src:?}");
        for layout in layouts(&p) {
            p.gpu.set_kernel_layout(layout);
            // 5 and 11 rows: full and partial groups of matmul_cpu's tokens
            // (4 per invocation); 7-row chunks: partial groups of its 8 rows.
            for rows in [1, 5, 11] {
                let (vs_cpu, vs_f64) = check_matmul(&mut p, ty, n_in, 45, rows, 50 + i as u64);
                assert!(
                    vs_cpu <= cpu_limit(ty),
                    "{src:?} {layout:?} rows {rows}: vs CPU {vs_cpu:e}"
                );
                assert!(
                    vs_f64 <= LIMIT_F64,
                    "{src:?} {layout:?} rows {rows}: vs f64 {vs_f64:e}"
                );
            }
        }
        embed_type(&mut p, ty, n_in, 45, 9);
        p.finish(&format!("chunked {}", ty.name()));
    }
}

#[test]
fn matvec_spills_workgroups_into_y() {
    // 140001 rows: at one workgroup per two rows (the last with one), the
    // GPU layout's matvec needs more than 65535 workgroups along x. (The CPU
    // layout's, at 64 rows per workgroup, would need 4.2M rows; it spills
    // with the same global_index_1d as the elementwise shaders.)
    let mut p = Pair::new();
    let (n_in, n_out) = (32, 140_001);
    let (src, deq) = weight(GgmlType::Q4_0, n_in, n_out, 11);
    let (wc, wg) = p.weight(&src);
    let xv = values(12, n_in);
    let x = p.act(1, n_in, &xv);
    let want = reference(&deq, n_in, &xv).0;
    for layout in layouts(&p) {
        p.gpu.set_kernel_layout(layout);
        let out = p.zeros(1, n_out);
        p.cpu.matmul(wc, x.cpu, out.cpu);
        p.gpu.matmul(wg, x.gpu, out.gpu);
        let (c, g) = p.read(out);
        let vs_f64 = nmse(&want, &g);
        assert!(vs_f64 <= LIMIT_F64, "{layout:?}: vs f64 {vs_f64:e}");
        assert!(nmse(&c, &g) <= cpu_limit(GgmlType::Q4_0), "{layout:?}");
    }
    p.finish("spill");
}
