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

use crate::vulkan_support;

use engine::ggml_type::WEIGHT_TYPES as TYPES;
use engine::ops::Ops;
use engine::ops::WeightSource;
use engine::vulkan::KernelLayout;
use engine::GgmlType;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use std::cell::{Cell, RefCell};
use vulkan_support::weights::{cpu_limit, reference_bound, reference_dot, weight, LIMIT_F64};
use vulkan_support::{bits, nmse, values, Both, Pair};

/// `out[t, r]` as [`reference_dot`] gives it (f64: for float weights
/// `Σ_c w[r, c] · x[t, c]`, for block types the sum of the CPU's per-block
/// products), and the absolute sum of its terms (what bounds the rounding
/// error of any f32 summation order).
fn reference(src: &WeightSource, w: &[f32], n_in: usize, x: &[f32]) -> (Vec<f32>, Vec<f64>) {
    x.chunks_exact(n_in)
        .flat_map(|xr| {
            w.chunks_exact(n_in).enumerate().map(move |(r, wr)| {
                let (sum, abs) = reference_dot(src.ty(), src.row(r), wr, xr);
                (sum as f32, abs)
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
    let x = xa.rows_from(1, rows);
    let oa = p.zeros(rows + 1, n_out);
    let out = oa.rows_from(1, rows);
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
    let (want, abs) = reference(&src, &deq, n_in, &xv);
    // Every element within the worst-case bound of f32 summation (n_in
    // roundings, or one per block, of at most 2^-24 of the absolute sum,
    // and the final one): this holds for any shape, even a single output
    // near zero, where an NMSE means little.
    for (i, ((&g, &w), &a)) in g.iter().zip(&want).zip(&abs).enumerate() {
        let bound = reference_bound(ty, n_in, a);
        if a > 0.0 {
            note_rel((f64::from(g) - f64::from(w)).abs() / a);
        }
        assert!(
            (f64::from(g) - f64::from(w)).abs() <= bound,
            "{src:?} rows {rows}: out[{}, {}] = {g}, f64 gives {w} (bound {bound:e})",
            i / n_out,
            i % n_out
        );
    }
    (nmse(&c, &g), nmse(&want, &g))
}

thread_local! {
    /// The largest |GPU - reference| / Σ|terms| seen (reported).
    static WORST_REL: Cell<f64> = const { Cell::new(0.0) };
}

fn note_rel(r: f64) {
    WORST_REL.with(|w| w.set(w.get().max(r)));
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

/// Shapes per type in the device's own layout, and in the other one.
const CASES: [u32; 2] = [10, 3];

fn matmul_type(ty: GgmlType) {
    let mut p = Pair::new();
    for (layout, cases) in p.layouts().into_iter().zip(CASES) {
        assert!(p.gpu.set_kernel_layout(layout));
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
        "{} {layout:?}: worst NMSE vs CPU {:.2e}, vs reference {:.2e}, |error| / sum |terms| {:.2e}",
        ty.name(),
        worst.get().0,
        worst.get().1,
        WORST_REL.with(|w| w.replace(0.0))
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
    let out = oa.rows_from(1, tokens.len());
    p.cpu.embed(wc, &tokens, out.cpu);
    p.gpu.embed(wg, &tokens, out.gpu);
    let (c, g) = p.read(out);
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
    for layout in p.layouts() {
        assert!(p.gpu.set_kernel_layout(layout));
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
        for layout in p.layouts() {
            assert!(p.gpu.set_kernel_layout(layout));
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
    // 8 x 65536 + 1 rows: at one workgroup per 8 rows (ROWS_PER_WG of the
    // 32-element block types; the last with one), the GPU layout's matvec
    // needs more than 65535 workgroups along x. (The CPU layout's, at 64
    // rows per workgroup, would need 4.2M rows; it spills with the same
    // global_index_1d as the elementwise shaders.)
    let mut p = Pair::new();
    let (n_in, n_out) = (32, 8 * 65536 + 1);
    let (src, deq) = weight(GgmlType::Q4_0, n_in, n_out, 11);
    let (wc, wg) = p.weight(&src);
    let xv = values(12, n_in);
    let x = p.act(1, n_in, &xv);
    let want = reference(&src, &deq, n_in, &xv).0;
    for layout in p.layouts() {
        assert!(p.gpu.set_kernel_layout(layout));
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

/// The prefill products of the 32-element block types with packed integer
/// dot products, tiled through shared memory (`shaders/matmul_tiled.comp`,
/// the default where the device has VK_KHR_shader_integer_dot_product),
/// write the bits of `matmul.comp` without them, on the GPU kernel layout:
/// the block sums are the same integers, the block terms and their order
/// the same. Shapes with partial tiles of rows and tokens, a block count
/// that is not a whole number of stages (576 inputs: 18 blocks), fewer
/// blocks than a stage, one row; for Q3_K..Q6_K (`matmul_tiled_k.comp`,
/// lane sums from transposed chunks) one to three super-blocks. Skipped
/// (with a note) on a device without the extension.
#[test]
fn packed_integer_dot_products_write_the_same_bits() {
    let mut p = Pair::new();
    if !p.gpu.set_integer_dot(true) {
        eprintln!("no VK_KHR_shader_integer_dot_product: nothing to compare");
        p.finish("integer dot");
        return;
    }
    assert!(p.gpu.set_kernel_layout(KernelLayout::Gpu));
    let legacy = [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
    ];
    let lanes = [
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ];
    let legacy_shapes = [
        (64, 40, 5, 1u64),
        (256, 33, 37, 2),
        (576, 130, 70, 3),
        (96, 64, 64, 4),
        (32, 3, 1, 5),
    ];
    let k_shapes = [(256, 40, 5, 6u64), (768, 70, 37, 7), (512, 3, 1, 8)];
    let cases = legacy
        .iter()
        .flat_map(|&ty| legacy_shapes.iter().map(move |&s| (ty, s)))
        .chain(
            lanes
                .iter()
                .flat_map(|&ty| k_shapes.iter().map(move |&s| (ty, s))),
        );
    for (ty, (n_in, n_out, rows, seed)) in cases {
        {
            let (src, _) = weight(ty, n_in, n_out, seed);
            let (_, wg) = p.weight(&src);
            let xv = values(seed ^ 0xd07, rows * n_in);
            let x = p.act(rows, n_in, &xv);
            let mut got = Vec::new();
            for on in [false, true] {
                p.gpu.set_integer_dot(on);
                let out = p.zeros(rows, n_out);
                p.gpu.matmul(wg, x.gpu, out.gpu);
                got.push(p.read(out).1);
            }
            assert_eq!(
                bits(&got[0]),
                bits(&got[1]),
                "{} n_in {n_in} rows {rows}: packed dot products changed the result",
                ty.name()
            );
        }
    }
    p.finish("integer dot");
}
