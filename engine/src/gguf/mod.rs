//! A hardened, memory-mapped GGUF reader, and a writer ([`GgufWriter`]).
//!
//! [`GgufFile::open`] maps a file and parses its header; [`GgufFile::from_bytes`]
//! runs the same parser on bytes in memory. Versions 2 and 3 are supported
//! (both use 64-bit counts); version 1, big-endian files and anything else
//! are rejected with a [`GgufError`] that names the byte offset of the defect.
//!
//! The header is treated as untrusted input. The reader:
//! - checks every read against the end of the file and every size and offset
//!   computation for overflow;
//! - refuses counts and lengths beyond the caps in [`limits`], and checks
//!   each claimed count against the bytes left (each item has a minimum
//!   encoded size) before reserving memory for it, so no file can make it
//!   allocate in proportion to a number it merely claims;
//! - bounds array nesting, so recursion depth is bounded;
//! - requires unique keys, unique tensor names, valid UTF-8 in keys and
//!   tensor names, bool bytes of 0 or 1, known value types, a `u32`
//!   `general.alignment` that is a nonzero power of two;
//! - requires every tensor to have 1 to 4 nonzero dimensions, a known (not
//!   removed) ggml type, rows made of whole blocks of that type, an offset
//!   aligned to the file's alignment, and data that lies inside the file
//!   without overlapping any other tensor.
//!
//! String *values* are not required to be UTF-8 (llama.cpp does not check
//! them either): invalid sequences are replaced by U+FFFD and counted, see
//! [`GgufFile::lossy_string_count`], so that code that needs exact bytes (a
//! tokenizer) can refuse such a file.

mod cursor;
mod error;
pub mod limits;
mod reader;
mod tensor;
mod value;
mod writer;

use std::fs::File;
use std::path::Path;

use memmap2::Mmap;

pub use error::{ErrorKind, GgufError, MetadataError};
pub use tensor::TensorInfo;
pub use value::Value;
pub use writer::{GgufWriter, Layout, PendingTensor, WriteError, MAX_GGML_NAME_LEN};

/// The key that names the model architecture.
pub const ARCHITECTURE_KEY: &str = "general.architecture";

enum Backing {
    Mmap(Mmap),
    Owned(Vec<u8>),
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mmap(m) => m,
            Backing::Owned(v) => v,
        }
    }
}

/// A parsed GGUF file: its validated header and its bytes (mapped or owned).
pub struct GgufFile {
    backing: Backing,
    header: reader::Header,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.header.version)
            .field("file_size", &self.file_size())
            .field("alignment", &self.header.alignment)
            .field("data_offset", &self.header.data_offset)
            .field("metadata", &self.header.metadata.len())
            .field("tensors", &self.header.tensors.len())
            .finish()
    }
}

impl GgufFile {
    /// Maps the file at `path` read-only and parses its header. I/O errors
    /// name the path; a path that is not a regular file (a directory, a
    /// FIFO, a device) is refused before it is opened.
    pub fn open(path: &Path) -> Result<GgufFile, GgufError> {
        let io_err = |e| GgufError::io(path, e);
        let meta = std::fs::metadata(path).map_err(io_err)?;
        if !meta.is_file() {
            return Err(GgufError::new(
                0,
                ErrorKind::NotAFile {
                    path: path.to_path_buf(),
                },
            ));
        }
        let file = File::open(path).map_err(io_err)?;
        let len = file.metadata().map_err(io_err)?.len();
        let backing = if len == 0 {
            Backing::Owned(Vec::new())
        } else {
            // SAFETY: the map is read-only and we only ever read it as plain
            // bytes, every access bounds-checked against its length. Another
            // process truncating or rewriting the file while it is mapped
            // could change or remove the bytes under us (a SIGBUS on
            // truncation); as with every mmap-based model loader, the model
            // file must not be modified while a GgufFile for it is alive.
            let map = unsafe { Mmap::map(&file) }.map_err(io_err)?;
            Backing::Mmap(map)
        };
        GgufFile::parse(backing)
    }

    /// Parses a GGUF image held in memory (same parser as [`open`](Self::open)).
    ///
    /// Unlike a mapped file, whose tensor data addresses are aligned as the
    /// file's alignment says (the map starts on a page boundary), the
    /// addresses of an owned buffer only have the allocator's alignment.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
        GgufFile::parse(Backing::Owned(bytes))
    }

    fn parse(backing: Backing) -> Result<GgufFile, GgufError> {
        let header = reader::parse(backing.bytes())?;
        Ok(GgufFile { backing, header })
    }

    /// The GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.header.version
    }

    /// Alignment of the data section and of every tensor offset.
    pub fn alignment(&self) -> u64 {
        self.header.alignment
    }

    /// Absolute offset where the tensor data section starts (the end of the
    /// tensor infos, rounded up to the alignment). For a file without
    /// tensors this may lie past the end of the file.
    pub fn data_offset(&self) -> u64 {
        self.header.data_offset
    }

    pub fn file_size(&self) -> u64 {
        self.backing.bytes().len() as u64
    }

    /// Replaces a mapped file's pages with a private copy in anonymous
    /// memory that the kernel is asked to back with transparent huge pages
    /// (on Linux; a kernel that declines leaves ordinary pages), copied in
    /// runs of `step` bytes with `progress` called after each. The same
    /// bytes at the same page alignment; the CPU's matrix-vector products
    /// stream every weight once per token, and a translation per 2 MiB
    /// instead of per 4 KiB page lets them run faster where page walks are
    /// dear (a virtual machine's nested paging). An owned image is left as
    /// it is, and so is a mapped one when an error is returned.
    pub fn make_resident(
        &mut self,
        step: usize,
        mut progress: impl FnMut(usize),
    ) -> std::io::Result<()> {
        let Backing::Mmap(map) = &self.backing else {
            return Ok(());
        };
        let mut copy = memmap2::MmapMut::map_anon(map.len())?;
        // Advice only: a kernel without transparent huge pages refuses it,
        // and the copy then has ordinary pages.
        #[cfg(target_os = "linux")]
        let _ = copy.advise(memmap2::Advice::HugePage);
        for (dst, src) in copy.chunks_mut(step.max(1)).zip(map.chunks(step.max(1))) {
            dst.copy_from_slice(src);
            progress(src.len());
        }
        self.backing = Backing::Mmap(copy.make_read_only()?);
        Ok(())
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        self.backing.bytes()
    }

    /// All metadata, in file order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.header.metadata
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        let &i = self.header.key_index.get(key)?;
        Some(&self.header.metadata[i].1)
    }

    /// How many string values held invalid UTF-8 and were decoded lossily
    /// (invalid sequences replaced by U+FFFD). Keys and tensor names are
    /// always valid UTF-8: a file where they are not is rejected.
    pub fn lossy_string_count(&self) -> u64 {
        self.header.lossy_strings
    }

    /// All tensors, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.header.tensors
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        let &i = self.header.tensor_index.get(name)?;
        Some(&self.header.tensors[i])
    }

    /// The bytes of a tensor of this file (`t.n_bytes` of them).
    ///
    /// # Panics
    /// If `t`'s byte range lies outside this file, which cannot happen for a
    /// `TensorInfo` obtained from this file (a `TensorInfo` from another
    /// file gives wrong bytes or panics).
    pub fn tensor_data(&self, t: &TensorInfo) -> &[u8] {
        let bytes = self.backing.bytes();
        let range = usize::try_from(t.offset)
            .ok()
            .zip(usize::try_from(t.byte_range().end).ok());
        match range.and_then(|(start, end)| bytes.get(start..end)) {
            Some(data) => data,
            None => panic!(
                "tensor {:?} (bytes {}..{}) is outside this {}-byte file: a TensorInfo from another file?",
                t.name,
                t.offset,
                t.byte_range().end,
                bytes.len()
            ),
        }
    }

    /// `general.architecture`.
    pub fn architecture(&self) -> Result<&str, MetadataError> {
        self.get_str(ARCHITECTURE_KEY)
    }

    fn require(&self, key: &str) -> Result<&Value, MetadataError> {
        self.get(key).ok_or_else(|| MetadataError::Missing {
            key: key.to_string(),
        })
    }

    fn wrong_type(key: &str, expected: &'static str, found: &Value) -> MetadataError {
        MetadataError::WrongType {
            key: key.to_string(),
            expected,
            found: found.type_name(),
        }
    }

    /// A string value.
    pub fn get_str(&self, key: &str) -> Result<&str, MetadataError> {
        let v = self.require(key)?;
        v.as_str().ok_or_else(|| Self::wrong_type(key, "string", v))
    }

    /// An integer of any type whose value fits in u32.
    pub fn get_u32(&self, key: &str) -> Result<u32, MetadataError> {
        self.get_int(key, "u32", |i| u32::try_from(i).ok())
    }

    /// An integer of any type whose value fits in u64.
    pub fn get_u64(&self, key: &str) -> Result<u64, MetadataError> {
        self.get_int(key, "u64", |i| u64::try_from(i).ok())
    }

    /// An integer of any type whose value fits in i64.
    pub fn get_i64(&self, key: &str) -> Result<i64, MetadataError> {
        self.get_int(key, "i64", |i| i64::try_from(i).ok())
    }

    fn get_int<T>(
        &self,
        key: &str,
        target: &'static str,
        convert: impl Fn(i128) -> Option<T>,
    ) -> Result<T, MetadataError> {
        let v = self.require(key)?;
        let i = v
            .as_i128()
            .ok_or_else(|| Self::wrong_type(key, "an integer", v))?;
        convert(i).ok_or_else(|| MetadataError::OutOfRange {
            key: key.to_string(),
            value: i.to_string(),
            target,
        })
    }

    /// An F32, or an F64 rounded to f32.
    pub fn get_f32(&self, key: &str) -> Result<f32, MetadataError> {
        let v = self.require(key)?;
        v.as_f32()
            .ok_or_else(|| Self::wrong_type(key, "f32 or f64", v))
    }

    pub fn get_bool(&self, key: &str) -> Result<bool, MetadataError> {
        let v = self.require(key)?;
        v.as_bool().ok_or_else(|| Self::wrong_type(key, "bool", v))
    }

    /// An array value (elements of any type).
    pub fn get_array(&self, key: &str) -> Result<&[Value], MetadataError> {
        let v = self.require(key)?;
        v.as_array()
            .ok_or_else(|| Self::wrong_type(key, "array", v))
    }

    /// `Ok(None)` when `key` is absent; otherwise as [`get_str`](Self::get_str).
    pub fn get_str_opt(&self, key: &str) -> Result<Option<&str>, MetadataError> {
        self.optional(key, |k| self.get_str(k))
    }

    /// `Ok(None)` when `key` is absent; otherwise as [`get_u32`](Self::get_u32).
    pub fn get_u32_opt(&self, key: &str) -> Result<Option<u32>, MetadataError> {
        self.optional(key, |k| self.get_u32(k))
    }

    /// `Ok(None)` when `key` is absent; otherwise as [`get_u64`](Self::get_u64).
    pub fn get_u64_opt(&self, key: &str) -> Result<Option<u64>, MetadataError> {
        self.optional(key, |k| self.get_u64(k))
    }

    /// `Ok(None)` when `key` is absent; otherwise as [`get_f32`](Self::get_f32).
    pub fn get_f32_opt(&self, key: &str) -> Result<Option<f32>, MetadataError> {
        self.optional(key, |k| self.get_f32(k))
    }

    /// `Ok(None)` when `key` is absent; otherwise as [`get_bool`](Self::get_bool).
    pub fn get_bool_opt(&self, key: &str) -> Result<Option<bool>, MetadataError> {
        self.optional(key, |k| self.get_bool(k))
    }

    /// `Ok(None)` when `key` is absent; otherwise as [`get_array`](Self::get_array).
    pub fn get_array_opt(&self, key: &str) -> Result<Option<&[Value]>, MetadataError> {
        self.optional(key, |k| self.get_array(k))
    }

    fn optional<T>(
        &self,
        key: &str,
        get: impl FnOnce(&str) -> Result<T, MetadataError>,
    ) -> Result<Option<T>, MetadataError> {
        if self.header.key_index.contains_key(key) {
            get(key).map(Some)
        } else {
            Ok(None)
        }
    }

    /// `"{architecture}.{suffix}"`, e.g. `arch_key("block_count")` is
    /// `"llama.block_count"` for a Llama model.
    pub fn arch_key(&self, suffix: &str) -> Result<String, MetadataError> {
        Ok(format!("{}.{}", self.architecture()?, suffix))
    }

    /// [`get_u32`](Self::get_u32) of [`arch_key(suffix)`](Self::arch_key).
    pub fn arch_u32(&self, suffix: &str) -> Result<u32, MetadataError> {
        self.get_u32(&self.arch_key(suffix)?)
    }

    /// [`get_f32`](Self::get_f32) of [`arch_key(suffix)`](Self::arch_key).
    pub fn arch_f32(&self, suffix: &str) -> Result<f32, MetadataError> {
        self.get_f32(&self.arch_key(suffix)?)
    }

    /// `Ok(None)` when the architecture key exists but `{arch}.{suffix}` does
    /// not; an error when `general.architecture` itself is missing.
    pub fn arch_u32_opt(&self, suffix: &str) -> Result<Option<u32>, MetadataError> {
        self.get_u32_opt(&self.arch_key(suffix)?)
    }

    /// `Ok(None)` when the architecture key exists but `{arch}.{suffix}` does
    /// not; an error when `general.architecture` itself is missing.
    pub fn arch_f32_opt(&self, suffix: &str) -> Result<Option<f32>, MetadataError> {
        self.get_f32_opt(&self.arch_key(suffix)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ggml_type::GgmlType;

    #[test]
    fn a_resident_copy_holds_the_mapped_bytes() {
        let dir = std::env::temp_dir().join(format!("sharpi-resident-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.gguf");
        let mut w = GgufWriter::new();
        w.set("x", Value::U32(7)).unwrap();
        // Over a 2 MiB page of tensor data, no two neighbouring bytes alike.
        let data: Vec<u8> = (0..(3usize << 20))
            .map(|i| (i * 7 + i / 251) as u8)
            .collect();
        w.add_tensor("t", GgmlType::F32, &[data.len() as u64 / 4], data.clone())
            .unwrap();
        w.write_file(&path).unwrap();
        let mapped = GgufFile::open(&path).unwrap();
        let mut f = GgufFile::open(&path).unwrap();
        let mut seen = Vec::new();
        f.make_resident(1 << 20, |n| seen.push(n)).unwrap();
        assert!(matches!(f.backing, Backing::Mmap(_)));
        assert!(f.bytes() == mapped.bytes());
        assert_eq!(seen.iter().sum::<usize>() as u64, f.file_size());
        assert!(seen.len() > 3, "progress in steps: {seen:?}");
        assert_eq!(f.get("x"), Some(&Value::U32(7)));
        let t = f.tensor("t").unwrap().clone();
        assert!(f.tensor_data(&t) == &data[..]);
        // The data keeps its alignment in the file (the copy starts on a
        // page, as the map does).
        let at = f.tensor_data(&t).as_ptr() as usize;
        assert_eq!(at % 32, mapped.tensor_data(&t).as_ptr() as usize % 32);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
