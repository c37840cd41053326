//! The Vulkan mixture-of-experts ops against the CPU backend's, in the
//! manner of llama.cpp's test-backend-ops: the same inputs (values in
//! [-1, 1], quantized weights as the same bytes) to both backends.
//!
//! - `top_k`: ids and values equal to the CPU's exactly (the shader runs
//!   libstdc++'s sort steps as `cpu::argsort_desc` does), on inputs full of
//!   ties, rows of 1 to 512, and inputs that reach the heap-sort fallback.
//! - `mul_groups`, `sum_groups`: equal bit for bit (the same f32 operations
//!   in the same order).
//! - `softmax`, `normalize_rows`: within a measured NMSE and relative error
//!   (the driver's `exp`, an f32-pair sum for the CPU's f64 one).
//! - `matmul_id`: every weight type, broadcast and per-slot inputs, decode
//!   (one row: all slots in one dispatch) and prefill (grouped by expert,
//!   experts chosen by many rows), in both kernel layouts, against the CPU
//!   (which quantizes activations) with `vulkan_matmul.rs`'s limits (in
//!   `vulkan_support/weights.rs`) and against an f64 product of the
//!   dequantized weights; weights chunked on expert boundaries.
//!
//! Every test ends with `Pair::finish`: sentinels intact, zero validation
//! messages (synchronization validation on).

use crate::vulkan_support;

use engine::cpu::argsort_desc;
use engine::ggml_type::WEIGHT_TYPES;
use engine::ops::{GluKind, Ops, WeightSource};
use engine::GgmlType;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use std::cell::RefCell;
use vulkan_support::weights::{cpu_limit, experts, reference_bound, reference_dot, LIMIT_F64};
use vulkan_support::{assert_nmse, bits, nmse, values, Both, Pair};

/// Largest NMSE of the GPU's softmax against the CPU's. Measured over the
/// shapes of `softmax_rows` (logits in [-8, 8]) on lavapipe: at most
/// 1.1e-14. The limit is ~10x that; one wrong value in a row gives > 1e-6.
const SOFTMAX_NMSE: f64 = 1e-13;
/// Largest relative error of a softmax output: measured 1.1e-6 on lavapipe
/// (the driver's exp loses a few ulps on the smallest outputs, e^-16; the
/// sum is rounded once, not twice). Limit ~4x.
const SOFTMAX_REL: f32 = 4e-6;
/// Largest relative error of a renormalised weight: measured 0 on lavapipe
/// (the f32-pair sum rounds as the CPU's f64 one does on these rows); the
/// limit allows two ulps for a driver whose division is not correctly
/// rounded (GLSL allows 2.5 ulps).
const NORMALIZE_REL: f32 = 2.5e-7;

/// Largest NMSE of the whole routed feed-forward (`moe_block_in_one_submission`:
/// three Q8_0 expert products and SwiGLU between them, each CPU product on
/// Q8_0-quantized activations): measured 1.2e-4 on lavapipe; the limit is
/// test-backend-ops' MUL_MAT / MUL_MAT_ID one.
const BLOCK_NMSE: f64 = 5e-4;

/// A view of rows `1..1 + rows` of a buffer one row longer on each side
/// (offsets exercised; the rows around must stay untouched).
fn inner(p: &mut Pair, rows: usize, width: usize, data: &[f32]) -> (Both, Both) {
    let pad = vec![0.25; width];
    let all = p.act(rows + 2, width, &[&pad[..], data, &pad[..]].concat());
    (all, all.rows_from(1, rows))
}

/// Reads `all` from the GPU and checks its first and last rows still hold
/// the padding `inner` put there.
fn padding_intact(p: &mut Pair, all: Both, what: &str) {
    let (_, g) = p.read(all);
    let w = all.gpu.width();
    assert!(
        g[..w].iter().chain(&g[g.len() - w..]).all(|&v| v == 0.25),
        "{what}: wrote outside its rows"
    );
}

/// Largest |g - c| / |c| (0 where both are 0).
fn max_rel(c: &[f32], g: &[f32]) -> f32 {
    c.iter()
        .zip(g)
        .map(
            |(&c, &g)| {
                if c == g {
                    0.0
                } else {
                    (g - c).abs() / c.abs()
                }
            },
        )
        .fold(0.0, f32::max)
}

// ---- routing -------------------------------------------------------------

#[test]
fn softmax_rows() {
    let mut p = Pair::new();
    let (mut worst_nmse, mut worst_rel) = (0.0f64, 0.0f32);
    for (i, &(rows, width)) in [
        (1, 8),
        (7, 32),
        (64, 128),
        (3, 512),
        (5, 1),
        (2, 129),
        (300, 60),
    ]
    .iter()
    .enumerate()
    {
        let x: Vec<f32> = values(10 + i as u64, rows * width)
            .iter()
            .map(|v| v * 8.0)
            .collect();
        let (all, v) = inner(&mut p, rows, width, &x);
        p.cpu.softmax(v.cpu);
        p.gpu.softmax(v.gpu);
        let (c, g) = p.read(v);
        let e = nmse(&c, &g);
        let r = max_rel(&c, &g);
        eprintln!("softmax [{rows}, {width}]: NMSE {e:.2e}, max relative error {r:.2e}");
        assert!(e <= SOFTMAX_NMSE, "softmax [{rows}, {width}]: NMSE {e:e}");
        assert!(
            r <= SOFTMAX_REL,
            "softmax [{rows}, {width}]: relative {r:e}"
        );
        padding_intact(&mut p, all, "softmax");
        worst_nmse = worst_nmse.max(e);
        worst_rel = worst_rel.max(r);
    }
    eprintln!("softmax: worst NMSE {worst_nmse:.2e}, relative {worst_rel:.2e}");
    p.finish("softmax");
}

#[test]
fn normalize_rows_and_the_clamp() {
    let mut p = Pair::new();
    let mut worst = 0.0f32;
    for (i, &(rows, width)) in [(1, 8), (64, 8), (9, 2), (4, 128), (2, 300)]
        .iter()
        .enumerate()
    {
        // Weights as top_k leaves them: positive, some tiny.
        let mut x: Vec<f32> = values(20 + i as u64, rows * width)
            .iter()
            .map(|v| (v + 1.0) * 0.5)
            .collect();
        // A row whose sum is under the clamp: divided by 2^-14, not by it.
        x[..width].iter_mut().for_each(|v| *v *= 1e-8);
        let (all, v) = inner(&mut p, rows, width, &x);
        p.cpu.normalize_rows(v.cpu);
        p.gpu.normalize_rows(v.gpu);
        let (c, g) = p.read(v);
        let r = max_rel(&c, &g);
        eprintln!("normalize_rows [{rows}, {width}]: max relative error {r:.2e}");
        assert!(
            r <= NORMALIZE_REL,
            "normalize_rows [{rows}, {width}]: relative {r:e}"
        );
        assert!(
            c[..width].iter().sum::<f32>() < 0.1,
            "the clamped row stays small"
        );
        padding_intact(&mut p, all, "normalize_rows");
        worst = worst.max(r);
    }
    eprintln!("normalize_rows: worst relative error {worst:.2e}");
    p.finish("normalize_rows");
}

/// Runs top_k on both backends; asserts ids and values equal (and the ids
/// the CPU's argsort gives).
fn check_top_k(p: &mut Pair, probs: &[f32], rows: usize, n: usize, k: usize) {
    let (all, pr) = inner(p, rows, n, probs);
    let (ids_all, ids) = inner(p, rows, k, &vec![-1.0; rows * k]);
    let (w_all, w) = inner(p, rows, k, &vec![-1.0; rows * k]);
    p.cpu.top_k(pr.cpu, ids.cpu, w.cpu);
    p.gpu.top_k(pr.gpu, ids.gpu, w.gpu);
    let (ci, gi) = p.read(ids);
    let (cw, gw) = p.read(w);
    assert_eq!(bits(&ci), bits(&gi), "top_k ids, [{rows}, {n}] k {k}");
    assert_eq!(bits(&cw), bits(&gw), "top_k values, [{rows}, {n}] k {k}");
    for (t, row) in probs.chunks_exact(n).enumerate() {
        let order = argsort_desc(row);
        let want: Vec<f32> = order[..k].iter().map(|&e| e as f32).collect();
        assert_eq!(&gi[t * k..(t + 1) * k], &want[..], "row {t}");
    }
    padding_intact(p, all, "top_k probs");
    padding_intact(p, ids_all, "top_k ids");
    padding_intact(p, w_all, "top_k weights");
}

/// `rows` rows of `n` values drawn from `levels` distinct values: many ties.
fn tied(seed: u64, rows: usize, n: usize, levels: usize) -> Vec<f32> {
    values(seed, rows * n)
        .iter()
        .map(|v| (((v + 1.0) * 0.5 * levels as f32) as usize).min(levels - 1) as f32 / 8.0)
        .collect()
}

#[test]
fn top_k_ties_and_sizes() {
    let mut p = Pair::new();
    for (i, &n) in [1usize, 2, 8, 16, 17, 32, 33, 128, 300, 512]
        .iter()
        .enumerate()
    {
        let rows = if n >= 300 { 9 } else { 33 };
        let seed = 100 + i as u64;
        for k in [1, n.min(2), n.min(8), n] {
            // Random values (ties unlikely), 3 levels (ties everywhere), all
            // equal.
            let random = values(seed, rows * n);
            check_top_k(&mut p, &random, rows, n, k);
            check_top_k(&mut p, &tied(seed, rows, n, 3), rows, n, k);
            check_top_k(&mut p, &vec![0.5; rows * n], rows, n, k);
        }
    }
    p.finish("top_k sizes");
}

#[test]
fn top_k_heap_sort_fallback() {
    // Organ pipes drive the median-of-three partitions past the depth limit
    // (argsort.rs pins this input's order against g++); also descending,
    // ascending, and sawtooth rows.
    let mut p = Pair::new();
    for n in [64usize, 200, 512] {
        let pipe: Vec<f32> = (0..n).map(|i| i.min(n - 1 - i) as f32).collect();
        let asc: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let desc: Vec<f32> = (0..n).map(|i| (n - i) as f32).collect();
        let saw: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
        let rows = [pipe, asc, desc, saw].concat();
        check_top_k(&mut p, &rows, 4, n, 8);
        check_top_k(&mut p, &rows, 4, n, n);
    }
    p.finish("top_k heap sort");
}

#[test]
fn top_k_any_tied_input() {
    // proptest: rows of 1..=512 values from few levels, any k.
    let p = RefCell::new(Pair::new());
    let config = Config {
        cases: 24,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha));
    let shapes = (1usize..=512, 1usize..=4, 1usize..=6, any::<u64>()).prop_flat_map(
        |(n, rows, levels, seed)| (Just(n), 1..=n, Just(rows), Just(levels), Just(seed)),
    );
    runner
        .run(&shapes, |(n, k, rows, levels, seed)| {
            check_top_k(
                &mut p.borrow_mut(),
                &tied(seed, rows, n, levels),
                rows,
                n,
                k,
            );
            Ok(())
        })
        .unwrap();
    p.into_inner().finish("top_k proptest");
}

#[test]
fn groups_are_bit_exact() {
    let mut p = Pair::new();
    for (i, &(rows, g, n)) in [(1, 8, 64), (64, 8, 33), (5, 1, 7), (3, 4, 1)]
        .iter()
        .enumerate()
    {
        let seed = 200 + i as u64;
        let (x_all, x) = inner(&mut p, rows, g * n, &values(seed, rows * g * n));
        let (_, s) = inner(&mut p, rows, g, &values(seed + 1, rows * g));
        p.cpu.mul_groups(x.cpu, s.cpu);
        p.gpu.mul_groups(x.gpu, s.gpu);
        let (c, gv) = p.read(x);
        assert_eq!(bits(&c), bits(&gv), "mul_groups [{rows}, {g} x {n}]");
        padding_intact(&mut p, x_all, "mul_groups");
        let (o_all, out) = inner(&mut p, rows, n, &vec![0.0; rows * n]);
        p.cpu.sum_groups(x.cpu, out.cpu);
        p.gpu.sum_groups(x.gpu, out.gpu);
        let (c, gv) = p.read(out);
        assert_eq!(bits(&c), bits(&gv), "sum_groups [{rows}, {g} x {n}]");
        padding_intact(&mut p, o_all, "sum_groups");
    }
    p.finish("groups");
}

// ---- expert products -----------------------------------------------------

/// Expert ids `[rows, k]` as top_k gives them (distinct in a row), from
/// random router probabilities.
fn routed(seed: u64, rows: usize, n_expert: usize, k: usize) -> Vec<f32> {
    values(seed, rows * n_expert)
        .chunks_exact(n_expert)
        .flat_map(|r| {
            argsort_desc(r)[..k]
                .iter()
                .map(|&e| e as f32)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// One `matmul_id` on both backends; checks the padding and the f64 bound
/// of every element; returns (NMSE vs CPU, NMSE vs f64).
#[allow(clippy::too_many_arguments)]
fn check_matmul_id(
    p: &mut Pair,
    ty: GgmlType,
    w: (WeightSource, &[f32]),
    n_expert: usize,
    ids: &[f32],
    k: usize,
    per_slot: bool,
    seed: u64,
) -> (f64, f64) {
    let (src, deq) = w;
    let (n_in, n_out) = (src.n_in(), src.n_out() / n_expert);
    let rows = ids.len() / k;
    let (wc, wg) = p.weight(&src);
    let x_rows = if per_slot { rows * k } else { rows };
    let xv = values(seed, x_rows * n_in);
    let x_width = if per_slot { k * n_in } else { n_in };
    let (_, x) = inner(p, rows, x_width, &xv);
    let (_, idv) = inner(p, rows, k, ids);
    let (o_all, out) = inner(p, rows, k * n_out, &vec![0.0; rows * k * n_out]);
    p.cpu.matmul_id(wc, n_expert, idv.cpu, x.cpu, out.cpu);
    p.gpu.matmul_id(wg, n_expert, idv.gpu, x.gpu, out.gpu);
    let (c, g) = p.read(out);
    padding_intact(p, o_all, "matmul_id out");
    // The f64 reference (for block types the CPU's per-block products), and
    // the bound on any f32 summation's error (as vulkan_matmul.rs's
    // check_matmul).
    let mut want = vec![0.0f32; g.len()];
    for (s, &id) in ids.iter().enumerate() {
        let e = id as usize;
        let xr = if per_slot { s } else { s / k };
        let xr = &xv[xr * n_in..(xr + 1) * n_in];
        for r in 0..n_out {
            let wr = &deq[(e * n_out + r) * n_in..(e * n_out + r + 1) * n_in];
            let (sum, abs) = reference_dot(src.ty(), src.row(e * n_out + r), wr, xr);
            let o = s * n_out + r;
            want[o] = sum as f32;
            let bound = reference_bound(src.ty(), n_in, abs);
            assert!(
                (f64::from(g[o]) - sum).abs() <= bound,
                "{src:?} pair {s} (expert {e}) row {r}: {} vs f64 {sum} (bound {bound:e})",
                g[o]
            );
        }
    }
    let _ = ty;
    (nmse(&c, &g), nmse(&want, &g))
}

/// Decode (1 row), a few rows, and a 64-row prefill batch (each expert
/// chosen by ~16-32 rows), broadcast and per-slot, in both layouts.
fn matmul_id_type(ty: GgmlType) {
    let mut p = Pair::new();
    let be = ty.block_elems();
    let n_in = if be == 1 { 72 } else { 2 * be };
    let (n_out, n_expert) = (40, 8);
    let (src, deq) = experts(ty, n_in, n_out, n_expert, 7);
    let (mut worst_cpu, mut worst_f64) = (0.0f64, 0.0f64);
    for layout in p.layouts() {
        assert!(p.gpu.set_kernel_layout(layout));
        for (i, &(rows, k)) in [(1, 4), (1, 1), (5, 2), (64, 4)].iter().enumerate() {
            let ids = routed(30 + i as u64, rows, n_expert, k);
            for per_slot in [false, true] {
                let (vc, vf) = check_matmul_id(
                    &mut p,
                    ty,
                    (src.clone(), &deq),
                    n_expert,
                    &ids,
                    k,
                    per_slot,
                    40 + i as u64,
                );
                eprintln!(
                    "{} {layout:?} rows {rows} k {k} per-slot {per_slot}: NMSE vs CPU {vc:.2e}, vs f64 {vf:.2e}",
                    ty.name()
                );
                assert!(vc <= cpu_limit(ty), "{}: vs CPU {vc:e}", ty.name());
                assert!(vf <= LIMIT_F64, "{}: vs f64 {vf:e}", ty.name());
                worst_cpu = worst_cpu.max(vc);
                worst_f64 = worst_f64.max(vf);
            }
        }
    }
    eprintln!(
        "{}: worst NMSE vs CPU {worst_cpu:.2e}, vs f64 {worst_f64:.2e}",
        ty.name()
    );
    p.finish(&format!("matmul_id {}", ty.name()));
}

#[test]
fn matmul_id_every_type() {
    for ty in WEIGHT_TYPES {
        matmul_id_type(ty);
    }
}

#[test]
fn matmul_id_one_expert_for_every_pair() {
    // 40 rows x 4 slots all on expert 3 (ids need not be distinct in a
    // row): 160 pairs, more than the grid's windows cover (sized for 40),
    // so the kernels step their window; other experts unused.
    let mut p = Pair::new();
    let (n_in, n_out, n_expert, k) = (64, 24, 6, 4);
    let (src, deq) = experts(GgmlType::Q8_0, n_in, n_out, n_expert, 9);
    let ids = vec![3.0; 40 * k];
    for layout in p.layouts() {
        assert!(p.gpu.set_kernel_layout(layout));
        for per_slot in [false, true] {
            let (vc, vf) = check_matmul_id(
                &mut p,
                GgmlType::Q8_0,
                (src.clone(), &deq),
                n_expert,
                &ids,
                k,
                per_slot,
                11,
            );
            assert!(vc <= cpu_limit(GgmlType::Q8_0), "{layout:?}: vs CPU {vc:e}");
            assert!(vf <= LIMIT_F64, "{layout:?}: vs f64 {vf:e}");
        }
    }
    p.finish("one expert");
}

#[test]
fn matmul_id_chunked_on_expert_boundaries() {
    // A chunk limit of 2.5 experts: chunks of 2 experts (never a part of
    // one), 7 experts in 4 chunks; each chunk's experts in one dispatch.
    for ty in [GgmlType::Q4_K, GgmlType::F16, GgmlType::Q6_K] {
        let mut p = Pair::new();
        let be = ty.block_elems();
        let n_in = if be == 1 { 40 } else { be };
        let (n_out, n_expert) = (12, 7);
        let expert_bytes = ty.bytes_for((n_in * n_out) as u64).unwrap();
        p.gpu.set_max_chunk_bytes(expert_bytes * 5 / 2);
        let (src, deq) = experts(ty, n_in, n_out, n_expert, 13);
        let (_, wg) = p.weight(&src);
        let chunks = p.gpu.weight(wg).chunks.clone();
        assert_eq!(chunks.len(), 4, "{src:?}");
        assert!(
            chunks
                .iter()
                .all(|c| c.row0 % n_out == 0 && c.rows % n_out == 0),
            "{src:?}: {chunks:?}"
        );
        for layout in p.layouts() {
            assert!(p.gpu.set_kernel_layout(layout));
            for (rows, k) in [(1, 3), (20, 3)] {
                let ids = routed(50, rows, n_expert, k);
                for per_slot in [false, true] {
                    let (vc, vf) = check_matmul_id(
                        &mut p,
                        ty,
                        (src.clone(), &deq),
                        n_expert,
                        &ids,
                        k,
                        per_slot,
                        51,
                    );
                    assert!(vc <= cpu_limit(ty), "{src:?} {layout:?}: vs CPU {vc:e}");
                    assert!(vf <= LIMIT_F64, "{src:?} {layout:?}: vs f64 {vf:e}");
                }
            }
        }
        p.finish(&format!("chunked {}", ty.name()));
    }
}

#[test]
fn matmul_id_expert_larger_than_a_chunk_is_an_error() {
    // An expert that alone exceeds the chunk limit is split by rows (plain
    // matmuls still work on it); matmul_id refuses it at the next transfer.
    let mut p = Pair::new();
    let (n_in, n_out, n_expert) = (32, 8, 2);
    let row_bytes = GgmlType::Q8_0.bytes_for(n_in as u64).unwrap();
    p.gpu.set_max_chunk_bytes(row_bytes * 3);
    let (src, _) = experts(GgmlType::Q8_0, n_in, n_out, n_expert, 17);
    let (_, wg) = p.weight(&src);
    let ids = p.act(1, 1, &[1.0]);
    let x = p.act(1, n_in, &values(18, n_in));
    let out = p.zeros(1, n_out);
    // Submit the buffers' zeroing and sentinels first: a failed recording
    // drops everything recorded since the last submission.
    p.read(x);
    p.gpu.matmul_id(wg, n_expert, ids.gpu, x.gpu, out.gpu);
    let mut v = vec![0.0; n_out];
    let e = p.gpu.read(out.gpu, &mut v).unwrap_err().to_string();
    assert!(e.contains("does not fit in one buffer"), "{e}");
    p.finish("expert over a chunk");
}

#[test]
fn moe_block_in_one_submission() {
    // The whole routed feed-forward of model/moe.rs recorded back to back
    // (router product, softmax, top-k, renormalisation, gate / up / down
    // expert products, SwiGLU, weighting, sum): one submission, barriers
    // only from the declared ranges; validation (sync included) stays
    // silent and the output matches the CPU's.
    let mut p = Pair::new();
    let (n_embd, n_ff, n_expert, k, rows) = (64, 96, 8, 2, 9);
    let q = GgmlType::Q8_0;
    let router: Vec<f32> = values(60, n_embd * n_expert)
        .iter()
        .map(|v| v * 4.0)
        .collect();
    let (rc, rg) = p.weight(&WeightSource::from_f32("router", n_embd, n_expert, &router));
    let (gate, _) = experts(q, n_embd, n_ff, n_expert, 61);
    let (up, _) = experts(q, n_embd, n_ff, n_expert, 62);
    let (down, _) = experts(q, n_ff, n_embd, n_expert, 63);
    let (gc, gg) = p.weight(&gate);
    let (uc, ug) = p.weight(&up);
    let (dc, dg) = p.weight(&down);
    let x = p.act(rows, n_embd, &values(64, rows * n_embd));
    let probs = p.zeros(rows, n_expert);
    let ids = p.zeros(rows, k);
    let wts = p.zeros(rows, k);
    let g = p.zeros(rows, k * n_ff);
    let u = p.zeros(rows, k * n_ff);
    let y = p.zeros(rows, k * n_embd);
    let out = p.zeros(rows, n_embd);
    let submissions = p.gpu.stats().submissions;
    for (ops, [r, wg_, wu, wd], v) in [
        (&mut p.cpu as &mut dyn Ops, [rc, gc, uc, dc], 0),
        (&mut p.gpu as &mut dyn Ops, [rg, gg, ug, dg], 1),
    ] {
        let a = |b: Both| if v == 0 { b.cpu } else { b.gpu };
        ops.matmul(r, a(x), a(probs));
        ops.softmax(a(probs));
        ops.top_k(a(probs), a(ids), a(wts));
        ops.normalize_rows(a(wts));
        ops.matmul_id(wu, n_expert, a(ids), a(x), a(u));
        ops.matmul_id(wg_, n_expert, a(ids), a(x), a(g));
        ops.glu(GluKind::SwiGlu, a(g), a(u));
        ops.matmul_id(wd, n_expert, a(ids), a(g), a(y));
        ops.mul_groups(a(y), a(wts));
        ops.sum_groups(a(y), a(out));
    }
    let (ci, gi) = p.read(ids);
    assert_eq!(
        p.gpu.stats().submissions,
        submissions + 1,
        "one submission for the block"
    );
    assert_eq!(ci, gi, "the same experts chosen");
    let (c, g) = p.read(out);
    let e = nmse(&c, &g);
    eprintln!("moe block: NMSE vs CPU {e:.2e}");
    assert_nmse("moe block", &c, &g, BLOCK_NMSE);
    p.finish("moe block");
}
