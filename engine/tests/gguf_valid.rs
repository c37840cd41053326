//! Well-formed files: every value type, nested arrays, v2 and v3, custom
//! alignment, tensor data, the typed accessors, and opening from disk.

use crate::gguf_support;

use std::path::PathBuf;

use engine::gguf::{ErrorKind, GgufFile, MetadataError, Value};
use engine::GgmlType;
use gguf_support::*;

fn every_type(version: u32) -> Image {
    Image::new(version)
        .kv("general.architecture", V::s("llama"))
        .kv("u8", V::U8(200))
        .kv("i8", V::I8(-100))
        .kv("u16", V::U16(60_000))
        .kv("i16", V::I16(-30_000))
        .kv("u32", V::U32(4_000_000_000))
        .kv("i32", V::I32(-2_000_000_000))
        .kv("u64", V::U64(u64::MAX))
        .kv("i64", V::I64(i64::MIN))
        .kv("f32", V::F32(1.5))
        .kv("f64", V::F64(-0.25))
        .kv("true", V::Bool(1))
        .kv("false", V::Bool(0))
        .kv("str", V::s("héllo\n\"world\""))
        .kv("empty_str", V::s(""))
        .kv("arr_i32", V::Arr(T_I32, vec![V::I32(-1), V::I32(2)]))
        .kv("arr_str", V::Arr(T_STRING, vec![V::s("a"), V::s("")]))
        .kv("arr_empty", V::Arr(T_F32, vec![]))
        .kv(
            "nested",
            V::Arr(
                T_ARRAY,
                vec![
                    V::Arr(T_U8, vec![V::U8(1), V::U8(2)]),
                    V::Arr(T_STRING, vec![V::s("x")]),
                    V::Arr(T_ARRAY, vec![V::Arr(T_BOOL, vec![V::Bool(1)])]),
                ],
            ),
        )
        .kv("llama.block_count", V::U8(30))
        .kv("llama.rope.freq_base", V::F32(10000.0))
        .tensor("a", GgmlType::F32, &[4, 3])
        .tensor("b", GgmlType::Q4_K, &[256, 2, 1])
        .tensor("c", GgmlType::Q8_0, &[64])
        .tensor("d", GgmlType::F16, &[2, 3, 4, 5])
}

fn check_every_type(f: &GgufFile, version: u32) {
    assert_eq!(f.version(), version);
    assert_eq!(f.alignment(), 32);
    let expected = [
        ("u8", Value::U8(200)),
        ("i8", Value::I8(-100)),
        ("u16", Value::U16(60_000)),
        ("i16", Value::I16(-30_000)),
        ("u32", Value::U32(4_000_000_000)),
        ("i32", Value::I32(-2_000_000_000)),
        ("u64", Value::U64(u64::MAX)),
        ("i64", Value::I64(i64::MIN)),
        ("f32", Value::F32(1.5)),
        ("f64", Value::F64(-0.25)),
        ("true", Value::Bool(true)),
        ("false", Value::Bool(false)),
        ("str", Value::String("héllo\n\"world\"".into())),
        ("empty_str", Value::String(String::new())),
        ("arr_i32", Value::Array(vec![Value::I32(-1), Value::I32(2)])),
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
            ]),
        ),
    ];
    for (key, value) in &expected {
        assert_eq!(f.get(key), Some(value), "{key}");
    }
    // File order is kept.
    let keys: Vec<&str> = f.metadata().iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys[0], "general.architecture");
    assert_eq!(&keys[1..4], &["u8", "i8", "u16"]);
    assert_eq!(keys.last(), Some(&"llama.rope.freq_base"));
    assert_eq!(f.lossy_string_count(), 0);

    let names: Vec<&str> = f.tensors().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c", "d"]);
    let b = f.tensor("b").unwrap();
    assert_eq!(b.ty, GgmlType::Q4_K);
    assert_eq!(b.dims, [256, 2, 1]);
    assert_eq!(b.n_elements(), 512);
    assert_eq!(b.n_rows(), 2);
    assert_eq!(b.n_bytes, 2 * 144);
    assert_eq!(f.tensor("d").unwrap().n_elements(), 120);
    assert_eq!(f.tensor("d").unwrap().n_bytes, 240);
    assert!(f.tensor("e").is_none());
}

#[test]
fn v3_with_every_value_type() {
    let f = GgufFile::from_bytes(every_type(3).encode()).unwrap();
    check_every_type(&f, 3);
}

#[test]
fn v2_with_every_value_type() {
    let f = GgufFile::from_bytes(every_type(2).encode()).unwrap();
    check_every_type(&f, 2);
}

#[test]
fn tensor_offsets_and_data() {
    let img = every_type(3);
    let enc = img.encode_fields();
    let f = GgufFile::from_bytes(enc.bytes.clone()).unwrap();
    assert_eq!(f.data_offset(), enc.data_offset as u64);
    assert_eq!(f.data_offset() % 32, 0);
    assert_eq!(f.file_size(), enc.bytes.len() as u64);
    for (t, raw) in f.tensors().iter().zip(&img.tensors) {
        assert_eq!(t.offset, enc.data_offset as u64 + raw.offset, "{}", t.name);
        assert_eq!(t.offset % f.alignment(), 0);
        let data = f.tensor_data(t);
        assert_eq!(data.len() as u64, t.n_bytes);
        let rel = raw.offset as usize;
        let expected: Vec<u8> = (rel..rel + data.len()).map(pattern).collect();
        assert_eq!(data, &expected[..], "{}", t.name);
    }
}

#[test]
fn custom_alignment() {
    for a in [1u32, 8, 64, 4096] {
        let img = Image::new(3)
            .alignment(a)
            .tensor("x", GgmlType::F32, &[3])
            .tensor("y", GgmlType::I8, &[5])
            .tensor("z", GgmlType::Q8_0, &[32]);
        let enc = img.encode_fields();
        let f = GgufFile::from_bytes(enc.bytes).unwrap();
        assert_eq!(f.alignment(), u64::from(a));
        assert_eq!(f.get_u32("general.alignment").unwrap(), a);
        assert_eq!(f.data_offset() % u64::from(a), 0);
        assert_eq!(f.data_offset(), enc.data_offset as u64);
        for t in f.tensors() {
            assert_eq!((t.offset - f.data_offset()) % u64::from(a), 0);
        }
        if a == 1 {
            // Packed: y follows x directly, and the data starts right after
            // the infos.
            assert_eq!(f.data_offset(), enc.infos_end as u64);
            assert_eq!(
                f.tensor("y").unwrap().offset,
                f.tensor("x").unwrap().offset + 12
            );
        }
    }
}

#[test]
fn empty_file_without_tensors_or_metadata() {
    let enc = Image::new(3).encode_fields();
    // The bare 24-byte header, and the padded one.
    for bytes in [enc.bytes[..enc.infos_end].to_vec(), enc.bytes.clone()] {
        let f = GgufFile::from_bytes(bytes).unwrap();
        assert!(f.metadata().is_empty());
        assert!(f.tensors().is_empty());
        assert_eq!(f.data_offset(), 32);
        assert!(matches!(
            f.architecture(),
            Err(MetadataError::Missing { ref key }) if key == "general.architecture"
        ));
    }
}

#[test]
fn tensors_may_be_listed_out_of_offset_order_with_gaps_and_trailing_bytes() {
    let mut img = Image::new(3)
        .raw_tensor(b"second", &[8], GgmlType::F32.id(), 64)
        .raw_tensor(b"first", &[8], GgmlType::F32.id(), 0);
    img.data = vec![1; 200];
    let f = GgufFile::from_bytes(img.encode()).unwrap();
    assert_eq!(f.tensors()[0].name, "second");
    assert_eq!(f.tensor("second").unwrap().offset, f.data_offset() + 64);
    // Adjacent tensors (end == start) do not overlap.
    let mut img = Image::new(3)
        .raw_tensor(b"a", &[8], GgmlType::F32.id(), 0)
        .raw_tensor(b"b", &[8], GgmlType::F32.id(), 32);
    img.data = vec![0; 64];
    GgufFile::from_bytes(img.encode()).unwrap();
}

#[test]
fn invalid_utf8_string_values_are_decoded_lossily_and_counted() {
    let img = Image::new(3).kv("s", V::Str(b"ab\xffc".to_vec())).kv(
        "arr",
        V::Arr(T_STRING, vec![V::Str(b"\xc3".to_vec()), V::s("ok")]),
    );
    let f = GgufFile::from_bytes(img.encode()).unwrap();
    assert_eq!(f.get_str("s").unwrap(), "ab\u{fffd}c");
    assert_eq!(f.get_array("arr").unwrap()[0].as_str(), Some("\u{fffd}"));
    assert_eq!(f.lossy_string_count(), 2);
}

fn accessors_file() -> GgufFile {
    let img = Image::new(3)
        .kv("general.architecture", V::s("gemma3"))
        .kv("gemma3.block_count", V::U64(18))
        .kv("gemma3.context_length", V::I32(32768))
        .kv("gemma3.rope.freq_base", V::F32(1e6))
        .kv("gemma3.eps", V::F64(1e-6))
        .kv("neg", V::I8(-1))
        .kv("big", V::U64(1 << 33))
        .kv("small", V::U8(7))
        .kv("i64max", V::I64(i64::MAX))
        .kv("flag", V::Bool(1))
        .kv("name", V::s("x"))
        .kv("list", V::Arr(T_U32, vec![V::U32(1), V::U32(2)]));
    GgufFile::from_bytes(img.encode()).unwrap()
}

#[test]
fn integer_accessors_accept_any_integer_type_that_fits() {
    let f = accessors_file();
    assert_eq!(f.get_u32("gemma3.block_count").unwrap(), 18);
    assert_eq!(f.get_u32("gemma3.context_length").unwrap(), 32768);
    assert_eq!(f.get_u32("small").unwrap(), 7);
    assert_eq!(f.get_u64("big").unwrap(), 1 << 33);
    assert_eq!(f.get_i64("neg").unwrap(), -1);
    assert_eq!(f.get_i64("i64max").unwrap(), i64::MAX);
    assert_eq!(
        f.get_u32("neg"),
        Err(MetadataError::OutOfRange {
            key: "neg".into(),
            value: "-1".into(),
            target: "u32"
        })
    );
    assert!(matches!(
        f.get_u32("big"),
        Err(MetadataError::OutOfRange { .. })
    ));
    assert!(matches!(
        f.get_u64("neg"),
        Err(MetadataError::OutOfRange { .. })
    ));
    let e = f.get_u32("name").unwrap_err();
    assert_eq!(
        e,
        MetadataError::WrongType {
            key: "name".into(),
            expected: "an integer",
            found: "string"
        }
    );
    let msg = e.to_string();
    assert!(
        msg.contains("\"name\"") && msg.contains("string") && msg.contains("integer"),
        "{msg}"
    );
    assert!(matches!(
        f.get_u32("gemma3.rope.freq_base"),
        Err(MetadataError::WrongType { found: "f32", .. })
    ));
    assert!(matches!(
        f.get_u32("flag"),
        Err(MetadataError::WrongType { found: "bool", .. })
    ));
}

#[test]
fn float_bool_string_array_accessors() {
    let f = accessors_file();
    assert_eq!(f.get_f32("gemma3.rope.freq_base").unwrap(), 1e6);
    assert_eq!(f.get_f32("gemma3.eps").unwrap(), 1e-6f64 as f32);
    assert!(matches!(
        f.get_f32("small"),
        Err(MetadataError::WrongType {
            expected: "f32 or f64",
            found: "u8",
            ..
        })
    ));
    assert!(f.get_bool("flag").unwrap());
    assert!(matches!(
        f.get_bool("small"),
        Err(MetadataError::WrongType { .. })
    ));
    assert_eq!(f.get_str("name").unwrap(), "x");
    assert!(matches!(
        f.get_str("flag"),
        Err(MetadataError::WrongType { found: "bool", .. })
    ));
    assert_eq!(f.get_array("list").unwrap().len(), 2);
    assert_eq!(f.get_array("list").unwrap()[1].as_u32(), Some(2));
    assert!(matches!(
        f.get_array("name"),
        Err(MetadataError::WrongType {
            found: "string",
            ..
        })
    ));
    let missing = f.get_str("nope").unwrap_err();
    assert_eq!(missing, MetadataError::Missing { key: "nope".into() });
    assert_eq!(missing.key(), "nope");
    assert_eq!(missing.to_string(), "metadata key \"nope\" is missing");
}

#[test]
fn optional_accessors() {
    let f = accessors_file();
    assert_eq!(f.get_u32_opt("small"), Ok(Some(7)));
    assert_eq!(f.get_u32_opt("absent"), Ok(None));
    assert!(f.get_u32_opt("name").is_err());
    assert_eq!(f.get_u64_opt("big"), Ok(Some(1 << 33)));
    assert_eq!(f.get_f32_opt("absent"), Ok(None));
    assert_eq!(f.get_f32_opt("gemma3.rope.freq_base"), Ok(Some(1e6)));
    assert_eq!(f.get_bool_opt("flag"), Ok(Some(true)));
    assert_eq!(f.get_str_opt("name"), Ok(Some("x")));
    assert_eq!(f.get_str_opt("absent"), Ok(None));
    assert!(f.get_str_opt("small").is_err());
    assert_eq!(f.get_array_opt("absent"), Ok(None));
    assert_eq!(f.arch_u32_opt("block_count"), Ok(Some(18)));
    assert_eq!(f.arch_u32_opt("expert_count"), Ok(None));
    assert_eq!(f.arch_f32_opt("rope.freq_base"), Ok(Some(1e6)));
    assert_eq!(f.arch_f32_opt("absent"), Ok(None));
}

#[test]
fn architecture_accessors() {
    let f = accessors_file();
    assert_eq!(f.architecture().unwrap(), "gemma3");
    assert_eq!(f.arch_key("block_count").unwrap(), "gemma3.block_count");
    assert_eq!(f.arch_u32("block_count").unwrap(), 18);
    assert_eq!(f.arch_f32("rope.freq_base").unwrap(), 1e6);
    assert_eq!(
        f.arch_u32("head_count"),
        Err(MetadataError::Missing {
            key: "gemma3.head_count".into()
        })
    );
    // Without general.architecture the arch accessors name that key.
    let g = GgufFile::from_bytes(Image::new(3).kv("x", V::U8(1)).encode()).unwrap();
    let e = g.arch_u32("block_count").unwrap_err();
    assert_eq!(e.key(), "general.architecture");
    // With the wrong type, too.
    let g =
        GgufFile::from_bytes(Image::new(3).kv("general.architecture", V::U8(1)).encode()).unwrap();
    assert!(matches!(
        g.architecture(),
        Err(MetadataError::WrongType { found: "u8", .. })
    ));
}

#[test]
fn value_helpers() {
    assert_eq!(Value::I8(-3).as_i64(), Some(-3));
    assert_eq!(Value::I8(-3).as_u64(), None);
    assert_eq!(Value::U64(u64::MAX).as_i64(), None);
    assert_eq!(Value::U64(u64::MAX).as_u64(), Some(u64::MAX));
    assert_eq!(Value::I32(70_000).as_u32(), Some(70_000));
    assert_eq!(Value::I64(-1).as_i32(), Some(-1));
    assert_eq!(Value::F32(2.0).as_f64(), Some(2.0));
    assert_eq!(Value::U8(2).as_f64(), None);
    assert_eq!(Value::Bool(true).as_bool(), Some(true));
    assert_eq!(Value::String("s".into()).as_str(), Some("s"));
    assert_eq!(Value::U8(0).as_str(), None);
    assert_eq!(Value::Array(vec![]).as_array(), Some(&[][..]));
    let names: Vec<&str> = [
        Value::U8(0),
        Value::I8(0),
        Value::U16(0),
        Value::I16(0),
        Value::U32(0),
        Value::I32(0),
        Value::U64(0),
        Value::I64(0),
        Value::F32(0.0),
        Value::F64(0.0),
        Value::Bool(false),
        Value::String(String::new()),
        Value::Array(vec![]),
    ]
    .iter()
    .map(Value::type_name)
    .collect();
    assert_eq!(
        names,
        [
            "u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64", "f32", "f64", "bool", "string",
            "array"
        ]
    );
}

/// A path in the temp directory, unique to this test process.
fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("sharpi-gguf-{}-{name}", std::process::id()))
}

#[test]
fn open_maps_a_file_and_matches_from_bytes() {
    let bytes = every_type(3).encode();
    let path = temp_path("every_type.gguf");
    std::fs::write(&path, &bytes).unwrap();
    let mapped = GgufFile::open(&path);
    std::fs::remove_file(&path).unwrap();
    let mapped = mapped.unwrap();
    let owned = GgufFile::from_bytes(bytes).unwrap();
    check_every_type(&mapped, 3);
    assert_eq!(mapped.metadata(), owned.metadata());
    assert_eq!(mapped.tensors(), owned.tensors());
    assert_eq!(mapped.data_offset(), owned.data_offset());
    for t in mapped.tensors() {
        assert_eq!(mapped.tensor_data(t), owned.tensor_data(t));
        // A mapped file starts on a page boundary, so tensor data is as
        // aligned in memory as the file says.
        assert_eq!(
            mapped.tensor_data(t).as_ptr() as u64 % mapped.alignment(),
            0
        );
    }
}

#[test]
fn open_errors_name_the_path() {
    let path = temp_path("does-not-exist\nreally.gguf");
    let e = GgufFile::open(&path).unwrap_err();
    assert!(e.is_io());
    assert!(matches!(e.kind, ErrorKind::Io { .. }));
    let msg = e.to_string();
    assert!(msg.contains("does-not-exist\\nreally.gguf"), "{msg}");
    assert!(!msg.contains('\n'), "{msg:?}");

    let dir = std::env::temp_dir();
    let e = GgufFile::open(&dir).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::NotAFile { .. }), "{e}");
    assert!(e.to_string().contains("not a regular file"), "{e}");
}

#[test]
fn open_empty_and_malformed_files() {
    let path = temp_path("empty.gguf");
    std::fs::write(&path, b"").unwrap();
    let e = GgufFile::open(&path);
    let path2 = temp_path("bad.gguf");
    std::fs::write(&path2, b"GGUF\x03\x00\x00\x00").unwrap();
    let e2 = GgufFile::open(&path2);
    std::fs::remove_file(&path).unwrap();
    std::fs::remove_file(&path2).unwrap();
    let e = e.unwrap_err();
    assert_eq!(e.offset, 0);
    assert!(
        matches!(e.kind, ErrorKind::Truncated { what: "magic", .. }),
        "{e}"
    );
    let e2 = e2.unwrap_err();
    assert_eq!(e2.offset, 8);
    assert_eq!(
        e2.to_string(),
        "at byte 8: file ends early: tensor count needs 8 bytes, only 0 left"
    );
}

#[test]
fn long_and_odd_names_are_clipped_and_escaped_in_messages() {
    let long = "k\n".repeat(500);
    let img = Image::new(3).kv(&long, V::U8(1)).kv(&long, V::U8(2));
    let e = GgufFile::from_bytes(img.encode()).unwrap_err();
    let msg = e.to_string();
    assert!(!msg.contains('\n'));
    assert!(msg.len() < 400, "{} bytes: {msg}", msg.len());
    assert!(msg.contains("k\\nk\\n"), "{msg}");
}
