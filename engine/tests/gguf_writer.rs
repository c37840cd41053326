//! The GGUF writer: round trips through the reader (every value type, NaN
//! bits, nested and empty arrays, alignments, tensor bytes), agreement with
//! the test suite's independent encoder, a property test over random files,
//! and a rewrite of a real model.

use crate::gguf_support;

use std::borrow::Cow;

use engine::gguf::{GgufFile, GgufWriter, Value};
use engine::GgmlType;
use gguf_support::*;
use proptest::collection::vec;
use proptest::prelude::*;

/// Bit-exact equality: floats compare by their bits, so NaN payloads and
/// the sign of zero count.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::F32(x), Value::F32(y)) => x.to_bits() == y.to_bits(),
        (Value::F64(x), Value::F64(y)) => x.to_bits() == y.to_bits(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        _ => a == b,
    }
}

/// Writes `w`, reads the bytes back and checks that metadata, tensor infos,
/// offsets and data are what was put in.
fn round_trip(w: &GgufWriter) -> GgufFile {
    let mut bytes = Vec::new();
    let layout = w.write_to(&mut bytes).unwrap();
    assert_eq!(bytes.len() as u64, layout.file_size);
    let f = GgufFile::from_bytes(bytes).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.alignment(), w.alignment());
    assert_eq!(f.data_offset(), layout.data_offset);
    assert_eq!(f.metadata().len(), w.metadata().len());
    for ((k1, v1), (k2, v2)) in f.metadata().iter().zip(w.metadata()) {
        assert_eq!(k1, k2);
        assert!(same(v1, v2), "{k1}: read {v1:?}, wrote {v2:?}");
    }
    assert_eq!(f.tensors().len(), w.tensors().len());
    for ((t, p), &rel) in f
        .tensors()
        .iter()
        .zip(w.tensors())
        .zip(&layout.tensor_offsets)
    {
        assert_eq!(t.name, p.name);
        assert_eq!(t.ty, p.ty);
        assert_eq!(t.dims, p.dims);
        assert_eq!(t.offset, layout.data_offset + rel);
        assert_eq!(t.offset % f.alignment(), 0);
        assert_eq!(f.tensor_data(t), &p.data[..]);
    }
    if !w.tensors().is_empty() {
        assert_eq!(f.file_size() % f.alignment(), 0);
    }
    f
}

fn every_type() -> Vec<(&'static str, Value)> {
    vec![
        ("general.architecture", Value::String("llama".into())),
        ("u8", Value::U8(200)),
        ("i8", Value::I8(-100)),
        ("u16", Value::U16(60_000)),
        ("i16", Value::I16(-30_000)),
        ("u32", Value::U32(4_000_000_000)),
        ("i32", Value::I32(-2_000_000_000)),
        ("u64", Value::U64(u64::MAX)),
        ("i64", Value::I64(i64::MIN)),
        ("f32", Value::F32(1.5)),
        ("f32_nan", Value::F32(f32::from_bits(0x7fc0_1234))),
        ("f32_neg_zero", Value::F32(-0.0)),
        ("f64", Value::F64(-0.25)),
        ("f64_nan", Value::F64(f64::from_bits(0xfff8_0000_dead_beef))),
        ("true", Value::Bool(true)),
        ("false", Value::Bool(false)),
        ("str", Value::String("héllo\n\"world\"".into())),
        ("empty_str", Value::String(String::new())),
        ("arr_i32", Value::Array(vec![Value::I32(-1), Value::I32(2)])),
        (
            "arr_f32",
            Value::Array(vec![Value::F32(f32::NAN), Value::F32(f32::INFINITY)]),
        ),
        (
            "arr_str",
            Value::Array(vec![Value::String("a".into()), Value::String("".into())]),
        ),
        ("arr_empty", Value::Array(vec![])),
        (
            "nested",
            Value::Array(vec![
                Value::Array(vec![Value::U8(1), Value::U8(2)]),
                Value::Array(vec![Value::String("x".into())]),
                Value::Array(vec![Value::Array(vec![Value::Bool(true)])]),
                Value::Array(vec![]),
            ]),
        ),
    ]
}

#[test]
fn every_value_type_round_trips_bit_exact() {
    for alignment in [None, Some(1u32), Some(8), Some(64), Some(4096)] {
        let mut w = GgufWriter::new();
        for (k, v) in every_type() {
            w.set(k, v).unwrap();
        }
        if let Some(a) = alignment {
            w.set("general.alignment", Value::U32(a)).unwrap();
        }
        let data = |n: usize| -> Vec<u8> { (0..n).map(pattern).collect() };
        w.add_tensor("a", GgmlType::F32, &[4, 3], data(48)).unwrap();
        w.add_tensor("b", GgmlType::Q4_K, &[256, 2, 1], data(288))
            .unwrap();
        w.add_tensor("c", GgmlType::Q8_0, &[64], data(68)).unwrap();
        w.add_tensor("d", GgmlType::F16, &[2, 3, 4, 5], data(240))
            .unwrap();
        let f = round_trip(&w);
        assert_eq!(f.alignment(), u64::from(alignment.unwrap_or(32)));
    }
}

/// The writer's bytes are the test suite's own encoder's bytes (which does
/// not pad after the last tensor) followed by zeros.
#[test]
fn bytes_match_the_independent_encoder() {
    let mut img = Image::new(3)
        .kv("general.architecture", V::s("llama"))
        .kv("n", V::Arr(T_ARRAY, vec![V::Arr(T_U16, vec![V::U16(7)])]))
        .kv("f", V::F32(f32::from_bits(0xffc0_0001)))
        .alignment(64)
        .tensor("x", GgmlType::Q8_0, &[32, 3])
        .tensor("y", GgmlType::F32, &[5]);
    img = img.tensor("z", GgmlType::Q6_K, &[256]);
    let expected = img.encode();

    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("llama".into()))
        .unwrap();
    w.set("n", Value::Array(vec![Value::Array(vec![Value::U16(7)])]))
        .unwrap();
    w.set("f", Value::F32(f32::from_bits(0xffc0_0001))).unwrap();
    w.set("general.alignment", Value::U32(64)).unwrap();
    let data = &img.data;
    for t in &img.tensors {
        let ty = match GgmlType::from_id(t.ty) {
            engine::TypeId::Known(ty) => ty,
            other => panic!("{other:?}"),
        };
        let n = ty.bytes_for(t.dims.iter().product()).unwrap() as usize;
        let start = t.offset as usize;
        let name = String::from_utf8(t.name.clone()).unwrap();
        w.add_tensor(name, ty, &t.dims, &data[start..start + n])
            .unwrap();
    }
    let mut out = Vec::new();
    w.write_to(&mut out).unwrap();
    assert_eq!(&out[..expected.len()], &expected[..]);
    assert!(out[expected.len()..].iter().all(|&b| b == 0));
    assert_eq!(out.len() % 64, 0);
}

// --- property test over random files ---

fn scalar(kind: u8) -> BoxedStrategy<Value> {
    match kind {
        0 => any::<u8>().prop_map(Value::U8).boxed(),
        1 => any::<i8>().prop_map(Value::I8).boxed(),
        2 => any::<u16>().prop_map(Value::U16).boxed(),
        3 => any::<i16>().prop_map(Value::I16).boxed(),
        4 => any::<u32>().prop_map(Value::U32).boxed(),
        5 => any::<i32>().prop_map(Value::I32).boxed(),
        6 => any::<u64>().prop_map(Value::U64).boxed(),
        7 => any::<i64>().prop_map(Value::I64).boxed(),
        // Any bit pattern: NaNs with payloads, infinities, subnormals.
        8 => any::<u32>()
            .prop_map(|b| Value::F32(f32::from_bits(b)))
            .boxed(),
        9 => any::<u64>()
            .prop_map(|b| Value::F64(f64::from_bits(b)))
            .boxed(),
        10 => any::<bool>().prop_map(Value::Bool).boxed(),
        _ => ".{0,12}".prop_map(Value::String).boxed(),
    }
}

/// A homogeneous array; below the top, arrays of arrays.
fn array(depth: u32) -> BoxedStrategy<Value> {
    let flat = (0u8..12)
        .prop_flat_map(|k| vec(scalar(k), 0..6))
        .prop_map(Value::Array);
    if depth == 0 {
        return flat.boxed();
    }
    prop_oneof![
        3 => flat,
        1 => vec(array(depth - 1), 0..4).prop_map(Value::Array),
    ]
    .boxed()
}

fn value() -> BoxedStrategy<Value> {
    prop_oneof![3 => (0u8..12).prop_flat_map(scalar), 1 => array(2)].boxed()
}

#[derive(Debug, Clone)]
struct RandomTensor {
    ty: GgmlType,
    dims: Vec<u64>,
    seed: u8,
}

fn tensor() -> impl Strategy<Value = RandomTensor> {
    let types: Vec<GgmlType> = GgmlType::all().collect();
    (
        proptest::sample::select(types),
        1u64..4,
        vec(1u64..4, 0..4),
        any::<u8>(),
    )
        .prop_map(|(ty, blocks, rest, seed)| {
            let mut dims = vec![blocks * ty.block_elems() as u64];
            dims.extend(rest.into_iter().take(3));
            RandomTensor { ty, dims, seed }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn random_files_round_trip(
        kvs in vec(("[a-z._]{1,16}", value()), 0..12),
        tensors in vec(tensor(), 0..8),
        alignment in proptest::option::of(proptest::sample::select(vec![1u32, 2, 16, 32, 64, 256])),
    ) {
        let mut w = GgufWriter::new();
        for (k, v) in kvs {
            if k == "general.alignment" {
                continue;
            }
            w.set(k, v).unwrap();
        }
        if let Some(a) = alignment {
            w.set("general.alignment", Value::U32(a)).unwrap();
        }
        for (i, t) in tensors.iter().enumerate() {
            let n = t.ty.bytes_for(t.dims.iter().product()).unwrap() as usize;
            let data: Vec<u8> = (0..n).map(|j| pattern(j + t.seed as usize)).collect();
            w.add_tensor(format!("t{i}.weight"), t.ty, &t.dims, data).unwrap();
        }
        round_trip(&w);
    }
}

// --- a real model ---

/// Copies a file's metadata and tensors (borrowed) into a writer.
fn copy_of(f: &GgufFile) -> GgufWriter<'_> {
    let mut w = GgufWriter::new();
    for (k, v) in f.metadata() {
        w.set(k.clone(), v.clone()).unwrap();
    }
    for t in f.tensors() {
        w.add_tensor(
            t.name.clone(),
            t.ty,
            &t.dims,
            Cow::Borrowed(f.tensor_data(t)),
        )
        .unwrap();
    }
    w
}

/// Rewriting SmolLM2 gives a file with the same content, and since the
/// writer lays data out as ggml and gguf-py do (data section and every
/// tensor padded to the alignment), the very same bytes.
#[test]
fn rewriting_smollm2_gives_the_same_bytes() {
    let path = model_path(SMOLLM2);
    let f = GgufFile::open(&path).unwrap();
    let w = copy_of(&f);
    let g = round_trip(&w);
    assert_eq!(g.tensors().len(), 272);
    assert_eq!(g.file_size(), f.file_size());
    assert!(
        g.bytes() == f.bytes(),
        "rewritten SmolLM2 differs from the original"
    );
}

/// Gemma's file (written by llama.cpp's quantizer) also rewrites to itself.
#[test]
fn rewriting_gemma_gives_the_same_bytes() {
    let path = model_path(GEMMA3);
    let f = GgufFile::open(&path).unwrap();
    let w = copy_of(&f);
    let mut out = Vec::with_capacity(f.file_size() as usize);
    w.write_to(&mut out).unwrap();
    assert_eq!(out.len() as u64, f.file_size());
    assert!(
        out == f.bytes(),
        "rewritten Gemma differs from the original"
    );
}
