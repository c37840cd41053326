//! The block formats against an independent implementation: gguf-py's numpy
//! (de)quantizers, through the vectors scripts/gen-quant-vectors wrote under
//! reference-data/quant/.
//!
//! Dequantization must agree bit for bit (f32 bits, so -0.0 and 0.0 differ)
//! for all fourteen types the vectors cover; gguf-py computes the same f32
//! operations in the same order, so there is no tolerance anywhere. The
//! legacy quantizers must produce the same bytes as gguf-py's quantizers
//! (which, like ours, follow ggml's reference quantizers).

use std::path::PathBuf;

use engine::quant::{dequantize_row, quantize_row};
use engine::GgmlType;
use serde_json::Value;

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../reference-data/quant")
}

fn manifest() -> Value {
    let path = data_dir().join("manifest.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/gen-quant-vectors)", path.display()));
    serde_json::from_str(&text).expect("manifest.json parses")
}

fn read(name: &str) -> Vec<u8> {
    let path = data_dir().join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    assert_eq!(bytes.len() % 4, 0);
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// The manifest entry for `ty` in `section`, with its element and block counts
/// checked against the type's geometry.
fn entry(section: &str, ty: GgmlType) -> (Value, usize) {
    let m = manifest();
    let e = m[section][ty.name()].clone();
    assert!(e.is_object(), "manifest has no {section} entry for {ty}");
    let elems = e["elements"].as_u64().expect("elements") as usize;
    let blocks = e["blocks"].as_u64().expect("blocks") as usize;
    assert_eq!(elems, blocks * ty.block_elems());
    assert!(blocks > 0);
    (e, elems)
}

fn check_dequantize(ty: GgmlType) {
    let (e, n) = entry("dequantize", ty);
    let blocks = read(e["blocks_file"].as_str().unwrap());
    let expected = floats(&read(e["expected_file"].as_str().unwrap()));
    assert_eq!(blocks.len() as u64, ty.bytes_for(n as u64).unwrap());
    assert_eq!(expected.len(), n);

    let mut got = vec![0f32; n];
    dequantize_row(ty, &blocks, &mut got).unwrap();
    let bad: Vec<usize> = (0..n)
        .filter(|&i| got[i].to_bits() != expected[i].to_bits())
        .collect();
    if let Some(&i) = bad.first() {
        panic!(
            "{ty}: {} of {n} elements differ from gguf-py; first at {i} (block {}): got {:e} ({:#010x}), want {:e} ({:#010x})",
            bad.len(),
            i / ty.block_elems(),
            got[i],
            got[i].to_bits(),
            expected[i],
            expected[i].to_bits(),
        );
    }
}

fn check_quantize(ty: GgmlType) {
    let (e, n) = entry("quantize", ty);
    let input = floats(&read(e["input_file"].as_str().unwrap()));
    let expected = read(e["expected_file"].as_str().unwrap());
    assert_eq!(input.len(), n);
    assert_eq!(expected.len() as u64, ty.bytes_for(n as u64).unwrap());

    let mut got = vec![0u8; expected.len()];
    quantize_row(ty, &input, &mut got).unwrap();
    let bb = ty.block_bytes();
    let bad: Vec<usize> = (0..n / ty.block_elems())
        .filter(|&b| got[b * bb..(b + 1) * bb] != expected[b * bb..(b + 1) * bb])
        .collect();
    if let Some(&b) = bad.first() {
        panic!(
            "{ty}: {} blocks differ from gguf-py's quantizer; first is block {b}\n got  {:?}\n want {:?}",
            bad.len(),
            &got[b * bb..(b + 1) * bb],
            &expected[b * bb..(b + 1) * bb],
        );
    }
}

macro_rules! dequantize_tests {
    ($($name:ident: $ty:ident,)*) => {$(
        #[test]
        fn $name() {
            check_dequantize(GgmlType::$ty);
        }
    )*};
}

dequantize_tests! {
    dequantize_f16_matches_gguf_py: F16,
    dequantize_bf16_matches_gguf_py: BF16,
    dequantize_q4_0_matches_gguf_py: Q4_0,
    dequantize_q4_1_matches_gguf_py: Q4_1,
    dequantize_q5_0_matches_gguf_py: Q5_0,
    dequantize_q5_1_matches_gguf_py: Q5_1,
    dequantize_q8_0_matches_gguf_py: Q8_0,
    dequantize_q2_k_matches_gguf_py: Q2_K,
    dequantize_q3_k_matches_gguf_py: Q3_K,
    dequantize_q4_k_matches_gguf_py: Q4_K,
    dequantize_q5_k_matches_gguf_py: Q5_K,
    dequantize_q6_k_matches_gguf_py: Q6_K,
}

macro_rules! quantize_tests {
    ($($name:ident: $ty:ident,)*) => {$(
        #[test]
        fn $name() {
            check_quantize(GgmlType::$ty);
        }
    )*};
}

quantize_tests! {
    quantize_q4_0_matches_gguf_py: Q4_0,
    quantize_q4_1_matches_gguf_py: Q4_1,
    quantize_q5_0_matches_gguf_py: Q5_0,
    quantize_q5_1_matches_gguf_py: Q5_1,
    quantize_q8_0_matches_gguf_py: Q8_0,
}

/// The vectors cover exactly the types the tests above name, so a type cannot
/// drop out of the data without a test noticing.
#[test]
fn manifest_covers_every_type() {
    let m = manifest();
    let mut deq: Vec<&str> = m["dequantize"]
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    deq.sort_unstable();
    let mut want = vec![
        "BF16", "F16", "Q2_K", "Q3_K", "Q4_0", "Q4_1", "Q4_K", "Q5_0", "Q5_1", "Q5_K", "Q6_K",
        "Q8_0",
    ];
    want.sort_unstable();
    assert_eq!(deq, want);
    let mut q: Vec<&str> = m["quantize"]
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    q.sort_unstable();
    assert_eq!(q, ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"]);
}

/// The dequantize vectors are not degenerate: every type's expected output
/// has both signs, nonzero values and values of very different magnitudes, so
/// a matching run exercised more than zeros.
#[test]
fn vectors_are_varied() {
    for name in [
        "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
        "Q6_K",
    ] {
        let v = floats(&read(&format!("{name}.f32")));
        let finite: Vec<f32> = v
            .iter()
            .copied()
            .filter(|x| x.is_finite() && *x != 0.0)
            .collect();
        assert!(
            finite.len() > v.len() / 2,
            "{name}: mostly zero or non-finite"
        );
        assert!(
            finite.iter().any(|x| *x > 0.0) && finite.iter().any(|x| *x < 0.0),
            "{name}: one sign"
        );
        let amax = finite.iter().fold(0f32, |m, x| m.max(x.abs()));
        let amin = finite.iter().fold(f32::INFINITY, |m, x| m.min(x.abs()));
        assert!(
            amax / amin > 1e6,
            "{name}: magnitudes span only {amin:e}..{amax:e}"
        );
    }
}
