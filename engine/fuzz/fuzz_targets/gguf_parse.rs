//! Feeds arbitrary bytes to the GGUF reader. On success, touches every
//! accessor and every tensor's data, and checks the invariants the reader
//! promises (the same ones tests/gguf_fuzz_props.rs checks).
#![no_main]

use engine::gguf::{GgufFile, Value};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match GgufFile::from_bytes(data.to_vec()) {
        Ok(f) => exercise(&f),
        Err(e) => {
            let msg = e.to_string();
            assert!(!msg.contains('\n'), "multi-line error: {msg:?}");
            assert!(e.offset <= data.len() as u64, "offset past the end: {msg}");
        }
    }
});

fn exercise(f: &GgufFile) {
    let size = f.file_size();
    assert!(f.version() == 2 || f.version() == 3);
    assert!(f.alignment().is_power_of_two());
    assert_eq!(f.data_offset() % f.alignment(), 0);
    for (key, value) in f.metadata() {
        assert!(std::ptr::eq(f.get(key).unwrap(), value));
        let _ = (
            f.get_str(key),
            f.get_u32(key),
            f.get_u64(key),
            f.get_i64(key),
        );
        let _ = (f.get_f32(key), f.get_bool(key), f.get_array(key));
        let _ = (f.get_u32_opt(key), f.get_u64_opt(key), f.get_f32_opt(key));
        let _ = (
            f.get_bool_opt(key),
            f.get_str_opt(key),
            f.get_array_opt(key),
        );
        walk(value);
    }
    let _ = f.lossy_string_count();
    let _ = f.architecture();
    let _ = (f.arch_u32("block_count"), f.arch_f32("rope.freq_base"));
    let _ = (
        f.arch_u32_opt("context_length"),
        f.arch_f32_opt("x"),
        f.arch_key("x"),
    );
    let mut ranges = Vec::new();
    let mut checksum = 0u8;
    for t in f.tensors() {
        assert!(std::ptr::eq(f.tensor(&t.name).unwrap(), t));
        assert!((1..=4).contains(&t.dims.len()));
        assert!(t.dims.iter().all(|&d| d > 0));
        assert_eq!(t.row_len() % t.ty.block_elems() as u64, 0);
        assert_eq!(t.ty.bytes_for(t.n_elements()), Some(t.n_bytes));
        let _ = t.n_rows();
        assert!(t.offset >= f.data_offset());
        assert_eq!((t.offset - f.data_offset()) % f.alignment(), 0);
        assert!(t.offset + t.n_bytes <= size);
        let data = f.tensor_data(t);
        assert_eq!(data.len() as u64, t.n_bytes);
        checksum ^= data.iter().fold(0, |a, &b| a ^ b);
        ranges.push(t.byte_range());
    }
    std::hint::black_box(checksum);
    ranges.sort_by_key(|r| r.start);
    for w in ranges.windows(2) {
        assert!(w[0].end <= w[1].start, "overlap {:?} {:?}", w[0], w[1]);
    }
}

fn walk(v: &Value) {
    let _ = (
        v.type_name(),
        v.as_u64(),
        v.as_i64(),
        v.as_f64(),
        v.as_str(),
    );
    let _ = (v.as_u32(), v.as_i32(), v.as_f32(), v.as_bool());
    if let Some(items) = v.as_array() {
        for i in items {
            walk(i);
        }
    }
}
