//! Test-only GGUF byte images: a builder that can write well-formed and
//! deliberately malformed files, recording where each count, length and
//! offset field lands, and a trusting decoder for real model headers (used
//! to find their fields and to make small variants of them).
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use engine::{GgmlType, TypeId};

pub const T_U8: u32 = 0;
pub const T_I8: u32 = 1;
pub const T_U16: u32 = 2;
pub const T_I16: u32 = 3;
pub const T_U32: u32 = 4;
pub const T_I32: u32 = 5;
pub const T_F32: u32 = 6;
pub const T_BOOL: u32 = 7;
pub const T_STRING: u32 = 8;
pub const T_ARRAY: u32 = 9;
pub const T_U64: u32 = 10;
pub const T_I64: u32 = 11;
pub const T_F64: u32 = 12;

/// A metadata value as written to the file. Unlike `engine::gguf::Value` it
/// can hold what the parser must reject (raw bool bytes, non-UTF-8 strings,
/// bogus type ids with arbitrary payloads).
#[derive(Clone, Debug, PartialEq)]
pub enum V {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    /// The raw byte stored for a bool.
    Bool(u8),
    Str(Vec<u8>),
    /// Element type id and elements (written as given, even if they do not
    /// match the element type).
    Arr(u32, Vec<V>),
    /// A type id and the raw bytes that follow it.
    Raw(u32, Vec<u8>),
}

impl V {
    pub fn s(s: &str) -> V {
        V::Str(s.as_bytes().to_vec())
    }

    pub fn type_id(&self) -> u32 {
        match self {
            V::U8(_) => T_U8,
            V::I8(_) => T_I8,
            V::U16(_) => T_U16,
            V::I16(_) => T_I16,
            V::U32(_) => T_U32,
            V::I32(_) => T_I32,
            V::U64(_) => T_U64,
            V::I64(_) => T_I64,
            V::F32(_) => T_F32,
            V::F64(_) => T_F64,
            V::Bool(_) => T_BOOL,
            V::Str(_) => T_STRING,
            V::Arr(..) => T_ARRAY,
            V::Raw(id, _) => *id,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Kv {
    pub key: Vec<u8>,
    pub value: V,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub name: Vec<u8>,
    pub dims: Vec<u64>,
    pub ty: u32,
    /// Relative to the data section.
    pub offset: u64,
}

/// What a recorded field holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldKind {
    Version,
    TensorCount,
    KvCount,
    /// A key's length field (the start of a metadata entry).
    KeyLen,
    ValueType,
    /// The first byte of a top-level metadata value.
    Value,
    StringLen,
    ArrayType,
    ArrayLen,
    /// A tensor name's length field (the start of a tensor info).
    NameLen,
    NDims,
    Dim,
    TensorType,
    TensorOffset,
}

#[derive(Clone, Copy, Debug)]
pub struct Field {
    pub at: usize,
    /// 4 or 8 bytes; 0 for a position that is not a number (Value).
    pub width: usize,
    pub kind: FieldKind,
}

pub struct Encoded {
    pub bytes: Vec<u8>,
    pub fields: Vec<Field>,
    /// Where the tensor infos end (before padding).
    pub infos_end: usize,
    /// Where the data section starts.
    pub data_offset: usize,
}

impl Encoded {
    /// The offset of the `nth` field of `kind` (0-based).
    pub fn at(&self, kind: FieldKind, nth: usize) -> usize {
        self.fields
            .iter()
            .filter(|f| f.kind == kind)
            .nth(nth)
            .unwrap_or_else(|| panic!("no field {kind:?} #{nth}"))
            .at
    }
}

/// A GGUF image under construction.
#[derive(Clone, Debug, PartialEq)]
pub struct Image {
    pub magic: [u8; 4],
    pub version: u32,
    /// Written instead of the real tensor count when set.
    pub tensor_count: Option<u64>,
    /// Written instead of the real metadata count when set.
    pub kv_count: Option<u64>,
    pub kvs: Vec<Kv>,
    pub tensors: Vec<Tensor>,
    /// Alignment used for the padding before the data section (and by
    /// `tensor` for offsets). Set `general.alignment` with `alignment()`.
    pub align: u64,
    /// The data section after the padding.
    pub data: Vec<u8>,
}

pub fn align_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

fn ggml(ty: u32) -> GgmlType {
    match GgmlType::from_id(ty) {
        TypeId::Known(t) => t,
        other => panic!("test image uses type {other:?}"),
    }
}

/// The content byte a builder tensor has at data position `i`.
pub fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(31) ^ (i >> 8)) as u8
}

impl Image {
    pub fn new(version: u32) -> Image {
        Image {
            magic: *b"GGUF",
            version,
            tensor_count: None,
            kv_count: None,
            kvs: Vec::new(),
            tensors: Vec::new(),
            align: 32,
            data: Vec::new(),
        }
    }

    pub fn kv(mut self, key: &str, value: V) -> Image {
        self.kvs.push(Kv {
            key: key.as_bytes().to_vec(),
            value,
        });
        self
    }

    /// Adds `general.alignment` and uses it for padding and offsets.
    pub fn alignment(mut self, a: u32) -> Image {
        assert!(self.tensors.is_empty(), "set the alignment before tensors");
        self.align = u64::from(a);
        self.kv("general.alignment", V::U32(a))
    }

    /// Appends a tensor of type `ty` and shape `dims`, with its data at the
    /// next aligned offset, filled with `pattern`.
    pub fn tensor(mut self, name: &str, ty: GgmlType, dims: &[u64]) -> Image {
        let n: u64 = dims.iter().product();
        let n_bytes = ty.bytes_for(n).expect("whole blocks") as usize;
        let offset = align_up(self.data.len() as u64, self.align);
        let end = offset as usize + n_bytes;
        let old = self.data.len();
        self.data.resize(end, 0);
        for i in old..end {
            self.data[i] = if i >= offset as usize { pattern(i) } else { 0 };
        }
        self.tensors.push(Tensor {
            name: name.as_bytes().to_vec(),
            dims: dims.to_vec(),
            ty: ty.id(),
            offset,
        });
        self
    }

    /// Appends a raw tensor info (no data is added).
    pub fn raw_tensor(mut self, name: &[u8], dims: &[u64], ty: u32, offset: u64) -> Image {
        self.tensors.push(Tensor {
            name: name.to_vec(),
            dims: dims.to_vec(),
            ty,
            offset,
        });
        self
    }

    pub fn encode(&self) -> Vec<u8> {
        self.encode_fields().bytes
    }

    pub fn encode_fields(&self) -> Encoded {
        let mut w = Writer {
            buf: Vec::new(),
            fields: Vec::new(),
        };
        w.buf.extend_from_slice(&self.magic);
        w.u32(self.version, Some(FieldKind::Version));
        w.u64(
            self.tensor_count.unwrap_or(self.tensors.len() as u64),
            Some(FieldKind::TensorCount),
        );
        w.u64(
            self.kv_count.unwrap_or(self.kvs.len() as u64),
            Some(FieldKind::KvCount),
        );
        for kv in &self.kvs {
            w.string(&kv.key, FieldKind::KeyLen);
            w.u32(kv.value.type_id(), Some(FieldKind::ValueType));
            w.mark(FieldKind::Value);
            w.payload(&kv.value);
        }
        for t in &self.tensors {
            w.string(&t.name, FieldKind::NameLen);
            w.u32(t.dims.len() as u32, Some(FieldKind::NDims));
            for &d in &t.dims {
                w.u64(d, Some(FieldKind::Dim));
            }
            w.u32(t.ty, Some(FieldKind::TensorType));
            w.u64(t.offset, Some(FieldKind::TensorOffset));
        }
        let infos_end = w.buf.len();
        let data_offset = align_up(infos_end as u64, self.align) as usize;
        w.buf.resize(data_offset, 0);
        w.buf.extend_from_slice(&self.data);
        Encoded {
            bytes: w.buf,
            fields: w.fields,
            infos_end,
            data_offset,
        }
    }

    /// Cuts every metadata array (at any depth) to at most `max` elements.
    pub fn trim_arrays(&mut self, max: usize) {
        fn trim(v: &mut V, max: usize) {
            if let V::Arr(_, items) = v {
                items.truncate(max);
                for i in items {
                    trim(i, max);
                }
            }
        }
        for kv in &mut self.kvs {
            trim(&mut kv.value, max);
        }
    }

    /// Gives every tensor the smallest shape of its rank and type (one block
    /// per row, one row), packs their data and regenerates it: a small,
    /// valid file with the original names, types and metadata.
    pub fn shrink_tensors(&mut self) {
        self.data.clear();
        let tensors = std::mem::take(&mut self.tensors);
        let mut img = std::mem::replace(self, Image::new(0));
        for t in tensors {
            let ty = ggml(t.ty);
            let mut dims = vec![1u64; t.dims.len()];
            dims[0] = ty.block_elems() as u64;
            let name = String::from_utf8(t.name).expect("utf-8 tensor name");
            img = img.tensor(&name, ty, &dims);
        }
        *self = img;
    }
}

struct Writer {
    buf: Vec<u8>,
    fields: Vec<Field>,
}

impl Writer {
    fn mark(&mut self, kind: FieldKind) {
        self.fields.push(Field {
            at: self.buf.len(),
            width: 0,
            kind,
        });
    }

    fn u32(&mut self, v: u32, kind: Option<FieldKind>) {
        if let Some(kind) = kind {
            self.fields.push(Field {
                at: self.buf.len(),
                width: 4,
                kind,
            });
        }
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    fn u64(&mut self, v: u64, kind: Option<FieldKind>) {
        if let Some(kind) = kind {
            self.fields.push(Field {
                at: self.buf.len(),
                width: 8,
                kind,
            });
        }
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    fn string(&mut self, s: &[u8], kind: FieldKind) {
        self.u64(s.len() as u64, Some(kind));
        self.buf.extend_from_slice(s);
    }

    fn payload(&mut self, v: &V) {
        let b = &mut self.buf;
        match v {
            V::U8(x) => b.push(*x),
            V::I8(x) => b.extend_from_slice(&x.to_le_bytes()),
            V::U16(x) => b.extend_from_slice(&x.to_le_bytes()),
            V::I16(x) => b.extend_from_slice(&x.to_le_bytes()),
            V::U32(x) => b.extend_from_slice(&x.to_le_bytes()),
            V::I32(x) => b.extend_from_slice(&x.to_le_bytes()),
            V::U64(x) => b.extend_from_slice(&x.to_le_bytes()),
            V::I64(x) => b.extend_from_slice(&x.to_le_bytes()),
            V::F32(x) => b.extend_from_slice(&x.to_le_bytes()),
            V::F64(x) => b.extend_from_slice(&x.to_le_bytes()),
            V::Bool(x) => b.push(*x),
            V::Str(s) => self.string(s, FieldKind::StringLen),
            V::Arr(elem, items) => {
                self.u32(*elem, Some(FieldKind::ArrayType));
                self.u64(items.len() as u64, Some(FieldKind::ArrayLen));
                for i in items {
                    self.payload(i);
                }
            }
            V::Raw(_, bytes) => b.extend_from_slice(bytes),
        }
    }
}

/// A trusting reader for well-formed files: panics on anything odd. Used only
/// on the real model headers, independently of the reader under test.
pub struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Decoder<'a> {
    fn take(&mut self, n: usize) -> &'a [u8] {
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        s
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().unwrap())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take(8).try_into().unwrap())
    }
    fn string(&mut self) -> Vec<u8> {
        let n = self.u64() as usize;
        self.take(n).to_vec()
    }
    fn value(&mut self, ty: u32) -> V {
        match ty {
            T_U8 => V::U8(self.take(1)[0]),
            T_I8 => V::I8(self.take(1)[0] as i8),
            T_U16 => V::U16(u16::from_le_bytes(self.take(2).try_into().unwrap())),
            T_I16 => V::I16(i16::from_le_bytes(self.take(2).try_into().unwrap())),
            T_U32 => V::U32(self.u32()),
            T_I32 => V::I32(self.u32() as i32),
            T_U64 => V::U64(self.u64()),
            T_I64 => V::I64(self.u64() as i64),
            T_F32 => V::F32(f32::from_bits(self.u32())),
            T_F64 => V::F64(f64::from_bits(self.u64())),
            T_BOOL => V::Bool(self.take(1)[0]),
            T_STRING => V::Str(self.string()),
            T_ARRAY => {
                let elem = self.u32();
                let n = self.u64() as usize;
                V::Arr(elem, (0..n).map(|_| self.value(elem)).collect())
            }
            other => panic!("decoder: value type {other}"),
        }
    }
}

/// Decodes a well-formed GGUF image (or a prefix of one that holds the whole
/// header). The data section of the result is whatever follows the padding
/// in `bytes` (possibly nothing).
pub fn decode(bytes: &[u8]) -> Image {
    let mut d = Decoder { buf: bytes, pos: 0 };
    let magic: [u8; 4] = d.take(4).try_into().unwrap();
    let version = d.u32();
    let n_tensors = d.u64();
    let n_kvs = d.u64();
    let mut img = Image::new(version);
    img.magic = magic;
    for _ in 0..n_kvs {
        let key = d.string();
        let ty = d.u32();
        let value = d.value(ty);
        if key == b"general.alignment" {
            let V::U32(a) = value else {
                panic!("alignment type")
            };
            img.align = u64::from(a);
        }
        img.kvs.push(Kv { key, value });
    }
    for _ in 0..n_tensors {
        let name = d.string();
        let n_dims = d.u32();
        let dims = (0..n_dims).map(|_| d.u64()).collect();
        let ty = d.u32();
        let offset = d.u64();
        img.tensors.push(Tensor {
            name,
            dims,
            ty,
            offset,
        });
    }
    let data_offset = (align_up(d.pos as u64, img.align) as usize).min(bytes.len());
    img.data = bytes[data_offset..].to_vec();
    img
}

/// Where the test models live: `<repo>/models/`.
pub fn models_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../models")
}

pub const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
pub const GEMMA3: &str = "gemma-3-270m-q4_k_m.gguf";

/// The path of a test model; panics with instructions when it is absent
/// (tests must not pass by skipping).
pub fn model_path(name: &str) -> PathBuf {
    let p = models_dir().join(name);
    assert!(
        p.is_file(),
        "test model {} is missing: run scripts/fetch-models first (expected at {})",
        name,
        p.display()
    );
    p
}

/// The first bytes of a model file, through its tensor infos, the padding
/// and `extra` bytes of tensor data.
pub fn model_header(name: &str, extra: usize) -> Vec<u8> {
    use std::io::Read;
    // Real headers are a few MiB (Gemma 3's vocabulary is most of its ~6 MiB).
    const READ: u64 = 32 << 20;
    let path = model_path(name);
    let mut buf = Vec::new();
    std::fs::File::open(&path)
        .unwrap()
        .take(READ)
        .read_to_end(&mut buf)
        .unwrap();
    let end = header_end(&buf);
    assert!(
        end + extra <= buf.len(),
        "{} header is larger than expected",
        path.display()
    );
    buf.truncate(end + extra);
    buf
}

/// The data offset of a well-formed header (panics if `bytes` is cut short).
pub fn header_end(bytes: &[u8]) -> usize {
    let mut d = Decoder { buf: bytes, pos: 0 };
    d.take(8);
    let n_tensors = d.u64();
    let n_kvs = d.u64();
    let mut align = 32;
    for _ in 0..n_kvs {
        let key = d.string();
        let ty = d.u32();
        let v = d.value(ty);
        if key == b"general.alignment" {
            if let V::U32(a) = v {
                align = u64::from(a);
            }
        }
    }
    for _ in 0..n_tensors {
        d.string();
        let n = d.u32() as usize;
        d.take(8 * n + 4 + 8);
    }
    align_up(d.pos as u64, align) as usize
}
