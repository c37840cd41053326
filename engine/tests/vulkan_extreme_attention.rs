//! Vulkan attention against the CPU op at the edges: scores far beyond
//! exp's range (|s| up to ~1e9: exp(s) overflows f32 unless the row's max is
//! subtracted first), scores of -inf and +inf (an infinity in a K row), NaN
//! in Q, K or V, soft-capping of NaN and huge scores, NaN and ±inf held by
//! keys that the causal mask or the sliding window hides, and subnormal
//! halves in an f16 cache. Every kernel: the device's own layout and the
//! other one ([`Pair::layouts`]: on lavapipe attention_cpu.comp for
//! prefill, attention_keys_cpu.comp for decode, and attention.comp), f32
//! and f16 caches. Each output must have the CPU's IEEE class element by
//! element and the finite ones an NMSE within the limit; the rules are at
//! `Ops::attention` in engine/src/ops.rs.

use crate::vulkan_support;

use engine::ops::{AttnParams, KvType, Ops};
use vulkan_support::extreme::{assert_classes_nmse, scaled, Worst};
use vulkan_support::{values, Pair};

/// One attention call's inputs: `q` `[t, n_head * dk]`, `k`/`v`
/// `[t, n_kv * d]`.
struct Step {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
}

struct Shape {
    n_head: usize,
    n_kv: usize,
    d: usize,
}

impl Shape {
    fn params(&self, scale: f32, window: Option<usize>, softcap: Option<f32>) -> AttnParams {
        AttnParams {
            n_head: self.n_head,
            n_kv_head: self.n_kv,
            head_dim_k: self.d,
            head_dim_v: self.d,
            scale,
            window,
            softcap,
        }
    }

    /// A step of `t` rows: Q and K scaled by `qk`, V by `vs` (seeded).
    fn step(&self, seed: u64, t: usize, qk: f32, vs: f32) -> Step {
        Step {
            q: scaled(seed, t * self.n_head * self.d, qk),
            k: scaled(seed ^ 1, t * self.n_kv * self.d, qk),
            v: scaled(seed ^ 2, t * self.n_kv * self.d, vs),
        }
    }
}

/// The least NMSE limit with an f16 cache: the CPU rounds each normalised
/// probability to f16 before V·p (llama.cpp's CPU semantics), the GPU's
/// online softmax cannot (vulkan_attention.rs' NMSE_LIMIT_F16: measured
/// 1.0e-8..3.5e-8 here).
const F16_FLOOR: f64 = 1.5e-7;

/// The same where the GPU takes `attention_coop.comp` (cooperative
/// matrices, where the device has them: a batch of rows through an f16
/// cache): it rounds its own weights to f16 too, a second rounding of the
/// same size, independent of the CPU's, so twice the variance:
/// vulkan_attention.rs' `coop_bound`. Four times [`F16_FLOOR`].
const COOP_F16_FLOOR: f64 = 6e-7;

/// Runs `steps` (consecutive positions from 0) on both backends with the
/// GPU in layout `which` of [`Pair::layouts`]; after each step the output's
/// classes must match and its NMSE stay within `limit` (at least
/// [`F16_FLOOR`] with an f16 cache). Returns the worst NMSE, or None when
/// the device has no such layout.
fn run(
    what: &str,
    shape: &Shape,
    ty: KvType,
    ap: &AttnParams,
    steps: &[Step],
    which: usize,
    limit: f64,
) -> Option<f64> {
    let mut p = Pair::new();
    let layout = *p.layouts().get(which)?;
    assert!(p.gpu.set_kernel_layout(layout));
    let (kw, qw) = (shape.n_kv * shape.d, shape.n_head * shape.d);
    let n_ctx: usize = steps.iter().map(|s| s.q.len() / qw).sum::<usize>() + 2;
    let kv_c = p.cpu.alloc_kv(n_ctx, kw, kw, ty).unwrap();
    let kv_g = p.gpu.alloc_kv(n_ctx, kw, kw, ty).unwrap();
    let mut pos0 = 0;
    let mut worst = 0.0f64;
    for (i, s) in steps.iter().enumerate() {
        let t = s.q.len() / qw;
        let q = p.act(t, qw, &s.q);
        let k = p.act(t, kw, &s.k);
        let v = p.act(t, kw, &s.v);
        let out = p.zeros(t, qw);
        p.cpu
            .attention(kv_c, q.cpu, k.cpu, v.cpu, out.cpu, pos0, ap);
        p.gpu
            .attention(kv_g, q.gpu, k.gpu, v.gpu, out.gpu, pos0, ap);
        let (c, g) = p.read(out);
        let limit = match ty {
            KvType::F32 => limit,
            KvType::F16
                if p.gpu
                    .attention_takes_coop(ty, (t, pos0), (shape.n_head, shape.d, shape.d)) =>
            {
                limit.max(COOP_F16_FLOOR)
            }
            KvType::F16 => limit.max(F16_FLOOR),
        };
        let name = format!("{what} {ty:?} {layout:?} step {i} ({t} rows at {pos0})");
        worst = worst.max(assert_classes_nmse(&name, &c, &g, limit));
        pos0 += t;
    }
    p.finish(what);
    Some(worst)
}

/// [`run`] in every layout the device has, both cache types; notes the
/// worst NMSE under `what`.
fn run_all(
    worst: &mut Worst,
    what: &str,
    shape: &Shape,
    ap: &AttnParams,
    steps: &dyn Fn(KvType) -> Vec<Step>,
    limit: f64,
) {
    for ty in [KvType::F32, KvType::F16] {
        for which in 0..2 {
            if let Some(e) = run(what, shape, ty, ap, &steps(ty), which, limit) {
                worst.note(what, e);
            }
        }
    }
}

/// SmolLM2's attention shape (9 heads, 3 KV heads of 64).
const SMOL: Shape = Shape {
    n_head: 9,
    n_kv: 3,
    d: 64,
};

// Scores of standard deviation ~qk²/3 (Q and K in [-qk, qk], scale
// 1/sqrt(d)): up to ~3e3 (qk 100) and ~3e9 (qk 1e5, f32 cache only: f16
// holds at most 65504); the softmax is then all but one-hot, and a score's
// f32 rounding (the summation order of q . k differs between the backends)
// moves the weights of near-ties, an error that grows as s², so as qk⁴.
// Worst NMSE on lavapipe (both layouts, f32 and f16 caches): qk 10 1.6e-12,
// qk 30 2.2e-11, qk 100 3.9e-10, qk 1e5 0 (exactly one-hot); limits ~4x,
// at least vulkan_attention.rs's 6.5e-12.
const LARGE_SCORES_LIMITS: [(f32, f64); 4] = [
    (10.0, 6.5e-12),
    (30.0, 1e-10),
    (100.0, 1.6e-9),
    (1e5, 6.5e-12),
];

#[test]
fn scores_beyond_exps_range() {
    let mut worst = Worst::default();
    for (i, (qk, limit)) in LARGE_SCORES_LIMITS.into_iter().enumerate() {
        let ap = SMOL.params(1.0 / 8.0, None, None);
        let steps = |ty: KvType| -> Vec<Step> {
            if ty == KvType::F16 && qk > 65504.0 {
                return Vec::new();
            }
            // A prefill of 70 rows (several tiles, the rows kernel), then
            // decode steps (the keys kernel).
            [70usize, 1, 1]
                .iter()
                .enumerate()
                .map(|(j, &t)| SMOL.step(100 * i as u64 + j as u64, t, qk, 1.0))
                .collect()
        };
        run_all(
            &mut worst,
            &format!("scores qk {qk}"),
            &SMOL,
            &ap,
            &steps,
            limit,
        );
    }
}

// Infinite and NaN scores from the data: an element of K at -inf, +inf or
// NaN where every query has a positive element. A -inf score weighs 0 when
// the row has a finite score and makes the row NaN when all its scores are
// -inf (the first query row sees key 0 only); a +inf or NaN score makes the
// row NaN; NaN in Q makes its (row, head) NaN; NaN or ±inf in V reaches
// every row that sees its position (a weight of 0 times NaN is NaN), as on
// the CPU. Until this test, a -inf score before any finite one made the
// GPU's row NaN (its online softmax took exp(-inf - -inf)). Worst NMSE of
// the finite outputs on lavapipe: 1.6e-13; limit vulkan_attention.rs's
// 6.5e-12.
const SPECIALS_LIMIT: f64 = 6.5e-12;

#[test]
fn infinite_and_nan_scores() {
    let mut worst = Worst::default();
    let d = SMOL.d;
    let (kw, qw) = (SMOL.n_kv * d, SMOL.n_head * d);
    let ap = SMOL.params(1.0 / 8.0, None, None);
    // (what, position, which of K/V/Q, value)
    let cases: [(&str, usize, char, f32); 7] = [
        ("K -inf at key 0", 0, 'k', f32::NEG_INFINITY),
        ("K -inf at key 5", 5, 'k', f32::NEG_INFINITY),
        ("K +inf at key 6", 6, 'k', f32::INFINITY),
        ("K NaN at key 9", 9, 'k', f32::NAN),
        ("V NaN at key 9", 9, 'v', f32::NAN),
        ("V -inf at key 3", 3, 'v', f32::NEG_INFINITY),
        ("Q NaN in row 4", 4, 'q', f32::NAN),
    ];
    for (what, at, which, val) in cases {
        let steps = |_: KvType| -> Vec<Step> {
            [20usize, 1, 1]
                .iter()
                .enumerate()
                .map(|(j, &t)| {
                    let mut s = SMOL.step(7 + j as u64, t, 1.0, 1.0);
                    // Element 3 of every query head is positive.
                    for r in 0..t * SMOL.n_head {
                        s.q[r * d + 3] = 0.25 + s.q[r * d + 3].abs();
                    }
                    if j == 0 {
                        match which {
                            // Element 3 of every KV head of position `at`.
                            'k' => (0..SMOL.n_kv).for_each(|g| s.k[at * kw + g * d + 3] = val),
                            'v' => (0..SMOL.n_kv).for_each(|g| s.v[at * kw + g * d + 3] = val),
                            _ => s.q[at * qw + 3] = val,
                        }
                    }
                    s
                })
                .collect()
        };
        run_all(&mut worst, what, &SMOL, &ap, &steps, SPECIALS_LIMIT);
    }
    // Every score of some rows -inf: K's element 3 at -inf everywhere but
    // at key 12; rows 0..11 see only -inf (NaN), rows 12.. see key 12.
    let steps = |_: KvType| -> Vec<Step> {
        let mut s = SMOL.step(11, 20, 1.0, 1.0);
        for r in 0..20 * SMOL.n_head {
            s.q[r * d + 3] = 0.25 + s.q[r * d + 3].abs();
        }
        for j in (0..20).filter(|&j| j != 12) {
            (0..SMOL.n_kv).for_each(|g| s.k[j * kw + g * d + 3] = f32::NEG_INFINITY);
        }
        vec![s]
    };
    run_all(
        &mut worst,
        "all -inf but key 12",
        &SMOL,
        &ap,
        &steps,
        SPECIALS_LIMIT,
    );
}

// Keys hidden by the mask do not take part, whatever they hold: a sliding
// window of 4 over a prefill of 24 rows with NaN and ±inf in the K and V rows
// of positions 2 and 9 (rows outside their windows, and rows before them,
// must come out finite, as on the CPU, which never reads them); then
// decode steps past them. Until this test attention_cpu.comp added 0 · v
// for the keys of a subgroup that a row does not see: NaN. Worst NMSE on
// lavapipe: 1.7e-14; limit vulkan_attention.rs's 6.5e-12.
const MASKED_LIMIT: f64 = 6.5e-12;

/// A value planted in the first step's K or V rows: (position, 'k' or
/// 'v', element of every KV head, value).
type Plant = (usize, char, usize, f32);

/// Runs the calls of `rows` (SMOL, seeds from `seed`, the first call holding
/// `plants`) under a window of 4 and under the causal mask alone, at
/// [`MASKED_LIMIT`].
fn masked_specials(what: &str, rows: &[usize], seed: u64, plants: &[Plant]) {
    let mut worst = Worst::default();
    let d = SMOL.d;
    let kw = SMOL.n_kv * d;
    for window in [Some(4), None] {
        let ap = SMOL.params(1.0 / 8.0, window, None);
        let steps = |_: KvType| -> Vec<Step> {
            rows.iter()
                .enumerate()
                .map(|(j, &t)| {
                    let mut s = SMOL.step(seed + j as u64, t, 1.0, 1.0);
                    if j == 0 {
                        for g in 0..SMOL.n_kv {
                            for &(pos, which, e, val) in plants {
                                let rows = if which == 'k' { &mut s.k } else { &mut s.v };
                                rows[pos * kw + g * d + e] = val;
                            }
                        }
                    }
                    s
                })
                .collect()
        };
        run_all(
            &mut worst,
            &format!("{what} window {window:?}"),
            &SMOL,
            &ap,
            &steps,
            MASKED_LIMIT,
        );
    }
}

#[test]
fn masked_keys_holding_nan_and_inf_do_not_leak() {
    masked_specials(
        "masked NaN/inf",
        &[24, 1, 1],
        21,
        &[
            (2, 'k', 0, f32::NAN),
            (2, 'v', 1, f32::INFINITY),
            (9, 'v', 2, f32::NAN),
            (9, 'k', 3, f32::NEG_INFINITY),
        ],
    );
}

// The same in a prefill long enough for several runs of keys (600
// positions: `attention_coop.comp` on a device with cooperative matrices,
// whose products would add 0 * inf for a key a row does not see): NaN and
// ±inf in the V rows of positions 2, 9 and 300 and in K at 301, under a
// window of 4 and under the causal mask alone (rows before 300 must stay
// finite). Limit: vulkan_attention.rs's 6.5e-12 (the f16 floors apply).
#[test]
fn masked_nan_and_inf_over_runs_of_keys() {
    masked_specials(
        "masked NaN/inf over runs,",
        &[600, 1],
        41,
        &[
            (2, 'v', 1, f32::INFINITY),
            (9, 'v', 2, f32::NAN),
            (300, 'v', 5, f32::NEG_INFINITY),
            (301, 'k', 3, f32::NAN),
        ],
    );
}

// Soft-capping (Gemma 2 style, cap 50) of scores up to ~3e9 (all at ±cap),
// and of a NaN score (NaN, not ±cap: the GPU clamped it to ±10 before
// tanh until this test). Worst NMSE on lavapipe: 3.7e-13; limit
// vulkan_attention.rs's 6.5e-12.
const SOFTCAP_LIMIT: f64 = 6.5e-12;

#[test]
fn softcap_of_huge_and_nan_scores() {
    let mut worst = Worst::default();
    let d = SMOL.d;
    for (i, qk) in [3.0f32, 100.0, 1e5].into_iter().enumerate() {
        let ap = SMOL.params(1.0 / 8.0, None, Some(50.0));
        let steps = |ty: KvType| -> Vec<Step> {
            if ty == KvType::F16 && qk > 65504.0 {
                return Vec::new();
            }
            [20usize, 1]
                .iter()
                .enumerate()
                .map(|(j, &t)| {
                    let mut s = SMOL.step(300 + 10 * i as u64 + j as u64, t, qk, 1.0);
                    s.q[2 * d + 1] = f32::NAN; // row 0 head 2
                    s
                })
                .collect()
        };
        run_all(
            &mut worst,
            &format!("softcap qk {qk}"),
            &SMOL,
            &ap,
            &steps,
            SOFTCAP_LIMIT,
        );
    }
}

// An f16 cache holding subnormal halves (|x| < 2^-14, which a driver's
// unpackHalf2x16 may flush to 0): K and V at 1e-7 .. 6e-5 (V alone, and
// K's scores then all ~0). Worst NMSE on lavapipe: 1.9e-13 (lavapipe keeps
// them; a flushing driver gives ~1); limit vulkan_attention.rs's 6.5e-12.
const SUBNORMAL_LIMIT: f64 = 6.5e-12;

#[test]
fn f16_cache_keeps_subnormal_halves() {
    let mut worst = Worst::default();
    let ap = SMOL.params(1.0 / 8.0, None, None);
    let steps = |_: KvType| -> Vec<Step> {
        [12usize, 1]
            .iter()
            .enumerate()
            .map(|(j, &t)| {
                let mut s = SMOL.step(500 + j as u64, t, 4.0, 1.0);
                s.v = values(600 + j as u64, s.v.len())
                    .iter()
                    .map(|x| x * 3e-5)
                    .collect();
                s
            })
            .collect()
    };
    for which in 0..2 {
        if let Some(e) = run(
            "subnormal V",
            &SMOL,
            KvType::F16,
            &ap,
            &steps(KvType::F16),
            which,
            SUBNORMAL_LIMIT,
        ) {
            worst.note("subnormal V", e);
        }
    }
}
