//! The Vulkan mixture-of-experts ops at the edges: router logits far beyond
//! exp's range (softmax must subtract the row's max), -inf, +inf and NaN
//! among them, probabilities that underflow to 0 (and to subnormals) before
//! the top-k, infinite and NaN probabilities, rows whose sum is below the
//! 2^-14 clamp or overflows f32 (normalize_rows), and the group products
//! and sums of huge values and specials. Each output must have the CPU's
//! IEEE class element by element; finite ones an NMSE limit or the CPU's
//! bits. Rules: engine/src/ops.rs at each op.

use crate::vulkan_support;

use engine::ops::Ops;
use vulkan_support::extreme::{
    assert_classes_nmse, assert_same_values, either, ftz, scaled, spread, Worst,
};
use vulkan_support::{values, Pair};

/// `op` on a `[rows, width]` activation holding `x`, in place: (cpu, gpu).
fn rows_op(
    p: &mut Pair,
    x: &[f32],
    width: usize,
    op: &dyn Fn(&mut dyn Ops, engine::ops::Act),
) -> (Vec<f32>, Vec<f32>) {
    let a = p.act(x.len() / width, width, x);
    op(&mut p.cpu, a.cpu);
    op(&mut p.gpu, a.gpu);
    p.read(a)
}

/// Rows of `width` logits, each of a kind: spread to 1e30, scaled by 100
/// and 1e4, with -inf entries, all -inf, with +inf, with NaN.
fn logit_rows(seed: u64, width: usize) -> Vec<f32> {
    let mut x = Vec::new();
    x.extend(spread(seed, width, -3.0, 30.0));
    x.extend(scaled(seed ^ 1, width, 100.0));
    x.extend(scaled(seed ^ 2, width, 1e4));
    let mut r = scaled(seed ^ 3, width, 30.0);
    for v in r.iter_mut().step_by(3) {
        *v = f32::NEG_INFINITY;
    }
    x.extend(r);
    x.extend(vec![f32::NEG_INFINITY; width]);
    let mut r = values(seed ^ 4, width);
    r[width / 2] = f32::INFINITY;
    x.extend(r);
    let mut r = values(seed ^ 5, width);
    r[width - 1] = f32::NAN;
    x.extend(r);
    x
}

// Softmax of logits up to 1e30 (one-hot rows: exp of anything but the max
// underflows to 0) and of -inf (weight 0), all -inf (NaN: -inf - -inf),
// +inf or NaN (the row NaN). Worst NMSE of finite rows on lavapipe:
// 1.0e-15; limit vulkan_moe.rs's 1e-13.
const SOFTMAX_LIMIT: f64 = 1e-13;

#[test]
fn softmax_of_huge_and_infinite_logits() {
    let mut p = Pair::new();
    let mut worst = Worst::default();
    for (i, width) in [4usize, 8, 32, 128, 300].into_iter().enumerate() {
        let x = logit_rows(i as u64, width);
        let (c, g) = rows_op(&mut p, &x, width, &|o, a| o.softmax(a));
        let what = format!("softmax width {width}");
        worst.note("softmax", assert_classes_nmse(&what, &c, &g, SOFTMAX_LIMIT));
    }
    p.finish("softmax extremes");
}

/// The top-k of probabilities with exact zeros, subnormals, infinities and
/// an all-NaN row: ids and values equal to the CPU's (an all-NaN row
/// compares false everywhere, as a row of ties: ids in the CPU sort's order
/// of equal values).
#[test]
fn top_k_of_zeros_infinities_and_nan_rows() {
    let mut p = Pair::new();
    for (i, (n, k)) in [(8usize, 2usize), (32, 8), (128, 8), (60, 4)]
        .into_iter()
        .enumerate()
    {
        let mut x = Vec::new();
        // Softmax of logits x 1e4: one 1, the rest 0 (ties of zeros).
        let mut r = scaled(i as u64, n, 1e4);
        engine::cpu::softmax(&mut r, n);
        x.extend(r);
        // Normal values, subnormals and zeros together.
        x.extend((0..n).map(|j| match j % 3 {
            0 => f32::from_bits(1 + j as u32),
            1 => 0.0,
            _ => 1e-30 * (j as f32),
        }));
        // Infinities among ordinary values.
        let mut r = values(i as u64 + 10, n);
        r[1] = f32::INFINITY;
        r[n - 2] = f32::NEG_INFINITY;
        r[n / 2] = f32::INFINITY;
        x.extend(r);
        x.extend(vec![f32::NAN; n]);
        let rows = x.len() / n;
        let pr = p.act(rows, n, &x);
        let ids = p.zeros(rows, k);
        let wts = p.zeros(rows, k);
        p.cpu.top_k(pr.cpu, ids.cpu, wts.cpu);
        p.gpu.top_k(pr.gpu, ids.gpu, wts.gpu);
        let (ci, gi) = p.read(ids);
        let (cw, gw) = p.read(wts);
        assert_eq!(ci, gi, "top_k ids, n {n} k {k}");
        assert_same_values(&format!("top_k values, n {n} k {k}"), &cw, &gw);
    }
    p.finish("top_k extremes");
}

// Renormalisation of rows at 1e-30 (the sum under the 2^-14 clamp: divided
// by 2^-14), 1e30, 3e38 (the f32 sum overflows: x / inf = 0, as the CPU's
// f64 sum rounded to f32 is inf), with an infinity (inf / inf = NaN there,
// 0 elsewhere) and NaN (ggml's clamp makes a NaN sum inf: the NaN stays,
// the rest 0; the GPU, and the CPU here, clamped NaN to 2^-14 and the GPU
// gave inf for an inf sum until this test). Worst NMSE on lavapipe: 0;
// limit 1e-13 (vulkan_moe.rs allows 2.5e-7 relative per value: an NMSE of
// at most 6.3e-14).
const NORMALIZE_LIMIT: f64 = 1e-13;

#[test]
fn normalize_rows_of_tiny_huge_and_infinite_sums() {
    let mut p = Pair::new();
    let mut worst = Worst::default();
    for (i, width) in [2usize, 8, 64].into_iter().enumerate() {
        let mut x = Vec::new();
        for (j, mag) in [1e-30f32, 1e-6, 1.0, 1e30, 3e38].into_iter().enumerate() {
            // Probabilities are not negative: |values| x mag.
            x.extend(
                values(10 * i as u64 + j as u64, width)
                    .iter()
                    .map(|v| v.abs() * mag),
            );
        }
        let mut r = values(i as u64 + 50, width);
        r[0] = f32::INFINITY;
        x.extend(r.iter().map(|v| v.abs()));
        let mut r = values(i as u64 + 60, width);
        r[width - 1] = f32::NAN;
        x.extend(r);
        let (c, g) = rows_op(&mut p, &x, width, &|o, a| o.normalize_rows(a));
        // A device that may flush denormals (a row at 1e-30 sums below
        // 2^-126 on the way): the CPU from flushed inputs where it matches.
        let f = p
            .may_flush()
            .then(|| ftz(&rows_op(&mut p, &ftz(&x), width, &|o, a| o.normalize_rows(a)).0));
        let c = either(&c, f.as_deref(), &g);
        let what = format!("normalize_rows width {width}");
        worst.note(
            "normalize_rows",
            assert_classes_nmse(&what, &c, &g, NORMALIZE_LIMIT),
        );
    }
    p.finish("normalize_rows extremes");
}

/// mul_groups and sum_groups are single IEEE operations in a fixed order:
/// the CPU's bits over the whole f32 range, overflow and specials included.
#[test]
fn group_products_and_sums_are_ieee() {
    let mut p = Pair::new();
    let (rows, g, n) = (5, 4, 300);
    let mut x = spread(1, rows * g * n, -38.0, 38.5);
    for (k, i) in (0..x.len()).step_by(173).enumerate() {
        x[i] = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0][k % 4];
    }
    let mut s = spread(2, rows * g, -20.0, 20.0);
    s[3] = f32::INFINITY;
    s[7] = 0.0;
    s[11] = f32::NAN;
    let mul = |p: &mut Pair, x: &[f32], s: &[f32]| {
        let xa = p.act(rows, g * n, x);
        let sa = p.act(rows, g, s);
        p.cpu.mul_groups(xa.cpu, sa.cpu);
        p.gpu.mul_groups(xa.gpu, sa.gpu);
        p.read(xa)
    };
    let sum = |p: &mut Pair, x: &[f32]| {
        let out = p.zeros(rows, n);
        let ya = p.act(rows, g * n, x);
        p.cpu.sum_groups(ya.cpu, out.cpu);
        p.gpu.sum_groups(ya.gpu, out.gpu);
        p.read(out)
    };
    // A device that may flush denormals: the CPU's result from flushed
    // inputs, flushed, where the GPU has it.
    let flush = p.may_flush();
    let (c, gg) = mul(&mut p, &x, &s);
    let f = flush.then(|| ftz(&mul(&mut p, &ftz(&x), &ftz(&s)).0));
    assert_same_values("mul_groups", &either(&c, f.as_deref(), &gg), &gg);
    let (c, gg) = sum(&mut p, &x);
    let f = flush.then(|| ftz(&sum(&mut p, &ftz(&x)).0));
    assert_same_values("sum_groups", &either(&c, f.as_deref(), &gg), &gg);
    p.finish("group ops");
}
