//! Writes GGUF v3 files.
//!
//! [`GgufWriter`] collects metadata (in insertion order) and tensors (in the
//! order they are added), checks everything as it comes in, and writes the
//! file the way ggml's own `gguf_write_to_file` lays it out:
//!
//! ```text
//! "GGUF" | version 3 (u32) | tensor count (u64) | metadata count (u64)
//! metadata: key (u64 length + bytes) | value type (u32) | value
//! tensor infos: name | n_dims (u32) | dims (u64 each) | ggml type (u32) | offset (u64)
//! zero padding to the alignment
//! tensor data, each tensor followed by zero padding to the alignment
//! ```
//!
//! Offsets are relative to the start of the data section and each is a
//! multiple of the alignment: `general.alignment` when set (a power-of-two
//! u32), 32 otherwise. Like ggml, the last tensor is padded too, so the file
//! size is a multiple of the alignment whenever there are tensors.
//!
//! Everything the writer accepts, [`GgufFile`](super::GgufFile) reads back:
//! the writer enforces the reader's [`limits`](super::limits) and its rules
//! (homogeneous arrays, unique names, rows of whole blocks, data sizes that
//! match type and shape). It also keeps tensor names within ggml's 63 bytes
//! so that llama.cpp can load what it writes. Nested arrays are written as
//! GGUF allows (each inner array with its own element type), though
//! llama.cpp does not read them. An empty array carries no element type in
//! [`Value`]; it is written with element type `u8`.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use super::error::clip;
use super::limits::*;
use super::value::{type_id, Value};
use crate::ggml_type::GgmlType;

/// The GGUF version this writer produces.
pub const VERSION: u32 = 3;

/// Longest tensor name ggml can hold (its GGML_MAX_NAME is 64, NUL included).
pub const MAX_GGML_NAME_LEN: usize = 63;

/// Something the writer refuses to write, or an I/O failure while writing.
/// Every message is one line.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    #[error("metadata key {:?} is {len} bytes, more than the limit of {max}", clip(.key))]
    KeyTooLong { key: String, len: usize, max: u64 },

    #[error("metadata key {:?}: {what}", clip(.key))]
    BadValue { key: String, what: String },

    #[error("general.alignment must be a u32 power of two, got {found}")]
    BadAlignment { found: String },

    #[error("{count} metadata keys, more than the limit of {max}")]
    TooManyKvs { count: u64, max: u64 },

    #[error("metadata holds {count} values in all, more than the limit of {max}")]
    TooManyValues { count: u64, max: u64 },

    #[error("{count} tensors, more than the limit of {max}")]
    TooManyTensors { count: u64, max: u64 },

    #[error("duplicate tensor name {:?}", clip(.name))]
    DuplicateTensor { name: String },

    #[error("tensor name {:?} is {len} bytes, more than ggml's {max}", clip(.name))]
    TensorNameTooLong {
        name: String,
        len: usize,
        max: usize,
    },

    #[error("tensor {:?}: {what}", clip(.name))]
    BadShape { name: String, what: String },

    #[error("tensor {:?} ({ty}, dims {dims:?}) needs {expected} bytes of data, got {actual}", clip(.name))]
    DataSize {
        name: String,
        ty: GgmlType,
        dims: Vec<u64>,
        expected: u64,
        actual: u64,
    },

    #[error("writing {path:?}: {source}")]
    File { path: PathBuf, source: io::Error },

    #[error("writing GGUF: {0}")]
    Io(#[from] io::Error),
}

/// One tensor to be written: its description and its bytes (owned, or
/// borrowed e.g. from a mapped input file).
#[derive(Clone, Debug)]
pub struct PendingTensor<'a> {
    pub name: String,
    pub ty: GgmlType,
    /// Dimensions in ggml `ne` order (`dims[0]` is the row length).
    pub dims: Vec<u64>,
    pub data: Cow<'a, [u8]>,
}

/// Where everything lands in the file [`GgufWriter::write_to`] produces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub alignment: u64,
    /// Bytes of magic, counts, metadata and tensor infos (before padding).
    pub header_len: u64,
    /// Absolute offset of the data section.
    pub data_offset: u64,
    /// Offset of each tensor relative to the data section, in tensor order.
    pub tensor_offsets: Vec<u64>,
    /// Total file size.
    pub file_size: u64,
}

/// Collects metadata and tensors, then writes a GGUF v3 file. See the
/// module documentation for the layout.
#[derive(Clone, Debug, Default)]
pub struct GgufWriter<'a> {
    metadata: Vec<(String, Value)>,
    tensors: Vec<PendingTensor<'a>>,
    names: HashSet<String>,
}

impl<'a> GgufWriter<'a> {
    pub fn new() -> GgufWriter<'a> {
        GgufWriter::default()
    }

    /// Sets `key` to `value`. A new key goes after the existing ones; an
    /// existing key keeps its place and gets the new value (use
    /// [`remove`](Self::remove) first to move it to the end).
    pub fn set(&mut self, key: impl Into<String>, value: Value) -> Result<(), WriteError> {
        let key = key.into();
        check_key(&key)?;
        check_value(&key, &value)?;
        if key == ALIGNMENT_KEY {
            match value {
                Value::U32(a) if a.is_power_of_two() => {}
                ref other => {
                    return Err(WriteError::BadAlignment {
                        found: format!("{} {}", other.type_name(), short(other)),
                    })
                }
            }
        }
        if let Some(slot) = self.metadata.iter_mut().find(|(k, _)| *k == key) {
            slot.1 = value;
            return Ok(());
        }
        let count = self.metadata.len() as u64 + 1;
        if count > MAX_KVS {
            return Err(WriteError::TooManyKvs {
                count,
                max: MAX_KVS,
            });
        }
        self.metadata.push((key, value));
        Ok(())
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<Value> {
        let i = self.metadata.iter().position(|(k, _)| k == key)?;
        Some(self.metadata.remove(i).1)
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// All metadata, in the order it will be written.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.metadata
    }

    /// All tensors, in the order they will be written.
    pub fn tensors(&self) -> &[PendingTensor<'a>] {
        &self.tensors
    }

    /// Adds a tensor of type `ty` and shape `dims` (ggml `ne` order, 1 to 4
    /// nonzero dimensions, `dims[0]` a whole number of `ty`'s blocks) whose
    /// bytes are `data`, exactly as many as type and shape need.
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        ty: GgmlType,
        dims: &[u64],
        data: impl Into<Cow<'a, [u8]>>,
    ) -> Result<(), WriteError> {
        let name = name.into();
        let data = data.into();
        if name.len() > MAX_GGML_NAME_LEN {
            return Err(WriteError::TensorNameTooLong {
                len: name.len(),
                name,
                max: MAX_GGML_NAME_LEN,
            });
        }
        if self.names.contains(&name) {
            return Err(WriteError::DuplicateTensor { name });
        }
        let count = self.tensors.len() as u64 + 1;
        if count > MAX_TENSORS {
            return Err(WriteError::TooManyTensors {
                count,
                max: MAX_TENSORS,
            });
        }
        let expected = tensor_bytes(&name, ty, dims)?;
        if data.len() as u64 != expected {
            return Err(WriteError::DataSize {
                name,
                ty,
                dims: dims.to_vec(),
                expected,
                actual: data.len() as u64,
            });
        }
        self.names.insert(name.clone());
        self.tensors.push(PendingTensor {
            name,
            ty,
            dims: dims.to_vec(),
            data,
        });
        Ok(())
    }

    /// The data alignment: `general.alignment` if set, else 32.
    pub fn alignment(&self) -> u64 {
        match self.get(ALIGNMENT_KEY) {
            Some(Value::U32(a)) => u64::from(*a),
            _ => DEFAULT_ALIGNMENT,
        }
    }

    /// Where the header, each tensor and the end of the file will be.
    pub fn layout(&self) -> Result<Layout, WriteError> {
        self.check_total_values()?;
        let header_len = self.header_len();
        Ok(self.layout_for(header_len))
    }

    fn layout_for(&self, header_len: u64) -> Layout {
        let alignment = self.alignment();
        let data_offset = align_up(header_len, alignment);
        let mut tensor_offsets = Vec::with_capacity(self.tensors.len());
        let mut rel = 0u64;
        for t in &self.tensors {
            tensor_offsets.push(rel);
            rel = align_up(rel + t.data.len() as u64, alignment);
        }
        Layout {
            alignment,
            header_len,
            data_offset,
            tensor_offsets,
            file_size: data_offset + rel,
        }
    }

    fn check_total_values(&self) -> Result<(), WriteError> {
        let count: u64 = self.metadata.iter().map(|(_, v)| count_values(v)).sum();
        if count > MAX_TOTAL_VALUES {
            return Err(WriteError::TooManyValues {
                count,
                max: MAX_TOTAL_VALUES,
            });
        }
        Ok(())
    }

    fn header_len(&self) -> u64 {
        let mut n = 4 + 4 + 8 + 8;
        for (k, v) in &self.metadata {
            n += 8 + k.len() as u64 + 4 + encoded_len(v);
        }
        for t in &self.tensors {
            n += 8 + t.name.len() as u64 + 4 + 8 * t.dims.len() as u64 + 4 + 8;
        }
        n
    }

    /// Encodes magic, counts, metadata and tensor infos for `layout`.
    fn header_bytes(&self, layout: &Layout) -> Vec<u8> {
        let mut h = Vec::with_capacity(layout.header_len as usize);
        h.extend_from_slice(b"GGUF");
        h.extend_from_slice(&VERSION.to_le_bytes());
        h.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        h.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (k, v) in &self.metadata {
            put_str(&mut h, k.as_bytes());
            h.extend_from_slice(&value_type(v).to_le_bytes());
            put_value(&mut h, v);
        }
        for (t, &offset) in self.tensors.iter().zip(&layout.tensor_offsets) {
            put_str(&mut h, t.name.as_bytes());
            h.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                h.extend_from_slice(&d.to_le_bytes());
            }
            h.extend_from_slice(&t.ty.id().to_le_bytes());
            h.extend_from_slice(&offset.to_le_bytes());
        }
        debug_assert_eq!(h.len() as u64, layout.header_len);
        h
    }

    /// Writes the whole file to `out` and returns its layout.
    pub fn write_to<W: Write>(&self, out: &mut W) -> Result<Layout, WriteError> {
        let layout = self.layout()?;
        let header = self.header_bytes(&layout);
        out.write_all(&header)?;
        let zeros = vec![0u8; layout.alignment as usize];
        let pad = |out: &mut W, len: u64| -> io::Result<()> {
            let n = align_up(len, layout.alignment) - len;
            out.write_all(&zeros[..n as usize])
        };
        pad(out, layout.header_len)?;
        for t in &self.tensors {
            out.write_all(&t.data)?;
            pad(out, t.data.len() as u64)?;
        }
        Ok(layout)
    }

    /// Writes the file to a temporary file beside `path`, syncs it, and
    /// renames it to `path`: a reader never sees a partial file, and a
    /// failure leaves any earlier `path` untouched.
    pub fn write_file(&self, path: &Path) -> Result<Layout, WriteError> {
        let file_err = |p: &Path| {
            let p = p.to_path_buf();
            move |source| WriteError::File { path: p, source }
        };
        // Refuse what cannot be written before creating anything.
        self.layout()?;
        let tmp = temp_path(path);
        let result = (|| {
            let file = File::create(&tmp).map_err(file_err(&tmp))?;
            let mut w = BufWriter::with_capacity(1 << 20, file);
            let layout = self.write_to(&mut w).map_err(|e| match e {
                WriteError::Io(source) => WriteError::File {
                    path: tmp.clone(),
                    source,
                },
                other => other,
            })?;
            let file = w
                .into_inner()
                .map_err(|e| e.into_error())
                .map_err(file_err(&tmp))?;
            file.sync_all().map_err(file_err(&tmp))?;
            fs::rename(&tmp, path).map_err(file_err(path))?;
            Ok(layout)
        })();
        if result.is_err() {
            // Best effort: the temporary file may not exist.
            let _ = fs::remove_file(&tmp);
        }
        result
    }
}

/// `dir/.NAME.PID.tmp` beside `path`.
fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out.gguf".to_string());
    path.with_file_name(format!(".{name}.{}.tmp", std::process::id()))
}

/// Bytes a tensor of this type and shape takes, after checking the shape.
fn tensor_bytes(name: &str, ty: GgmlType, dims: &[u64]) -> Result<u64, WriteError> {
    let bad = |what: String| WriteError::BadShape {
        name: name.to_string(),
        what,
    };
    if dims.is_empty() || dims.len() > MAX_DIMS as usize {
        return Err(bad(format!(
            "{} dimensions (must be 1 to {MAX_DIMS})",
            dims.len()
        )));
    }
    let mut n: u64 = 1;
    for (i, &d) in dims.iter().enumerate() {
        if d == 0 || d > MAX_DIM {
            return Err(bad(format!(
                "dimension {i} is {d} (must be 1 to {MAX_DIM})"
            )));
        }
        n = match n.checked_mul(d) {
            Some(n) if n <= MAX_ELEMENTS => n,
            _ => return Err(bad(format!("more than {MAX_ELEMENTS} elements"))),
        };
    }
    let block = ty.block_elems() as u64;
    if !dims[0].is_multiple_of(block) {
        return Err(bad(format!(
            "{ty} rows of {} elements are not whole {block}-element blocks",
            dims[0]
        )));
    }
    // n <= MAX_ELEMENTS and no type takes more than 8 bytes per element.
    Ok(ty.bytes_for(n).expect("checked: whole blocks, no overflow"))
}

fn check_key(key: &str) -> Result<(), WriteError> {
    if key.len() as u64 > MAX_KEY_LEN {
        return Err(WriteError::KeyTooLong {
            key: key.to_string(),
            len: key.len(),
            max: MAX_KEY_LEN,
        });
    }
    Ok(())
}

/// Checks string lengths, array lengths, nesting and homogeneity.
fn check_value(key: &str, v: &Value) -> Result<(), WriteError> {
    fn walk(v: &Value, depth: u32) -> Result<(), String> {
        match v {
            Value::String(s) if s.len() as u64 > MAX_STRING_LEN => Err(format!(
                "string of {} bytes, more than the limit of {MAX_STRING_LEN}",
                s.len()
            )),
            Value::Array(items) => {
                if depth + 1 > MAX_NESTING_DEPTH {
                    return Err(format!("arrays nested deeper than {MAX_NESTING_DEPTH}"));
                }
                if items.len() as u64 > MAX_ARRAY_LEN {
                    return Err(format!(
                        "array of {} elements, more than the limit of {MAX_ARRAY_LEN}",
                        items.len()
                    ));
                }
                if let Some(first) = items.first() {
                    let ty = value_type(first);
                    for (i, item) in items.iter().enumerate() {
                        if value_type(item) != ty {
                            return Err(format!(
                                "array element {i} is {}, element 0 is {}: arrays hold one type",
                                item.type_name(),
                                first.type_name()
                            ));
                        }
                        walk(item, depth + 1)?;
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
    walk(v, 0).map_err(|what| WriteError::BadValue {
        key: key.to_string(),
        what,
    })
}

/// A short rendering of a scalar for messages.
fn short(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{:?}", clip(s)),
        Value::Array(a) => format!("of {} elements", a.len()),
        other => format!("{other:?}"),
    }
}

/// Values a value counts against [`MAX_TOTAL_VALUES`], as the reader counts
/// them: one for the value, plus the elements of every array in it.
fn count_values(v: &Value) -> u64 {
    fn elems(v: &Value) -> u64 {
        match v {
            Value::Array(items) => items.len() as u64 + items.iter().map(elems).sum::<u64>(),
            _ => 0,
        }
    }
    1 + elems(v)
}

fn value_type(v: &Value) -> u32 {
    match v {
        Value::U8(_) => type_id::U8,
        Value::I8(_) => type_id::I8,
        Value::U16(_) => type_id::U16,
        Value::I16(_) => type_id::I16,
        Value::U32(_) => type_id::U32,
        Value::I32(_) => type_id::I32,
        Value::U64(_) => type_id::U64,
        Value::I64(_) => type_id::I64,
        Value::F32(_) => type_id::F32,
        Value::F64(_) => type_id::F64,
        Value::Bool(_) => type_id::BOOL,
        Value::String(_) => type_id::STRING,
        Value::Array(_) => type_id::ARRAY,
    }
}

/// Encoded size of a value, without its type field.
fn encoded_len(v: &Value) -> u64 {
    match v {
        Value::U8(_) | Value::I8(_) | Value::Bool(_) => 1,
        Value::U16(_) | Value::I16(_) => 2,
        Value::U32(_) | Value::I32(_) | Value::F32(_) => 4,
        Value::U64(_) | Value::I64(_) | Value::F64(_) => 8,
        Value::String(s) => 8 + s.len() as u64,
        Value::Array(items) => 4 + 8 + items.iter().map(encoded_len).sum::<u64>(),
    }
}

fn put_str(h: &mut Vec<u8>, s: &[u8]) {
    h.extend_from_slice(&(s.len() as u64).to_le_bytes());
    h.extend_from_slice(s);
}

/// Encodes a value without its type field (an array writes its element
/// type, its length and its elements).
fn put_value(h: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => h.push(*x),
        Value::I8(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::U16(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::U64(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => h.extend_from_slice(&x.to_le_bytes()),
        // to_le_bytes keeps every bit, NaN payloads included.
        Value::F32(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(b) => h.push(u8::from(*b)),
        Value::String(s) => put_str(h, s.as_bytes()),
        Value::Array(items) => {
            let elem = items.first().map_or(type_id::U8, value_type);
            h.extend_from_slice(&elem.to_le_bytes());
            h.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                put_value(h, item);
            }
        }
    }
}

/// `pos` rounded up to a multiple of `alignment` (a power of two). Sizes
/// here are bounded by the limits, far from overflow.
fn align_up(pos: u64, alignment: u64) -> u64 {
    pos.div_ceil(alignment) * alignment
}

#[cfg(test)]
#[path = "writer_tests.rs"]
mod tests;
