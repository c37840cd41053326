//! The device activation quantizer (`shaders/quantize_act.comp`) against
//! the CPU's (`engine::cpu::act::quantize_act`, ggml's x86 quantizer), bit
//! for bit, for the three dot formats: random rows, rows of zeros, large
//! (to 3e38) and tiny (to subnormal) magnitudes, blocks with one outlier,
//! exact rounding ties, the first of two equal largest magnitudes of
//! opposite sign (Q8_K's scale sign), NaN and ±inf.

use crate::vulkan_support;

use engine::cpu::act::quantize_act;
use engine::ops::Ops;
use engine::GgmlType;
use vulkan_support::{values, Pair};

const FORMATS: [GgmlType; 3] = [GgmlType::Q8_0, GgmlType::Q8_1, GgmlType::Q8_K];

/// Rows of 512 (two Q8_K blocks, sixteen Q8_0 blocks) of each kind.
fn rows() -> Vec<(String, Vec<f32>)> {
    let n = 512;
    let mut out = Vec::new();
    let scaled =
        |seed: u64, s: f32| -> Vec<f32> { values(seed, n).iter().map(|v| v * s).collect() };
    out.push(("uniform [-1, 1]".to_string(), values(1, n)));
    out.push(("zeros".to_string(), vec![0.0; n]));
    out.push(("negative zeros".to_string(), vec![-0.0; n]));
    for (i, s) in [3e38f32, 1e30, 1e10, 1e-10, 1e-30, 1e-36, 1e-37, 1e-38]
        .into_iter()
        .enumerate()
    {
        out.push((format!("x {s:e}"), scaled(10 + i as u64, s)));
    }
    // Subnormals only, and subnormals beside a barely normal maximum.
    out.push((
        "subnormal".to_string(),
        values(30, n).iter().map(|v| v * 1e-39).collect(),
    ));
    let mut mixed: Vec<f32> = values(31, n).iter().map(|v| v * 1e-39).collect();
    for i in (0..n).step_by(40) {
        mixed[i] = 1.2e-38;
    }
    out.push(("subnormals and 1.2e-38".to_string(), mixed));
    // Log-uniform magnitudes from 1e-38 to 1e38, random signs.
    let lv: Vec<f32> = values(32, n)
        .iter()
        .zip(values(33, n))
        .map(|(a, b)| 10f32.powf(38.0 * a) * b.signum())
        .collect();
    out.push(("log-uniform 1e-38..1e38".to_string(), lv));
    // One outlier per block of 32.
    let mut outl = values(34, n);
    for i in (5..n).step_by(32) {
        outl[i] = 1000.0;
    }
    out.push(("outliers".to_string(), outl));
    // Ties: amax 127 (d = 1, id = 1), halves between integers.
    let ties: Vec<f32> = (0..n)
        .map(|i| match i % 32 {
            0 => 127.0,
            k => (k as f32 - 16.0) + 0.5,
        })
        .collect();
    out.push(("ties at d = 1".to_string(), ties));
    // Ties through the scale: amax 63.5 (id = 2): x = k / 2 + 1 / 4.
    let ties2: Vec<f32> = (0..n)
        .map(|i| match i % 32 {
            0 => -63.5,
            k => (k as f32 - 16.0) * 0.5 + 0.25,
        })
        .collect();
    out.push(("ties at d = 1/2".to_string(), ties2));
    // Two equal magnitudes of opposite sign: Q8_K takes the first.
    let mut pm = values(35, n);
    for b in 0..n / 256 {
        pm[256 * b + 7] = -3.0;
        pm[256 * b + 200] = 3.0;
    }
    pm[256 + 7] = 3.0;
    pm[256 + 200] = -3.0;
    out.push(("+-max".to_string(), pm));
    // NaN and infinities in some blocks (last of a block and not).
    let mut sp = values(36, n);
    sp[3] = f32::NAN;
    sp[31] = f32::NAN;
    sp[40] = f32::INFINITY;
    sp[70] = f32::NEG_INFINITY;
    sp[100] = f32::INFINITY;
    sp[101] = f32::NAN;
    sp[300] = f32::NAN;
    sp[511] = -f32::NAN;
    out.push(("NaN and inf".to_string(), sp));
    // Block maxima over the significands (the scales' integer division by
    // 127 and their quotient 127 / amax change form at 127 2^17 = 0xfe0000)
    // and over exponents whose quotients are subnormal or overflow: block
    // b's first element is the maximum, the rest a fraction of it.
    let sig = [
        0x800000u32,
        0x800001,
        0xfdffff,
        0xfe0000,
        0xfe0001,
        0xfeffff,
        0xffffff,
        0xc00000,
    ];
    let exps = [1u32, 2, 5, 6, 7, 8, 9, 100, 127, 133, 134, 250, 253, 254];
    let mut maxima: Vec<f32> = Vec::new();
    for &e in &exps {
        for &m in &sig {
            maxima.push(f32::from_bits((e << 23) | (m & 0x7f_ffff)));
        }
    }
    let random = values(37, 256);
    for (i, v) in random.iter().enumerate() {
        let m = 0x80_0000 | (v.abs() * 8388607.0) as u32;
        let e = exps[i % exps.len()];
        maxima.push(f32::from_bits((e << 23) | (m & 0x7f_ffff)));
    }
    let filler = values(38, 32 * maxima.len());
    let sweep: Vec<f32> = (0..32 * maxima.len())
        .map(|i| match i % 32 {
            0 => maxima[i / 32],
            _ => maxima[i / 32] * filler[i] * 0.999,
        })
        .collect();
    out.push(("block maxima over significands".to_string(), sweep));
    out.push((
        "scales at rounding boundaries".to_string(),
        boundary_blocks(),
    ));
    out
}

/// The quantized bytes move with a one-ulp change of a block's scales only
/// near rounding boundaries; these 512 blocks sit there. Each block's
/// maximum A (its first element) is 127 times an f16 halfway point, moved
/// by -1, 0 or 1 ulp, so that d = A / 127 lies within an ulp of an f16
/// rounding boundary (d is stored as f16), and its other elements x are
/// chosen so that x * (127 / A) rounds (to f32, then to an integer)
/// differently with 127 / A one ulp up or down. A device whose d or id is
/// off by one ulp for some blocks writes other bytes.
fn boundary_blocks() -> Vec<f32> {
    let quant = |x: f32, id: f32| (x * id).round_ties_even() as i32;
    let mut out = Vec::new();
    let halves = values(40, 512);
    for (b, h) in halves.iter().enumerate() {
        // An f16 halfway point (a 12-bit odd significand) times 127.
        let m = 0x800 | ((h.abs() * 2047.0) as u32 & 0x7ff) | 1;
        let e = [-20i32, -3, 0, 4, 9][b % 5];
        let half_point = m as f32 * 2f32.powi(e - 11);
        let a = f32::from_bits(((half_point * 127.0).to_bits() as i32 + (b % 3) as i32 - 1) as u32);
        let id = 127.0 / a;
        let (up, down) = (
            f32::from_bits(id.to_bits() + 1),
            f32::from_bits(id.to_bits() - 1),
        );
        let mut block = vec![a];
        let mut k = 1i32;
        while block.len() < 32 && k < 127 {
            let x0 = (k as f32 + 0.5) / id;
            for step in -64i32..=64 {
                let x = f32::from_bits((x0.to_bits() as i32 + step) as u32);
                let q = quant(x, id);
                if x < a && (q != quant(x, up) || q != quant(x, down)) {
                    block.push(if block.len() % 2 == 0 { x } else { -x });
                    break;
                }
            }
            k += 4;
        }
        block.resize(32, 0.25 * a);
        out.extend(block);
    }
    out
}

#[test]
fn device_quantizer_matches_the_cpu_bit_for_bit() {
    let mut p = Pair::new();
    let all = rows();
    let mut failures = Vec::new();
    for fmt in FORMATS {
        for (what, x) in &all {
            let n = x.len();
            // Two rows from row 1 of a bigger buffer: offsets are exercised.
            let data = [vec![0.5; n], x.clone(), x.iter().rev().copied().collect()].concat();
            let a = p.gpu.alloc(3, n).unwrap();
            p.gpu.write(a, &data).unwrap();
            let got = p.gpu.quantize_act(a.rows_from(1, 2), fmt).unwrap();
            let mut want = vec![0u8; fmt.bytes_for(2 * n as u64).unwrap() as usize];
            quantize_act(fmt, &data[n..], &mut want).unwrap();
            assert_eq!(got.len(), want.len(), "{} {what}: length", fmt.name());
            let bb = fmt.block_bytes();
            let bad: Vec<usize> = (0..want.len() / bb)
                .filter(|&k| got[k * bb..(k + 1) * bb] != want[k * bb..(k + 1) * bb])
                .collect();
            if !bad.is_empty() {
                let k = bad[0];
                failures.push(format!(
                    "{} {what}: {} of {} blocks differ; block {k}: device {:02x?}, CPU {:02x?}",
                    fmt.name(),
                    bad.len(),
                    want.len() / bb,
                    &got[k * bb..(k * bb + 12).min((k + 1) * bb)],
                    &want[k * bb..(k * bb + 12).min((k + 1) * bb)],
                ));
            }
        }
    }
    for f in &failures {
        eprintln!("{f}");
    }
    assert!(
        failures.is_empty(),
        "{} cases differ (above)",
        failures.len()
    );
    p.finish("quantize");
}

#[test]
fn device_quantizer_matches_the_cpu_on_random_rows() {
    // 200 rows of 1024 at random scales (1e-30..1e30), one quantization each.
    let mut p = Pair::new();
    let n = 1024;
    for fmt in FORMATS {
        for r in 0..40u64 {
            let s = 10f32.powf(30.0 * values(1000 + r, 1)[0]);
            let x: Vec<f32> = values(2000 + r, 5 * n).iter().map(|v| v * s).collect();
            let a = p.gpu.alloc(5, n).unwrap();
            p.gpu.write(a, &x).unwrap();
            let got = p.gpu.quantize_act(a, fmt).unwrap();
            let mut want = vec![0u8; fmt.bytes_for(x.len() as u64).unwrap() as usize];
            quantize_act(fmt, &x, &mut want).unwrap();
            assert!(got == want, "{} scale {s:e}: the bytes differ", fmt.name());
        }
    }
    p.finish("quantize random");
}

/// Timing of the quantizer and the products on this device (a development
/// tool: `cargo test --release --test vulkan quantize_timing -- --ignored
/// --nocapture`): each product 3 times in one submission (the activations
/// quantized once), decode (1 row) and prefill (64 rows).
#[test]
#[ignore]
fn quantize_timing() {
    use engine::ops::WeightSource;
    use std::time::Instant;
    let mut p = Pair::new();
    let n = 576;
    let x = values(1, n);
    let a = p.gpu.alloc(1, n).unwrap();
    p.gpu.write(a, &x).unwrap();
    let t = Instant::now();
    for _ in 0..20 {
        p.gpu.quantize_act(a, GgmlType::Q8_1).unwrap();
    }
    eprintln!(
        "quantize 576 Q8_1 (and read back): {:?} each",
        t.elapsed() / 20
    );
    let tokens = 64;
    for (ty, n, n_out) in [
        (GgmlType::Q4_1, 576, 1536),
        (GgmlType::Q8_0, 576, 49152),
        (GgmlType::Q4_K, 1536, 576),
        (GgmlType::Q6_K, 1536, 576),
    ] {
        let a = p.gpu.alloc(1, n).unwrap();
        p.gpu.write(a, &values(1, n)).unwrap();
        let a64 = p.gpu.alloc(tokens, n).unwrap();
        p.gpu.write(a64, &values(2, n * tokens)).unwrap();
        let (src, _): (WeightSource, _) = vulkan_support::weights::weight(ty, n, n_out, 3);
        let (_, wg) = p.weight(&src);
        for (x, rows) in [(a, 1), (a64, tokens)] {
            let o = p.gpu.alloc(rows, n_out).unwrap();
            let mut out = vec![0.0; rows * n_out];
            p.gpu.matmul(wg, x, o);
            p.gpu.read(o, &mut out).unwrap();
            let t = Instant::now();
            for _ in 0..3 {
                p.gpu.matmul(wg, x, o);
            }
            p.gpu.read(o, &mut out).unwrap();
            eprintln!(
                "matmul {} {n} x {n_out}, {rows} rows: {:?} each",
                ty.name(),
                t.elapsed() / 3
            );
        }
    }
}

#[test]
fn a_norm_fused_with_its_residual_add_and_the_next_quantization_writes_the_same_bits() {
    // x += y, rms_norm(x, w) -> out, then the Q8_0 / Q8_1 quantization of
    // out (or the Q8_K one, which stays a dispatch of its own): as the
    // model records a residual add and the next layer's norm. Fused into
    // one dispatch where the norm is not in place (out apart from x and y)
    // and, for the quantization, its groups are whole blocks; the sum, the
    // normed values and the quantized blocks are the CPU's bits.
    use engine::ops::WeightSource;
    let mut p = Pair::new();
    for fmt in FORMATS {
        for (case, (rows, width, group)) in [(1, 576, 576), (3, 512, 256), (2, 96, 48)]
            .into_iter()
            .enumerate()
        {
            if fmt == GgmlType::Q8_K && width % 256 != 0 {
                continue; // Q8_K quantizes whole rows of 256-element blocks
            }
            for in_place in [false, true] {
                let seed = 80 + case as u64;
                let n = rows * width;
                let x = values(seed, n);
                let y: Vec<f32> = values(seed + 7, n).iter().map(|v| v * 3.0).collect();
                let w = values(seed + 100, group);
                let src = WeightSource::from_f32("norm.weight", group, 1, &w);
                let (wc, wg) = p.weight(&src);
                let a = p.act(rows, width, &x);
                let b = p.act(rows, width, &y);
                let out = if in_place { a } else { p.zeros(rows, width) };
                p.cpu.add(a.cpu, b.cpu);
                p.cpu.rms_norm(a.cpu, Some(wc), 1e-6, group, out.cpu);
                let before = p.gpu.stats().dispatches;
                p.gpu.add(a.gpu, b.gpu);
                p.gpu.rms_norm(a.gpu, Some(wg), 1e-6, group, out.gpu);
                let got = p.gpu.quantize_act(out.gpu, fmt).unwrap();
                let dispatches = p.gpu.stats().dispatches - before;
                let what = format!(
                    "{} {rows}x{width} groups of {group} in place {in_place}",
                    fmt.name()
                );
                let add_fused = !in_place;
                let quant_fused = !in_place && group % 32 == 0 && fmt != GgmlType::Q8_K;
                let want_dispatches = 3 - usize::from(add_fused) - usize::from(quant_fused);
                assert_eq!(dispatches, want_dispatches, "{what}: dispatches");
                for (name, v) in [("sum", a), ("normed", out)] {
                    let (c, g) = p.read(v);
                    let same = c.iter().zip(&g).all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{what}: the {name} values differ");
                }
                let (c, _) = p.read(out);
                let mut want = vec![0u8; fmt.bytes_for(c.len() as u64).unwrap() as usize];
                quantize_act(fmt, &c, &mut want).unwrap();
                assert!(got == want, "{what}: the quantized bytes differ");
            }
        }
    }
    p.finish("fused add and norm");
}

#[test]
fn a_norm_fused_with_the_next_quantization_writes_the_quantizer_bits() {
    // rms_norm with its weight, then the Q8_0 / Q8_1 quantization of its
    // output (what the next product asks for): one dispatch (the fused
    // variant), the norm's output and the quantized blocks those of the
    // CPU's norm and quantizer. An in-place norm (out = x), groups that are
    // not whole blocks and groups over 3072 run unfused, with the same bits.
    use engine::ops::WeightSource;
    let mut p = Pair::new();
    let mut fused_runs = 0;
    for fmt in [GgmlType::Q8_0, GgmlType::Q8_1] {
        for (case, (rows, width, group)) in [
            (1, 576, 576),
            (3, 640, 640),
            (2, 256, 64),
            (2, 96, 48),
            (1, 3072, 3072),
            (1, 4096, 4096),
        ]
        .into_iter()
        .enumerate()
        {
            for in_place in [false, true] {
                let seed = 50 + case as u64;
                let scale = [1.0f32, 3e4, 1e-3, 7.0, 1.0, 1.0][case];
                let x: Vec<f32> = values(seed, rows * width)
                    .iter()
                    .map(|v| v * scale)
                    .collect();
                let w = values(seed + 100, group);
                let src = WeightSource::from_f32("norm.weight", group, 1, &w);
                let (wc, wg) = p.weight(&src);
                let a = p.act(rows, width, &x);
                let out = if in_place { a } else { p.zeros(rows, width) };
                p.cpu.rms_norm(a.cpu, Some(wc), 1e-5, group, out.cpu);
                let before = p.gpu.stats().dispatches;
                p.gpu.rms_norm(a.gpu, Some(wg), 1e-5, group, out.gpu);
                let got = p.gpu.quantize_act(out.gpu, fmt).unwrap();
                let dispatches = p.gpu.stats().dispatches - before;
                // Groups of up to 3072 (the shared memory the fused kernel
                // keeps a group in).
                let fusable = !in_place && group % 32 == 0 && group <= 3072;
                let what = format!(
                    "{} {rows}x{width} groups of {group} in place {in_place}",
                    fmt.name()
                );
                assert_eq!(
                    dispatches,
                    if fusable { 1 } else { 2 },
                    "{what}: dispatches"
                );
                fused_runs += usize::from(fusable);
                let (c, g) = p.read(out);
                let same = c.iter().zip(&g).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{what}: the normed values differ");
                let mut want = vec![0u8; fmt.bytes_for(c.len() as u64).unwrap() as usize];
                quantize_act(fmt, &c, &mut want).unwrap();
                assert!(got == want, "{what}: the quantized bytes differ");
            }
        }
    }
    assert_eq!(fused_runs, 8);
    p.finish("fused norm");
}

#[test]
fn a_gated_unit_fused_with_the_next_quantization_writes_the_quantizer_bits() {
    // SwiGLU / GeGLU, then the Q8_0 / Q8_1 quantization of its result (the
    // down projection's input): one dispatch (glu_quant.comp). Its results
    // are the unfused kernel's bits, and its blocks are the CPU quantizer's
    // of those results.
    use engine::ops::GluKind;
    let mut p = Pair::new();
    for fmt in [GgmlType::Q8_0, GgmlType::Q8_1] {
        for kind in [GluKind::SwiGlu, GluKind::GeGluTanh] {
            for (case, (rows, width)) in [(1, 1536), (3, 64), (2, 96)].into_iter().enumerate() {
                let n = rows * width;
                let seed = 300 + case as u64;
                let g: Vec<f32> = values(seed, n).iter().map(|v| v * 12.0).collect();
                let u = values(seed + 1, n);
                let what = format!("{} {kind:?} {rows}x{width}", fmt.name());
                // Unfused: the gated unit read back before any quantization.
                let (g1, u1) = (p.act(rows, width, &g), p.act(rows, width, &u));
                p.gpu.glu(kind, g1.gpu, u1.gpu);
                let (_, alone) = p.read(g1);
                let (g2, u2) = (p.act(rows, width, &g), p.act(rows, width, &u));
                let before = p.gpu.stats().dispatches;
                p.gpu.glu(kind, g2.gpu, u2.gpu);
                let got = p.gpu.quantize_act(g2.gpu, fmt).unwrap();
                assert_eq!(p.gpu.stats().dispatches - before, 1, "{what}: dispatches");
                let (_, fused) = p.read(g2);
                let same = alone
                    .iter()
                    .zip(&fused)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{what}: the results differ from the unfused kernel's");
                let mut want = vec![0u8; fmt.bytes_for(n as u64).unwrap() as usize];
                quantize_act(fmt, &fused, &mut want).unwrap();
                assert!(got == want, "{what}: the quantized bytes differ");
            }
        }
    }
    p.finish("fused glu");
}
