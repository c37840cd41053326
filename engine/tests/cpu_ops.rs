//! Every CPU op, through the `Ops` interface, against a naive f64
//! reference on random inputs; RoPE known values; attention masks; results
//! independent of the thread count.

use engine::cpu::act::{quantize_act, vec_dot_type};
use engine::cpu::CpuBackend;
use engine::ops::{Act, AttnParams, GluKind, KvType, Ops, RopeParams, RopeStyle, WeightSource};
use engine::quant::{dequantize_row, quantize_row};
use engine::GgmlType;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// A deterministic generator (xorshift), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in [-1, 1), as test-backend-ops uses.
    fn f(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.f()).collect()
    }
}

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

/// |got - want| <= tol_i for every element.
fn close(
    what: &str,
    got: &[f32],
    want: &[f64],
    tol: impl Fn(usize) -> f64,
) -> Result<(), TestCaseError> {
    prop_assert_eq!(got.len(), want.len(), "{}: lengths", what);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let t = tol(i);
        prop_assert!(
            (f64::from(g) - w).abs() <= t && g.is_finite(),
            "{}: element {} is {}, reference {} (tolerance {:e})",
            what,
            i,
            g,
            w,
            t
        );
    }
    Ok(())
}

fn rms_norm_ref(x: &[f32], group: usize, w: Option<&[f32]>, eps: f32) -> Vec<f64> {
    let mut out = Vec::with_capacity(x.len());
    for g in x.chunks(group) {
        let mean = g.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / group as f64;
        let s = 1.0 / (mean + f64::from(eps)).sqrt();
        for (i, &v) in g.iter().enumerate() {
            out.push(f64::from(v) * s * w.map_or(1.0, |w| f64::from(w[i])));
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn rms_norm_matches_f64(rows in 1usize..6, groups in 1usize..4, group in 1usize..80,
                            weighted: bool, in_place: bool, seed: u64) {
        let mut r = Rng::new(seed);
        let width = groups * group;
        let x = r.vec(rows * width);
        let w = r.vec(group);
        let eps = 1e-6;
        let mut b = CpuBackend::new(2);
        let xa = put(&mut b, rows, width, &x);
        let wh = weighted.then(|| b.upload(&WeightSource::from_f32("w", group, 1, &w)).unwrap());
        let out = if in_place { xa } else { b.alloc(rows, width).unwrap() };
        b.rms_norm(xa, wh, eps, group, out);
        let want = rms_norm_ref(&x, group, weighted.then_some(&w[..]), eps);
        close("rms_norm", &get(&mut b, out), &want, |i| 1e-5 * (1.0 + want[i].abs()))?;
    }

    #[test]
    fn matmul_matches_f64(n_tok in 1usize..7, blocks in 1usize..3, n_out in 1usize..40,
                          ty_i in 0usize..9, seed: u64) {
        let types = [GgmlType::F32, GgmlType::F16, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
                     GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K];
        let ty = types[ty_i];
        let n_in = blocks * 256;
        let mut r = Rng::new(seed);
        let wf = r.vec(n_in * n_out);
        let mut bytes = vec![0u8; ty.bytes_for((n_in * n_out) as u64).unwrap() as usize];
        quantize_row(ty, &wf, &mut bytes).unwrap();
        // The reference uses the same (quantized) weights, dequantized, and
        // the activations as the CPU puts them in the weight type's partner
        // format (Q8_0, Q8_1, Q8_K, F16: what ggml dots with), dequantized.
        let mut wd = vec![0.0f32; n_in * n_out];
        dequantize_row(ty, &bytes, &mut wd).unwrap();
        let x = r.vec(n_tok * n_in);
        let act = vec_dot_type(ty).unwrap();
        let mut xq = vec![0u8; act.bytes_for((n_tok * n_in) as u64).unwrap() as usize];
        quantize_act(act, &x, &mut xq).unwrap();
        let mut xd = vec![0.0f32; n_tok * n_in];
        dequantize_row(act, &xq, &mut xd).unwrap();
        let mut b = CpuBackend::new(2);
        let w = b.upload(&WeightSource::from_bytes("w", ty, n_in, n_out, bytes.clone())).unwrap();
        let xa = put(&mut b, n_tok, n_in, &x);
        let out = b.alloc(n_tok, n_out).unwrap();
        b.matmul(w, xa, out);
        let mut want = Vec::new();
        let mut tol = Vec::new();
        for t in 0..n_tok {
            for o in 0..n_out {
                let (mut s, mut a) = (0.0f64, 0.0f64);
                for c in 0..n_in {
                    let p = f64::from(wd[o * n_in + c]) * f64::from(xd[t * n_in + c]);
                    s += p;
                    a += p.abs();
                }
                want.push(s);
                // f32 sums of the products, as before the activations were
                // quantized; and for Q4_1 the block minimum meets Q8_1's
                // `s = d * sum(q)` stored as f16, rounded once from the f32
                // `d` and once to f16: up to 2^-10 of |m| * sum |x| a block.
                let mut t_i = 4e-6 * a + 1e-7;
                if ty == GgmlType::Q4_1 {
                    let row = &bytes[o * (n_in / 32) * 20..(o + 1) * (n_in / 32) * 20];
                    for (bi, blk) in row.chunks_exact(20).enumerate() {
                        let m = half::f16::from_le_bytes([blk[2], blk[3]]).to_f32();
                        let xs: f64 = xd[t * n_in + bi * 32..t * n_in + bi * 32 + 32]
                            .iter().map(|v| f64::from(v.abs())).sum();
                        t_i += f64::from(m.abs()) * xs / 1024.0;
                    }
                }
                tol.push(t_i);
            }
        }
        close("matmul", &get(&mut b, out), &want, |i| tol[i])?;
    }

    #[test]
    fn rope_matches_f64(rows in 1usize..5, heads in 1usize..4, half_hd in 1usize..33,
                        rot_frac in 0usize..3, neox: bool, pos0 in 0usize..64, seed: u64) {
        let hd = 2 * half_hd;
        let n_rot = match rot_frac { 0 => hd, 1 => 2 * half_hd.div_ceil(2), _ => 0 };
        let p = RopeParams {
            style: if neox { RopeStyle::Neox } else { RopeStyle::Norm },
            head_dim: hd,
            n_rot,
            base: 10_000.0,
            freq_scale: if seed % 3 == 0 { 0.25 } else { 1.0 },
        };
        let mut r = Rng::new(seed);
        let width = heads * hd;
        let x = r.vec(rows * width);
        let mut b = CpuBackend::new(2);
        let xa = put(&mut b, rows, width, &x);
        b.rope(xa, &p, pos0);
        let mut want: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
        for t in 0..rows {
            for h in 0..heads {
                let base = t * width + h * hd;
                for i in 0..n_rot / 2 {
                    let theta = f64::from(p.freq_scale) * (pos0 + t) as f64
                        * 10_000f64.powf(-2.0 * i as f64 / n_rot as f64);
                    let (a, c) = if neox { (i, i + n_rot / 2) } else { (2 * i, 2 * i + 1) };
                    let (x0, x1) = (f64::from(x[base + a]), f64::from(x[base + c]));
                    want[base + a] = x0 * theta.cos() - x1 * theta.sin();
                    want[base + c] = x0 * theta.sin() + x1 * theta.cos();
                }
            }
        }
        // ggml's f32 angle recurrence drifts by a few ulps of the angle.
        close("rope", &get(&mut b, xa), &want, |_| 1e-4)?;
    }

    #[test]
    fn glu_matches_f64(n in 1usize..3000, gelu: bool, seed: u64) {
        let mut r = Rng::new(seed);
        let g: Vec<f32> = r.vec(n).iter().map(|v| v * 12.0).collect();
        let u = r.vec(n);
        let mut b = CpuBackend::new(2);
        let (ga, ua) = (put(&mut b, 1, n, &g), put(&mut b, 1, n, &u));
        let kind = if gelu { GluKind::GeGluTanh } else { GluKind::SwiGlu };
        b.glu(kind, ga, ua);
        let gelu_f64 = |g: f64| {
            0.5 * g * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * g * (1.0 + 0.044715 * g * g)).tanh())
        };
        // GELU as ggml's CPU backend applies it: 0 at or below -10, the
        // identity at or above 10, and in between a table of f16 inputs
        // whose entries are rounded to f16 (so the output is off by up to
        // half an f16 ulp, 2^-11 relative, beyond the f32 arithmetic).
        let mut tol = Vec::with_capacity(n);
        let want: Vec<f64> = g.iter().zip(&u).map(|(&g, &u)| {
            let (act, rel) = if !gelu {
                let g = f64::from(g);
                (g / (1.0 + (-g).exp()), 0.0)
            } else if g <= -10.0 {
                (0.0, 0.0)
            } else if g >= 10.0 {
                (f64::from(g), 0.0)
            } else {
                (gelu_f64(f64::from(half::f16::from_f32(g).to_f32())), 1.0 / 2048.0)
            };
            let w = act * f64::from(u);
            tol.push(1e-6 * (1.0 + w.abs()) + rel * w.abs());
            w
        }).collect();
        close("glu", &get(&mut b, ga), &want, |i| tol[i])?;
    }

    #[test]
    fn elementwise_match_f64(rows in 1usize..4, width in 1usize..300, seed: u64) {
        let mut r = Rng::new(seed);
        let n = rows * width;
        let (x, y) = (r.vec(n), r.vec(n));
        let mut b = CpuBackend::new(2);
        let (xa, ya) = (put(&mut b, rows, width, &x), put(&mut b, rows, width, &y));
        b.add(xa, ya);
        b.mul(xa, ya);
        b.scale(xa, 3.0);
        b.softcap(xa, 2.5);
        let dst = b.alloc(rows, width).unwrap();
        b.copy(xa, dst);
        let want: Vec<f64> = x.iter().zip(&y).map(|(&x, &y)| {
            let v = (f64::from(x) + f64::from(y)) * f64::from(y) * 3.0;
            2.5 * (v / 2.5).tanh()
        }).collect();
        close("add/mul/scale/softcap/copy", &get(&mut b, dst), &want, |_| 1e-6)?;
    }

    /// Exact: each element is one f32 addition, which the f64 sum of the
    /// two f32 values rounds to the same bits. A view at a row offset of a
    /// larger buffer leaves the other rows alone; an F16 bias counts at
    /// its f32 value.
    #[test]
    fn add_bias_is_the_f32_sum_on_every_row(rows in 1usize..5, off in 0usize..3,
                                            width in 1usize..300, f16: bool, seed: u64) {
        let mut r = Rng::new(seed);
        let total = off + rows + 1;
        let x: Vec<f32> = r.vec(total * width).into_iter().map(|v| v * 30.0).collect();
        let bias: Vec<f32> = r.vec(width);
        let mut b = CpuBackend::new(2);
        let xa = put(&mut b, total, width, &x);
        let (src, bias) = if f16 {
            let h: Vec<f32> = bias.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect();
            let bytes = h.iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()).collect();
            (WeightSource::from_bytes("b", GgmlType::F16, width, 1, bytes), h)
        } else {
            (WeightSource::from_f32("b", width, 1, &bias), bias)
        };
        let bh = b.upload(&src).unwrap();
        b.add_bias(xa.rows_from(off, rows), bh);
        let got = get(&mut b, xa);
        for (i, (&g, &x0)) in got.iter().zip(&x).enumerate() {
            let t = i / width;
            let want = if (off..off + rows).contains(&t) {
                (f64::from(x0) + f64::from(bias[i % width])) as f32
            } else {
                x0
            };
            prop_assert_eq!(g.to_bits(), want.to_bits(), "element {} (row {})", i, t);
        }
    }

    #[test]
    fn attention_matches_f64(t1 in 1usize..6, t2 in 1usize..6, n_kv in 1usize..3, group in 1usize..4,
                             half_dk in 1usize..9, half_dv in 1usize..9, window in 0usize..6,
                             capped: bool, f16: bool, seed: u64) {
        let (nh, dk, dv) = (n_kv * group, 2 * half_dk, 2 * half_dv);
        let p = AttnParams {
            n_head: nh,
            n_kv_head: n_kv,
            head_dim_k: dk,
            head_dim_v: dv,
            scale: 1.0 / (dk as f32).sqrt(),
            window: (window > 0).then_some(window),
            softcap: capped.then_some(1.5),
        };
        let n = t1 + t2;
        let mut r = Rng::new(seed);
        let q: Vec<f32> = r.vec(n * nh * dk).iter().map(|v| v * 3.0).collect();
        let k = r.vec(n * n_kv * dk);
        let v = r.vec(n * n_kv * dv);
        let mut b = CpuBackend::new(2);
        let kv = b.alloc_kv(n + 2, n_kv * dk, n_kv * dv, if f16 { KvType::F16 } else { KvType::F32 }).unwrap();
        let mut got = Vec::new();
        // Two batches: the second attends to the first through the cache.
        for (pos0, rows) in [(0, t1), (t1, t2)] {
            let qa = put(&mut b, rows, nh * dk, &q[pos0 * nh * dk..(pos0 + rows) * nh * dk]);
            let ka = put(&mut b, rows, n_kv * dk, &k[pos0 * n_kv * dk..(pos0 + rows) * n_kv * dk]);
            let va = put(&mut b, rows, n_kv * dv, &v[pos0 * n_kv * dv..(pos0 + rows) * n_kv * dv]);
            let out = b.alloc(rows, nh * dv).unwrap();
            b.attention(kv, qa, ka, va, out, pos0, &p);
            got.extend(get(&mut b, out));
        }
        let round = |x: f32| if f16 { half::f16::from_f32(x).to_f32() } else { x };
        let mut want = Vec::new();
        let mut tol = Vec::new();
        for i in 0..n {
            for h in 0..nh {
                let g = h / group;
                let visible: Vec<usize> = (0..=i).filter(|&j| window == 0 || i - j < window).collect();
                let s: Vec<f64> = visible.iter().map(|&j| {
                    // With an F16 cache the query is rounded too (llama.cpp's CPU
                    // converts it to F16 for the product).
                    let dot: f64 = (0..dk).map(|c| f64::from(round(q[(i * nh + h) * dk + c]))
                        * f64::from(round(k[(j * n_kv + g) * dk + c]))).sum();
                    let s = dot * f64::from(p.scale);
                    if capped { 1.5 * (s / 1.5).tanh() } else { s }
                }).collect();
                let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = s.iter().map(|s| (s - m).exp()).collect();
                let z: f64 = e.iter().sum();
                for c in 0..dv {
                    // The probabilities are rounded to f16 as well; where the
                    // f32 the engine rounds from (ggml's vector exp, within
                    // an ulp or two) and this one straddle a rounding
                    // boundary, the two differ by one f16 ulp: up to 2^-10
                    // of that term (2^-11 failed the case that
                    // cpu_ops.proptest-regressions keeps).
                    let terms = visible.iter().zip(&e).map(|(&j, e)| {
                        let pr = (e / z) as f32;
                        (f64::from(round(pr)), f64::from(round(v[(j * n_kv + g) * dv + c])))
                    });
                    let (sum, mag) = terms.fold((0.0, 0.0), |(s, a), (pr, vv)| (s + pr * vv, a + (pr * vv).abs()));
                    want.push(sum);
                    tol.push(1e-5 + if f16 { mag / 1024.0 } else { 0.0 });
                }
            }
        }
        close("attention", &got, &want, |i| tol[i])?;
    }
}

#[test]
fn rope_known_values() {
    // head_dim 4, position 1, base 10000: theta_0 = 1, theta_1 = 10000^(-1/2) = 0.01.
    let mut b = CpuBackend::new(1);
    let x = [1.0, 0.0, 1.0, 0.0];
    let (c1, s1, c2, s2) = (1f32.cos(), 1f32.sin(), 0.01f32.cos(), 0.01f32.sin());
    let p = |style| RopeParams {
        style,
        head_dim: 4,
        n_rot: 4,
        base: 10_000.0,
        freq_scale: 1.0,
    };
    // NORM rotates adjacent pairs (x0, x1) by theta_0 and (x2, x3) by theta_1.
    let a = put(&mut b, 1, 4, &x);
    b.rope(a, &p(RopeStyle::Norm), 1);
    assert_eq!(get(&mut b, a), [c1, s1, c2, s2]);
    // NEOX rotates (x0, x2) by theta_0 and (x1, x3) by theta_1.
    let a = put(&mut b, 1, 4, &x);
    b.rope(a, &p(RopeStyle::Neox), 1);
    assert_eq!(get(&mut b, a), [c1 - s1, 0.0, s1 + c1, 0.0]);
    // Position 0 is the identity for both.
    for style in [RopeStyle::Norm, RopeStyle::Neox] {
        let a = put(&mut b, 1, 4, &[0.3, -0.2, 0.7, 0.1]);
        b.rope(a, &p(style), 0);
        assert_eq!(get(&mut b, a), [0.3, -0.2, 0.7, 0.1]);
    }
    // Partial rotation leaves the tail of each head alone.
    let a = put(&mut b, 1, 8, &[1.0, 0.0, 5.0, 6.0, 1.0, 0.0, 7.0, 8.0]);
    let q = RopeParams {
        n_rot: 2,
        head_dim: 4,
        ..p(RopeStyle::Norm)
    };
    b.rope(a, &q, 1);
    assert_eq!(get(&mut b, a), [c1, s1, 5.0, 6.0, c1, s1, 7.0, 8.0]);
}

/// A single-head attention of `n` rows, all at once, with a hook to change
/// K/V before running; returns the output rows.
fn attend(n: usize, window: Option<usize>, tweak: impl Fn(&mut [f32], &mut [f32])) -> Vec<f32> {
    let d = 4;
    let mut r = Rng::new(7);
    let q = r.vec(n * d);
    let mut k = r.vec(n * d);
    let mut v = r.vec(n * d);
    tweak(&mut k, &mut v);
    let mut b = CpuBackend::new(1);
    let kv = b.alloc_kv(n, d, d, KvType::F32).unwrap();
    let (qa, ka, va) = (
        put(&mut b, n, d, &q),
        put(&mut b, n, d, &k),
        put(&mut b, n, d, &v),
    );
    let out = b.alloc(n, d).unwrap();
    let p = AttnParams {
        n_head: 1,
        n_kv_head: 1,
        head_dim_k: d,
        head_dim_v: d,
        scale: 0.5,
        window,
        softcap: None,
    };
    b.attention(kv, qa, ka, va, out, 0, &p);
    get(&mut b, out)
}

#[test]
fn attention_is_causal() {
    let n = 6;
    let base = attend(n, None, |_, _| {});
    // Changing the last position's K and V changes only the last row.
    let changed = attend(n, None, |k, v| {
        k[(n - 1) * 4] += 3.0;
        v[(n - 1) * 4 + 1] -= 2.0;
    });
    assert_eq!(base[..(n - 1) * 4], changed[..(n - 1) * 4]);
    assert_ne!(base[(n - 1) * 4..], changed[(n - 1) * 4..]);
    // The first row sees only itself: its output is its own V.
    let mut r = Rng::new(7);
    let _q = r.vec(n * 4);
    let _k = r.vec(n * 4);
    let v = r.vec(n * 4);
    assert_eq!(base[..4], v[..4]);
}

#[test]
fn attention_sliding_window_masks_old_positions() {
    let n = 8;
    let w = 3;
    let base = attend(n, Some(w), |_, _| {});
    // Position 0 is outside the window of rows 3.. (3 - 0 >= 3): changing it
    // changes rows 0..3 only.
    let changed = attend(n, Some(w), |k, v| {
        k[0] += 1.0;
        v[0] += 1.0;
    });
    for row in 0..n {
        let same = base[row * 4..row * 4 + 4] == changed[row * 4..row * 4 + 4];
        assert_eq!(same, row >= w, "row {row}");
    }
    // A window of 1 sees only the current position.
    let mut r = Rng::new(7);
    let _q = r.vec(n * 4);
    let _k = r.vec(n * 4);
    let v = r.vec(n * 4);
    assert_eq!(attend(n, Some(1), |_, _| {}), v);
    // A window as long as the sequence is no window.
    assert_eq!(attend(n, Some(n), |_, _| {}), attend(n, None, |_, _| {}));
}

#[test]
fn embed_dequantizes_rows() {
    let (d, vocab) = (64, 10);
    let mut r = Rng::new(3);
    let table = r.vec(d * vocab);
    let mut bytes = vec![0u8; GgmlType::Q8_0.bytes_for((d * vocab) as u64).unwrap() as usize];
    quantize_row(GgmlType::Q8_0, &table, &mut bytes).unwrap();
    let mut deq = vec![0.0; d * vocab];
    dequantize_row(GgmlType::Q8_0, &bytes, &mut deq).unwrap();
    let mut b = CpuBackend::new(2);
    let w = b
        .upload(&WeightSource::from_bytes(
            "t",
            GgmlType::Q8_0,
            d,
            vocab,
            bytes,
        ))
        .unwrap();
    let out = b.alloc(3, d).unwrap();
    b.embed(w, &[9, 0, 4], out);
    let got = get(&mut b, out);
    assert_eq!(got[..d], deq[9 * d..10 * d]);
    assert_eq!(got[d..2 * d], deq[..d]);
    assert_eq!(got[2 * d..], deq[4 * d..5 * d]);
}

#[test]
fn unsupported_weight_type_is_an_error() {
    let mut b = CpuBackend::new(1);
    let src = WeightSource::from_bytes("blk.0.x", GgmlType::IQ4_NL, 32, 1, vec![0; 18]);
    let e = b.upload(&src).unwrap_err().to_string();
    assert!(e.contains("blk.0.x") && e.contains("IQ4_NL"), "{e}");
}

#[test]
fn results_do_not_depend_on_thread_count() {
    let (n_tok, n_in, n_out, nh, d) = (7, 512, 96, 8, 32);
    let mut r = Rng::new(11);
    let wf = r.vec(n_in * n_out);
    let x = r.vec(n_tok * n_in);
    let qkv = r.vec(n_tok * nh * d * 3);
    let run = |threads| {
        let mut b = CpuBackend::new(threads);
        let mut bytes =
            vec![0u8; GgmlType::Q4_K.bytes_for((n_in * n_out) as u64).unwrap() as usize];
        quantize_row(GgmlType::Q4_K, &wf, &mut bytes).unwrap();
        let w = b
            .upload(&WeightSource::from_bytes(
                "w",
                GgmlType::Q4_K,
                n_in,
                n_out,
                bytes,
            ))
            .unwrap();
        let xa = put(&mut b, n_tok, n_in, &x);
        let out = b.alloc(n_tok, n_out).unwrap();
        b.matmul(w, xa, out);
        b.rms_norm(xa, None, 1e-5, n_in, xa);
        let kv = b.alloc_kv(n_tok, nh * d, nh * d, KvType::F32).unwrap();
        let w3 = nh * d;
        let q = put(&mut b, n_tok, w3, &qkv[..n_tok * w3]);
        let k = put(&mut b, n_tok, w3, &qkv[n_tok * w3..2 * n_tok * w3]);
        let v = put(&mut b, n_tok, w3, &qkv[2 * n_tok * w3..]);
        let rope = RopeParams {
            style: RopeStyle::Neox,
            head_dim: d,
            n_rot: d,
            base: 1e6,
            freq_scale: 1.0,
        };
        b.rope(q, &rope, 3);
        let att = b.alloc(n_tok, w3).unwrap();
        let p = AttnParams {
            n_head: nh,
            n_kv_head: nh,
            head_dim_k: d,
            head_dim_v: d,
            scale: 0.1,
            window: None,
            softcap: None,
        };
        b.attention(kv, q, k, v, att, 0, &p);
        [get(&mut b, out), get(&mut b, xa), get(&mut b, att)]
    };
    let one = run(1);
    let two = run(2);
    let three = run(3);
    assert!(one == two && two == three);
}

#[test]
fn a_kv_cache_past_the_hosts_memory_is_an_error() {
    let mut b = CpuBackend::new(1);
    // 2^40 positions of 64 + 64 floats: 2^49 bytes, past any host here.
    let e = b
        .alloc_kv(1 << 40, 64, 64, KvType::F32)
        .unwrap_err()
        .to_string();
    assert!(!e.contains('\n'), "{e}");
    assert!(
        e.contains(&format!("cannot allocate {} bytes", 1u64 << 49)),
        "{e}"
    );
    assert!(e.contains("KV cache"), "{e}");
    // Sizes past usize are refused too, not wrapped.
    assert!(b.alloc_kv(usize::MAX, 2, 2, KvType::F16).is_err());
    // A small one is fine.
    assert!(b.alloc_kv(16, 64, 64, KvType::F16).is_ok());
}
