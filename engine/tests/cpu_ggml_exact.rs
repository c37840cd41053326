//! `CpuNumerics::Ggml` against oracles written straight from ggml's source
//! (llama-cpp-sys-2 0.1.161, the AVX2 + FMA build: `ggml_v_expf`,
//! `ggml_vec_dot_f32/f16`, tinyBLAS, `ggml_vec_soft_max_f32`,
//! `ggml_vec_swiglu_f32`, `rotate_pairs`, and llama.cpp's attention graph
//! over a cache view padded to 256 positions), bit for bit on random
//! inputs: each kernel on every SIMD level this CPU runs, then the ops
//! through `CpuBackend`. And `CpuNumerics::Reference` against oracles of
//! what the CPU computed before the Ggml mode existed.
//!
//! The oracles lay the lanes out as ggml does (arrays indexed as its
//! vectors), pad as llama.cpp pads, and multiply masked positions by zero
//! instead of skipping them: independent of the kernels' shortcuts.

use engine::cpu::ggml;
use engine::cpu::{CpuBackend, CpuNumerics, SimdLevel};
use engine::ops::{Act, AttnParams, GluKind, KvType, Ops, RopeParams, RopeStyle, WeightSource};
use engine::GgmlType;
use half::f16;

use crate::cpu_support::Rng;

/// A C99 hex float literal (`0x1.715476p+0`), exactly.
fn hexf(s: &str) -> f32 {
    let s = s.strip_prefix("0x").expect("0x");
    let (m, e) = s.split_once('p').expect("p");
    let (int, frac) = m.split_once('.').unwrap_or((m, ""));
    let v = u64::from_str_radix(&format!("{int}{frac}"), 16).expect("hex") as f64;
    let x = v * 2f64.powi(e.parse::<i32>().expect("exponent") - 4 * frac.len() as i32);
    assert_eq!(x as f32 as f64, x, "{s} is not an f32");
    x as f32
}

/// vec.h `ggml_v_expf(__m256)`, one lane: its selects taken for this lane.
fn oracle_expf(x: f32) -> f32 {
    let r = hexf("0x1.8p23");
    let z = x.mul_add(hexf("0x1.715476p+0"), r);
    let n = z - r;
    // _mm256_fnmadd_ps(a, b, c) = c - a·b, fused.
    let b = (-n).mul_add(hexf("0x1.7f7d1cp-20"), (-n).mul_add(hexf("0x1.62e4p-1"), x));
    let e = z.to_bits() << 23;
    let k = f32::from_bits(e.wrapping_add(1f32.to_bits()));
    let c = n.abs() > 126.0;
    let u = b * b;
    let j = hexf("0x1.0e4020p-7")
        .mul_add(b, hexf("0x1.573e2ep-5"))
        .mul_add(u, hexf("0x1.555e66p-3").mul_add(b, hexf("0x1.fffdb6p-2")))
        .mul_add(u, hexf("0x1.ffffecp-1") * b);
    let g: u32 = if n <= 0.0 { 0x8200_0000 } else { 0 };
    let s1 = f32::from_bits(g.wrapping_add(0x7f00_0000));
    let s2 = f32::from_bits(e.wrapping_sub(g));
    if n.abs() > 192.0 {
        s1 * s1
    } else if c {
        s2.mul_add(j, s2) * s1
    } else {
        k.mul_add(j, k)
    }
}

/// `_mm_add_ps(hi, lo)`, `movehl`, `movehdup` of an 8-lane vector.
fn oracle_hsum8(v: &[f32]) -> f32 {
    let t: Vec<f32> = (0..4).map(|i| v[4 + i] + v[i]).collect();
    let u = [t[0] + t[2], t[1] + t[3]];
    u[0] + u[1]
}

/// vec.cpp `ggml_vec_dot_f32` (AVX: GGML_F32_STEP 32, 4 accumulators of
/// 8, GGML_F32x8_REDUCE, then `sumf += x[i]*y[i]` contracted by GCC).
fn oracle_vec_dot_f32(x: &[f32], y: &[f32]) -> f32 {
    let (sumf, np) = oracle_vec_dot_body(x, y);
    (np..x.len()).fold(sumf, |s, i| x[i].mul_add(y[i], s))
}

/// vec.cpp `ggml_vec_dot_f16`: the same vectors (widened), `sumf` a
/// `ggml_float` for the leftovers.
fn oracle_vec_dot_f16(x: &[f32], y: &[f32]) -> f32 {
    let (sumf, np) = oracle_vec_dot_body(x, y);
    (np..x.len()).fold(f64::from(sumf), |s, i| s + f64::from(x[i] * y[i])) as f32
}

#[allow(clippy::needless_range_loop)] // written as ggml's C loops
fn oracle_vec_dot_body(x: &[f32], y: &[f32]) -> (f32, usize) {
    let np = x.len() & !31;
    let mut sum = [[0.0f32; 8]; 4];
    for i in (0..np).step_by(32) {
        for (j, s) in sum.iter_mut().enumerate() {
            for (l, s) in s.iter_mut().enumerate() {
                let k = i + 8 * j + l;
                *s = x[k].mul_add(y[k], *s); // _mm256_fmadd_ps(ax, ay, sum)
            }
        }
    }
    // offset 2, then 1
    for l in 0..8 {
        sum[0][l] += sum[2][l];
        sum[1][l] += sum[3][l];
    }
    for l in 0..8 {
        sum[0][l] += sum[1][l];
    }
    let x0 = sum[0];
    let t0 = [x0[0] + x0[4], x0[1] + x0[5], x0[2] + x0[6], x0[3] + x0[7]];
    let t1 = [t0[0] + t0[1], t0[2] + t0[3]]; // _mm_hadd_ps(t0, t0)
    (t1[0] + t1[1], np)
}

/// sgemm.cpp `tinyBLAS<8, __m256, ...>::gemm_bloc`, one element: FMA lanes
/// over `k` in steps of 8, `load_partial` (zeros) for the rest, `hsum`.
fn oracle_tinyblas(a: &[f32], b: &[f32]) -> f32 {
    let k = a.len();
    let mut c = [0.0f32; 8];
    let mut l = 0;
    while l + 8 <= k {
        for r in 0..8 {
            c[r] = a[l + r].mul_add(b[l + r], c[r]);
        }
        l += 8;
    }
    if l < k {
        for (r, c) in c.iter_mut().enumerate() {
            let (x, y) = if l + r < k {
                (a[l + r], b[l + r])
            } else {
                (0.0, 0.0)
            };
            *c = x.mul_add(y, *c);
        }
    }
    oracle_hsum8(&c)
}

/// vec.cpp `ggml_vec_soft_max_f32`: `y = exp(x - max)`, returns the sum.
fn oracle_soft_max(x: &[f32], max: f32) -> (Vec<f32>, f64) {
    let n8 = x.len() / 8 * 8;
    let mut y = vec![0.0f32; x.len()];
    let mut sum = 0.0f64;
    for i in (0..n8).step_by(8) {
        for l in 0..8 {
            y[i + l] = oracle_expf(x[i + l] - max);
        }
        sum += f64::from(oracle_hsum8(&y[i..i + 8]));
    }
    for i in n8..x.len() {
        y[i] = (x[i] - max).exp();
        sum += f64::from(y[i]);
    }
    (y, sum)
}

/// vec.cpp `ggml_vec_swiglu_f32`, one row.
fn oracle_swiglu(x: &[f32], g: &[f32]) -> Vec<f32> {
    let n8 = x.len() / 8 * 8;
    (0..x.len())
        .map(|i| {
            let silu = if i < n8 {
                x[i] / (1.0 + oracle_expf(0.0 - x[i]))
            } else {
                x[i] / (1.0 + (-x[i]).exp())
            };
            silu * g[i]
        })
        .collect()
}

/// `MAX(a, b) = a > b ? a : b` folded from -inf (`ggml_vec_max_f32`).
fn oracle_max(x: &[f32]) -> f32 {
    x.iter()
        .fold(f32::NEG_INFINITY, |m, &v| if m > v { m } else { v })
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Equal bits, or both NaN.
fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

fn levels() -> Vec<SimdLevel> {
    SimdLevel::supported().collect()
}

fn values(rng: &mut Rng, n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|_| rng.range(-scale, scale)).collect()
}

/// Lengths around the vectors (8) and ggml's dot step (32).
const LENGTHS: [usize; 22] = [
    0, 1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 80, 96, 100, 127, 128, 129, 257,
];

/// Inputs of every kind for the exp: special values, both thresholds
/// (|n| > 126, > 192), the flush points, a sweep and random bit patterns.
fn exp_inputs() -> Vec<f32> {
    let mut x = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
        f32::MAX,
        f32::MIN,
        88.0,
        88.38,
        88.4,
        88.72,
        89.0,
        -87.3,
        -87.4,
        -103.9,
        -103.97,
        -104.0,
        -133.0,
        -134.0,
        -200.0,
        133.0,
        134.0,
    ];
    let mut v = -140.0f32;
    while v < 140.0 {
        x.push(v);
        v += 0.0137;
    }
    let mut rng = Rng::new(91);
    x.extend((0..4000).map(|_| f32::from_bits(rng.next_u64() as u32)));
    x.extend((0..4000).map(|_| rng.log_signed(-6.0, 2.2)));
    x
}

#[test]
fn hex_constants_are_the_ones_the_kernels_use() {
    // The scalar kernel against the oracle on the same inputs checks the
    // constants too; these pin the parser.
    assert_eq!(hexf("0x1.8p23"), 12_582_912.0);
    assert_eq!(hexf("0x1.62e4p-1").to_bits(), 0x3f31_7200);
    assert_eq!(hexf("0x1.ffffecp-1").to_bits(), 0x3f7f_fff6);
}

#[test]
fn v_expf_is_ggmls_lane_for_lane() {
    for x in exp_inputs() {
        let (got, want) = (ggml::v_expf(x), oracle_expf(x));
        assert!(same(got, want), "v_expf({x:e}) = {got:e}, ggml {want:e}");
    }
    // And it is an exp: within 2 ulps of libm's where both are normal.
    let mut v = -87.0f32;
    while v < 88.0 {
        let (a, b) = (ggml::v_expf(v), v.exp());
        let ulps = (a.to_bits() as i64 - b.to_bits() as i64).abs();
        assert!(ulps <= 2, "v_expf({v}) = {a:e}, libm {b:e}");
        v += 0.01;
    }
    // Flushes to 0 below about -103.97 (ggml's comment), to inf past f32.
    assert_eq!(ggml::v_expf(-104.0), 0.0);
    assert_eq!(ggml::v_expf(88.8), f32::INFINITY);
}

#[test]
fn soft_max_equals_ggmls_on_every_level() {
    // Every exp input through whole vectors and the libm tail, with max 0
    // (each value is then v_expf of itself).
    let x = exp_inputs();
    let (want, _) = oracle_soft_max(&x, 0.0);
    for level in levels() {
        let mut got = x.clone();
        ggml::soft_max(level, &mut got, 0.0);
        for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
            assert!(
                same(g, w),
                "{level} element {i} ({:e}): {g:e}, ggml {w:e}",
                x[i]
            );
        }
    }
    // Realistic rows: the values and the f64 sum.
    let mut rng = Rng::new(5);
    for n in LENGTHS.iter().copied().chain([256, 300, 1024]) {
        let x = values(&mut rng, n, 30.0);
        let max = oracle_max(&x);
        let (want, want_sum) = oracle_soft_max(&x, max);
        for level in levels() {
            let mut got = x.clone();
            let sum = ggml::soft_max(level, &mut got, max);
            assert_eq!(bits(&got), bits(&want), "{level} n {n}");
            assert_eq!(sum.to_bits(), want_sum.to_bits(), "{level} n {n}");
        }
    }
}

#[test]
fn swiglu_equals_ggmls_on_every_level() {
    let mut rng = Rng::new(6);
    for n in LENGTHS.iter().copied().chain([1536, 1539]) {
        let mut x = values(&mut rng, n, 12.0);
        // Some overflowing and special gates.
        for (i, v) in x.iter_mut().enumerate().filter(|(i, _)| i % 23 == 5) {
            *v = [
                -90.0,
                -88.5,
                95.0,
                f32::NEG_INFINITY,
                f32::INFINITY,
                f32::NAN,
            ][i % 6];
        }
        let g = values(&mut rng, n, 2.0);
        let want = oracle_swiglu(&x, &g);
        for level in levels() {
            let mut got = x.clone();
            ggml::swiglu(level, &mut got, &g);
            for (i, (&a, &b)) in got.iter().zip(&want).enumerate() {
                assert!(same(a, b), "{level} n {n} element {i}: {a:e}, ggml {b:e}");
            }
        }
    }
}

#[test]
fn dots_equal_ggmls_on_every_level() {
    let mut rng = Rng::new(7);
    for n in LENGTHS.iter().copied().chain([256, 1000, 1024]) {
        for scale in [1.0, 300.0] {
            let x = values(&mut rng, n, scale);
            let y = values(&mut rng, n, 1.0);
            let xh: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
            let yh: Vec<f16> = y.iter().map(|&v| f16::from_f32(v)).collect();
            let (xw, yw): (Vec<f32>, Vec<f32>) = (
                xh.iter().map(|v| v.to_f32()).collect(),
                yh.iter().map(|v| v.to_f32()).collect(),
            );
            let want = [
                oracle_vec_dot_f32(&x, &y),
                oracle_vec_dot_f16(&xw, &yw),
                oracle_tinyblas(&x, &y),
            ];
            for level in levels() {
                let got = [
                    ggml::vec_dot_f32(level, &x, &y),
                    ggml::vec_dot_f16(level, &xh, &yh),
                    ggml::tinyblas_dot(level, &x, &y),
                ];
                assert_eq!(bits(&got), bits(&want), "{level} n {n} scale {scale}");
            }
        }
    }
}

// ---- the ops through the backend ----------------------------------------

fn put(b: &mut CpuBackend, rows: usize, width: usize, data: &[f32]) -> Act {
    let a = b.alloc(rows, width).unwrap();
    b.write(a, data).unwrap();
    a
}

fn get(b: &mut CpuBackend, a: Act) -> Vec<f32> {
    let mut v = vec![0.0; a.len()];
    b.read(a, &mut v).unwrap();
    v
}

fn backend(numerics: CpuNumerics) -> CpuBackend {
    let mut b = CpuBackend::new(2);
    b.set_numerics(numerics);
    b
}

/// ops.cpp `ggml_rope_cache_init` and `rotate_pairs`, the products
/// contracted as GCC does (`fused`) or each rounded (the Reference).
fn oracle_rope(x: &[f32], width: usize, p: &RopeParams, pos0: usize, fused: bool) -> Vec<f32> {
    let mut y = x.to_vec();
    let theta_scale = p.base.powf(-2.0 / p.n_rot as f32);
    for (t, row) in y.chunks_mut(width).enumerate() {
        let mut cache = Vec::new();
        let mut theta = (pos0 + t) as f32;
        for _ in 0..p.n_rot / 2 {
            let th = p.freq_scale * theta;
            cache.push((th.cos(), th.sin()));
            theta *= theta_scale;
        }
        for head in row.chunks_mut(p.head_dim) {
            for (i, &(c, s)) in cache.iter().enumerate() {
                let (a, b) = match p.style {
                    RopeStyle::Norm => (2 * i, 2 * i + 1),
                    RopeStyle::Neox => (i, i + p.n_rot / 2),
                };
                let (x0, x1) = (head[a], head[b]);
                if fused {
                    head[a] = x0.mul_add(c, -(x1 * s));
                    head[b] = x0.mul_add(s, x1 * c);
                } else {
                    head[a] = x0 * c - x1 * s;
                    head[b] = x0 * s + x1 * c;
                }
            }
        }
    }
    y
}

#[test]
fn rope_equals_ggmls_and_the_reference_its_own() {
    let mut rng = Rng::new(8);
    for (style, hd, n_rot, base, fs) in [
        (RopeStyle::Norm, 64, 64, 10_000.0, 1.0),
        (RopeStyle::Neox, 64, 64, 100_000.0, 1.0),
        (RopeStyle::Neox, 256, 256, 1_000_000.0, 0.125),
        (RopeStyle::Norm, 96, 32, 10_000.0, 1.0),
        (RopeStyle::Neox, 80, 40, 10_000.0, 0.5),
    ] {
        let p = RopeParams {
            style,
            head_dim: hd,
            n_rot,
            base,
            freq_scale: fs,
        };
        let (rows, width) = (5, 3 * hd);
        let x = values(&mut rng, rows * width, 4.0);
        for (numerics, fused) in [(CpuNumerics::Ggml, true), (CpuNumerics::Reference, false)] {
            let mut b = backend(numerics);
            let a = put(&mut b, rows, width, &x);
            b.rope(a, &p, 37);
            let want = oracle_rope(&x, width, &p, 37, fused);
            assert_eq!(
                bits(&get(&mut b, a)),
                bits(&want),
                "{numerics} {style:?} {hd}"
            );
        }
    }
}

#[test]
fn swiglu_rows_equal_ggmls_and_the_reference_its_own() {
    let mut rng = Rng::new(9);
    for (rows, width) in [(1, 1536), (3, 20), (4, 9), (2, 1), (70, 64)] {
        let x = values(&mut rng, rows * width, 10.0);
        let u = values(&mut rng, rows * width, 2.0);
        for numerics in [CpuNumerics::Ggml, CpuNumerics::Reference] {
            let mut b = backend(numerics);
            let (ga, ua) = (put(&mut b, rows, width, &x), put(&mut b, rows, width, &u));
            b.glu(GluKind::SwiGlu, ga, ua);
            let want: Vec<f32> = match numerics {
                CpuNumerics::Ggml => x
                    .chunks(width)
                    .zip(u.chunks(width))
                    .flat_map(|(x, u)| oracle_swiglu(x, u))
                    .collect(),
                CpuNumerics::Reference => x
                    .iter()
                    .zip(&u)
                    .map(|(&g, &u)| g / (1.0 + (-g).exp()) * u)
                    .collect(),
            };
            assert_eq!(
                bits(&get(&mut b, ga)),
                bits(&want),
                "{numerics} {rows}x{width}"
            );
        }
    }
}

#[test]
fn router_softmax_equals_ggmls_and_the_reference_its_own() {
    let mut rng = Rng::new(10);
    for width in [8, 60, 64, 128, 13] {
        let x = values(&mut rng, 3 * width, 8.0);
        for numerics in [CpuNumerics::Ggml, CpuNumerics::Reference] {
            let mut b = backend(numerics);
            let a = put(&mut b, 3, width, &x);
            b.softmax(a);
            let want: Vec<f32> = x
                .chunks(width)
                .flat_map(|row| match numerics {
                    CpuNumerics::Ggml => {
                        let (y, sum) = oracle_soft_max(row, oracle_max(row));
                        let inv = (1.0 / sum) as f32;
                        y.iter().map(|v| v * inv).collect::<Vec<_>>()
                    }
                    CpuNumerics::Reference => {
                        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                        let e: Vec<f32> = row.iter().map(|v| (v - max).exp()).collect();
                        let sum: f64 = e.iter().fold(0.0, |s, &v| s + f64::from(v));
                        let inv = (1.0 / sum) as f32;
                        e.iter().map(|v| v * inv).collect()
                    }
                })
                .collect();
            assert_eq!(
                bits(&get(&mut b, a)),
                bits(&want),
                "{numerics} width {width}"
            );
        }
    }
}

#[test]
fn float_weight_products_equal_ggmls() {
    // ggml_compute_forward_mul_mat: llamafile_sgemm (tinyBLAS) for 2 or
    // more contiguous activation rows when the weight's rows are a
    // multiple of 4 (F16: the activations converted to F16 first);
    // ggml_vec_dot_f32/f16 per element otherwise. The Reference takes
    // ggml_vec_dot for every row count.
    let mut rng = Rng::new(11);
    for (ty, n_in, n_out) in [
        (GgmlType::F32, 576, 4),
        (GgmlType::F32, 256, 32),
        (GgmlType::F32, 100, 12),
        (GgmlType::F32, 64, 6),
        (GgmlType::F16, 576, 8),
        (GgmlType::F16, 37, 4),
    ] {
        let w = values(&mut rng, n_in * n_out, 1.0);
        let (source, wv): (WeightSource, Vec<f32>) = match ty {
            GgmlType::F32 => (WeightSource::from_f32("w", n_in, n_out, &w), w.clone()),
            _ => {
                let h: Vec<f16> = w.iter().map(|&v| f16::from_f32(v)).collect();
                let bytes: Vec<u8> = h.iter().flat_map(|v| v.to_le_bytes()).collect();
                let wv = h.iter().map(|v| v.to_f32()).collect();
                (WeightSource::from_bytes("w", ty, n_in, n_out, bytes), wv)
            }
        };
        for rows in [1, 2, 5, 9] {
            let x = values(&mut rng, rows * n_in, 2.0);
            for numerics in [CpuNumerics::Ggml, CpuNumerics::Reference] {
                let mut b = backend(numerics);
                let wh = b.upload(&source).unwrap();
                let xa = put(&mut b, rows, n_in, &x);
                let out = b.alloc(rows, n_out).unwrap();
                b.matmul(wh, xa, out);
                let tiny = numerics == CpuNumerics::Ggml && rows >= 2 && n_out % 4 == 0;
                let mut want = Vec::new();
                for t in 0..rows {
                    let mut xt = x[t * n_in..(t + 1) * n_in].to_vec();
                    if ty == GgmlType::F16 {
                        xt.iter_mut().for_each(|v| *v = f16::from_f32(*v).to_f32());
                    }
                    for r in 0..n_out {
                        let wr = &wv[r * n_in..(r + 1) * n_in];
                        want.push(match (tiny, ty) {
                            (true, _) => oracle_tinyblas(wr, &xt),
                            (false, GgmlType::F32) => oracle_vec_dot_f32(wr, &xt),
                            _ => oracle_vec_dot_f16(wr, &xt),
                        });
                    }
                }
                assert_eq!(
                    bits(&get(&mut b, out)),
                    bits(&want),
                    "{numerics} {ty} [{n_in}, {n_out}] x {rows} rows"
                );
            }
        }
    }
}

/// One attention case: heads, head dims, a window, the cache type, and the
/// batches (rows per forward pass) run one after another.
struct Case {
    n_head: usize,
    n_kv_head: usize,
    dk: usize,
    dv: usize,
    window: Option<usize>,
    ty: KvType,
    batches: &'static [usize],
}

/// llama.cpp's attention graph without flash attention, for the batch of
/// `q` rows at `pos0..` over a cache whose cells `0..pos0 + rows` hold `k`,
/// `v` (as stored: f16 values for an F16 cache): `kq = mul_mat(k, q)`,
/// `soft_max_ext(kq, mask, scale)` over the view padded to 256 cells,
/// `kqv = mul_mat(v, kq)`; each `mul_mat` as ggml-cpu picks its kernel.
fn oracle_attention(
    c: &Case,
    p: &AttnParams,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    pos0: usize,
) -> Vec<f32> {
    let (nh, nkv, dk, dv) = (c.n_head, c.n_kv_head, c.dk, c.dv);
    let f16c = c.ty == KvType::F16;
    let r16 = |x: f32| f16::from_f32(x).to_f32();
    let rows = q.len() / (nh * dk);
    let n = pos0 + rows;
    let n_kv = n.div_ceil(256) * 256;
    let batch = rows >= 2;
    // mul_mat(k, q): q permuted is contiguous only with one head; an F16
    // K converts q to a contiguous F16 copy first. llamafile_sgemm takes
    // contiguous operands of 2 or more columns.
    let kq_dot = |kr: &[f32], qr: &[f32]| match (batch && (f16c || nh == 1), f16c) {
        (true, _) => oracle_tinyblas(kr, qr),
        (false, false) => oracle_vec_dot_f32(kr, qr),
        (false, true) => oracle_vec_dot_f16(kr, qr),
    };
    let kqv_dot = |vt: &[f32], pr: &[f32]| match (batch && dv % 4 == 0, f16c) {
        (true, _) => oracle_tinyblas(vt, pr),
        (false, false) => oracle_vec_dot_f32(vt, pr),
        (false, true) => oracle_vec_dot_f16(vt, pr),
    };
    let mut out = vec![0.0f32; rows * nh * dv];
    for t in 0..rows {
        let pos = pos0 + t;
        for h in 0..nh {
            let g = h / (nh / nkv);
            let mut qh = q[(t * nh + h) * dk..][..dk].to_vec();
            if f16c {
                qh.iter_mut().for_each(|x| *x = r16(*x));
            }
            let mut wp = vec![0.0f32; n_kv];
            for (j, w) in wp.iter_mut().enumerate() {
                // Cells past the batch hold zeros (a cleared cache).
                let kq = if j < n {
                    kq_dot(&k[j * nkv * dk + g * dk..][..dk], &qh)
                } else {
                    0.0
                };
                let visible = j <= pos && c.window.is_none_or(|w| pos - j < w);
                let mask = if visible { 0.0 } else { f32::NEG_INFINITY };
                *w = 1.0f32.mul_add(mask, kq * p.scale); // wp += slope*mp
            }
            let max = oracle_max(&wp);
            let (mut dp, sum) = oracle_soft_max(&wp, max);
            let inv = (1.0 / sum) as f32;
            dp.iter_mut().for_each(|x| *x *= inv);
            if f16c {
                dp.iter_mut().for_each(|x| *x = r16(*x));
            }
            for d in 0..dv {
                let vt: Vec<f32> = (0..n_kv)
                    .map(|j| {
                        if j < n {
                            v[j * nkv * dv + g * dv + d]
                        } else {
                            0.0
                        }
                    })
                    .collect();
                out[(t * nh + h) * dv + d] = kqv_dot(&vt, &dp);
            }
        }
    }
    out
}

/// The CPU's attention before `CpuNumerics` (now the Reference): sixteen
/// partial sums per score, libm exp, the f64 sum in order, `o += p · v`.
fn oracle_reference_attention(
    c: &Case,
    p: &AttnParams,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    pos0: usize,
) -> Vec<f32> {
    let (nh, nkv, dk, dv) = (c.n_head, c.n_kv_head, c.dk, c.dv);
    let r16 = |x: f32| f16::from_f32(x).to_f32();
    let rows = q.len() / (nh * dk);
    let mut out = vec![0.0f32; rows * nh * dv];
    for t in 0..rows {
        let pos = pos0 + t;
        let first = c.window.map_or(0, |w| (pos + 1).saturating_sub(w));
        for h in 0..nh {
            let g = h / (nh / nkv);
            let mut qh = q[(t * nh + h) * dk..][..dk].to_vec();
            if c.ty == KvType::F16 {
                qh.iter_mut().for_each(|x| *x = r16(*x));
            }
            let score = |kr: &[f32]| {
                let n16 = dk - dk % 16;
                let mut acc = [0.0f32; 16];
                for i in 0..n16 {
                    acc[i % 16] += qh[i] * kr[i];
                }
                let tail: f32 = (n16..dk).map(|i| qh[i] * kr[i]).sum();
                let mut w = 16;
                while w > 1 {
                    w /= 2;
                    for i in 0..w {
                        acc[i] += acc[i + w];
                    }
                }
                acc[0] + tail
            };
            let s: Vec<f32> = (first..=pos)
                .map(|j| score(&k[j * nkv * dk + g * dk..][..dk]) * p.scale)
                .collect();
            let max = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let e: Vec<f32> = s.iter().map(|x| (x - max).exp()).collect();
            let sum = e.iter().fold(0.0f64, |a, &x| a + f64::from(x));
            let inv = (1.0 / sum) as f32;
            let mut pr: Vec<f32> = e.iter().map(|x| x * inv).collect();
            if c.ty == KvType::F16 {
                pr.iter_mut().for_each(|x| *x = r16(*x));
            }
            for d in 0..dv {
                out[(t * nh + h) * dv + d] = (first..=pos)
                    .zip(&pr)
                    .fold(0.0f32, |o, (j, &w)| o + w * v[j * nkv * dv + g * dv + d]);
            }
        }
    }
    out
}

fn check_attention(c: &Case, numerics: CpuNumerics, seed: u64) {
    let mut rng = Rng::new(seed);
    let p = AttnParams {
        n_head: c.n_head,
        n_kv_head: c.n_kv_head,
        head_dim_k: c.dk,
        head_dim_v: c.dv,
        scale: 1.0 / (c.dk as f32).sqrt(),
        window: c.window,
        softcap: None,
    };
    let (kw, vw) = (c.n_kv_head * c.dk, c.n_kv_head * c.dv);
    let n_ctx: usize = c.batches.iter().sum();
    let mut b = backend(numerics);
    let kv = b.alloc_kv(n_ctx, kw, vw, c.ty).unwrap();
    // Everything the cache holds so far, as stored.
    let (mut k_all, mut v_all) = (Vec::new(), Vec::new());
    let mut pos0 = 0;
    for &rows in c.batches {
        let q = values(&mut rng, rows * c.n_head * c.dk, 3.0);
        let k = values(&mut rng, rows * kw, 3.0);
        let v = values(&mut rng, rows * vw, 1.0);
        let stored = |x: &[f32]| -> Vec<f32> {
            match c.ty {
                KvType::F32 => x.to_vec(),
                KvType::F16 => x.iter().map(|&x| f16::from_f32(x).to_f32()).collect(),
            }
        };
        k_all.extend(stored(&k));
        v_all.extend(stored(&v));
        let (qa, ka, va) = (
            put(&mut b, rows, c.n_head * c.dk, &q),
            put(&mut b, rows, kw, &k),
            put(&mut b, rows, vw, &v),
        );
        let out = b.alloc(rows, c.n_head * c.dv).unwrap();
        b.attention(kv, qa, ka, va, out, pos0, &p);
        let want = match numerics {
            CpuNumerics::Ggml => oracle_attention(c, &p, &q, &k_all, &v_all, pos0),
            CpuNumerics::Reference => oracle_reference_attention(c, &p, &q, &k_all, &v_all, pos0),
        };
        let got = get(&mut b, out);
        for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
            assert!(
                g.to_bits() == w.to_bits(),
                "{numerics} {:?} heads {}/{} dims {}/{} window {:?}: batch of {rows} at {pos0}, \
                 element {i}: {g:e}, oracle {w:e}",
                c.ty,
                c.n_head,
                c.n_kv_head,
                c.dk,
                c.dv,
                c.window
            );
        }
        pos0 += rows;
    }
}

const CASES: [Case; 9] = [
    // SmolLM2-135M: prefill, then decode steps.
    Case {
        n_head: 9,
        n_kv_head: 3,
        dk: 64,
        dv: 64,
        window: None,
        ty: KvType::F32,
        batches: &[13, 1, 1, 5, 1],
    },
    Case {
        n_head: 9,
        n_kv_head: 3,
        dk: 64,
        dv: 64,
        window: None,
        ty: KvType::F16,
        batches: &[11, 1, 4, 1],
    },
    // Gemma-3-270M's heads with a window; the last batches cross it.
    Case {
        n_head: 4,
        n_kv_head: 1,
        dk: 256,
        dv: 256,
        window: Some(7),
        ty: KvType::F32,
        batches: &[9, 1, 3, 1],
    },
    Case {
        n_head: 4,
        n_kv_head: 1,
        dk: 256,
        dv: 256,
        window: Some(10),
        ty: KvType::F16,
        batches: &[12, 1, 2],
    },
    // One head: ggml's kq goes to tinyBLAS for a batch.
    Case {
        n_head: 1,
        n_kv_head: 1,
        dk: 16,
        dv: 16,
        window: None,
        ty: KvType::F32,
        batches: &[6, 1, 2],
    },
    // Head dims with leftovers (80: 16 past the 32-steps; 20 and 6: dv
    // not a multiple of 8, or of 4: vec_dot for a batch too).
    Case {
        n_head: 4,
        n_kv_head: 2,
        dk: 80,
        dv: 20,
        window: None,
        ty: KvType::F32,
        batches: &[7, 1],
    },
    Case {
        n_head: 2,
        n_kv_head: 2,
        dk: 36,
        dv: 6,
        window: Some(3),
        ty: KvType::F16,
        batches: &[5, 1, 3],
    },
    // A window wider than a pass of the row blocks (64 positions), rows
    // of a block seeing different first positions.
    Case {
        n_head: 3,
        n_kv_head: 1,
        dk: 64,
        dv: 32,
        window: Some(100),
        ty: KvType::F16,
        batches: &[150, 40, 1, 19],
    },
    // Past 256 cells: a second padded block of the view.
    Case {
        n_head: 2,
        n_kv_head: 1,
        dk: 64,
        dv: 64,
        window: None,
        ty: KvType::F32,
        batches: &[250, 1, 9, 1],
    },
];

#[test]
fn attention_equals_llama_cpps_graph() {
    for (i, c) in CASES.iter().enumerate() {
        check_attention(c, CpuNumerics::Ggml, 100 + i as u64);
    }
}

#[test]
fn reference_attention_is_what_the_cpu_computed_before() {
    for (i, c) in CASES.iter().enumerate() {
        check_attention(c, CpuNumerics::Reference, 200 + i as u64);
    }
}

#[test]
fn ggml_is_the_default_and_names_round_trip() {
    assert_eq!(CpuBackend::new(1).numerics(), CpuNumerics::Ggml);
    assert_eq!(CpuNumerics::default(), CpuNumerics::Ggml);
    for n in [CpuNumerics::Ggml, CpuNumerics::Reference] {
        assert_eq!(n.to_string().parse::<CpuNumerics>(), Ok(n));
    }
    assert!("GGML".parse::<CpuNumerics>().is_err());
}
