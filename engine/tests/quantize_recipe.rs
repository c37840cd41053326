//! The quantization recipe against the real models: Gemma's file is
//! llama.cpp's own Q4_K_M output, so the recipe applied to its tensors must
//! give back its types; SmolLM2's Q4_K_M table is spelled out by hand from
//! llama.cpp's rules; requantizing Gemma to Q4_K_M copies every tensor and
//! reproduces the file byte for byte.

use crate::gguf_support;

use std::collections::BTreeMap;

use engine::gguf::GgufFile;
use engine::quantize::{self, plan_for, FileType};
use engine::GgmlType;
use gguf_support::*;

fn counts(types: impl Iterator<Item = GgmlType>) -> BTreeMap<GgmlType, usize> {
    let mut m = BTreeMap::new();
    for t in types {
        *m.entry(t).or_insert(0) += 1;
    }
    m
}

#[test]
fn q4_k_m_recipe_reproduces_gemmas_types() {
    let f = GgufFile::open(&model_path(GEMMA3)).unwrap();
    let plan = plan_for(&f, FileType::Q4_K_M).unwrap();
    let mismatches: Vec<String> = f
        .tensors()
        .iter()
        .zip(&plan)
        .filter(|(t, c)| t.ty != c.ty)
        .map(|(t, c)| format!("{}: file {} recipe {}", t.name, t.ty, c.ty))
        .collect();
    assert!(mismatches.is_empty(), "{mismatches:#?}");
    use GgmlType::*;
    let expected = BTreeMap::from([(F32, 109), (Q5_0, 81), (Q8_0, 10), (Q4_K, 27), (Q6_K, 9)]);
    assert_eq!(counts(plan.iter().map(|c| c.ty)), expected);
    // Rows of 640 fit neither Q4_K nor Q6_K: 72 Q4_K -> Q5_0 and 9 Q4_K ->
    // Q5_0 (attn_v), 9 Q6_K -> Q8_0 (attn_v on the use_more_bits layers).
    let fallbacks = counts(plan.iter().filter_map(|c| c.fallback));
    assert_eq!(fallbacks, BTreeMap::from([(Q4_K, 81), (Q6_K, 9)]));
}

/// The 14 use_more_bits layers of a 30-layer model.
const SMOL_MORE_BITS: [u32; 14] = [0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29];

/// SmolLM2 (d 576, ffn 1536, tied embeddings) under Q4_K_M, by llama.cpp's
/// rules: norms stay F32; the tied token embedding is the output, 576 is
/// not a multiple of 256, so Q8_0; attn_v gets Q6_K on the use_more_bits
/// layers (rows of 576: falls back to Q8_0) and Q4_K elsewhere (-> Q5_0);
/// ffn_down (rows of 1536) Q6_K on those layers and Q4_K elsewhere; the
/// other matrices Q4_K, which rows of 576 turn into Q5_0.
fn smol_expected(name: &str) -> GgmlType {
    use GgmlType::*;
    if name == "token_embd.weight" {
        return Q8_0;
    }
    if name.ends_with("norm.weight") {
        return F32;
    }
    let layer: u32 = name.split('.').nth(1).unwrap().parse().unwrap();
    let more = SMOL_MORE_BITS.contains(&layer);
    match name.split('.').nth(2).unwrap() {
        "attn_v" if more => Q8_0,
        "ffn_down" if more => Q6_K,
        "ffn_down" => Q4_K,
        "attn_v" | "attn_q" | "attn_k" | "attn_output" | "ffn_gate" | "ffn_up" => Q5_0,
        other => panic!("unexpected tensor {other}"),
    }
}

#[test]
fn q4_k_m_recipe_on_smollm2() {
    let f = GgufFile::open(&model_path(SMOLLM2)).unwrap();
    let plan = plan_for(&f, FileType::Q4_K_M).unwrap();
    for (t, c) in f.tensors().iter().zip(&plan) {
        assert_eq!(c.ty, smol_expected(&t.name), "{}", t.name);
    }
    use GgmlType::*;
    // The counts of llama.cpp's own Q4_K_M output for this file (seen with
    // llama_model_quantize, llama.cpp as vendored by llama-cpp-sys-2 0.1.161).
    let expected = BTreeMap::from([(F32, 61), (Q5_0, 166), (Q8_0, 15), (Q4_K, 16), (Q6_K, 14)]);
    assert_eq!(counts(plan.iter().map(|c| c.ty)), expected);
    assert_eq!(plan.iter().filter(|c| c.fallback.is_some()).count(), 180);
}

/// Type counts of llama.cpp's output for other file types (same source).
#[test]
fn other_file_types_on_smollm2_match_llama_cpp_counts() {
    use GgmlType::*;
    let f = GgufFile::open(&model_path(SMOLLM2)).unwrap();
    let cases: &[(FileType, &[(GgmlType, usize)])] = &[
        (FileType::Q8_0, &[(F32, 61), (Q8_0, 211)]),
        (FileType::Q4_0, &[(F32, 61), (Q4_0, 210), (Q8_0, 1)]),
        (FileType::Q6_K, &[(F32, 61), (Q8_0, 181), (Q6_K, 30)]),
        (FileType::F16, &[(F32, 61), (F16, 211)]),
    ];
    for (ft, expected) in cases {
        let plan = plan_for(&f, *ft).unwrap();
        let expected: BTreeMap<GgmlType, usize> = expected.iter().copied().collect();
        assert_eq!(counts(plan.iter().map(|c| c.ty)), expected, "{ft}");
    }
}

#[test]
fn requantizing_gemma_to_its_own_type_gives_the_same_file() {
    let f = GgufFile::open(&model_path(GEMMA3)).unwrap();
    let mut seen = 0;
    let (w, summary) = quantize::quantize_model(&f, FileType::Q4_K_M, &mut |i, n, _| {
        assert_eq!(i, seen);
        assert_eq!(n, 236);
        seen += 1;
    })
    .unwrap();
    assert_eq!(seen, 236);
    assert!(summary.tensors.iter().all(|t| t.from == t.to));
    let mut out = Vec::with_capacity(f.file_size() as usize);
    w.write_to(&mut out).unwrap();
    assert!(
        out == f.bytes(),
        "requantized Gemma differs from the original"
    );
}
