//! The Vulkan matrix products (matvec, tiled matmul, expert products) and
//! the embedding lookup at the edges, for every weight type: long rows of
//! large activations with outliers (massive activations: a few elements
//! 1000x the rest), NaN and ±inf among the activations, and weights
//! quantized from values so small that their f16 scales are subnormal or
//! so large that they overflow to inf. Each product is checked against an
//! f64 reference (float weights: the dequantized weights times x; block
//! types: the sum of the CPU's per-block products of x quantized to the
//! type's dot format, which the GPU quantizes to the same bytes): the same
//! IEEE class where that is specified, every finite element within the f32
//! summation bound; and against the CPU op (NMSE). The rules, and where the
//! activation formats end, are at `Ops::matmul` in engine/src/ops.rs.

use crate::vulkan_support;

use engine::ggml_type::WEIGHT_TYPES as TYPES;
use engine::ops::{Ops, WeightSource};
use engine::quant::{dequantize_row, quantize_row};
use engine::GgmlType;
use vulkan_support::extreme::{class, classes_and_nmse, Worst};
use vulkan_support::weights::{reference_bound, reference_dot, weight};
use vulkan_support::{values, Pair};

/// The largest |x| the CPU's dot format for `ty` holds in every block
/// (ggml's activation formats, engine/src/cpu/act.rs): f16 for F16 weights;
/// Q8_1's f16 block sum `d · Σq` for Q4_1 / Q5_1 (at most 32 · amax);
/// Q8_0's f16 scale `amax / 127` for the other legacy types; Q8_K (f32
/// scale) and F32 / BF16 reach f32's range.
fn cpu_range(ty: GgmlType) -> f32 {
    use GgmlType::*;
    match ty {
        F16 => 65504.0,
        Q4_1 | Q5_1 => 65504.0 / 32.0,
        Q4_0 | Q5_0 | Q8_0 => 127.0 * 65504.0,
        _ => 1e30,
    }
}

/// `rows` rows of `n` activations for `ty`: the bulk in [-1, 1] times
/// `range / 1000`, and every 300th element an outlier at ±0.9 `range`.
fn activations(ty: GgmlType, seed: u64, rows: usize, n: usize) -> Vec<f32> {
    let r = cpu_range(ty);
    let mut x: Vec<f32> = values(seed, rows * n)
        .iter()
        .map(|v| v * r / 1000.0)
        .collect();
    for (k, i) in (17..x.len()).step_by(300).enumerate() {
        x[i] = if k % 2 == 0 { 0.9 * r } else { -0.9 * r };
    }
    x
}

/// Runs `x` (`[rows, n_in]`) through `w` on both backends: (cpu, gpu).
fn product(p: &mut Pair, w: &WeightSource, x: &[f32], rows: usize) -> (Vec<f32>, Vec<f32>) {
    let (wc, wg) = p.weight(w);
    let xa = p.act(rows, w.n_in(), x);
    let out = p.zeros(rows, w.n_out());
    p.cpu.matmul(wc, xa.cpu, out.cpu);
    p.gpu.matmul(wg, xa.gpu, out.gpu);
    p.read(out)
}

/// The f64 references ([`reference_dot`]) of `src` (dequantized `deq`,
/// `[n_out, n_in]`) and `x`, with the absolute sums that bound f32
/// rounding.
fn reference(src: &WeightSource, deq: &[f32], n_in: usize, x: &[f32]) -> Vec<(f64, f64)> {
    x.chunks_exact(n_in)
        .flat_map(|xr| {
            deq.chunks_exact(n_in)
                .enumerate()
                .map(move |(r, wr)| reference_dot(src.ty(), src.row(r), wr, xr))
        })
        .collect()
}

/// Every element of `got` finite where `want` is, and within the f32
/// summation bound of it.
fn within_f32_bound(ty: GgmlType, what: &str, got: &[f32], want: &[(f64, f64)], n_in: usize) {
    for (i, (&g, &(w, abs))) in got.iter().zip(want).enumerate() {
        if !w.is_finite() {
            continue;
        }
        let bound = reference_bound(ty, n_in, abs);
        assert!(
            (f64::from(g) - w).abs() <= bound,
            "{what}: out[{i}] = {g:e}, f64 gives {w:e} (bound {bound:e})"
        );
    }
}

// Rows of 8192 with outliers, at each type's largest range on the CPU
// (cpu_range): both backends quantize such blocks coarsely (an outlier sets
// the block's scale) to the same bytes; the float types' GPU products
// multiply f32 activations. Worst NMSE against the CPU on lavapipe (both
// layouts, 1 and 5 rows; expert products alike): F32 3.8e-12, F16 2.7e-8,
// BF16 1.8e-6; the block types at vulkan_matmul.rs's limit (order of the
// f32 sums only). Limits ~4x, at least vulkan_matmul.rs's.
fn large_cpu_limit(ty: GgmlType) -> f64 {
    use GgmlType::*;
    match ty {
        F32 => 1.5e-11,
        F16 | BF16 => vulkan_support::weights::cpu_limit(ty),
        // 256 blocks of 32 per row: more f32 additions in another order
        // than vulkan_matmul.rs's rows; measured at most 5.2e-13 (Q4_1).
        _ => 2e-12,
    }
}

#[test]
fn long_rows_of_large_activations_every_type() {
    let mut p = Pair::new();
    let mut worst = Worst::default();
    let (n_in, n_out) = (8192, 48);
    for layout in p.layouts() {
        assert!(p.gpu.set_kernel_layout(layout));
        for (i, &ty) in TYPES.iter().enumerate() {
            let (src, deq) = weight(ty, n_in, n_out, 40 + i as u64);
            for rows in [1, 5] {
                let x = activations(ty, 50 + i as u64, rows, n_in);
                let (c, g) = product(&mut p, &src, &x, rows);
                let what = format!("{src:?} {layout:?} rows {rows}");
                within_f32_bound(ty, &what, &g, &reference(&src, &deq, n_in, &x), n_in);
                let e = classes_and_nmse(&what, &c, &g);
                let limit = large_cpu_limit(ty);
                assert!(e <= limit, "{what}: NMSE vs CPU {e:e} over {limit:e}");
                worst.note(&format!("{} vs CPU", ty.name()), e);
            }
        }
    }
    p.finish("long rows");
}

/// Which outputs must be non-finite: those whose f64 reference is (for
/// F32, F16 and BF16 weights, the IEEE class itself).
fn check_specials(what: &str, ty: GgmlType, got: &[f32], want: &[(f64, f64)]) {
    for (i, (&g, &(w, _))) in got.iter().zip(want).enumerate() {
        let w32 = w as f32;
        let ok = match ty {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => class(g) == class(w32),
            _ => g.is_finite() == w.is_finite(),
        };
        assert!(ok, "{what}: out[{i}] = {g:e} where f64 gives {w:e}");
    }
}

/// NaN, +inf, -inf and both infinities in one row each (rows of x with
/// the rest in [-1, 1]): the outputs of such a row are non-finite on the
/// GPU exactly where the f64 reference is; for float weights, of its
/// class. Block types: both backends quantize x as ggml's x86 quantizer
/// does (NaN to the quant -128 of a finite block unless nothing follows it
/// in the block, ±inf to a block scale of inf), so the GPU has the CPU's
/// classes everywhere.
#[test]
fn nan_and_inf_activations_every_type() {
    let mut p = Pair::new();
    for layout in p.layouts() {
        assert!(p.gpu.set_kernel_layout(layout));
        for (i, &ty) in TYPES.iter().enumerate() {
            let n_in = 512;
            let (src, deq) = weight(ty, n_in, 40, 60 + i as u64);
            let rows = 5;
            let mut x = values(70 + i as u64, rows * n_in);
            x[n_in + 100] = f32::NAN;
            x[2 * n_in + 33] = f32::INFINITY;
            x[3 * n_in + 300] = f32::NEG_INFINITY;
            x[4 * n_in + 1] = f32::INFINITY;
            x[4 * n_in + 400] = f32::NEG_INFINITY;
            let (c, g) = product(&mut p, &src, &x, rows);
            let want = reference(&src, &deq, n_in, &x);
            let what = format!("{src:?} {layout:?}");
            check_specials(&what, ty, &g, &want);
            within_f32_bound(ty, &what, &g, &want, n_in);
            if matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) {
                // The CPU's classes (row 0 is all finite and matches the
                // CPU as in vulkan_matmul.rs; the others' are IEEE's).
                classes_and_nmse(&what, &c, &g);
            } else {
                // Finite where the CPU's SIMD kernels are: a block scale of
                // inf times a lane sum of 0 is NaN there and ±inf here (in
                // the scalar kernels' one sum per block), so only
                // finiteness is compared.
                for (i, (a, b)) in c.iter().zip(&g).enumerate() {
                    assert_eq!(
                        a.is_finite(),
                        b.is_finite(),
                        "{what}: out[{i}] CPU {a:e}, GPU {b:e}"
                    );
                }
            }
            // Either way, the finite row 0 is finite on both.
            assert!(
                c[..40].iter().chain(&g[..40]).all(|v| v.is_finite()),
                "{what}: row 0"
            );
        }
    }
    p.finish("NaN and inf activations");
}

/// Weights quantized from `values × s`: (source, dequantized).
fn weight_scaled(
    ty: GgmlType,
    n_in: usize,
    n_out: usize,
    seed: u64,
    s: f32,
) -> (WeightSource, Vec<f32>) {
    let v: Vec<f32> = values(seed, n_in * n_out).iter().map(|x| x * s).collect();
    let mut bytes = vec![0u8; ty.bytes_for(v.len() as u64).unwrap() as usize];
    quantize_row(ty, &v, &mut bytes).unwrap();
    let mut deq = vec![0.0; v.len()];
    dequantize_row(ty, &bytes, &mut deq).unwrap();
    let name = format!("{}[{n_in}, {n_out}] x{s:e}", ty.name());
    (WeightSource::from_bytes(&name, ty, n_in, n_out, bytes), deq)
}

// Weights from values x 1e-6 (legacy and K-quant scales below f16's
// normal range: subnormal halves) and x 1e6 (f16 scales and F16 weights
// overflow to inf). Worst NMSE against the CPU of finite products on
// lavapipe, every type: 1.7e-5 (x 1e-6), 1.9e-5 (x 1e6); each type is held
// to vulkan_matmul.rs's limit (cpu_limit), which is over 4x its worst.

#[test]
fn weights_with_subnormal_and_infinite_scales_every_type() {
    let mut p = Pair::new();
    let mut worst = Worst::default();
    let (n_in, n_out) = (512, 40);
    for layout in p.layouts() {
        assert!(p.gpu.set_kernel_layout(layout));
        for (i, &ty) in TYPES.iter().enumerate() {
            for s in [1e-6f32, 1e6] {
                let (src, deq) = weight_scaled(ty, n_in, n_out, 80 + i as u64, s);
                // The embedding rows: the CPU's bits (NaN where it has NaN).
                let tokens = [0u32, 7, 39];
                let (wc, wg) = p.weight(&src);
                let e = p.zeros(tokens.len(), n_in);
                p.cpu.embed(wc, &tokens, e.cpu);
                p.gpu.embed(wg, &tokens, e.gpu);
                let (ec, eg) = p.read(e);
                let what = format!("{src:?} embed");
                vulkan_support::extreme::assert_same_values(&what, &ec, &eg);
                for (t, &id) in tokens.iter().enumerate() {
                    let row = &deq[id as usize * n_in..(id as usize + 1) * n_in];
                    let got = &eg[t * n_in..(t + 1) * n_in];
                    assert!(
                        row.iter()
                            .zip(got)
                            .all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())),
                        "{what}: token {id} is not the dequantized row"
                    );
                }
                let x = values(90 + i as u64, 3 * n_in);
                let (c, g) = product(&mut p, &src, &x, 3);
                let want = reference(&src, &deq, n_in, &x);
                let what = format!("{src:?} {layout:?}");
                check_specials(&what, ty, &g, &want);
                within_f32_bound(ty, &what, &g, &want, n_in);
                if c.iter()
                    .zip(&g)
                    .all(|(a, b)| a.is_finite() && b.is_finite())
                {
                    let e = classes_and_nmse(&what, &c, &g);
                    let limit = vulkan_support::weights::cpu_limit(ty);
                    assert!(e <= limit, "{what}: vs CPU {e:e} over {limit:e}");
                    worst.note(&format!("x{s:e} vs CPU"), e);
                }
            }
        }
    }
    p.finish("scaled weights");
}

// Expert products (mul_mat_id) of large activations with outliers, two
// experts per row, held to large_cpu_limit. Worst NMSE against the CPU on
// lavapipe: F32 8.2e-13; the block types as vulkan_matmul.rs's.

#[test]
fn expert_products_of_large_activations() {
    let mut p = Pair::new();
    let mut worst = Worst::default();
    let (n_in, n_out, n_exp, k, rows) = (2048, 32, 4, 2, 6);
    for layout in p.layouts() {
        assert!(p.gpu.set_kernel_layout(layout));
        for (i, ty) in [
            GgmlType::F32,
            GgmlType::Q4_1,
            GgmlType::Q8_0,
            GgmlType::Q4_K,
            GgmlType::Q6_K,
        ]
        .into_iter()
        .enumerate()
        {
            let (src, _) = vulkan_support::weights::experts(ty, n_in, n_out, n_exp, 120 + i as u64);
            let (wc, wg) = p.weight(&src);
            let x = activations(ty, 130 + i as u64, rows, n_in);
            let xa = p.act(rows, n_in, &x);
            let ids: Vec<f32> = (0..rows * k)
                .map(|j| ((j * 3 + j / k) % n_exp) as f32)
                .collect();
            let ia = p.act(rows, k, &ids);
            let out = p.zeros(rows, k * n_out);
            p.cpu.matmul_id(wc, n_exp, ia.cpu, xa.cpu, out.cpu);
            p.gpu.matmul_id(wg, n_exp, ia.gpu, xa.gpu, out.gpu);
            let (c, g) = p.read(out);
            let what = format!("{src:?} {layout:?}");
            let e = classes_and_nmse(&what, &c, &g);
            let limit = large_cpu_limit(ty);
            assert!(e <= limit, "{what}: vs CPU {e:e} over {limit:e}");
            worst.note(&format!("{} vs CPU", ty.name()), e);
            // A NaN in row 2 of x: for F32 its slots' outputs are
            // non-finite; for block types the CPU's quantizer makes it the
            // quant -128 of a finite block, on both backends.
            let mut xn = x.clone();
            xn[2 * n_in + 5] = f32::NAN;
            p.cpu.write(xa.cpu, &xn).unwrap();
            p.gpu.write(xa.gpu, &xn).unwrap();
            p.cpu.matmul_id(wc, n_exp, ia.cpu, xa.cpu, out.cpu);
            p.gpu.matmul_id(wg, n_exp, ia.gpu, xa.gpu, out.gpu);
            let (c, g) = p.read(out);
            if ty == GgmlType::F32 {
                for (j, v) in g.iter().enumerate() {
                    let row = j / (k * n_out);
                    assert_eq!(v.is_finite(), row != 2, "{what}: NaN row, out[{j}] = {v}");
                }
            }
            classes_and_nmse(&format!("{what} NaN row"), &c, &g);
        }
    }
    p.finish("expert products");
}
