//! One test per class of defect: small valid GGUF images, corrupted in one
//! place, must be rejected with the right error at the right byte offset.

use crate::gguf_support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use engine::gguf::limits::*;
use engine::gguf::{ErrorKind, GgufError, GgufFile};
use engine::GgmlType;
use gguf_support::*;

// ---------------------------------------------------------------------------
// A global allocator that records, per thread, the largest single allocation,
// so tests can check that a file's claims do not turn into allocations.

struct TrackingAlloc;

thread_local! {
    static LARGEST_ALLOC: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded unchanged to the system allocator; the only
// addition is recording a size in a thread-local Cell, which never allocates.
unsafe impl GlobalAlloc for TrackingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = LARGEST_ALLOC.try_with(|m| m.set(m.get().max(layout.size())));
        // SAFETY: same contract as ours, passed through.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours, passed through.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = LARGEST_ALLOC.try_with(|m| m.set(m.get().max(new_size)));
        // SAFETY: same contract as ours, passed through.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: TrackingAlloc = TrackingAlloc;

/// Parses `bytes` and returns the largest single allocation made meanwhile.
fn largest_alloc_while_parsing(bytes: Vec<u8>) -> (Result<GgufFile, GgufError>, usize) {
    LARGEST_ALLOC.with(|m| m.set(0));
    let r = GgufFile::from_bytes(bytes);
    (r, LARGEST_ALLOC.with(|m| m.get()))
}

// ---------------------------------------------------------------------------

/// A small valid file: a few keys of several types and two tensors.
fn base() -> Image {
    Image::new(3)
        .kv("general.architecture", V::s("llama"))
        .kv("llama.block_count", V::U32(2))
        .kv(
            "tokenizer.ggml.tokens",
            V::Arr(T_STRING, vec![V::s("a"), V::s("bc")]),
        )
        .kv("flag", V::Bool(1))
        .tensor("tok_embd.weight", GgmlType::F32, &[8, 2])
        .tensor("blk.0.attn_q.weight", GgmlType::Q4_0, &[32, 2])
}

/// Parses and expects an error; checks the message is one line that starts
/// with the offset.
fn parse_err(bytes: Vec<u8>) -> GgufError {
    match GgufFile::from_bytes(bytes) {
        Ok(f) => panic!("expected an error, parsed {f:?}"),
        Err(e) => {
            let msg = e.to_string();
            assert!(!msg.contains('\n'), "multi-line message: {msg:?}");
            let prefix = format!("at byte {}: ", e.offset);
            assert!(
                msg.starts_with(&prefix),
                "{msg:?} should start with {prefix:?}"
            );
            e
        }
    }
}

fn img_err(img: &Image) -> GgufError {
    parse_err(img.encode())
}

#[test]
fn base_image_is_valid() {
    let f = GgufFile::from_bytes(base().encode()).unwrap();
    assert_eq!(f.tensors().len(), 2);
    assert_eq!(f.metadata().len(), 4);
}

#[test]
fn bad_magic() {
    let mut b = base().encode();
    b[..4].copy_from_slice(b"GGUG");
    let e = parse_err(b);
    assert_eq!(e.offset, 0);
    assert!(matches!(e.kind, ErrorKind::BadMagic { found } if &found == b"GGUG"));
    assert!(e.to_string().contains("not a GGUF file"), "{e}");

    // Pre-GGUF formats are named.
    for (magic, format) in [(b"tjgg", "GGJT"), (b"lmgg", "GGML"), (b"fmgg", "GGMF")] {
        let mut b = base().encode();
        b[..4].copy_from_slice(magic);
        let e = parse_err(b);
        assert!(
            matches!(e.kind, ErrorKind::LegacyFormat { format: f } if f == format),
            "{e}"
        );
    }
}

#[test]
fn unsupported_versions() {
    for v in [0u32, 1, 4, 0xffff_ffff] {
        let mut img = base();
        img.version = v;
        let e = img_err(&img);
        assert_eq!(e.offset, 4);
        assert!(
            matches!(e.kind, ErrorKind::UnsupportedVersion { version } if version == v),
            "{e}"
        );
        assert!(e.to_string().contains(&format!("version {v}")), "{e}");
    }
    let mut img = base();
    img.version = 1;
    assert!(img_err(&img).to_string().contains("32-bit"));
}

#[test]
fn big_endian_version_is_named() {
    for v in [2u32, 3] {
        let mut img = base();
        img.version = v.swap_bytes();
        let e = img_err(&img);
        assert_eq!(e.offset, 4);
        assert!(
            matches!(e.kind, ErrorKind::BigEndian { swapped, .. } if swapped == v),
            "{e}"
        );
        assert!(e.to_string().contains("big-endian"), "{e}");
    }
}

#[test]
fn truncation_at_every_point() {
    let enc = base().encode_fields();
    let full = enc.bytes.len();
    for n in 0..full {
        let e = parse_err(enc.bytes[..n].to_vec());
        if n < enc.infos_end {
            // Inside the header: a read runs out, or a count no longer fits.
            assert!(
                matches!(
                    e.kind,
                    ErrorKind::Truncated { .. } | ErrorKind::CountExceedsFile { .. }
                ),
                "cut at {n}: {e}"
            );
            assert!(e.offset <= n as u64, "cut at {n}: {e}");
        } else {
            // Header complete, tensor data cut: the last tensor is out of
            // bounds (or, in the padding, still the same).
            assert!(
                matches!(e.kind, ErrorKind::TensorOutOfBounds { .. }),
                "cut at {n}: {e}"
            );
        }
    }
    GgufFile::from_bytes(enc.bytes).unwrap();
}

#[test]
fn truncation_names_what_was_being_read() {
    let enc = base().encode_fields();
    // Cut in the middle of the fourth key ("flag").
    let key_bytes = enc.at(FieldKind::KeyLen, 3) + 8;
    let e = parse_err(enc.bytes[..key_bytes + 2].to_vec());
    assert_eq!(e.offset, key_bytes as u64);
    assert!(
        matches!(
            e.kind,
            ErrorKind::Truncated {
                what: "metadata key",
                needed: 4,
                available: 2
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("metadata key"));
}

#[test]
fn huge_tensor_count() {
    for (count, cap) in [
        (u64::MAX, true),
        (1 << 62, true),
        (1 << 32, true),
        (MAX_TENSORS, false),
    ] {
        let mut img = base();
        img.tensor_count = Some(count);
        let e = img_err(&img);
        assert_eq!(e.offset, 8);
        if cap {
            assert!(
                matches!(e.kind, ErrorKind::TooManyTensors { count: c, .. } if c == count),
                "{e}"
            );
        } else {
            assert!(
                matches!(
                    e.kind,
                    ErrorKind::CountExceedsFile {
                        what: "tensor info",
                        ..
                    }
                ),
                "{e}"
            );
        }
    }
}

#[test]
fn huge_kv_count() {
    for (count, cap) in [
        (u64::MAX, true),
        (1 << 32, true),
        (MAX_KVS, false),
        (1000, false),
    ] {
        let mut img = base();
        img.kv_count = Some(count);
        let e = img_err(&img);
        assert_eq!(e.offset, 16);
        if cap {
            assert!(matches!(e.kind, ErrorKind::TooManyKvs { .. }), "{e}");
        } else {
            assert!(
                matches!(
                    e.kind,
                    ErrorKind::CountExceedsFile {
                        what: "metadata entry",
                        ..
                    }
                ),
                "{e}"
            );
        }
    }
}

#[test]
fn huge_array_length() {
    let img = base().kv("arr", V::Arr(T_U64, vec![V::U64(1)]));
    let enc = img.encode_fields();
    let len_at = enc.at(FieldKind::ArrayLen, 1);
    for (len, cap) in [
        (u64::MAX, true),
        (MAX_ARRAY_LEN + 1, true),
        (MAX_ARRAY_LEN, false),
        (1 << 20, false),
    ] {
        let mut b = enc.bytes.clone();
        b[len_at..len_at + 8].copy_from_slice(&len.to_le_bytes());
        let e = parse_err(b);
        assert_eq!(e.offset, len_at as u64, "{e}");
        if cap {
            assert!(matches!(e.kind, ErrorKind::ArrayTooLong { .. }), "{e}");
        } else {
            assert!(
                matches!(e.kind, ErrorKind::CountExceedsFile { min_bytes: 8, .. }),
                "{e}"
            );
        }
    }
}

#[test]
fn array_of_arrays_count_is_checked_against_the_bytes_left() {
    let inner = V::Arr(T_U8, vec![]);
    let img = Image::new(3).kv("a", V::Arr(T_ARRAY, vec![inner; 4]));
    let enc = img.encode_fields();
    // No tensors: the file may end right after the metadata (no padding).
    let mut b = enc.bytes[..enc.infos_end].to_vec();
    GgufFile::from_bytes(b.clone()).unwrap();
    let len_at = enc.at(FieldKind::ArrayLen, 0);
    // 5 empty arrays need 60 bytes; only 48 remain.
    b[len_at..len_at + 8].copy_from_slice(&5u64.to_le_bytes());
    let e = parse_err(b);
    assert_eq!(e.offset, len_at as u64);
    assert!(
        matches!(
            e.kind,
            ErrorKind::CountExceedsFile {
                count: 5,
                min_bytes: 12,
                available: 48,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn claimed_counts_never_become_allocations() {
    // Each image claims far more than it holds; parsing must fail without
    // any allocation near the claimed size.
    let mut cases: Vec<Vec<u8>> = Vec::new();
    let mut img = base();
    img.tensor_count = Some(MAX_TENSORS);
    cases.push(img.encode());
    let mut img = base();
    img.kv_count = Some(MAX_KVS);
    cases.push(img.encode());
    for elem in [T_U64, T_STRING, T_ARRAY, T_U8] {
        let enc = base().kv("arr", V::Arr(elem, vec![])).encode_fields();
        let at = enc.at(FieldKind::ArrayLen, 1);
        let mut b = enc.bytes;
        b[at..at + 8].copy_from_slice(&MAX_ARRAY_LEN.to_le_bytes());
        cases.push(b);
    }
    let enc = base().kv("s", V::s("x")).encode_fields();
    let at = enc.at(FieldKind::StringLen, 2);
    let mut b = enc.bytes;
    b[at..at + 8].copy_from_slice(&MAX_STRING_LEN.to_le_bytes());
    cases.push(b);

    for (i, bytes) in cases.into_iter().enumerate() {
        let size = bytes.len();
        let (r, largest) = largest_alloc_while_parsing(bytes);
        let e = r.expect_err("claims exceed the file");
        assert!(
            largest < 64 * 1024,
            "case {i} ({size}-byte file, {e}): allocated {largest} bytes at once"
        );
    }
}

#[test]
fn huge_string_lengths() {
    // Key length.
    let enc = base().encode_fields();
    let at = enc.at(FieldKind::KeyLen, 0);
    for len in [u64::MAX, MAX_KEY_LEN + 1] {
        let mut b = enc.bytes.clone();
        b[at..at + 8].copy_from_slice(&len.to_le_bytes());
        let e = parse_err(b);
        assert_eq!(e.offset, at as u64);
        assert!(
            matches!(e.kind, ErrorKind::StringTooLong { what: "metadata key", len: l, .. } if l == len),
            "{e}"
        );
    }
    // Tensor name length.
    let at = enc.at(FieldKind::NameLen, 1);
    let mut b = enc.bytes.clone();
    b[at..at + 8].copy_from_slice(&(1u64 << 62).to_le_bytes());
    let e = parse_err(b);
    assert_eq!(e.offset, at as u64);
    assert!(
        matches!(
            e.kind,
            ErrorKind::StringTooLong {
                what: "tensor name",
                ..
            }
        ),
        "{e}"
    );
    // String value length: over the cap, and under the cap but past the end.
    let at = enc.at(FieldKind::StringLen, 0);
    let mut b = enc.bytes.clone();
    b[at..at + 8].copy_from_slice(&(MAX_STRING_LEN + 1).to_le_bytes());
    let e = parse_err(b);
    assert_eq!(e.offset, at as u64);
    assert!(
        matches!(
            e.kind,
            ErrorKind::StringTooLong {
                what: "string value",
                ..
            }
        ),
        "{e}"
    );
    let mut b = enc.bytes.clone();
    b[at..at + 8].copy_from_slice(&100_000u64.to_le_bytes());
    let e = parse_err(b);
    assert_eq!(e.offset, at as u64 + 8);
    assert!(
        matches!(
            e.kind,
            ErrorKind::Truncated {
                what: "string value",
                needed: 100_000,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn invalid_utf8_in_key() {
    let mut img = base();
    img.kvs[1].key = b"llama.\xffblock_count".to_vec();
    let enc = img.encode_fields();
    let e = img_err(&img);
    assert_eq!(e.offset, (enc.at(FieldKind::KeyLen, 1) + 8 + 6) as u64);
    assert!(
        matches!(
            e.kind,
            ErrorKind::InvalidUtf8 {
                what: "metadata key",
                valid_up_to: 6
            }
        ),
        "{e}"
    );
}

#[test]
fn invalid_utf8_in_tensor_name() {
    let mut img = base();
    img.tensors[0].name = b"\xc3(".to_vec();
    let enc = img.encode_fields();
    let e = img_err(&img);
    assert_eq!(e.offset, (enc.at(FieldKind::NameLen, 0) + 8) as u64);
    assert!(
        matches!(
            e.kind,
            ErrorKind::InvalidUtf8 {
                what: "tensor name",
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn bad_value_type() {
    for id in [13u32, 99, u32::MAX] {
        let img = base().kv("bad", V::Raw(id, vec![0; 8]));
        let enc = img.encode_fields();
        let e = img_err(&img);
        assert_eq!(e.offset, enc.at(FieldKind::ValueType, 4) as u64);
        assert!(
            matches!(e.kind, ErrorKind::BadValueType { id: i } if i == id),
            "{e}"
        );
    }
    // As an array's element type.
    let img = base().kv("bad", V::Arr(13, vec![]));
    let enc = img.encode_fields();
    let e = img_err(&img);
    assert_eq!(e.offset, enc.at(FieldKind::ArrayType, 1) as u64);
    assert!(matches!(e.kind, ErrorKind::BadValueType { id: 13 }), "{e}");
}

#[test]
fn bad_bool() {
    let img = base().kv("b", V::Bool(2));
    let enc = img.encode_fields();
    let e = img_err(&img);
    assert_eq!(e.offset, enc.at(FieldKind::Value, 4) as u64);
    assert!(matches!(e.kind, ErrorKind::BadBool { byte: 2 }), "{e}");

    let img = base().kv(
        "b",
        V::Arr(T_BOOL, vec![V::Bool(0), V::Bool(1), V::Bool(0xff)]),
    );
    let enc = img.encode_fields();
    let e = img_err(&img);
    assert_eq!(e.offset, (enc.at(FieldKind::ArrayLen, 1) + 8 + 2) as u64);
    assert!(matches!(e.kind, ErrorKind::BadBool { byte: 0xff }), "{e}");
}

fn nested(depth: u32) -> V {
    if depth == 1 {
        V::Arr(T_U8, vec![V::U8(7)])
    } else {
        V::Arr(T_ARRAY, vec![nested(depth - 1)])
    }
}

#[test]
fn nesting_too_deep() {
    GgufFile::from_bytes(base().kv("n", nested(MAX_NESTING_DEPTH)).encode()).unwrap();
    let img = base().kv("n", nested(MAX_NESTING_DEPTH + 1));
    let enc = img.encode_fields();
    let e = img_err(&img);
    // Reported at the element type field of the deepest allowed array.
    let deepest = 1 + MAX_NESTING_DEPTH as usize - 1;
    assert_eq!(e.offset, enc.at(FieldKind::ArrayType, deepest) as u64);
    assert!(matches!(e.kind, ErrorKind::NestingTooDeep { .. }), "{e}");
    // Far deeper nesting is refused just the same (no stack exhaustion).
    let e = img_err(&base().kv("n", nested(10_000)));
    assert!(matches!(e.kind, ErrorKind::NestingTooDeep { .. }), "{e}");
}

#[test]
fn duplicate_key() {
    let img = base().kv("llama.block_count", V::U32(3));
    let enc = img.encode_fields();
    let e = img_err(&img);
    assert_eq!(e.offset, enc.at(FieldKind::KeyLen, 4) as u64);
    assert!(
        matches!(&e.kind, ErrorKind::DuplicateKey { key } if key == "llama.block_count"),
        "{e}"
    );
    assert!(e.to_string().contains("\"llama.block_count\""));
}

#[test]
fn duplicate_tensor_name() {
    let img = base().tensor("tok_embd.weight", GgmlType::F16, &[4]);
    let enc = img.encode_fields();
    let e = img_err(&img);
    assert_eq!(e.offset, enc.at(FieldKind::NameLen, 2) as u64);
    assert!(
        matches!(&e.kind, ErrorKind::DuplicateTensor { name } if name == "tok_embd.weight"),
        "{e}"
    );
}

#[test]
fn too_many_dims() {
    let img = base().raw_tensor(b"t", &[1, 1, 1, 1, 1], GgmlType::F32.id(), 0);
    let enc = img.encode_fields();
    let e = img_err(&img);
    assert_eq!(e.offset, enc.at(FieldKind::NDims, 2) as u64);
    assert!(
        matches!(
            e.kind,
            ErrorKind::TooManyDims {
                n_dims: 5,
                max: 4,
                ..
            }
        ),
        "{e}"
    );

    // A huge n_dims is refused before anything is read for it.
    let mut b = enc.bytes.clone();
    let at = enc.at(FieldKind::NDims, 2);
    b[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    let e = parse_err(b);
    assert!(
        matches!(
            e.kind,
            ErrorKind::TooManyDims {
                n_dims: u32::MAX,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn no_dims() {
    let img = base().raw_tensor(b"t", &[], GgmlType::F32.id(), 0);
    let enc = img.encode_fields();
    let e = img_err(&img);
    assert_eq!(e.offset, enc.at(FieldKind::NDims, 2) as u64);
    assert!(matches!(e.kind, ErrorKind::NoDims { .. }), "{e}");
}

#[test]
fn zero_dim() {
    let img = base().raw_tensor(b"t", &[8, 0, 2], GgmlType::F32.id(), 0);
    let enc = img.encode_fields();
    let e = img_err(&img);
    // Dims of the first two tensors come first: 2 + 2.
    assert_eq!(e.offset, enc.at(FieldKind::Dim, 4 + 1) as u64);
    assert!(matches!(e.kind, ErrorKind::ZeroDim { index: 1, .. }), "{e}");
}

#[test]
fn dim_too_large() {
    let img = base().raw_tensor(b"t", &[MAX_DIM + 1], GgmlType::F32.id(), 0);
    let e = img_err(&img);
    assert!(
        matches!(e.kind, ErrorKind::DimTooLarge { index: 0, .. }),
        "{e}"
    );
}

#[test]
fn element_count_overflow() {
    let img = base().raw_tensor(b"t", &[1 << 40, 1 << 40], GgmlType::F32.id(), 0);
    let enc = img.encode_fields();
    let e = img_err(&img);
    assert_eq!(e.offset, enc.at(FieldKind::Dim, 4) as u64);
    assert!(
        matches!(e.kind, ErrorKind::ElementCountOverflow { .. }),
        "{e}"
    );

    // No overflow, but more elements than the cap.
    let img = base().raw_tensor(b"t", &[1 << 30, 1 << 20], GgmlType::F32.id(), 0);
    let e = img_err(&img);
    assert!(
        matches!(e.kind, ErrorKind::TooManyElements { count, .. } if count == 1 << 50),
        "{e}"
    );
}

#[test]
fn not_a_block_multiple() {
    let img = base().raw_tensor(b"t", &[33, 1], GgmlType::Q4_0.id(), 0);
    let enc = img.encode_fields();
    let e = img_err(&img);
    assert_eq!(e.offset, enc.at(FieldKind::Dim, 4) as u64);
    assert!(
        matches!(
            e.kind,
            ErrorKind::NotBlockMultiple {
                ty: GgmlType::Q4_0,
                row_len: 33,
                block: 32,
                ..
            }
        ),
        "{e}"
    );
    // 2 rows of 16: 32 elements in all, but rows must be whole blocks.
    let img = base().raw_tensor(b"t", &[16, 2], GgmlType::Q4_0.id(), 0);
    let e = img_err(&img);
    assert!(
        matches!(e.kind, ErrorKind::NotBlockMultiple { row_len: 16, .. }),
        "{e}"
    );
    // K-quants have 256-element blocks.
    let img = base().raw_tensor(b"t", &[128], GgmlType::Q4_K.id(), 0);
    let e = img_err(&img);
    assert!(
        matches!(e.kind, ErrorKind::NotBlockMultiple { block: 256, .. }),
        "{e}"
    );
}

#[test]
fn unknown_type() {
    for id in [40u32, 1000, u32::MAX] {
        let img = base().raw_tensor(b"t", &[32], id, 0);
        let enc = img.encode_fields();
        let e = img_err(&img);
        assert_eq!(e.offset, enc.at(FieldKind::TensorType, 2) as u64);
        assert!(
            matches!(e.kind, ErrorKind::UnknownType { id: i, .. } if i == id),
            "{e}"
        );
        assert!(e.to_string().contains(&id.to_string()));
    }
}

#[test]
fn removed_type() {
    for (id, name) in [
        (4u32, "Q4_2"),
        (5, "Q4_3"),
        (31, "Q4_0_4_4"),
        (36, "IQ4_NL_4_4"),
    ] {
        let img = base().raw_tensor(b"t", &[32], id, 0);
        let enc = img.encode_fields();
        let e = img_err(&img);
        assert_eq!(e.offset, enc.at(FieldKind::TensorType, 2) as u64);
        assert!(
            matches!(e.kind, ErrorKind::RemovedType { name: n, .. } if n == name),
            "{e}"
        );
        assert!(e.to_string().contains(name));
    }
}

#[test]
fn bad_alignment_value() {
    for a in [0u32, 3, 48, u32::MAX] {
        let img = Image::new(3).kv("general.alignment", V::U32(a));
        let enc = img.encode_fields();
        let e = img_err(&img);
        assert_eq!(e.offset, enc.at(FieldKind::Value, 0) as u64);
        assert!(
            matches!(e.kind, ErrorKind::BadAlignment { value } if value == a),
            "{e}"
        );
    }
}

#[test]
fn alignment_of_the_wrong_type() {
    for v in [V::U64(32), V::I32(32), V::U16(32), V::s("32")] {
        let img = Image::new(3).kv("general.alignment", v.clone());
        let enc = img.encode_fields();
        let e = img_err(&img);
        assert_eq!(e.offset, enc.at(FieldKind::ValueType, 0) as u64);
        assert!(
            matches!(e.kind, ErrorKind::AlignmentWrongType { .. }),
            "{v:?}: {e}"
        );
    }
}

#[test]
fn tensor_out_of_bounds() {
    let mut img = base();
    img.tensors[1].offset = 1 << 20;
    let enc = img.encode_fields();
    let e = img_err(&img);
    assert_eq!(e.offset, enc.at(FieldKind::TensorOffset, 1) as u64);
    assert!(
        matches!(e.kind, ErrorKind::TensorOutOfBounds { offset, .. } if offset == 1 << 20),
        "{e}"
    );

    // Offsets near u64::MAX must not overflow.
    let mut img = base();
    img.tensors[0].offset = !31; // u64::MAX rounded down to the alignment
    let e = img_err(&img);
    assert!(matches!(e.kind, ErrorKind::TensorOutOfBounds { .. }), "{e}");

    // One byte short.
    let mut b = base().encode();
    b.pop();
    let e = parse_err(b);
    assert!(matches!(e.kind, ErrorKind::TensorOutOfBounds { .. }), "{e}");
}

#[test]
fn misaligned_tensor_offset() {
    let mut img = base();
    img.tensors[1].offset += 4;
    img.data.extend_from_slice(&[0; 64]);
    let enc = img.encode_fields();
    let e = img_err(&img);
    assert_eq!(e.offset, enc.at(FieldKind::TensorOffset, 1) as u64);
    assert!(
        matches!(e.kind, ErrorKind::MisalignedTensor { alignment: 32, .. }),
        "{e}"
    );
}

#[test]
fn overlapping_tensors() {
    // Same offset.
    let mut img = base();
    img.tensors[1].offset = 0;
    let enc = img.encode_fields();
    let e = img_err(&img);
    assert_eq!(e.offset, enc.at(FieldKind::TensorOffset, 1) as u64);
    assert!(
        matches!(e.kind, ErrorKind::OverlappingTensors { .. }),
        "{e}"
    );

    // Partial overlap, listed in reverse offset order: reported at the tensor
    // that starts inside the other.
    let img = Image::new(3)
        .raw_tensor(b"late", &[16], GgmlType::F32.id(), 32)
        .raw_tensor(b"early", &[16], GgmlType::F32.id(), 0);
    let mut img = img;
    img.data = vec![0; 96];
    let enc = img.encode_fields();
    let e = img_err(&img);
    assert_eq!(e.offset, enc.at(FieldKind::TensorOffset, 0) as u64);
    assert!(
        matches!(&e.kind, ErrorKind::OverlappingTensors { tensor, other, other_end: _, .. }
            if tensor == "late" && other == "early"),
        "{e}"
    );
}
