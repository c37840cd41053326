//! The dot-product kernels: every SIMD level against the scalar reference
//! (one property test per weight type), the SIMD levels against each other
//! (bit for bit), and the scalar reference against a dequantize-then-dot of
//! the same blocks.

use crate::cpu_support;

use cpu_support::{activations, elems, quantized_act, weight_row, Rng, TYPES};
use engine::cpu::act::vec_dot_type;
use engine::cpu::{dot, Kernels, SimdLevel};
use engine::quant::dequantize_row;
use engine::GgmlType;
use proptest::prelude::*;

fn dequant(ty: GgmlType, bytes: &[u8], n: usize) -> Vec<f32> {
    let mut out = vec![0.0f32; n];
    dequantize_row(ty, bytes, &mut out).expect("dequantizable");
    out
}

/// One random case: a weight row, activations, their quantized form, and
/// `sum |w_i * a_i|` over the dequantized pair (the scale of the rounding
/// errors of any summation order).
struct Case {
    w: Vec<u8>,
    x: Vec<f32>,
    a: Vec<u8>,
    magnitude: f64,
}

fn case(ty: GgmlType, n_blocks: usize, seed: u64) -> Case {
    let mut rng = Rng::new(seed);
    let n = elems(ty, n_blocks);
    let w = weight_row(&mut rng, ty, n_blocks);
    let x = activations(&mut rng, n);
    let a = quantized_act(ty, &x);
    let at = vec_dot_type(ty).unwrap();
    let (wd, ad) = (dequant(ty, &w, n), dequant(at, &a, n));
    let magnitude = wd
        .iter()
        .zip(&ad)
        .map(|(&w, &a)| (w as f64 * a as f64).abs())
        .sum();
    Case { w, x, a, magnitude }
}

/// The SIMD levels this CPU runs.
fn simd_levels() -> Vec<SimdLevel> {
    SimdLevel::supported()
        .filter(|&l| l != SimdLevel::Scalar)
        .collect()
}

/// The largest `|simd - scalar| / sum |w_i a_i|` allowed (relative to the
/// sum of magnitudes: relative to the result itself the difference is
/// unbounded where the terms cancel).
///
/// The integer parts of both kernels are exact and equal; they differ only
/// in how the f32 block products are summed (scalar: one running sum, or
/// eight lanes per element index for Q3_K-Q6_K, or f64 for the float
/// types; SIMD: eight lanes of four adjacent elements, a tree fold, then
/// leftovers one by one). Each addition rounds by at most 2^-24 of what it
/// has summed, so for these sizes (at most 8 blocks, or 300 float elements:
/// about 10 lane FMAs, 3 fold levels and up to 31 leftover FMAs) the
/// difference stays under about 44 * 2^-24 = 2.6e-6 of `sum |w_i a_i|`.
/// Measured over 100,000 cases per type (the `calibrate` test, release
/// build): worst 2.8e-7 (F32); the quantized types at most 2.2e-7 (Q5_1),
/// the K types 1.4e-7 (Q6_K). The bound leaves 14x over the worst seen and
/// covers the theoretical worst case.
const SIMD_TOLERANCE: f64 = 4e-6;

fn check_simd(ty: GgmlType, n_blocks: usize, seed: u64) -> Result<(), TestCaseError> {
    let c = case(ty, n_blocks, seed);
    let scalar = Kernels::for_level(ty, SimdLevel::Scalar)
        .unwrap()
        .dot(&c.w, &c.a)
        .unwrap();
    let mut first: Option<(SimdLevel, f32)> = None;
    for level in simd_levels() {
        let k = Kernels::for_level(ty, level).unwrap();
        prop_assert_eq!(k.level, level, "{} has no {} kernel", ty, level);
        let simd = k.dot(&c.w, &c.a).unwrap();
        let err = (simd as f64 - scalar as f64).abs();
        prop_assert!(
            err <= SIMD_TOLERANCE * c.magnitude,
            "{ty} {level}: simd {simd} scalar {scalar}, |diff| {err:e} > {SIMD_TOLERANCE:e} * {:e}",
            c.magnitude
        );
        match first {
            None => first = Some((level, simd)),
            Some((l0, v0)) => prop_assert_eq!(
                v0.to_bits(),
                simd.to_bits(),
                "{} differs between {} and {}",
                ty,
                l0,
                level
            ),
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// Every type's SIMD kernels against its scalar ones: 1 to 8 blocks;
    /// the float types in elements, every length up to 8 x 32 and past it,
    /// so the 32-element SIMD steps and the leftovers both run.
    #[test]
    fn simd_matches_scalar(n_blocks in 1usize..=8, n_elems in 1usize..=300, seed in any::<u64>()) {
        for ty in TYPES {
            let n = if ty.block_elems() == 1 { n_elems } else { n_blocks };
            check_simd(ty, n, seed)?;
        }
    }
}

/// The case the regressions file keeps (`n_blocks = 1, seed = 0`), for
/// every type.
#[test]
fn simd_matches_scalar_one_block_seed_0() {
    for ty in TYPES {
        check_simd(ty, 1, 0).unwrap();
    }
}

/// The scalar kernel computes the right thing: it equals the f64 dot of the
/// dequantized weights with the original activations, up to the
/// activations' quantization error (`sum |w_i| |x_i - a_i|`, measured), the
/// rounding of Q8_1's block sums to f16, and f32 summation slack.
fn check_definition(ty: GgmlType, n_blocks: usize, seed: u64) -> Result<(), TestCaseError> {
    let c = case(ty, n_blocks, seed);
    let n = c.x.len();
    let at = vec_dot_type(ty).unwrap();
    let wd = dequant(ty, &c.w, n);
    let ad = dequant(at, &c.a, n);
    let exact: f64 = wd
        .iter()
        .zip(&c.x)
        .map(|(&w, &x)| w as f64 * x as f64)
        .sum();
    let act_err: f64 = wd
        .iter()
        .zip(c.x.iter().zip(&ad))
        .map(|(&w, (&x, &a))| (w as f64).abs() * (x as f64 - a as f64).abs())
        .sum();
    // Q8_1 carries s = f16(d * sum q): the kernel uses m * s where the
    // dequantized pair gives m * d * sum q (f16 rounds by at most 2^-11).
    let s_err: f64 = if at == GgmlType::Q8_1 {
        let mut e = 0.0;
        for (wb, ab) in c.w.chunks_exact(ty.block_bytes()).zip(c.a.chunks_exact(36)) {
            let m = half::f16::from_le_bytes([wb[2], wb[3]]).to_f64();
            let s = half::f16::from_le_bytes([ab[2], ab[3]]).to_f64();
            e += (m * s).abs() * 2f64.powi(-10);
        }
        e
    } else {
        0.0
    };
    let got = Kernels::for_level(ty, SimdLevel::Scalar)
        .unwrap()
        .dot(&c.w, &c.a)
        .unwrap() as f64;
    let bound = act_err + s_err + 1e-5 * c.magnitude + 1e-30;
    prop_assert!(
        (got - exact).abs() <= bound,
        "{ty}: scalar {got} vs dequantized dot {exact}: |diff| {:e} > {bound:e}",
        (got - exact).abs()
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn scalar_kernels_compute_the_dequantized_dot(
        t in 0usize..TYPES.len(),
        n_blocks in 1usize..=8,
        seed in any::<u64>(),
    ) {
        let ty = TYPES[t];
        let n_blocks = if ty.block_elems() == 1 { n_blocks * 37 } else { n_blocks };
        check_definition(ty, n_blocks, seed)?;
    }
}

#[test]
fn every_type_has_simd_kernels_where_simd_runs() {
    for ty in dot::weight_types() {
        assert!(TYPES.contains(&ty));
        for level in SimdLevel::supported() {
            assert_eq!(
                Kernels::for_level(ty, level).unwrap().level,
                level,
                "{ty} {level}"
            );
        }
    }
    assert_eq!(dot::weight_types().count(), TYPES.len());
}

#[test]
fn bad_lengths_are_errors() {
    let k = Kernels::detected(GgmlType::Q4_0).unwrap();
    assert!(k.dot(&[0u8; 18], &[0u8; 34]).is_ok());
    assert!(k.dot(&[0u8; 19], &[0u8; 34]).is_err());
    assert!(k.dot(&[0u8; 18], &[0u8; 68]).is_err());
    assert!(Kernels::detected(GgmlType::IQ2_XXS).is_err());
    assert!(Kernels::detected(GgmlType::Q8_K).is_err());
}

/// Prints the worst `|simd - scalar| / magnitude` per type over many cases
/// (`cargo test --release --test cpu_dot calibrate -- --ignored --nocapture`).
#[test]
#[ignore]
fn calibrate() {
    let cases: u64 = std::env::var("CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    for ty in TYPES {
        let mut worst = 0.0f64;
        for seed in 0..cases {
            let nb = 1 + (seed % 8) as usize;
            let nb = if ty.block_elems() == 1 { nb * 37 } else { nb };
            let c = case(ty, nb, seed * 7919 + 1);
            let s = Kernels::for_level(ty, SimdLevel::Scalar)
                .unwrap()
                .dot(&c.w, &c.a)
                .unwrap();
            let v = Kernels::detected(ty).unwrap().dot(&c.w, &c.a).unwrap();
            if c.magnitude > 0.0 {
                worst = worst.max((v as f64 - s as f64).abs() / c.magnitude);
            }
        }
        println!("{ty:>5}: worst |simd - scalar| / sum|w a| = {worst:.3e} over {cases} cases");
    }
}
