//! Tests of `writer.rs` (its child module `tests`, kept in a file of its own).

use super::*;
use crate::gguf::GgufFile;

#[test]
fn empty_writer_is_a_valid_file() {
    let mut out = Vec::new();
    let layout = GgufWriter::new().write_to(&mut out).unwrap();
    assert_eq!(layout.header_len, 24);
    assert_eq!(layout.data_offset, 32);
    assert_eq!(out.len(), 32);
    assert_eq!(&out[..4], b"GGUF");
    assert!(out[24..].iter().all(|&b| b == 0));
    let f = GgufFile::from_bytes(out).unwrap();
    assert_eq!(f.version(), 3);
    assert!(f.metadata().is_empty() && f.tensors().is_empty());
}

#[test]
fn set_replaces_in_place_and_remove_moves_to_end() {
    let mut w = GgufWriter::new();
    w.set("a", Value::U8(1)).unwrap();
    w.set("b", Value::U8(2)).unwrap();
    w.set("a", Value::U8(3)).unwrap();
    let keys: Vec<_> = w.metadata().iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["a", "b"]);
    assert_eq!(w.get("a"), Some(&Value::U8(3)));
    assert_eq!(w.remove("a"), Some(Value::U8(3)));
    assert_eq!(w.remove("a"), None);
    w.set("a", Value::U8(4)).unwrap();
    let keys: Vec<_> = w.metadata().iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["b", "a"]);
}

#[test]
fn alignment_must_be_a_u32_power_of_two() {
    let mut w = GgufWriter::new();
    for bad in [
        Value::U32(0),
        Value::U32(48),
        Value::U64(64),
        Value::I32(32),
    ] {
        let e = w.set(ALIGNMENT_KEY, bad).unwrap_err();
        assert!(matches!(e, WriteError::BadAlignment { .. }), "{e}");
    }
    assert_eq!(w.alignment(), 32);
    w.set(ALIGNMENT_KEY, Value::U32(64)).unwrap();
    assert_eq!(w.alignment(), 64);
}

#[test]
fn values_are_checked() {
    let mut w = GgufWriter::new();
    let mixed = Value::Array(vec![Value::U8(1), Value::I8(1)]);
    let e = w.set("k", mixed).unwrap_err();
    assert_eq!(
        e.to_string(),
        "metadata key \"k\": array element 1 is i8, element 0 is u8: arrays hold one type"
    );
    let mut deep = Value::Array(vec![Value::U8(1)]);
    for _ in 0..MAX_NESTING_DEPTH {
        deep = Value::Array(vec![deep]);
    }
    assert!(matches!(w.set("k", deep), Err(WriteError::BadValue { .. })));
    let long_key = "k".repeat(MAX_KEY_LEN as usize + 1);
    assert!(matches!(
        w.set(long_key, Value::U8(0)),
        Err(WriteError::KeyTooLong { .. })
    ));
    // Inner arrays may differ in element type.
    let nested = Value::Array(vec![
        Value::Array(vec![Value::U8(1)]),
        Value::Array(vec![Value::String("x".into())]),
    ]);
    w.set("nested", nested).unwrap();
    assert!(w.metadata().len() == 1);
}

#[test]
fn tensors_are_checked() {
    let mut w = GgufWriter::new();
    w.add_tensor("a", GgmlType::F32, &[2, 2], vec![0u8; 16])
        .unwrap();
    let cases: Vec<(&str, GgmlType, Vec<u64>, usize, &str)> = vec![
        (
            "a",
            GgmlType::F32,
            vec![1],
            4,
            "duplicate tensor name \"a\"",
        ),
        (
            "b",
            GgmlType::F32,
            vec![],
            0,
            "tensor \"b\": 0 dimensions (must be 1 to 4)",
        ),
        (
            "b",
            GgmlType::F32,
            vec![1, 1, 1, 1, 1],
            4,
            "tensor \"b\": 5 dimensions (must be 1 to 4)",
        ),
        (
            "b",
            GgmlType::F32,
            vec![3, 0],
            0,
            "tensor \"b\": dimension 1 is 0 (must be 1 to 1099511627776)",
        ),
        (
            "b",
            GgmlType::Q4_K,
            vec![32, 2],
            36,
            "tensor \"b\": Q4_K rows of 32 elements are not whole 256-element blocks",
        ),
        (
            "b",
            GgmlType::Q8_0,
            vec![64],
            60,
            "tensor \"b\" (Q8_0, dims [64]) needs 68 bytes of data, got 60",
        ),
        (
            "b",
            GgmlType::F32,
            vec![1 << 21, 1 << 20],
            0,
            "tensor \"b\": more than 1099511627776 elements",
        ),
    ];
    for (name, ty, dims, len, msg) in cases {
        let e = w.add_tensor(name, ty, &dims, vec![0u8; len]).unwrap_err();
        assert_eq!(e.to_string(), msg);
    }
    let long = "x".repeat(MAX_GGML_NAME_LEN + 1);
    assert!(matches!(
        w.add_tensor(long, GgmlType::F32, &[1], vec![0u8; 4]),
        Err(WriteError::TensorNameTooLong { .. })
    ));
    assert_eq!(w.tensors().len(), 1);
}

#[test]
fn layout_pads_every_tensor_to_the_alignment() {
    let mut w = GgufWriter::new();
    w.set(ALIGNMENT_KEY, Value::U32(64)).unwrap();
    w.add_tensor("a", GgmlType::F32, &[3], vec![1u8; 12])
        .unwrap();
    w.add_tensor("b", GgmlType::Q8_0, &[32], vec![2u8; 34])
        .unwrap();
    let mut out = Vec::new();
    let layout = w.write_to(&mut out).unwrap();
    assert_eq!(layout.tensor_offsets, [0, 64]);
    assert_eq!(layout.data_offset % 64, 0);
    assert_eq!(layout.file_size, layout.data_offset + 128);
    assert_eq!(out.len() as u64, layout.file_size);
    let d = layout.data_offset as usize;
    assert!(out[layout.header_len as usize..d].iter().all(|&b| b == 0));
    assert_eq!(&out[d..d + 12], &[1u8; 12]);
    assert!(out[d + 12..d + 64].iter().all(|&b| b == 0));
    assert_eq!(&out[d + 64..d + 98], &[2u8; 34]);
    assert!(out[d + 98..].iter().all(|&b| b == 0));
}

#[test]
fn write_file_replaces_the_target_and_reports_the_path() {
    let dir = std::env::temp_dir().join(format!("sharpi-writer-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let path = dir.join("m.gguf");
    let mut w = GgufWriter::new();
    w.set("x", Value::U32(7)).unwrap();
    w.write_file(&path).unwrap();
    w.set("x", Value::U32(8)).unwrap();
    w.write_file(&path).unwrap();
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.get("x"), Some(&Value::U32(8)));
    // A path in a missing directory fails with one line naming it; no
    // temporary file is left beside the target.
    let bad = dir.join("missing").join("m.gguf");
    let e = w.write_file(&bad).unwrap_err();
    assert!(e.to_string().contains("missing"), "{e}");
    assert!(!e.to_string().contains('\n'));
    let left: Vec<_> = fs::read_dir(&dir).unwrap().collect();
    assert_eq!(left.len(), 1);
    fs::remove_dir_all(&dir).unwrap();
}
