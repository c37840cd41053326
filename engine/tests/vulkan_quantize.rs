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
