//! Parses and validates a GGUF header from a byte slice.
//!
//! The parser reads the header front to back with a bounds-checked
//! [`Cursor`], then checks the tensor table against the data section. It
//! never trusts a count or length: each is checked against the limits in
//! [`limits`](super::limits) and against the bytes left in the file before
//! any memory is reserved for it, and every size or offset computation is
//! checked for overflow.

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use super::cursor::Cursor;
use super::error::{ErrorKind, GgufError};
use super::limits::*;
use super::tensor::TensorInfo;
use super::value::{type_id, Value};
use crate::ggml_type::{GgmlType, TypeId};

/// Everything the header says, validated.
pub(crate) struct Header {
    pub version: u32,
    pub alignment: u64,
    pub data_offset: u64,
    pub metadata: Vec<(String, Value)>,
    pub key_index: HashMap<String, usize>,
    pub tensors: Vec<TensorInfo>,
    pub tensor_index: HashMap<String, usize>,
    pub lossy_strings: u64,
}

/// Smallest encoded metadata entry: key length (8) + empty key + value
/// type (4) + a one-byte value.
const MIN_KV_BYTES: u64 = 8 + 4 + 1;
/// Smallest encoded tensor info: name length (8) + empty name + n_dims (4)
/// + one dimension (8) + type (4) + offset (8).
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 8 + 4 + 8;

const MAGIC: [u8; 4] = *b"GGUF";

/// Magics of the pre-GGUF formats, as their files start (a little-endian u32).
const LEGACY_MAGICS: &[([u8; 4], &str)] = &[
    (*b"lmgg", "GGML"),
    (*b"fmgg", "GGMF"),
    (*b"tjgg", "GGJT"),
    (*b"algg", "GGLA"),
];

/// Where a tensor's fields sit in the file, for error offsets.
struct TensorPos {
    offset_field: u64,
}

struct Parser<'a> {
    cur: Cursor<'a>,
    file_size: u64,
    total_values: u64,
    lossy_strings: u64,
}

pub(crate) fn parse(bytes: &[u8]) -> Result<Header, GgufError> {
    let mut p = Parser {
        cur: Cursor::new(bytes),
        file_size: bytes.len() as u64,
        total_values: 0,
        lossy_strings: 0,
    };
    p.parse()
}

impl<'a> Parser<'a> {
    fn parse(&mut self) -> Result<Header, GgufError> {
        let version = self.read_preamble()?;

        let tensor_count_at = self.cur.pos();
        let tensor_count = self.cur.u64("tensor count")?;
        if tensor_count > MAX_TENSORS {
            return Err(GgufError::new(
                tensor_count_at,
                ErrorKind::TooManyTensors {
                    count: tensor_count,
                    max: MAX_TENSORS,
                },
            ));
        }
        let kv_count_at = self.cur.pos();
        let kv_count = self.cur.u64("metadata count")?;
        if kv_count > MAX_KVS {
            return Err(GgufError::new(
                kv_count_at,
                ErrorKind::TooManyKvs {
                    count: kv_count,
                    max: MAX_KVS,
                },
            ));
        }
        self.cur
            .check_fits(kv_count, MIN_KV_BYTES, "metadata entry", kv_count_at)?;
        self.cur.check_fits(
            tensor_count,
            MIN_TENSOR_INFO_BYTES,
            "tensor info",
            tensor_count_at,
        )?;

        let (metadata, key_index, alignment) = self.read_metadata(kv_count)?;

        // The metadata used up some bytes: check the tensor count again
        // before reserving room for the infos.
        self.cur.check_fits(
            tensor_count,
            MIN_TENSOR_INFO_BYTES,
            "tensor info",
            tensor_count_at,
        )?;
        let (mut tensors, positions, tensor_index) = self.read_tensor_infos(tensor_count)?;

        let infos_end = self.cur.pos();
        let data_offset = align_up(infos_end, alignment).ok_or_else(|| {
            GgufError::new(
                infos_end,
                ErrorKind::DataOffsetOverflow {
                    infos_end,
                    alignment,
                },
            )
        })?;
        self.place_tensors(&mut tensors, &positions, data_offset, alignment)?;

        Ok(Header {
            version,
            alignment,
            data_offset,
            metadata,
            key_index,
            tensors,
            tensor_index,
            lossy_strings: self.lossy_strings,
        })
    }

    /// Magic and version.
    fn read_preamble(&mut self) -> Result<u32, GgufError> {
        let magic_at = self.cur.pos();
        let magic: [u8; 4] = self
            .cur
            .take(4, "magic")?
            .try_into()
            .expect("take(4) returns 4 bytes");
        if magic != MAGIC {
            let kind = match LEGACY_MAGICS.iter().find(|(m, _)| *m == magic) {
                Some(&(_, format)) => ErrorKind::LegacyFormat { format },
                None => ErrorKind::BadMagic { found: magic },
            };
            return Err(GgufError::new(magic_at, kind));
        }
        let version_at = self.cur.pos();
        let version = self.cur.u32("version")?;
        match version {
            2 | 3 => Ok(version),
            raw => {
                let swapped = raw.swap_bytes();
                let kind = if (1..=3).contains(&swapped) {
                    ErrorKind::BigEndian { raw, swapped }
                } else {
                    ErrorKind::UnsupportedVersion { version: raw }
                };
                Err(GgufError::new(version_at, kind))
            }
        }
    }

    #[allow(clippy::type_complexity)]
    fn read_metadata(
        &mut self,
        kv_count: u64,
    ) -> Result<(Vec<(String, Value)>, HashMap<String, usize>, u64), GgufError> {
        // kv_count <= MAX_KVS and fits the remaining bytes: safe to reserve.
        let mut metadata = Vec::with_capacity(kv_count as usize);
        let mut key_index = HashMap::with_capacity(kv_count as usize);
        let mut alignment = DEFAULT_ALIGNMENT;
        for _ in 0..kv_count {
            let key_at = self.cur.pos();
            let key = self.read_strict_string(MAX_KEY_LEN, "metadata key")?;
            let type_at = self.cur.pos();
            let ty = self.cur.u32("metadata value type")?;
            let value_at = self.cur.pos();
            self.count_values(1, type_at)?;
            let value = self.read_value(ty, type_at, 0)?;
            if key == ALIGNMENT_KEY {
                alignment = match value {
                    Value::U32(a) if a.is_power_of_two() => u64::from(a),
                    Value::U32(a) => {
                        return Err(GgufError::new(
                            value_at,
                            ErrorKind::BadAlignment { value: a },
                        ))
                    }
                    ref other => {
                        return Err(GgufError::new(
                            type_at,
                            ErrorKind::AlignmentWrongType {
                                found: other.type_name(),
                            },
                        ))
                    }
                };
            }
            match key_index.entry(key) {
                Entry::Occupied(e) => {
                    return Err(GgufError::new(
                        key_at,
                        ErrorKind::DuplicateKey {
                            key: e.key().clone(),
                        },
                    ))
                }
                Entry::Vacant(e) => {
                    metadata.push((e.key().clone(), value));
                    e.insert(metadata.len() - 1);
                }
            }
        }
        Ok((metadata, key_index, alignment))
    }

    /// Counts `n` more metadata values against [`MAX_TOTAL_VALUES`].
    fn count_values(&mut self, n: u64, at: u64) -> Result<(), GgufError> {
        match self.total_values.checked_add(n) {
            Some(t) if t <= MAX_TOTAL_VALUES => {
                self.total_values = t;
                Ok(())
            }
            _ => Err(GgufError::new(
                at,
                ErrorKind::TooManyValues {
                    max: MAX_TOTAL_VALUES,
                },
            )),
        }
    }

    /// Reads one value of type `ty` (whose type field is at `type_at`);
    /// `depth` is the number of arrays enclosing it.
    fn read_value(&mut self, ty: u32, type_at: u64, depth: u32) -> Result<Value, GgufError> {
        let c = &mut self.cur;
        Ok(match ty {
            type_id::U8 => Value::U8(c.u8("u8 value")?),
            type_id::I8 => Value::I8(c.i8("i8 value")?),
            type_id::U16 => Value::U16(c.u16("u16 value")?),
            type_id::I16 => Value::I16(c.i16("i16 value")?),
            type_id::U32 => Value::U32(c.u32("u32 value")?),
            type_id::I32 => Value::I32(c.i32("i32 value")?),
            type_id::U64 => Value::U64(c.u64("u64 value")?),
            type_id::I64 => Value::I64(c.i64("i64 value")?),
            type_id::F32 => Value::F32(c.f32("f32 value")?),
            type_id::F64 => Value::F64(c.f64("f64 value")?),
            type_id::BOOL => {
                let at = c.pos();
                match c.u8("bool value")? {
                    0 => Value::Bool(false),
                    1 => Value::Bool(true),
                    byte => return Err(GgufError::new(at, ErrorKind::BadBool { byte })),
                }
            }
            type_id::STRING => Value::String(self.read_value_string()?),
            type_id::ARRAY => self.read_array(type_at, depth + 1)?,
            id => return Err(GgufError::new(type_at, ErrorKind::BadValueType { id })),
        })
    }

    /// An array whose type field is at `type_at`, at nesting level `depth`
    /// (1 for an array that is not inside another).
    fn read_array(&mut self, type_at: u64, depth: u32) -> Result<Value, GgufError> {
        if depth > MAX_NESTING_DEPTH {
            return Err(GgufError::new(
                type_at,
                ErrorKind::NestingTooDeep {
                    max: MAX_NESTING_DEPTH,
                },
            ));
        }
        let elem_type_at = self.cur.pos();
        let elem_ty = self.cur.u32("array element type")?;
        let min_bytes = type_id::min_encoded_size(elem_ty)
            .ok_or_else(|| GgufError::new(elem_type_at, ErrorKind::BadValueType { id: elem_ty }))?;
        let len_at = self.cur.pos();
        let len = self.cur.u64("array length")?;
        if len > MAX_ARRAY_LEN {
            return Err(GgufError::new(
                len_at,
                ErrorKind::ArrayTooLong {
                    len,
                    max: MAX_ARRAY_LEN,
                },
            ));
        }
        self.cur
            .check_fits(len, min_bytes, "array element", len_at)?;
        self.count_values(len, len_at)?;
        // len is capped, fits in the remaining bytes and in the value budget.
        let mut items = Vec::with_capacity(len as usize);
        for _ in 0..len {
            items.push(self.read_value(elem_ty, elem_type_at, depth)?);
        }
        Ok(Value::Array(items))
    }

    /// A string length and its bytes, checked against `max`.
    fn read_string_bytes(&mut self, max: u64, what: &'static str) -> Result<&'a [u8], GgufError> {
        let len_at = self.cur.pos();
        let len = self.cur.u64(what)?;
        if len > max {
            return Err(GgufError::new(
                len_at,
                ErrorKind::StringTooLong { what, len, max },
            ));
        }
        self.cur.take(len, what)
    }

    /// A key or tensor name: must be valid UTF-8.
    fn read_strict_string(&mut self, max: u64, what: &'static str) -> Result<String, GgufError> {
        let bytes = self.read_string_bytes(max, what)?;
        let start = self.cur.pos() - bytes.len() as u64;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(e) => {
                let valid_up_to = e.valid_up_to() as u64;
                Err(GgufError::new(
                    start + valid_up_to,
                    ErrorKind::InvalidUtf8 { what, valid_up_to },
                ))
            }
        }
    }

    /// A string value: invalid UTF-8 is replaced with U+FFFD (and counted),
    /// as llama.cpp does not validate string values either.
    fn read_value_string(&mut self) -> Result<String, GgufError> {
        let bytes = self.read_string_bytes(MAX_STRING_LEN, "string value")?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => {
                self.lossy_strings += 1;
                Ok(String::from_utf8_lossy(bytes).into_owned())
            }
        }
    }

    #[allow(clippy::type_complexity)]
    fn read_tensor_infos(
        &mut self,
        count: u64,
    ) -> Result<(Vec<TensorInfo>, Vec<TensorPos>, HashMap<String, usize>), GgufError> {
        // count <= MAX_TENSORS and fits the remaining bytes: safe to reserve.
        let mut tensors = Vec::with_capacity(count as usize);
        let mut positions = Vec::with_capacity(count as usize);
        let mut index = HashMap::with_capacity(count as usize);
        for _ in 0..count {
            let name_at = self.cur.pos();
            let name = self.read_strict_string(MAX_TENSOR_NAME_LEN, "tensor name")?;
            if index.contains_key(&name) {
                return Err(GgufError::new(name_at, ErrorKind::DuplicateTensor { name }));
            }

            let n_dims_at = self.cur.pos();
            let n_dims = self.cur.u32("tensor dimension count")?;
            if n_dims == 0 {
                return Err(GgufError::new(
                    n_dims_at,
                    ErrorKind::NoDims { tensor: name },
                ));
            }
            if n_dims > MAX_DIMS {
                return Err(GgufError::new(
                    n_dims_at,
                    ErrorKind::TooManyDims {
                        tensor: name,
                        n_dims,
                        max: MAX_DIMS,
                    },
                ));
            }
            let dims_at = self.cur.pos();
            let mut dims = Vec::with_capacity(n_dims as usize);
            let mut n_elements: Option<u64> = Some(1);
            for index in 0..n_dims as usize {
                let dim_at = self.cur.pos();
                let dim = self.cur.u64("tensor dimension")?;
                if dim == 0 {
                    return Err(GgufError::new(
                        dim_at,
                        ErrorKind::ZeroDim {
                            tensor: name,
                            index,
                        },
                    ));
                }
                if dim > MAX_DIM {
                    return Err(GgufError::new(
                        dim_at,
                        ErrorKind::DimTooLarge {
                            tensor: name,
                            index,
                            dim,
                            max: MAX_DIM,
                        },
                    ));
                }
                n_elements = n_elements.and_then(|n| n.checked_mul(dim));
                dims.push(dim);
            }
            let n_elements = match n_elements {
                None => {
                    return Err(GgufError::new(
                        dims_at,
                        ErrorKind::ElementCountOverflow { tensor: name },
                    ))
                }
                Some(n) if n > MAX_ELEMENTS => {
                    return Err(GgufError::new(
                        dims_at,
                        ErrorKind::TooManyElements {
                            tensor: name,
                            count: n,
                            max: MAX_ELEMENTS,
                        },
                    ))
                }
                Some(n) => n,
            };

            let type_at = self.cur.pos();
            let type_raw = self.cur.u32("tensor type")?;
            let ty = match GgmlType::from_id(type_raw) {
                TypeId::Known(ty) => ty,
                TypeId::Removed(type_name) => {
                    return Err(GgufError::new(
                        type_at,
                        ErrorKind::RemovedType {
                            tensor: name,
                            id: type_raw,
                            name: type_name,
                        },
                    ))
                }
                TypeId::Unknown(id) => {
                    return Err(GgufError::new(
                        type_at,
                        ErrorKind::UnknownType { tensor: name, id },
                    ))
                }
            };
            // ggml requires whole blocks in every row, which also makes the
            // element count a whole number of blocks.
            let block = ty.block_elems() as u64;
            if dims[0] % block != 0 {
                return Err(GgufError::new(
                    dims_at,
                    ErrorKind::NotBlockMultiple {
                        tensor: name,
                        ty,
                        row_len: dims[0],
                        block,
                    },
                ));
            }
            let n_bytes = ty.bytes_for(n_elements).ok_or_else(|| {
                GgufError::new(
                    dims_at,
                    ErrorKind::ElementCountOverflow {
                        tensor: name.clone(),
                    },
                )
            })?;

            let offset_at = self.cur.pos();
            let rel_offset = self.cur.u64("tensor data offset")?;

            index.insert(name.clone(), tensors.len());
            tensors.push(TensorInfo {
                name,
                ty,
                dims,
                // Relative for now; made absolute by place_tensors.
                offset: rel_offset,
                n_bytes,
            });
            positions.push(TensorPos {
                offset_field: offset_at,
            });
        }
        Ok((tensors, positions, index))
    }

    /// Checks every tensor's offset against the alignment and the file, turns
    /// the relative offsets absolute, and checks that no two tensors overlap.
    fn place_tensors(
        &self,
        tensors: &mut [TensorInfo],
        positions: &[TensorPos],
        data_offset: u64,
        alignment: u64,
    ) -> Result<(), GgufError> {
        for (t, pos) in tensors.iter_mut().zip(positions) {
            let rel = t.offset;
            if rel % alignment != 0 {
                return Err(GgufError::new(
                    pos.offset_field,
                    ErrorKind::MisalignedTensor {
                        tensor: t.name.clone(),
                        offset: rel,
                        alignment,
                    },
                ));
            }
            let start = data_offset.checked_add(rel);
            let end = start.and_then(|s| s.checked_add(t.n_bytes));
            match (start, end) {
                (Some(start), Some(end)) if end <= self.file_size => t.offset = start,
                _ => {
                    return Err(GgufError::new(
                        pos.offset_field,
                        ErrorKind::TensorOutOfBounds {
                            tensor: t.name.clone(),
                            offset: rel,
                            n_bytes: t.n_bytes,
                            data_offset,
                            file_size: self.file_size,
                        },
                    ))
                }
            }
        }

        let mut order: Vec<usize> = (0..tensors.len()).collect();
        order.sort_unstable_by_key(|&i| (tensors[i].offset, i));
        for pair in order.windows(2) {
            let (a, b) = (&tensors[pair[0]], &tensors[pair[1]]);
            // In bounds, so offset + n_bytes cannot overflow.
            let a_end = a.offset + a.n_bytes;
            if b.offset < a_end {
                return Err(GgufError::new(
                    positions[pair[1]].offset_field,
                    ErrorKind::OverlappingTensors {
                        tensor: b.name.clone(),
                        start: b.offset,
                        other: a.name.clone(),
                        other_start: a.offset,
                        other_end: a_end,
                    },
                ));
            }
        }
        Ok(())
    }
}

/// `pos` rounded up to a multiple of `alignment` (a power of two), or `None`
/// on overflow.
fn align_up(pos: u64, alignment: u64) -> Option<u64> {
    debug_assert!(alignment.is_power_of_two());
    Some(pos.checked_add(alignment - 1)? & !(alignment - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn align_up_rounds_and_detects_overflow() {
        assert_eq!(align_up(0, 32), Some(0));
        assert_eq!(align_up(1, 32), Some(32));
        assert_eq!(align_up(32, 32), Some(32));
        assert_eq!(align_up(33, 1), Some(33));
        assert_eq!(align_up(u64::MAX - 3, 8), None);
        assert_eq!(align_up(1 << 40, 1 << 31), Some(1 << 40));
    }

    #[test]
    fn total_value_budget_is_enforced() {
        // An array of 3 u8 values; start the budget 2 short of the cap.
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&type_id::U8.to_le_bytes());
        bytes.extend_from_slice(&3u64.to_le_bytes());
        bytes.extend_from_slice(&[1, 2, 3]);
        let mut p = Parser {
            cur: Cursor::new(&bytes),
            file_size: bytes.len() as u64,
            total_values: MAX_TOTAL_VALUES - 2,
            lossy_strings: 0,
        };
        let e = p.read_array(0, 1).unwrap_err();
        assert_eq!(e.offset, 4);
        assert!(matches!(e.kind, ErrorKind::TooManyValues { .. }), "{e}");
        // Within the budget it parses.
        p.cur = Cursor::new(&bytes);
        p.total_values = MAX_TOTAL_VALUES - 3;
        assert_eq!(
            p.read_array(0, 1).unwrap(),
            Value::Array(vec![Value::U8(1), Value::U8(2), Value::U8(3)])
        );
    }

    #[test]
    fn min_sizes_match_the_encoding() {
        assert_eq!(type_id::min_encoded_size(type_id::STRING), Some(8));
        assert_eq!(type_id::min_encoded_size(type_id::ARRAY), Some(12));
        assert_eq!(type_id::min_encoded_size(13), None);
    }
}
