//! Vulkan attention against the CPU op, in the manner of llama.cpp's
//! test-backend-ops: inputs in [-1, 1], shapes drawn by proptest (GQA
//! ratios, head dims with head_dim_v != head_dim_k, prefill then decode
//! steps at pos0 > 0, sliding windows shorter than the sequence, soft-capping,
//! f32 and f16 caches), NMSE after every call, the cache bytes themselves
//! checked against the rows written, sentinels and validation at the end.

use crate::vulkan_support;

use engine::ops::{Act, AttnParams, KvType, Ops};
use proptest::prelude::*;
use vulkan_support::{bits, nmse, values, Both, Pair};

/// NMSE limit of the GPU output against the CPU's. Both sides read the same
/// cache values (the f16 rounding is nearest-even on both) and differ only
/// in f32 summation order and exp/tanh ulps. Measured on lavapipe over 1500
/// drawn cases (and proptest's shrinking): worst 1.6e-12 with an f32 cache
/// (head dim 256, scale 4/sqrt(d): larger scores), 1.5e-13 with an f16
/// cache, 3.5e-13 for Gemma-3-270M's full-size local layer (f16); typical
/// 1e-14..1e-13. The limit is ~4x the worst, far below
/// test-backend-ops' 5e-4 for FLASH_ATTN_EXT, so that a wrong position, a
/// missed row or a wrong head fails.
const NMSE_LIMIT: f64 = 6.5e-12;

/// With an f16 cache, both round the query to f16 (llama.cpp's CPU
/// semantics), but the CPU also rounds each normalised probability p_j
/// before V·p, which the GPU's online softmax cannot (it weighs V before
/// the row's sum is known). Each output then differs by at most
/// Σ_j |round(p_j) - p_j| |v_j| <= (2^-11 + n·2^-25) max |v| (half an f16
/// ulp of each weight, or of the smallest subnormal), which NMSE cannot
/// bound where the terms cancel (drawn cases reached 1.6e-7; 3.3e-8..3.9e-8
/// typical, against 1.5e-13 before the CPU rounded the probabilities). So
/// the f16 cases are held element by element to that bound plus the f32
/// cases' summation noise (1e-5 of max |v|): a wrong position, row or head
/// is off by the order of |v|.
fn f16_bound(n_keys: usize, max_v: f32) -> f64 {
    (2f64.powi(-11) + n_keys as f64 * 2f64.powi(-25) + 1e-5) * f64::from(max_v)
}

/// [`f16_bound`] for `attention_coop.comp` (cooperative matrices, where
/// the device has them): it rounds each of its weights e_j = exp(s_j - m)
/// to f16 before V·e (relative 2^-11 at most, or the smallest subnormal,
/// 2^-24 before the row's sum) where the CPU rounds its normalised
/// probabilities, so the two roundings add: (2^-10 + n·2^-24) max |v|, plus
/// the same 1e-5 of max |v| for the f32 sums (the tensor unit's order).
fn coop_bound(n_keys: usize, max_v: f32) -> f64 {
    (2f64.powi(-10) + n_keys as f64 * 2f64.powi(-24) + 1e-5) * f64::from(max_v)
}

#[derive(Clone, Debug)]
struct Case {
    n_head: usize,
    n_kv_head: usize,
    head_dim_k: usize,
    head_dim_v: usize,
    /// Multiplies 1/sqrt(head_dim_k) (larger: peakier softmax).
    scale_mult: f32,
    window: Option<usize>,
    softcap: Option<f32>,
    ty: KvType,
    /// Rows of each call, in order (the first is the prefill).
    steps: Vec<usize>,
    /// Cache positions past the last row written.
    spare: usize,
}

impl Case {
    /// SmolLM2's shape (9 heads over 3 KV heads of 64), scale 1/sqrt(64),
    /// no window, no soft-capping.
    fn smollm2(ty: KvType, steps: Vec<usize>, spare: usize) -> Case {
        Case {
            n_head: 9,
            n_kv_head: 3,
            head_dim_k: 64,
            head_dim_v: 64,
            scale_mult: 1.0,
            window: None,
            softcap: None,
            ty,
            steps,
            spare,
        }
    }

    fn params(&self) -> AttnParams {
        AttnParams {
            n_head: self.n_head,
            n_kv_head: self.n_kv_head,
            head_dim_k: self.head_dim_k,
            head_dim_v: self.head_dim_v,
            scale: self.scale_mult / (self.head_dim_k as f32).sqrt(),
            window: self.window,
            softcap: self.softcap,
        }
    }
}

/// Half bits of `x` rounded to nearest even.
fn f16_bits(x: f32) -> u16 {
    half::f16::from_f32(x).to_bits()
}

/// The cache words expected after writing `rows` (flat `[n, width]` from
/// position 0, positions past them zero), as u32 words of the buffer.
fn expected_words(ty: KvType, flat: &[f32], n_ctx: usize, width: usize) -> Vec<u32> {
    match ty {
        KvType::F32 => {
            let mut w: Vec<u32> = flat.iter().map(|v| v.to_bits()).collect();
            w.resize(n_ctx * width, 0);
            w
        }
        KvType::F16 => {
            let mut h: Vec<u16> = flat.iter().map(|&v| f16_bits(v)).collect();
            h.resize((n_ctx * width).div_ceil(2) * 2, 0);
            h.chunks(2)
                .map(|c| u32::from(c[0]) | (u32::from(c[1]) << 16))
                .collect()
        }
    }
}

/// The raw words of a GPU cache buffer (read as f32 bit patterns).
fn cache_words(p: &mut Pair, buf: u32) -> Vec<u32> {
    let n = (p.gpu.buffer_bytes(buf) / 4) as usize;
    let mut f = vec![0.0f32; n];
    p.gpu.read(Act::new(buf, 1, n), &mut f).unwrap();
    bits(&f)
}

/// `rows` rows of `width` values at a row offset inside a larger buffer (so
/// that the ops see views with a nonzero element offset).
fn view(p: &mut Pair, seed: u64, rows: usize, width: usize) -> (Both, Vec<f32>) {
    let data = values(seed, (rows + 1) * width);
    let all = p.act(rows + 1, width, &data);
    (all.rows_from(1, rows), data[width..].to_vec())
}

/// Runs every step on both backends; returns the worst NMSE seen.
fn run_case(c: &Case, seed: u64) -> f64 {
    run_case_on(c, seed, 0).expect("the device's own layout")
}

/// [`run_case`] with the GPU backend's kernel layout `which` of
/// [`Pair::layouts`] (0: the device's own, 1: the other one); None when
/// the device cannot run it.
fn run_case_on(c: &Case, seed: u64, which: usize) -> Option<f64> {
    let ap = c.params();
    let (kw, vw) = (c.n_kv_head * c.head_dim_k, c.n_kv_head * c.head_dim_v);
    let (qw, ow) = (c.n_head * c.head_dim_k, c.n_head * c.head_dim_v);
    let total: usize = c.steps.iter().sum();
    let n_ctx = total + c.spare;
    let mut p = Pair::new();
    let layout = *p.layouts().get(which)?;
    assert!(p.gpu.set_kernel_layout(layout));
    let kv_cpu = p.cpu.alloc_kv(n_ctx, kw, vw, c.ty).unwrap();
    let kv_gpu = p.gpu.alloc_kv(n_ctx, kw, vw, c.ty).unwrap();
    let (mut all_k, mut all_v) = (Vec::new(), Vec::new());
    let mut worst = 0.0f64;
    let mut pos0 = 0;
    for (i, &t) in c.steps.iter().enumerate() {
        let s = seed * 1000 + i as u64 * 10;
        let (q, _) = view(&mut p, s, t, qw);
        let (k, kd) = view(&mut p, s + 1, t, kw);
        let (v, vd) = view(&mut p, s + 2, t, vw);
        let out = view(&mut p, s + 3, t, ow).0; // stale values the op must overwrite
        p.cpu
            .attention(kv_cpu, q.cpu, k.cpu, v.cpu, out.cpu, pos0, &ap);
        p.gpu
            .attention(kv_gpu, q.gpu, k.gpu, v.gpu, out.gpu, pos0, &ap);
        let (want, got) = p.read(out);
        let e = nmse(&want, &got);
        all_k.extend(kd);
        all_v.extend(vd);
        match c.ty {
            KvType::F32 => assert!(
                e <= NMSE_LIMIT,
                "{c:?}: step {i} ({t} rows at {pos0}): NMSE {e:e} over {NMSE_LIMIT:e}"
            ),
            KvType::F16 => {
                let max_v = all_v.iter().fold(0.0f32, |m, v: &f32| m.max(v.abs()));
                let coop = p.gpu.attention_takes_coop(
                    c.ty,
                    (t, pos0),
                    (c.n_head, c.head_dim_k, c.head_dim_v),
                );
                let bound = if coop {
                    coop_bound(pos0 + t, max_v)
                } else {
                    f16_bound(pos0 + t, max_v)
                };
                let (j, d) = want
                    .iter()
                    .zip(&got)
                    .map(|(&w, &g)| (f64::from(w) - f64::from(g)).abs())
                    .enumerate()
                    .fold((0, 0.0f64), |a, (j, d)| if d > a.1 { (j, d) } else { a });
                assert!(
                    d <= bound,
                    "{c:?}: step {i} ({t} rows at {pos0}): element {j} off by {d:e}, over {bound:e}"
                );
            }
        }
        worst = worst.max(e);
        pos0 += t;

        // The cache holds exactly the rows written so far, at their
        // positions, in the cache's type; later positions are still zero.
        let g = p.gpu.kv(kv_gpu);
        let (kwant, vwant) = (
            expected_words(c.ty, &all_k, n_ctx, kw),
            expected_words(c.ty, &all_v, n_ctx, vw),
        );
        assert!(
            cache_words(&mut p, g.k) == kwant,
            "{c:?}: K cache after step {i}"
        );
        assert!(
            cache_words(&mut p, g.v) == vwant,
            "{c:?}: V cache after step {i}"
        );
    }
    p.finish(&format!("{c:?}"));
    Some(worst)
}

fn case_strategy() -> impl Strategy<Value = Case> {
    let heads = prop::sample::select(vec![(1, 1), (2, 2), (3, 1), (6, 2), (4, 1), (8, 2), (9, 3)]);
    let dims = prop::sample::select(vec![
        (32, 32),
        (64, 64),
        (80, 80),
        (256, 256),
        (64, 32),
        (32, 80),
        (17, 9),
    ]);
    let window = prop_oneof![Just(None), (1usize..12).prop_map(Some)];
    let softcap = prop_oneof![Just(None), Just(Some(0.5f32)), Just(Some(3.0f32))];
    let ty = prop_oneof![Just(KvType::F32), Just(KvType::F16)];
    let steps = (
        1usize..40,
        prop::collection::vec(prop::sample::select(vec![1usize, 1, 1, 5]), 0..4),
    )
        .prop_map(|(prefill, rest)| std::iter::once(prefill).chain(rest).collect());
    (
        heads,
        dims,
        prop::sample::select(vec![1.0f32, 4.0]),
        window,
        softcap,
        ty,
        steps,
        0usize..6,
    )
        .prop_map(
            |((nh, nkv), (dk, dv), scale_mult, window, softcap, ty, steps, spare)| Case {
                n_head: nh,
                n_kv_head: nkv,
                head_dim_k: dk,
                head_dim_v: dv,
                scale_mult,
                window,
                softcap,
                ty,
                steps,
                spare,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn attention_matches_cpu(c in case_strategy(), seed in 1u64..1000) {
        let worst = run_case(&c, seed);
        eprintln!("NMSE {worst:.2e} {:?} {:?} steps {:?}", c.ty, (c.n_head, c.n_kv_head, c.head_dim_k, c.head_dim_v), c.steps);
    }
}

/// Real model shapes: SmolLM2 (9 heads / 3 KV heads of 64) and Gemma-3-270M
/// (4 / 1 of 256, a sliding window shorter than the sequence on local
/// layers), f32 and f16 caches, a prefill longer than one tile of keys and
/// decode steps after it.
#[test]
fn model_shapes() {
    let base = Case::smollm2(KvType::F32, vec![70, 1, 1, 1], 3);
    let gemma = Case {
        n_head: 4,
        n_kv_head: 1,
        head_dim_k: 256,
        head_dim_v: 256,
        window: Some(40),
        ..base.clone()
    };
    for (i, c) in [
        base.clone(),
        Case {
            ty: KvType::F16,
            ..base
        },
        gemma.clone(),
        Case {
            ty: KvType::F16,
            softcap: Some(2.0),
            ..gemma
        },
    ]
    .iter()
    .enumerate()
    {
        // Both kernel layouts: the CPU layout's attention_cpu.comp (prefill
        // rows) and attention_keys_cpu.comp (decode), and attention.comp,
        // whichever the device does not pick itself.
        for which in 0..2 {
            if let Some(worst) = run_case_on(c, 7000 + i as u64, which) {
                eprintln!("NMSE {worst:.2e} layout {which} {c:?}");
            }
        }
    }
}

/// Gemma-3-270M's local layers at full size: 4 heads / 1 KV head of 256,
/// window 512, f16 cache of 4096 positions; two prefill batches of 512 (the
/// second at pos0 = 512, so the window cuts the first batch off) and a decode
/// step after them, on both kernel layouts where the device runs them.
#[test]
fn gemma_prefill_512_window_512() {
    let c = Case {
        n_head: 4,
        n_kv_head: 1,
        head_dim_k: 256,
        head_dim_v: 256,
        scale_mult: 1.0,
        window: Some(512),
        softcap: None,
        ty: KvType::F16,
        steps: vec![512, 512, 1],
        spare: 4096 - 1025,
    };
    // Both kernel layouts: on the GPU layout the second batch's rows see
    // different first positions within each block of four.
    for which in 0..2 {
        if let Some(worst) = run_case_on(&c, 9000, which) {
            eprintln!("NMSE {worst:.2e} layout {which} {c:?}");
        }
    }
}

/// An f16 cache whose row width is odd (one KV head of 17 / 9): a 32-bit
/// word holds the last half of one position and the first of the next, so
/// every write must keep the neighbouring position's half. Several small
/// steps, each checked (cache words exactly, output by NMSE).
#[test]
fn odd_width_f16_cache_shares_words_between_positions() {
    let c = Case {
        n_head: 3,
        n_kv_head: 1,
        head_dim_k: 17,
        head_dim_v: 9,
        scale_mult: 1.0,
        window: Some(4),
        softcap: None,
        ty: KvType::F16,
        steps: vec![5, 1, 1, 3, 1, 2],
        spare: 3,
    };
    let worst = run_case(&c, 8000);
    eprintln!("NMSE {worst:.2e} {c:?}");
}

/// The f16 cache write rounds to nearest even exactly as `half` does, over
/// the edges: ties, subnormals, the overflow threshold, infinities, NaN, -0.
#[test]
fn f16_cache_write_rounds_to_nearest_even() {
    let mut vals: Vec<f32> = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        65504.0,
        65519.99,
        65520.0,
        -65520.0,
        1e10,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::from_bits(0x7f80_0001), // signalling NaN: stays NaN
        2f32.powi(-24),
        2f32.powi(-25),
        2f32.powi(-25) * 1.0001,
        3.0 * 2f32.powi(-26),
        5.0 * 2f32.powi(-26),
        2f32.powi(-14),
        2f32.powi(-14) - 2f32.powi(-25),
        2f32.powi(-14) - 2f32.powi(-26),
        1.0 + 2f32.powi(-11),
        1.0 + 3.0 * 2f32.powi(-11),
        -(1.0 + 2f32.powi(-11) + 2f32.powi(-23)),
        1e-40,
        -1e-40,
    ];
    // Every exponent from below the subnormals to past the overflow, with
    // mantissas that land on, near and between halves.
    for e in -28..17 {
        for m in [
            0u32, 1, 0xfff, 0x1000, 0x1001, 0x2000, 0x3000, 0x7f_e000, 0x7f_f000,
        ] {
            let x = f32::from_bits((((e + 127) as u32) << 23) | m);
            vals.push(x);
            vals.push(-x);
        }
    }
    let n = vals.len();
    let mut p = Pair::new();
    let ap = AttnParams {
        n_head: 1,
        n_kv_head: 1,
        head_dim_k: 1,
        head_dim_v: 1,
        scale: 1.0,
        window: Some(1),
        softcap: None,
    };
    let kv = p.gpu.alloc_kv(n + 1, 1, 1, KvType::F16).unwrap();
    let q = p.gpu.alloc(n, 1).unwrap();
    let k = p.gpu.alloc(n, 1).unwrap();
    let v = p.gpu.alloc(n, 1).unwrap();
    let out = p.gpu.alloc(n, 1).unwrap();
    p.gpu.write(k, &vals).unwrap();
    p.gpu.write(v, &vals).unwrap();
    p.gpu.attention(kv, q, k, v, out, 1, &ap);
    let g = p.gpu.kv(kv);
    let mut want = vec![0u16];
    want.extend(vals.iter().map(|&x| f16_bits(x)));
    want.resize((n + 1).div_ceil(2) * 2, 0);
    for buf in [g.k, g.v] {
        let words = cache_words(&mut p, buf);
        let got: Vec<u16> = words
            .iter()
            .flat_map(|&w| [w as u16, (w >> 16) as u16])
            .collect();
        for (i, (&w, &h)) in want.iter().zip(&got).enumerate() {
            assert_eq!(
                h,
                w,
                "position {i}: {:e} ({:#010x}) -> {h:#06x}, want {w:#06x}",
                vals.get(i.wrapping_sub(1)).copied().unwrap_or(0.0),
                vals.get(i.wrapping_sub(1)).map_or(0, |x| x.to_bits())
            );
        }
    }
    p.finish("f16 rounding");
}

/// A decode whose query sees one position only (window 1) returns that
/// position's V row (per KV head), so a row written to the wrong position or
/// read from the wrong head shows up exactly.
#[test]
fn window_one_returns_own_v_row() {
    let mut p = Pair::new();
    let (nh, nkv, d) = (4, 2, 8);
    let ap = AttnParams {
        n_head: nh,
        n_kv_head: nkv,
        head_dim_k: d,
        head_dim_v: d,
        scale: 1.0,
        window: Some(1),
        softcap: None,
    };
    let kv = p.gpu.alloc_kv(8, nkv * d, nkv * d, KvType::F32).unwrap();
    for pos in 0..5 {
        let q = p.gpu.alloc(1, nh * d).unwrap();
        let k = p.gpu.alloc(1, nkv * d).unwrap();
        let v = p.gpu.alloc(1, nkv * d).unwrap();
        let out = p.gpu.alloc(1, nh * d).unwrap();
        let vd = values(50 + pos as u64, nkv * d);
        p.gpu.write(q, &values(60 + pos as u64, nh * d)).unwrap();
        p.gpu.write(k, &values(70 + pos as u64, nkv * d)).unwrap();
        p.gpu.write(v, &vd).unwrap();
        p.gpu.attention(kv, q, k, v, out, pos, &ap);
        let mut got = vec![0.0; nh * d];
        p.gpu.read(out, &mut got).unwrap();
        for h in 0..nh {
            let g = h / (nh / nkv);
            assert_eq!(
                &got[h * d..(h + 1) * d],
                &vd[g * d..(g + 1) * d],
                "pos {pos} head {h}"
            );
        }
    }
    p.finish("window one");
}

/// Split-K decode (`attention.comp` SPLIT, its last run of each head
/// weighing the runs together: the GPU layout's decode past 64 visible
/// positions, one run of keys per 64, at most 64): SmolLM2's heads after a
/// 700-token prefill (11 runs), Gemma's local layers with a window of 300
/// (5 runs), f32 and f16 caches, on both kernel layouts where the device
/// runs them; each decode step against the CPU as every other case is
/// (a counter left nonzero by one step would leave the next step's output
/// unwritten).
#[test]
fn split_k_decode_at_long_context_matches_cpu() {
    let cases = [
        (9, 3, 64, None, KvType::F32, vec![700, 1, 1, 1]),
        (9, 3, 64, None, KvType::F16, vec![700, 1, 1]),
        (4, 1, 256, Some(300), KvType::F16, vec![600, 1, 1]),
        (2, 1, 32, None, KvType::F32, vec![1300, 1]),
    ];
    for (nh, nkv, d, window, ty, steps) in cases {
        let c = Case {
            n_head: nh,
            n_kv_head: nkv,
            head_dim_k: d,
            head_dim_v: d,
            scale_mult: 1.0,
            window,
            softcap: None,
            ty,
            steps,
            spare: 3,
        };
        for which in 0..2 {
            if let Some(worst) = run_case_on(&c, 9100, which) {
                eprintln!("layout {which}: NMSE {worst:.2e} {c:?}");
            }
        }
    }
}

/// RoPE of K fused with its cache write (`rope.comp` KV_WRITE, recorded
/// when the K write follows the RoPE of exactly K with full rotation):
/// the same bits as the RoPE and `kv_write.comp` apart (a read between
/// them keeps them apart). Both pairings, f32 and f16 caches, one and
/// three rows at a time, on every kernel layout the device runs; the
/// roped K and the attention output (which reads every cached row) are
/// compared bit for bit over five calls, and the fused calls take one
/// dispatch fewer. A partial rotation (n_rot < head_dim) stays unfused.
#[test]
fn rope_fused_with_the_k_cache_write_writes_the_same_bits() {
    use engine::ops::{RopeParams, RopeStyle};
    let mut p = Pair::new();
    let (nh, nkv, d) = (4, 2, 64);
    let ap = AttnParams {
        n_head: nh,
        n_kv_head: nkv,
        head_dim_k: d,
        head_dim_v: d,
        scale: 0.125,
        window: None,
        softcap: None,
    };
    let mut fused_calls = 0;
    for layout in p.layouts() {
        p.gpu.set_kernel_layout(layout);
        for style in [RopeStyle::Norm, RopeStyle::Neox] {
            for ty in [KvType::F32, KvType::F16] {
                for (t, n_rot) in [(1, d), (3, d), (1, d / 2)] {
                    let rp = RopeParams {
                        style,
                        head_dim: d,
                        n_rot,
                        base: 10000.0,
                        freq_scale: 1.0,
                    };
                    let what = format!("{layout:?} {style:?} {ty:?} rows {t} n_rot {n_rot}");
                    // (apart, fused): the roped K and the output of each call.
                    let mut runs = Vec::new();
                    for fused in [false, true] {
                        let kv = p.gpu.alloc_kv(16, nkv * d, nkv * d, ty).unwrap();
                        let mut got = Vec::new();
                        for call in 0..5usize {
                            let s = 700 + 10 * call as u64;
                            let q = p.gpu.alloc(t, nh * d).unwrap();
                            let k = p.gpu.alloc(t, nkv * d).unwrap();
                            let v = p.gpu.alloc(t, nkv * d).unwrap();
                            let out = p.gpu.alloc(t, nh * d).unwrap();
                            p.gpu.write(q, &values(s, t * nh * d)).unwrap();
                            p.gpu.write(k, &values(s + 1, t * nkv * d)).unwrap();
                            p.gpu.write(v, &values(s + 2, t * nkv * d)).unwrap();
                            let pos0 = call * t;
                            let before = p.gpu.stats().dispatches;
                            p.gpu.rope(q, &rp, pos0);
                            p.gpu.rope(k, &rp, pos0);
                            let mut kr = vec![0.0; t * nkv * d];
                            if !fused {
                                p.gpu.read(k, &mut kr).unwrap();
                            }
                            p.gpu.attention(kv, q, k, v, out, pos0, &ap);
                            let mut o = vec![0.0; t * nh * d];
                            p.gpu.read(out, &mut o).unwrap();
                            if fused {
                                p.gpu.read(k, &mut kr).unwrap();
                                let n = p.gpu.stats().dispatches - before;
                                // RoPE q, RoPE k, the K and V writes, the
                                // attention; the K write within the RoPE.
                                let want = if n_rot == d { 4 } else { 5 };
                                assert_eq!(n, want, "{what}: dispatches");
                                fused_calls += usize::from(n_rot == d);
                            }
                            got.push((bits(&kr), bits(&o)));
                        }
                        runs.push(got);
                    }
                    for (call, (a, b)) in runs[0].iter().zip(&runs[1]).enumerate() {
                        assert!(a.0 == b.0, "{what}: call {call}: roped K differs");
                        assert!(a.1 == b.1, "{what}: call {call}: attention output differs");
                    }
                }
            }
        }
    }
    assert!(fused_calls >= 40, "{fused_calls} fused calls");
    p.finish("rope fused with the K write");
}

/// The GPU layout's attention of four query rows per workgroup
/// (`attention.comp` ROWS) against one row per workgroup: the same bits for
/// every row while no sliding window cuts a batch's later rows off further
/// than its first (each row's arithmetic is the one-row kernel's, tile by
/// tile). Batches of 13, 1, 70 and 9 rows (partial blocks of four, rows
/// after earlier batches), GQA, head dims 64 and 256, an odd f16 width,
/// soft-capping, a window longer than the sequence, f32 and f16 caches.
/// (Windows that cut: `model_shapes` and `gemma_prefill_512_window_512`
/// against the CPU on both layouts.)
#[test]
fn attention_of_row_blocks_writes_the_one_row_bits() {
    use engine::vulkan::KernelLayout;
    let mut p = Pair::new();
    if !p.gpu.set_kernel_layout(KernelLayout::Gpu) {
        return;
    }
    // The kernels of f32 products (cooperative matrices round the weights:
    // `coop_prefill_matches_cpu`).
    let coop = p.gpu.set_attention_coop(false);
    let shapes = [
        (9, 3, 64, 64, None, None),
        (4, 1, 256, 256, Some(200), Some(2.0)),
        (3, 1, 17, 9, None, None),
        (2, 2, 32, 48, None, Some(5.0)),
    ];
    let steps = [13usize, 1, 70, 9];
    let total: usize = steps.iter().sum();
    let mut compared = 0;
    for (nh, nkv, dk, dv, window, softcap) in shapes {
        for ty in [KvType::F32, KvType::F16] {
            let ap = AttnParams {
                n_head: nh,
                n_kv_head: nkv,
                head_dim_k: dk,
                head_dim_v: dv,
                scale: 1.0 / (dk as f32).sqrt(),
                window,
                softcap,
            };
            let what = format!("{nh}/{nkv} heads of {dk}/{dv} window {window:?} {ty:?}");
            let mut runs = Vec::new();
            for rows in [false, true] {
                p.gpu.set_attention_rows(rows);
                let kv = p.gpu.alloc_kv(total + 2, nkv * dk, nkv * dv, ty).unwrap();
                let mut got = Vec::new();
                let mut pos0 = 0;
                for (i, &t) in steps.iter().enumerate() {
                    let s = 4100 + 10 * i as u64;
                    let q = p.gpu.alloc(t, nh * dk).unwrap();
                    let k = p.gpu.alloc(t, nkv * dk).unwrap();
                    let v = p.gpu.alloc(t, nkv * dv).unwrap();
                    let out = p.gpu.alloc(t, nh * dv).unwrap();
                    p.gpu.write(q, &values(s, t * nh * dk)).unwrap();
                    p.gpu.write(k, &values(s + 1, t * nkv * dk)).unwrap();
                    p.gpu.write(v, &values(s + 2, t * nkv * dv)).unwrap();
                    p.gpu.attention(kv, q, k, v, out, pos0, &ap);
                    let mut o = vec![0.0; t * nh * dv];
                    p.gpu.read(out, &mut o).unwrap();
                    assert!(o.iter().all(|x| x.is_finite()), "{what}: step {i}");
                    got.push(bits(&o));
                    pos0 += t;
                }
                runs.push(got);
            }
            for (i, (a, b)) in runs[0].iter().zip(&runs[1]).enumerate() {
                let j = a.iter().zip(b).position(|(x, y)| x != y);
                assert!(j.is_none(), "{what}: step {i}: element {j:?} differs");
                compared += a.len();
            }
        }
    }
    p.gpu.set_attention_rows(true);
    p.gpu.set_attention_coop(coop);
    assert!(compared > 0);
    p.finish("attention of row blocks");
}

/// `attention_coop.comp` (cooperative matrices of halves, where the device
/// has them) against the CPU through an f16 cache, held to [`coop_bound`]
/// element by element: SmolLM2's shape (9 / 3 heads of 64) over prefills
/// longer than a tile, at pos0 > 0 and with a last block of fewer than 32
/// rows; both variants (head dims up to 64, up to 128) with GQA, head_dim_v
/// != head_dim_k, windows shorter than the sequence and soft-capping, in
/// runs of keys (2 for 300 rows, 4 for 1,200 positions; with a window,
/// runs that some row blocks see nothing of); decode steps and short
/// batches between (the other kernels). Skipped (with a note) on a device
/// without them.
#[test]
fn coop_prefill_matches_cpu() {
    if !Pair::new().gpu.attention_coop() {
        eprintln!("no cooperative matrices of halves: nothing to compare");
        return;
    }
    let smol = Case::smollm2(KvType::F16, vec![300, 1, 70, 33], 5);
    let cases = [
        smol.clone(),
        Case {
            scale_mult: 4.0,
            steps: vec![2, 600, 1, 17],
            ..smol.clone()
        },
        Case {
            n_head: 4,
            n_kv_head: 1,
            head_dim_k: 128,
            head_dim_v: 128,
            window: Some(40),
            softcap: Some(2.0),
            steps: vec![97, 1, 400],
            ..smol.clone()
        },
        Case {
            n_head: 8,
            n_kv_head: 2,
            head_dim_k: 64,
            head_dim_v: 32,
            window: Some(70),
            steps: vec![150, 31, 300],
            ..smol.clone()
        },
        Case {
            n_head: 2,
            n_kv_head: 2,
            head_dim_k: 32,
            head_dim_v: 80,
            softcap: Some(0.5),
            steps: vec![45, 45, 400],
            ..smol.clone()
        },
        Case {
            steps: vec![40, 1100, 60],
            ..smol.clone()
        },
        Case {
            n_head: 4,
            n_kv_head: 1,
            head_dim_k: 128,
            head_dim_v: 128,
            window: Some(300),
            steps: vec![700, 90],
            ..smol
        },
    ];
    let p = Pair::new();
    for (i, c) in cases.iter().enumerate() {
        // Some step of each case takes the kernel (two runs of keys or more).
        let mut pos0 = 0;
        let mut taken = 0;
        for &t in &c.steps {
            let dims = (c.n_head, c.head_dim_k, c.head_dim_v);
            taken += usize::from(p.gpu.attention_takes_coop(c.ty, (t, pos0), dims));
            pos0 += t;
        }
        assert!(taken > 0, "{c:?}: no step takes cooperative matrices");
        let worst = run_case(c, 9500 + i as u64);
        eprintln!("NMSE {worst:.2e} {c:?}");
    }
}
