//! Typed errors: [`GgufError`] for a file that cannot be read or parsed (with
//! the byte offset of the defect), [`MetadataError`] for a metadata lookup that
//! finds nothing or the wrong type.
//!
//! Every message is one line: strings that come from the file (keys, tensor
//! names) are shown clipped and escaped with `{:?}`, so a name holding a
//! newline or a megabyte of text cannot break a log line.

use std::io;
use std::path::{Path, PathBuf};

use crate::ggml_type::GgmlType;

/// A file that could not be opened or is not a well-formed GGUF file.
///
/// `offset` is the absolute byte offset in the file where the defect was
/// found: the start of the field that holds a bad value, or the position a
/// read could not go past. For an I/O failure (`ErrorKind::Io`,
/// `ErrorKind::NotAFile`) the offset is 0 and the message names the path.
#[derive(Debug, thiserror::Error)]
#[error("{}", self.render())]
pub struct GgufError {
    pub offset: u64,
    pub kind: ErrorKind,
}

impl GgufError {
    pub fn new(offset: u64, kind: ErrorKind) -> GgufError {
        GgufError { offset, kind }
    }

    pub(crate) fn io(path: &Path, source: io::Error) -> GgufError {
        GgufError::new(
            0,
            ErrorKind::Io {
                path: path.to_path_buf(),
                source,
            },
        )
    }

    /// True when the file could not be read at all (no offset applies).
    pub fn is_io(&self) -> bool {
        matches!(self.kind, ErrorKind::Io { .. } | ErrorKind::NotAFile { .. })
    }

    fn render(&self) -> String {
        if self.is_io() {
            self.kind.to_string()
        } else {
            format!("at byte {}: {}", self.offset, self.kind)
        }
    }
}

/// What is wrong with a file: one variant per class of defect.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ErrorKind {
    #[error("cannot read {path:?}: {source}")]
    Io { path: PathBuf, source: io::Error },

    #[error("{path:?} is not a regular file")]
    NotAFile { path: PathBuf },

    #[error("bad magic {found:02x?} (expected \"GGUF\" = [47, 47, 55, 46]): not a GGUF file")]
    BadMagic { found: [u8; 4] },

    #[error("legacy {format} file: only GGUF v2 and v3 are supported (re-convert the model)")]
    LegacyFormat { format: &'static str },

    #[error("file is big-endian (version field reads {raw:#010x}, which is {swapped} byte-swapped): only little-endian GGUF is supported")]
    BigEndian { raw: u32, swapped: u32 },

    #[error("unsupported GGUF version {version}{} (supported: 2 and 3)", version_hint(*.version))]
    UnsupportedVersion { version: u32 },

    #[error("file ends early: {what} needs {needed} bytes, only {available} left")]
    Truncated {
        what: &'static str,
        needed: u64,
        available: u64,
    },

    #[error("tensor count {count} exceeds the limit of {max}")]
    TooManyTensors { count: u64, max: u64 },

    #[error("metadata key/value count {count} exceeds the limit of {max}")]
    TooManyKvs { count: u64, max: u64 },

    #[error("{what} count {count} cannot fit in the file: each needs at least {min_bytes} bytes, only {available} bytes left")]
    CountExceedsFile {
        what: &'static str,
        count: u64,
        min_bytes: u64,
        available: u64,
    },

    #[error("{what} length {len} exceeds the limit of {max} bytes")]
    StringTooLong {
        what: &'static str,
        len: u64,
        max: u64,
    },

    #[error("invalid UTF-8 in {what} (valid up to byte {valid_up_to} of the string)")]
    InvalidUtf8 {
        what: &'static str,
        valid_up_to: u64,
    },

    #[error("array length {len} exceeds the limit of {max}")]
    ArrayTooLong { len: u64, max: u64 },

    #[error("metadata holds more than {max} values in all")]
    TooManyValues { max: u64 },

    #[error("arrays nested deeper than {max} levels")]
    NestingTooDeep { max: u32 },

    #[error("invalid metadata value type {id} (valid: 0..=12)")]
    BadValueType { id: u32 },

    #[error("invalid bool byte {byte:#04x} (must be 0 or 1)")]
    BadBool { byte: u8 },

    #[error("duplicate metadata key {:?}", clip(.key))]
    DuplicateKey { key: String },

    #[error("duplicate tensor name {:?}", clip(.name))]
    DuplicateTensor { name: String },

    #[error("tensor {:?} has no dimensions (n_dims = 0)", clip(.tensor))]
    NoDims { tensor: String },

    #[error("tensor {:?} has {n_dims} dimensions, more than the {max} ggml supports", clip(.tensor))]
    TooManyDims {
        tensor: String,
        n_dims: u32,
        max: u32,
    },

    #[error("tensor {:?} dimension {index} is zero", clip(.tensor))]
    ZeroDim { tensor: String, index: usize },

    #[error("tensor {:?} dimension {index} is {dim}, more than the limit of {max}", clip(.tensor))]
    DimTooLarge {
        tensor: String,
        index: usize,
        dim: u64,
        max: u64,
    },

    #[error("tensor {:?} element count overflows 64 bits", clip(.tensor))]
    ElementCountOverflow { tensor: String },

    #[error("tensor {:?} has {count} elements, more than the limit of {max}", clip(.tensor))]
    TooManyElements {
        tensor: String,
        count: u64,
        max: u64,
    },

    #[error("tensor {:?} of type {ty} has rows of {row_len} elements, not a whole number of {block}-element blocks", clip(.tensor))]
    NotBlockMultiple {
        tensor: String,
        ty: GgmlType,
        row_len: u64,
        block: u64,
    },

    #[error("tensor {:?} has unknown ggml type id {id}", clip(.tensor))]
    UnknownType { tensor: String, id: u32 },

    #[error("tensor {:?} has ggml type {name} (id {id}), which ggml has removed", clip(.tensor))]
    RemovedType {
        tensor: String,
        id: u32,
        name: &'static str,
    },

    #[error("general.alignment has type {found}, must be u32")]
    AlignmentWrongType { found: &'static str },

    #[error("general.alignment is {value}, must be a nonzero power of two")]
    BadAlignment { value: u32 },

    #[error("data section offset overflows 64 bits (tensor infos end at {infos_end}, alignment {alignment})")]
    DataOffsetOverflow { infos_end: u64, alignment: u64 },

    #[error("tensor {:?} offset {offset} (relative to the data section) is not a multiple of the alignment {alignment}", clip(.tensor))]
    MisalignedTensor {
        tensor: String,
        offset: u64,
        alignment: u64,
    },

    #[error("tensor {:?} data ({n_bytes} bytes at data offset {offset}, data section starting at byte {data_offset}) lies past the end of the file ({file_size} bytes)", clip(.tensor))]
    TensorOutOfBounds {
        tensor: String,
        offset: u64,
        n_bytes: u64,
        data_offset: u64,
        file_size: u64,
    },

    #[error("tensor {:?} data at byte {start} overlaps tensor {:?} (bytes {other_start}..{other_end})", clip(.tensor), clip(.other))]
    OverlappingTensors {
        tensor: String,
        start: u64,
        other: String,
        other_start: u64,
        other_end: u64,
    },
}

fn version_hint(version: u32) -> &'static str {
    match version {
        1 => " (v1 used 32-bit counts)",
        _ => "",
    }
}

/// Longest file-supplied string shown in a message, in characters.
const CLIP_CHARS: usize = 96;

/// Shortens a file-supplied string for a message; `{:?}` then escapes it.
pub(crate) fn clip(s: &str) -> String {
    match s.char_indices().nth(CLIP_CHARS) {
        None => s.to_string(),
        Some((i, _)) => format!("{}...", &s[..i]),
    }
}

/// A metadata lookup that failed: the key is absent, holds another type, or
/// holds a number that does not fit the type asked for.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    #[error("metadata key {:?} is missing", clip(.key))]
    Missing { key: String },

    #[error("metadata key {:?} has type {found}, expected {expected}", clip(.key))]
    WrongType {
        key: String,
        expected: &'static str,
        found: &'static str,
    },

    #[error("metadata key {:?} = {value} does not fit in {target}", clip(.key))]
    OutOfRange {
        key: String,
        value: String,
        target: &'static str,
    },
}

impl MetadataError {
    /// The key the lookup was for.
    pub fn key(&self) -> &str {
        match self {
            MetadataError::Missing { key }
            | MetadataError::WrongType { key, .. }
            | MetadataError::OutOfRange { key, .. } => key,
        }
    }
}
