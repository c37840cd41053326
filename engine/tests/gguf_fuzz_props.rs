//! Property test: mutated real GGUF headers never make the reader panic, and
//! it either accepts them (and then every accessor and tensor slice works and
//! the documented invariants hold) or rejects them with a one-line error.
//!
//! Seeds are the real test models' headers (models/, fetched by
//! scripts/fetch-models; the test fails if they are absent):
//! - small valid variants: real metadata with every array cut to 16 elements
//!   and every tensor shrunk to one block (most cases: fast to parse, and
//!   mutations of them often still parse, which exercises the Ok path);
//! - the untouched headers cut after the tensor infos plus 4 KiB of data
//!   (full-size vocabularies; mostly SmolLM2's, some of Gemma 3's).
//!
//! Mutations: truncation, byte flips, overwriting count/length/type/offset
//! fields (found by walking the header) with huge or boundary values,
//! overwriting 8 arbitrary bytes, splicing a chunk of the file elsewhere,
//! inserting and deleting bytes.

use crate::gguf_support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use engine::gguf::{GgufFile, Value};
use gguf_support::*;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::TestRunner;

const CASES: u32 = 2000;

struct Seed {
    name: &'static str,
    bytes: Vec<u8>,
    /// (position, width) of every count, length, type and offset field.
    fields: Vec<(usize, usize)>,
}

fn seed(name: &'static str, img: &Image) -> Seed {
    let enc = img.encode_fields();
    let fields = enc
        .fields
        .iter()
        .filter(|f| f.width > 0)
        .map(|f| (f.at, f.width))
        .collect();
    Seed {
        name,
        bytes: enc.bytes,
        fields,
    }
}

fn seeds() -> Vec<Seed> {
    let mut out = Vec::new();
    let mut small = Vec::new();
    let mut cut = Vec::new();
    for (model, small_name, cut_name) in [
        (SMOLLM2, "smollm2-small", "smollm2-cut"),
        (GEMMA3, "gemma3-small", "gemma3-cut"),
    ] {
        let header = model_header(model, 4096);
        let real = decode(&header);
        assert_eq!(real.encode(), header, "{model}: decoder round trip");
        cut.push(seed(cut_name, &real));
        let mut img = real;
        img.trim_arrays(16);
        img.shrink_tensors();
        let s = seed(small_name, &img);
        GgufFile::from_bytes(s.bytes.clone())
            .unwrap_or_else(|e| panic!("{small_name} seed must be valid: {e}"));
        small.push(s);
    }
    // Order: smollm2-small, gemma3-small, smollm2-cut, gemma3-cut.
    out.extend(small);
    out.extend(cut);
    out
}

#[derive(Clone, Debug)]
enum Mutation {
    Truncate(Index),
    Flip(Index, u8),
    /// Overwrite a count/length/type/offset field with a value.
    Field(Index, u64),
    /// Overwrite 8 bytes anywhere.
    Word(Index, u64),
    Splice {
        src: Index,
        len: usize,
        dst: Index,
        replace: bool,
    },
    Insert(Index, Vec<u8>),
    Delete(Index, usize),
}

fn interesting_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        6 => prop::sample::select(vec![
            u64::MAX,
            u64::MAX - 1,
            1 << 63,
            1 << 62,
            (1 << 40) + 1,
            1 << 40,
            1 << 32,
            (1 << 32) - 1,
            1 << 31,
            (1 << 24) + 1,
            1 << 24,
            1 << 20,
            (1 << 16) + 1,
            1 << 16,
            1025,
            256,
            64,
            33,
            32,
            31,
            13,
            12,
            9,
            8,
            7,
            5,
            4,
            3,
            2,
            1,
            0,
        ]),
        2 => 0u64..300,
        1 => any::<u64>(),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        1 => any::<Index>().prop_map(Mutation::Truncate),
        3 => (any::<Index>(), 1u8..=255).prop_map(|(i, x)| Mutation::Flip(i, x)),
        5 => (any::<Index>(), interesting_u64()).prop_map(|(i, v)| Mutation::Field(i, v)),
        1 => (any::<Index>(), interesting_u64()).prop_map(|(i, v)| Mutation::Word(i, v)),
        1 => (any::<Index>(), 1usize..64, any::<Index>(), any::<bool>()).prop_map(
            |(src, len, dst, replace)| Mutation::Splice { src, len, dst, replace }
        ),
        1 => (any::<Index>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(i, b)| Mutation::Insert(i, b)),
        1 => (any::<Index>(), 1usize..32).prop_map(|(i, n)| Mutation::Delete(i, n)),
    ]
}

fn apply(bytes: &mut Vec<u8>, fields: &[(usize, usize)], m: &Mutation) {
    if bytes.is_empty() {
        return;
    }
    let len = bytes.len();
    match m {
        Mutation::Truncate(i) => bytes.truncate(i.index(len)),
        Mutation::Flip(i, x) => bytes[i.index(len)] ^= x,
        Mutation::Field(i, v) => {
            let (at, width) = fields[i.index(fields.len())];
            if at + width <= len {
                bytes[at..at + width].copy_from_slice(&v.to_le_bytes()[..width]);
            }
        }
        Mutation::Word(i, v) => {
            let at = i.index(len);
            let n = (len - at).min(8);
            bytes[at..at + n].copy_from_slice(&v.to_le_bytes()[..n]);
        }
        Mutation::Splice {
            src,
            len: n,
            dst,
            replace,
        } => {
            let s = src.index(len);
            let chunk: Vec<u8> = bytes[s..(s + n).min(len)].to_vec();
            let d = dst.index(len);
            if *replace {
                let end = (d + chunk.len()).min(len);
                bytes[d..end].copy_from_slice(&chunk[..end - d]);
            } else {
                bytes.splice(d..d, chunk);
            }
        }
        Mutation::Insert(i, b) => {
            let at = i.index(len);
            bytes.splice(at..at, b.iter().copied());
        }
        Mutation::Delete(i, n) => {
            let at = i.index(len);
            bytes.drain(at..(at + n).min(len));
        }
    }
}

/// Touches everything a parsed file offers and checks its invariants.
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
        let _ = (f.get_u32_opt(key), f.get_f32_opt(key), f.get_str_opt(key));
        walk(value);
    }
    let _ = f.architecture();
    let _ = (f.arch_u32("block_count"), f.arch_f32("rope.freq_base"));
    let _ = (f.arch_u32_opt("context_length"), f.arch_key("x"));
    let mut ranges = Vec::new();
    for t in f.tensors() {
        assert!(std::ptr::eq(f.tensor(&t.name).unwrap(), t));
        assert!((1..=4).contains(&t.dims.len()));
        assert!(t.dims.iter().all(|&d| d > 0));
        assert_eq!(t.row_len() % t.ty.block_elems() as u64, 0);
        assert_eq!(t.ty.bytes_for(t.n_elements()), Some(t.n_bytes));
        assert!(t.offset >= f.data_offset());
        assert_eq!((t.offset - f.data_offset()) % f.alignment(), 0);
        assert!(t.offset + t.n_bytes <= size);
        let data = f.tensor_data(t);
        assert_eq!(data.len() as u64, t.n_bytes);
        ranges.push(t.byte_range());
    }
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
    if let Some(items) = v.as_array() {
        for i in items {
            walk(i);
        }
    }
}

#[test]
fn mutated_real_headers_never_panic() {
    let seeds = seeds();
    let oks = AtomicUsize::new(0);
    let per_seed: Vec<AtomicUsize> = seeds.iter().map(|_| AtomicUsize::new(0)).collect();
    let error_kinds: Mutex<BTreeMap<String, usize>> = Mutex::new(BTreeMap::new());

    let mut config = ProptestConfig::with_cases(CASES);
    config.failure_persistence = None;
    config.max_shrink_time = 60_000;
    let mut runner = TestRunner::new(config);
    // Mostly the small variants; the full-size headers cost more per parse.
    let which = prop_oneof![10 => Just(0usize), 6 => Just(1), 3 => Just(2), 1 => Just(3)];
    let strategy = (which, prop::collection::vec(mutation(), 1..5));

    let start = Instant::now();
    let result = runner.run(&strategy, |(which, mutations)| {
        let seed = &seeds[which];
        per_seed[which].fetch_add(1, Ordering::Relaxed);
        let mut bytes = seed.bytes.clone();
        for m in &mutations {
            apply(&mut bytes, &seed.fields, m);
        }
        let len = bytes.len() as u64;
        match GgufFile::from_bytes(bytes) {
            Ok(f) => {
                oks.fetch_add(1, Ordering::Relaxed);
                exercise(&f);
            }
            Err(e) => {
                let msg = e.to_string();
                prop_assert!(
                    !msg.contains('\n'),
                    "{}: multi-line error {:?}",
                    seed.name,
                    msg
                );
                prop_assert!(msg.starts_with("at byte "), "{}: {:?}", seed.name, msg);
                prop_assert!(
                    e.offset <= len,
                    "{}: offset past the end: {}",
                    seed.name,
                    msg
                );
                let kind = format!("{:?}", e.kind);
                let kind = kind.split([' ', '{', '(']).next().unwrap_or("").to_string();
                *error_kinds.lock().unwrap().entry(kind).or_default() += 1;
            }
        }
        Ok(())
    });
    let elapsed = start.elapsed();
    if let Err(e) = result {
        panic!("{e}");
    }

    let oks = oks.into_inner();
    let kinds = error_kinds.into_inner().unwrap();
    let per_seed: Vec<(&str, usize)> = seeds
        .iter()
        .zip(&per_seed)
        .map(|(s, n)| (s.name, n.load(Ordering::Relaxed)))
        .collect();
    let total: usize = per_seed.iter().map(|p| p.1).sum();
    eprintln!(
        "{total} cases in {elapsed:.2?}: {oks} parsed, {} rejected; seeds {per_seed:?}",
        total - oks
    );
    eprintln!("error kinds: {kinds:?}");
    assert!(total >= CASES as usize, "ran only {total} cases");
    // The mutations must reach both outcomes and many different checks, or
    // the test is not exercising the parser.
    assert!(
        oks >= CASES as usize / 50,
        "only {oks} mutated files parsed"
    );
    assert!(
        total - oks >= CASES as usize / 2,
        "only {} rejected",
        total - oks
    );
    assert!(
        kinds.len() >= 12,
        "only {} error kinds seen: {kinds:?}",
        kinds.len()
    );
}
