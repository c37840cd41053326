//! Model quantization: the same tensor types llama.cpp's
//! `llama_model_quantize` picks for a file type ([`recipe`]), each tensor
//! converted row by row (dequantize to f32, quantize with the reference
//! quantizers in [`crate::quant`]), written in llama.cpp's tensor order with
//! its metadata changes (`general.quantization_version` and
//! `general.file_type` moved to the end, split keys dropped).
//!
//! Rows are converted in parallel (rayon) but each row's bytes depend only
//! on that row, so the output is the same for every thread count and
//! machine. For SmolLM2 (Q4_1) and every supported file type, and for the
//! synthetic models from F32, the output is byte-identical to llama.cpp's
//! `llama_model_quantize` (checked against llama.cpp as vendored by
//! llama-cpp-sys-2 0.1.161).
//!
//! One deliberate difference: a source with a `general.alignment` other
//! than 32 keeps it, and the data is laid out for it; llama.cpp copies the
//! key but pads to 32 regardless, which gives a file its own reader
//! rejects.

pub mod recipe;

use std::collections::BTreeMap;

use rayon::prelude::*;

use crate::ggml_type::GgmlType;
use crate::gguf::{GgufFile, GgufWriter, MetadataError, Value, WriteError};
use crate::quant::{self, QuantError};
pub use recipe::{FileType, ModelInfo, RecipeError, TensorDesc};

/// ggml's GGML_QNT_VERSION, written to `general.quantization_version`.
pub const QUANTIZATION_VERSION: u32 = 2;

/// Keys llama.cpp drops from a quantized file (it writes one file).
const SPLIT_KEYS: &[&str] = &["split.no", "split.count", "split.tensors.count"];

#[derive(Debug, thiserror::Error)]
pub enum QuantizeError {
    #[error("{0}")]
    Metadata(#[from] MetadataError),
    #[error("{0}")]
    Recipe(#[from] RecipeError),
    #[error("tensor {name:?} is {from} and must become {to}, but {what} of {ty} is not supported")]
    Unsupported {
        name: String,
        from: GgmlType,
        to: GgmlType,
        what: &'static str,
        ty: GgmlType,
    },
    #[error("tensor {name:?}: {source}")]
    Convert { name: String, source: QuantError },
    #[error("{0}")]
    Write(#[from] WriteError),
}

/// What happened to one tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorReport {
    pub name: String,
    pub dims: Vec<u64>,
    pub from: GgmlType,
    pub to: GgmlType,
    /// The recipe's type when it did not fit the rows and `to` replaced it.
    pub fallback_from: Option<GgmlType>,
    pub bytes_before: u64,
    pub bytes_after: u64,
}

/// Every tensor's report, in output order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub tensors: Vec<TensorReport>,
}

impl Summary {
    /// Tensors per type before and after.
    pub fn counts(&self) -> (BTreeMap<GgmlType, usize>, BTreeMap<GgmlType, usize>) {
        let mut before = BTreeMap::new();
        let mut after = BTreeMap::new();
        for t in &self.tensors {
            *before.entry(t.from).or_insert(0) += 1;
            *after.entry(t.to).or_insert(0) += 1;
        }
        (before, after)
    }

    /// Tensor data bytes before and after.
    pub fn bytes(&self) -> (u64, u64) {
        self.tensors
            .iter()
            .fold((0, 0), |(b, a), t| (b + t.bytes_before, a + t.bytes_after))
    }

    pub fn fallbacks(&self) -> usize {
        self.tensors
            .iter()
            .filter(|t| t.fallback_from.is_some())
            .count()
    }
}

/// The tensor types `ftype`'s recipe gives `src`'s tensors, in `src`'s
/// order.
pub fn plan_for(src: &GgufFile, ftype: FileType) -> Result<Vec<recipe::Choice>, QuantizeError> {
    let model = ModelInfo::from_gguf(src)?;
    let descs: Vec<TensorDesc> = src
        .tensors()
        .iter()
        .map(|t| TensorDesc {
            name: &t.name,
            ty: t.ty,
            dims: &t.dims,
        })
        .collect();
    Ok(recipe::plan(&model, &descs, ftype)?)
}

/// Quantizes `src` to `ftype`. Tensors that keep their type are borrowed
/// from `src`; the others are converted. `progress` is called after each
/// tensor with its index (in output order), the tensor count and its report.
/// Runs on the current rayon pool.
pub fn quantize_model<'a>(
    src: &'a GgufFile,
    ftype: FileType,
    progress: &mut dyn FnMut(usize, usize, &TensorReport),
) -> Result<(GgufWriter<'a>, Summary), QuantizeError> {
    let choices = plan_for(src, ftype)?;
    let tensors = src.tensors();

    // Refuse what cannot be converted before doing any work.
    for (t, c) in tensors.iter().zip(&choices) {
        if t.ty == c.ty {
            continue;
        }
        let unsupported = |what, ty| QuantizeError::Unsupported {
            name: t.name.clone(),
            from: t.ty,
            to: c.ty,
            what,
            ty,
        };
        if !quant::can_dequantize(t.ty) {
            return Err(unsupported("dequantization", t.ty));
        }
        if !quant::can_quantize(c.ty) {
            return Err(unsupported("quantization", c.ty));
        }
    }

    let mut w = GgufWriter::new();
    for (k, v) in src.metadata() {
        if !SPLIT_KEYS.contains(&k.as_str()) {
            w.set(k.clone(), v.clone())?;
        }
    }
    // llama.cpp sets these last (gguf_set_* removes, then appends).
    w.remove("general.quantization_version");
    w.set(
        "general.quantization_version",
        Value::U32(QUANTIZATION_VERSION),
    )?;
    w.remove("general.file_type");
    w.set("general.file_type", Value::U32(ftype.id()))?;

    let names: Vec<&str> = tensors.iter().map(|t| t.name.as_str()).collect();
    let order = recipe::llama_order(&names);
    let mut summary = Summary::default();
    for (n, &i) in order.iter().enumerate() {
        let t = &tensors[i];
        let c = choices[i];
        let data = src.tensor_data(t);
        if c.ty == t.ty {
            w.add_tensor(t.name.clone(), t.ty, &t.dims, data)?;
        } else {
            let out = convert(data, t.ty, c.ty, t.row_len() as usize).map_err(|source| {
                QuantizeError::Convert {
                    name: t.name.clone(),
                    source,
                }
            })?;
            w.add_tensor(t.name.clone(), c.ty, &t.dims, out)?;
        }
        let added = w.tensors().last().expect("just added");
        let report = TensorReport {
            name: t.name.clone(),
            dims: t.dims.clone(),
            from: t.ty,
            to: c.ty,
            fallback_from: c.fallback,
            bytes_before: t.n_bytes,
            bytes_after: added.data.len() as u64,
        };
        progress(n, order.len(), &report);
        summary.tensors.push(report);
    }
    Ok((w, summary))
}

/// Bytes of one row of `row_len` elements of `ty`.
fn row_bytes(ty: GgmlType, row_len: usize) -> Result<usize, QuantError> {
    ty.bytes_for(row_len as u64)
        .map(|b| b as usize)
        .ok_or(QuantError::NotBlockMultiple {
            ty,
            elems: row_len,
            block_elems: ty.block_elems(),
        })
}

/// Converts whole rows of `row_len` elements from `from` to `to`.
pub fn convert(
    src: &[u8],
    from: GgmlType,
    to: GgmlType,
    row_len: usize,
) -> Result<Vec<u8>, QuantError> {
    let (src_row, dst_row) = (row_bytes(from, row_len)?, row_bytes(to, row_len)?);
    if row_len == 0 || !src.len().is_multiple_of(src_row) {
        return Err(QuantError::LengthMismatch {
            ty: from,
            elems: row_len,
            expected: src_row,
            actual: src.len(),
        });
    }
    let mut out = vec![0u8; src.len() / src_row * dst_row];
    out.par_chunks_mut(dst_row)
        .zip(src.par_chunks(src_row))
        .with_min_len(8)
        .try_for_each_init(
            || vec![0f32; row_len],
            |row, (dst, src)| {
                quant::dequantize_row(from, src, row)?;
                quant::quantize_row(to, row, dst)
            },
        )?;
    Ok(out)
}

/// Quantizes f32 `values`, whole rows of `row_len`, to `ty`.
pub fn quantize_rows(values: &[f32], ty: GgmlType, row_len: usize) -> Result<Vec<u8>, QuantError> {
    let dst_row = row_bytes(ty, row_len)?;
    if row_len == 0 || !values.len().is_multiple_of(row_len) {
        return Err(QuantError::LengthMismatch {
            ty: GgmlType::F32,
            elems: row_len,
            expected: row_len * 4,
            actual: values.len() * 4,
        });
    }
    let mut out = vec![0u8; values.len() / row_len * dst_row];
    out.par_chunks_mut(dst_row)
        .zip(values.par_chunks(row_len))
        .with_min_len(8)
        .try_for_each(|(dst, src)| quant::quantize_row(ty, src, dst))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ramp(n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect()
    }

    #[test]
    fn convert_is_row_by_row_and_thread_count_independent() {
        let row_len = 512;
        let x = ramp(row_len * 20);
        let f32_bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap()
            .install(|| convert(&f32_bytes, GgmlType::F32, GgmlType::Q4_K, row_len).unwrap());
        let three = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap()
            .install(|| convert(&f32_bytes, GgmlType::F32, GgmlType::Q4_K, row_len).unwrap());
        assert_eq!(one, three);
        // The same as quantizing each row on its own.
        let mut expected = vec![0u8; one.len()];
        let rb = GgmlType::Q4_K.bytes_for(row_len as u64).unwrap() as usize;
        for (r, dst) in expected.chunks_mut(rb).enumerate() {
            quant::quantize_row(GgmlType::Q4_K, &x[r * row_len..][..row_len], dst).unwrap();
        }
        assert_eq!(one, expected);
        assert_eq!(
            quantize_rows(&x, GgmlType::Q4_K, row_len).unwrap(),
            expected
        );
    }

    #[test]
    fn convert_refuses_bad_rows() {
        let e = convert(&[0u8; 12], GgmlType::F32, GgmlType::Q8_0, 3).unwrap_err();
        assert!(matches!(e, QuantError::NotBlockMultiple { .. }), "{e}");
        let e = convert(&[0u8; 10], GgmlType::F32, GgmlType::F16, 2).unwrap_err();
        assert!(matches!(e, QuantError::LengthMismatch { .. }), "{e}");
        let e = quantize_rows(&[0.0; 40], GgmlType::Q8_0, 32).unwrap_err();
        assert!(matches!(e, QuantError::LengthMismatch { .. }), "{e}");
    }
}
