//! The Vulkan elementwise ops, RMS norm and RoPE against the CPU backend at
//! the edges of f32, as llama.cpp's test-backend-ops does beyond its [-1, 1]
//! inputs: magnitudes from 1e-38 to 3e38 (log-uniform), rows near 1e-30
//! and 1e30, RoPE at positions past 2^13, and NaN and ±inf planted among
//! them. Each output must have the CPU's IEEE class element by element
//! (NaN where the CPU has NaN, an infinity of the same sign, finite where
//! it is finite; `vulkan_support::extreme`), and the finite elements are
//! held to an NMSE limit or to the CPU's bits. The rules are in
//! `engine/src/ops.rs`. Limits: the worst measured on lavapipe (Mesa's CPU
//! driver) is in the comment above each; run with `-- --nocapture` to see
//! them.

use crate::vulkan_support;

use engine::ops::{GluKind, Ops, RopeParams, RopeStyle, UnaryOp, WeightSource};
use vulkan_support::extreme::{
    assert_classes_nmse, assert_same_values, either, ftz, scaled, spread, Worst, SPECIALS,
};
use vulkan_support::{values, Pair};

/// `v` with the specials (NaN, ±inf) and zeros written at every `every`-th
/// element from `start`.
fn plant(mut v: Vec<f32>, start: usize, every: usize) -> Vec<f32> {
    let specials = [SPECIALS[0], SPECIALS[1], SPECIALS[2], 0.0, -0.0];
    for (k, i) in (start..v.len()).step_by(every).enumerate() {
        v[i] = specials[k % specials.len()];
    }
    v
}

/// `x = op(x, y)` on both backends for `[rows, width]` inputs: (cpu, gpu).
fn binary(
    pair: &mut Pair,
    op: engine::ops::BinaryOp,
    x: &[f32],
    y: &[f32],
) -> (Vec<f32>, Vec<f32>) {
    let width = x.len();
    let a = pair.act(1, width, x);
    let b = pair.act(1, width, y);
    pair.cpu.binary(op, a.cpu, b.cpu);
    pair.gpu.binary(op, a.gpu, b.gpu);
    pair.read(a)
}

fn unary(pair: &mut Pair, op: UnaryOp, x: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let a = pair.act(1, x.len(), x);
    pair.cpu.unary(op, a.cpu);
    pair.gpu.unary(op, a.gpu);
    pair.read(a)
}

/// Add, mul and scale are one IEEE operation each: the CPU's bits, over
/// the whole f32 range (overflow to ±inf, results below 2^-126, inf - inf,
/// 0 · inf) and with NaN and ±inf among the inputs.
#[test]
fn add_mul_scale_are_ieee_over_the_whole_range() {
    use engine::ops::BinaryOp::{Add, Mul};
    let mut pair = Pair::new();
    let n = 20_000;
    for seed in 0..4u64 {
        let x = plant(spread(seed, n, -38.0, 38.5), 3, 97);
        let y = plant(spread(seed ^ 9, n, -38.0, 38.5), 5, 89);
        // A device that may flush denormals: the CPU's result from
        // flushed inputs, flushed, is the reference where the GPU has it.
        let flush = pair.may_flush();
        for op in [Add, Mul] {
            let (c, g) = binary(&mut pair, op, &x, &y);
            let f = flush.then(|| ftz(&binary(&mut pair, op, &ftz(&x), &ftz(&y)).0));
            assert_same_values(op.name(), &either(&c, f.as_deref(), &g), &g);
        }
        for s in [1e30f32, -1e-30, 3.4e38, f32::INFINITY, f32::NAN, 0.0] {
            let (c, g) = unary(&mut pair, UnaryOp::Scale(s), &x);
            let f = flush.then(|| ftz(&unary(&mut pair, UnaryOp::Scale(s), &ftz(&x)).0));
            assert_same_values(&format!("scale {s:e}"), &either(&c, f.as_deref(), &g), &g);
        }
    }
    pair.finish("add, mul, scale");
}

/// `dst = src` copies bits (NaN payloads and -0 included).
#[test]
fn copy_keeps_every_bit() {
    let mut pair = Pair::new();
    let mut x = plant(spread(1, 5000, -45.0, 38.5), 0, 13);
    x.extend([
        f32::from_bits(0x7fc0_1234),
        f32::from_bits(0xffff_ffff),
        f32::MIN_POSITIVE / 8.0,
    ]);
    let src = pair.act(1, x.len(), &x);
    let dst = pair.zeros(1, x.len());
    pair.cpu.copy(src.cpu, dst.cpu);
    pair.gpu.copy(src.gpu, dst.gpu);
    let (c, g) = pair.read(dst);
    assert_eq!(vulkan_support::bits(&c), vulkan_support::bits(&x));
    assert_eq!(vulkan_support::bits(&g), vulkan_support::bits(&x));
    pair.finish("copy");
}

// Softcap at |x| up to 3e38 (tanh saturates to ±1: ±cap) and ±inf (±cap),
// NaN (NaN). Worst NMSE of the finite elements on lavapipe (4 seeds x 3
// caps x 20,000 values): 5.2e-17. The limit is vulkan_elementwise.rs's for
// inputs in [-50, 50] (3e-13: headroom for another driver's exp), which is
// over 4x that.
const SOFTCAP_LIMIT: f64 = 3e-13;

#[test]
fn softcap_saturates_and_keeps_nan() {
    let mut pair = Pair::new();
    let mut worst = Worst::default();
    for seed in 0..4u64 {
        let x = plant(spread(seed, 20_000, -3.0, 38.5), 1, 101);
        for cap in [0.5f32, 30.0, 50.0] {
            let (c, g) = unary(&mut pair, UnaryOp::Softcap(cap), &x);
            let e = assert_classes_nmse(&format!("softcap {cap}"), &c, &g, SOFTCAP_LIMIT);
            worst.note("softcap", e);
        }
    }
    pair.finish("softcap");
}

// The gated activations with the gate g at |g| from 1e-3 to 3e38 and the
// up projection in [-1, 1] (and the reverse), NaN and ±inf planted in
// either. silu(g) = g / (1 + e^-g): g for large g, -0 once e^-g overflows,
// NaN at g = -inf (-inf / inf), as on the CPU; geglu: g · u for g >= 10, 0
// itself for g <= -10 (the GPU wrote 0 · u, NaN for u = ±inf or NaN, until
// this test; ggml's CPU writes 0). Worst NMSE on lavapipe: swiglu 3.0e-15
// (limit: vulkan_elementwise.rs's 5e-14, over 4x), geglu 2.1e-11 (an
// element on the other f16 neighbour of the table value; limit ~4x).
const SWIGLU_LIMIT: f64 = 5e-14;
const GEGLU_LIMIT: f64 = 1e-10;

#[test]
fn glu_at_large_gates_and_specials() {
    use engine::ops::BinaryOp::Glu;
    let mut pair = Pair::new();
    let mut worst = Worst::default();
    let n = 20_000;
    for seed in 0..4u64 {
        let big = plant(spread(seed, n, -3.0, 38.5), 2, 103);
        let small = plant(values(seed ^ 5, n), 7, 211);
        for (kind, what, limit) in [
            (GluKind::SwiGlu, "swiglu", SWIGLU_LIMIT),
            (GluKind::GeGluTanh, "geglu", GEGLU_LIMIT),
        ] {
            // Large gates, moderate up; moderate gates, large up.
            let (c, g) = binary(&mut pair, Glu(kind), &big, &values(seed ^ 6, n));
            worst.note(what, assert_classes_nmse(what, &c, &g, limit));
            let (c, g) = binary(&mut pair, Glu(kind), &scaled(seed ^ 7, n, 20.0), &big);
            worst.note(what, assert_classes_nmse(what, &c, &g, limit));
            let (c, g) = binary(&mut pair, Glu(kind), &small, &values(seed ^ 8, n));
            worst.note(what, assert_classes_nmse(what, &c, &g, limit));
        }
    }
    pair.finish("glu extremes");
}

// RMS norm of rows whose magnitude is 1e-30 .. 1e30. As ggml's CPU: the
// squares are f32 (a square past 3.4e38, |x| > 1.8e19, is inf and the row
// comes out 0: 1 / sqrt(inf) = 0), their sum f64 (a row of 1e19s sums past
// f32's range and still normalises), the mean rounded to f32. Until this
// test the GPU gave NaN for both (its compensated f32 sum turned inf into
// NaN; its Dekker split overflowed for means past 8e34). Worst NMSE on
// lavapipe: 0 (the CPU's bits); the limit is vulkan_elementwise.rs's 1e-13.
const RMS_NORM_LIMIT: f64 = 1e-13;

#[test]
fn rms_norm_of_tiny_and_huge_rows() {
    let mut pair = Pair::new();
    let mut worst = Worst::default();
    let mags = [
        1e-30f32, 1e-20, 1e-10, 1.0, 1e10, 1e18, 1e19, 1.8e19, 3e19, 1e30, 3e38,
    ];
    for (i, &width) in [64usize, 576, 4096].iter().enumerate() {
        for (j, &mag) in mags.iter().enumerate() {
            let seed = (i * 100 + j) as u64;
            let rows = 4;
            let mut x = scaled(seed, rows * width, mag);
            // Row 1: one element 1e6 times the rest; row 2: a NaN (the
            // group NaN); row 3: an infinity (inf * 0 = NaN there, ±0 or
            // NaN elsewhere as the CPU says).
            x[width + 5] *= 1e6;
            x[2 * width + 7] = f32::NAN;
            x[3 * width + 11] = f32::INFINITY;
            // (group, weight): whole rows and heads of 32 / 64, with and
            // without a weight of the group's length.
            for (group, weighted) in [(width, false), (width, true), (32, false), (64, true)] {
                let w = weighted.then(|| {
                    let v = scaled(seed ^ group as u64, group, 2.0);
                    pair.weight(&WeightSource::from_f32("norm", group, 1, &v))
                });
                let a = pair.act(rows, width, &x);
                let out = pair.zeros(rows, width);
                pair.cpu
                    .rms_norm(a.cpu, w.map(|w| w.0), 1e-5, group, out.cpu);
                pair.gpu
                    .rms_norm(a.gpu, w.map(|w| w.1), 1e-5, group, out.gpu);
                let (c, g) = pair.read(out);
                let what =
                    format!("rms_norm |x| {mag:e} width {width} group {group} weighted {weighted}");
                worst.note(
                    "rms_norm",
                    assert_classes_nmse(&what, &c, &g, RMS_NORM_LIMIT),
                );
                // Row 0's squares are all finite up to 1.8e19 (it
                // normalises, 1e19s included), some are inf from 3e19 (0).
                let row0 = &c[..width];
                if mag <= 1.8e19 {
                    assert!(row0.iter().any(|&v| v != 0.0), "{what}: row 0 is 0");
                } else {
                    assert!(row0.iter().all(|&v| v == 0.0), "{what}: row 0 is not 0");
                }
            }
        }
    }
    pair.finish("rms_norm extremes");
}

// RoPE at positions up to 2^24 (past the 8192 up to which
// shaders/common/math.glsl's Cody-Waite reduction is exact), on values up
// to 1e30. Before the Payne-Hanek reduction there, lavapipe gave NMSE
// 6.0e-5 at position 1,000,000 and 2.7e-3 at 16,777,200 (1.8e-15 at 8190,
// 7.4e-15 at 32766, 2.6e-14 at 131070); with it, at most 2.5e-15 at every
// position (1.0e-15 for the NaN/inf case). Limit: vulkan_elementwise.rs's
// 4e-14.
const ROPE_LIMIT: f64 = 4e-14;

#[test]
fn rope_at_large_positions_and_magnitudes() {
    let mut pair = Pair::new();
    let mut worst = Worst::default();
    let (heads, head_dim) = (4, 128);
    let width = heads * head_dim;
    for (k, &pos0) in [8_190usize, 32_766, 131_070, 1_000_000, 16_777_200]
        .iter()
        .enumerate()
    {
        for style in [RopeStyle::Norm, RopeStyle::Neox] {
            for (base, freq_scale) in [(10_000.0f32, 1.0f32), (1_000_000.0, 0.25)] {
                let rope = RopeParams {
                    style,
                    head_dim,
                    n_rot: head_dim,
                    base,
                    freq_scale,
                };
                let rows = 3;
                let x = spread(k as u64, rows * width, -30.0, 30.0);
                let a = pair.act(rows, width, &x);
                pair.cpu.rope(a.cpu, &rope, pos0);
                pair.gpu.rope(a.gpu, &rope, pos0);
                let (c, g) = pair.read(a);
                let what = format!("rope {style:?} pos {pos0} base {base}");
                let e = assert_classes_nmse(&what, &c, &g, ROPE_LIMIT);
                worst.note(&format!("rope pos {pos0}"), e);
            }
        }
    }
    // NaN and ±inf inputs: a NaN spreads to its pair, an infinity makes its
    // pair ±inf or NaN (inf - inf) exactly as the CPU's products say.
    let rope = RopeParams {
        style: RopeStyle::Neox,
        head_dim,
        n_rot: head_dim,
        base: 10_000.0,
        freq_scale: 1.0,
    };
    let x = plant(values(7, 2 * width), 3, 37);
    let a = pair.act(2, width, &x);
    pair.cpu.rope(a.cpu, &rope, 1000);
    pair.gpu.rope(a.gpu, &rope, 1000);
    let (c, g) = pair.read(a);
    worst.note(
        "rope specials",
        assert_classes_nmse("rope specials", &c, &g, ROPE_LIMIT),
    );
    pair.finish("rope extremes");
}
