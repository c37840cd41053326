//! The real test models (fetched by scripts/fetch-models into models/):
//! tensor counts by type, key metadata, and agreement with an independent
//! decoder. Fails, never skips, when the models are absent.

use crate::gguf_support;

use std::collections::BTreeMap;
use std::time::Instant;

use engine::gguf::GgufFile;
use engine::GgmlType;
use gguf_support::*;

fn type_counts(f: &GgufFile) -> BTreeMap<GgmlType, usize> {
    let mut m = BTreeMap::new();
    for t in f.tensors() {
        *m.entry(t.ty).or_insert(0) += 1;
    }
    m
}

/// Checks the parsed tensors against the test decoder's reading of the same
/// header, and that every tensor's data can be sliced.
fn agrees_with_decoder(f: &GgufFile, name: &str) {
    let header = model_header(name, 0);
    assert_eq!(f.data_offset(), header.len() as u64);
    let img = decode(&header);
    assert_eq!(img.kvs.len(), f.metadata().len());
    for (kv, (key, _)) in img.kvs.iter().zip(f.metadata()) {
        assert_eq!(kv.key, key.as_bytes());
    }
    assert_eq!(img.tensors.len(), f.tensors().len());
    for (raw, t) in img.tensors.iter().zip(f.tensors()) {
        assert_eq!(raw.name, t.name.as_bytes());
        assert_eq!(raw.dims, t.dims);
        assert_eq!(raw.ty, t.ty.id());
        assert_eq!(raw.offset + f.data_offset(), t.offset);
        assert_eq!(f.tensor_data(t).len() as u64, t.n_bytes);
    }
    // Re-encoding the decoded header gives the same bytes: the test builder
    // and decoder (used by the property tests) are faithful.
    assert_eq!(img.encode(), header);
}

#[test]
fn smollm2_135m_q4_1() {
    let f = GgufFile::open(&model_path(SMOLLM2)).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.architecture().unwrap(), "llama");
    assert_eq!(f.tensors().len(), 272);
    let expected = BTreeMap::from([
        (GgmlType::F32, 61),
        (GgmlType::Q4_1, 210),
        (GgmlType::Q8_0, 1),
    ]);
    assert_eq!(type_counts(&f), expected);
    assert_eq!(f.arch_u32("block_count").unwrap(), 30);
    assert_eq!(f.get_u32("llama.block_count").unwrap(), 30);
    assert_eq!(f.arch_u32("embedding_length").unwrap(), 576);
    assert!(f.arch_f32("attention.layer_norm_rms_epsilon").unwrap() > 0.0);
    let tokens = f.get_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!(tokens.len(), 49152);
    assert_eq!(f.lossy_string_count(), 0);
    let embd = f.tensor("token_embd.weight").unwrap();
    assert_eq!(embd.dims, [576, 49152]);
    agrees_with_decoder(&f, SMOLLM2);
}

#[test]
fn gemma3_270m_q4_k_m() {
    let t0 = Instant::now();
    let f = GgufFile::open(&model_path(GEMMA3)).unwrap();
    let elapsed = t0.elapsed();
    eprintln!("gemma-3-270m header parsed in {elapsed:?} (this profile)");
    assert_eq!(f.version(), 3);
    assert_eq!(f.architecture().unwrap(), "gemma3");
    assert_eq!(f.tensors().len(), 236);
    let expected = BTreeMap::from([
        (GgmlType::F32, 109),
        (GgmlType::Q5_0, 81),
        (GgmlType::Q4_K, 27),
        (GgmlType::Q8_0, 10),
        (GgmlType::Q6_K, 9),
    ]);
    assert_eq!(type_counts(&f), expected);
    assert_eq!(f.arch_u32("block_count").unwrap(), 18);
    assert_eq!(f.get_u32("gemma3.block_count").unwrap(), 18);
    assert_eq!(f.get_array("tokenizer.ggml.tokens").unwrap().len(), 262_144);
    assert_eq!(f.get_array("tokenizer.ggml.scores").unwrap().len(), 262_144);
    assert_eq!(
        f.get_array("tokenizer.ggml.token_type").unwrap().len(),
        262_144
    );
    assert!(f.arch_f32("rope.freq_base").unwrap() > 0.0);
    agrees_with_decoder(&f, GEMMA3);
    // Generous even for unoptimized builds; release takes a few tens of ms.
    assert!(
        elapsed.as_secs_f64() < 5.0,
        "parsing the Gemma header took {elapsed:?}"
    );
}

#[test]
fn header_prefixes_parse_up_to_the_tensor_bounds_check() {
    // Cut after the tensor infos plus a little data: the header parses, and
    // the first tensor whose data is missing is reported out of bounds.
    for name in [SMOLLM2, GEMMA3] {
        let bytes = model_header(name, 4096);
        let e = GgufFile::from_bytes(bytes).unwrap_err();
        assert!(
            matches!(e.kind, engine::gguf::ErrorKind::TensorOutOfBounds { .. }),
            "{name}: {e}"
        );
    }
}

#[test]
fn shrunk_real_headers_are_valid() {
    // The property tests mutate these: real metadata with small tensors.
    for name in [SMOLLM2, GEMMA3] {
        let mut img = decode(&model_header(name, 0));
        let n_tensors = img.tensors.len();
        img.shrink_tensors();
        let f = GgufFile::from_bytes(img.encode()).unwrap();
        assert_eq!(f.tensors().len(), n_tensors);
        img.trim_arrays(16);
        let f = GgufFile::from_bytes(img.encode()).unwrap();
        assert_eq!(f.get_array("tokenizer.ggml.tokens").unwrap().len(), 16);
    }
}
